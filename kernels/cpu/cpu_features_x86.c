/* SPDX-License-Identifier: MIT */
/* cpu_features_x86.c — cpuid at start-up picks the x86-64 kernel table. */
#include "kernels.h"

#include <cpuid.h>
#include <stdlib.h>
#include <string.h>

/* XCR0 says which register states the OS saves: a CPU flag alone is not enough. */
static uint64_t read_xcr0(void)
{
	uint32_t lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

void bn_cpu_detect(struct bn_cpu_features *f)
{
	memset(f, 0, sizeof(*f));
	uint32_t a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return;
	int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
	if (!osxsave)
		return;
	uint64_t xcr0 = read_xcr0();
	int ymm_saved = (xcr0 & 0x6) == 0x6;
	int zmm_saved = (xcr0 & 0xe6) == 0xe6;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return;
	int avx2 = (b >> 5) & 1;
	int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1;
	int avx512vl = (b >> 31) & 1, avx512vnni = (c >> 11) & 1, avx512vbmi = (c >> 1) & 1;
	f->avx2_fma_f16c = ymm_saved && avx2 && fma && f16c;
	f->avx512_vnni = f->avx2_fma_f16c && zmm_saved && avx512f && avx512dq && avx512bw &&
			 avx512vl && avx512vnni;
	f->avx512_vbmi = f->avx512_vnni && avx512vbmi;
	/* AVX-VNNI: vpdpbusd on ymm registers in VEX form (leaf 7, subleaf 1, eax bit 4): Intel
	 * client CPUs since Alder Lake, Sapphire Rapids, Zen 5 */
	uint32_t a1, b1, c1, d1;
	if (f->avx2_fma_f16c && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1))
		f->avx_vnni = (a1 >> 4) & 1;
}

const char *const bn_kernel_variant_names[BN_KERNEL_VARIANTS] = { "scalar", "avx2", "avxvnni",
								   "avx512vnni" };

bn_t3_gemm_fn bn_t3_kernel(const struct bn_kernels *k)
{
	if (!k) /* bn_kernels_select's answer for a variant this CPU cannot run */
		return NULL;
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	/* by name: a copy of the AVX-512 table with other element-wise parts (bench-model's
	 * side by side) still runs on the AVX-512 registers the T3 kernel needs */
	return strcmp(k->name, bn_kernels_avx512.name) == 0 && f.avx512_vbmi ? bn_t3_gemm_vbmi : NULL;
}

const struct bn_kernels *bn_kernels_select(const char *force)
{
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	if (!force)
		force = getenv("BITNET_KERNELS");
	if (force && strcmp(force, "scalar") == 0)
		return &bn_kernels_scalar;
	if (force && strcmp(force, "avx2") == 0)
		return f.avx2_fma_f16c ? &bn_kernels_avx2 : NULL;
	if (force && strcmp(force, "avxvnni") == 0)
		return f.avx_vnni ? &bn_kernels_avxvnni : NULL;
	if (force && strcmp(force, "avx512vnni") == 0)
		return f.avx512_vnni ? &bn_kernels_avx512 : NULL;
	if (force && *force)
		return NULL;
	if (f.avx512_vnni)
		return &bn_kernels_avx512;
	if (f.avx_vnni)
		return &bn_kernels_avxvnni;
	return f.avx2_fma_f16c ? &bn_kernels_avx2 : &bn_kernels_scalar;
}
