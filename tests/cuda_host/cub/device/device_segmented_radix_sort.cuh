// SPDX-License-Identifier: MIT
//
// cub/device/device_segmented_radix_sort.cuh (CUDA host harness) — CUB's
// DeviceSegmentedRadixSort::SortPairs with CUB's contract: the first call (no temporary
// storage) says how much it needs, the second sorts each segment [begin[s], end[s]) of
// (key, value) pairs by the key bits [begin_bit, end_bit), stably, into the output arrays,
// using the temporary storage it asked for. It runs as a harness kernel on the stream, one
// block of one thread per segment: a least-significant-digit radix sort, 8 bits a pass,
// ping-ponging through the temporary storage so that the last pass writes the output.
#ifndef BN_CUDA_HOST_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH
#define BN_CUDA_HOST_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH

#include "../../cuda_runtime.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cub {

namespace harness_detail {

constexpr int kDigitBits = 8;
constexpr size_t kAlign = 256;

inline size_t align_up(size_t v)
{
	return (v + kAlign - 1) / kAlign * kAlign;
}

template <typename KeyT, typename ValueT>
__device__ void sort_pass(const KeyT *keys, const ValueT *values, KeyT *keys_to, ValueT *values_to,
			  int64_t lo, int64_t hi, int shift, int bits)
{
	KeyT mask = (KeyT)((1u << bits) - 1);
	int64_t start[1 << kDigitBits] = { 0 };
	for (int64_t i = lo; i < hi; i++)
		start[(keys[i] >> shift) & mask]++;
	int64_t at = lo;
	for (int d = 0; d < (1 << kDigitBits); d++) {
		int64_t n = start[d];
		start[d] = at;
		at += n;
	}
	for (int64_t i = lo; i < hi; i++) {
		int64_t to = start[(keys[i] >> shift) & mask]++;
		keys_to[to] = keys[i];
		values_to[to] = values[i];
	}
}

template <typename KeyT, typename ValueT, typename BeginIt, typename EndIt>
__global__ void segment_sort_kernel(const KeyT *keys_in, KeyT *keys_out, const ValueT *values_in,
				    ValueT *values_out, KeyT *keys_tmp, ValueT *values_tmp,
				    BeginIt begin, EndIt end, int begin_bit, int end_bit)
{
	int64_t lo = begin[blockIdx.x], hi = end[blockIdx.x];
	if (hi <= lo)
		return;
	int passes = (end_bit - begin_bit + kDigitBits - 1) / kDigitBits;
	if (passes == 0) {
		for (int64_t i = lo; i < hi; i++) {
			keys_out[i] = keys_in[i];
			values_out[i] = values_in[i];
		}
		return;
	}
	const KeyT *keys = keys_in;
	const ValueT *values = values_in;
	bool to_out = passes % 2 == 1; // the last pass must land in the output
	for (int p = 0; p < passes; p++, to_out = !to_out) {
		int shift = begin_bit + p * kDigitBits;
		int bits = end_bit - shift < kDigitBits ? end_bit - shift : kDigitBits;
		KeyT *keys_to = to_out ? keys_out : keys_tmp;
		ValueT *values_to = to_out ? values_out : values_tmp;
		sort_pass(keys, values, keys_to, values_to, lo, hi, shift, bits);
		keys = keys_to;
		values = values_to;
	}
}

} // namespace harness_detail

struct DeviceSegmentedRadixSort {
	template <typename KeyT, typename ValueT, typename BeginOffsetIteratorT, typename EndOffsetIteratorT>
	static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes,
				     const KeyT *d_keys_in, KeyT *d_keys_out, const ValueT *d_values_in,
				     ValueT *d_values_out, int num_items, int num_segments,
				     BeginOffsetIteratorT d_begin_offsets,
				     EndOffsetIteratorT d_end_offsets, int begin_bit = 0,
				     int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0)
	{
		static_assert(std::is_unsigned<KeyT>::value, "the harness sorts unsigned keys");
		using namespace harness_detail;
		if (num_items < 0 || num_segments < 0 || begin_bit < 0 || begin_bit > end_bit ||
		    end_bit > (int)sizeof(KeyT) * 8)
			return cudaErrorInvalidValue;
		size_t keys_bytes = align_up((size_t)num_items * sizeof(KeyT));
		size_t need = keys_bytes + align_up((size_t)num_items * sizeof(ValueT));
		if (!d_temp_storage) {
			temp_storage_bytes = need;
			return cudaSuccess;
		}
		if (temp_storage_bytes < need)
			return cudaErrorInvalidValue;
		if (num_segments == 0)
			return cudaSuccess;
		KeyT *keys_tmp = static_cast<KeyT *>(d_temp_storage);
		ValueT *values_tmp = reinterpret_cast<ValueT *>(static_cast<char *>(d_temp_storage) + keys_bytes);
		auto kernel = &segment_sort_kernel<KeyT, ValueT, BeginOffsetIteratorT, EndOffsetIteratorT>;
		::bn_cuda_host::launch(kernel, "cub::DeviceSegmentedRadixSort::SortPairs", (unsigned)num_segments,
				       1, 0, stream)(d_keys_in, d_keys_out, d_values_in, d_values_out, keys_tmp,
						     values_tmp, d_begin_offsets, d_end_offsets, begin_bit, end_bit);
		return cudaPeekAtLastError();
	}
};

} // namespace cub

#endif // BN_CUDA_HOST_CUB_DEVICE_SEGMENTED_RADIX_SORT_CUH
