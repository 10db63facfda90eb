// SPDX-License-Identifier: MIT
//
// sample.cu — daemon/model/sample.h's semantics on the GPU, so only token ids and the asked-for
// log-probabilities cross back to the host:
//
//  - penalties: the host lists each distinct (row, token) once with what to apply (the same
//    float expressions bn_sample evaluates), one thread per entry;
//  - plain greedy rows: a block argmax (first index of the largest; NaN never wins);
//  - a row a grammar restricts (structured output) names its allowed tokens' bitset: its
//    argmax reads only those, and its ranking puts the others after them all, so every step
//    below runs on the allowed prefix, as bn_sample's masked rows do on the CPU;
//  - rows that are sampled or want log-probabilities: clamped as bn_sample clamps, ranked by a
//    stable segmented radix sort of (rank key, id) with ids ascending (so ties rank the lower
//    id first, the CPU's order), then one warp per row walks the ranking: top_k, the
//    probabilities e^((l - max) / T), top_p's prefix, min_p, and the seeded draw, with sums in
//    double. The walk is a warp scan in ranking order: the same prefix the CPU walks, summed
//    in a different association, so a token can differ from the CPU's only when u falls within
//    rounding of a boundary; on the GPU itself a row's token never depends on its batch.
#include "cuda_kernels.h"
#include "launch.cuh"
#include "reduce.cuh"

#include <cfloat>
#include <cub/device/device_segmented_radix_sort.cuh>

namespace {

constexpr unsigned kRowThreads = 1024;

int launched()
{
	return (int)cudaGetLastError();
}

__global__ void penalize_kernel(float *logits, uint32_t ld, const bn_cuda_penalty *p, uint32_t n)
{
	uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	bn_cuda_penalty e = p[i];
	float *l = logits + (size_t)e.row * ld + e.token;
	float v = *l;
	if (e.repeat != 0.0f)
		v = v > 0.0f ? v / e.repeat : v * e.repeat;
	if (e.subtract != 0.0f)
		v -= e.subtract;
	*l = v;
}

// (value, index) with "a beats b": larger value, or equal and lower index. NaN never beats.
struct Best {
	float v;
	uint32_t i;
};

__device__ inline bool beats(Best a, Best b)
{
	return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ Best warp_best(Best b)
{
	for (unsigned off = 16; off > 0; off /= 2) {
		Best o = { __shfl_xor_sync(0xffffffffu, b.v, off), __shfl_xor_sync(0xffffffffu, b.i, off) };
		if (beats(o, b))
			b = o;
	}
	return b;
}

// A row's allowed tokens (structured output): NULL allows every one.
__device__ inline const uint64_t *row_mask_of(const uint64_t *masks, uint32_t index, uint32_t n)
{
	return masks && index != BN_CUDA_NO_MASK ? masks + (size_t)index * ((n + 63) / 64) : nullptr;
}

__device__ inline bool allowed(const uint64_t *mask, uint32_t i)
{
	return !mask || ((mask[i / 64] >> (i % 64)) & 1u);
}

__device__ uint32_t warp_min(uint32_t v)
{
	for (unsigned off = 16; off > 0; off /= 2) {
		uint32_t o = __shfl_xor_sync(0xffffffffu, v, off);
		v = o < v ? o : v;
	}
	return v;
}

// Each thread scans its ids in increasing order by strict >, so it keeps its first maximum;
// the merge prefers the lower id on equal values. -inf and NaN are never taken: a row of
// only those gives its first allowed id (0 without a mask), as bn_sample's argmax does.
__global__ void argmax_kernel(const float *logits, uint32_t ld, uint32_t n, const uint64_t *masks,
			      const uint32_t *row_mask, uint32_t *token)
{
	__shared__ Best partial[kRowThreads / 32];
	__shared__ uint32_t first_allowed[kRowThreads / 32];
	const float *l = logits + (size_t)blockIdx.x * ld;
	const uint64_t *mask = row_mask_of(masks, row_mask ? row_mask[blockIdx.x] : BN_CUDA_NO_MASK, n);
	Best b = { -INFINITY, UINT32_MAX };
	uint32_t first = UINT32_MAX;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		if (!allowed(mask, i))
			continue;
		first = i < first ? i : first;
		if (l[i] > b.v)
			b = { l[i], i };
	}
	b = warp_best(b);
	first = warp_min(first);
	if (threadIdx.x % 32 == 0) {
		partial[threadIdx.x / 32] = b;
		first_allowed[threadIdx.x / 32] = first;
	}
	__syncthreads();
	if (threadIdx.x != 0)
		return;
	for (unsigned w = 1; w < blockDim.x / 32; w++) {
		if (beats(partial[w], b))
			b = partial[w];
		first = first_allowed[w] < first ? first_allowed[w] : first;
	}
	token[blockIdx.x] = b.i != UINT32_MAX ? b.i : first != UINT32_MAX ? first : 0;
}

// The ranking's key, as sample.c's rank_key: ascending key order is logit descending, with -0
// folded into +0. key_logit inverts it.
__device__ inline uint32_t rank_key(float f)
{
	uint32_t b = __float_as_uint(f == 0.0f ? 0.0f : f);
	b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
	return ~b;
}

__device__ inline float key_logit(uint32_t key)
{
	uint32_t b = ~key;
	b = (b & 0x80000000u) ? (b & 0x7fffffffu) : ~b;
	return __uint_as_float(b);
}

struct RowStats {
	float max;
	uint32_t n;      // tokens ranked: the allowed ones (all without a mask)
	double lse;
};

struct Scratch {
	uint32_t *keys_in, *keys_out, *ids_in, *ids_out;
	int *offsets;
	RowStats *stats;
	void *cub_temp;
	size_t cub_bytes;
};

// The key of a token a row's mask leaves out: after every real key (a clamped logit's key is
// at most rank_key(-FLT_MAX) = 0xff7fffff), so the allowed tokens are the ranking's prefix.
constexpr uint32_t kOutKey = 0xffffffffu;

// Block j: clamps logit row rows[j].logit_row, finds its max and log-normalizer over the
// tokens its mask allows, and writes the (key, id) pairs of segment j.
__global__ void rank_prep_kernel(float *logits, uint32_t ld, uint32_t n,
				 const bn_cuda_sample_row *rows, const uint64_t *masks, Scratch s)
{
	__shared__ Best partial[kRowThreads / 32];
	__shared__ double dpartial[kRowThreads / 32];
	uint32_t j = blockIdx.x;
	float *l = logits + (size_t)rows[j].logit_row * ld;
	const uint64_t *mask = row_mask_of(masks, rows[j].mask, n);
	Best b = { -FLT_MAX, 0 };
	double n_in = 0.0;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
		float v = l[i];
		v = !(v >= -FLT_MAX) ? -FLT_MAX : v > FLT_MAX ? FLT_MAX : v;
		l[i] = v;
		bool in = allowed(mask, i);
		s.keys_in[(size_t)j * n + i] = in ? rank_key(v) : kOutKey;
		s.ids_in[(size_t)j * n + i] = i;
		n_in += in ? 1.0 : 0.0;
		if (in && v > b.v)
			b = { v, i };
	}
	b = warp_best(b);
	if (threadIdx.x % 32 == 0)
		partial[threadIdx.x / 32] = b;
	__syncthreads();
	float max = partial[0].v;
	for (unsigned w = 1; w < blockDim.x / 32; w++)
		max = fmaxf(max, partial[w].v);
	n_in = block_reduce(n_in, dpartial);
	double z = 0.0;
	for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
		if (allowed(mask, i))
			z += (double)expf(l[i] - max);
	z = block_reduce(z, dpartial);
	if (threadIdx.x == 0)
		s.stats[j] = { max, (uint32_t)n_in, log(z) };
	if (j == 0)
		for (uint32_t i = threadIdx.x; i <= gridDim.x; i += blockDim.x)
			s.offsets[i] = (int)(i * n);
}

template <typename T>
__device__ T warp_inclusive_scan(T v)
{
	unsigned lane = threadIdx.x % 32;
	for (unsigned off = 1; off < 32; off *= 2) {
		T o = __shfl_up_sync(0xffffffffu, v, off);
		if (lane >= off)
			v += o;
	}
	return v;
}

// The candidates of a row: the first n_base ranked tokens with their unnormalized
// probabilities (the first one has exactly 1).
struct Ranked {
	const uint32_t *keys, *ids;
	uint32_t n_base;
	float max, t, min_p;
	__device__ float prob(uint32_t i) const { return expf((key_logit(keys[i]) - max) / t); }
};

// The kept tokens: the first `end` ranked ones, less those below min_p; n of them, mass z.
struct Kept {
	uint32_t end, n;
	double z;
};

__device__ Kept totals(const Ranked &r)
{
	unsigned lane = threadIdx.x % 32;
	double z_min = 0.0;
	uint32_t n_min = 0;
	for (uint32_t i = lane; i < r.n_base; i += 32) {
		float p = r.prob(i);
		if (p >= r.min_p) {
			z_min += p;
			n_min++;
		}
	}
	return { r.n_base, warp_sum(n_min), warp_sum(z_min) };
}

__device__ double total_mass(const Ranked &r)
{
	double z = 0.0;
	for (uint32_t i = threadIdx.x % 32; i < r.n_base; i += 32)
		z += r.prob(i);
	return warp_sum(z);
}

// top_p: the shortest prefix whose mass reaches top_p x z, or that holds every token min_p
// keeps (the rest cannot matter); everything when rounding never reaches it.
__device__ Kept cut_top_p(const Ranked &r, float top_p, const Kept &all)
{
	unsigned lane = threadIdx.x % 32;
	double target = (double)top_p * total_mass(r), cum = 0.0, kz = 0.0;
	uint32_t kn = 0;
	for (uint32_t base = 0; base < r.n_base; base += 32) {
		uint32_t i = base + lane;
		float p = i < r.n_base ? r.prob(i) : 0.0f;
		bool keep = i < r.n_base && p >= r.min_p;
		double c = cum + warp_inclusive_scan((double)p);
		double z = kz + warp_inclusive_scan(keep ? (double)p : 0.0);
		uint32_t n = kn + warp_inclusive_scan(keep ? 1u : 0u);
		unsigned hit = __ballot_sync(0xffffffffu, i < r.n_base && (c >= target || n == all.n));
		if (hit) {
			unsigned first = __ffs(hit) - 1;
			return { base + first + 1, __shfl_sync(0xffffffffu, n, first),
				 __shfl_sync(0xffffffffu, z, first) };
		}
		cum = __shfl_sync(0xffffffffu, c, 31);
		kz = __shfl_sync(0xffffffffu, z, 31);
		kn = __shfl_sync(0xffffffffu, n, 31);
	}
	return all;
}

// The draw: the first kept token whose running mass exceeds u x the kept mass, else the last
// kept one.
__device__ uint32_t draw(const Ranked &r, const Kept &k, float u)
{
	unsigned lane = threadIdx.x % 32;
	double target = (double)u * k.z, cum = 0.0;
	int last = -1;
	for (uint32_t base = 0; base < k.end; base += 32) {
		uint32_t i = base + lane;
		float p = i < k.end ? r.prob(i) : 0.0f;
		bool keep = i < k.end && p >= r.min_p;
		double c = cum + warp_inclusive_scan(keep ? (double)p : 0.0);
		unsigned hit = __ballot_sync(0xffffffffu, keep && c > target);
		if (hit)
			return r.ids[base + __ffs(hit) - 1];
		unsigned kept = __ballot_sync(0xffffffffu, keep);
		if (kept)
			last = (int)(base + 31 - __clz(kept));
		cum = __shfl_sync(0xffffffffu, c, 31);
	}
	return last >= 0 ? r.ids[last] : r.ids[0];
}

// One warp per row: log-probabilities from the ranking, then the token.
__global__ void pick_kernel(const float *logits, uint32_t ld, uint32_t n,
			    const bn_cuda_sample_row *rows, Scratch s, bn_cuda_sample_result *out)
{
	uint32_t j = blockIdx.x;
	unsigned lane = threadIdx.x;
	bn_cuda_sample_row row = rows[j];
	RowStats st = s.stats[j];
	uint32_t m = st.n; /* the ranking's prefix of allowed tokens */
	Ranked r = { s.keys_out + (size_t)j * n, s.ids_out + (size_t)j * n,
		     row.top_k && row.top_k < m ? row.top_k : m, st.max, row.temperature, row.min_p };
	bn_cuda_sample_result *o = out + j;
	uint32_t n_top = row.n_top < m ? row.n_top : m;
	for (uint32_t i = lane; i < n_top; i += 32)
		o->top[i] = { r.ids[i], (float)((double)key_logit(r.keys[i]) - st.max - st.lse) };
	uint32_t token;
	if (row.temperature == 0.0f || row.top_k == 1) {
		token = r.ids[0];
	} else {
		Kept k = totals(r);
		if (row.top_p != 0.0f && row.top_p < 1.0f)
			k = cut_top_p(r, row.top_p, k);
		token = draw(r, k, row.u);
	}
	if (lane == 0) {
		o->token = token;
		o->n_top = n_top;
		o->logprob = row.want_logprob
				     ? (float)((double)logits[(size_t)row.logit_row * ld + token] - st.max - st.lse)
				     : 0.0f;
	}
}

size_t align_up(size_t v)
{
	return (v + 255) / 256 * 256;
}

// Carves the scratch; cub_bytes is what is left for the sort's own temporary storage.
Scratch carve(void *base, size_t bytes, uint32_t n_vocab, uint32_t n_rows)
{
	Scratch s;
	size_t pairs = (size_t)n_vocab * n_rows * sizeof(uint32_t), at = 0;
	char *p = static_cast<char *>(base);
	s.keys_in = reinterpret_cast<uint32_t *>(p + at);
	at += align_up(pairs);
	s.keys_out = reinterpret_cast<uint32_t *>(p + at);
	at += align_up(pairs);
	s.ids_in = reinterpret_cast<uint32_t *>(p + at);
	at += align_up(pairs);
	s.ids_out = reinterpret_cast<uint32_t *>(p + at);
	at += align_up(pairs);
	s.offsets = reinterpret_cast<int *>(p + at);
	at += align_up((n_rows + 1) * sizeof(int));
	s.stats = reinterpret_cast<RowStats *>(p + at);
	at += align_up(n_rows * sizeof(RowStats));
	s.cub_temp = p + at;
	s.cub_bytes = bytes > at ? bytes - at : 0;
	return s;
}

size_t sort_temp_bytes(uint32_t n_vocab, uint32_t n_rows)
{
	size_t need = 0;
	int *offsets = nullptr;
	cub::DeviceSegmentedRadixSort::SortPairs(nullptr, need, (const uint32_t *)nullptr,
						 (uint32_t *)nullptr, (const uint32_t *)nullptr,
						 (uint32_t *)nullptr, (int64_t)n_vocab * n_rows,
						 (int64_t)n_rows, offsets, offsets + 1);
	return need;
}

} // namespace

extern "C" int bn_cuda_penalize(float *logits, uint32_t ld, const bn_cuda_penalty *p, uint32_t n,
				cudaStream_t stream)
{
	if (n == 0)
		return 0;
	BN_LAUNCH(penalize_kernel, (n + 255) / 256, 256, 0, stream)(logits, ld, p, n);
	return launched();
}

extern "C" int bn_cuda_argmax(const float *logits, uint32_t ld, uint32_t n_vocab, uint32_t n_rows,
			      const uint64_t *masks, const uint32_t *row_mask, uint32_t *token,
			      cudaStream_t stream)
{
	if (n_rows == 0)
		return 0;
	BN_LAUNCH(argmax_kernel, n_rows, kRowThreads, 0, stream)(logits, ld, n_vocab, masks, row_mask,
								   token);
	return launched();
}

extern "C" size_t bn_cuda_sample_scratch_bytes(uint32_t n_vocab, uint32_t n_rows)
{
	size_t pairs = (size_t)n_vocab * n_rows * sizeof(uint32_t);
	return 4 * align_up(pairs) + align_up((n_rows + 1) * sizeof(int)) +
	       align_up(n_rows * sizeof(RowStats)) + align_up(sort_temp_bytes(n_vocab, n_rows));
}

extern "C" int bn_cuda_sample(float *logits, uint32_t ld, uint32_t n_vocab,
			      const bn_cuda_sample_row *rows, uint32_t n_rows, const uint64_t *masks,
			      void *scratch, size_t scratch_bytes, bn_cuda_sample_result *out,
			      cudaStream_t stream)
{
	if (n_rows == 0)
		return 0;
	if (scratch_bytes < bn_cuda_sample_scratch_bytes(n_vocab, n_rows))
		return (int)cudaErrorInvalidValue;
	Scratch s = carve(scratch, scratch_bytes, n_vocab, n_rows);
	BN_LAUNCH(rank_prep_kernel, n_rows, kRowThreads, 0, stream)(logits, ld, n_vocab, rows, masks, s);
	int rc = launched();
	if (rc)
		return rc;
	size_t temp = s.cub_bytes;
	rc = (int)cub::DeviceSegmentedRadixSort::SortPairs(
		s.cub_temp, temp, s.keys_in, s.keys_out, s.ids_in, s.ids_out,
		(int64_t)n_vocab * n_rows, (int64_t)n_rows, s.offsets, s.offsets + 1, 0, 32, stream);
	if (rc)
		return rc;
	BN_LAUNCH(pick_kernel, n_rows, 32, 0, stream)(logits, ld, n_vocab, rows, s, out);
	return launched();
}
