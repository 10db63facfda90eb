/* SPDX-License-Identifier: MIT */
/*
 * kernels_avxvnni.c — the AVX2 kernels for CPUs with AVX-VNNI (Intel client CPUs since Alder
 * Lake, Sapphire Rapids, Zen 5): kernels_avx2.c compiled again, its integer products done by
 * vpdpbusd and vpdpwssd in VEX form (256-bit registers, no AVX-512 needed). Integer sums are
 * exact, so the outputs are those of the AVX2 and scalar kernels, bit for bit.
 */
#define BN_AVXVNNI 1
#include "kernels_avx2.c"
