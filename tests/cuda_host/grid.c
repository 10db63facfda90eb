/* SPDX-License-Identifier: MIT */
/*
 * grid.c — a launch: its configuration checked as the GPU checks it, then its blocks run one
 * after another (block.c) in a random order, each with its shared memory poisoned first.
 *
 * Shared memory: device code declares __shared__ variables as `static thread_local`, and is
 * built into a shared object of its own, so that object's thread-local block (its PT_TLS
 * segment, found through dl_iterate_phdr) holds those variables and nothing else. Before each
 * block this thread's copy is filled with 0xFF bytes: NaN floats, -1 integers, so a read of
 * shared memory that no thread of the block has written yet gives a value no correct kernel
 * would produce.
 *
 * The race check (BN_CUDA_HOST_RACECHECK=1, which the tests set): a grid of more than one
 * block runs twice, the second time in the reverse block order (and other thread orders),
 * from the same device memory, and the program fails if the memory differs afterwards. Two
 * blocks that write one location with different values always differ between the two orders;
 * a block that reads what another writes usually does. Only allocations that an argument
 * points into are saved and compared (kernels here reach memory through their arguments); the
 * cost is three copies and one comparison of those per launch, weights included, which made
 * the check most of the suites' time. So BN_CUDA_HOST_RACECHECK=1 checks a sample: the first
 * RACE_FIRST launches of each kernel at each grid and block shape, then one launch in
 * RACE_ONE_IN, picked by the seed (so the same seed checks the same launches). A race is the
 * kernel's at a shape, seen on any launch of it; one that depends on the data (a length past
 * a split, say) shows on the sampled launches of a run that reaches it, as the steps of a
 * test repeat their shapes many times. BN_CUDA_HOST_RACECHECK=all checks every launch.
 */
#define _GNU_SOURCE
#include "block.h"
#include "cuda_host.h"

#include <elf.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GRID_BLOCKS (1u << 24)
#define MAX_MODULES 8

enum race_check { RACE_OFF, RACE_SAMPLED, RACE_ALL };

static struct {
	int ready;
	uint64_t seed;
	enum race_check race_check;
	uint64_t launches;
} settings;

static void read_settings(void)
{
	if (settings.ready)
		return;
	const char *s = getenv("BN_CUDA_HOST_SEED"), *r = getenv("BN_CUDA_HOST_RACECHECK");
	settings.seed = s && *s ? strtoull(s, NULL, 0) : 1;
	if (!r || !*r || strcmp(r, "0") == 0)
		settings.race_check = RACE_OFF;
	else
		settings.race_check = strcmp(r, "all") == 0 ? RACE_ALL : RACE_SAMPLED;
	settings.ready = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Which launches the race check runs twice                                                    */
/* ------------------------------------------------------------------------------------------ */

#define RACE_FIRST 2    /* launches of a kernel at a shape always checked */
#define RACE_ONE_IN 8   /* then one in this many */
#define RACE_SHAPES 4096 /* kernels x shapes counted; past them every launch is checked */

static struct race_shape {
	const void *kernel; /* NULL: a free entry */
	dim3 grid, block;
	uint64_t launches;
} race_shapes[RACE_SHAPES];

static int same_dims(dim3 a, dim3 b)
{
	return a.x == b.x && a.y == b.y && a.z == b.z;
}

/* The entry counting l's kernel at l's shape, or NULL when the table is full. */
static struct race_shape *race_shape_of(const struct bn_cuda_host_launch *l)
{
	uint64_t h = bn_cuda_host_mix((uintptr_t)l->kernel, l->grid.x);
	h = bn_cuda_host_mix(h, ((uint64_t)l->grid.y << 32) | l->grid.z);
	h = bn_cuda_host_mix(h, ((uint64_t)l->block.x << 32) | l->block.y);
	h = bn_cuda_host_mix(h, l->block.z);
	for (unsigned probe = 0; probe < RACE_SHAPES; probe++) {
		struct race_shape *e = &race_shapes[(h + probe) % RACE_SHAPES];
		if (!e->kernel) {
			*e = (struct race_shape){ .kernel = l->kernel, .grid = l->grid, .block = l->block };
			return e;
		}
		if (e->kernel == l->kernel && same_dims(e->grid, l->grid) && same_dims(e->block, l->block))
			return e;
	}
	return NULL;
}

/* Whether this launch (of seed `seed`) runs twice. */
static int race_checked(const struct bn_cuda_host_launch *l, uint64_t seed)
{
	if (settings.race_check != RACE_SAMPLED)
		return settings.race_check == RACE_ALL;
	struct race_shape *e = race_shape_of(l);
	if (!e)
		return 1;
	return e->launches++ < RACE_FIRST || bn_cuda_host_mix(seed, 0x7ace) % RACE_ONE_IN == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The launch configuration                                                                    */
/* ------------------------------------------------------------------------------------------ */

static cudaError_t check_configuration(const struct bn_cuda_host_launch *l)
{
	const dim3 b = l->block, g = l->grid;
	if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64 ||
	    (uint64_t)b.x * b.y * b.z > BN_CUDA_HOST_MAX_THREADS)
		return cudaErrorInvalidConfiguration;
	if (!g.x || !g.y || !g.z || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
		return cudaErrorInvalidConfiguration;
	if (!bn_cuda_host_stream_ok(l->stream))
		return cudaErrorInvalidResourceHandle;
	return cudaSuccess;
}

/* ------------------------------------------------------------------------------------------ */
/* Shared memory: the device code module's thread-local block                                  */
/* ------------------------------------------------------------------------------------------ */

struct shared_module {
	uintptr_t lo, hi;         /* the module's mapped range */
	void *tls;                /* this thread's copy of its PT_TLS block */
	size_t size;
	const char *name;
};

/* Per OS thread: each has its own copy of the blocks. */
static _Thread_local struct shared_module modules[MAX_MODULES];
static _Thread_local unsigned n_modules;

struct module_search {
	uintptr_t addr;
	struct shared_module found;
	int hit, main_program;
	size_t tls_filesz;
};

static int match_module(struct dl_phdr_info *info, size_t size, void *data)
{
	struct module_search *s = data;
	(void)size;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	const ElfW(Phdr) *tls = NULL;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type == PT_TLS)
			tls = p;
		if (p->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + p->p_vaddr;
		lo = a < lo ? a : lo;
		hi = a + p->p_memsz > hi ? a + p->p_memsz : hi;
	}
	if (s->addr < lo || s->addr >= hi)
		return 0;
	s->hit = 1;
	s->main_program = !info->dlpi_name || !info->dlpi_name[0];
	s->found = (struct shared_module){ .lo = lo, .hi = hi, .tls = info->dlpi_tls_data,
					   .size = tls ? tls->p_memsz : 0, .name = info->dlpi_name };
	s->tls_filesz = tls ? tls->p_filesz : 0;
	return 1;
}

static const struct shared_module *shared_memory_of(const struct bn_cuda_host_launch *l)
{
	uintptr_t addr = (uintptr_t)l->kernel;
	for (unsigned i = 0; i < n_modules; i++)
		if (addr >= modules[i].lo && addr < modules[i].hi)
			return &modules[i];
	struct module_search s = { .addr = addr };
	dl_iterate_phdr(match_module, &s);
	if (!s.hit)
		bn_cuda_host_fail("the kernel's code (%p) is in no loaded module", l->kernel);
	if (s.main_program)
		bn_cuda_host_fail("the kernel is in the program itself: device code must be built into a shared object of its own, whose thread-local block is its __shared__ memory and nothing else");
	if (s.tls_filesz)
		bn_cuda_host_fail("%s has initialised thread-local data: a module of device code may hold only __shared__ (zero-initialised) thread-locals",
				  s.found.name);
	if (s.found.size && !s.found.tls)
		bn_cuda_host_fail("%s's thread-local block is not allocated in this thread (a module opened with dlopen?): link it to the program",
				  s.found.name);
	if (n_modules == MAX_MODULES)
		bn_cuda_host_fail("more than %d modules of device code", MAX_MODULES);
	modules[n_modules] = s.found;
	return &modules[n_modules++];
}

/* ------------------------------------------------------------------------------------------ */
/* Running the blocks                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* A random order of the grid's blocks (Fisher-Yates). */
static uint32_t *block_order(uint32_t n, uint64_t seed)
{
	uint32_t *order = malloc((size_t)n * sizeof(*order));
	if (!order)
		bn_cuda_host_fail("no memory for the order of %u blocks", n);
	for (uint32_t i = 0; i < n; i++)
		order[i] = i;
	uint64_t r = seed;
	for (uint32_t i = n; i > 1; i--) {
		r = bn_cuda_host_mix(r, i);
		uint32_t j = (uint32_t)(r % i);
		uint32_t v = order[i - 1];
		order[i - 1] = order[j];
		order[j] = v;
	}
	return order;
}

static void run_blocks(const struct bn_cuda_host_launch *l, const struct shared_module *shared,
		       const uint32_t *order, uint32_t n, uint64_t seed, int reverse)
{
	const dim3 g = l->grid;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = order[reverse ? n - 1 - i : i];
		uint3 idx = { b % g.x, b / g.x % g.y, b / (g.x * g.y) };
		if (shared->size)
			memset(shared->tls, 0xff, shared->size);
		bn_cuda_host_run_block(l, idx, bn_cuda_host_mix(seed, b));
	}
}

/* ------------------------------------------------------------------------------------------ */
/* The race check                                                                              */
/* ------------------------------------------------------------------------------------------ */

#define MAX_SAVED 256

/* A range of device memory a launch may write: an allocation, or a mapped part of a
 * reserved range (vmm.c), whose unmapped parts must not be touched. */
struct saved {
	char *base;
	size_t size;
	char *before, *first_run;
};

/* The copies' buffers, kept from launch to launch (fresh ones would be page faults each time). */
static struct {
	char *p;
	size_t cap;
} buffers[2 * MAX_SAVED];

static unsigned add_saved(struct saved *out, unsigned n, unsigned cap, char *base, size_t size)
{
	for (unsigned i = 0; i < n; i++)
		if (out[i].base == base)
			return n;
	if (n == cap)
		bn_cuda_host_fail("race check: the arguments reach more than %u ranges of device memory", cap);
	out[n] = (struct saved){ .base = base, .size = size };
	return n + 1;
}

/* The allocations the arguments point into (of a reserved range, its mapped parts): every
 * aligned word of the argument block that holds an address inside one (padding may add a
 * harmless extra). */
static unsigned reachable(const struct bn_cuda_host_launch *l, struct saved *out, unsigned cap)
{
	unsigned n = 0;
	for (size_t off = 0; off + sizeof(uintptr_t) <= l->args_size; off += sizeof(uintptr_t)) {
		uintptr_t v;
		memcpy(&v, (const char *)l->args + off, sizeof(v));
		const struct bn_cuda_host_alloc *a = bn_cuda_host_find_pointer((const void *)v);
		if (!a)
			continue;
		if (!a->sparse) {
			n = add_saved(out, n, cap, a->base, a->size);
			continue;
		}
		struct bn_cuda_host_range r[MAX_SAVED];
		unsigned k = bn_cuda_host_vmm_mapped(a->base, a->size, r, MAX_SAVED);
		for (unsigned i = 0; i < k && i < MAX_SAVED; i++)
			n = add_saved(out, n, cap, r[i].base, r[i].size);
	}
	return n;
}

/* A copy of a's bytes in buffer i. */
static char *copy_of(const struct saved *a, unsigned i)
{
	if (buffers[i].cap < a->size) {
		free(buffers[i].p);
		buffers[i].p = malloc(a->size);
		if (!buffers[i].p)
			bn_cuda_host_fail("race check: no memory to save %zu bytes", a->size);
		buffers[i].cap = a->size;
	}
	memcpy(buffers[i].p, a->base, a->size);
	return buffers[i].p;
}

static void report_difference(const struct bn_cuda_host_launch *l, const struct saved *s)
{
	size_t off = 0;
	while (off < s->size && s->base[off] == s->first_run[off])
		off++;
	size_t word = off & ~(size_t)3;
	uint32_t was = 0, now = 0;
	size_t n = s->size - word < 4 ? s->size - word : 4;
	memcpy(&was, s->first_run + word, n);
	memcpy(&now, s->base + word, n);
	float fw, fn;
	memcpy(&fw, &was, 4);
	memcpy(&fn, &now, 4);
	bn_cuda_host_fail("race check: device memory differs when the %u blocks run in the reverse order (and threads in other orders): allocation %p (%zu bytes), byte %zu: word 0x%08x (%g as float) then 0x%08x (%g): two blocks write one location with different values, a block reads what another writes, or a thread reads what another has not written yet",
			  l->grid.x * l->grid.y * l->grid.z, (void *)s->base, s->size, off, was,
			  (double)fw, now, (double)fn);
}

static void run_checked(const struct bn_cuda_host_launch *l, const struct shared_module *shared,
			const uint32_t *order, uint32_t n, uint64_t seed, struct bn_cuda_host_where *w)
{
	struct saved saved[MAX_SAVED];
	unsigned n_saved = reachable(l, saved, MAX_SAVED);
	for (unsigned i = 0; i < n_saved; i++)
		saved[i].before = copy_of(&saved[i], 2 * i);
	run_blocks(l, shared, order, n, seed, 0);
	for (unsigned i = 0; i < n_saved; i++) {
		saved[i].first_run = copy_of(&saved[i], 2 * i + 1);
		memcpy(saved[i].base, saved[i].before, saved[i].size);
	}
	w->pass = 1;
	run_blocks(l, shared, order, n, bn_cuda_host_mix(seed, 0x5eed), 1);
	w->pass = 0;
	for (unsigned i = 0; i < n_saved; i++)
		if (memcmp(saved[i].base, saved[i].first_run, saved[i].size) != 0)
			report_difference(l, &saved[i]);
}

cudaError_t bn_cuda_host_launch_grid(const struct bn_cuda_host_launch *l)
{
	cudaError_t err = check_configuration(l);
	if (err == cudaSuccess && !l->stream) /* the legacy stream would wait for a capture */
		err = bn_cuda_host_capture_refuse(NULL, 1);
	if (err != cudaSuccess)
		return bn_cuda_host_error(err);
	if (bn_cuda_host_capture_launch(l))
		return cudaSuccess;
	bn_cuda_host_lock();
	read_settings();
	struct bn_cuda_host_where where = { .kernel_name = l->kernel_name,
					    .launch = ++settings.launches, .seed = settings.seed };
	bn_cuda_host_set_where(&where);
	if (l->shared_bytes)
		bn_cuda_host_fail("%zu bytes of dynamic shared memory: the harness does not emulate it (declare __shared__ arrays)",
				  l->shared_bytes);
	uint64_t n = (uint64_t)l->grid.x * l->grid.y * l->grid.z;
	if (n > MAX_GRID_BLOCKS)
		bn_cuda_host_fail("a grid of %" PRIu64 " blocks: the harness runs at most %u", n, MAX_GRID_BLOCKS);
	const struct shared_module *shared = shared_memory_of(l);
	uint64_t seed = bn_cuda_host_mix(settings.seed, settings.launches);
	uint32_t *order = block_order((uint32_t)n, seed);
	if (n > 1 && race_checked(l, seed))
		run_checked(l, shared, order, (uint32_t)n, seed, &where);
	else
		run_blocks(l, shared, order, (uint32_t)n, seed, 0);
	free(order);
	bn_cuda_host_set_where(NULL);
	bn_cuda_host_unlock();
	return cudaSuccess;
}
