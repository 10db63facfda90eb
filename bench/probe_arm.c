/* SPDX-License-Identifier: MIT */
/* probe_arm.c — bench-model's machine probes on aarch64 (probes.h): 128-bit Advanced SIMD
 * loops, the int8 peak that of the selected table's own instruction (smlal for neon, sdot for
 * dotprod, smmla for i8mm), and each of the three by name where the CPU has it, so that one run
 * shows what each generation of the instructions gives on this core. */
#include "probes.h"

#include <arm_neon.h>
#include <string.h>

static const char *selected = "neon";

int probe_select(const struct bn_kernels *k, const char **why)
{
	struct bn_cpu_features cpu;
	bn_cpu_detect(&cpu);
	if (!cpu.neon) {
		*why = "the bandwidth and peak loops need Advanced SIMD, which this CPU lacks";
		return -1;
	}
	/* the scalar table is measured against NEON's limits, as on x86-64 against AVX2's */
	selected = strcmp(k->name, "scalar") ? k->name : "neon";
	return 0;
}

/* 256 bytes a step in four 64-byte loads (ld1 of four registers). */
uint64_t probe_read(const uint8_t *p, size_t n)
{
	uint8x16_t a0 = vdupq_n_u8(0), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i + 256 <= n; i += 256) {
		uint8x16x4_t v0 = vld1q_u8_x4(p + i), v1 = vld1q_u8_x4(p + i + 64);
		uint8x16x4_t v2 = vld1q_u8_x4(p + i + 128), v3 = vld1q_u8_x4(p + i + 192);
		a0 = veorq_u8(a0, veorq_u8(veorq_u8(v0.val[0], v0.val[1]), veorq_u8(v0.val[2], v0.val[3])));
		a1 = veorq_u8(a1, veorq_u8(veorq_u8(v1.val[0], v1.val[1]), veorq_u8(v1.val[2], v1.val[3])));
		a2 = veorq_u8(a2, veorq_u8(veorq_u8(v2.val[0], v2.val[1]), veorq_u8(v2.val[2], v2.val[3])));
		a3 = veorq_u8(a3, veorq_u8(veorq_u8(v3.val[0], v3.val[1]), veorq_u8(v3.val[2], v3.val[3])));
	}
	uint64x2_t s = vreinterpretq_u64_u8(veorq_u8(veorq_u8(a0, a1), veorq_u8(a2, a3)));
	return vgetq_lane_u64(s, 0) ^ vgetq_lane_u64(s, 1);
}

/* The NEON kernels' step: smlal, 8 int8 multiply-adds into 16-bit lanes (their sums are
 * widened only every few chunks). */
static int32_t smlal_loop(uint64_t iters)
{
	int16x8_t a[PEAK_CHAINS];
	const int8x8_t w = vdup_n_s8(1), x = vdup_n_s8(3);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = vdupq_n_s16((int16_t)i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = vmlal_s8(a[i], w, x);
	int16x8_t s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = vaddq_s16(s, a[i]);
	return vaddlvq_s16(s);
}

/* sdot: 16 multiply-adds, four into each 32-bit lane. */
__attribute__((target("arch=armv8.2-a+dotprod"))) static int32_t sdot_loop(uint64_t iters)
{
	int32x4_t a[PEAK_CHAINS];
	const int8x16_t w = vdupq_n_s8(1), x = vdupq_n_s8(3);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = vdupq_n_s32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = vdotq_s32(a[i], w, x);
	int32x4_t s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = vaddq_s32(s, a[i]);
	return vaddvq_s32(s);
}

/* smmla: a 2x8 by 8x2 block product, 32 multiply-adds. */
__attribute__((target("arch=armv8.2-a+dotprod+i8mm"))) static int32_t smmla_loop(uint64_t iters)
{
	int32x4_t a[PEAK_CHAINS];
	const int8x16_t w = vdupq_n_s8(1), x = vdupq_n_s8(3);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = vdupq_n_s32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = vmmlaq_s32(a[i], w, x);
	int32x4_t s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = vaddq_s32(s, a[i]);
	return vaddvq_s32(s);
}

int32_t (*probe_int8_loop_of(const char *variant, double *macs_per_step))(uint64_t iters)
{
	struct bn_cpu_features cpu;
	bn_cpu_detect(&cpu);
	if (!strcmp(variant, "neon") && cpu.neon) {
		*macs_per_step = 8;
		return smlal_loop;
	}
	if (!strcmp(variant, "dotprod") && cpu.dotprod) {
		*macs_per_step = 16;
		return sdot_loop;
	}
	if (!strcmp(variant, "i8mm") && cpu.i8mm) {
		*macs_per_step = 32;
		return smmla_loop;
	}
	return NULL;
}

int32_t probe_int8_loop(uint64_t iters)
{
	double macs;
	return probe_int8_loop_of(selected, &macs)(iters);
}

double probe_int8_macs_per_step(void)
{
	double macs = 0;
	probe_int8_loop_of(selected, &macs);
	return macs;
}

float probe_fma_loop(uint64_t iters)
{
	float32x4_t a[PEAK_CHAINS];
	const float32x4_t w = vdupq_n_f32(0.5f), x = vdupq_n_f32(0.25f);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = vdupq_n_f32((float)i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++) /* a = a * 0.5 + 0.25 stays finite */
			a[i] = vfmaq_f32(x, a[i], w);
	float32x4_t s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = vaddq_f32(s, a[i]);
	return vaddvq_f32(s);
}

double probe_fma_lanes_per_step(void)
{
	return 4;
}

/* The head screen's step (common_neon.c: i8_dots): smlal of int16, 4 multiply-adds. */
int32_t probe_int16_loop(uint64_t iters)
{
	int32x4_t a[PEAK_CHAINS];
	const int16x4_t w = vdup_n_s16(3), x = vdup_n_s16(-5);
	for (int i = 0; i < PEAK_CHAINS; i++)
		a[i] = vdupq_n_s32(i);
	for (uint64_t it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < PEAK_CHAINS; i++)
			a[i] = vmlal_s16(a[i], w, x);
	int32x4_t s = a[0];
	for (int i = 1; i < PEAK_CHAINS; i++)
		s = vaddq_s32(s, a[i]);
	return vaddvq_s32(s);
}

double probe_int16_macs_per_step(void)
{
	return 4;
}

const char *probe_int16_name(void)
{
	return "neon";
}
