/* SPDX-License-Identifier: MIT */
/*
 * vmm.c — CUDA's virtual memory management on the host, reached through
 * cudaGetDriverEntryPointByVersion as the backend reaches the driver's:
 *
 *  - cuMemAddressReserve: an address range with no memory (an mmap of PROT_NONE, aligned as
 *    asked, at least the granularity), registered as device memory for the pointer and copy
 *    checks; touching a part of it that nothing is mapped under faults, as on the GPU;
 *  - cuMemCreate: a physical allocation, a memfd of that size counted in cudaMemGetInfo and
 *    filled with 0xFF bytes (new device memory is not cleared);
 *  - cuMemMap: the allocation's bytes [0, size) shared at an address of a reservation, still
 *    inaccessible (an offset other than 0 is CUDA_ERROR_NOT_SUPPORTED, as the driver
 *    answers it); cuMemSetAccess makes a mapped range readable and
 *    writable; cuMemUnmap takes a mapping away again (the range faults once more);
 *  - cuMemRelease: the handle goes; its memory goes back when its last mapping does (CUDA's
 *    rule);
 *  - cuMemGetAllocationGranularity: BN_CUDA_HOST_VMM_GRANULARITY bytes (a multiple of the
 *    page size), or 2 MiB as on an H100.
 *
 * Each call checks what CUDA requires (sizes, offsets and addresses multiples of the
 * granularity, ranges inside one reservation, nothing mapped twice, whole mappings unmapped,
 * no reservation freed while mapped) and fails with CUDA_ERROR_INVALID_VALUE otherwise.
 */
#define _GNU_SOURCE
#include "cuda.h"
#include "cuda_host.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEFAULT_GRANULARITY (2u << 20)
#define MAX_RESERVATIONS 64
#define MAX_PHYS 4096
#define MAX_MAPS 8192
#define POISON 0xff

struct phys {
	int fd;
	size_t size;          /* 0: a free entry */
	uint32_t maps;        /* mappings of it alive */
	int released;         /* its handle is gone; the memory goes with the last mapping */
};

struct mapping {
	char *at;             /* NULL: free entry */
	size_t size;
	uint32_t phys;
};

struct reservation {
	char *base;           /* NULL: free entry */
	size_t size;
	char *mmap_base;      /* what was mmapped, alignment slack included */
	size_t mmap_size;
};

static struct {
	struct reservation res[MAX_RESERVATIONS];
	struct phys phys[MAX_PHYS];
	struct mapping maps[MAX_MAPS];
	size_t granule;
} vmm;

static size_t granularity(void)
{
	if (vmm.granule)
		return vmm.granule;
	size_t g = DEFAULT_GRANULARITY;
	const char *s = getenv("BN_CUDA_HOST_VMM_GRANULARITY");
	if (s && *s) {
		char *end;
		unsigned long long n = strtoull(s, &end, 10);
		long page = sysconf(_SC_PAGESIZE);
		if (*end || n == 0 || page <= 0 || n % (unsigned long long)page)
			bn_cuda_host_fail("BN_CUDA_HOST_VMM_GRANULARITY=\"%s\" is not a multiple of "
					  "the page size in bytes", s);
		g = (size_t)n;
	}
	vmm.granule = g;
	return g;
}

static int aligned(size_t v)
{
	return v % granularity() == 0;
}

static struct reservation *reservation_of(const char *p, size_t size)
{
	for (int i = 0; i < MAX_RESERVATIONS; i++) {
		struct reservation *r = &vmm.res[i];
		if (r->base && p >= r->base && size <= r->size && p - r->base <= (ptrdiff_t)(r->size - size))
			return r;
	}
	return NULL;
}

/* The mapping overlapping [p, p + size), or -1. */
static int mapping_overlapping(const char *p, size_t size)
{
	for (int i = 0; i < MAX_MAPS; i++) {
		const struct mapping *m = &vmm.maps[i];
		if (m->at && p < m->at + m->size && m->at < p + size)
			return i;
	}
	return -1;
}

static CUresult reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			unsigned long long flags)
{
	size_t g = granularity();
	if (!ptr || !size || !aligned(size) || addr || flags || (alignment && alignment % g))
		return CUDA_ERROR_INVALID_VALUE;
	size_t align = alignment ? alignment : g;
	bn_cuda_host_lock();
	struct reservation *r = NULL;
	for (int i = 0; i < MAX_RESERVATIONS && !r; i++)
		r = vmm.res[i].base ? NULL : &vmm.res[i];
	CUresult out = CUDA_ERROR_OUT_OF_MEMORY;
	char *m = r ? mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
		    : MAP_FAILED;
	if (m != MAP_FAILED) {
		char *base = (char *)(((uintptr_t)m + align - 1) / align * align);
		if (bn_cuda_host_add_range(base, size) == 0) {
			*r = (struct reservation){ base, size, m, size + align };
			*ptr = (CUdeviceptr)(uintptr_t)base;
			out = CUDA_SUCCESS;
		} else {
			munmap(m, size + align);
		}
	}
	bn_cuda_host_unlock();
	return out;
}

static CUresult address_free(CUdeviceptr ptr, size_t size)
{
	char *p = (char *)(uintptr_t)ptr;
	bn_cuda_host_lock();
	struct reservation *r = reservation_of(p, size);
	CUresult out = CUDA_ERROR_INVALID_VALUE;
	if (r && r->base == p && r->size == size && mapping_overlapping(p, size) < 0) {
		bn_cuda_host_remove_range(p);
		munmap(r->mmap_base, r->mmap_size);
		memset(r, 0, sizeof(*r));
		out = CUDA_SUCCESS;
	}
	bn_cuda_host_unlock();
	return out;
}

static int prop_ok(const CUmemAllocationProp *prop)
{
	return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id == 0;
}

/* A new memfd of size bytes, poisoned. -1 when the host has no room. */
static int new_memory(size_t size)
{
	int fd = memfd_create("bn-cuda-host-vmm", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	void *m = ftruncate(fd, (off_t)size) == 0
			  ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
			  : MAP_FAILED;
	if (m == MAP_FAILED) {
		close(fd);
		return -1;
	}
	memset(m, POISON, size);
	munmap(m, size);
	return fd;
}

static CUresult create(CUmemGenericAllocationHandle *handle, size_t size,
		       const CUmemAllocationProp *prop, unsigned long long flags)
{
	if (!handle || !size || !aligned(size) || flags || !prop_ok(prop))
		return CUDA_ERROR_INVALID_VALUE;
	bn_cuda_host_lock();
	CUresult out = CUDA_ERROR_OUT_OF_MEMORY;
	uint32_t i = 0;
	while (i < MAX_PHYS && vmm.phys[i].size)
		i++;
	if (i < MAX_PHYS && bn_cuda_host_device_take(size) == 0) {
		int fd = new_memory(size);
		if (fd >= 0) {
			vmm.phys[i] = (struct phys){ .fd = fd, .size = size };
			*handle = (CUmemGenericAllocationHandle)i + 1; /* 0 is no handle */
			out = CUDA_SUCCESS;
		} else {
			bn_cuda_host_device_give(size);
		}
	}
	bn_cuda_host_unlock();
	return out;
}

static struct phys *phys_of(CUmemGenericAllocationHandle h)
{
	if (h == 0 || h > MAX_PHYS)
		return NULL;
	struct phys *p = &vmm.phys[h - 1];
	return p->size && !p->released ? p : NULL;
}

/* The memory of p goes once its handle and its last mapping have. */
static void phys_drop_if_done(struct phys *p)
{
	if (!p->released || p->maps)
		return;
	close(p->fd);
	bn_cuda_host_device_give(p->size);
	memset(p, 0, sizeof(*p));
}

static CUresult release(CUmemGenericAllocationHandle handle)
{
	bn_cuda_host_lock();
	struct phys *p = phys_of(handle);
	if (p) {
		p->released = 1;
		phys_drop_if_done(p);
	}
	bn_cuda_host_unlock();
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult map(CUdeviceptr ptr, size_t size, size_t offset,
		    CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	char *at = (char *)(uintptr_t)ptr;
	if (!size || !aligned(size) || !aligned(offset) || !aligned((size_t)ptr) || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset) /* the driver's rule (cuMemMap: "currently must be zero"); a GPU says so */
		return CUDA_ERROR_NOT_SUPPORTED;
	bn_cuda_host_lock();
	struct phys *p = phys_of(handle);
	CUresult out = CUDA_ERROR_INVALID_VALUE;
	int slot = 0;
	while (slot < MAX_MAPS && vmm.maps[slot].at)
		slot++;
	if (p && offset <= p->size && size <= p->size - offset && reservation_of(at, size) &&
	    mapping_overlapping(at, size) < 0 && slot < MAX_MAPS &&
	    mmap(at, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, (off_t)offset) == at) {
		vmm.maps[slot] = (struct mapping){ at, size, (uint32_t)(handle - 1) };
		p->maps++;
		out = CUDA_SUCCESS;
	}
	bn_cuda_host_unlock();
	return out;
}

static CUresult unmap(CUdeviceptr ptr, size_t size)
{
	char *at = (char *)(uintptr_t)ptr;
	bn_cuda_host_lock();
	int i = mapping_overlapping(at, size);
	CUresult out = CUDA_ERROR_INVALID_VALUE;
	/* CUDA unmaps whole mappings only: exactly one here (the backend maps one per range). */
	if (i >= 0 && vmm.maps[i].at == at && vmm.maps[i].size == size &&
	    mmap(at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
		 0) == at) {
		struct phys *p = &vmm.phys[vmm.maps[i].phys];
		memset(&vmm.maps[i], 0, sizeof(vmm.maps[i]));
		p->maps--;
		phys_drop_if_done(p);
		out = CUDA_SUCCESS;
	}
	bn_cuda_host_unlock();
	return out;
}

/* Whether [p, p + size) is covered by mappings end to end. */
static int fully_mapped(const char *p, size_t size)
{
	const char *end = p + size;
	while (p < end) {
		int i = mapping_overlapping(p, 1);
		if (i < 0)
			return 0;
		p = vmm.maps[i].at + vmm.maps[i].size;
	}
	return 1;
}

static int by_base(const void *a, const void *b)
{
	const struct bn_cuda_host_range *x = a, *y = b;
	return x->base < y->base ? -1 : x->base > y->base;
}

unsigned bn_cuda_host_vmm_mapped(const char *base, size_t size, struct bn_cuda_host_range *out,
				 unsigned cap)
{
	static struct bn_cuda_host_range all[MAX_MAPS];
	unsigned n = 0;
	for (int i = 0; i < MAX_MAPS; i++) {
		const struct mapping *m = &vmm.maps[i];
		if (m->at && m->at >= base && m->at < base + size)
			all[n++] = (struct bn_cuda_host_range){ m->at, m->size };
	}
	qsort(all, n, sizeof(all[0]), by_base);
	unsigned merged = 0;
	for (unsigned i = 0; i < n; i++) {
		if (merged && all[merged - 1].base + all[merged - 1].size == all[i].base)
			all[merged - 1].size += all[i].size;
		else
			all[merged++] = all[i];
	}
	for (unsigned i = 0; i < merged && i < cap; i++)
		out[i] = all[i];
	return merged;
}

static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	char *at = (char *)(uintptr_t)ptr;
	if (!desc || count != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    desc->location.id != 0 || !aligned((size_t)ptr) || !aligned(size) || !size)
		return CUDA_ERROR_INVALID_VALUE;
	int prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
		   : desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ  ? PROT_READ
								   : PROT_NONE;
	bn_cuda_host_lock();
	CUresult out = fully_mapped(at, size) && mprotect(at, size, prot) == 0
			       ? CUDA_SUCCESS
			       : CUDA_ERROR_INVALID_VALUE;
	bn_cuda_host_unlock();
	return out;
}

static CUresult get_granularity(size_t *g, const CUmemAllocationProp *prop,
				CUmemAllocationGranularity_flags option)
{
	if (!g || !prop_ok(prop) || option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		return CUDA_ERROR_INVALID_VALUE;
	*g = granularity();
	return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
					     unsigned int cudaVersion, unsigned long long flags,
					     enum cudaDriverEntryPointQueryResult *driverStatus)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} table[] = {
		{ "cuMemAddressReserve", (void (*)(void))reserve },
		{ "cuMemAddressFree", (void (*)(void))address_free },
		{ "cuMemCreate", (void (*)(void))create },
		{ "cuMemRelease", (void (*)(void))release },
		{ "cuMemMap", (void (*)(void))map },
		{ "cuMemUnmap", (void (*)(void))unmap },
		{ "cuMemSetAccess", (void (*)(void))set_access },
		{ "cuMemGetAllocationGranularity", (void (*)(void))get_granularity },
	};
	if (!symbol || !funcPtr || flags || cudaVersion < 10020)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*funcPtr = NULL;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(symbol, table[i].name) == 0)
			memcpy(funcPtr, &table[i].fn, sizeof(*funcPtr));
	if (driverStatus)
		*driverStatus = *funcPtr ? cudaDriverEntryPointSuccess
					 : cudaDriverEntryPointSymbolNotFound;
	return cudaSuccess;
}
