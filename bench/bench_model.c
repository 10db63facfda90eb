/* SPDX-License-Identifier: MIT */
/*
 * bench-model — the model benchmark: prints key=value lines, all measured in one run so the
 * ratios compare like with like. `make bench-model` makes the model files it needs with the
 * model tool and runs it. Keys:
 *
 *   mem_bw_gbs, mem_bw_1t_gbs   read bandwidth, all threads / one thread (AVX-512 or AVX2 loads;
 *                               NEON on aarch64: bench/probes.h)
 *   int8_peak_gmacs             int8 multiply-adds per second (register-only loop of the selected
 *                               kernels' instructions: vpdpbusd, or AVX2 maddubs/madd; smlal,
 *                               sdot or smmla on aarch64), all threads
 *   int8_peak_gmacs_<variant>   aarch64: the same for each of neon (smlal), dotprod (sdot) and
 *                               i8mm (smmla) this CPU has, whichever kernels are selected
 *   t2_gemv_gbs, t2_gemv_bw_share   ternary matrix x vector over 256 MB of weights
 *   decode_tps_bN               decode tokens/s with N sequences (2B4T shape)
 *   decode_b16_over_b1          the batching gain
 *   decode_roofline_share_b1    (weights + LM head bytes per token / mem_bw) / time per token
 *   decode_int8_share_bN        ternary multiply-adds per second / int8_peak_gmacs
 *   pairN_*, paired_roofline_share_b1, paired_b16_over_b1
 *                               five back-to-back (probe, batch 1, batch 16) triples and the
 *                               medians of the two ratios over them
 *   prefill_tps_tN              prompt tokens/s, one prompt of N tokens
 *   prefill_speedup_tN          time step by step / time as one prefill, N tokens
 *   prefill_int8_share_tN       ternary multiply-adds per second of that prefill / int8 peak
 *   prefill_matrix_ms_per_token_tN, prefill_matrix_int8_share_tN
 *                               the ternary matrices alone against N token rows (no attention)
 *   prefill_matrix_growth_t1024_over_t64   their time per token at 1024 over 64 (1 = linear)
 *   lmhead_ms_{ours,openblas}_bN    the F16 LM head: our kernel vs OpenBLAS sgemm (F32 copy)
 *   fma_peak_glanes             float multiply-adds per second (register-only loop), all threads
 *   int16_peak_gmacs_avx2       the AVX2 head screen's int16 step (vpmaddwd + vpaddd, 16
 *                               multiply-adds), all threads; int16_peak_gmacs_neon on aarch64
 *                               (smlal of int16, 4 multiply-adds)
 *   screen_int16_pass_ms_b16, screen_int16_pass_gmacs_b16   the screen's int16 pass alone
 *                               over the whole head for 16 rows (screen side by side)
 *   rss_model_mb, rss_peak_mb, file_mb, rss_over_file   resident memory after loading
 *   rss_over_file_int8, rss_over_file_int8_base3   the same as the daemon holds the model with
 *                               --lm-head int8 (and --decode-layout base3), from a child process
 *   The LM head's screen, the int8 head, the T3 copies and the four batch-1 configurations
 *   side by side, and the serial parts of a batch-1 step before and after, print their own
 *   keys (screen_side_by_side, int8_side_by_side, t3_side_by_side, configs_side_by_side,
 *   serial_side_by_side say what they are); --screen-only, --int8-head-only, --base3-only,
 *   --configs-only and --serial-only run one of them alone.
 *   screened_roofline_share_b1  the default (screened) head's batch-1 step against the roofline
 *                               of the bytes it reads; decode_int8_share_b16_screened its batch
 *                               of 16 against the int8 peak (screen side by side)
 *   matrices_<table>_gmacs_tT, matrices_<table>_over_<selected>_tT   (--matrices-only) every
 *                               ternary matrix against T = 1, 4, 16, 32, 256 token rows with
 *                               each SIMD table this CPU runs, and with another build's AVX2
 *                               table ("old") when linked in by make bench-model-old
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "probes.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "kernels.h"
#include "pool.h"
#include "quant.h"

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------------ */
/* Machine figures: read bandwidth and int8 peak                                               */
/* ------------------------------------------------------------------------------------------ */

struct bw_job {
	const uint8_t *buf;
	size_t bytes_per_task;
	uint64_t sink[64];
};

static void bw_task(void *ctx, uint32_t t)
{
	struct bw_job *j = ctx;
	const uint8_t *p = j->buf + (size_t)t * j->bytes_per_task;
	j->sink[t % 64] += probe_read(p, j->bytes_per_task);
}

/* GB/s of the best of `passes` reads of buf's bytes, split in 64 tasks. */
static double best_read_gbs(struct bn_pool *pool, const uint8_t *buf, size_t bytes, int passes)
{
	struct bw_job j = { .buf = buf, .bytes_per_task = bytes / 64 };
	double best = 1e9;
	for (int rep = 0; rep < passes; rep++) {
		double t0 = now_s();
		bn_pool_run(pool, 64, bw_task, &j);
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	return (double)bytes / best / 1e9;
}

/* Best of 5 passes over 1 GiB. */
static double measure_bw(struct bn_pool *pool)
{
	size_t bytes = (size_t)1 << 30;
	uint8_t *buf = aligned_alloc(64, bytes);
	memset(buf, 1, bytes);
	double gbs = best_read_gbs(pool, buf, bytes, 5);
	free(buf);
	return gbs;
}

/* A quicker probe for bracketing one measured run: 512 MiB kept from call to call (touched
 * once), best of three passes (about 40 ms at 45 GB/s). */
static double quick_bw(struct bn_pool *pool)
{
	static uint8_t *buf;
	const size_t bytes = (size_t)512 << 20;
	if (!buf) {
		buf = aligned_alloc(64, bytes);
		if (!buf)
			abort();
		memset(buf, 1, bytes);
	}
	return best_read_gbs(pool, buf, bytes, 3);
}

struct peak_job {
	uint64_t iters;
	int32_t sink[64];
};

static void fma_task(void *ctx, uint32_t t)
{
	struct peak_job *j = ctx;
	j->sink[t % 64] += (int32_t)probe_fma_loop(j->iters);
}

#define PEAK_ITERS 8000000

/* Seconds for one PEAK_ITERS loop per thread, the best of three: another guest may hold a
 * core for part of one. */
static double peak_seconds(struct bn_pool *pool, bn_pool_fn loop)
{
	struct peak_job j = { .iters = PEAK_ITERS };
	double best = 1e9;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now_s();
		bn_pool_run(pool, bn_pool_threads(pool), loop, &j);
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	return best;
}

static double measure_fma_peak(struct bn_pool *pool)
{
	double lanes = (double)bn_pool_threads(pool) * PEAK_ITERS * PEAK_CHAINS * probe_fma_lanes_per_step();
	return lanes / peak_seconds(pool, fma_task) / 1e9;
}

static void int16_task(void *ctx, uint32_t t)
{
	struct peak_job *j = ctx;
	j->sink[t % 64] += probe_int16_loop(j->iters);
}

/* int16 multiply-adds per second of the head screen's step, all threads. */
static double measure_int16_peak(struct bn_pool *pool)
{
	double macs = (double)bn_pool_threads(pool) * PEAK_ITERS * PEAK_CHAINS * probe_int16_macs_per_step();
	return macs / peak_seconds(pool, int16_task) / 1e9;
}

static void peak_task(void *ctx, uint32_t t)
{
	struct peak_job *j = ctx;
	j->sink[t % 64] += probe_int8_loop(j->iters);
}

/* int8 multiply-adds per second of the selected kernels' instruction, all threads. */
static double measure_int8_peak(struct bn_pool *pool)
{
	double macs = (double)bn_pool_threads(pool) * PEAK_ITERS * PEAK_CHAINS *
		      probe_int8_macs_per_step();
	return macs / peak_seconds(pool, peak_task) / 1e9;
}

static int32_t (*named_loop)(uint64_t iters);

static void named_peak_task(void *ctx, uint32_t t)
{
	struct peak_job *j = ctx;
	j->sink[t % 64] += named_loop(j->iters);
}

/* int8_peak_gmacs_<variant> for every variant whose instruction probes.h measures by name
 * and this CPU has (aarch64: neon, dotprod, i8mm). */
static void print_named_int8_peaks(struct bn_pool *pool)
{
	for (int i = 1; i < BN_KERNEL_VARIANTS; i++) {
		double per_step;
		named_loop = probe_int8_loop_of(bn_kernel_variant_names[i], &per_step);
		if (!named_loop)
			continue;
		double macs = (double)bn_pool_threads(pool) * PEAK_ITERS * PEAK_CHAINS * per_step;
		printf("int8_peak_gmacs_%s=%.0f\n", bn_kernel_variant_names[i],
		       macs / peak_seconds(pool, named_peak_task) / 1e9);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Ternary GEMV over 256 MB                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct gemv_job {
	const struct bn_kernels *k;
	struct bn_t2_matrix w;
	struct bn_q8_rows x;
	float *y;
	uint32_t chunk;
};

static void gemv_task(void *ctx, uint32_t t)
{
	struct gemv_job *j = ctx;
	uint32_t o0 = t * j->chunk, o1 = o0 + j->chunk < j->w.n_out ? o0 + j->chunk : j->w.n_out;
	j->k->t2_gemm(&j->w, o0, o1, &j->x, 1, j->y, j->w.n_out);
}

static double measure_t2_gemv(struct bn_pool *pool, const struct bn_kernels *k)
{
	uint32_t n_in = 2560, n_out = 409600; /* 640 B rows: 262 MB */
	struct gemv_job j = { .k = k, .chunk = 256 };
	uint32_t rb = (uint32_t)bn_t2_row_bytes(n_in);
	uint8_t *codes = aligned_alloc(64, (size_t)rb * n_out);
	float *scale = malloc(n_out * sizeof(float));
	for (size_t i = 0; i < (size_t)rb * n_out; i++)
		codes[i] = (uint8_t)(i * 2654435761u >> 13) & 0x55; /* codes 0 or 1 */
	for (uint32_t o = 0; o < n_out; o++)
		scale[o] = 1.0f;
	j.w = (struct bn_t2_matrix){ .codes = codes, .scale = scale, .n_in = n_in, .n_out = n_out,
				     .row_bytes = rb };
	float *xf = malloc(n_in * sizeof(float));
	for (uint32_t i = 0; i < n_in; i++)
		xf[i] = (float)((int)(i % 17) - 8);
	j.x = (struct bn_q8_rows){ .q = aligned_alloc(64, rb * 4), .inv_scale = malloc(4),
				   .sum = malloc(4), .k = n_in, .k_pad = rb * 4 };
	bn_quantize_rows(xf, n_in, 1, &j.x);
	j.y = malloc(n_out * sizeof(float));
	double best = 1e9;
	for (int rep = 0; rep < 5; rep++) {
		double t0 = now_s();
		bn_pool_run(pool, (n_out + j.chunk - 1) / j.chunk, gemv_task, &j);
		double dt = now_s() - t0;
		best = dt < best ? dt : best;
	}
	double gbs = (double)rb * n_out / best / 1e9;
	free(codes);
	free(scale);
	free(xf);
	free(j.x.q);
	free(j.x.inv_scale);
	free(j.x.sum);
	free(j.y);
	return gbs;
}

/* ------------------------------------------------------------------------------------------ */
/* The model                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* /proc's "kB" are KiB: megabytes are rss_mb()'s, as file_mb is st_size / 1e6 (until
 * 2026-11-26 the KiB were read as kB, and every rss_over_file read 2.4 % low). */
static long rss_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0)
			v = atol(line + strlen(key));
	if (f)
		fclose(f);
	return v;
}

static double rss_mb(const char *key)
{
	return (double)rss_kb(key) * 1024 / 1e6;
}

static void tokens_for(uint32_t seed, uint32_t vocab, uint32_t *out, uint32_t n)
{
	uint32_t x = seed * 2654435761u + 7u;
	for (uint32_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		out[i] = 3 + (x >> 8) % (vocab - 3);
	}
}

struct runner {
	const struct bn_model *m;
	struct bn_forward *fwd;
	float *logits;
	uint32_t max_seqs;
};

static const struct bn_sampling greedy = { .temperature = 0 };
static const struct bn_sample_ctx greedy_ctx = { .params = &greedy };
static const struct bn_sample_ctx *const greedy_rows[64] = {
	[0 ... 63] = &greedy_ctx,
};

/* `n` sequences; each gets a prompt of `prompt` tokens, then `steps` decode steps timed.
 * screened: the decode steps' rows say they want the argmax only, so the forward pass takes
 * the LM head's screen when it has one (head_screen.h); else every logit is computed. */
static double decode_tps_as(struct runner *r, uint32_t n, uint32_t prompt, uint32_t steps,
			    int screened)
{
	uint32_t V = r->m->cfg.n_vocab;
	uint32_t *tok = malloc((size_t)n * prompt * sizeof(uint32_t));
	uint32_t *lens = malloc(n * sizeof(uint32_t)), *pos = calloc(n, sizeof(uint32_t));
	uint32_t *seq = malloc(n * sizeof(uint32_t));
	for (uint32_t s = 0; s < n; s++) {
		bn_forward_seq_reset(r->fwd, s);
		tokens_for(s, V, tok + (size_t)s * prompt, prompt);
		lens[s] = prompt;
		seq[s] = s;
	}
	struct bn_batch b = { .n_rows = n, .width = prompt, .tokens = tok, .lens = lens, .pos = pos,
			      .seq = seq };
	if (bn_forward_run(r->fwd, &b, r->logits, 0) != 0)
		abort();
	double t0 = 0;
	b.sample = screened ? greedy_rows : NULL;
	for (uint32_t step = 0; step <= steps; step++) {
		if (step == 1)
			t0 = now_s(); /* the first decode step warms caches and scratch */
		for (uint32_t s = 0; s < n; s++) {
			pos[s] += lens[s];
			lens[s] = 1;
			tok[(size_t)s * prompt] = bn_argmax(r->logits + (size_t)s * V, V);
		}
		if (bn_forward_run(r->fwd, &b, r->logits, 0) != 0)
			abort();
	}
	double dt = now_s() - t0;
	free(tok);
	free(lens);
	free(pos);
	free(seq);
	return (double)n * steps / dt;
}

static double decode_tps(struct runner *r, uint32_t n, uint32_t prompt, uint32_t steps)
{
	return decode_tps_as(r, n, prompt, steps, 0);
}

/* Seconds for one prompt of n tokens as one prefill, and step by step. */
static void prefill_times(struct runner *r, uint32_t n, double *prefill, double *stepwise)
{
	uint32_t V = r->m->cfg.n_vocab, *tok = malloc(n * sizeof(uint32_t)), seq = 0, pos = 0;
	tokens_for(99, V, tok, n);
	bn_forward_seq_reset(r->fwd, 0);
	struct bn_batch b = { .n_rows = 1, .width = n, .tokens = tok, .lens = &n, .pos = &pos,
			      .seq = &seq };
	double t0 = now_s();
	if (bn_forward_run(r->fwd, &b, r->logits, 0) != 0)
		abort();
	*prefill = now_s() - t0;
	if (stepwise) {
		bn_forward_seq_reset(r->fwd, 0);
		uint32_t one = 1;
		t0 = now_s();
		for (uint32_t i = 0; i < n; i++) {
			pos = i;
			struct bn_batch s = { .n_rows = 1, .width = 1, .tokens = &tok[i], .lens = &one,
					      .pos = &pos, .seq = &seq };
			if (bn_forward_run(r->fwd, &s, r->logits, 0) != 0)
				abort();
		}
		*stepwise = now_s() - t0;
	}
	free(tok);
}

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median of n > 0 values (of the two middle ones when n is even); sorts them. */
static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), compare_doubles);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The VM's memory speed drifts by a third over minutes and its compute speed by a fifth (other
 * guests), batch 1 is memory-bound and batch 16 is not, so ratios of figures taken a minute
 * apart mislead. Five times: the bandwidth probe, batch 1, batch 16, back to back; the
 * medians of the two ratios (three pairs let one disturbed pair in two decide). */
#define DECODE_PAIRS 5

static void decode_side_by_side(struct runner *r, struct bn_pool *pool, double bytes_per_tok)
{
	double share[DECODE_PAIRS], ratio[DECODE_PAIRS];
	for (int i = 0; i < DECODE_PAIRS; i++) {
		double bw = measure_bw(pool);
		double b1 = decode_tps(r, 1, 16, 32), b16 = decode_tps(r, 16, 16, 4);
		share[i] = b1 / (bw * 1e9 / bytes_per_tok);
		ratio[i] = b16 / b1;
		printf("pair%d_mem_bw_gbs=%.1f\npair%d_decode_tps_b1=%.2f\npair%d_decode_tps_b16=%.2f\n",
		       i, bw, i, b1, i, b16);
		fflush(stdout);
	}
	printf("paired_roofline_share_b1=%.2f\npaired_b16_over_b1=%.2f\n",
	       median(share, DECODE_PAIRS), median(ratio, DECODE_PAIRS));
}

/* Float panel groups the screen computed per screened row between two readings of its
 * stats (0 when no row took the screen). */
static double screened_groups(const struct bn_head_screen_stats *before,
			      const struct bn_head_screen_stats *after)
{
	uint64_t rows = after->rows - before->rows;
	return rows ? (double)(after->groups - before->groups) / (double)rows : 0;
}

/* Bytes a screened token reads of the head: the int8 copy with its per-row floats, and the
 * float panel groups it computes exactly (groups per row, as screened_groups counts them). */
static double screened_head_bytes(const struct bn_head_screen *s, double groups)
{
	return (double)bn_head_screen_bytes(s) +
	       groups * BN_F_PANEL_ROWS * bn_row_bytes(s->head->type, s->w.n_in);
}

/* The LM head's screen against the full head, batch 1 and 16, alternating in one process
 * (which goes first alternates too), each round after a bandwidth probe: the medians of each
 * figure and of the ratios. decode_over_2bit_roofline_b1 is the figure: the screened
 * rate over the rate at which the probe's bandwidth reads the 2-bit planes and the F16 head
 * (bpt_full) once per token. The screen's bytes per token: bpt_full with the float head's
 * head_bytes replaced by the int8 copy, its three per-row floats, and the panel groups it
 * computed exactly (counted by the forward pass). */
#define SCREEN_ROUNDS 5

static void screen_side_by_side(struct runner *r, struct bn_pool *pool, double bpt_full,
				double head_bytes, const struct bn_head_screen *s, double macs,
				double peak)
{
	double full1[SCREEN_ROUNDS], scr1[SCREEN_ROUNDS], gain1[SCREEN_ROUNDS];
	double full8[SCREEN_ROUNDS], scr8[SCREEN_ROUNDS], gain8[SCREEN_ROUNDS];
	double full16[SCREEN_ROUNDS], scr16[SCREEN_ROUNDS], gain16[SCREEN_ROUNDS];
	double roof[SCREEN_ROUNDS], share_full[SCREEN_ROUNDS], bws[SCREEN_ROUNDS];
	struct bn_head_screen_stats before, after;
	bn_forward_screen_stats(r->fwd, &before);
	for (int i = 0; i < SCREEN_ROUNDS; i++) {
		double bw = bws[i] = measure_bw(pool);
		for (int k = 0; k < 2; k++) { /* the order swaps every round */
			int screened = (k + i) % 2;
			double *b1 = screened ? scr1 : full1, *b8 = screened ? scr8 : full8;
			double *b16 = screened ? scr16 : full16;
			b1[i] = decode_tps_as(r, 1, 16, 32, screened);
			b8[i] = decode_tps_as(r, 8, 16, 8, screened);
			b16[i] = decode_tps_as(r, 16, 16, 4, screened);
		}
		gain1[i] = scr1[i] / full1[i];
		gain8[i] = scr8[i] / full8[i];
		gain16[i] = scr16[i] / full16[i];
		roof[i] = scr1[i] * bpt_full / (bw * 1e9);
		share_full[i] = full1[i] * bpt_full / (bw * 1e9);
		printf("screen_round%d_mem_bw_gbs=%.1f\nscreen_round%d_b1_full_screened=%.2f/%.2f\n"
		       "screen_round%d_b8_full_screened=%.2f/%.2f\n"
		       "screen_round%d_b16_full_screened=%.2f/%.2f\n", i, bw, i, full1[i], scr1[i], i,
		       full8[i], scr8[i], i, full16[i], scr16[i]);
		fflush(stdout);
	}
	bn_forward_screen_stats(r->fwd, &after);
	double groups = screened_groups(&before, &after);
	double bpt_screen = bpt_full - head_bytes + screened_head_bytes(s, groups);
	/* the screened step against the roofline of the bytes it reads (the screen's int8 copy
	 * and the head rows it computes in full instead of the F16 head) */
	double roof_screen[SCREEN_ROUNDS], share16[SCREEN_ROUNDS];
	for (int i = 0; i < SCREEN_ROUNDS; i++) {
		roof_screen[i] = scr1[i] * bpt_screen / (bws[i] * 1e9);
		share16[i] = scr16[i] * macs / 1e9 / peak;
	}
	printf("bytes_per_token_b1_2bit_f16head=%.0f\nbytes_per_token_b1_2bit_screened=%.0f\n"
	       "screen_groups_per_row=%.2f\nscreen_groups_of=%u\nscreen_full_rows=%llu\n",
	       bpt_full, bpt_screen, groups, after.n_groups,
	       (unsigned long long)(after.full_rows - before.full_rows));
	printf("decode_tps_b1_full=%.2f\ndecode_tps_b1_screened=%.2f\nscreened_over_full_b1=%.2f\n"
	       "decode_tps_b8_full=%.2f\ndecode_tps_b8_screened=%.2f\nscreened_over_full_b8=%.2f\n"
	       "decode_tps_b16_full=%.2f\ndecode_tps_b16_screened=%.2f\nscreened_over_full_b16=%.2f\n"
	       "roofline_share_b1_full=%.2f\ndecode_over_2bit_roofline_b1=%.2f\n"
	       "screened_roofline_share_b1=%.2f\ndecode_int8_share_b16_screened=%.2f\n",
	       median(full1, SCREEN_ROUNDS), median(scr1, SCREEN_ROUNDS),
	       median(gain1, SCREEN_ROUNDS), median(full8, SCREEN_ROUNDS),
	       median(scr8, SCREEN_ROUNDS), median(gain8, SCREEN_ROUNDS),
	       median(full16, SCREEN_ROUNDS), median(scr16, SCREEN_ROUNDS),
	       median(gain16, SCREEN_ROUNDS), median(share_full, SCREEN_ROUNDS),
	       median(roof, SCREEN_ROUNDS), median(roof_screen, SCREEN_ROUNDS),
	       median(share16, SCREEN_ROUNDS));
	fflush(stdout);
}

/* The screen's int16 pass alone (i8_dots over every head row) against 16 batch rows, the
 * median of SCREEN_ROUNDS: what a screened batch-16 step would pay before its bounds and
 * exact groups (the screen serves at most 8 rows: forward.c, SCREEN_MAX_ROWS). */
#define PASS_ROWS 16
#define PASS_GROUP 64

struct i8_pass_job {
	const struct bn_kernels *k;
	const struct bn_i8_matrix *w;
	const int16_t *x;
	int64_t *y; /* [threads][PASS_ROWS][PASS_GROUP] */
};

static void i8_pass_task(void *ctx, uint32_t t)
{
	struct i8_pass_job *j = ctx;
	uint32_t o0 = t * PASS_GROUP, o1 = o0 + PASS_GROUP < j->w->n_out ? o0 + PASS_GROUP : j->w->n_out;
	j->k->i8_dots(j->w, o0, o1, j->x, j->w->row_bytes, PASS_ROWS,
		      j->y + (size_t)bn_pool_thread_index() * PASS_ROWS * PASS_GROUP, PASS_GROUP);
}

static void screen_int16_pass(struct bn_pool *pool, const struct bn_kernels *k,
			      const struct bn_head_screen *s)
{
	uint32_t rb = s->w.row_bytes, lim = (uint32_t)bn_i8_dot_x_max(rb);
	int16_t *x = aligned_alloc(64, (size_t)PASS_ROWS * rb * sizeof(int16_t));
	int64_t *y = malloc((size_t)bn_pool_threads(pool) * PASS_ROWS * PASS_GROUP * sizeof(int64_t));
	uint64_t st = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < (size_t)PASS_ROWS * rb; i++) {
		st = st * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = i % rb < s->w.n_in ? (int16_t)((int64_t)(st >> 33) % (2 * lim + 1) - lim) : 0;
	}
	struct i8_pass_job j = { .k = k, .w = &s->w, .x = x, .y = y };
	double ms[SCREEN_ROUNDS];
	for (int i = 0; i < SCREEN_ROUNDS; i++) {
		double t0 = now_s();
		bn_pool_run(pool, (s->w.n_out + PASS_GROUP - 1) / PASS_GROUP, i8_pass_task, &j);
		ms[i] = (now_s() - t0) * 1e3;
	}
	double med = median(ms, SCREEN_ROUNDS);
	printf("screen_int16_pass_ms_b16=%.2f\nscreen_int16_pass_gmacs_b16=%.1f\n", med,
	       (double)PASS_ROWS * s->w.n_out * s->w.n_in / (med * 1e-3) / 1e9);
	fflush(stdout);
	free(x);
	free(y);
}

/* The int8 head (--lm-head int8) against the file's head on the same positions: AGREE_SEQS
 * sequences decoded greedily by the file's head from different first tokens, each step's
 * logits taken with both heads (the sequences are cut back before the second pass, which
 * rewrites the same cache entries with the same values: the head does not feed the cache). Top-1 agreement, and the mean and largest
 * KL divergence of the int8 head's softmax from the file head's, in double. */
#define AGREE_SEQS 8

static double softmax_kl(const float *p_logits, const float *q_logits, uint32_t V)
{
	double pmax = -INFINITY, qmax = -INFINITY, pz = 0, qz = 0, kl = 0;
	for (uint32_t i = 0; i < V; i++) {
		pmax = fmax(pmax, p_logits[i]);
		qmax = fmax(qmax, q_logits[i]);
	}
	for (uint32_t i = 0; i < V; i++) {
		pz += exp(p_logits[i] - pmax);
		qz += exp(q_logits[i] - qmax);
	}
	for (uint32_t i = 0; i < V; i++) {
		double lp = p_logits[i] - pmax - log(pz), lq = q_logits[i] - qmax - log(qz);
		kl += exp(lp) * (lp - lq);
	}
	return kl;
}

static void int8_head_agreement(struct runner *r, const struct bn_i8_matrix *head,
				uint32_t positions)
{
	uint32_t V = r->m->cfg.n_vocab, n = AGREE_SEQS, steps = (positions + n - 1) / n;
	if (steps > r->m->cfg.n_ctx)
		steps = r->m->cfg.n_ctx;
	float *full = malloc((size_t)n * V * sizeof(float));
	uint32_t tok[AGREE_SEQS], lens[AGREE_SEQS], pos[AGREE_SEQS], seq[AGREE_SEQS];
	for (uint32_t s = 0; s < n; s++) {
		bn_forward_seq_reset(r->fwd, s);
		tok[s] = (r->m->cfg.bos_id + 1 + 37 * s) % V;
		lens[s] = 1;
		seq[s] = s;
	}
	struct bn_batch b = { .n_rows = n, .width = 1, .tokens = tok, .lens = lens, .pos = pos,
			      .seq = seq };
	uint64_t agree = 0, count = 0;
	double kl_sum = 0, kl_max = 0;
	for (uint32_t step = 0; step < steps; step++) {
		for (uint32_t s = 0; s < n; s++)
			pos[s] = step;
		bn_forward_use_int8_head(r->fwd, NULL);
		if (bn_forward_run(r->fwd, &b, full, 0) != 0)
			abort();
		bn_forward_use_int8_head(r->fwd, head);
		for (uint32_t s = 0; s < n; s++) /* back to before this step (no block copied) */
			bn_forward_seq_fork(r->fwd, s, step, 0, 0, 0);
		if (bn_forward_run(r->fwd, &b, r->logits, 0) != 0)
			abort();
		for (uint32_t s = 0; s < n; s++) {
			const float *p = full + (size_t)s * V, *q = r->logits + (size_t)s * V;
			uint32_t want = bn_argmax(p, V);
			agree += bn_argmax(q, V) == want;
			double kl = softmax_kl(p, q, V);
			kl_sum += kl;
			kl_max = fmax(kl_max, kl);
			count++;
			tok[s] = want;
		}
	}
	bn_forward_use_int8_head(r->fwd, NULL);
	printf("int8_head_positions=%llu\nint8_head_top1_agreement=%.4f\n"
	       "int8_head_mean_kl=%.3g\nint8_head_max_kl=%.3g\n", (unsigned long long)count,
	       (double)agree / (double)count, kl_sum / (double)count, kl_max);
	fflush(stdout);
	free(full);
}

/* The int8 head against the file's head, decode at batch 1 and 16, alternating in one
 * process as screen_side_by_side does; decode_over_2bit_roofline_b1_int8 is its figure for
 * the int8 head. */
static void int8_side_by_side(struct runner *r, struct bn_pool *pool, double bpt_full,
			      const struct bn_i8_matrix *head)
{
	double full1[SCREEN_ROUNDS], int1[SCREEN_ROUNDS], full16[SCREEN_ROUNDS];
	double int16[SCREEN_ROUNDS], gain1[SCREEN_ROUNDS], gain16[SCREEN_ROUNDS];
	double roof[SCREEN_ROUNDS];
	for (int i = 0; i < SCREEN_ROUNDS; i++) {
		double bw = measure_bw(pool);
		for (int turn = 0; turn < 2; turn++) {
			int int8 = (turn + i) % 2;
			bn_forward_use_int8_head(r->fwd, int8 ? head : NULL);
			double b1 = decode_tps(r, 1, 16, 32), b16 = decode_tps(r, 16, 16, 4);
			*(int8 ? &int1[i] : &full1[i]) = b1;
			*(int8 ? &int16[i] : &full16[i]) = b16;
		}
		bn_forward_use_int8_head(r->fwd, NULL);
		gain1[i] = int1[i] / full1[i];
		gain16[i] = int16[i] / full16[i];
		roof[i] = int1[i] * bpt_full / (bw * 1e9);
		printf("int8_round%d_mem_bw_gbs=%.1f\nint8_round%d_b1_full_int8=%.2f/%.2f\n"
		       "int8_round%d_b16_full_int8=%.2f/%.2f\n", i, bw, i, full1[i], int1[i], i,
		       full16[i], int16[i]);
		fflush(stdout);
	}
	printf("decode_tps_b1_full=%.2f\ndecode_tps_b1_int8=%.2f\nint8_over_full_b1=%.2f\n"
	       "decode_tps_b16_full=%.2f\ndecode_tps_b16_int8=%.2f\nint8_over_full_b16=%.2f\n"
	       "decode_over_2bit_roofline_b1_int8=%.2f\n",
	       median(full1, SCREEN_ROUNDS), median(int1, SCREEN_ROUNDS),
	       median(gain1, SCREEN_ROUNDS), median(full16, SCREEN_ROUNDS),
	       median(int16, SCREEN_ROUNDS), median(gain16, SCREEN_ROUNDS),
	       median(roof, SCREEN_ROUNDS));
	fflush(stdout);
}

/* The T3 decode copies (--decode-layout base3) against the T2 planes at batch 1 (the only
 * batch the forward pass reads them in), greedy rows (so the head's screen serves them, as in
 * the daemon's default). The gain is near the VM's drift between two runs a second apart, so
 * T3_ROUNDS short pairs, each after a bandwidth probe, the order alternating; the medians of
 * the rates, of the per-pair ratios, and of decode_over_2bit_roofline_b1_base3, the issue's
 * figure: the rate over the rate at which the probe reads the 2-bit planes and the F16 head
 * once per token (bpt_full). */
#define T3_ROUNDS 15

static void t3_side_by_side(struct runner *r, struct bn_pool *pool, double bpt_full)
{
	double t2_1[T3_ROUNDS], t3_1[T3_ROUNDS], gain[T3_ROUNDS], roof[T3_ROUNDS];
	for (int i = 0; i < T3_ROUNDS; i++) {
		double bw = measure_bw(pool);
		for (int turn = 0; turn < 2; turn++) {
			int t3 = (turn + i) % 2;
			bn_forward_use_t3(r->fwd, t3);
			*(t3 ? &t3_1[i] : &t2_1[i]) = decode_tps_as(r, 1, 16, 24, 1);
		}
		bn_forward_use_t3(r->fwd, 0);
		gain[i] = t3_1[i] / t2_1[i];
		roof[i] = t3_1[i] * bpt_full / (bw * 1e9);
		printf("base3_round%d_mem_bw_gbs=%.1f\nbase3_round%d_b1_2bit_base3=%.2f/%.2f\n", i, bw,
		       i, t2_1[i], t3_1[i]);
		fflush(stdout);
	}
	printf("decode_tps_b1_screened_2bit=%.2f\ndecode_tps_b1_screened_base3=%.2f\n"
	       "base3_over_2bit_b1=%.2f\ndecode_over_2bit_roofline_b1_base3=%.2f\n",
	       median(t2_1, T3_ROUNDS), median(t3_1, T3_ROUNDS), median(gain, T3_ROUNDS),
	       median(roof, T3_ROUNDS));
	fflush(stdout);
}

/* The batch-1 decode configurations a user can choose, side by side: the baseline
 * (2-bit planes, every logit from the F16 head), the default (the screened head), the exact
 * opt-in (T3 copies and the screen) and the fastest opt-in (T3 copies and the int8 head).
 * CONFIG_ROUNDS rounds of the four, the first of them rotating; the medians of each rate and
 * of its ratio to the baseline's in the same round.
 *
 * decode_over_2bit_roofline_b1 is the figure: the rate times the baseline's bytes per
 * token (bpt_full) over the bandwidth; roofline_share_b1 uses the configuration's own bytes
 * instead (how near it reads at the probe's rate). The test VM's memory flips between a
 * ~45-50 and a ~80-85 GB/s state, sometimes within a second, and in the fast one two cores
 * cannot decode at the probe's rate (compute-bound). So each run is bracketed by a quick
 * probe before and after; the roofline keys take only the runs whose two probes agree within
 * BRACKET_AGREE (the state held through the run), at their mean; and the _low_bw keys only
 * those of them below LOW_BW_FACTOR x the lowest such probe of the run, where decode is bound
 * by memory as the roofline assumes. */
#define CONFIG_ROUNDS 9
#define BRACKET_AGREE 0.10
#define LOW_BW_FACTOR 1.25
/* A bracket above this many GB/s is the VM's fast memory state (~80 GB/s against ~48). */
#define SERIAL_FAST_GBS 65.0

enum decode_config { CFG_2BIT_FULL, CFG_2BIT_SCREENED, CFG_BASE3_SCREENED, CFG_BASE3_INT8, N_CFG };
static const char *const config_names[N_CFG] = { "2bit_full", "2bit_screened", "base3_screened",
						 "base3_int8" };

static void use_config(struct runner *r, const struct bn_head_screen *s, int c)
{
	int screened = c == CFG_2BIT_SCREENED || c == CFG_BASE3_SCREENED;
	bn_forward_use_screen(r->fwd, screened ? s : NULL);
	bn_forward_use_int8_head(r->fwd, c == CFG_BASE3_INT8 ? &s->w : NULL);
	bn_forward_use_t3(r->fwd, c == CFG_BASE3_SCREENED || c == CFG_BASE3_INT8);
}

/* One configuration's runs: rate, bracketing bandwidth (0 when the probes disagreed). */
struct config_runs {
	double tps[CONFIG_ROUNDS], bw[CONFIG_ROUNDS], gain[CONFIG_ROUNDS];
};

/* The median of f(tps, bw) over the runs with an agreeing bracket below limit GB/s; prints
 * key=value, or nothing when no run qualifies. */
static void print_bracketed(const char *key, const char *name, const struct config_runs *cr,
			    double bytes, double limit)
{
	double v[CONFIG_ROUNDS];
	size_t n = 0;
	for (int i = 0; i < CONFIG_ROUNDS; i++)
		if (cr->bw[i] > 0 && cr->bw[i] < limit)
			v[n++] = cr->tps[i] * bytes / (cr->bw[i] * 1e9);
	if (n)
		printf("%s_%s=%.2f\n%s_%s_runs=%zu\n", key, name, median(v, n), key, name, n);
}

static double layer_bytes(const struct bn_model *m, int t3);

/* Bytes per token of configuration c; groups: the screen's float groups per row. */
static double config_bytes(const struct bn_model *m, const struct bn_head_screen *s, int c,
			   double groups)
{
	double t2 = layer_bytes(m, 0), t3 = layer_bytes(m, 1);
	double screened = screened_head_bytes(s, groups);
	double int8 = (double)s->w.row_bytes * s->w.n_out +
		      (double)s->w.n_out * (sizeof(float) + sizeof(int32_t));
	switch (c) {
	case CFG_2BIT_FULL: return t2 + (double)m->output.src->size;
	case CFG_2BIT_SCREENED: return t2 + screened;
	case CFG_BASE3_SCREENED: return t3 + screened;
	default: return t3 + int8;
	}
}

/* Round i: the first n_cfg configurations once each, bracketed, the first of them rotating
 * with i. */
static void config_round(struct runner *r, struct bn_pool *pool, const struct bn_head_screen *s,
			 int i, int n_cfg, struct config_runs cr[N_CFG])
{
	for (int turn = 0; turn < n_cfg; turn++) {
		int c = (turn + i) % n_cfg;
		use_config(r, s, c);
		double before = quick_bw(pool);
		cr[c].tps[i] = decode_tps_as(r, 1, 16, 24, 1);
		double after = quick_bw(pool), mean = (before + after) / 2;
		cr[c].bw[i] = fabs(before - after) <= BRACKET_AGREE * mean ? mean : 0;
		printf("config_round%d_%s=%.2f tok/s, probe %.1f/%.1f GB/s\n", i, config_names[c],
		       cr[c].tps[i], before, after);
	}
	for (int c = 0; c < n_cfg; c++)
		cr[c].gain[i] = cr[c].tps[i] / cr[CFG_2BIT_FULL].tps[i];
	fflush(stdout);
}

/* The serial parts of a batch-1 step (norms, gate, residual adds) in the scalar definitions
 * and without read-ahead, as before 2026-11-26; with the kernels' element-wise variants; and
 * with read-ahead too (forward.c). base3+int8, the configuration bound by its bytes the most.
 * The scalar variant runs on a second forward pass over the same model (its own kernel table
 * and KV cache). Rounds alternate the three, each run bracketed; the key is the median of
 * decode_over_2bit_roofline_b1 over the agreeing runs of each memory state. */
#define SERIAL_ROUNDS 24
enum serial_variant { SERIAL_SCALAR, SERIAL_VECTOR, SERIAL_READ_AHEAD, N_SERIAL };
static const char *const serial_names[N_SERIAL] = { "scalar", "vector", "read_ahead" };

static void serial_side_by_side(struct runner *r, struct bn_pool *pool, double bpt_full,
				const struct bn_head_screen *s, const struct bn_kernels *k)
{
	struct bn_kernels scalar_elem = *k;
	scalar_elem.rmsnorm = bn_rmsnorm;
	scalar_elem.relu2_mul = bn_relu2_mul;
	scalar_elem.add = bn_add;
	struct runner rs = *r;
	rs.fwd = bn_forward_new(r->m, r->max_seqs, pool, &scalar_elem);
	if (!rs.fwd || bn_forward_kv_init_simple(rs.fwd, 64) != 0)
		abort();
	struct runner *runs[N_SERIAL] = { &rs, r, r };
	double slow[N_SERIAL][SERIAL_ROUNDS], fast[N_SERIAL][SERIAL_ROUNDS];
	size_t n_slow[N_SERIAL] = { 0 }, n_fast[N_SERIAL] = { 0 };
	for (int v = 0; v < N_SERIAL; v++)
		use_config(runs[v], s, CFG_BASE3_INT8);
	if (bn_forward_use_t3(rs.fwd, 1) != 0) /* both read the T3 copies, or the pair is unfair */
		abort();
	for (int i = 0; i < SERIAL_ROUNDS; i++)
		for (int turn = 0; turn < N_SERIAL; turn++) {
			int v = (turn + i) % N_SERIAL;
			bn_forward_set_read_ahead(r->fwd, v == SERIAL_READ_AHEAD);
			double before = quick_bw(pool);
			double tps = decode_tps_as(runs[v], 1, 16, 24, 1);
			double after = quick_bw(pool), mean = (before + after) / 2;
			if (fabs(before - after) > BRACKET_AGREE * mean)
				continue;
			double roof = tps * bpt_full / (mean * 1e9);
			if (mean < SERIAL_FAST_GBS)
				slow[v][n_slow[v]++] = roof;
			else
				fast[v][n_fast[v]++] = roof;
		}
	for (int v = 0; v < N_SERIAL; v++) {
		if (n_slow[v])
			printf("serial_roofline_b1_slow_%s=%.3f\nserial_runs_slow_%s=%zu\n", serial_names[v],
			       median(slow[v], n_slow[v]), serial_names[v], n_slow[v]);
		if (n_fast[v])
			printf("serial_roofline_b1_fast_%s=%.3f\nserial_runs_fast_%s=%zu\n", serial_names[v],
			       median(fast[v], n_fast[v]), serial_names[v], n_fast[v]);
	}
	bn_forward_set_read_ahead(r->fwd, 1);
	bn_forward_free(rs.fwd);
	fflush(stdout);
}

/* n_cfg: N_CFG, or the two 2-bit configurations on a CPU without a T3 kernel. */
static void configs_side_by_side(struct runner *r, struct bn_pool *pool, double bpt_full,
				 const struct bn_head_screen *s, int n_cfg)
{
	struct config_runs cr[N_CFG];
	struct bn_head_screen_stats before, after;
	bn_forward_screen_stats(r->fwd, &before);
	for (int i = 0; i < CONFIG_ROUNDS; i++)
		config_round(r, pool, s, i, n_cfg, cr);
	use_config(r, s, CFG_2BIT_FULL);
	bn_forward_screen_stats(r->fwd, &after);
	double groups = screened_groups(&before, &after);
	double lowest = INFINITY;
	for (int c = 0; c < n_cfg; c++)
		for (int i = 0; i < CONFIG_ROUNDS; i++)
			lowest = cr[c].bw[i] > 0 && cr[c].bw[i] < lowest ? cr[c].bw[i] : lowest;
	printf("config_lowest_agreeing_probe_gbs=%.1f\n", lowest);
	for (int c = 0; c < n_cfg; c++) {
		const char *name = config_names[c];
		double bytes = config_bytes(r->m, s, c, groups);
		printf("bytes_per_token_b1_%s=%.0f\n", name, bytes);
		print_bracketed("roofline_share_b1", name, &cr[c], bytes, INFINITY);
		print_bracketed("decode_over_2bit_roofline_b1", name, &cr[c], bpt_full, INFINITY);
		print_bracketed("decode_over_2bit_roofline_b1_low_bw", name, &cr[c], bpt_full,
				LOW_BW_FACTOR * lowest);
		struct config_runs sorted = cr[c];
		printf("decode_tps_b1_%s=%.2f\n%s_over_2bit_full_b1=%.2f\n", name,
		       median(sorted.tps, CONFIG_ROUNDS), name, median(sorted.gain, CONFIG_ROUNDS));
	}
	fflush(stdout);
}

/* Bytes of every layer's weights a decode step reads: the 2-bit planes, or the T3 copies
 * (t3: bn_model_add_t3 made them), of the ternary matrices; the file's bytes of the others. */
static double layer_bytes(const struct bn_model *m, int t3)
{
	double bytes = 0;
	for (uint32_t i = 0; i < m->cfg.n_layer; i++) {
		const struct bn_layer *L = &m->layers[i];
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(L, all);
		for (size_t k = 0; k < BN_LAYER_LINEARS; k++) {
			const struct bn_linear *l = all[k];
			bytes += l->kind != BN_LINEAR_T2 ? (double)l->src->size
				 : t3 ? (double)l->t3.row_bytes * l->n_out
				      : (double)l->t2.row_bytes * l->n_out;
		}
	}
	return bytes;
}

/* Bytes read per decoded token at batch 1: every linear weight and the LM head. */
static double bytes_per_token(const struct bn_model *m)
{
	return layer_bytes(m, 0) + (double)m->output.src->size;
}

static double ternary_macs_per_token(const struct bn_model *m)
{
	const struct bn_model_config *c = &m->cfg;
	double q = (double)c->n_head * c->head_dim, kv = (double)c->n_head_kv * c->head_dim;
	return c->n_layer * ((double)c->n_embd * (2 * q + 2 * kv) + 3.0 * c->n_embd * c->n_ff);
}

/* ------------------------------------------------------------------------------------------ */
/* Prefill matrix work alone: every ternary matrix of the model against T token rows            */
/* ------------------------------------------------------------------------------------------ */

#define PREFILL_TOKEN_BLOCK 64 /* tokens per task, as in forward.c */

struct prefill_mat_job {
	const struct bn_kernels *k;
	const struct bn_t2_matrix *w;
	const struct bn_q8_rows *x;
	float *y;
	uint32_t n_tok, chunk, n_chunks;
};

static void prefill_mat_task(void *ctx, uint32_t t)
{
	const struct prefill_mat_job *j = ctx;
	uint32_t c = t % j->n_chunks, blk = t / j->n_chunks;
	uint32_t o0 = c * j->chunk, o1 = o0 + j->chunk < j->w->n_out ? o0 + j->chunk : j->w->n_out;
	uint32_t b0 = blk * PREFILL_TOKEN_BLOCK;
	uint32_t n_b = j->n_tok - b0 < PREFILL_TOKEN_BLOCK ? j->n_tok - b0 : PREFILL_TOKEN_BLOCK;
	struct bn_q8_rows xs = *j->x;
	xs.q += (size_t)b0 * xs.k_pad;
	xs.inv_scale += b0;
	xs.sum += b0;
	j->k->t2_gemm(j->w, o0, o1, &xs, n_b, j->y + (size_t)b0 * j->w->n_out, j->w->n_out);
}

/* Seconds for one pass of n_tok token rows through every ternary matrix of every layer, split
 * over the pool as the forward pass splits it (row chunks x 64-token blocks). Attention and
 * the element-wise work are left out: this is the part whose cost must stay linear in T. */
static double prefill_matrix_seconds(struct bn_pool *pool, const struct bn_kernels *k,
				     const struct bn_model *m, uint32_t n_tok)
{
	uint32_t k_max = m->cfg.n_embd > m->cfg.n_ff ? m->cfg.n_embd : m->cfg.n_ff;
	uint32_t k_pad = (k_max + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK;
	struct bn_q8_rows x = { .q = aligned_alloc(64, (size_t)n_tok * k_pad),
				.inv_scale = malloc(n_tok * sizeof(float)),
				.sum = calloc(n_tok, sizeof(int32_t)) };
	uint32_t n_out_max = 0;
	for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
		const struct bn_layer *L = &m->layers[l];
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(L, all);
		for (size_t i = 0; i < BN_LAYER_LINEARS; i++)
			n_out_max = all[i]->n_out > n_out_max ? all[i]->n_out : n_out_max;
	}
	float *y = malloc((size_t)n_tok * n_out_max * sizeof(float));
	if (!x.q || !x.inv_scale || !x.sum || !y)
		abort();
	for (size_t i = 0; i < (size_t)n_tok * k_pad; i++)
		x.q[i] = (int8_t)((i * 2654435761u >> 11) % 255 - 127);
	for (uint32_t t = 0; t < n_tok; t++)
		x.inv_scale[t] = 1.0f / 127;
	uint32_t threads = bn_pool_threads(pool);
	double t0 = now_s();
	for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
		const struct bn_layer *L = &m->layers[l];
		const struct bn_linear *all[BN_LAYER_LINEARS];
		bn_layer_linears(L, all);
		for (size_t i = 0; i < BN_LAYER_LINEARS; i++) {
			if (all[i]->kind != BN_LINEAR_T2)
				continue;
			struct prefill_mat_job j = { .k = k, .w = &all[i]->t2, .x = &x, .y = y,
						     .n_tok = n_tok };
			x.k = all[i]->n_in;
			x.k_pad = (x.k + BN_T2_CHUNK - 1) / BN_T2_CHUNK * BN_T2_CHUNK;
			uint32_t chunk = (j.w->n_out + 4 * threads - 1) / (4 * threads);
			j.chunk = (chunk + 3) / 4 * 4;
			j.n_chunks = (j.w->n_out + j.chunk - 1) / j.chunk;
			uint32_t n_blocks = (n_tok + PREFILL_TOKEN_BLOCK - 1) / PREFILL_TOKEN_BLOCK;
			bn_pool_run(pool, j.n_chunks * n_blocks, prefill_mat_task, &j);
		}
	}
	double dt = now_s() - t0;
	free(x.q);
	free(x.inv_scale);
	free(x.sum);
	free(y);
	return dt;
}

/* Matrix milliseconds per prompt token at each T, and their growth from 64 to 1024 tokens
 * (1.0 = exactly linear in T, less = the blocking pays off more on longer prompts). */
static void measure_prefill_matrices(struct bn_pool *pool, const struct bn_kernels *k,
				     const struct bn_model *m, double peak, double macs)
{
	uint32_t lens[] = { 64, 256, 1024 };
	double per_tok[3];
	for (int i = 0; i < 3; i++) {
		double best = 1e9;
		for (int rep = 0; rep < (lens[i] < 1024 ? 3 : 1); rep++) {
			double dt = prefill_matrix_seconds(pool, k, m, lens[i]);
			best = dt < best ? dt : best;
		}
		per_tok[i] = best / lens[i];
		printf("prefill_matrix_ms_per_token_t%u=%.2f\nprefill_matrix_int8_share_t%u=%.2f\n",
		       lens[i], per_tok[i] * 1e3, lens[i], macs / per_tok[i] / 1e9 / peak);
		fflush(stdout);
	}
	printf("prefill_matrix_growth_t1024_over_t64=%.2f\n", per_tok[2] / per_tok[0]);
}

/* Another build's AVX2 kernel table, when this binary was linked with it (make bench-model-old
 * OLD_KERNELS_OBJ=...: its object with bn_kernels_avx2 renamed bn_kernels_old). */
extern const struct bn_kernels bn_kernels_old __attribute__((weak));

#define MATRIX_TABLES 5
#define MATRIX_ROUNDS 5

/* The ternary matrices of every layer (prefill_matrix_seconds) against T token rows, each SIMD
 * table this CPU runs (and the old one) in turn, the order rotating every round: G
 * multiply-adds per second, medians over the rounds, and each table's median ratio to the first
 * (the selected kernels). T = 1 streams the weights; 4 to 32 are decode batches; 256 prefill. */
static void matrices_side_by_side(struct bn_pool *pool, const struct bn_kernels *k,
				  const struct bn_model *m, double macs)
{
	const struct bn_kernels *tables[MATRIX_TABLES] = { k };
	const char *names[MATRIX_TABLES] = { k->name };
	uint32_t n = 1;
	for (int i = 1; i < BN_KERNEL_VARIANTS; i++) { /* the SIMD ones */
		const struct bn_kernels *v = bn_kernels_select(bn_kernel_variant_names[i]);
		if (v && v != k) {
			tables[n] = v;
			names[n++] = v->name;
		}
	}
	if (&bn_kernels_old) {
		tables[n] = &bn_kernels_old;
		names[n++] = "old";
	}
	static const uint32_t toks[] = { 1, 4, 16, 32, 256 };
	for (size_t ti = 0; ti < sizeof(toks) / sizeof(toks[0]); ti++) {
		uint32_t T = toks[ti];
		double g[MATRIX_TABLES][MATRIX_ROUNDS], ratio[MATRIX_TABLES][MATRIX_ROUNDS];
		for (int r = 0; r < MATRIX_ROUNDS; r++) {
			for (uint32_t i = 0; i < n; i++) {
				uint32_t at = (i + (uint32_t)r) % n;
				g[at][r] = macs * T / prefill_matrix_seconds(pool, tables[at], m, T) / 1e9;
			}
			for (uint32_t i = 0; i < n; i++)
				ratio[i][r] = g[i][r] / g[0][r];
		}
		for (uint32_t i = 0; i < n; i++) {
			printf("matrices_%s_gmacs_t%u=%.1f\n", names[i], T, bench_median(g[i], MATRIX_ROUNDS));
			if (i)
				printf("matrices_%s_over_%s_t%u=%.3f\n", names[i], names[0], T,
				       bench_median(ratio[i], MATRIX_ROUNDS));
		}
		fflush(stdout);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* LM head: our F16 kernel against OpenBLAS sgemm on an F32 copy                                */
/* ------------------------------------------------------------------------------------------ */

struct head_job {
	const struct bn_kernels *k;
	const struct bn_f_matrix *w;
	const float *x;
	float *y;
	uint32_t n_b, chunk;
	const float *w32; /* OpenBLAS: F32 weights */
};

static void head_ours_task(void *ctx, uint32_t t)
{
	struct head_job *j = ctx;
	uint32_t o0 = t * j->chunk, o1 = o0 + j->chunk < j->w->n_out ? o0 + j->chunk : j->w->n_out;
	j->k->f_gemm(j->w, o0, o1, j->x, j->w->n_in, j->n_b, j->y, j->w->n_out);
}

static void head_blas_task(void *ctx, uint32_t t)
{
	struct head_job *j = ctx;
	uint32_t o0 = t * j->chunk, o1 = o0 + j->chunk < j->w->n_out ? o0 + j->chunk : j->w->n_out;
	/* y[b][o] = x[b] . W[o]: [n_b x k] x [k x rows] */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->n_b, (int)(o1 - o0),
		    (int)j->w->n_in, 1.0f, j->x, (int)j->w->n_in, j->w32 + (size_t)o0 * j->w->n_in,
		    (int)j->w->n_in, 0.0f, j->y + o0, (int)j->w->n_out);
}

static void measure_lm_head(struct bn_pool *pool, const struct bn_kernels *k,
			    const struct bn_model *m)
{
	const struct bn_f_matrix *w = &m->output.f;
	if (m->output.kind != BN_LINEAR_FLOAT || w->type != BN_TYPE_F16)
		return;
	float *w32 = malloc((size_t)w->n_out * w->n_in * sizeof(float));
	if (!w32)
		return;
	for (uint32_t o = 0; o < w->n_out; o++)
		bn_f_row(w, o, w32 + (size_t)o * w->n_in);
	uint32_t batches[] = { 1, 16 };
	for (size_t bi = 0; bi < 2; bi++) {
		uint32_t n_b = batches[bi];
		float *x = malloc((size_t)n_b * w->n_in * sizeof(float));
		float *y = malloc((size_t)n_b * w->n_out * sizeof(float));
		for (size_t i = 0; i < (size_t)n_b * w->n_in; i++)
			x[i] = (float)((int)(i % 13) - 6) * 0.1f;
		struct head_job j = { .k = k, .w = w, .x = x, .y = y, .n_b = n_b, .chunk = 1024,
				      .w32 = w32 };
		uint32_t tasks = (w->n_out + j.chunk - 1) / j.chunk;
		double best_ours = 1e9, best_blas = 1e9;
		for (int rep = 0; rep < 3; rep++) {
			double t0 = now_s();
			bn_pool_run(pool, tasks, head_ours_task, &j);
			double t1 = now_s();
			bn_pool_run(pool, tasks, head_blas_task, &j);
			double t2 = now_s();
			best_ours = t1 - t0 < best_ours ? t1 - t0 : best_ours;
			best_blas = t2 - t1 < best_blas ? t2 - t1 : best_blas;
		}
		printf("lmhead_ms_ours_b%u=%.2f\nlmhead_ms_openblas_b%u=%.2f\n", n_b, best_ours * 1e3,
		       n_b, best_blas * 1e3);
		free(x);
		free(y);
	}
	free(w32);
}

/* Resident memory as the daemon holds the model with --lm-head int8 (the int8 copy made, the
 * float head's panels freed: bn_model_release_head_panels), then with --decode-layout base3
 * as well, after a one-token step and a read of every embedding row (which a long run makes,
 * and which must not stay resident: bn_model_embed); measured in a child process that loads
 * the model itself, so that nothing this process holds counts. */
static void int8_memory(const char *path, double file_mb)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		printf("int8_memory=unmeasured (fork: %s)\n", strerror(errno));
	if (pid != 0) {
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return;
	}
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	struct bn_head_screen copy;
	struct bn_pool *pool = bn_pool_new(0);
	if (bn_model_load(&m, path, err) != 0 || m.output.kind != BN_LINEAR_FLOAT ||
	    bn_head_screen_build(&copy, &m.output.f, pool) != 0)
		_exit(0); /* no float head: nothing to free */
	struct runner r = { .m = &m, .max_seqs = 1, .fwd = bn_forward_new(&m, 1, pool, bn_kernels_select(NULL)) };
	r.logits = malloc((size_t)m.cfg.n_vocab * sizeof(float));
	if (!r.fwd || !r.logits || bn_forward_kv_init_simple(r.fwd, 64) != 0)
		_exit(1);
	bn_forward_use_int8_head(r.fwd, &copy.w);
	printf("int8_released_mb=%.0f\n", (double)bn_model_release_head_panels(&m) / 1e6);
	decode_tps(&r, 1, 1, 1);
	/* every embedding row once, as a long run reads them: none of them may stay resident */
	float *row = malloc(m.cfg.n_embd * sizeof(float));
	for (uint32_t t = 0; row && t < m.cfg.n_vocab; t++)
		bn_model_embed(&m, t, row);
	free(row);
	printf("rss_over_file_int8=%.3f\n", rss_mb("VmRSS:") / file_mb);
	if (bn_forward_use_t3(r.fwd, 1) == 0 && bn_model_add_t3(&m, pool) == 0) {
		decode_tps(&r, 1, 1, 1);
		printf("rss_over_file_int8_base3=%.3f\n", rss_mb("VmRSS:") / file_mb);
	}
	fflush(stdout);
	_exit(0);
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
	const char *model_path = NULL;
	int quick = 0, screen_only = 0, int8_only = 0, base3_only = 0, configs_only = 0;
	int serial_only = 0, matrices_only = 0;
	uint32_t threads = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
			model_path = argv[++i];
		else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
			threads = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--quick") == 0)
			quick = 1;
		else if (strcmp(argv[i], "--screen-only") == 0)
			screen_only = 1;
		else if (strcmp(argv[i], "--int8-head-only") == 0)
			int8_only = screen_only = 1;
		else if (strcmp(argv[i], "--base3-only") == 0)
			base3_only = screen_only = 1;
		else if (strcmp(argv[i], "--configs-only") == 0)
			configs_only = screen_only = 1;
		else if (strcmp(argv[i], "--serial-only") == 0)
			serial_only = screen_only = 1;
		else if (strcmp(argv[i], "--matrices-only") == 0)
			matrices_only = 1;
		else {
			fprintf(stderr, "usage: bench-model --model FILE.gguf [--threads N] [--quick] [--screen-only | --int8-head-only | --base3-only | --configs-only | --serial-only]\n"
					"  --threads N       the pool's threads, the probes' included (default: one per\n"
					"                    online CPU): a machine's curve, as peers publish theirs\n"
					"  --quick           skip the 1024-token step-by-step run and the LM-head comparison\n"
					"  --screen-only     the LM-head screen against the full head, nothing else\n"
					"  --int8-head-only  the int8 head (--lm-head int8) against the full head: its\n"
					"                    agreement over 2048 positions, then decode side by side\n"
					"  --base3-only      the T3 decode copies (--decode-layout base3) against the\n"
					"                    2-bit planes, screened greedy decode at batch 1\n"
					"  --configs-only    batch-1 decode of 2bit+full, 2bit+screened, base3+screened\n"
					"                    and base3+int8 side by side, and the int8 head's memory\n"
					"  --serial-only     base3+int8 at batch 1 with the serial parts as before\n"
					"                    (scalar, no read-ahead), vectorized, and with read-ahead\n"
					"  --matrices-only   the ternary matrices against 1..256 token rows with each\n"
					"                    SIMD kernel table (and a linked old one) side by side\n");
			return 2;
		}
	}
	if (!model_path) {
		fprintf(stderr, "bench-model: --model FILE is required (make bench-model makes one)\n");
		return 2;
	}
	openblas_set_num_threads(1); /* serial build anyway: its calls run in our pool */
	const struct bn_kernels *k = bn_kernels_select(NULL);
	const char *why = "BITNET_KERNELS names kernels this CPU cannot run";
	if (!k || probe_select(k, &why) != 0) {
		fprintf(stderr, "bench-model: %s\n", why);
		return 1;
	}
	struct stat st;
	if (stat(model_path, &st) != 0) {
		perror(model_path);
		return 1;
	}
	double file_mb = (double)st.st_size / 1e6;
	/* first, while this process holds next to nothing that a child would share */
	if (!matrices_only && (int8_only || configs_only || (!quick && !screen_only)))
		int8_memory(model_path, file_mb);
	struct bn_pool *pool = bn_pool_new(threads), *one = bn_pool_new(1);
	printf("kernels=%s\nthreads=%u\n", k->name, bn_pool_threads(pool));
	double bw = measure_bw(pool);
	printf("mem_bw_gbs=%.1f\nmem_bw_1t_gbs=%.1f\n", bw, measure_bw(one));
	double peak = measure_int8_peak(pool);
	printf("int8_peak_gmacs=%.0f\nfma_peak_glanes=%.0f\nint16_peak_gmacs_%s=%.0f\n", peak,
	       measure_fma_peak(pool), probe_int16_name(), measure_int16_peak(pool));
	print_named_int8_peaks(pool);
	double gemv = measure_t2_gemv(pool, k);
	printf("t2_gemv_gbs=%.1f\nt2_gemv_bw_share=%.2f\n", gemv, gemv / bw);
	fflush(stdout);

	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	double t0 = now_s();
	if (bn_model_load(&m, model_path, err) != 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("model=%s\nload_s=%.1f\n", m.cfg.name, now_s() - t0);
	if (matrices_only) {
		matrices_side_by_side(pool, k, &m, ternary_macs_per_token(&m));
		bn_model_free(&m);
		return 0;
	}
	struct runner r = { .m = &m, .max_seqs = 32 };
	r.fwd = bn_forward_new(&m, r.max_seqs, pool, k);
	/* The longest sequence below is the 1024-token prompt; decode runs are shorter. */
	if (!r.fwd || bn_forward_kv_init_simple(r.fwd, 1024) != 0) {
		fprintf(stderr, "bench-model: no memory for the forward pass\n");
		return 1;
	}
	r.logits = malloc((size_t)r.max_seqs * m.cfg.n_vocab * sizeof(float));
	/* Resident memory right after loading and one token, before any KV cache grows. */
	decode_tps(&r, 1, 1, 1);
	double rss_model_mb = rss_mb("VmRSS:");
	printf("file_mb=%.0f\nrss_model_mb=%.0f\nrss_peak_mb=%.0f\nrss_over_file=%.3f\n", file_mb,
	       rss_model_mb, rss_mb("VmHWM:"), rss_model_mb / file_mb);
	fflush(stdout);

	double bpt = bytes_per_token(&m), macs = ternary_macs_per_token(&m);
	uint32_t batches[] = { 1, 2, 4, 8, 16, 32 };
	double tps1 = 0, tps16 = 0;
	for (size_t i = 0; !screen_only && i < sizeof(batches) / sizeof(batches[0]); i++) {
		uint32_t n = batches[i];
		/* batch 1 and 2 are memory-bound and the noisiest: 32 steps (1 s) smooth them */
		double tps = decode_tps(&r, n, 16, n <= 2 ? 32 : n >= 16 ? 4 : 8);
		printf("decode_tps_b%u=%.2f\n", n, tps);
		printf("decode_int8_share_b%u=%.2f\n", n, tps * macs / 1e9 / peak);
		if (n == 16)
			tps16 = tps;
		if (n == 1) {
			tps1 = tps;
			printf("decode_roofline_tps_b1=%.2f\ndecode_roofline_share_b1=%.2f\n",
			       bw * 1e9 / bpt, tps / (bw * 1e9 / bpt));
		}
		fflush(stdout);
	}
	if (!screen_only) {
		printf("decode_b16_over_b1=%.2f\n", tps16 / tps1);
		decode_side_by_side(&r, pool, bpt);
	}
	struct bn_head_screen screen;
	t0 = now_s();
	if (int8_only && m.output.kind == BN_LINEAR_DECODE) {
		/* a Q8_0 / Q6_K head: the int8 head is its only fast path (no screen) */
		const struct bn_gguf_tensor *h = m.output.src;
		if (bn_head_int8_build_rows(&screen, h->type, h->data, h->size, m.output.n_in,
					    m.output.n_out, pool) != 0) {
			fprintf(stderr, "bench-model: the int8 head could not be built\n");
			return 1;
		}
		printf("int8_build_s=%.2f\nint8_head_mb=%.0f\n", now_s() - t0,
		       (double)bn_head_screen_bytes(&screen) / 1e6);
		int8_head_agreement(&r, &screen.w, 2048);
		int8_side_by_side(&r, pool, bpt, &screen.w);
		bn_head_screen_free(&screen);
	} else if (m.output.kind == BN_LINEAR_FLOAT && m.output.f.panel_rows &&
	    bn_head_screen_build(&screen, &m.output.f, pool) == 0 &&
	    bn_forward_use_screen(r.fwd, &screen) == 0) {
		double rss_screen_mb = rss_mb("VmRSS:");
		printf("screen_build_s=%.2f\nscreen_mb=%.0f\nrss_over_file_screened=%.3f\n",
		       now_s() - t0, (double)bn_head_screen_bytes(&screen) / 1e6,
		       rss_screen_mb / file_mb);
		if (!int8_only && !base3_only && !configs_only && !serial_only) {
			screen_side_by_side(&r, pool, bpt, (double)m.output.src->size, &screen,
					    macs, peak);
			screen_int16_pass(pool, k, &screen);
		}
		int t3 = 0;
		if (base3_only || configs_only || serial_only || !quick) {
			t3 = bn_forward_use_t3(r.fwd, 1) == 0;
			if (!t3) {
				printf("base3=unavailable (no AVX-512 VBMI)\n");
			} else {
				t0 = now_s();
				if (bn_model_add_t3(&m, pool) != 0)
					abort();
				printf("base3_build_s=%.2f\nbase3_mb=%.0f\nrss_over_file_screened_base3=%.3f\n",
				       now_s() - t0, (double)m.t3_bytes / 1e6,
				       rss_mb("VmRSS:") / file_mb);
				if (!configs_only && !serial_only)
					t3_side_by_side(&r, pool, bpt);
			}
		}
		if (configs_only || (!quick && !base3_only && !serial_only))
			configs_side_by_side(&r, pool, bpt, &screen, t3 ? N_CFG : CFG_BASE3_SCREENED);
		if (t3 && (serial_only || (!quick && !base3_only && !configs_only)))
			serial_side_by_side(&r, pool, bpt, &screen, k);
		bn_forward_use_screen(r.fwd, NULL);
		if (int8_only || (!quick && !base3_only && !configs_only && !serial_only)) {
			int8_head_agreement(&r, &screen.w, 2048);
			int8_side_by_side(&r, pool, bpt, &screen.w);
		}
		bn_head_screen_free(&screen);
	}
	uint32_t lens[] = { 64, 128, 256, 512, 1024 };
	for (size_t i = 0; !screen_only && i < sizeof(lens) / sizeof(lens[0]); i++) {
		uint32_t n = lens[i];
		int want_step = n == 64 || n == 256 || (n == 1024 && !quick);
		double pre, step = 0;
		prefill_times(&r, n, &pre, want_step ? &step : NULL);
		printf("prefill_tps_t%u=%.1f\nprefill_ms_per_token_t%u=%.2f\n", n, n / pre, n,
		       pre * 1e3 / n);
		printf("prefill_int8_share_t%u=%.2f\n", n, n / pre * macs / 1e9 / peak);
		if (want_step)
			printf("stepwise_tps_t%u=%.1f\nprefill_speedup_t%u=%.2f\n", n, n / step, n,
			       step / pre);
		fflush(stdout);
	}
	if (!screen_only)
		measure_prefill_matrices(pool, k, &m, peak, macs);
	if (!quick && !screen_only)
		measure_lm_head(pool, k, &m);
	free(r.logits);
	bn_forward_free(r.fwd);
	bn_model_free(&m);
	bn_pool_free(pool);
	bn_pool_free(one);
	return 0;
}
