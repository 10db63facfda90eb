/* SPDX-License-Identifier: MIT */
/*
 * kernels_i8mm.c — the dotprod kernels with ARMv8.6's int8 matrix multiply (Graviton 3 and 4,
 * Grace, Cobalt 100): kernels_neon.c compiled a third time, its batched ternary products done
 * by smmla on 2x2 blocks. The same bits as every other variant.
 */
#define BN_DOTPROD 1
#define BN_I8MM 1
#include "kernels_neon.c"
