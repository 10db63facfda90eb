/* SPDX-License-Identifier: MIT */
/*
 * t2g_avxvnni.c — the grouped ternary product for CPUs with AVX-VNNI: t2g_avx2.c compiled
 * again, its integer products done by vpdpbusd in VEX form. The sums are exact, so the
 * outputs are the AVX2 and scalar variants', bit for bit.
 */
#define BN_AVXVNNI 1
#include "t2g_avx2.c"
