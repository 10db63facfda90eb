/* SPDX-License-Identifier: MIT */
/*
 * probes.h — bench-model's machine figures, the limits its kernels are measured against: a
 * read loop (the bandwidth roofline), and register-only loops of the selected kernel table's
 * own instructions (the int8 peak), float fused multiply-adds and the head screen's int16
 * step. Each architecture has its file: probe_x86.c (AVX2, AVX-VNNI, AVX-512), probe_arm.c
 * (NEON smlal, dotprod sdot, i8mm smmla).
 */
#ifndef BITNET_BENCH_PROBES_H
#define BITNET_BENCH_PROBES_H

#include "kernels.h"

#include <stddef.h>
#include <stdint.h>

/* Independent accumulator chains of the peak loops. Their inner loops must be unrolled so
 * the chains live in registers: at -O2 GCC kept the array in memory and the loops measured
 * 33 G float lanes/s and 169 G int8 multiply-adds/s on one core, against 117 and 249 unrolled
 * (side by side, 2026-11-22). */
#define PEAK_CHAINS 16

/* The loops for kernel table k (their instructions, their register width): 0, or -1 with a
 * reason when this CPU cannot run them. */
int probe_select(const struct bn_kernels *k, const char **why);
/* Reads n bytes from p (64-byte aligned, n a multiple of 256); the value keeps the loads. */
uint64_t probe_read(const uint8_t *p, size_t n);
/* iters rounds of PEAK_CHAINS independent steps of the selected int8 product; the
 * multiply-adds of one step. */
int32_t probe_int8_loop(uint64_t iters);
double probe_int8_macs_per_step(void);
/* The int8 loop of one named variant ("dotprod", "i8mm", ...), whatever the selection: NULL
 * when this CPU lacks it or the architecture has none of that name. */
int32_t (*probe_int8_loop_of(const char *variant, double *macs_per_step))(uint64_t iters);
/* Float fused multiply-adds: the loop and its lanes a step. */
float probe_fma_loop(uint64_t iters);
double probe_fma_lanes_per_step(void);
/* The head screen's int16 step (the selected table's i8_dots); its key's suffix ("avx2",
 * "neon") and multiply-adds a step. */
int32_t probe_int16_loop(uint64_t iters);
double probe_int16_macs_per_step(void);
const char *probe_int16_name(void);

#endif /* BITNET_BENCH_PROBES_H */
