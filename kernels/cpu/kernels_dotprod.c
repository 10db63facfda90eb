/* SPDX-License-Identifier: MIT */
/*
 * kernels_dotprod.c — the NEON kernels for ARMv8.2 CPUs with the dot product instructions
 * (Raspberry Pi 5's Cortex-A76, Jetson Orin's A78AE, Graviton 2, Ampere Altra): kernels_neon.c
 * compiled again, its int8 products done by sdot, and with the T3 kernel (bn_t3_gemm_dotprod).
 * Integer sums are exact, so the outputs are those of the NEON and scalar kernels, bit for bit.
 */
#define BN_DOTPROD 1
#include "kernels_neon.c"
