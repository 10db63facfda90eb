/* SPDX-License-Identifier: MIT */
/*
 * cuda_seq.h — the cuda backend's sequences past their opening (backend.h): a fork, which
 * starts a sequence on KV blocks another one wrote (the full ones shared by the scheduler's
 * reference counts, a last partial block copied on the device), and a rewind, which takes
 * back a verify row's rejected drafts. cuda.c hands over what they touch.
 */
#ifndef BITNETD_CUDA_SEQ_H
#define BITNETD_CUDA_SEQ_H

#include "cuda_kv.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

struct cuda_seqs {
	uint32_t *len;             /* [max_seqs] positions each sequence holds */
	uint32_t max_seqs, n_ctx;
	struct cuda_kv *kv;        /* the KV arena (empty before kv_init) */
	cudaStream_t stream;
};

/* backend.h's seq_fork: n_copy positions of block src_block copied to dst_block in every
 * layer (in their slots, dst_block given one first: cuda_kv.h; queued on the stream, before
 * the next step's kernels), then `seq` holds [0, start). 0, -EINVAL, or -ENOMEM / -EIO when
 * dst_block's memory cannot be mapped or the copy cannot be queued. */
int cuda_seqs_fork(const struct cuda_seqs *s, uint32_t seq, uint32_t start, uint32_t dst_block,
		   uint32_t src_block, uint32_t n_copy);

/* backend.h's seq_rewind: `seq` keeps [0, length). 0 or -EINVAL. */
int cuda_seqs_rewind(const struct cuda_seqs *s, uint32_t seq, uint32_t length);

#endif /* BITNETD_CUDA_SEQ_H */
