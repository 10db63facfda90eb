/* SPDX-License-Identifier: MIT */
/*
 * Forks and rewinds of the cuda backend's sequences (cuda_seq.h).
 */
#include "cuda_seq.h"
#include "cuda_mem.h"
#include "cuda_ops.h"

#include <errno.h>

int cuda_seqs_fork(const struct cuda_seqs *s, uint32_t seq, uint32_t start, uint32_t dst_block,
		   uint32_t src_block, uint32_t n_copy)
{
	const struct cuda_kv *kv = s->kv;
	if (seq >= s->max_seqs || start > s->n_ctx || n_copy >= kv->shape.block_tokens ||
	    (n_copy && (!kv->k || dst_block >= kv->n_blocks || src_block >= kv->n_blocks)))
		return -EINVAL;
	uint32_t dst, src;
	int rc = n_copy ? cuda_kv_slot(s->kv, src_block, &src) : 0;
	rc = rc || !n_copy ? rc : cuda_kv_slot(s->kv, dst_block, &dst);
	if (rc)
		return rc;
	if (n_copy && dst != src) {
		size_t row = kv->shape.kv_dim, block = (size_t)kv->shape.block_tokens * row;
		int e = bn_cuda_kv_copy(kv->k, kv->v, block * kv->n_slots, kv->shape.n_layer,
					dst * block, src * block, n_copy * (uint32_t)row, s->stream);
		if (e)
			return bn_cuda_failed("bn_cuda_kv_copy", e);
	}
	s->len[seq] = start;
	return 0;
}

int cuda_seqs_rewind(const struct cuda_seqs *s, uint32_t seq, uint32_t length)
{
	if (seq >= s->max_seqs || length > s->len[seq])
		return -EINVAL;
	s->len[seq] = length; /* the positions past it are written again before any read */
	return 0;
}
