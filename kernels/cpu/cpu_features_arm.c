/* SPDX-License-Identifier: MIT */
/*
 * cpu_features_arm.c — the aarch64 kernel table, picked at start-up from the hardware
 * capabilities the kernel reports (getauxval: AT_HWCAP, AT_HWCAP2). A flag there means both
 * that the CPU has the instructions and that the kernel lets user space run them, so the
 * binary built for plain ARMv8.0 runs everywhere and takes sdot or smmla only where they are.
 */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

/* The bits of <asm/hwcap.h> (Linux's arm64 ABI), for C libraries whose headers lack them. */
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif

void bn_cpu_detect(struct bn_cpu_features *f)
{
	memset(f, 0, sizeof(*f));
	unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
	f->neon = (hw & HWCAP_ASIMD) != 0;
	f->dotprod = f->neon && (hw & HWCAP_ASIMDDP);
	/* every ARMv8.6 CPU has both; the i8mm table takes sdot for single rows */
	f->i8mm = f->dotprod && (hw2 & HWCAP2_I8MM);
}

const char *const bn_kernel_variant_names[BN_KERNEL_VARIANTS] = { "scalar", "neon", "dotprod",
								   "i8mm" };

bn_t3_gemm_fn bn_t3_kernel(const struct bn_kernels *k)
{
	if (!k) /* bn_kernels_select's answer for a variant this CPU cannot run */
		return NULL;
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	/* by name, as on x86-64 (a copy of a table with other parts still has its products):
	 * sdot takes the decoded digits (kernels_neon.c); the i8mm table computes single rows,
	 * which is what decode steps read the T3 copies for, with sdot too */
	int sdot_table = strcmp(k->name, "dotprod") == 0 || strcmp(k->name, "i8mm") == 0;
	return sdot_table && f.dotprod ? bn_t3_gemm_dotprod : NULL;
}

const struct bn_kernels *bn_kernels_select(const char *force)
{
	struct bn_cpu_features f;
	bn_cpu_detect(&f);
	if (!force)
		force = getenv("BITNET_KERNELS");
	if (force && strcmp(force, "scalar") == 0)
		return &bn_kernels_scalar;
	if (force && strcmp(force, "neon") == 0)
		return f.neon ? &bn_kernels_neon : NULL;
	if (force && strcmp(force, "dotprod") == 0)
		return f.dotprod ? &bn_kernels_dotprod : NULL;
	if (force && strcmp(force, "i8mm") == 0)
		return f.i8mm ? &bn_kernels_i8mm : NULL;
	if (force && *force)
		return NULL;
	if (f.i8mm)
		return &bn_kernels_i8mm;
	if (f.dotprod)
		return &bn_kernels_dotprod;
	return f.neon ? &bn_kernels_neon : &bn_kernels_scalar;
}
