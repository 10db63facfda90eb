/* SPDX-License-Identifier: MIT */
/* probe_x86.c — bench-model's machine probes on x86-64 (probes.h): AVX-512 loops where the
 * selected kernels are AVX-512's, else AVX2's; the int8 peak is that of the selected kernels'
 * own instructions, so a run with BITNET_KERNELS=avx2 on an AVX-512 machine measures the AVX2
 * kernels against AVX2's peak. */
#include "probes.h"

#include <immintrin.h>
#include <string.h>

static int bench_avx512;
enum peak_kind { PEAK_MADDUBS, PEAK_VNNI256, PEAK_VNNI512 };
static enum peak_kind peak_loop;

int probe_select(const struct bn_kernels *k, const char **why)
{
	struct bn_cpu_features cpu;
	bn_cpu_detect(&cpu);
	if (!cpu.avx2_fma_f16c) {
		*why = "the bandwidth and peak loops need AVX2 or AVX-512, which this CPU lacks";
		return -1;
	}
	bench_avx512 = !strcmp(k->name, "avx512vnni");
	peak_loop = !strcmp(k->name, "avx512vnni") ? PEAK_VNNI512
		    : !strcmp(k->name, "avxvnni") ? PEAK_VNNI256 : PEAK_MADDUBS;
	return 0;
}

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n)
{
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 256 <= n; i += 256) {
		a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
		a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 64));
		a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 128));
		a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 192));
	}
	a0 = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
	return (uint64_t)_mm512_reduce_add_epi64(a0);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 128 <= n; i += 128) {
		a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
	return (uint64_t)_mm256_extract_epi64(a0, 0) ^ (uint64_t)_mm256_extract_epi64(a0, 3);
}

uint64_t probe_read(const uint8_t *p, size_t n)
{
	return bench_avx512 ? read_avx512(p, n) : read_avx2(p, n);
}

__attribute__((target("avx512f,avx512vnni"))) static int32_t vnni_loop(uint64_t iters)
{
	/* PEAK_CHAINS independent chains, more than the vpdpbusd latency times its throughput. */
	__m512i a[PEAK_CHAINS], w = _mm512_set1_epi8(1), x = _mm512_set1_epi8(3);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = _mm512_set1_epi32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = _mm512_dpbusd_epi32(a[i], w, x);
	__m512i s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = _mm512_add_epi32(s, a[i]);
	return _mm512_reduce_add_epi32(s);
}

/* The AVX2 kernels' int8 step: vpmaddubsw into int16 pairs, vpmaddwd by ones into int32, an
 * add; 32 multiply-adds per three instructions. */
__attribute__((target("avx2"))) static int32_t madd_loop_avx2(uint64_t iters)
{
	__m256i a[PEAK_CHAINS], u = _mm256_set1_epi8(1), s8 = _mm256_set1_epi8(-1);
	const __m256i ones = _mm256_set1_epi16(1);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = _mm256_set1_epi32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s8), ones));
	__m256i s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = _mm256_add_epi32(s, a[i]);
	return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

/* The AVX2 head screen's int16 step (kernels_avx2.c: i8_dots): vpmaddwd, an add; 16
 * multiply-adds per two instructions. */
__attribute__((target("avx2"))) static int32_t madd16_loop_avx2(uint64_t iters)
{
	__m256i a[PEAK_CHAINS], w = _mm256_set1_epi16(3), x = _mm256_set1_epi16(-5);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = _mm256_set1_epi32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(w, x));
	__m256i s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = _mm256_add_epi32(s, a[i]);
	return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

/* AVX-VNNI: vpdpbusd on ymm registers, 32 multiply-adds per instruction. */
__attribute__((target("avx2,avxvnni"))) static int32_t vnni256_loop(uint64_t iters)
{
	__m256i a[PEAK_CHAINS], w = _mm256_set1_epi8(1), x = _mm256_set1_epi8(3);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = _mm256_set1_epi32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = _mm256_dpbusd_avx_epi32(a[i], w, x);
	__m256i s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = _mm256_add_epi32(s, a[i]);
	return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(uint64_t iters)
{
	__m256 a[PEAK_CHAINS], w = _mm256_set1_ps(0.5f), x = _mm256_set1_ps(0.25f);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = _mm256_set1_ps((float)i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = _mm256_fmadd_ps(a[i], w, x);
	__m256 s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = _mm256_add_ps(s, a[i]);
	return _mm256_cvtss_f32(s);
}

__attribute__((target("avx512f,fma"))) static float fma_loop(uint64_t iters)
{
	__m512 a[PEAK_CHAINS], w = _mm512_set1_ps(0.5f), x = _mm512_set1_ps(0.25f);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = _mm512_set1_ps((float)i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++) /* a = a * 0.5 + 0.25 stays finite */
			a[i] = _mm512_fmadd_ps(a[i], w, x);
	__m512 s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = _mm512_add_ps(s, a[i]);
	return _mm512_reduce_add_ps(s);
}

float probe_fma_loop(uint64_t iters)
{
	return bench_avx512 ? fma_loop(iters) : fma_loop_avx2(iters);
}

double probe_fma_lanes_per_step(void)
{
	return bench_avx512 ? 16 : 8;
}

int32_t probe_int16_loop(uint64_t iters)
{
	return madd16_loop_avx2(iters);
}

double probe_int16_macs_per_step(void)
{
	return 16;
}

const char *probe_int16_name(void)
{
	return "avx2";
}

int32_t probe_int8_loop(uint64_t iters)
{
	return peak_loop == PEAK_VNNI512   ? vnni_loop(iters)
	       : peak_loop == PEAK_VNNI256 ? vnni256_loop(iters)
					   : madd_loop_avx2(iters);
}

/* Each zmm vpdpbusd is 64, each ymm one or AVX2 step 32. */
double probe_int8_macs_per_step(void)
{
	return peak_loop == PEAK_VNNI512 ? 64 : 32;
}

/* x86-64's variants are measured one selection at a time (BITNET_KERNELS): none by name. */
int32_t (*probe_int8_loop_of(const char *variant, double *macs_per_step))(uint64_t iters)
{
	(void)variant;
	(void)macs_per_step;
	return NULL;
}
