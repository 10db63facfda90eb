/* SPDX-License-Identifier: MIT */
/*
 * head_screen.c — the int8 screen of the LM head and the exact argmax it leads to (the proof
 * is in head_screen.h). Work is split over the pool by panel groups: a task screens whole
 * groups, so it also knows the largest upper bound of each group, and the candidates are then
 * whole groups, which the float kernel computes at the cost of one.
 */
#include "head_screen.h"
#include "common/bigmem.h"

#include "wcache.h"
#include "quant.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GROUP BN_F_PANEL_ROWS
/* A build thread's scratch per input, in floats: the group's values, one decoded row, the
 * group's int8 codes. */
#define SCRATCH_FLOATS (GROUP + 1 + GROUP / 4)

static uint32_t div_up(uint32_t a, uint32_t b)
{
	return (a + b - 1) / b;
}

/* One past the last row of group g of n_out rows. */
static uint32_t group_end(uint32_t g, uint32_t n_out)
{
	return (g + 1) * GROUP < n_out ? (g + 1) * GROUP : n_out;
}

/* The smallest float >= d. */
static float float_up(double d)
{
	float f = (float)d;
	return (double)f < d ? nextafterf(f, INFINITY) : f;
}

/* ---- building ---------------------------------------------------------------------------- */

/* The head being copied: float panels, or rows of a quantized type (bn_dequant_row). */
struct head_source {
	const struct bn_f_matrix *panels; /* NULL: rows */
	uint32_t type;
	const void *data;
	uint64_t size;
	uint32_t n_in, n_out;
};

struct build_job {
	const struct head_source *head;
	struct bn_head_screen *s;
	float *tmp;             /* [pool threads][n_in][SCRATCH_FLOATS] */
	const float *halves;    /* [65536] every F16 value as a float, for an F16 head */
	int non_finite;         /* set by any task that met a NaN or an infinity */
};

/* Group g of a quantized head's rows, decoded and laid out as the panels lie: [n_in][GROUP],
 * zero past the last row. row is scratch of n_in floats. -1 if a row cannot be decoded. */
static int group_floats_from_rows(const struct head_source *src, uint32_t g, float *row,
				  float *out)
{
	uint32_t n_in = src->n_in, o0 = g * GROUP, n_rows = group_end(g, src->n_out) - o0;
	memset(out, 0, (size_t)n_in * GROUP * sizeof(float));
	for (uint32_t i = 0; i < n_rows; i++) {
		if (bn_dequant_row(src->type, src->data, src->size, o0 + i, n_in, row))
			return -1;
		for (uint32_t k = 0; k < n_in; k++)
			out[(size_t)k * GROUP + i] = row[k];
	}
	return 0;
}

/* Group g of the panel layout as floats, [n_in][GROUP], input-major as stored; F16 values
 * through a table of all 65536 (bn_half_to_float's values: the decoding was a fifth of the
 * build). */
static void group_floats(const struct bn_f_matrix *h, const float *halves, uint32_t g,
			 float *out)
{
	size_t n = (size_t)h->n_in * GROUP;
	if (h->type == BN_TYPE_F32) {
		memcpy(out, (const float *)h->data + g * n, n * sizeof(float));
		return;
	}
	const uint16_t *v = (const uint16_t *)h->data + g * n;
	if (h->type == BN_TYPE_F16)
		for (size_t i = 0; i < n; i++)
			out[i] = halves[v[i]];
	else
		for (size_t i = 0; i < n; i++)
			out[i] = bn_bf16_to_float(v[i]);
}

/* nearbyintf's value (round to nearest, ties to even: the default mode) for |x| <= 2^22,
 * without the library call or a branch, which kept the loop from being vectorized:
 * 1.5 * 2^23 of x's sign added and taken away leaves x rounded to an integer. */
static inline float round_even(float x)
{
	const float magic = copysignf(12582912.0f, x);
	return (x + magic) - magic;
}

/* The group's scales and sums of |v| (l1, in double: the bound's), and whether every value
 * is finite. Loops run input by input over the group's 64 rows, as the panels lie, on whole
 * arrays, so the compiler vectorizes them; the maximum in float is the double one (the values
 * are floats). */
static int group_scales(const float *restrict grp, uint32_t n_in, float *restrict scale,
			double *restrict l1)
{
	float amax[GROUP] = { 0 };
	int finite[GROUP];
	for (uint32_t i = 0; i < GROUP; i++)
		finite[i] = 1;
	for (uint32_t k = 0; k < n_in; k++)
		for (uint32_t i = 0; i < GROUP; i++) {
			float v = fabsf(grp[(size_t)k * GROUP + i]);
			finite[i] &= v <= FLT_MAX; /* false for NaN too */
			amax[i] = v > amax[i] ? v : amax[i];
			l1[i] += v;
		}
	int all = 1;
	for (uint32_t i = 0; i < GROUP; i++) {
		all &= finite[i];
		scale[i] = amax[i] / 127.0f;
	}
	return all;
}

/* The int8 codes of the group, [n_in][GROUP] as the panels lie (codes), and the largest
 * |v - scale c| of each row (err, exact in double: a float times a small integer, then a
 * difference). Two loops per input, each of which the compiler vectorizes (one alone, with
 * the clamp and the maximum both, it did not). */
static void group_codes(const float *restrict grp, uint32_t n_in, const float *restrict scale,
			int8_t *restrict codes, double *restrict err)
{
	/* a zero scale has only zeros in its row: 1 divides them to a zero code */
	float divisor[GROUP];
	double scale_d[GROUP];
	for (uint32_t i = 0; i < GROUP; i++) {
		divisor[i] = scale[i] > 0 ? scale[i] : 1.0f;
		scale_d[i] = scale[i];
	}
	for (uint32_t k = 0; k < n_in; k++) {
		const float *restrict v = grp + (size_t)k * GROUP;
		int8_t *restrict code = codes + (size_t)k * GROUP;
		for (uint32_t i = 0; i < GROUP; i++) {
			/* |v / scale| <= 127 up to rounding: within round_even's range; the values
			 * are finite (checked before), so comparisons clamp as fminf/fmaxf did */
			float c = round_even(v[i] / divisor[i]);
			c = c < -127.0f ? -127.0f : c;
			c = c > 127.0f ? 127.0f : c;
			code[i] = (int8_t)(int32_t)c;
		}
		for (uint32_t i = 0; i < GROUP; i++) {
			double e = fabs((double)v[i] - scale_d[i] * code[i]);
			err[i] = e > err[i] ? e : err[i];
		}
	}
}

/* The rows of one group (n_rows, the first o0): scales, int8 codes and the bounds
 * head_screen.h needs. codes is scratch of n_in * GROUP bytes. Returns -1 on a NaN or an
 * infinity. */
static int screen_group(struct bn_head_screen *s, const float *grp, int8_t *codes, uint32_t o0,
			uint32_t n_rows)
{
	uint32_t n_in = s->w.n_in;
	double l1[GROUP] = { 0 }, err[GROUP] = { 0 };
	float scale[GROUP];
	if (!group_scales(grp, n_in, scale, l1))
		return -1;
	group_codes(grp, n_in, scale, codes, err);
	for (uint32_t i = 0; i < n_rows; i++) {
		int8_t *q = s->q_mem + (size_t)(o0 + i) * s->w.row_bytes;
		int32_t sum = 0;
		for (uint32_t k = 0; k < n_in; k++) {
			q[k] = codes[(size_t)k * GROUP + i];
			sum += q[k];
		}
		memset(q + n_in, 0, s->w.row_bytes - n_in);
		s->row_sum[o0 + i] = sum;
		s->scale[o0 + i] = scale[i];
		s->err[o0 + i] = float_up(err[i]);
		s->l1[o0 + i] = float_up(l1[i] * (1 + 1e-12)); /* the double sum's own rounding */
	}
	return 0;
}

static void build_task(void *ctx, uint32_t g)
{
	struct build_job *j = ctx;
	const struct head_source *h = j->head;
	/* per thread: the group's floats, one decoded row, the group's codes */
	float *grp = j->tmp + (size_t)bn_pool_thread_index() * h->n_in * SCRATCH_FLOATS;
	int8_t *codes = (int8_t *)(grp + (size_t)h->n_in * (GROUP + 1));
	int bad = 0;
	if (h->panels)
		group_floats(h->panels, j->halves, g, grp);
	else
		bad = group_floats_from_rows(h, g, grp + (size_t)h->n_in * GROUP, grp);
	if (bad || screen_group(j->s, grp, codes, g * GROUP, group_end(g, h->n_out) - g * GROUP))
		__atomic_store_n(&j->non_finite, 1, __ATOMIC_RELAXED);
}

void bn_head_screen_free(struct bn_head_screen *s)
{
	if (!s->borrowed) {
		bn_big_free(s->q_mem, (size_t)s->w.n_out * s->w.row_bytes);
		free(s->scale);
		free(s->err);
		free(s->l1);
		free(s->row_sum);
	}
	memset(s, 0, sizeof(*s));
}

static int build(struct bn_head_screen *s, const struct head_source *head, struct bn_pool *pool)
{
	uint32_t row_bytes = div_up(head->n_in, BN_I8_ROW_ALIGN) * BN_I8_ROW_ALIGN;
	s->w = (struct bn_i8_matrix){ .n_in = head->n_in, .n_out = head->n_out,
				      .row_bytes = row_bytes };
	s->q_mem = bn_big_alloc((size_t)head->n_out * row_bytes);
	s->scale = malloc(head->n_out * sizeof(float));
	s->err = malloc(head->n_out * sizeof(float));
	s->l1 = malloc(head->n_out * sizeof(float));
	s->row_sum = malloc(head->n_out * sizeof(int32_t));
	struct build_job j = { .head = head, .s = s };
	j.tmp = malloc((size_t)bn_pool_threads(pool) * head->n_in * SCRATCH_FLOATS * sizeof(float));
	float *halves = NULL;
	if (head->panels && head->panels->type == BN_TYPE_F16) {
		halves = malloc(65536 * sizeof(float));
		for (uint32_t h = 0; halves && h < 65536; h++)
			halves[h] = bn_half_to_float((uint16_t)h);
		j.halves = halves;
	}
	if (!s->q_mem || !s->scale || !s->err || !s->l1 || !s->row_sum || !j.tmp ||
	    (head->panels && head->panels->type == BN_TYPE_F16 && !halves)) {
		free(j.tmp);
		free(halves);
		bn_head_screen_free(s);
		return -ENOMEM;
	}
	s->w.q = s->q_mem;
	s->w.scale = s->scale;
	s->w.row_sum = s->row_sum;
	bn_pool_run(pool, div_up(head->n_out, GROUP), build_task, &j);
	free(j.tmp);
	free(halves);
	if (j.non_finite) {
		bn_head_screen_free(s);
		return -EINVAL;
	}
	return 0;
}

int bn_head_screen_build(struct bn_head_screen *s, const struct bn_f_matrix *head,
			 struct bn_pool *pool)
{
	memset(s, 0, sizeof(*s));
	if (head->panel_rows != GROUP)
		return -EINVAL;
	struct head_source src = { .panels = head, .n_in = head->n_in, .n_out = head->n_out };
	s->head = head;
	return build(s, &src, pool);
}

int bn_head_int8_build_rows(struct bn_head_screen *s, uint32_t type, const void *data,
			    uint64_t size, uint32_t n_in, uint32_t n_out, struct bn_pool *pool)
{
	memset(s, 0, sizeof(*s));
	struct head_source src = { .type = type, .data = data, .size = size, .n_in = n_in,
				   .n_out = n_out };
	return build(s, &src, pool);
}

void bn_head_screen_drop_head(struct bn_head_screen *s)
{
	s->head = NULL;
}

uint64_t bn_head_screen_bytes(const struct bn_head_screen *s)
{
	return (uint64_t)s->w.n_out * (s->w.row_bytes + 3 * sizeof(float) + sizeof(int32_t));
}

uint32_t bn_head_screen_blobs(const struct bn_head_screen *s, struct bn_wcache_blob *out)
{
	uint64_t n = s->w.n_out;
	if (out) {
		out[0] = (struct bn_wcache_blob){ BN_WCACHE_I8_Q, s->w.q, n * s->w.row_bytes };
		out[1] = (struct bn_wcache_blob){ BN_WCACHE_I8_SCALE, s->scale, n * sizeof(float) };
		out[2] = (struct bn_wcache_blob){ BN_WCACHE_I8_ERR, s->err, n * sizeof(float) };
		out[3] = (struct bn_wcache_blob){ BN_WCACHE_I8_L1, s->l1, n * sizeof(float) };
		out[4] = (struct bn_wcache_blob){ BN_WCACHE_I8_ROW_SUM, s->row_sum,
						  n * sizeof(int32_t) };
	}
	return 5;
}

int bn_head_screen_from_cache(struct bn_head_screen *s, const struct bn_f_matrix *head,
			      uint32_t n_in, uint32_t n_out, struct bn_wcache *c)
{
	memset(s, 0, sizeof(*s));
	uint32_t row_bytes = div_up(n_in, BN_I8_ROW_ALIGN) * BN_I8_ROW_ALIGN;
	uint64_t n = n_out;
	const int8_t *q = bn_wcache_take(c, BN_WCACHE_I8_Q, n * row_bytes);
	/* The screen reads these and never writes them (the mapping is read-only). */
	s->scale = q ? (float *)bn_wcache_take(c, BN_WCACHE_I8_SCALE, n * sizeof(float)) : NULL;
	s->err = s->scale ? (float *)bn_wcache_take(c, BN_WCACHE_I8_ERR, n * sizeof(float)) : NULL;
	s->l1 = s->err ? (float *)bn_wcache_take(c, BN_WCACHE_I8_L1, n * sizeof(float)) : NULL;
	s->row_sum = s->l1 ? (int32_t *)bn_wcache_take(c, BN_WCACHE_I8_ROW_SUM,
							  n * sizeof(int32_t))
			   : NULL;
	if (!s->row_sum) {
		memset(s, 0, sizeof(*s));
		return -EINVAL;
	}
	s->borrowed = 1;
	s->head = head;
	s->w = (struct bn_i8_matrix){ .q = q, .scale = s->scale, .row_sum = s->row_sum,
				      .n_in = n_in, .n_out = n_out, .row_bytes = row_bytes };
	return 0;
}

/* ---- running ----------------------------------------------------------------------------- */

/* One row's input as the screen reads it: x ≈ sx * m. */
struct screen_x {
	double sx;
	double eps;      /* >= max_k |x_k - sx m_k| */
	double sx_m1;    /* sx * sum_k |m_k| */
	double chain;    /* gamma * max|x|: the float chain's rounding per unit of l1 */
	int finite;
};

struct bn_head_screen_run {
	const struct bn_head_screen *s;
	struct bn_pool *pool;
	uint32_t cap;            /* rows the scratch holds */
	uint32_t n_groups, max_tasks;
	int16_t *m;              /* [cap][row_bytes] */
	struct screen_x *xs;     /* [cap] */
	float *group_upper;      /* [cap][n_groups] the largest A_r + B_r of each group */
	double *task_lower;      /* [cap][max_tasks] the largest A_r - B_r of each task */
	int64_t *dots;           /* [pool threads][cap][GROUP] */
	uint32_t *pairs;         /* [cap * n_groups] row * n_groups + group, to compute */
	const uint64_t *const *masks; /* this pass's: NULL, or [n] NULL or the allowed rows */
};

struct bn_head_screen_run *bn_head_screen_run_new(const struct bn_head_screen *s,
						  struct bn_pool *pool)
{
	struct bn_head_screen_run *run = calloc(1, sizeof(*run));
	if (!run)
		return NULL;
	run->s = s;
	run->pool = pool;
	run->n_groups = div_up(s->w.n_out, GROUP);
	run->max_tasks = BN_HEAD_SCREEN_MAX_TASKS_PER_THREAD * bn_pool_threads(pool);
	return run;
}

static void free_scratch(struct bn_head_screen_run *run)
{
	free(run->m);
	free(run->xs);
	free(run->group_upper);
	free(run->task_lower);
	free(run->dots);
	free(run->pairs);
	run->cap = 0;
}

void bn_head_screen_run_free(struct bn_head_screen_run *run)
{
	if (!run)
		return;
	free_scratch(run);
	free(run);
}

static int reserve(struct bn_head_screen_run *run, uint32_t n)
{
	if (n <= run->cap)
		return 0;
	free_scratch(run);
	size_t rb = run->s->w.row_bytes, threads = bn_pool_threads(run->pool);
	run->m = aligned_alloc(64, (size_t)n * rb * sizeof(int16_t));
	run->xs = malloc(n * sizeof(*run->xs));
	run->group_upper = malloc((size_t)n * run->n_groups * sizeof(float));
	run->task_lower = malloc((size_t)n * run->max_tasks * sizeof(double));
	run->dots = malloc(threads * n * GROUP * sizeof(int64_t));
	run->pairs = malloc((size_t)n * run->n_groups * sizeof(uint32_t));
	if (!run->m || !run->xs || !run->group_upper || !run->task_lower || !run->dots ||
	    !run->pairs) {
		free_scratch(run);
		return -ENOMEM;
	}
	run->cap = n;
	return 0;
}

/* x[n_in] into m[row_bytes] and its bounds. */
static void quantize_x(const struct bn_head_screen *s, const float *x, int16_t *m,
		       struct screen_x *out)
{
	uint32_t n_in = s->w.n_in;
	double xinf = 0;
	out->finite = 1;
	for (uint32_t k = 0; k < n_in; k++) {
		if (!isfinite(x[k]))
			out->finite = 0;
		else
			xinf = fmax(xinf, fabs(x[k]));
	}
	memset(m, 0, s->w.row_bytes * sizeof(int16_t));
	/* Past 2^90 a logit (up to l1 * max|x|, l1 < 2^28 for F16 rows) could overflow a float,
	 * and the bounds with it: such a row is left to the full head like a NaN. */
	if (xinf > 0x1p90)
		out->finite = 0;
	if (!out->finite)
		return;
	double sx = xinf / bn_i8_dot_x_max(s->w.row_bytes), eps = 0, m1 = 0;
	for (uint32_t k = 0; sx > 0 && k < n_in; k++) {
		double c = nearbyint(x[k] / sx);
		m[k] = (int16_t)c;
		m1 += fabs(c);
		eps = fmax(eps, fabs(x[k] - sx * c));
	}
	out->sx = sx;
	out->eps = eps + xinf * 0x1p-50; /* sx * c in double is itself rounded */
	out->sx_m1 = sx * m1;
	out->chain = (double)(n_in + 1) * 0x1p-24 * xinf;
}

struct screen_job {
	struct bn_head_screen_run *run;
	const struct bn_kernels *kern;
	uint32_t n, groups_per_task;
};

/* Head row o can be row b's token: its mask (if any) allows it. */
static int row_allowed(const struct bn_head_screen_run *run, uint32_t b, uint32_t o)
{
	const uint64_t *mask = run->masks ? run->masks[b] : NULL;
	return !mask || (mask[o / 64] >> (o % 64) & 1);
}

/* The interval of row o's float logit given its integer dot: [a - b, a + b]. */
static void row_interval(const struct bn_head_screen *s, uint32_t o, int64_t dot,
			 const struct screen_x *x, double *a, double *b)
{
	*a = (double)s->scale[o] * x->sx * (double)dot;
	double bound = x->eps * s->l1[o] + (double)s->err[o] * x->sx_m1 + x->chain * s->l1[o];
	/* the few double roundings of these lines, generously; and an absolute term for the
	 * float chain's underflow, which the relative bound does not cover (each of its n_in
	 * steps may lose up to 2^-149) */
	*b = bound * (1 + 1e-12) + fabs(*a) * 1e-15 + 1e-36;
}

static void screen_task(void *ctx, uint32_t task)
{
	const struct screen_job *j = ctx;
	struct bn_head_screen_run *run = j->run;
	const struct bn_head_screen *s = run->s;
	int64_t *dots = run->dots + (size_t)bn_pool_thread_index() * run->cap * GROUP;
	uint32_t g0 = task * j->groups_per_task;
	uint32_t g1 = g0 + j->groups_per_task < run->n_groups ? g0 + j->groups_per_task
							       : run->n_groups;
	for (uint32_t b = 0; b < j->n; b++)
		run->task_lower[(size_t)b * run->max_tasks + task] = -INFINITY;
	for (uint32_t g = g0; g < g1; g++) {
		uint32_t o0 = g * GROUP, o1 = group_end(g, s->w.n_out);
		j->kern->i8_dots(&s->w, o0, o1, run->m, s->w.row_bytes, j->n, dots, GROUP);
		for (uint32_t b = 0; b < j->n; b++) {
			double upper = -INFINITY, lower = -INFINITY, a, d;
			for (uint32_t o = o0; o < o1; o++) {
				/* A row the mask refuses is not the argmax the sampler looks for:
				 * it neither sets the level L nor is a candidate (head_screen.h). A
				 * group with no allowed row keeps upper -inf and is not computed. */
				if (!row_allowed(run, b, o))
					continue;
				row_interval(s, o, dots[(size_t)b * GROUP + o - o0], &run->xs[b], &a, &d);
				upper = fmax(upper, a + d);
				lower = fmax(lower, a - d);
			}
			run->group_upper[(size_t)b * run->n_groups + g] = float_up(upper);
			double *tl = &run->task_lower[(size_t)b * run->max_tasks + task];
			*tl = fmax(*tl, lower);
		}
	}
}

struct exact_job {
	const struct bn_head_screen_run *run;
	const struct bn_kernels *kern;
	const float *x;
	uint32_t ldx, ldl;
	float *logits;
};

static void exact_task(void *ctx, uint32_t task)
{
	const struct exact_job *j = ctx;
	const struct bn_f_matrix *h = j->run->s->head;
	uint32_t pair = j->run->pairs[task];
	uint32_t b = pair / j->run->n_groups, g = pair % j->run->n_groups;
	j->kern->f_gemm(h, g * GROUP, group_end(g, h->n_out), j->x + (size_t)b * j->ldx, j->ldx, 1,
			j->logits + (size_t)b * j->ldl, j->ldl);
}

/* Row b's groups that can hold its argmax go to pairs; the others' logits become -inf.
 * Returns the number of pairs added. */
static uint32_t select_groups(struct bn_head_screen_run *run, uint32_t b, uint32_t n_tasks,
			      float *logits_row, uint32_t *pairs)
{
	uint32_t n_out = run->s->w.n_out, count = 0;
	double lower = -INFINITY;
	for (uint32_t t = 0; t < n_tasks; t++)
		lower = fmax(lower, run->task_lower[(size_t)b * run->max_tasks + t]);
	const float *up = run->group_upper + (size_t)b * run->n_groups;
	for (uint32_t g = 0; g < run->n_groups; g++) {
		if (!run->xs[b].finite || (double)up[g] >= lower) {
			pairs[count++] = b * run->n_groups + g;
			continue;
		}
		for (uint32_t o = g * GROUP; o < group_end(g, n_out); o++)
			logits_row[o] = -INFINITY;
	}
	return count;
}

int bn_head_screen_logits(struct bn_head_screen_run *run, const struct bn_kernels *kern,
			  uint32_t tasks_per_thread, const float *x, uint32_t ldx, uint32_t n,
			  const uint64_t *const *masks, float *logits, uint32_t ldl,
			  struct bn_head_screen_stats *stats)
{
	const struct bn_head_screen *s = run->s;
	if (reserve(run, n))
		return -ENOMEM;
	run->masks = masks;
	for (uint32_t b = 0; b < n; b++)
		quantize_x(s, x + (size_t)b * ldx, run->m + (size_t)b * s->w.row_bytes, &run->xs[b]);
	if (tasks_per_thread > BN_HEAD_SCREEN_MAX_TASKS_PER_THREAD)
		tasks_per_thread = BN_HEAD_SCREEN_MAX_TASKS_PER_THREAD;
	uint32_t n_tasks = tasks_per_thread * bn_pool_threads(run->pool);
	struct screen_job sj = { .run = run, .kern = kern, .n = n,
				 .groups_per_task = div_up(run->n_groups, n_tasks) };
	n_tasks = div_up(run->n_groups, sj.groups_per_task);
	bn_pool_run(run->pool, n_tasks, screen_task, &sj);
	uint32_t n_pairs = 0;
	for (uint32_t b = 0; b < n; b++) {
		uint32_t added = select_groups(run, b, n_tasks, logits + (size_t)b * ldl,
					       run->pairs + n_pairs);
		n_pairs += added;
		if (run->xs[b].finite) {
			stats->rows++;
			stats->groups += added;
		} else {
			stats->full_rows++;
		}
	}
	stats->n_groups = run->n_groups;
	struct exact_job ej = { .run = run, .kern = kern, .x = x, .ldx = ldx, .ldl = ldl,
				.logits = logits };
	bn_pool_run(run->pool, n_pairs, exact_task, &ej);
	return 0;
}
