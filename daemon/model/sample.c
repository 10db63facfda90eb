/* SPDX-License-Identifier: MIT */
/*
 * sample.c — the sampler whose semantics sample.h fixes.
 *
 * Costs, for a vocabulary of V (128k) and the 32 rows a step may sample on two cores:
 *  - greedy without log-probabilities: one argmax pass, nothing allocated or sorted;
 *  - penalties: O(n_prompt + n_output), through the counts/in_prompt scratch, which is
 *    cleared entry by entry as it is read, so it is all zero again on return;
 *  - top_k: a bounded heap over V, which most tokens pass by in a vector compare;
 *  - otherwise: one pass of exponentials over the candidates (four lanes at a time), then a
 *    ranking prefix that provably holds the cut and the draw is collected by a logit
 *    threshold and sorted; only that prefix. See "Narrowing" below for why that is exact.
 *
 * The ranking (logit descending, lower id first on ties) is a strict total order once the
 * logits are finite, which is why the non-greedy paths first clamp NaN and infinities.
 * Probabilities are e^((logit - max) / temperature) with a polynomial e^x (within 1 ulp of
 * expf and monotone on [-87, 0]: vec4.h, held to e^x by tests/test_sample.c); sums are in
 * double.
 */
#include "sample.h"

#include "bitnet_shm.h"
#include "sample_internal.h"
#include "vec4.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Scratch, the seeded draw, parameter checks                                                 */
/* ------------------------------------------------------------------------------------------ */

void bn_sampler_init(struct bn_sampler *s)
{
	*s = (struct bn_sampler){ 0 };
}

void bn_sampler_free(struct bn_sampler *s)
{
	free(s->prob);
	free(s->order);
	free(s->counts);
	free(s->in_prompt);
	free(s->keys);
	free(s->pen);
	free(s->masked);
	free(s->masked_ids);
	bn_sampler_init(s);
}

/* Grows every scratch array to n entries, all or nothing. The old counts/in_prompt are all
 * zero between calls, so fresh zeroed arrays replace them without copying. */
int sampler_reserve(struct bn_sampler *s, uint32_t n)
{
	if (n <= s->cap)
		return 0;
	struct bn_sampler g = {
		.prob = malloc((size_t)n * sizeof(*g.prob)),
		.order = malloc((size_t)n * sizeof(*g.order)),
		.counts = calloc(n, sizeof(*g.counts)),
		.in_prompt = calloc(n, sizeof(*g.in_prompt)),
		.keys = malloc((size_t)n * 2 * sizeof(*g.keys)),
		.pen = malloc((size_t)n * sizeof(*g.pen)),
		.cap = n,
	};
	if (!g.prob || !g.order || !g.counts || !g.in_prompt || !g.keys || !g.pen) {
		bn_sampler_free(&g);
		return -ENOMEM;
	}
	/* The masked rows' scratch is its own (sample_row.c): kept as it is. */
	g.masked = s->masked;
	g.masked_ids = s->masked_ids;
	g.mask_cap = s->mask_cap;
	s->masked = NULL;
	s->masked_ids = NULL;
	bn_sampler_free(s);
	*s = g;
	return 0;
}

uint64_t bn_sample_bits(uint64_t seed, uint32_t step)
{
	uint64_t z = seed + ((uint64_t)step + 1) * 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

float bn_sample_uniform(uint64_t seed, uint32_t step)
{
	return (float)(bn_sample_bits(seed, step) >> 40) * 0x1p-24f;
}

/* The range tests are written so that NaN fails them, and the bounds exclude infinities. */
static bool off_or_in(float v, float hi)
{
	return v == 0 || (v > 0 && v <= hi);
}

int bn_sampling_check(const struct bn_sampling *p, uint32_t logprob_capacity)
{
	if (!p || !off_or_in(p->temperature, 100) || !off_or_in(p->top_p, 1) ||
	    !off_or_in(p->min_p, 1) || !off_or_in(p->repetition_penalty, 100))
		return -BN_E_INVALID;
	if (!(p->presence_penalty >= -100 && p->presence_penalty <= 100) ||
	    !(p->frequency_penalty >= -100 && p->frequency_penalty <= 100))
		return -BN_E_INVALID;
	if (p->n_logprobs > logprob_capacity || (p->n_logprobs && !p->want_logprobs))
		return -BN_E_INVALID;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Penalties                                                                                  */
/* ------------------------------------------------------------------------------------------ */

bool sample_penalties_on(const struct bn_sample_ctx *ctx)
{
	const struct bn_sampling *p = ctx->params;
	bool rep = p->repetition_penalty != 0 && p->repetition_penalty != 1;
	bool out = p->frequency_penalty != 0 || p->presence_penalty != 0;
	return (rep && (ctx->n_prompt || ctx->n_output)) || (out && ctx->n_output);
}

static float repeat_penalty(float l, float r)
{
	return l > 0 ? l / r : l * r;
}

/* Each distinct token gets one entry: in_prompt marks prompt tokens already listed, and an
 * output token's count is zeroed when it is listed (a prompt token's with it, so the output
 * loop skips it), which also leaves counts clear. Ids >= n (not possible for validated
 * prompts) are skipped rather than trusted. */
uint32_t bn_sample_penalties(struct bn_sampler *s, const struct bn_sample_ctx *ctx,
			     uint32_t n_vocab, struct bn_penalty *out)
{
	if (!sample_penalties_on(ctx) || sampler_reserve(s, n_vocab))
		return 0;
	const struct bn_sampling *p = ctx->params;
	float r = p->repetition_penalty == 1 ? 0 : p->repetition_penalty;
	float f = p->frequency_penalty, pres = p->presence_penalty;
	bool subtract = f != 0 || pres != 0;
	uint32_t n = 0;
	for (uint32_t i = 0; i < ctx->n_output; i++)
		if (ctx->output[i] < n_vocab)
			s->counts[ctx->output[i]]++;
	for (uint32_t i = 0; r != 0 && i < ctx->n_prompt; i++) {
		uint32_t t = ctx->prompt[i];
		if (t >= n_vocab || s->in_prompt[t])
			continue;
		s->in_prompt[t] = 1;
		uint32_t c = s->counts[t];
		s->counts[t] = 0;
		out[n++] = (struct bn_penalty){ t, r, subtract && c ? f * (float)c + pres : 0 };
	}
	for (uint32_t i = 0; i < ctx->n_output; i++) {
		uint32_t t = ctx->output[i];
		uint32_t c = t < n_vocab ? s->counts[t] : 0;
		if (!c)
			continue;
		s->counts[t] = 0;
		if (r != 0 || subtract)
			out[n++] = (struct bn_penalty){ t, r, subtract ? f * (float)c + pres : 0 };
	}
	for (uint32_t i = 0; r != 0 && i < ctx->n_prompt; i++)
		if (ctx->prompt[i] < n_vocab)
			s->in_prompt[ctx->prompt[i]] = 0;
	return n;
}

void sample_apply_penalties(struct bn_sampler *s, const struct bn_sample_ctx *ctx, float *l,
			    uint32_t n)
{
	uint32_t count = bn_sample_penalties(s, ctx, n, s->pen);
	for (uint32_t i = 0; i < count; i++) {
		const struct bn_penalty *e = &s->pen[i];
		if (e->repeat != 0)
			l[e->token] = repeat_penalty(l[e->token], e->repeat);
		if (e->subtract != 0)
			l[e->token] -= e->subtract;
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Four-lane helpers (vec4.h has the common ones)                                             */
/* ------------------------------------------------------------------------------------------ */

typedef double v4d __attribute__((vector_size(32)));

/* The helpers of the hot loops below, which must not become calls. */
#define FORCE_INLINE static inline __attribute__((always_inline))

/* Whether any of l[i..min(i + 16, n)) is > v: the fast path of the scans below, where
 * almost every block fails. */
FORCE_INLINE bool any16_above(const float *l, uint32_t i, uint32_t n, float v)
{
	if (n - i < 16) {
		for (; i < n; i++)
			if (l[i] > v)
				return true;
		return false;
	}
	v4f a, b, c, d;
	memcpy(&a, l + i, sizeof(a));
	memcpy(&b, l + i + 4, sizeof(b));
	memcpy(&c, l + i + 8, sizeof(c));
	memcpy(&d, l + i + 12, sizeof(d));
	return any4((a > v) | (b > v) | (c > v) | (d > v));
}

/* ------------------------------------------------------------------------------------------ */
/* Scans of a row: argmax, max, clamping                                                      */
/* ------------------------------------------------------------------------------------------ */

/* The first index of the largest value; NaN never wins, and an all-NaN row gives 0. Blocks
 * of 16 are tested against the best so far and only one that beats it is rescanned, in
 * order and by strict >, so equal values keep the lowest id. */
uint32_t sample_argmax(const float *l, uint32_t n)
{
	float best = -INFINITY;
	uint32_t id = 0;
	for (uint32_t b = 0; b < n; b += 16) {
		if (!any16_above(l, b, n, best))
			continue;
		for (uint32_t i = b; i < b + 16 && i < n; i++) {
			if (l[i] > best) {
				best = l[i];
				id = i;
			}
		}
	}
	return id;
}

/* Clamps NaN to -FLT_MAX and infinities to +-FLT_MAX: the ranking then is a strict order and
 * the exponentials below never see inf - inf. */
static void clamp_row(float *l, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (!(l[i] >= -FLT_MAX))
			l[i] = -FLT_MAX;
		else if (l[i] > FLT_MAX)
			l[i] = FLT_MAX;
	}
}

FORCE_INLINE v4f max4(v4f a, v4f b)
{
	return select4(b > a, b, a);
}

/* The row's maximum, after clamping the row when it holds a NaN or an infinity: x - x is
 * then NaN, and a sum keeps it. Four running maxima keep the compare chains short. */
static float row_max(float *l, uint32_t n)
{
	const v4f lo = { -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX };
	v4f m0 = lo, m1 = lo, m2 = lo, m3 = lo, nonfinite = { 0, 0, 0, 0 };
	uint32_t i = 0;
	for (; i + 16 <= n; i += 16) {
		v4f a, b, c, d;
		memcpy(&a, l + i, sizeof(a));
		memcpy(&b, l + i + 4, sizeof(b));
		memcpy(&c, l + i + 8, sizeof(c));
		memcpy(&d, l + i + 12, sizeof(d));
		nonfinite += (a - a) + (b - b) + (c - c) + (d - d);
		m0 = max4(m0, a);
		m1 = max4(m1, b);
		m2 = max4(m2, c);
		m3 = max4(m3, d);
	}
	for (; i < n; i += 4) {
		v4f x = load4(l + i, n - i, -FLT_MAX);
		nonfinite += x - x;
		m0 = max4(m0, x);
	}
	if (any4(nonfinite != 0)) {
		clamp_row(l, n);
		return l[sample_argmax(l, n)];
	}
	m0 = max4(max4(m0, m1), max4(m2, m3));
	float m = m0[0] > m0[1] ? m0[0] : m0[1];
	m = m0[2] > m ? m0[2] : m;
	return m0[3] > m ? m0[3] : m;
}

/* ------------------------------------------------------------------------------------------ */
/* Ranking: heaps and sorting of token ids                                                    */
/* ------------------------------------------------------------------------------------------ */

/* a ranks before b: a strict total order on ids of finite logits. */
static inline bool ranks_before(const float *l, uint32_t a, uint32_t b)
{
	return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static inline void swap_ids(uint32_t *a, uint32_t *b)
{
	uint32_t t = *a;
	*a = *b;
	*b = t;
}

/* Restores the heap h[0..n) below i; the root of this heap is its worst-ranked id. */
static void sift_down(const float *l, uint32_t *h, uint32_t n, uint32_t i)
{
	for (uint32_t c; (c = 2 * i + 1) < n; i = c) {
		if (c + 1 < n && ranks_before(l, h[c], h[c + 1]))
			c++;
		if (!ranks_before(l, h[i], h[c]))
			return;
		swap_ids(&h[i], &h[c]);
	}
}

static void heap_build(const float *l, uint32_t *h, uint32_t n)
{
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(l, h, n, i);
}

/* Turns a heap into a best-first array: the worst goes last, then the next worst... */
static void heap_drain(const float *l, uint32_t *h, uint32_t n)
{
	for (uint32_t end = n; end-- > 1;) {
		swap_ids(&h[0], &h[end]);
		sift_down(l, h, end, 0);
	}
}

/* h[0..k) gets the k best-ranked ids of 0..n-1, as a heap (unordered). A later id can only
 * displace the root by a strictly larger logit: on a tie the lower id, already in, wins. */
static void heap_select(const float *l, uint32_t n, uint32_t k, uint32_t *h)
{
	if (!k)
		return;
	for (uint32_t i = 0; i < k; i++)
		h[i] = i;
	heap_build(l, h, k);
	float worst = l[h[0]];
	for (uint32_t b = k; b < n; b += 16) {
		if (!any16_above(l, b, n, worst))
			continue;
		for (uint32_t i = b; i < b + 16 && i < n; i++) {
			if (l[i] > worst) {
				h[0] = i;
				sift_down(l, h, k, 0);
				worst = l[h[0]];
			}
		}
	}
}

static void insertion_sort(const float *l, uint32_t *a, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		uint32_t v = a[i], j = i;
		for (; j > 0 && ranks_before(l, v, a[j - 1]); j--)
			a[j] = a[j - 1];
		a[j] = v;
	}
}

/* Moves the median of a[0], a[n/2], a[n-1] to a[0], as the pivot. */
static void median_to_front(const float *l, uint32_t *a, uint32_t n)
{
	uint32_t *x = &a[0], *y = &a[n / 2], *z = &a[n - 1];
	if (ranks_before(l, *y, *x))
		swap_ids(x, y);
	if (ranks_before(l, *z, *y))
		swap_ids(y, z);
	if (ranks_before(l, *y, *x))
		swap_ids(x, y);
	swap_ids(&a[0], y);
}

/* Splits a[0..n) around the pivot a[0]; returns its final index (before it: better ids). */
static uint32_t partition(const float *l, uint32_t *a, uint32_t n)
{
	uint32_t p = a[0], i = 0, j = n;
	for (;;) {
		while (ranks_before(l, a[++i], p))
			if (i == n - 1)
				break;
		while (ranks_before(l, p, a[--j]))
			;
		if (i >= j)
			break;
		swap_ids(&a[i], &a[j]);
	}
	swap_ids(&a[0], &a[j]);
	return j;
}

/* Sorts ids best first: quicksort on the larger side's loop, heapsort past a depth limit
 * (so O(n log n) whatever the logits), insertion sort for short runs. */
static void sort_ranked(const float *l, uint32_t *a, uint32_t n)
{
	uint32_t depth = 2;
	for (uint32_t m = n; m > 1; m >>= 1)
		depth += 2;
	while (n > 16) {
		if (depth-- == 0) {
			heap_build(l, a, n);
			heap_drain(l, a, n);
			return;
		}
		median_to_front(l, a, n);
		uint32_t k = partition(l, a, n);
		if (k < n - k - 1) {
			sort_ranked(l, a, k);
			a += k + 1;
			n -= k + 1;
		} else {
			sort_ranked(l, a + k + 1, n - k - 1);
			n = k;
		}
	}
	insertion_sort(l, a, n);
}

/* A key whose ascending order is the ranking's: the logit's bits made monotone, then
 * inverted (higher logits first), with -0 folded into +0 as the comparisons above do. */
static uint32_t rank_key(float f)
{
	uint32_t b;
	f = f == 0 ? 0.0f : f;
	memcpy(&b, &f, sizeof(b));
	b = b & 0x80000000u ? ~b : b | 0x80000000u;
	return ~b;
}

/* Sorts ids best first by an LSD radix sort of (rank_key << 32 | id), 8 bits a pass, for
 * prefixes too long for sort_ranked (128k ids: about 1 ms against 10). Each pass is stable,
 * so ids already ascending need no passes on the id's bytes; a pass whose digit is the same
 * for every id is skipped. buf holds 2n keys. */
static void radix_ranked(const float *l, uint32_t *ids, uint32_t n, uint64_t *buf,
			 bool ids_ascending)
{
	uint32_t hist[8][256] = { { 0 } };
	uint64_t *a = buf, *b = buf + n;
	unsigned first = ids_ascending ? 4 : 0;
	for (uint32_t i = 0; i < n; i++) {
		a[i] = (uint64_t)rank_key(l[ids[i]]) << 32 | ids[i];
		for (unsigned d = first; d < 8; d++)
			hist[d][(a[i] >> (8 * d)) & 255]++;
	}
	for (unsigned d = first; d < 8; d++) {
		if (hist[d][(a[0] >> (8 * d)) & 255] == n)
			continue;
		uint32_t at[256], sum = 0;
		for (unsigned j = 0; j < 256; j++) {
			at[j] = sum;
			sum += hist[d][j];
		}
		for (uint32_t i = 0; i < n; i++)
			b[at[(a[i] >> (8 * d)) & 255]++] = a[i];
		uint64_t *t = a;
		a = b;
		b = t;
	}
	for (uint32_t i = 0; i < n; i++)
		ids[i] = (uint32_t)a[i];
}

/* ------------------------------------------------------------------------------------------ */
/* Log-probabilities                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* log sum_i e^(l[i] - max), the log-softmax's normalizer. */
static double log_norm(const float *l, uint32_t n, float max)
{
	v4d z = { 0, 0, 0, 0 };
	for (uint32_t i = 0; i < n; i += 4)
		z += __builtin_convertvector(exp_neg(load4(l + i, n - i, -INFINITY) - max), v4d);
	return log(z[0] + z[1] + z[2] + z[3]);
}

/* The n_logprobs most likely tokens, by partial selection; returns the normalizer. */
static double top_logprobs(struct bn_sampler *s, const struct bn_sampling *p, const float *l,
			   uint32_t n_vocab, float max, struct bn_sample_out *out)
{
	double lse = log_norm(l, n_vocab, max);
	uint32_t k = p->n_logprobs < n_vocab ? p->n_logprobs : n_vocab;
	if (!out->top)
		k = 0;
	heap_select(l, n_vocab, k, s->order);
	heap_drain(l, s->order, k);
	for (uint32_t i = 0; i < k; i++) {
		uint32_t t = s->order[i];
		out->top[i] = (struct bn_token_logprob){ t, (float)((double)l[t] - max - lse) };
	}
	out->n_top = k;
	return lse;
}

/* ------------------------------------------------------------------------------------------ */
/* Probabilities of the candidates                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The candidates after top_k, with their unnormalized probabilities: the first-ranked one
 * has exactly 1 (e^0), so "below min_p times the first" is "below min_p". */
struct cands {
	const float *l;       /* the (penalized, clamped) logits */
	float *prob;          /* by token id; valid for the candidates */
	uint32_t *order;      /* ids: the top_k heap, then a ranking prefix (narrowing) */
	uint64_t *keys;       /* radix-sort buffers */
	uint32_t n_vocab;
	uint32_t k;           /* top_k when it truncates, else 0: the candidates are all ids */
	uint32_t n_base;      /* the candidates' count */
	float max, t, min_p;
	double z;             /* sum of prob over the candidates */
	uint32_t n_min;       /* candidates with prob >= min_p (all when min_p is off) */
	double z_min;         /* their sum */
};

struct mass4 {
	v4d z, z_min;
	v4i n_min;
};

/* Probabilities of four logits; lanes not in `valid` count for nothing. with_min is a
 * constant at each call, so the common loop without min_p carries no min_p sums. */
FORCE_INLINE v4f mass_add(struct mass4 *m, const struct cands *c, v4f x, v4i valid, bool with_min)
{
	v4f p = exp_neg((x - c->max) / c->t);
	m->z += __builtin_convertvector((v4f)((v4i)p & valid), v4d);
	if (with_min) {
		v4i keep = (p >= c->min_p) & valid;
		m->z_min += __builtin_convertvector((v4f)((v4i)p & keep), v4d);
		m->n_min -= keep;
	}
	return p;
}

static void mass_total(struct cands *c, const struct mass4 *m, bool with_min)
{
	c->z = m->z[0] + m->z[1] + m->z[2] + m->z[3];
	c->z_min = c->z;
	c->n_min = c->n_base;
	if (with_min) {
		c->z_min = m->z_min[0] + m->z_min[1] + m->z_min[2] + m->z_min[3];
		c->n_min = (uint32_t)(m->n_min[0] + m->n_min[1] + m->n_min[2] + m->n_min[3]);
	}
}

/* Every id is a candidate: prob[0..n_vocab) in one pass, which also does the first
 * narrowing (below): the ids with logit >= cut go to order[]; returns their count. */
FORCE_INLINE uint32_t scan_with(struct cands *c, float cut, bool with_min)
{
	struct mass4 m = { 0 };
	const v4i lane = { 0, 1, 2, 3 };
	uint32_t n = 0;
	for (uint32_t i = 0; i < c->n_vocab; i += 4) {
		uint32_t left = c->n_vocab - i < 4 ? c->n_vocab - i : 4;
		v4i valid = lane < (int32_t)left;
		v4f x = load4(c->l + i, left, -INFINITY);
		v4f p = mass_add(&m, c, x, valid, with_min);
		if (left == 4)
			memcpy(c->prob + i, &p, sizeof(p));
		else
			for (uint32_t j = 0; j < left; j++)
				c->prob[i + j] = p[j];
		if (!any4((x >= cut) & valid))
			continue;
		for (uint32_t j = 0; j < left; j++)
			if (x[j] >= cut)
				c->order[n++] = i + j;
	}
	mass_total(c, &m, with_min);
	return n;
}

static uint32_t scan_all(struct cands *c, float cut)
{
	return c->min_p > 0 ? scan_with(c, cut, true) : scan_with(c, cut, false);
}

/* The candidates are the ids in order[0..k): gathered four at a time. */
static void probs_of(struct cands *c)
{
	struct mass4 m = { 0 };
	const v4i lane = { 0, 1, 2, 3 };
	for (uint32_t i = 0; i < c->k; i += 4) {
		uint32_t left = c->k - i < 4 ? c->k - i : 4;
		v4f x = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
		for (uint32_t j = 0; j < left; j++)
			x[j] = c->l[c->order[i + j]];
		v4f p = mass_add(&m, c, x, lane < (int32_t)left, true);
		for (uint32_t j = 0; j < left; j++)
			c->prob[c->order[i + j]] = p[j];
	}
	mass_total(c, &m, true);
}

/* order[0..n_base) = the candidates, unordered. */
static void load_candidates(struct cands *c)
{
	if (c->k) {
		heap_select(c->l, c->n_vocab, c->k, c->order);
		return;
	}
	for (uint32_t i = 0; i < c->n_vocab; i++)
		c->order[i] = i;
}

/* ------------------------------------------------------------------------------------------ */
/* Narrowing: a ranking prefix that holds the cut and the draw                                */
/* ------------------------------------------------------------------------------------------ */

/*
 * Both the top_p cut and the draw stop at the first ranked token where a running sum
 * passes a target `need` (top_p x z, or u x the kept mass). If the candidates of a set that
 * are left out all have prob < theta, they sum to < n x theta; with theta = (mass - need)
 * / (2n) what is kept has more than need, so the walk stops inside it. A set taken by a
 * logit threshold is a prefix of the ranking, so sorting it alone and walking it gives the
 * token that sorting everything would. Each pass re-derives theta from the smaller set,
 * which tightens it fast on peaked distributions. The first pass, fused into the scan of
 * exponentials, runs before z is known and uses z >= 1 (the first candidate alone has 1).
 * Nothing min_p drops is ever needed, which bounds theta from below. Only the speed depends
 * on the thresholds: a walk that runs off the prefix (rounding) falls back to everything.
 */

/* min_p, less a margin: the logit threshold below need not be exact, only a prefix. */
static double theta_floor(const struct cands *c)
{
	return c->min_p * (1 - 0x1p-10);
}

/* The logit at or above which prob >= theta. */
static float cut_for(const struct cands *c, double theta)
{
	if (theta < theta_floor(c))
		theta = theta_floor(c);
	return theta > 0 ? (float)(c->max + c->t * log(theta)) : -INFINITY;
}

/* The target the prefix must pass (*all: counting every token, not only what min_p keeps):
 * the top_p cut's when there is one, as the draw stays inside it; else the draw's. z and
 * z_min may still be unknown: the fraction of them is returned. */
static double need_fraction(float top_p, float u, bool *all)
{
	*all = top_p != 0 && top_p < 1;
	return *all ? top_p : u;
}

/* Ids of src[0..n) with logit >= cut, compacted in place; returns their count. */
static uint32_t keep_above(const float *l, uint32_t *ids, uint32_t n, float cut)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < n; i++)
		if (l[ids[i]] >= cut)
			ids[m++] = ids[i];
	return m;
}

/* The mass that counts toward need among order[0..n). */
static double prefix_mass(const struct cands *c, uint32_t n, bool all)
{
	double m = 0;
	for (uint32_t i = 0; i < n; i++) {
		float p = c->prob[c->order[i]];
		if (all || p >= c->min_p)
			m += p;
	}
	return m;
}

/* Narrows the ranking prefix order[0..n) while that pays; returns the new length. */
static uint32_t narrow(struct cands *c, uint32_t n, double need, bool all)
{
	for (int pass = 0; pass < 8 && n > 64; pass++) {
		double theta = (prefix_mass(c, n, all) - need) / (2.0 * n);
		uint32_t m = keep_above(c->l, c->order, n, cut_for(c, theta));
		bool shrunk = m < n / 2;
		n = m;
		if (!shrunk)
			break;
	}
	return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Truncation and the draw                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The kept tokens: the first `end` ranked ones, less those below min_p; `n` of them, with
 * mass z. */
struct kept {
	uint32_t end, n;
	double z;
};

/* top_p's cut on the sorted prefix order[0..len): false when the prefix is too short to
 * tell. Once every token min_p keeps has been seen the rest cannot matter, so the cut ends
 * there too. */
static bool cut_top_p(const struct cands *c, uint32_t len, float top_p, struct kept *k)
{
	double target = (double)top_p * c->z, cum = 0, kz = 0;
	uint32_t kn = 0;
	for (uint32_t i = 0; i < len; i++) {
		float p = c->prob[c->order[i]];
		cum += p;
		if (p >= c->min_p) {
			kz += p;
			kn++;
		}
		if (cum >= target || kn == c->n_min) {
			*k = (struct kept){ i + 1, kn, kz };
			return true;
		}
	}
	if (len < c->n_base)
		return false;
	*k = (struct kept){ len, kn, kz }; /* rounding kept the sum under target: keep all */
	return true;
}

/* The draw on the sorted prefix order[0..len): the first kept token whose running sum
 * exceeds u x the kept mass, or the last kept one. UINT32_MAX when the prefix is too short. */
static uint32_t draw(const struct cands *c, uint32_t len, const struct kept *k, float u)
{
	double target = (double)u * k->z, cum = 0;
	uint32_t end = k->end < len ? k->end : len, seen = 0, last = 0;
	for (uint32_t i = 0; i < end; i++) {
		float p = c->prob[c->order[i]];
		if (p < c->min_p)
			continue;
		cum += p;
		last = i;
		if (cum > target)
			return c->order[i];
		seen++;
	}
	return seen && seen == k->n ? c->order[last] : UINT32_MAX;
}

/* One attempt on the sorted prefix order[0..len); UINT32_MAX when it was too short. */
static uint32_t pick(const struct cands *c, uint32_t len, float top_p, float u)
{
	struct kept k = { c->n_base, c->n_min, c->z_min };
	if (top_p != 0 && top_p < 1 && !cut_top_p(c, len, top_p, &k))
		return UINT32_MAX;
	return draw(c, len, &k, u);
}

/* Sorts order[0..len) best first. The ids of the whole-vocabulary path are ascending (the
 * scans keep index order), those of the top_k heap are not. */
static void sort_prefix(struct cands *c, uint32_t len)
{
	if (len <= 1024)
		sort_ranked(c->l, c->order, len);
	else
		radix_ranked(c->l, c->order, len, c->keys, !c->k);
}

static uint32_t sample_row(struct bn_sampler *s, const struct bn_sampling *p, const float *l,
			   uint32_t n_vocab, float max, float u)
{
	struct cands c = {
		.l = l, .prob = s->prob, .order = s->order, .keys = s->keys, .n_vocab = n_vocab,
		.k = p->top_k < n_vocab ? p->top_k : 0, .max = max, .t = p->temperature,
		.min_p = p->min_p,
	};
	c.n_base = c.k ? c.k : n_vocab;
	bool all;
	double frac = need_fraction(p->top_p, u, &all);
	uint32_t len = c.k;
	if (c.k) {
		load_candidates(&c);
		probs_of(&c);
	} else {
		len = scan_all(&c, cut_for(&c, (1 - frac) / (2.0 * n_vocab)));
	}
	len = narrow(&c, len, frac * (all ? c.z : c.z_min), all);
	sort_prefix(&c, len);
	uint32_t tok = pick(&c, len, p->top_p, u);
	if (tok != UINT32_MAX)
		return tok;
	load_candidates(&c); /* rounding left the draw outside the prefix: take them all */
	sort_prefix(&c, c.n_base);
	tok = pick(&c, c.n_base, p->top_p, u);
	return tok != UINT32_MAX ? tok : c.order[0]; /* cannot happen: all of them decide */
}

/* ------------------------------------------------------------------------------------------ */
/* The entry point                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* top_k 1 keeps only the first-ranked token: the argmax, whatever the temperature. */
static bool greedy(const struct bn_sampling *p)
{
	return p->temperature == 0 || p->top_k == 1;
}

int bn_sample_argmax_only(const struct bn_sample_ctx *ctx)
{
	return bn_sample_argmax_allowed(ctx) && !ctx->mask;
}

int bn_sample_argmax_allowed(const struct bn_sample_ctx *ctx)
{
	const struct bn_sampling *p = ctx->params;
	return greedy(p) && !p->want_logprobs && !sample_penalties_on(ctx);
}

int sample_dense(struct bn_sampler *s, const struct bn_sampling *p, uint32_t step, float *l,
		 uint32_t n, struct bn_sample_out *out)
{
	bool is_greedy = greedy(p);
	bool lp = p->want_logprobs;
	if ((lp || !is_greedy) && sampler_reserve(s, n))
		return -ENOMEM;
	*out = (struct bn_sample_out){ .top = out->top };
	if (is_greedy && !lp) {
		out->token = sample_argmax(l, n);
		return 0;
	}
	float max = row_max(l, n);
	double lse = lp ? top_logprobs(s, p, l, n, max, out) : 0;
	out->token = is_greedy ? sample_argmax(l, n)
			    : sample_row(s, p, l, n, max, bn_sample_uniform(p->seed, step));
	if (lp)
		out->logprob = (float)((double)l[out->token] - max - lse);
	return 0;
}

int bn_score_token(struct bn_sampler *s, float *logits, uint32_t n_vocab, uint32_t target,
		   uint32_t n_top, struct bn_sample_out *out)
{
	if (!n_vocab || target >= n_vocab)
		return -EINVAL;
	if (sampler_reserve(s, n_vocab))
		return -ENOMEM;
	const struct bn_sampling p = { .want_logprobs = true, .n_logprobs = n_top };
	*out = (struct bn_sample_out){ .top = out->top, .token = target };
	/* The same steps as bn_sample's for a chosen token, so the bits agree. */
	float max = row_max(logits, n_vocab);
	double lse = top_logprobs(s, &p, logits, n_vocab, max, out);
	out->logprob = (float)((double)logits[target] - max - lse);
	return 0;
}
