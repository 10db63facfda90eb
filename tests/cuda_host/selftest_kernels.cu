// SPDX-License-Identifier: MIT
//
// selftest_kernels.cu — the kernels test_harness.c runs to check the CUDA host harness: small
// correct ones with host-side oracles in the test, and the mutants each check must catch.
// Device code as kernels/cuda writes it, compiled the same way (g++, cuda_runtime.h forced in,
// built into a shared object of its own).
#include "selftest.h"

#include <cuda_fp16.h>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <mma.h>

namespace {

constexpr unsigned kMaxThreads = 256;

int launched()
{
	return (int)cudaGetLastError();
}

__global__ void reverse_kernel(const int *in, int *out, int mutant)
{
	__shared__ int slot[kMaxThreads];
	unsigned t = threadIdx.x, n = blockDim.x;
	slot[t] = in[blockIdx.x * n + t];
	if (!mutant)
		__syncthreads();
	out[blockIdx.x * n + t] = slot[n - 1 - t];
}

__global__ void warp_sum_kernel(const int *in, int *out, uint32_t mask, unsigned absent_lane)
{
	unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
	if (threadIdx.x % 32 == absent_lane)
		return;
	int v = in[i];
	for (int off = 16; off > 0; off /= 2)
		v += __shfl_xor_sync(mask, v, off);
	out[i] = v;
}

__global__ void shuffles_kernel(uint32_t *out, uint32_t *ballot, int src, unsigned delta,
				int lane_mask, int width)
{
	uint32_t lane = threadIdx.x;
	out[4 * lane + 0] = __shfl_sync(0xffffffffu, lane, src, width);
	out[4 * lane + 1] = __shfl_up_sync(0xffffffffu, lane, delta, width);
	out[4 * lane + 2] = __shfl_down_sync(0xffffffffu, lane, delta, width);
	out[4 * lane + 3] = __shfl_xor_sync(0xffffffffu, lane, lane_mask, width);
	unsigned b = __ballot_sync(0xffffffffu, lane % 3 == 0);
	if (lane == 0)
		*ballot = b;
}

__global__ void divergent_kernel(int *out)
{
	int v = (int)threadIdx.x;
	if (threadIdx.x < 16)
		v = __shfl_xor_sync(0xffffffffu, v, 1);
	else
		v = __shfl_sync(0xffffffffu, v, 0);
	out[threadIdx.x] = v;
}

__global__ void deadlock_kernel(int *out)
{
	int v = (int)threadIdx.x;
	if (threadIdx.x < 48)
		__syncthreads();
	else
		v = __shfl_xor_sync(0xffffffffu, v, 1);
	out[threadIdx.x] = v;
}

__global__ void partial_warp_kernel(int *out)
{
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void blocks_write_kernel(int *out, int overlap)
{
	if (threadIdx.x == 0)
		out[overlap ? 0 : blockIdx.x] = (int)blockIdx.x + 1;
}

__global__ void read_kernel(const int *in, int *out, unsigned offset)
{
	out[threadIdx.x] = in[threadIdx.x + offset];
}

__global__ void atomics_kernel(const uint32_t *in, int *hist, uint32_t *extremes, int *cas_winners)
{
	__shared__ int slot;
	uint32_t v = in[blockIdx.x * blockDim.x + threadIdx.x];
	atomicAdd(&hist[v % 16], 1);
	atomicMax(&extremes[0], v);
	atomicMin(&extremes[1], v);
	if (blockIdx.x != 0)
		return;
	if (threadIdx.x == 0)
		slot = -1;
	__syncthreads();
	if (atomicCAS(&slot, -1, (int)threadIdx.x) == -1)
		atomicAdd(&cas_winners[0], 1);
	atomicAdd(&cas_winners[1], atomicExch(&cas_winners[2], 1));
}

__global__ void poison_kernel(int *ints, float *floats)
{
	__shared__ int si[64];
	__shared__ float sf[64];
	if (threadIdx.x == 0) {
		ints[blockIdx.x] = si[5];
		floats[blockIdx.x] = sf[7];
	}
	__syncthreads();
	si[threadIdx.x] = 42;
	sf[threadIdx.x] = 42.0f;
}

__global__ void barrier_order_kernel(uint32_t *order1, uint32_t *order2)
{
	__shared__ uint32_t passed[2];
	if (threadIdx.x == 0)
		passed[0] = passed[1] = 0;
	__syncthreads();
	order1[threadIdx.x] = atomicAdd(&passed[0], 1u);
	__syncthreads();
	order2[threadIdx.x] = atomicAdd(&passed[1], 1u);
}

template <typename T, typename Acc, typename LayoutA, typename LayoutB>
__global__ void wmma_kernel(const T *a, const T *b, const Acc *c, Acc *d)
{
	using namespace nvcuda;
	__shared__ __align__(32) Acc stage[256];
	wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 16, Acc> acc;
	wmma::fill_fragment(acc, 0);
	for (unsigned e = threadIdx.x; e < 256; e += 32)
		stage[e] = c[e];
	__syncwarp();
	wmma::fragment<wmma::accumulator, 16, 16, 16, Acc> fc;
	wmma::load_matrix_sync(fc, stage, 16, wmma::mem_row_major);
	wmma::load_matrix_sync(fa, a, 16);
	wmma::load_matrix_sync(fb, b, 16);
	wmma::mma_sync(acc, fa, fb, fc);
	wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

__global__ void wmma_bad_load_kernel(const int8_t *a, int *d, int mutant)
{
	using namespace nvcuda;
	wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
	const signed char *p = reinterpret_cast<const signed char *>(a);
	if (mutant == 1)
		p += 32 * (threadIdx.x % 2);
	else
		p += 2;
	wmma::load_matrix_sync(fa, p, 16);
	d[threadIdx.x] = fa.x[threadIdx.x];
}

__global__ void empty_kernel() {}

__global__ void host_pointer_kernel(int *p)
{
	p[threadIdx.x] = 1;
}

template <typename T, typename Acc, typename LayoutA, typename LayoutB>
int run_wmma(const T *a, const T *b, const Acc *c, Acc *d)
{
	BN_LAUNCH((wmma_kernel<T, Acc, LayoutA, LayoutB>), 1, 32, 0, 0)(a, b, c, d);
	return launched();
}

} // namespace

extern "C" int st_reverse(const int *in, int *out, unsigned n, unsigned blocks, int mutant)
{
	BN_LAUNCH(reverse_kernel, blocks, n, 0, 0)(in, out, mutant);
	return launched();
}

extern "C" int st_warp_sum(const int *in, int *out, unsigned threads, unsigned blocks, uint32_t mask,
			   unsigned absent_lane)
{
	BN_LAUNCH(warp_sum_kernel, blocks, threads, 0, 0)(in, out, mask, absent_lane);
	return launched();
}

extern "C" int st_shuffles(uint32_t *out, uint32_t *ballot, int src, unsigned delta, int lane_mask,
			   int width)
{
	BN_LAUNCH(shuffles_kernel, 1, 32, 0, 0)(out, ballot, src, delta, lane_mask, width);
	return launched();
}

extern "C" int st_divergent_shuffle(int *out)
{
	BN_LAUNCH(divergent_kernel, 1, 32, 0, 0)(out);
	return launched();
}

extern "C" int st_deadlock(int *out)
{
	BN_LAUNCH(deadlock_kernel, 1, 64, 0, 0)(out);
	return launched();
}

extern "C" int st_partial_warp(int *out)
{
	BN_LAUNCH(partial_warp_kernel, 1, 48, 0, 0)(out);
	return launched();
}

extern "C" int st_blocks_write(int *out, unsigned blocks, int overlap)
{
	BN_LAUNCH(blocks_write_kernel, blocks, 32, 0, 0)(out, overlap);
	return launched();
}

extern "C" int st_read(const int *in, int *out, unsigned n, unsigned offset)
{
	BN_LAUNCH(read_kernel, 1, n, 0, 0)(in, out, offset);
	return launched();
}

extern "C" int st_atomics(const uint32_t *in, unsigned threads, unsigned blocks, int *hist,
			  uint32_t *extremes, int *cas_winners)
{
	BN_LAUNCH(atomics_kernel, blocks, threads, 0, 0)(in, hist, extremes, cas_winners);
	return launched();
}

extern "C" int st_shared_poison(int *ints, float *floats)
{
	BN_LAUNCH(poison_kernel, 2, 64, 0, 0)(ints, floats);
	return launched();
}

extern "C" int st_barrier_order(uint32_t *order1, uint32_t *order2, unsigned n)
{
	BN_LAUNCH(barrier_order_kernel, 1, n, 0, 0)(order1, order2);
	return launched();
}

extern "C" int st_wmma_s8(const int8_t *a, const int8_t *b, const int *c, int *d, int a_row_major)
{
	using namespace nvcuda::wmma;
	const signed char *sa = reinterpret_cast<const signed char *>(a);
	const signed char *sb = reinterpret_cast<const signed char *>(b);
	return a_row_major ? run_wmma<signed char, int, row_major, col_major>(sa, sb, c, d)
			   : run_wmma<signed char, int, col_major, row_major>(sa, sb, c, d);
}

extern "C" int st_wmma_f16(const uint16_t *a, const uint16_t *b, const float *c, float *d,
			   int a_row_major)
{
	using namespace nvcuda::wmma;
	const __half *ha = reinterpret_cast<const __half *>(a);
	const __half *hb = reinterpret_cast<const __half *>(b);
	return a_row_major ? run_wmma<__half, float, row_major, col_major>(ha, hb, c, d)
			   : run_wmma<__half, float, col_major, row_major>(ha, hb, c, d);
}

extern "C" int st_wmma_bad_load(const int8_t *a, int *d, int mutant)
{
	BN_LAUNCH(wmma_bad_load_kernel, 1, 32, 0, 0)(a, d, mutant);
	return launched();
}

extern "C" uint16_t st_float2half_rn(float f)
{
	return __half_as_ushort(__float2half_rn(f));
}

extern "C" float st_half2float(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

extern "C" int st_dp4a(int a, int b, int c)
{
	return __dp4a(a, b, c);
}

extern "C" unsigned st_dp4a_u(unsigned a, unsigned b, unsigned c)
{
	return __dp4a(a, b, c);
}

extern "C" unsigned st_vsub4(unsigned a, unsigned b)
{
	return __vsub4(a, b);
}

extern "C" int st_ffs(int x)
{
	return __ffs(x);
}

extern "C" int st_clz(int x)
{
	return __clz(x);
}

extern "C" int st_sort_pairs(const uint32_t *keys_in, uint32_t *keys_out, const uint32_t *values_in,
			     uint32_t *values_out, int n, const int *offsets, int n_segments,
			     int begin_bit, int end_bit)
{
	size_t bytes = 0;
	int rc = (int)cub::DeviceSegmentedRadixSort::SortPairs(
		nullptr, bytes, keys_in, keys_out, values_in, values_out, n, n_segments, offsets,
		offsets + 1, begin_bit, end_bit, 0);
	void *scratch = nullptr;
	if (rc == 0)
		rc = (int)cudaMalloc(&scratch, bytes);
	if (rc == 0)
		rc = (int)cub::DeviceSegmentedRadixSort::SortPairs(
			scratch, bytes, keys_in, keys_out, values_in, values_out, n, n_segments, offsets,
			offsets + 1, begin_bit, end_bit, 0);
	cudaFree(scratch);
	return rc;
}

extern "C" int st_launch(unsigned threads, unsigned blocks)
{
	BN_LAUNCH(empty_kernel, blocks, threads, 0, 0)();
	return launched();
}

extern "C" int st_launch_dynamic_shared(unsigned bytes)
{
	BN_LAUNCH(empty_kernel, 1, 32, bytes, 0)();
	return launched();
}

extern "C" int st_host_pointer_argument(int *host)
{
	BN_LAUNCH(host_pointer_kernel, 1, 32, 0, 0)(host);
	return launched();
}
