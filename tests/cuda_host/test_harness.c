/* SPDX-License-Identifier: MIT */
/*
 * The CUDA host harness checked: small correct kernels (selftest_kernels.cu) against host
 * oracles, the runtime calls' results and errors, and the bugs the harness exists to catch,
 * each a mutant run in a forked child whose failure message is checked for its reason:
 *
 *  - a missing __syncthreads (a read of shared memory another thread writes): wrong values,
 *    some of them the poison shared memory starts with;
 *  - a shuffle under a partial mask; a shuffle with a lane that returned; lanes at different
 *    collectives; a warp of 16 lanes; a deadlock; wmma calls with differing or misaligned
 *    pointers: the harness names each;
 *  - two blocks writing one output with different values: the race check;
 *  - an out-of-bounds read of device memory: AddressSanitizer (make check's sanitizer pass);
 *  - a host pointer as a kernel argument, dynamic shared memory: refused by name;
 *  - a graph replayed after a buffer it names was freed: its pointers are checked again;
 *  - PTX mma.sync with a lane absent: a warp collective; with A's registers swapped: a
 *    wrong product (the harness multiplies with the PTX ISA's fragment layout).
 *
 * Stream capture and graphs are checked too: captured work runs only when the graph is
 * launched, in its order; the calls CUDA refuses during a capture invalidate it.
 */
#define _GNU_SOURCE
#include "cuda.h"
#include "cuda_runtime_api.h"
#include "selftest.h"

#include "../ckassert.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#endif

static uint64_t rng = 0x2545F4914F6CDD1Dull;

static uint32_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}

static void *dev_alloc(size_t bytes)
{
	void *d = NULL;
	ck_assert_int_eq(cudaMalloc(&d, bytes), cudaSuccess);
	return d;
}

static void *dev_copy(const void *src, size_t bytes)
{
	void *d = dev_alloc(bytes);
	ck_assert_int_eq(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	return d;
}

static void *dev_zero(size_t bytes)
{
	void *d = dev_alloc(bytes);
	ck_assert_int_eq(cudaMemset(d, 0, bytes), cudaSuccess);
	return d;
}

static void host_copy(void *dst, const void *src, size_t bytes)
{
	ck_assert_int_eq(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* ------------------------------------------------------------------------------------------ */
/* Mutants: run in a child, stderr kept                                                        */
/* ------------------------------------------------------------------------------------------ */

struct outcome {
	int exit_code;           /* -1 when killed */
	int signal;
	char err[16384];
};

static void run_child(void (*mutant)(void), struct outcome *o)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDERR_FILENO);
		close(p[0]);
		mutant();
		fprintf(stderr, "the mutant ran to its end without a failure\n");
		_exit(0);
	}
	close(p[1]);
	size_t at = 0;
	ssize_t n;
	while ((n = read(p[0], o->err + at, sizeof(o->err) - 1 - at)) > 0)
		at += (size_t)n;
	o->err[at] = 0;
	close(p[0]);
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	o->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	o->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

/* The mutant must fail, and say `why`. */
static void expect_caught(void (*mutant)(void), const char *why)
{
	struct outcome o;
	run_child(mutant, &o);
	ck_assert_msg(o.exit_code != 0, "the mutant was not caught: %s", o.err);
	ck_assert_msg(strstr(o.err, why), "the mutant failed, but not with \"%s\":\n%s", why, o.err);
	printf("caught as expected (%s): %.200s\n", why, o.err);
}

/* ------------------------------------------------------------------------------------------ */
/* Shared memory and __syncthreads                                                             */
/* ------------------------------------------------------------------------------------------ */

#define REVERSE_N 256

/* Runs st_reverse; returns how many outputs are wrong, and in *poison how many of those are
 * the poison (-1). */
static unsigned reverse_errors(unsigned blocks, int mutant, unsigned *poison)
{
	unsigned n = REVERSE_N, total = n * blocks;
	int *in = malloc(total * sizeof(int)), *out = malloc(total * sizeof(int));
	for (unsigned i = 0; i < total; i++)
		in[i] = (int)i;
	int *din = dev_copy(in, total * sizeof(int)), *dout = dev_alloc(total * sizeof(int));
	ck_assert_int_eq(st_reverse(din, dout, n, blocks, mutant), 0);
	host_copy(out, dout, total * sizeof(int));
	unsigned wrong = 0;
	*poison = 0;
	for (unsigned b = 0; b < blocks; b++)
		for (unsigned t = 0; t < n; t++)
			if (out[b * n + t] != in[b * n + n - 1 - t]) {
				wrong++;
				*poison += out[b * n + t] == -1;
			}
	cudaFree(din);
	cudaFree(dout);
	free(in);
	free(out);
	return wrong;
}

START_TEST(reverse_through_shared_memory)
{
	unsigned poison;
	ck_assert_uint_eq(reverse_errors(4, 0, &poison), 0);
}
END_TEST

static void missing_syncthreads(void)
{
	unsigned poison, wrong = reverse_errors(1, 1, &poison);
	if (wrong) {
		fprintf(stderr, "wrong result: %u of %u values differ, %u of them the shared-memory poison\n",
			wrong, REVERSE_N, poison);
		_exit(3);
	}
}

START_TEST(mutant_missing_syncthreads)
{
	struct outcome o;
	run_child(missing_syncthreads, &o);
	const char *say = strstr(o.err, "wrong result");
	ck_assert_msg(o.exit_code == 3 && say, "not caught: %s", o.err);
	unsigned wrong, poison;
	ck_assert_int_eq(sscanf(say, "wrong result: %u of %*u values differ, %u", &wrong, &poison), 2);
	ck_assert_uint_gt(poison, 0);
#ifdef __SANITIZE_THREAD__
	/* ThreadSanitizer sees it too: a write and a read of one shared slot, no barrier between */
	ck_assert_msg(strstr(o.err, "WARNING: ThreadSanitizer: data race") &&
			      strstr(o.err, "reverse_kernel"),
		      "no data race reported: %s", o.err);
#endif
	printf("caught as expected: %s", say);
}
END_TEST

START_TEST(shared_memory_is_poisoned_at_every_block_start)
{
	int ints[2];
	float floats[2];
	int *di = dev_alloc(sizeof(ints));
	float *df = dev_alloc(sizeof(floats));
	ck_assert_int_eq(st_shared_poison(di, df), 0);
	host_copy(ints, di, sizeof(ints));
	host_copy(floats, df, sizeof(floats));
	for (int b = 0; b < 2; b++) { /* the block that ran second must not see the first's 42 */
		ck_assert_int_eq(ints[b], -1);
		ck_assert(isnan(floats[b]));
	}
	cudaFree(di);
	cudaFree(df);
}
END_TEST

START_TEST(barrier_order_changes_at_each_barrier)
{
	enum { N = 128 };
	uint32_t o1[N], o2[N];
	uint32_t *d1 = dev_alloc(sizeof(o1)), *d2 = dev_alloc(sizeof(o2));
	ck_assert_int_eq(st_barrier_order(d1, d2, N), 0);
	host_copy(o1, d1, sizeof(o1));
	host_copy(o2, d2, sizeof(o2));
	unsigned seen1[N] = { 0 }, seen2[N] = { 0 }, same = 0, in_order = 0;
	for (unsigned t = 0; t < N; t++) {
		ck_assert_uint_lt(o1[t], N);
		ck_assert_uint_lt(o2[t], N);
		seen1[o1[t]]++;
		seen2[o2[t]]++;
		same += o1[t] == o2[t];
		in_order += o1[t] == t;
	}
	for (unsigned t = 0; t < N; t++)
		ck_assert(seen1[t] == 1 && seen2[t] == 1);
	ck_assert_uint_lt(same, N / 4);
	ck_assert_uint_lt(in_order, N / 4);
	cudaFree(d1);
	cudaFree(d2);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Warp collectives                                                                            */
/* ------------------------------------------------------------------------------------------ */

static unsigned warp_sum_errors(uint32_t mask, unsigned absent_lane)
{
	unsigned threads = 128, blocks = 3, total = threads * blocks;
	int *in = malloc(total * sizeof(int)), *out = malloc(total * sizeof(int));
	for (unsigned i = 0; i < total; i++)
		in[i] = (int)(rnd() % 1000);
	int *din = dev_copy(in, total * sizeof(int)), *dout = dev_zero(total * sizeof(int));
	ck_assert_int_eq(st_warp_sum(din, dout, threads, blocks, mask, absent_lane), 0);
	host_copy(out, dout, total * sizeof(int));
	unsigned wrong = 0;
	for (unsigned w = 0; w < total / 32; w++) {
		int sum = 0;
		for (unsigned l = 0; l < 32; l++)
			sum += in[w * 32 + l];
		for (unsigned l = 0; l < 32; l++)
			wrong += out[w * 32 + l] != sum;
	}
	cudaFree(din);
	cudaFree(dout);
	free(in);
	free(out);
	return wrong;
}

START_TEST(warp_sum_over_full_warps)
{
	ck_assert_uint_eq(warp_sum_errors(0xffffffffu, 32), 0);
}
END_TEST

static void partial_mask(void)
{
	warp_sum_errors(0x0000ffffu, 32);
}

START_TEST(mutant_partial_mask)
{
	expect_caught(partial_mask, "__shfl_xor_sync under mask 0x0000ffff");
}
END_TEST

static void lane_returned(void)
{
	warp_sum_errors(0xffffffffu, 5);
}

START_TEST(mutant_lane_returned_before_a_shuffle)
{
	struct outcome o;
	run_child(lane_returned, &o);
	ck_assert_msg(o.exit_code != 0, "not caught: %s", o.err);
	/* which message depends on whether lane 5 returns before or after the others arrive */
	ck_assert_msg(strstr(o.err, "__shfl_xor_sync in warp") ? strstr(o.err, "lane(s) 5 have exited") != NULL
							     : strstr(o.err, "lane 5 of warp") != NULL,
		      "not caught for lane 5: %s", o.err);
	printf("caught as expected: %.300s\n", o.err);
}
END_TEST

/* The shuffles as the CUDA programming guide describes them, written apart from block.c. */
static uint32_t guide_shfl(uint32_t lane, int src, int width)
{
	return lane / (uint32_t)width * (uint32_t)width + (uint32_t)src % (uint32_t)width;
}

static uint32_t guide_up(uint32_t lane, unsigned delta, int width)
{
	return lane % (uint32_t)width >= delta ? lane - delta : lane;
}

static uint32_t guide_down(uint32_t lane, unsigned delta, int width)
{
	return lane % (uint32_t)width + delta < (uint32_t)width ? lane + delta : lane;
}

static uint32_t guide_xor(uint32_t lane, int mask, int width)
{
	uint32_t j = lane ^ (uint32_t)mask;
	return j / (uint32_t)width > lane / (uint32_t)width ? lane : j; /* later segments: own value */
}

START_TEST(shuffles_match_the_programming_guide)
{
	uint32_t *dout = dev_alloc(128 * 4), *dballot = dev_alloc(4), out[128], ballot;
	const int widths[] = { 32, 16, 8, 4, 2, 1 }, srcs[] = { 0, 5, 17, 31 };
	const unsigned deltas[] = { 0, 1, 3, 17 };
	const int masks[] = { 1, 6, 16, 31 };
	for (unsigned w = 0; w < 6; w++)
		for (unsigned k = 0; k < 4; k++) {
			int width = widths[w];
			ck_assert_int_eq(st_shuffles(dout, dballot, srcs[k], deltas[k], masks[k], width), 0);
			host_copy(out, dout, sizeof(out));
			host_copy(&ballot, dballot, 4);
			for (uint32_t l = 0; l < 32; l++) {
				ck_assert_uint_eq(out[4 * l + 0], guide_shfl(l, srcs[k], width));
				ck_assert_uint_eq(out[4 * l + 1], guide_up(l, deltas[k], width));
				ck_assert_uint_eq(out[4 * l + 2], guide_down(l, deltas[k], width));
				ck_assert_uint_eq(out[4 * l + 3], guide_xor(l, masks[k], width));
			}
			ck_assert_uint_eq(ballot, 0x49249249u); /* lanes 0, 3, 6, ... */
		}
	cudaFree(dout);
	cudaFree(dballot);
}
END_TEST

static void divergent(void)
{
	st_divergent_shuffle(dev_alloc(32 * 4));
}

static void deadlock(void)
{
	st_deadlock(dev_alloc(64 * 4));
}

static void partial_warp(void)
{
	st_partial_warp(dev_alloc(48 * 4));
}

START_TEST(mutant_lanes_at_different_collectives)
{
	expect_caught(divergent, "a warp collective needs all 32 lanes at the same operation");
}
END_TEST

START_TEST(mutant_deadlock)
{
	expect_caught(deadlock, "deadlock: 48 of 64 threads wait at __syncthreads, 0 have exited; warp 1: lanes 16-31 wait at __shfl_xor_sync");
}
END_TEST

START_TEST(mutant_warp_of_16_lanes)
{
	expect_caught(partial_warp, "which has only 16 threads");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* wmma                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* a (r, k) in memory row-major or column-major, b (k, c) the other way round. */
static size_t at_a(int r, int k, int row_major)
{
	return row_major ? (size_t)r * 16 + k : (size_t)k * 16 + r;
}

static size_t at_b(int k, int c, int a_row_major)
{
	return a_row_major ? (size_t)c * 16 + k : (size_t)k * 16 + c;
}

START_TEST(wmma_int8_tiles_are_exact)
{
	int8_t a[256], b[256];
	int c[256], d[256];
	for (int i = 0; i < 256; i++) {
		a[i] = (int8_t)(rnd() % 256);
		b[i] = (int8_t)(rnd() % 256);
		c[i] = (int)(rnd() % 100000) - 50000;
	}
	void *da = dev_copy(a, 256), *db = dev_copy(b, 256), *dc = dev_copy(c, 1024), *dd = dev_alloc(1024);
	for (int row_major = 0; row_major < 2; row_major++) {
		ck_assert_int_eq(st_wmma_s8(da, db, dc, dd, row_major), 0);
		host_copy(d, dd, sizeof(d));
		for (int r = 0; r < 16; r++)
			for (int col = 0; col < 16; col++) {
				int want = c[r * 16 + col];
				for (int k = 0; k < 16; k++)
					want += a[at_a(r, k, row_major)] * b[at_b(k, col, row_major)];
				ck_assert_int_eq(d[r * 16 + col], want);
			}
	}
	cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}
END_TEST

START_TEST(wmma_half_tiles_sum_in_float)
{
	uint16_t a[256], b[256];
	float c[256], d[256];
	for (int i = 0; i < 256; i++) {
		a[i] = st_float2half_rn((float)((int)(rnd() % 2001) - 1000) / 256.0f);
		b[i] = st_float2half_rn((float)((int)(rnd() % 2001) - 1000) / 256.0f);
		c[i] = (float)((int)(rnd() % 2001) - 1000) / 64.0f;
	}
	void *da = dev_copy(a, 512), *db = dev_copy(b, 512), *dc = dev_copy(c, 1024), *dd = dev_alloc(1024);
	for (int row_major = 0; row_major < 2; row_major++) {
		ck_assert_int_eq(st_wmma_f16(da, db, dc, dd, row_major), 0);
		host_copy(d, dd, sizeof(d));
		for (int r = 0; r < 16; r++)
			for (int col = 0; col < 16; col++) {
				double want = c[r * 16 + col], norm = fabs(want);
				for (int k = 0; k < 16; k++) {
					double p = (double)st_half2float(a[at_a(r, k, row_major)]) *
						   st_half2float(b[at_b(k, col, row_major)]);
					want += p;
					norm += fabs(p);
				}
				ck_assert_msg(fabs(d[r * 16 + col] - want) <= 1e-6 * norm, "(%d, %d): %g vs %g",
					      r, col, d[r * 16 + col], want);
			}
	}
	cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}
END_TEST

static void wmma_lanes_disagree(void)
{
	st_wmma_bad_load(dev_alloc(1024), dev_alloc(128), 1);
}

static void wmma_misaligned(void)
{
	st_wmma_bad_load(dev_alloc(1024), dev_alloc(128), 2);
}

START_TEST(mutant_wmma_load_with_two_pointers)
{
	expect_caught(wmma_lanes_disagree, "at wmma::load_matrix_sync");
}
END_TEST

START_TEST(mutant_wmma_misaligned_load)
{
	expect_caught(wmma_misaligned, "is not 256-bit aligned");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Between blocks: the race check, atomics                                                     */
/* ------------------------------------------------------------------------------------------ */

static void blocks_write(int overlap)
{
	int out[8], *d = dev_zero(sizeof(out));
	ck_assert_int_eq(st_blocks_write(d, 8, overlap), 0);
	host_copy(out, d, sizeof(out));
	if (!overlap)
		for (int b = 0; b < 8; b++)
			ck_assert_int_eq(out[b], b + 1);
	cudaFree(d);
}

START_TEST(blocks_writing_their_own_outputs_pass_the_race_check)
{
	blocks_write(0);
}
END_TEST

static void race_between_blocks(void)
{
	blocks_write(1);
}

START_TEST(mutant_race_between_blocks)
{
	expect_caught(race_between_blocks, "race check: device memory differs");
}
END_TEST

/* The race check's sample (grid.c): clean launches of one kernel at one shape, then racy ones
 * of the same shape. Each sets the mode before its process's first launch, which reads it. */
static void launches_then_races(const char *mode, unsigned clean, unsigned racy)
{
	setenv("BN_CUDA_HOST_RACECHECK", mode, 1);
	int *d = dev_zero(8 * sizeof(int));
	for (unsigned i = 0; i < clean + racy; i++)
		ck_assert_int_eq(st_blocks_write(d, 8, i >= clean), 0);
	cudaFree(d);
}

/* A race past a shape's first launches, repeated as a step repeats its kernels: the sample
 * (one launch in 8 after the first 2) meets it. */
static void race_repeated_after_the_first_launches(void)
{
	launches_then_races("1", 2, 64);
}

/* One racy launch after 40 clean ones: `all` checks every launch. */
static void one_race_after_40_launches(void)
{
	launches_then_races("all", 40, 1);
}

START_TEST(mutant_race_past_the_first_launches)
{
	expect_caught(race_repeated_after_the_first_launches, "race check: device memory differs");
	expect_caught(one_race_after_40_launches, "race check: device memory differs");
}
END_TEST

START_TEST(atomics_count_across_blocks)
{
	unsigned threads = 64, blocks = 4, n = threads * blocks;
	uint32_t *in = malloc(n * 4), extremes[2] = { 0, UINT32_MAX }, lo = UINT32_MAX, hi = 0;
	int hist[16] = { 0 }, want[16] = { 0 }, cas[3] = { 0, 0, 0 };
	for (unsigned i = 0; i < n; i++) {
		in[i] = rnd();
		want[in[i] % 16]++;
		lo = in[i] < lo ? in[i] : lo;
		hi = in[i] > hi ? in[i] : hi;
	}
	uint32_t *din = dev_copy(in, n * 4), *dext = dev_copy(extremes, sizeof(extremes));
	int *dhist = dev_zero(sizeof(hist)), *dcas = dev_zero(sizeof(cas));
	ck_assert_int_eq(st_atomics(din, threads, blocks, dhist, dext, dcas), 0);
	host_copy(hist, dhist, sizeof(hist));
	host_copy(extremes, dext, sizeof(extremes));
	host_copy(cas, dcas, sizeof(cas));
	ck_assert_int_eq(memcmp(hist, want, sizeof(hist)), 0);
	ck_assert_uint_eq(extremes[0], hi);
	ck_assert_uint_eq(extremes[1], lo);
	ck_assert_int_eq(cas[0], 1);                   /* one thread found the slot empty */
	ck_assert_int_eq(cas[1], (int)threads - 1);    /* every exchange after the first saw 1 */
	cudaFree(din), cudaFree(dext), cudaFree(dhist), cudaFree(dcas);
	free(in);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Memory errors                                                                               */
/* ------------------------------------------------------------------------------------------ */

static void read_past_the_end(void)
{
	int *in = dev_zero(64 * sizeof(int)), *out = dev_alloc(64 * sizeof(int));
	st_read(in, out, 64, 1);
}

#ifdef HAVE_ASAN
START_TEST(mutant_out_of_bounds_read)
{
	expect_caught(read_past_the_end, "heap-buffer-overflow");
}
END_TEST
#endif

START_TEST(in_bounds_read)
{
	int *in = dev_zero(64 * sizeof(int)), *out = dev_alloc(64 * sizeof(int)), got[64];
	ck_assert_int_eq(st_read(in, out, 64, 0), 0);
	host_copy(got, out, sizeof(got));
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(got[i], 0);
	cudaFree(in), cudaFree(out);
}
END_TEST

/* The driver's virtual memory calls, as the backend reaches them (vmm.c). */
struct vmm_calls {
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*address_free)(CUdeviceptr, size_t);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
};

static void vmm_resolve(struct vmm_calls *c)
{
	static const char *const names[] = { "cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate",
					     "cuMemRelease", "cuMemMap", "cuMemUnmap",
					     "cuMemSetAccess", "cuMemGetAllocationGranularity" };
	void *fn[8];
	for (int i = 0; i < 8; i++) {
		enum cudaDriverEntryPointQueryResult found;
		ck_assert_int_eq(cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000, cudaEnableDefault,
								  &found), cudaSuccess);
		ck_assert_int_eq(found, cudaDriverEntryPointSuccess);
	}
	memcpy(c, fn, sizeof(*c));
	void *none = &none;
	enum cudaDriverEntryPointQueryResult found;
	ck_assert_int_eq(cudaGetDriverEntryPointByVersion("cuNoSuchCall", &none, 12000, 0, &found),
			 cudaSuccess);
	ck_assert_int_eq(found, cudaDriverEntryPointSymbolNotFound);
	ck_assert_ptr_null(none);
}

static const CUmemAllocationProp device_prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
						 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
static const CUmemAccessDesc read_write = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
					    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

static size_t free_bytes(void)
{
	size_t f, t;
	ck_assert_int_eq(cudaMemGetInfo(&f, &t), cudaSuccess);
	return f;
}

/* CUDA's rules for virtual memory: granule-sized pieces, nothing mapped twice, whole
 * mappings unmapped, no reservation freed while mapped; a mapping's bytes are its
 * allocation's (two mappings of one allocation see each other's writes); memory is counted
 * from cuMemCreate until both the handle and its last mapping are gone; a kernel reads a
 * mapped part of a reservation (and the race check saves only those parts). */
START_TEST(virtual_memory_follows_cuda_rules)
{
	struct vmm_calls c;
	vmm_resolve(&c);
	size_t g;
	ck_assert_int_eq(c.granularity(&g, &device_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
	ck_assert_uint_gt(g, 0);
	int *out = dev_alloc(64 * sizeof(int));
	size_t before = free_bytes();
	CUdeviceptr base;
	ck_assert_int_eq(c.reserve(&base, 4 * g, g, 0, 0), CUDA_SUCCESS);
	ck_assert_uint_eq(base % g, 0);
	ck_assert_int_eq(c.reserve(&base, g + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
	ck_assert_uint_eq(free_bytes(), before); /* addresses only */
	CUmemGenericAllocationHandle h;
	ck_assert_int_eq(c.create(&h, g + 1, &device_prop, 0), CUDA_ERROR_INVALID_VALUE);
	ck_assert_int_eq(c.create(&h, 2 * g, &device_prop, 0), CUDA_SUCCESS);
	ck_assert_uint_eq(free_bytes() + 2 * g, before);
	/* its first granule at the reservation's first and third */
	ck_assert_int_eq(c.map(base, g, g, h, 0), CUDA_ERROR_NOT_SUPPORTED); /* offsets: 0 only */
	ck_assert_int_eq(c.map(base, g, 0, h, 0), CUDA_SUCCESS);
	ck_assert_int_eq(c.map(base, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);       /* mapped */
	ck_assert_int_eq(c.map(base + g, 3 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* past h */
	ck_assert_int_eq(c.map(base + 4 * g, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* past the range */
	ck_assert_int_eq(c.map(base + 2 * g, g, 0, h, 0), CUDA_SUCCESS);
	ck_assert_int_eq(c.set_access(base, 2 * g, &read_write, 1), CUDA_ERROR_INVALID_VALUE); /* a hole */
	ck_assert_int_eq(c.set_access(base, g, &read_write, 1), CUDA_SUCCESS);
	ck_assert_int_eq(c.set_access(base + 2 * g, g, &read_write, 1), CUDA_SUCCESS);
	int *first = (int *)(uintptr_t)base, *third = (int *)(uintptr_t)(base + 2 * g), got[64];
	ck_assert_int_eq(cudaMemset(first, 0, 64 * sizeof(int)), cudaSuccess);
	ck_assert_int_eq(st_read(third, out, 64, 0), 0); /* the other mapping of those bytes */
	host_copy(got, out, sizeof(got));
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(got[i], 0);
	ck_assert_int_eq(c.unmap(base, 2 * g), CUDA_ERROR_INVALID_VALUE); /* not one mapping */
	ck_assert_int_eq(c.address_free(base, 4 * g), CUDA_ERROR_INVALID_VALUE); /* still mapped */
	ck_assert_int_eq(c.release(h), CUDA_SUCCESS);
	ck_assert_int_eq(c.map(base + g, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* released */
	ck_assert_uint_eq(free_bytes() + 2 * g, before); /* its mappings hold it */
	ck_assert_int_eq(c.unmap(base, g), CUDA_SUCCESS);
	ck_assert_int_eq(c.unmap(base + 2 * g, g), CUDA_SUCCESS);
	ck_assert_uint_eq(free_bytes(), before);
	ck_assert_int_eq(c.address_free(base, 4 * g), CUDA_SUCCESS);
	cudaFree(out);
}
END_TEST

/* A kernel reading a reserved range where nothing is mapped faults, as on the GPU (a
 * sanitizer reports the SEGV and exits instead of dying of it). */
static void read_unmapped(void)
{
	struct vmm_calls c;
	vmm_resolve(&c);
	size_t g;
	ck_assert_int_eq(c.granularity(&g, &device_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
	CUdeviceptr base;
	ck_assert_int_eq(c.reserve(&base, 2 * g, 0, 0, 0), CUDA_SUCCESS);
	int *out = dev_alloc(64 * sizeof(int));
	st_read((const int *)(uintptr_t)base, out, 64, 0);
}

START_TEST(mutant_kernel_reads_unmapped_memory)
{
	struct outcome o;
	run_child(read_unmapped, &o);
	ck_assert_msg(o.signal == SIGSEGV || (o.exit_code != 0 && strstr(o.err, "SEGV")),
		      "reading unmapped memory did not fault: exit %d signal %d: %s", o.exit_code,
		      o.signal, o.err);
}
END_TEST

static int host_heap_word[32];

static void host_pointer(void)
{
	st_host_pointer_argument(host_heap_word);
}

START_TEST(mutant_host_pointer_argument)
{
	expect_caught(host_pointer, "neither device memory nor pinned host memory");
}
END_TEST

static void dynamic_shared(void)
{
	st_launch_dynamic_shared(1024);
}

START_TEST(dynamic_shared_memory_is_refused)
{
	expect_caught(dynamic_shared, "dynamic shared memory");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Intrinsics and the sort                                                                     */
/* ------------------------------------------------------------------------------------------ */

START_TEST(integer_intrinsics)
{
	for (int i = 0; i < 100000; i++) {
		uint32_t a = rnd(), b = rnd(), c = rnd();
		int32_t s = (int32_t)c;
		uint32_t u = c, sub = 0;
		for (int k = 0; k < 4; k++) {
			s = (int32_t)((uint32_t)s + (uint32_t)((int8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k)));
			u += ((a >> 8 * k) & 255) * ((b >> 8 * k) & 255);
			sub |= (((a >> 8 * k) - (b >> 8 * k)) & 255) << 8 * k;
		}
		ck_assert_int_eq(st_dp4a((int)a, (int)b, (int)c), s);
		ck_assert_uint_eq(st_dp4a_u(a, b, c), u);
		ck_assert_uint_eq(st_vsub4(a, b), sub);
	}
	ck_assert_int_eq(st_ffs(0), 0);
	ck_assert_int_eq(st_clz(0), 32);
	for (int bit = 0; bit < 32; bit++) {
		uint32_t x = 1u << bit | (bit < 31 ? (uint32_t)rnd() << (bit + 1) : 0);
		ck_assert_int_eq(st_ffs((int)x), bit + 1);
		ck_assert_int_eq(st_clz((int)(1u << bit)), 31 - bit);
	}
}
END_TEST

/* The CPU's own float-to-half conversion (round to nearest even), where it has one. */
#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_half_round(float f)
{
	return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#define HAVE_HW_HALF() __builtin_cpu_supports("f16c")
#elif defined(__aarch64__)
static uint16_t hw_half_round(float f)
{
	__fp16 h = (__fp16)f; /* fcvt, under the default rounding mode */
	uint16_t u;
	memcpy(&u, &h, sizeof(u));
	return u;
}
#define HAVE_HW_HALF() 1
#endif

static float bits_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t float_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

START_TEST(half_conversion_rounds_to_nearest_even)
{
	/* every finite half and its float round trip; between neighbours, the midpoint (ties to
	 * the even one) and a float ulp either side of it */
	for (uint32_t h = 0; h < 0x10000; h++) {
		uint32_t mag = h & 0x7fff;
		float f = st_half2float((uint16_t)h);
		if (mag > 0x7c00) {
			ck_assert(isnan(f));
			ck_assert_uint_eq(st_float2half_rn(f), 0x7fff);
			continue;
		}
		ck_assert_uint_eq(st_float2half_rn(f), h);
		if (mag >= 0x7c00)
			continue;
		/* the next half away from zero; past the largest, where infinity's rounding starts */
		float next = mag == 0x7bff ? copysignf(65536.0f, f) : st_half2float((uint16_t)(h + 1));
		float mid = (f + next) / 2;                    /* exact: halves have 11 bits */
		uint32_t even = (h & 1) ? h + 1 : h;
		ck_assert_msg(st_float2half_rn(mid) == even, "midpoint after 0x%04x", h);
		ck_assert_uint_eq(st_float2half_rn(bits_float(float_bits(mid) - 1)), h);
		ck_assert_uint_eq(st_float2half_rn(bits_float(float_bits(mid) + 1)), h + 1);
	}
	if (HAVE_HW_HALF())
		for (int i = 0; i < 1000000; i++) {
			float f = bits_float(rnd());
			if (!isnan(f))
				ck_assert_msg(st_float2half_rn(f) == hw_half_round(f), "%a", (double)f);
		}
}
END_TEST

struct pair {
	uint32_t key, value;
};

START_TEST(segmented_sort_is_stable)
{
	enum { N = 3000 };
	const int offsets[] = { 0, 1000, 1000, 2500, N };
	uint32_t keys[N], values[N], got_k[N], got_v[N];
	for (uint32_t i = 0; i < N; i++) {
		keys[i] = i % 3 ? rnd() : rnd() % 97; /* many equal keys */
		values[i] = i;
	}
	uint32_t *dk = dev_copy(keys, sizeof(keys)), *dv = dev_copy(values, sizeof(values));
	int *doff = dev_copy(offsets, sizeof(offsets));
	uint32_t *dko = dev_alloc(sizeof(keys)), *dvo = dev_alloc(sizeof(values));
	const int bits[][2] = { { 0, 32 }, { 0, 12 }, { 4, 4 } };
	for (int c = 0; c < 3; c++) {
		ck_assert_int_eq(st_sort_pairs(dk, dko, dv, dvo, N, doff, 4, bits[c][0], bits[c][1]), 0);
		host_copy(got_k, dko, sizeof(got_k));
		host_copy(got_v, dvo, sizeof(got_v));
		uint32_t mask = bits[c][1] - bits[c][0] == 32 ? UINT32_MAX
							      : ((1u << (bits[c][1] - bits[c][0])) - 1) << bits[c][0];
		for (int s = 0; s < 4; s++) {
			/* each output: the next input of the segment, in input order, with the smallest
			 * masked key among those not yet taken (stable selection) */
			char taken[N] = { 0 };
			for (int o = offsets[s]; o < offsets[s + 1]; o++) {
				int best = -1;
				for (int i = offsets[s]; i < offsets[s + 1]; i++)
					if (!taken[i] && (best < 0 || (keys[i] & mask) < (keys[best] & mask)))
						best = i;
				taken[best] = 1;
				ck_assert_uint_eq(got_v[o], values[best]);
				ck_assert_uint_eq(got_k[o], keys[best]);
			}
		}
	}
	cudaFree(dk), cudaFree(dv), cudaFree(doff), cudaFree(dko), cudaFree(dvo);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The runtime calls                                                                           */
/* ------------------------------------------------------------------------------------------ */

START_TEST(device_properties)
{
	int n = 0;
	ck_assert_int_eq(cudaGetDeviceCount(&n), cudaSuccess);
	ck_assert_int_eq(n, 1);
	struct cudaDeviceProp p;
	ck_assert_int_eq(cudaGetDeviceProperties(&p, 0), cudaSuccess);
	ck_assert(strstr(p.name, "host harness"));
	ck_assert_int_eq(p.major, 9);
	ck_assert_int_eq(p.warpSize, 32);
	ck_assert_int_eq(cudaGetDeviceProperties(&p, 1), cudaErrorInvalidDevice);
	ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidDevice);
	ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
	ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
	int dev = -1;
	ck_assert_int_eq(cudaGetDevice(&dev), cudaSuccess);
	ck_assert_int_eq(dev, 0);
	ck_assert_str_eq(cudaGetErrorName(cudaErrorInvalidDevice), "cudaErrorInvalidDevice");
	ck_assert_str_eq(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument");
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
}
END_TEST

START_TEST(memory_calls_check_their_ranges)
{
	size_t free0, total, free1;
	ck_assert_int_eq(cudaMemGetInfo(&free0, &total), cudaSuccess);
	unsigned char *d = dev_alloc(1000), host[1000];
	ck_assert_int_eq(cudaMemGetInfo(&free1, &total), cudaSuccess);
	ck_assert_uint_eq(free0 - free1, 1000);
	ck_assert_uint_eq((uintptr_t)d % 256, 0);
	host_copy(host, d, sizeof(host)); /* fresh memory is not zeroed: 0xff, like a NaN */
	for (int i = 0; i < 1000; i++)
		ck_assert_uint_eq(host[i], 0xff);
	ck_assert_int_eq(cudaMemcpy(d + 1, host, 1000, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
	ck_assert_int_eq(cudaMemcpy(host, d, 1000, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaMemset(d + 500, 0, 501), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaMemset(d + 500, 7, 500), cudaSuccess);
	ck_assert_int_eq(cudaMemcpy(host, d, 1000, cudaMemcpyDefault), cudaSuccess);
	ck_assert_uint_eq(host[499], 0xff);
	ck_assert_uint_eq(host[500], 7);
	ck_assert_int_eq(cudaFree(d + 1), cudaErrorInvalidValue);
	void *pinned;
	ck_assert_int_eq(cudaMallocHost(&pinned, 64), cudaSuccess);
	ck_assert_int_eq(cudaFree(pinned), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaMemcpy(d, pinned, 64, cudaMemcpyHostToDevice), cudaSuccess);
	ck_assert_int_eq(cudaFreeHost(pinned), cudaSuccess);
	ck_assert_int_eq(cudaFree(d), cudaSuccess);
	ck_assert_int_eq(cudaMalloc((void **)&d, 8ull << 30), cudaErrorMemoryAllocation);
	ck_assert_int_eq(cudaFree(NULL), cudaSuccess);
	cudaGetLastError();
}
END_TEST

START_TEST(launch_configuration_errors)
{
	ck_assert_int_eq(st_launch(1024, 2), cudaSuccess);
	ck_assert_int_eq(st_launch(1025, 1), cudaErrorInvalidConfiguration);
	ck_assert_int_eq(cudaGetLastError(), cudaSuccess); /* st_launch took it */
	ck_assert_int_eq(st_launch(0, 1), cudaErrorInvalidConfiguration);
	ck_assert_int_eq(st_launch(32, 0), cudaErrorInvalidConfiguration);
	ck_assert_int_eq(st_launch(33, 3), cudaSuccess); /* a last warp of one lane is fine without collectives */
}
END_TEST

START_TEST(streams_and_events)
{
	cudaStream_t s;
	cudaEvent_t a, b;
	ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	ck_assert_int_eq(cudaEventCreate(&a), cudaSuccess);
	ck_assert_int_eq(cudaEventCreateWithFlags(&b, cudaEventDisableTiming), cudaSuccess);
	float untimed;
	ck_assert_int_eq(cudaEventRecord(a, s), cudaSuccess);
	ck_assert_int_eq(cudaEventRecord(b, s), cudaSuccess);
	ck_assert_int_eq(cudaEventElapsedTime(&untimed, a, b), cudaErrorInvalidResourceHandle);
	ck_assert_int_eq(cudaEventDestroy(a), cudaSuccess);
	ck_assert_int_eq(cudaEventDestroy(b), cudaSuccess);
	ck_assert_int_eq(cudaEventCreate(&a), cudaSuccess);
	ck_assert_int_eq(cudaEventCreate(&b), cudaSuccess);
	float ms;
	ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
	ck_assert_int_eq(cudaEventRecord(a, s), cudaSuccess);
	int *d = dev_alloc(4), v = 5;
	ck_assert_int_eq(cudaMemcpyAsync(d, &v, 4, cudaMemcpyHostToDevice, s), cudaSuccess);
	ck_assert_int_eq(cudaEventRecord(b, s), cudaSuccess);
	ck_assert_int_eq(cudaStreamWaitEvent(s, b, 0), cudaSuccess);
	ck_assert_int_eq(cudaEventSynchronize(b), cudaSuccess);
	ck_assert_int_eq(cudaEventQuery(b), cudaSuccess);
	ck_assert_int_eq(cudaStreamQuery(s), cudaSuccess);
	ck_assert_int_eq(cudaMemsetAsync(d, 0, 4, s), cudaSuccess);
	ck_assert_int_eq(cudaMemsetAsync(d, 0, 8, s), cudaErrorInvalidValue);
	ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
	ck_assert(ms >= 0);
	ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
	ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
	ck_assert_int_eq(cudaMemcpyAsync(d, &v, 4, cudaMemcpyHostToDevice, s), cudaErrorInvalidResourceHandle);
	ck_assert_int_eq(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
	ck_assert_int_eq(cudaEventDestroy(a), cudaSuccess);
	ck_assert_int_eq(cudaEventDestroy(b), cudaSuccess);
	ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidResourceHandle);
	cudaStream_t plain;
	ck_assert_int_eq(cudaStreamCreate(&plain), cudaSuccess);
	ck_assert_int_eq(cudaStreamDestroy(plain), cudaSuccess);
	cudaFree(d);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Stream capture and graphs                                                                   */
/* ------------------------------------------------------------------------------------------ */

#define GRAPH_N 100

START_TEST(graphs_replay_the_captured_work_in_order)
{
	cudaStream_t s;
	ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	int *p = dev_zero(GRAPH_N * 4), *q = dev_zero(GRAPH_N * 4), *r = dev_zero(GRAPH_N * 4);
	int got[GRAPH_N];
	enum cudaStreamCaptureStatus st;
	ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
	ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaErrorIllegalState);
	ck_assert_int_eq(cudaGetLastError(), cudaErrorIllegalState);
	ck_assert_int_eq(cudaStreamIsCapturing(s, &st), cudaSuccess);
	ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
	/* (p + 1) * 3, then q = 7s, then r = p, then p + 2: the order shows in the values */
	ck_assert_int_eq(st_add_mul(p, 1, 3, GRAPH_N, s), cudaSuccess);
	ck_assert_int_eq(cudaMemsetAsync(q, 7, GRAPH_N * 4, s), cudaSuccess);
	ck_assert_int_eq(cudaMemcpyAsync(r, p, GRAPH_N * 4, cudaMemcpyDeviceToDevice, s), cudaSuccess);
	ck_assert_int_eq(st_add_mul(p, 2, 1, GRAPH_N, s), cudaSuccess);
	cudaGraph_t g;
	ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
	ck_assert_int_eq(cudaStreamIsCapturing(s, &st), cudaSuccess);
	ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
	host_copy(got, p, sizeof(got)); /* captured, not run */
	for (int i = 0; i < GRAPH_N; i++)
		ck_assert_int_eq(got[i], 0);
	cudaGraphExec_t x;
	ck_assert_int_eq(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess); /* the instance keeps its own copy */
	ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
	ck_assert_int_eq(cudaGraphLaunch(x, s), cudaSuccess);
	ck_assert_int_eq(cudaStreamSynchronize(s), cudaSuccess);
	host_copy(got, p, sizeof(got)); /* ((0 + 1) 3 + 2 + 1) 3 + 2 */
	for (int i = 0; i < GRAPH_N; i++)
		ck_assert_int_eq(got[i], 20);
	host_copy(got, r, sizeof(got));
	for (int i = 0; i < GRAPH_N; i++)
		ck_assert_int_eq(got[i], 18);
	host_copy(got, q, sizeof(got));
	for (int i = 0; i < GRAPH_N; i++)
		ck_assert_int_eq(got[i], 0x07070707);
	ck_assert_int_eq(cudaGraphExecDestroy(x), cudaSuccess);
	ck_assert_int_eq(cudaGraphExecDestroy(x), cudaErrorInvalidResourceHandle);
	ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
	cudaGetLastError();
	cudaFree(p), cudaFree(q), cudaFree(r);
	ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
}
END_TEST

/* Each call CUDA refuses while a capture is active fails and invalidates the capture. */
START_TEST(capture_refuses_what_would_synchronise)
{
	cudaStream_t s;
	ck_assert_int_eq(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	int *p = dev_zero(GRAPH_N * 4), v = 1, *extra;
	ck_assert_int_eq(cudaStreamBeginCapture(NULL, cudaStreamCaptureModeGlobal),
			 cudaErrorStreamCaptureUnsupported);
	for (int call = 0; call < 7; call++) {
		cudaGetLastError(); /* the refusals are recorded as the last error */
		ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
		ck_assert_int_eq(st_add_mul(p, 1, 1, GRAPH_N, s), cudaSuccess);
		cudaError_t e = call == 0 ? cudaMemcpy(p, &v, 4, cudaMemcpyHostToDevice)
			      : call == 1 ? cudaMemset(p, 0, 4)
			      : call == 2 ? cudaStreamSynchronize(s)
			      : call == 3 ? cudaMalloc((void **)&extra, 64)
			      : call == 4 ? cudaDeviceSynchronize()
			      : call == 5 ? (cudaError_t)st_add_mul(p, 1, 1, GRAPH_N, NULL)
					  : cudaStreamDestroy(s);
		ck_assert_msg(e != cudaSuccess, "call %d was allowed during a capture", call);
		cudaGraph_t g = (cudaGraph_t)&v;
		cudaError_t end = cudaStreamEndCapture(s, &g);
		if (call == 6) { /* refused without touching the capture */
			ck_assert_int_eq(end, cudaSuccess);
			ck_assert_int_eq(cudaGraphDestroy(g), cudaSuccess);
			continue;
		}
		ck_assert_msg(end == cudaErrorStreamCaptureInvalidated, "call %d: %d", call, end);
		ck_assert_ptr_null(g);
	}
	int got[GRAPH_N];
	host_copy(got, p, sizeof(got)); /* nothing captured ever ran */
	for (int i = 0; i < GRAPH_N; i++)
		ck_assert_int_eq(got[i], 0);
	cudaGetLastError();
	cudaFree(p);
	ck_assert_int_eq(cudaStreamDestroy(s), cudaSuccess);
}
END_TEST

static void graph_outlives_its_buffer(void)
{
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	int *p;
	cudaMalloc((void **)&p, GRAPH_N * 4);
	cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
	st_add_mul(p, 1, 1, GRAPH_N, s);
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaStreamEndCapture(s, &g);
	cudaGraphInstantiate(&x, g, 0);
	cudaFree(p); /* a buffer reallocated after capture, the graph not recaptured */
	cudaGraphLaunch(x, s);
}

START_TEST(mutant_graph_replays_a_freed_buffer)
{
	expect_caught(graph_outlives_its_buffer, "neither device memory nor pinned host memory");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* PTX mma.sync m16n8k32                                                                       */
/* ------------------------------------------------------------------------------------------ */

static void mma_run(int a_unsigned, int mutant, int d[16 * 8], int want[16 * 8])
{
	uint8_t a[16 * 32];
	int8_t b[32 * 8];
	int c[16 * 8];
	for (int i = 0; i < 16 * 32; i++)
		a[i] = (uint8_t)rnd();
	for (int i = 0; i < 32 * 8; i++)
		b[i] = (int8_t)rnd();
	for (int i = 0; i < 16 * 8; i++)
		c[i] = (int)rnd();
	for (int m = 0; m < 16; m++)
		for (int n = 0; n < 8; n++) {
			uint32_t sum = (uint32_t)c[m * 8 + n];
			for (int k = 0; k < 32; k++)
				sum += (uint32_t)((a_unsigned ? (int)a[m * 32 + k] : (int)(int8_t)a[m * 32 + k]) *
						  b[k * 8 + n]);
			want[m * 8 + n] = (int)sum;
		}
	uint8_t *da = dev_copy(a, sizeof(a));
	int8_t *db = dev_copy(b, sizeof(b));
	int *dc = dev_copy(c, sizeof(c)), *dd = dev_zero(16 * 8 * 4);
	ck_assert_int_eq(st_mma_m16n8k32(da, db, dc, dd, a_unsigned, mutant), cudaSuccess);
	host_copy(d, dd, 16 * 8 * 4);
	cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
}

START_TEST(mma_m16n8k32_follows_the_ptx_layout)
{
	int d[16 * 8], want[16 * 8];
	for (int a_unsigned = 0; a_unsigned < 2; a_unsigned++) {
		mma_run(a_unsigned, 0, d, want);
		ck_assert_int_eq(memcmp(d, want, sizeof(d)), 0);
	}
	/* a kernel that puts A's elements in the wrong registers gets a wrong product */
	mma_run(1, 1, d, want);
	ck_assert_int_ne(memcmp(d, want, sizeof(d)), 0);
}
END_TEST

static void mma_lane_absent(void)
{
	int d[16 * 8], want[16 * 8];
	mma_run(1, 2, d, want);
}

START_TEST(mutant_mma_with_a_lane_absent)
{
	expect_caught(mma_lane_absent, "full mask wait"); /* "waits for every lane" or "waits for them" */
}
END_TEST

static Suite *harness_suite(void)
{
	Suite *s = suite_create("cuda_host");
	TCase *k = tcase_create("kernels");
	tcase_set_timeout(k, 60); /* the half conversion's million values take a while under TSan */
	tcase_add_test(k, reverse_through_shared_memory);
	tcase_add_test(k, shared_memory_is_poisoned_at_every_block_start);
	tcase_add_test(k, barrier_order_changes_at_each_barrier);
	tcase_add_test(k, warp_sum_over_full_warps);
	tcase_add_test(k, shuffles_match_the_programming_guide);
	tcase_add_test(k, wmma_int8_tiles_are_exact);
	tcase_add_test(k, wmma_half_tiles_sum_in_float);
	tcase_add_test(k, blocks_writing_their_own_outputs_pass_the_race_check);
	tcase_add_test(k, atomics_count_across_blocks);
	tcase_add_test(k, in_bounds_read);
	tcase_add_test(k, integer_intrinsics);
	tcase_add_test(k, half_conversion_rounds_to_nearest_even);
	tcase_add_test(k, segmented_sort_is_stable);
	tcase_add_test(k, mma_m16n8k32_follows_the_ptx_layout);
	suite_add_tcase(s, k);
	TCase *r = tcase_create("runtime");
	tcase_set_timeout(r, 60); /* ThreadSanitizer takes seconds to make 1024 fibers */
	tcase_add_test(r, device_properties);
	tcase_add_test(r, memory_calls_check_their_ranges);
	tcase_add_test(r, launch_configuration_errors);
	tcase_add_test(r, streams_and_events);
	tcase_add_test(r, graphs_replay_the_captured_work_in_order);
	tcase_add_test(r, capture_refuses_what_would_synchronise);
	tcase_add_test(r, virtual_memory_follows_cuda_rules);
	suite_add_tcase(s, r);
	TCase *m = tcase_create("mutants");
	tcase_add_test(m, mutant_missing_syncthreads);
	tcase_add_test(m, mutant_partial_mask);
	tcase_add_test(m, mutant_lane_returned_before_a_shuffle);
	tcase_add_test(m, mutant_lanes_at_different_collectives);
	tcase_add_test(m, mutant_deadlock);
	tcase_add_test(m, mutant_warp_of_16_lanes);
	tcase_add_test(m, mutant_wmma_load_with_two_pointers);
	tcase_add_test(m, mutant_wmma_misaligned_load);
	tcase_add_test(m, mutant_race_between_blocks);
	tcase_add_test(m, mutant_race_past_the_first_launches);
	tcase_add_test(m, mutant_host_pointer_argument);
	tcase_add_test(m, dynamic_shared_memory_is_refused);
	tcase_add_test(m, mutant_graph_replays_a_freed_buffer);
	tcase_add_test(m, mutant_mma_with_a_lane_absent);
	tcase_add_test(m, mutant_kernel_reads_unmapped_memory);
#ifdef HAVE_ASAN
	tcase_add_test(m, mutant_out_of_bounds_read);
#else
	(void)read_past_the_end;
	printf("note: the out-of-bounds read mutant runs in the AddressSanitizer build (make check's sanitizer pass)\n");
#endif
	suite_add_tcase(s, m);
	return s;
}

int main(void)
{
	setenv("BN_CUDA_HOST_RACECHECK", "1", 1); /* the race mutant needs it, whatever the pass */
	SRunner *sr = srunner_create(harness_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
