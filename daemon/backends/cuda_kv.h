/* SPDX-License-Identifier: MIT */
/*
 * cuda_kv.h — the cuda backend's KV arena: the keys and the values of every block of the
 * scheduler's pool (kvpool.h), [n_layer][n_slots][block_tokens][kv_dim] floats each, and
 * which slot of that layout holds which block.
 *
 * Fixed (cuda_kv_fixed): one device allocation each for K and V, block b in slot b: what
 * a pool that is its own budget gets, all of its memory taken at start-up.
 *
 * Elastic (cuda_kv_elastic): for a pool that lends and borrows KV between models
 * (kvpool.h's ledger). The address range of every slot is reserved, and device memory is
 * mapped (CUDA's virtual memory management: cuMemCreate, cuMemMap) only under the slots in
 * use, a group of slots at a time: group_slots slots are the fewest whose rows fill whole
 * granules of the device's mapping granularity in each layer (2 MiB on an H100). A block gets
 * the next free slot when a step or a fork first names it (cuda_kv_slot); a block whose
 * memory the pool gives back (cuda_kv_give_back) leaves its slot, and the block in the last
 * slot moves into it (a copy on the stream, before any later step's kernels), so the slots in
 * use are always [0, live) and every group above them goes back to the device. The device
 * thus holds the blocks the pool holds, plus at most one partly used group (the pool's
 * accounting counts that group: cuda_kv_group_bytes, backend.h's bn_model_kv_slack).
 *
 * The kernels see slots, never block ids: the backend writes slots into the block tables
 * and the store slots it uploads. Not thread-safe: the backend's own thread (its step, its
 * forks, its releases) only.
 */
#ifndef BITNETD_CUDA_KV_H
#define BITNETD_CUDA_KV_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#define CUDA_KV_NO_SLOT UINT32_MAX

/* The driver's virtual-memory calls (resolved through the runtime's
 * cudaGetDriverEntryPointByVersion: no link against libcuda) and the device's granularity. */
struct cuda_vmm {
	CUresult (*reserve)(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			    unsigned long long flags);
	CUresult (*address_free)(CUdeviceptr ptr, size_t size);
	CUresult (*create)(CUmemGenericAllocationHandle *handle, size_t size,
			   const CUmemAllocationProp *prop, unsigned long long flags);
	CUresult (*release)(CUmemGenericAllocationHandle handle);
	CUresult (*map)(CUdeviceptr ptr, size_t size, size_t offset,
			CUmemGenericAllocationHandle handle, unsigned long long flags);
	CUresult (*unmap)(CUdeviceptr ptr, size_t size);
	CUresult (*set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			       size_t count);
	CUmemAllocationProp prop; /* pinned device memory of the current device */
	size_t granule;           /* 0: the device cannot map memory this way */
};

/* Fills vmm for the current device: 0, or -EOPNOTSUPP (said at info level: the daemon then
 * keeps each model's KV share fixed) when the driver or the device has no virtual memory
 * management. */
int cuda_vmm_probe(struct cuda_vmm *vmm);

struct cuda_kv_shape {
	uint32_t n_layer, kv_dim, block_tokens;
};

struct cuda_kv {
	float *k, *v;             /* [n_layer][n_slots][block_tokens][kv_dim] each */
	struct cuda_kv_shape shape;
	uint32_t n_blocks;        /* the scheduler's block ids: [0, n_blocks) */
	uint32_t n_slots;         /* the layers' stride in blocks: n_blocks, rounded up to a group */
	int elastic;
	/* elastic only */
	const struct cuda_vmm *vmm;
	cudaStream_t stream;
	uint32_t *slot_of;        /* [n_blocks] the block's slot, or CUDA_KV_NO_SLOT */
	uint32_t *block_at;       /* [n_slots] the block in each slot of [0, live) */
	uint32_t live;
	uint32_t group_slots;
	uint32_t groups_mapped;   /* groups [0, groups_mapped) have memory */
	/* [n_slots / group_slots][2 n_layer]: each group's rows in each layer of K, then of V,
	 * an allocation each (cuMemMap maps whole allocations) */
	CUmemGenericAllocationHandle *group;
	uint64_t moves;           /* blocks moved down by releases (for the tests) */
};

/* Slots in one group, and a group's bytes (keys and values of every layer), for rows of
 * `block_tokens` tokens: the most an elastic arena holds past its blocks' own memory. */
uint32_t cuda_kv_group_slots(const struct cuda_vmm *vmm, const struct cuda_kv_shape *shape);
uint64_t cuda_kv_group_bytes(const struct cuda_vmm *vmm, const struct cuda_kv_shape *shape);

/* n_blocks blocks of shape's size. 0, -EINVAL, or -ENOMEM (logged with what the device
 * still has). */
int cuda_kv_fixed(struct cuda_kv *kv, const struct cuda_kv_shape *shape, uint32_t n_blocks);
/* The same, elastic: nothing mapped yet. 0, -EINVAL, -ENOMEM or -EIO. */
int cuda_kv_elastic(struct cuda_kv *kv, const struct cuda_vmm *vmm,
			 const struct cuda_kv_shape *shape, uint32_t n_blocks, cudaStream_t stream);
/* Frees what kv holds (after the stream's work on it is done); kv is empty afterwards. */
void cuda_kv_free(struct cuda_kv *kv);

/* Block b's slot: b itself in a fixed arena; in an elastic one its slot, the next one (its
 * group mapped first when it is new) when b has none. 0, -EINVAL (b out of range), -ENOMEM
 * (the device has no memory for another group) or -EIO. */
int cuda_kv_slot(struct cuda_kv *kv, uint32_t block, uint32_t *slot);
/* slots[i] = the slot of blocks[i] for i < n (cuda_kv_slot each). 0, or its first error. */
int cuda_kv_table(struct cuda_kv *kv, const uint32_t *blocks, uint32_t n, uint32_t *slots);
/* Blocks [first, first + n) hold nothing anyone reads before they are written again (backend.h
 * kv_release): their slots are freed as the file's comment says. 0, -EOPNOTSUPP (a fixed
 * arena), -EINVAL or -EIO. */
int cuda_kv_give_back(struct cuda_kv *kv, uint32_t first, uint32_t n);
/* Device bytes mapped under the arena (an elastic one), or allocated (a fixed one). */
uint64_t cuda_kv_device_bytes(const struct cuda_kv *kv);

#endif
