/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend's KV arena, fixed or elastic (cuda_kv.h).
 */
#include "cuda_kv.h"
#include "common/arith.h"
#include "common/log.h"
#include "cuda_mem.h"
#include "cuda_ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The driver API version whose entry points are asked for (VMM's calls date from 10.2 and
 * kept their signatures). */
#define VMM_DRIVER_VERSION 12000

static int entry_point(const char *symbol, void **fn)
{
	enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
	cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, fn, VMM_DRIVER_VERSION,
							 cudaEnableDefault, &found);
	if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !*fn) {
		bn_log_info("msg=\"KV not lent between models on this device: the driver has no %s\" "
			    "error=\"%s\"", symbol, cudaGetErrorString(e));
		return -EOPNOTSUPP;
	}
	return 0;
}

static int resolve(struct cuda_vmm *vmm)
{
	void *fn[8] = { 0 };
	static const char *const names[8] = { "cuMemAddressReserve", "cuMemAddressFree",
					      "cuMemCreate",         "cuMemRelease",
					      "cuMemMap",            "cuMemUnmap",
					      "cuMemSetAccess",      "cuMemGetAllocationGranularity" };
	for (int i = 0; i < 8; i++)
		if (entry_point(names[i], &fn[i]) != 0)
			return -EOPNOTSUPP;
	/* The runtime hands out void pointers; these are the driver's own signatures. */
	memcpy(&vmm->reserve, &fn[0], sizeof(fn[0]));
	memcpy(&vmm->address_free, &fn[1], sizeof(fn[1]));
	memcpy(&vmm->create, &fn[2], sizeof(fn[2]));
	memcpy(&vmm->release, &fn[3], sizeof(fn[3]));
	memcpy(&vmm->map, &fn[4], sizeof(fn[4]));
	memcpy(&vmm->unmap, &fn[5], sizeof(fn[5]));
	memcpy(&vmm->set_access, &fn[6], sizeof(fn[6]));
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
	memcpy(&granularity, &fn[7], sizeof(fn[7]));
	size_t g = 0;
	CUresult r = granularity(&g, &vmm->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS || g == 0) {
		bn_log_info("msg=\"KV not lent between models on this device: no mapping granularity\" "
			    "cu_error=%d", (int)r);
		return -EOPNOTSUPP;
	}
	vmm->granule = g;
	return 0;
}

int cuda_vmm_probe(struct cuda_vmm *vmm)
{
	memset(vmm, 0, sizeof(*vmm));
	int device = 0;
	if (cudaGetDevice(&device) != cudaSuccess)
		return -EOPNOTSUPP;
	vmm->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	vmm->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	vmm->prop.location.id = device;
	if (resolve(vmm) != 0) {
		vmm->granule = 0;
		return -EOPNOTSUPP;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Sizes                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Bytes of one block's rows in one layer of K (or V). */
static uint64_t slot_layer_bytes(const struct cuda_kv_shape *s)
{
	return (uint64_t)s->block_tokens * s->kv_dim * sizeof(float);
}

uint32_t cuda_kv_group_slots(const struct cuda_vmm *vmm, const struct cuda_kv_shape *shape)
{
	uint64_t row = slot_layer_bytes(shape);
	if (!vmm->granule || !row)
		return 0;
	return (uint32_t)(vmm->granule / bn_gcd_u64(vmm->granule, row));
}

uint64_t cuda_kv_group_bytes(const struct cuda_vmm *vmm, const struct cuda_kv_shape *shape)
{
	return (uint64_t)cuda_kv_group_slots(vmm, shape) * slot_layer_bytes(shape) *
	       shape->n_layer * 2;
}

/* The layers' stride in bytes. */
static size_t layer_stride(const struct cuda_kv *kv)
{
	return (size_t)kv->n_slots * slot_layer_bytes(&kv->shape);
}

static size_t arena_bytes(const struct cuda_kv *kv)
{
	return layer_stride(kv) * kv->shape.n_layer;
}

/* ------------------------------------------------------------------------------------------ */
/* Fixed                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static int shape_ok(const struct cuda_kv_shape *s, uint32_t n_blocks)
{
	return n_blocks && s->n_layer && s->kv_dim && s->block_tokens;
}

int cuda_kv_fixed(struct cuda_kv *kv, const struct cuda_kv_shape *shape, uint32_t n_blocks)
{
	memset(kv, 0, sizeof(*kv));
	if (!shape_ok(shape, n_blocks))
		return -EINVAL;
	kv->shape = *shape;
	kv->n_blocks = kv->n_slots = n_blocks;
	size_t bytes = arena_bytes(kv);
	if (cudaMalloc((void **)&kv->k, bytes) != cudaSuccess ||
	    cudaMalloc((void **)&kv->v, bytes) != cudaSuccess) {
		bn_log_error("msg=\"out of device memory for the KV cache\" need_mib=%zu free_mib=%zu "
			     "hint=\"--kv-memory sets the KV cache's size\"",
			     (2 * bytes) >> 20, bn_cuda_free_bytes() >> 20);
		cuda_kv_free(kv);
		return -ENOMEM;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Elastic                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int vmm_failed(const char *what, CUresult r)
{
	bn_log_error("msg=\"CUDA virtual memory call failed\" call=%s cu_error=%d", what, (int)r);
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

static int reserve_range(const struct cuda_vmm *vmm, size_t bytes, float **out)
{
	CUdeviceptr p = 0;
	CUresult r = vmm->reserve(&p, bytes, vmm->granule, 0, 0);
	if (r != CUDA_SUCCESS)
		return vmm_failed("cuMemAddressReserve", r);
	*out = (float *)(uintptr_t)p;
	return 0;
}

int cuda_kv_elastic(struct cuda_kv *kv, const struct cuda_vmm *vmm,
			 const struct cuda_kv_shape *shape, uint32_t n_blocks, cudaStream_t stream)
{
	memset(kv, 0, sizeof(*kv));
	uint32_t g = cuda_kv_group_slots(vmm, shape);
	if (!shape_ok(shape, n_blocks) || !g)
		return -EINVAL;
	kv->shape = *shape;
	kv->elastic = 1;
	kv->vmm = vmm;
	kv->stream = stream;
	kv->group_slots = g;
	kv->n_blocks = n_blocks;
	kv->n_slots = (uint32_t)(((uint64_t)n_blocks + g - 1) / g * g);
	kv->slot_of = malloc((size_t)n_blocks * sizeof(uint32_t));
	kv->block_at = malloc((size_t)kv->n_slots * sizeof(uint32_t));
	kv->group = calloc((size_t)kv->n_slots / g * 2 * shape->n_layer, sizeof(*kv->group));
	if (!kv->slot_of || !kv->block_at || !kv->group) {
		cuda_kv_free(kv);
		return -ENOMEM;
	}
	for (uint32_t b = 0; b < n_blocks; b++)
		kv->slot_of[b] = CUDA_KV_NO_SLOT;
	int rc = reserve_range(vmm, arena_bytes(kv), &kv->k);
	rc = rc ? rc : reserve_range(vmm, arena_bytes(kv), &kv->v);
	if (rc) {
		cuda_kv_free(kv);
		return rc;
	}
	bn_log_info("msg=\"kv arena elastic: memory mapped as blocks are used\" blocks=%u "
		    "group_slots=%u group_mib=%.1f granule_kib=%zu",
		    n_blocks, g, cuda_kv_group_bytes(vmm, shape) / 1048576.0, vmm->granule >> 10);
	return 0;
}

/* Where group g's rows of layer li (li < n_layer: K, else V of layer li - n_layer) are. */
static CUdeviceptr group_rows(const struct cuda_kv *kv, uint32_t g, uint32_t li)
{
	float *base = li < kv->shape.n_layer ? kv->k : kv->v;
	uint32_t layer = li % kv->shape.n_layer;
	return (CUdeviceptr)(uintptr_t)base + (CUdeviceptr)layer * layer_stride(kv) +
	       (CUdeviceptr)g * kv->group_slots * slot_layer_bytes(&kv->shape);
}

static size_t group_span(const struct cuda_kv *kv)
{
	return (size_t)kv->group_slots * slot_layer_bytes(&kv->shape);
}

/* The handle of group g's rows li (of 2 n_layer). */
static CUmemGenericAllocationHandle *handle_of(struct cuda_kv *kv, uint32_t g, uint32_t li)
{
	return &kv->group[(size_t)g * 2 * kv->shape.n_layer + li];
}

/* Unmaps the first `mapped` rows of group g (of 2 n_layer) and gives their memory back. */
static void unmap_group(struct cuda_kv *kv, uint32_t g, uint32_t mapped)
{
	for (uint32_t li = 0; li < mapped; li++) {
		CUresult r = kv->vmm->unmap(group_rows(kv, g, li), group_span(kv));
		if (r != CUDA_SUCCESS)
			vmm_failed("cuMemUnmap", r);
		r = kv->vmm->release(*handle_of(kv, g, li));
		if (r != CUDA_SUCCESS)
			vmm_failed("cuMemRelease", r);
		*handle_of(kv, g, li) = 0;
	}
}

/* One rows' allocation of group g, mapped and made accessible (cuMemMap maps a whole
 * allocation: its offset must be 0, so each layer's K and V rows are their own). 0, or the
 * allocation freed again and -ENOMEM / -EIO. */
static int map_rows(struct cuda_kv *kv, uint32_t g, uint32_t li)
{
	const struct cuda_vmm *vmm = kv->vmm;
	size_t span = group_span(kv);
	CUmemGenericAllocationHandle *h = handle_of(kv, g, li);
	CUresult r = vmm->create(h, span, &vmm->prop, 0);
	if (r != CUDA_SUCCESS) {
		*h = 0;
		if (r != CUDA_ERROR_OUT_OF_MEMORY)
			return vmm_failed("cuMemCreate", r);
		bn_log_error("msg=\"out of device memory for KV blocks\" need_mib=%zu free_mib=%zu",
			     (span * 2 * kv->shape.n_layer) >> 20, bn_cuda_free_bytes() >> 20);
		return -ENOMEM;
	}
	CUmemAccessDesc access = { .location = vmm->prop.location,
				   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUdeviceptr at = group_rows(kv, g, li);
	r = vmm->map(at, span, 0, *h, 0);
	if (r == CUDA_SUCCESS) {
		r = vmm->set_access(at, span, &access, 1);
		if (r == CUDA_SUCCESS)
			return 0;
		vmm->unmap(at, span);
	}
	vmm->release(*h);
	*h = 0;
	return vmm_failed("cuMemMap/cuMemSetAccess", r);
}

/* Memory under group g's rows in every layer of K and V. */
static int map_group(struct cuda_kv *kv, uint32_t g)
{
	uint32_t rows = 2 * kv->shape.n_layer;
	for (uint32_t li = 0; li < rows; li++) {
		int rc = map_rows(kv, g, li);
		if (rc) {
			unmap_group(kv, g, li);
			return rc;
		}
	}
	kv->groups_mapped = g + 1;
	return 0;
}

int cuda_kv_slot(struct cuda_kv *kv, uint32_t block, uint32_t *slot)
{
	if (block >= kv->n_blocks)
		return -EINVAL;
	if (!kv->elastic) {
		*slot = block;
		return 0;
	}
	if (kv->slot_of[block] != CUDA_KV_NO_SLOT) {
		*slot = kv->slot_of[block];
		return 0;
	}
	uint32_t s = kv->live;
	if (s == kv->groups_mapped * kv->group_slots) {
		int rc = map_group(kv, kv->groups_mapped);
		if (rc)
			return rc;
	}
	kv->live++;
	kv->slot_of[block] = s;
	kv->block_at[s] = block;
	*slot = s;
	return 0;
}

int cuda_kv_table(struct cuda_kv *kv, const uint32_t *blocks, uint32_t n, uint32_t *slots)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc = cuda_kv_slot(kv, blocks[i], &slots[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* The block in the last slot moves into `hole` (on the stream). */
static int move_last_into(struct cuda_kv *kv, uint32_t hole)
{
	uint32_t last = kv->live - 1;
	if (hole != last) {
		size_t row = (size_t)kv->shape.block_tokens * kv->shape.kv_dim;
		int e = bn_cuda_kv_copy(kv->k, kv->v, row * kv->n_slots, kv->shape.n_layer,
					hole * row, last * row, (uint32_t)row, kv->stream);
		if (e)
			return bn_cuda_failed("bn_cuda_kv_copy(KV compaction)", e);
		kv->block_at[hole] = kv->block_at[last];
		kv->slot_of[kv->block_at[hole]] = hole;
		kv->moves++;
	}
	kv->live = last;
	return 0;
}

/* Groups wholly above the slots in use go back, once the copies out of them are done. */
static int unmap_unused_groups(struct cuda_kv *kv)
{
	uint32_t keep = (kv->live + kv->group_slots - 1) / kv->group_slots;
	if (keep >= kv->groups_mapped)
		return 0;
	cudaError_t e = cudaStreamSynchronize(kv->stream);
	if (e != cudaSuccess)
		return bn_cuda_failed("cudaStreamSynchronize(KV release)", e);
	while (kv->groups_mapped > keep)
		unmap_group(kv, --kv->groups_mapped, 2 * kv->shape.n_layer);
	return 0;
}

int cuda_kv_give_back(struct cuda_kv *kv, uint32_t first, uint32_t n)
{
	if (!kv->elastic)
		return -EOPNOTSUPP;
	if (first >= kv->n_blocks || n > kv->n_blocks - first)
		return -EINVAL;
	for (uint32_t b = first; b < first + n; b++) {
		uint32_t s = kv->slot_of[b];
		if (s == CUDA_KV_NO_SLOT)
			continue; /* never written since its memory last went back */
		kv->slot_of[b] = CUDA_KV_NO_SLOT;
		int rc = move_last_into(kv, s);
		if (rc)
			return rc;
	}
	return unmap_unused_groups(kv);
}

uint64_t cuda_kv_device_bytes(const struct cuda_kv *kv)
{
	if (!kv->k)
		return 0;
	if (!kv->elastic)
		return 2 * (uint64_t)arena_bytes(kv);
	return (uint64_t)kv->groups_mapped * group_span(kv) * 2 * kv->shape.n_layer;
}

void cuda_kv_free(struct cuda_kv *kv)
{
	if (kv->elastic) {
		if (kv->groups_mapped && kv->stream)
			cudaStreamSynchronize(kv->stream);
		while (kv->groups_mapped)
			unmap_group(kv, --kv->groups_mapped, 2 * kv->shape.n_layer);
		if (kv->k)
			kv->vmm->address_free((CUdeviceptr)(uintptr_t)kv->k, arena_bytes(kv));
		if (kv->v)
			kv->vmm->address_free((CUdeviceptr)(uintptr_t)kv->v, arena_bytes(kv));
	} else {
		cudaFree(kv->k);
		cudaFree(kv->v);
	}
	free(kv->slot_of);
	free(kv->block_at);
	free(kv->group);
	memset(kv, 0, sizeof(*kv));
}
