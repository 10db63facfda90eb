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
	if (seq >= s->max_seqs || start > s->n_ctx || n_copy >= s->block_tokens ||
	    (n_copy && (!s->kv_k || dst_block >= s->blocks || src_block >= s->blocks)))
		return -EINVAL;
	if (n_copy && dst_block != src_block) {
		size_t row = s->kv_dim, block = (size_t)s->block_tokens * row;
		int e = bn_cuda_kv_copy(s->kv_k, s->kv_v, block * s->blocks, s->n_layer,
					dst_block * block, src_block * block, n_copy * (uint32_t)row,
					s->stream);
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
