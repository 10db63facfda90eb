/* SPDX-License-Identifier: MIT */
/*
 * The sampler (daemon/model/sample.c) against oracles written here from the semantics in
 * daemon/model/sample.h: the exact distribution after temperature, top_k, top_p and min_p, in
 * double from a full sort (checked by chi-square on seeded draws); a naive full-sort sampler
 * (checked token for token on a 128k vocabulary); the log-softmax in double; the penalties
 * token by token; splitmix64 from its published first output; the parameter ranges of
 * struct bn_slot; the sampler's exponential (daemon/model/vec4.h, included only to be
 * tested) against e^x in double. Nothing else here shares code with sample.c.
 */
#include "../daemon/model/sample.h"
#include "../daemon/model/vec4.h"
#include "../shm/bitnet_shm.h"

#include "testutil.h"

#include "ckassert.h"
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ */
/* Helpers and oracles                                                                        */
/* ------------------------------------------------------------------------------------------ */

static double rng_unit(void)
{
	return (tu_rng_next() + 0.5) / 4294967296.0;
}

/* A standard normal (Box-Muller). */
static double rng_gauss(void)
{
	return sqrt(-2 * log(rng_unit())) * cos(6.283185307179586 * rng_unit());
}

/* Logits shaped like a language model's: a normal bulk and a few tokens well above it. */
static void model_like_logits(float *l, uint32_t n, double sigma, uint64_t seed)
{
	tu_rng_seed(seed);
	for (uint32_t i = 0; i < n; i++)
		l[i] = (float)(sigma * rng_gauss());
	for (uint32_t j = 0; j < 24; j++)
		l[tu_rng_next() % n] += (float)(8 + 6 * rng_unit());
}

static const float *cmp_logits;

static int cmp_rank(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	if (cmp_logits[x] != cmp_logits[y])
		return cmp_logits[x] > cmp_logits[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* The ranking: logit descending, lower id first on ties. */
static uint32_t *ranked(const float *l, uint32_t n)
{
	uint32_t *ids = malloc(n * sizeof(*ids));
	ck_assert_ptr_nonnull(ids);
	for (uint32_t i = 0; i < n; i++)
		ids[i] = i;
	cmp_logits = l;
	qsort(ids, n, sizeof(*ids), cmp_rank);
	return ids;
}

/* The distribution of sample.h step 4, exactly (double): p[id] for every id, 0 where a
 * truncation drops it. Asserts that no cut lies within 1e-9 of a threshold (exact ties
 * aside), so that the float arithmetic of the sampler cannot fall on the other side. */
static void exact_dist(const float *l, uint32_t n, const struct bn_sampling *sp, double *p)
{
	uint32_t *ids = ranked(l, n);
	uint32_t kept = sp->top_k && sp->top_k < n ? sp->top_k : n;
	double *w = calloc(n, sizeof(*w)), z = 0;
	for (uint32_t j = 0; j < kept; j++)
		z += w[j] = exp(((double)l[ids[j]] - l[ids[0]]) / sp->temperature);
	if (sp->top_p != 0 && sp->top_p < 1) { /* 1 keeps everything */
		double cum = 0;
		for (uint32_t j = 0; j < kept; j++) {
			cum += w[j] / z;
			ck_assert_msg(fabs(cum - sp->top_p) > 1e-9, "top_p test vector on a boundary");
			if (cum >= sp->top_p) {
				kept = j + 1;
				break;
			}
		}
	}
	double total = 0;
	for (uint32_t j = 0; j < kept; j++) {
		double d = w[j] - sp->min_p * w[0]; /* 0 only for exact ties at min_p 1 */
		ck_assert_msg(d == 0 || fabs(d) > 1e-9, "min_p test vector on a boundary");
		if (w[j] < sp->min_p * w[0])
			w[j] = 0;
		total += w[j];
	}
	for (uint32_t i = 0; i < n; i++)
		p[i] = 0;
	for (uint32_t j = 0; j < kept; j++)
		p[ids[j]] = w[j] / total;
	free(w);
	free(ids);
}

/* sample.h followed literally on a full ranking: float probabilities e^((l - max) / t),
 * double sums, the top_p prefix, the min_p drop, the walk. */
static uint32_t naive_sample(const float *l, const uint32_t *rank, uint32_t n,
			     const struct bn_sampling *sp, float u)
{
	uint32_t kept = sp->top_k && sp->top_k < n ? sp->top_k : n;
	float max = l[rank[0]], *pf = malloc(kept * sizeof(*pf));
	double z = 0;
	for (uint32_t j = 0; j < kept; j++)
		z += pf[j] = expf((l[rank[j]] - max) / sp->temperature);
	if (sp->top_p != 0) {
		double cum = 0;
		for (uint32_t j = 0; j < kept; j++) {
			cum += pf[j];
			if (cum >= (double)sp->top_p * z) {
				kept = j + 1;
				break;
			}
		}
	}
	double total = 0;
	for (uint32_t j = 0; j < kept; j++)
		if (pf[j] >= sp->min_p * pf[0])
			total += pf[j];
	double cum = 0;
	uint32_t last = 0;
	for (uint32_t j = 0; j < kept; j++) {
		if (pf[j] < sp->min_p * pf[0])
			continue;
		cum += pf[j];
		last = j;
		if (cum > (double)u * total)
			break;
	}
	free(pf);
	return rank[last];
}

/* Upper tail of chi-square with df degrees of freedom at about p = 1e-6 (Wilson-Hilferty):
 * a correct sampler fails it once in a million seeds; a wrong truncation or temperature
 * misses it by far (see the tests' comments). */
static double chi2_bound(int df)
{
	double a = 2.0 / (9.0 * df), z = 4.75;
	return df * pow(1 - a + z * sqrt(a), 3);
}

static struct bn_sampler sampler;

static void setup(void)
{
	bn_sampler_init(&sampler);
}

static void teardown(void)
{
	bn_sampler_free(&sampler);
}

/* The sampler's scratch is back to all zero. */
static void assert_scratch_clear(void)
{
	for (uint32_t i = 0; i < sampler.cap; i++) {
		ck_assert_msg(sampler.counts[i] == 0, "counts[%u] = %u", i, sampler.counts[i]);
		ck_assert_msg(sampler.in_prompt[i] == 0, "in_prompt[%u] set", i);
	}
}

/* One token from a copy of l (bn_sample modifies its row). */
static uint32_t sample_copy(const float *l, uint32_t n, const struct bn_sample_ctx *ctx)
{
	float *row = malloc(n * sizeof(*row));
	memcpy(row, l, n * sizeof(*row));
	struct bn_sample_out out = { 0 };
	ck_assert_int_eq(bn_sample(&sampler, ctx, row, n, &out), 0);
	ck_assert_uint_lt(out.token, n);
	free(row);
	return out.token;
}

/* ------------------------------------------------------------------------------------------ */
/* The seeded draw                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* splitmix64's first output from state 0 is 0xe220a8397b1dcdaf (Vigna's reference). */
START_TEST(uniform_known_answer)
{
	ck_assert(bn_sample_uniform(0, 0) == (float)0xe220a8u * 0x1p-24f);
}
END_TEST

/* Against splitmix64 written out here, and always in [0, 1). */
START_TEST(uniform_matches_splitmix64)
{
	const uint64_t seeds[] = { 0, 1, 42, 0xdeadbeefcafef00dull, UINT64_MAX };
	const uint32_t steps[] = { 0, 1, 2, 1000, UINT32_MAX - 1, UINT32_MAX };
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		for (size_t j = 0; j < sizeof(steps) / sizeof(steps[0]); j++) {
			uint64_t x = seeds[i] + 0x9E3779B97F4A7C15ull * ((uint64_t)steps[j] + 1);
			x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
			x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
			x ^= x >> 31;
			float want = (float)(x >> 40) / 16777216.0f;
			float u = bn_sample_uniform(seeds[i], steps[j]);
			ck_assert_msg(u == want, "seed %llu step %u", (unsigned long long)seeds[i],
				      steps[j]);
			ck_assert(u >= 0 && u < 1);
		}
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Greedy and log-probabilities                                                               */
/* ------------------------------------------------------------------------------------------ */

START_TEST(greedy_lowest_id_on_ties)
{
	/* 37 logits: the maximum 4.5 at ids 9, 20 and 36; a NaN never wins. */
	float l[37];
	for (int i = 0; i < 37; i++)
		l[i] = (float)(i % 7) * 0.5f;
	l[9] = l[20] = l[36] = 4.5f;
	l[3] = NAN;
	struct bn_sampling sp = { 0 };
	struct bn_sample_ctx ctx = { .params = &sp };
	ck_assert_uint_eq(sample_copy(l, 37, &ctx), 9);
	l[9] = 4.0f;
	ck_assert_uint_eq(sample_copy(l, 37, &ctx), 20);
	for (uint32_t n = 1; n <= 37; n++) { /* every length, for the sampler's block tails */
		uint32_t want = 0;
		for (uint32_t i = 1; i < n; i++)
			if (l[i] > l[want] || l[want] != l[want])
				want = i;
		ck_assert_uint_eq(sample_copy(l, n, &ctx), want);
	}
	/* Greedy without penalties or log-probabilities needs no scratch at all. */
	ck_assert_uint_eq(sampler.cap, 0);
}
END_TEST

START_TEST(greedy_random_rows)
{
	float l[1000];
	struct bn_sampling sp = { 0 };
	struct bn_sample_ctx ctx = { .params = &sp };
	for (uint64_t seed = 0; seed < 200; seed++) {
		tu_rng_seed(seed);
		uint32_t n = 1 + tu_rng_next() % 1000;
		for (uint32_t i = 0; i < n; i++)
			l[i] = (float)(tu_rng_next() % 64) * 0.25f; /* many ties */
		uint32_t want = 0;
		for (uint32_t i = 1; i < n; i++)
			if (l[i] > l[want])
				want = i;
		ck_assert_uint_eq(sample_copy(l, n, &ctx), want);
	}
}
END_TEST

/* top_k 1 keeps the first-ranked token, at any temperature. */
START_TEST(top_k_one_is_greedy)
{
	float l[] = { 1, 5, 2, 5, -3 };
	struct bn_sampling sp = { .temperature = 50, .top_k = 1 };
	struct bn_sample_ctx ctx = { .params = &sp };
	for (uint64_t seed = 0; seed < 100; seed++) {
		sp.seed = seed;
		ck_assert_uint_eq(sample_copy(l, 5, &ctx), 1);
	}
}
END_TEST

/* log p_i in double from the row, for the oracle. */
static void log_softmax(const float *l, uint32_t n, double *lp)
{
	double max = -INFINITY, z = 0;
	for (uint32_t i = 0; i < n; i++)
		max = l[i] > max ? l[i] : max;
	for (uint32_t i = 0; i < n; i++)
		z += exp(l[i] - max);
	for (uint32_t i = 0; i < n; i++)
		lp[i] = l[i] - max - log(z);
}

/* Chosen token's and the top-n log-probabilities, greedy and sampled, with ties. */
START_TEST(logprobs_match_log_softmax)
{
	enum { N = 5003 };
	float *l = malloc(N * sizeof(*l)), *row = malloc(N * sizeof(*row));
	double *lp = malloc(N * sizeof(*lp));
	struct bn_token_logprob top[40];
	for (int round = 0; round < 12; round++) {
		model_like_logits(l, N, 2.0, 100 + round);
		l[17] = l[4000] = l[2500] = 30; /* a three-way tie at the top */
		l[99] = l[98] = 12;             /* and one lower down */
		log_softmax(l, N, lp);
		uint32_t *rank = ranked(l, N);
		struct bn_sampling sp = { .want_logprobs = 1, .n_logprobs = (uint32_t)(round * 3),
					  .temperature = round % 2 ? 0.7f : 0, .seed = 9 };
		struct bn_sample_ctx ctx = { .params = &sp };
		memcpy(row, l, N * sizeof(*row));
		struct bn_sample_out out = { .top = top };
		ck_assert_int_eq(bn_sample(&sampler, &ctx, row, N, &out), 0);
		if (sp.temperature == 0)
			ck_assert_uint_eq(out.token, 17);
		ck_assert_double_eq_tol(out.logprob, lp[out.token], 1e-5);
		ck_assert_uint_eq(out.n_top, sp.n_logprobs);
		for (uint32_t i = 0; i < out.n_top; i++) {
			ck_assert_uint_eq(top[i].token, rank[i]);
			ck_assert_double_eq_tol(top[i].logprob, lp[rank[i]], 1e-5);
		}
		free(rank);
	}
	free(l);
	free(row);
	free(lp);
}
END_TEST

/* More alternatives asked than the vocabulary has: all of them, in order. */
START_TEST(logprobs_more_than_vocab)
{
	float l[] = { 0.5f, 2, 2, -1 };
	struct bn_token_logprob top[8];
	struct bn_sampling sp = { .want_logprobs = 1, .n_logprobs = 8 };
	struct bn_sample_ctx ctx = { .params = &sp };
	struct bn_sample_out out = { .top = top };
	double lp[4];
	log_softmax(l, 4, lp);
	ck_assert_int_eq(bn_sample(&sampler, &ctx, l, 4, &out), 0);
	ck_assert_uint_eq(out.token, 1);
	ck_assert_uint_eq(out.n_top, 4);
	const uint32_t want[] = { 1, 2, 0, 3 };
	for (int i = 0; i < 4; i++) {
		ck_assert_uint_eq(top[i].token, want[i]);
		ck_assert_double_eq_tol(top[i].logprob, lp[want[i]], 1e-6);
	}
	/* Without logprobs asked, nothing is reported. */
	sp = (struct bn_sampling){ 0 };
	ck_assert_int_eq(bn_sample(&sampler, &ctx, l, 4, &out), 0);
	ck_assert_uint_eq(out.n_top, 0);
	ck_assert(out.logprob == 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The distribution: chi-square on seeded draws                                               */
/* ------------------------------------------------------------------------------------------ */

/* Ten logits with ties: ranking 2, 5 (3.0), 7 (2.5), 0 (2.0), 8 (1.5), 1, 3 (1.0), 4 (0.5),
 * 9 (-0.5), 6 (-1.0). */
static const float small_logits[10] = { 2.0f, 1.0f, 3.0f, 1.0f, 0.5f, 3.0f, -1.0f, 2.5f,
					1.5f, -0.5f };

/* Draws N tokens with seeds 0..N-1 from small_logits + shift and checks them against
 * exact_dist: never a dropped token, and a chi-square statistic under chi2_bound. */
static void check_shifted(const struct bn_sampling *params, float shift)
{
	enum { N = 20000, V = 10 };
	double p[V], stat = 0;
	uint32_t count[V] = { 0 };
	float l[V];
	for (int i = 0; i < V; i++)
		l[i] = small_logits[i] + shift;
	exact_dist(l, V, params, p);
	struct bn_sampling sp = *params;
	struct bn_sample_ctx ctx = { .params = &sp };
	for (uint32_t s = 0; s < N; s++) {
		sp.seed = s;
		float row[V];
		memcpy(row, l, sizeof(row));
		struct bn_sample_out out = { 0 };
		ck_assert_int_eq(bn_sample(&sampler, &ctx, row, V, &out), 0);
		ck_assert_uint_lt(out.token, V);
		count[out.token]++;
	}
	int kept = 0;
	for (int i = 0; i < V; i++) {
		if (p[i] == 0) {
			ck_assert_msg(count[i] == 0, "token %d drawn %u times but dropped", i, count[i]);
			continue;
		}
		kept++;
		double e = N * p[i];
		stat += (count[i] - e) * (count[i] - e) / e;
	}
	if (kept > 1)
		ck_assert_msg(stat < chi2_bound(kept - 1), "chi-square %.1f over %d tokens, bound %.1f "
			      "(t %g k %u p %g m %g)", stat, kept, chi2_bound(kept - 1),
			      params->temperature, params->top_k, params->top_p, params->min_p);
}

static void check_distribution(const struct bn_sampling *params)
{
	check_shifted(params, 0);
}

/* Temperature alone, from sharp to flat. Using 1 in place of 0.5 or 2 moves the statistic
 * into the thousands. */
START_TEST(dist_temperature)
{
	const float temps[] = { 0.25f, 0.5f, 1.0f, 2.0f, 7.0f };
	for (size_t i = 0; i < sizeof(temps) / sizeof(temps[0]); i++)
		check_distribution(&(struct bn_sampling){ .temperature = temps[i] });
}
END_TEST

/* top_k, cutting inside ties: k 1 keeps only id 2 (not 5); k 6 keeps 1 but not 3. */
START_TEST(dist_top_k)
{
	const uint32_t ks[] = { 1, 2, 3, 6, 9, 10, 11, 1000 };
	for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++)
		check_distribution(&(struct bn_sampling){ .temperature = 1.0f, .top_k = ks[i] });
	check_distribution(&(struct bn_sampling){ .temperature = 0.5f, .top_k = 6 });
}
END_TEST

/* top_p: 0.05 keeps only id 2 (its tie 5 is ranked after it), larger values more. */
START_TEST(dist_top_p)
{
	const float ps[] = { 0.05f, 0.3f, 0.5f, 0.7f, 0.9f, 0.99f, 1.0f };
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		check_distribution(&(struct bn_sampling){ .temperature = 1.0f, .top_p = ps[i] });
		check_distribution(&(struct bn_sampling){ .temperature = 0.6f, .top_p = ps[i] });
	}
}
END_TEST

START_TEST(dist_min_p)
{
	const float ms[] = { 0.05f, 0.2f, 0.5f, 0.9f, 1.0f };
	for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		check_distribution(&(struct bn_sampling){ .temperature = 1.0f, .min_p = ms[i] });
		check_distribution(&(struct bn_sampling){ .temperature = 2.5f, .min_p = ms[i] });
	}
}
END_TEST

START_TEST(dist_combined)
{
	check_distribution(&(struct bn_sampling){ .temperature = 0.7f, .top_k = 6, .top_p = 0.9f,
						  .min_p = 0.1f });
	check_distribution(&(struct bn_sampling){ .temperature = 1.5f, .top_k = 8, .top_p = 0.8f });
	check_distribution(&(struct bn_sampling){ .temperature = 1.5f, .top_k = 4, .min_p = 0.3f });
	check_distribution(&(struct bn_sampling){ .temperature = 3.0f, .top_p = 0.75f,
						  .min_p = 0.45f });
	check_distribution(&(struct bn_sampling){ .temperature = 0.9f, .top_k = 9, .top_p = 0.95f,
						  .min_p = 0.02f });
}
END_TEST

/* Softmax ignores a common shift, and so must every truncation: all-negative and large
 * logits give the distributions of the unshifted ones. */
START_TEST(dist_shift_invariant)
{
	const struct bn_sampling ps[] = {
		{ .temperature = 1.0f, .min_p = 0.2f },
		{ .temperature = 0.8f, .top_p = 0.7f, .min_p = 0.1f },
		{ .temperature = 1.2f, .top_k = 6, .min_p = 0.3f },
	};
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		check_shifted(&ps[i], -20);
		check_shifted(&ps[i], 1000);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Determinism and the naive full-sort sampler                                                */
/* ------------------------------------------------------------------------------------------ */

/* The token is the walk of the exact distribution at u = bn_sample_uniform(seed, n_output):
 * the same for the same step, and following u when the step changes. */
START_TEST(draw_follows_uniform)
{
	enum { V = 10 };
	double p[V];
	uint32_t out[64] = { 0 };
	struct bn_sampling sp = { .temperature = 1.3f, .top_p = 0.97f, .seed = 1234567 };
	struct bn_sample_ctx ctx = { .params = &sp, .output = out };
	exact_dist(small_logits, V, &sp, p);
	uint32_t *rank = ranked(small_logits, V);
	for (uint32_t step = 0; step < 64; step++) {
		ctx.n_output = step;
		float u = bn_sample_uniform(sp.seed, step);
		double cum = 0;
		uint32_t want = rank[0];
		for (int j = 0; j < V; j++) {
			cum += p[rank[j]];
			want = rank[j];
			if (cum > u)
				break;
		}
		uint32_t got = sample_copy(small_logits, V, &ctx);
		ck_assert_msg(got == want, "step %u (u %.7f): %u, want %u", step, u, got, want);
		ck_assert_uint_eq(sample_copy(small_logits, V, &ctx), got);
	}
	free(rank);
}
END_TEST

/* The seed whose draw at step 0 is exactly u24 x 2^-24: splitmix64 run backwards. */
static uint64_t seed_for_draw(uint32_t u24)
{
	const uint64_t m1 = 0xBF58476D1CE4E5B9ull, m2 = 0x94D049BB133111EBull;
	uint64_t inv1 = m1, inv2 = m2; /* Newton's iteration for the inverses mod 2^64 */
	for (int i = 0; i < 6; i++) {
		inv1 *= 2 - m1 * inv1;
		inv2 *= 2 - m2 * inv2;
	}
	uint64_t y = (uint64_t)u24 << 40, x = y;
	for (int i = 0; i < 3; i++) /* undo z ^= z >> 31 */
		x = y ^ (x >> 31);
	y = x * inv2;
	for (int i = 0; i < 3; i++) /* undo z ^= z >> 27 */
		x = y ^ (x >> 27);
	y = x * inv1;
	for (int i = 0; i < 3; i++) /* undo z ^= z >> 30 */
		x = y ^ (x >> 30);
	return x - 0x9E3779B97F4A7C15ull;
}

/* Exact arithmetic (four equal logits: each probability 1, total 4) pins the comparisons:
 * the draw takes the first token whose running sum exceeds u x total, so u = 1/4 lands on
 * the second; top_p 0.5 is reached (not exceeded) after two tokens and keeps just them. */
START_TEST(draw_exceeds_and_top_p_reaches)
{
	const float l[4] = { 1, 1, 1, 1 };
	struct bn_sampling sp = { .temperature = 1 };
	struct bn_sample_ctx ctx = { .params = &sp };
	const uint32_t quarters[] = { 0, 0x400000, 0x800000, 0xC00000, 0xFFFFFF };
	const uint32_t want[] = { 0, 1, 2, 3, 3 };
	for (int i = 0; i < 5; i++) {
		sp.seed = seed_for_draw(quarters[i]);
		ck_assert(bn_sample_uniform(sp.seed, 0) == (float)quarters[i] * 0x1p-24f);
		ck_assert_uint_eq(sample_copy(l, 4, &ctx), want[i]);
	}
	sp.top_p = 0.5f;
	uint32_t seen[4] = { 0 };
	for (uint64_t seed = 0; seed < 400; seed++) {
		sp.seed = seed;
		seen[sample_copy(l, 4, &ctx)]++;
	}
	ck_assert(seen[0] > 0 && seen[1] > 0 && seen[2] == 0 && seen[3] == 0);
}
END_TEST

/* top_k among equal logits keeps the lowest ids, wherever the scan meets the ties. */
START_TEST(top_k_ties_keep_lower_ids)
{
	enum { V = 300 };
	float l[V];
	for (int i = 0; i < V; i++)
		l[i] = i % 2 ? 1.0f : 0.5f; /* the odd ids tie at the top */
	const uint32_t ks[] = { 2, 5, 17, 100, 149 };
	for (size_t j = 0; j < sizeof(ks) / sizeof(ks[0]); j++) {
		struct bn_sampling sp = { .temperature = 1, .top_k = ks[j] };
		struct bn_sample_ctx ctx = { .params = &sp };
		uint32_t hit = 0;
		for (uint64_t seed = 0; seed < 200; seed++) {
			sp.seed = seed;
			uint32_t t = sample_copy(l, V, &ctx);
			ck_assert_msg(t % 2 == 1 && t < 2 * ks[j], "k %u: token %u", ks[j], t);
			hit |= t == 2 * ks[j] - 1;
		}
		ck_assert_msg(hit || ks[j] > 20, "k %u: the last kept id never drawn", ks[j]);
	}
}
END_TEST

/* A 128256-entry vocabulary: token for token the naive sampler, for many seeds and the
 * settings that take each of the sampler's paths (heap, narrowing, the radix sort of long
 * prefixes on flat rows, min_p alone, no truncation at all). */
START_TEST(large_vocab_matches_naive)
{
	enum { V = 128256, SEEDS = 150 };
	const struct {
		double sigma;
		struct bn_sampling p;
	} cases[] = {
		{ 2.5, { .temperature = 0.8f, .top_p = 0.9f } },
		{ 2.5, { .temperature = 0.8f, .top_k = 40 } },
		{ 2.5, { .temperature = 1.0f } },
		{ 2.5, { .temperature = 0.8f, .min_p = 0.05f } },
		{ 2.5, { .temperature = 0.7f, .top_k = 50, .top_p = 0.95f, .min_p = 0.02f } },
		{ 1.0, { .temperature = 1.5f, .top_p = 0.95f } },
		{ 1.0, { .temperature = 1.2f, .top_k = 5000, .top_p = 0.9f } },
		{ 1.0, { .temperature = 2.0f, .min_p = 0.3f, .top_p = 0.99f } },
	};
	float *l = malloc(V * sizeof(*l));
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		model_like_logits(l, V, cases[c].sigma, 7 + c);
		uint32_t *rank = ranked(l, V);
		struct bn_sampling sp = cases[c].p;
		struct bn_sample_ctx ctx = { .params = &sp };
		for (uint64_t seed = 0; seed < SEEDS; seed++) {
			sp.seed = seed * 7919;
			uint32_t want = naive_sample(l, rank, V, &sp, bn_sample_uniform(sp.seed, 0));
			uint32_t got = sample_copy(l, V, &ctx);
			ck_assert_msg(got == want, "case %zu seed %llu: %u, want %u", c,
				      (unsigned long long)sp.seed, got, want);
		}
		free(rank);
	}
	free(l);
}
END_TEST

/* Coarse logits, so that long ranking prefixes are full of ties (-0 and +0 among them,
 * which tie too): on near-flat rows the sampler sorts thousands of candidates, the top_k
 * heap's ids arrive in no order, and ties decide which token a draw lands on. */
START_TEST(ties_in_long_prefixes_match_naive)
{
	enum { SEEDS = 150 };
	const uint32_t sizes[] = { 1000, 20000 }; /* prefixes for both of the sampler's sorts */
	const struct bn_sampling cases[] = {
		{ .temperature = 2.0f },
		{ .temperature = 2.0f, .top_p = 0.8f },
		{ .temperature = 2.0f, .top_k = 900 },
		{ .temperature = 2.0f, .top_k = 12000, .top_p = 0.9f },
		{ .temperature = 1.0f, .min_p = 0.5f },
	};
	for (size_t v = 0; v < 2; v++) {
		uint32_t n = sizes[v];
		float *l = malloc(n * sizeof(*l));
		tu_rng_seed(31 + v);
		for (uint32_t i = 0; i < n; i++) {
			l[i] = (float)(tu_rng_next() % 5) * 0.25f - 0.5f;
			if (l[i] == 0 && tu_rng_next() % 2)
				l[i] = -0.0f;
		}
		uint32_t *rank = ranked(l, n);
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			struct bn_sampling sp = cases[c];
			struct bn_sample_ctx ctx = { .params = &sp };
			for (uint64_t seed = 0; seed < SEEDS; seed++) {
				sp.seed = seed;
				uint32_t want = naive_sample(l, rank, n, &sp, bn_sample_uniform(seed, 0));
				uint32_t got = sample_copy(l, n, &ctx);
				ck_assert_msg(got == want, "vocab %u case %zu seed %llu: %u, want %u", n,
					      c, (unsigned long long)seed, got, want);
			}
		}
		free(rank);
		free(l);
	}
}
END_TEST

/* Log-probabilities over a wide range, to within a few float ulps of the double oracle:
 * this is what pins the accuracy of the sampler's exponentials. */
START_TEST(logprobs_precise)
{
	enum { V = 4099 };
	float *l = malloc(V * sizeof(*l));
	double *lp = malloc(V * sizeof(*lp));
	struct bn_token_logprob top[64];
	tu_rng_seed(5);
	for (int round = 0; round < 20; round++) {
		for (uint32_t i = 0; i < V; i++)
			l[i] = (float)(rng_unit() * 12 - 6) - (i % 3 ? 0 : 20);
		log_softmax(l, V, lp);
		uint32_t *rank = ranked(l, V);
		struct bn_sampling sp = { .want_logprobs = 1, .n_logprobs = 64 };
		struct bn_sample_ctx ctx = { .params = &sp };
		struct bn_sample_out out = { .top = top };
		ck_assert_int_eq(bn_sample(&sampler, &ctx, l, V, &out), 0);
		for (uint32_t i = 0; i < 64; i++) {
			double tol = 4e-7 + fabs(lp[rank[i]]) * 0x1p-22;
			ck_assert_msg(fabs(top[i].logprob - lp[rank[i]]) < tol, "%.9g, want %.9g",
				      top[i].logprob, lp[rank[i]]);
		}
		free(rank);
	}
	free(l);
	free(lp);
}
END_TEST

/* Rows with NaN and infinities: NaN is never drawn, +inf ties with +inf and takes all the
 * probability, and an all-NaN row still gives a token. */
START_TEST(non_finite_logits)
{
	enum { V = 300 };
	float l[V];
	for (int i = 0; i < V; i++)
		l[i] = (float)(i % 13) * 0.1f;
	l[5] = l[6] = l[250] = NAN;
	l[77] = -INFINITY;
	struct bn_sampling sp = { .temperature = 5.0f };
	struct bn_sample_ctx ctx = { .params = &sp };
	uint32_t seen[V] = { 0 }, distinct = 0;
	for (uint64_t seed = 0; seed < 3000; seed++) {
		sp.seed = seed;
		uint32_t t = sample_copy(l, V, &ctx);
		ck_assert_msg(t != 5 && t != 6 && t != 250 && t != 77, "token %u", t);
		distinct += !seen[t]++;
	}
	ck_assert_uint_gt(distinct, 250);
	l[140] = l[200] = INFINITY;
	sp.top_p = 0.9f;
	uint32_t n140 = 0, n200 = 0;
	for (uint64_t seed = 0; seed < 200; seed++) {
		sp.seed = seed;
		uint32_t t = sample_copy(l, V, &ctx);
		ck_assert_msg(t == 140 || t == 200, "token %u", t);
		n140 += t == 140;
		n200 += t == 200;
	}
	ck_assert(n140 > 50 && n200 > 50);
	for (int i = 0; i < V; i++)
		l[i] = NAN;
	sp.top_k = 10;
	ck_assert_uint_lt(sample_copy(l, V, &ctx), V);
	struct bn_sample_out out = { 0 };
	ck_assert_int_eq(bn_sample(&sampler, &ctx, l, 0, &out), -EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Penalties                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* The row after bn_sample, token by token: repetition once for a token in the prompt or the
 * output, then frequency x count + presence for output tokens; every other bit unchanged. */
static void check_penalties(const struct bn_sampling *params, float temperature)
{
	enum { V = 600 };
	const uint32_t prompt[] = { 3, 7, 7, 100, 599, 250, 3, 42, 0 };
	const uint32_t output[] = { 7, 8, 8, 8, 250, 500, 9, 500, 0, 123456 /* out of range */ };
	const uint32_t n_prompt = sizeof(prompt) / sizeof(prompt[0]);
	const uint32_t n_output = sizeof(output) / sizeof(output[0]);
	float l[V], want[V];
	tu_rng_seed(77);
	for (int i = 0; i < V; i++)
		l[i] = (float)(rng_gauss() * 3);
	l[3] = 0;        /* zero stays zero */
	l[7] = -2.5f;    /* negative: multiplied */
	l[8] = 4.0f;     /* positive: divided */
	for (int i = 0; i < V; i++) {
		bool in_prompt = false;
		uint32_t c = 0;
		for (uint32_t j = 0; j < n_prompt; j++)
			in_prompt |= prompt[j] == (uint32_t)i;
		for (uint32_t j = 0; j < n_output; j++)
			c += output[j] == (uint32_t)i;
		float r = params->repetition_penalty, x = l[i];
		if (r != 0 && (in_prompt || c))
			x = x > 0 ? x / r : x * r;
		if (c)
			x -= params->frequency_penalty * (float)c + params->presence_penalty;
		want[i] = x;
	}
	struct bn_sampling sp = *params;
	sp.temperature = temperature;
	sp.seed = 5;
	struct bn_sample_ctx ctx = { .params = &sp, .prompt = prompt, .n_prompt = n_prompt,
				     .output = output, .n_output = n_output };
	struct bn_sample_out out = { 0 };
	ck_assert_int_eq(bn_sample(&sampler, &ctx, l, V, &out), 0);
	for (int i = 0; i < V; i++)
		ck_assert_msg(memcmp(&l[i], &want[i], sizeof(float)) == 0, "token %d: %.9g, want %.9g",
			      i, l[i], want[i]);
	assert_scratch_clear();
}

START_TEST(penalties_exact)
{
	const struct bn_sampling ps[] = {
		{ .repetition_penalty = 1.3f },
		{ .repetition_penalty = 0.7f },
		{ .frequency_penalty = 0.5f },
		{ .presence_penalty = -1.25f },
		{ .repetition_penalty = 1.3f, .frequency_penalty = 0.5f, .presence_penalty = 0.25f },
		{ .repetition_penalty = 100, .frequency_penalty = -100, .presence_penalty = 100 },
	};
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		check_penalties(&ps[i], 0);
		check_penalties(&ps[i], 0.9f); /* sampling leaves the row penalized, unscaled */
	}
}
END_TEST

/* The penalties change which token is greedy, and the scratch is clear after many calls on
 * growing histories. */
START_TEST(penalties_steer_and_scratch_clears)
{
	enum { V = 50 };
	float l[V];
	uint32_t prompt[200], output[200];
	for (int i = 0; i < V; i++)
		l[i] = (float)i * 0.01f;
	struct bn_sampling sp = { .repetition_penalty = 2.0f, .frequency_penalty = 0.3f };
	struct bn_sample_ctx ctx = { .params = &sp, .prompt = prompt, .output = output };
	ck_assert_uint_eq(sample_copy(l, V, &ctx), 49);
	output[0] = 49;
	ctx.n_output = 1;
	ck_assert_uint_eq(sample_copy(l, V, &ctx), 48);
	tu_rng_seed(3);
	for (int round = 0; round < 100; round++) {
		ctx.n_prompt = tu_rng_next() % 200;
		ctx.n_output = tu_rng_next() % 200;
		for (int i = 0; i < 200; i++) {
			prompt[i] = tu_rng_next() % V;
			output[i] = tu_rng_next() % V;
		}
		sp.temperature = round % 3 ? 0.8f : 0;
		sp.seed = (uint64_t)round;
		sample_copy(l, V, &ctx);
		assert_scratch_clear();
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Parameter checks                                                                           */
/* ------------------------------------------------------------------------------------------ */

START_TEST(check_accepts_valid)
{
	const struct bn_sampling ok[] = {
		{ 0 },
		{ .temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f,
		  .repetition_penalty = 1.1f, .presence_penalty = 0.5f, .frequency_penalty = -0.5f,
		  .seed = UINT64_MAX },
		{ .temperature = 100, .top_p = 1, .min_p = 1, .repetition_penalty = 100,
		  .presence_penalty = 100, .frequency_penalty = -100, .top_k = UINT32_MAX },
		{ .temperature = 1e-30f, .top_p = 1e-30f, .min_p = 1e-30f, .repetition_penalty = 1e-30f },
		{ .temperature = -0.0f }, /* -0 is 0: greedy */
		{ .want_logprobs = 1 },
		{ .want_logprobs = 1, .n_logprobs = 20 },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		ck_assert_msg(bn_sampling_check(&ok[i], 20) == 0, "case %zu", i);
}
END_TEST

START_TEST(check_rejects_invalid)
{
	const float bad_positive[] = { NAN, INFINITY, -INFINITY, -1, -1e-30f };
	for (size_t i = 0; i < sizeof(bad_positive) / sizeof(bad_positive[0]); i++) {
		float v = bad_positive[i];
		struct bn_sampling p[] = {
			{ .temperature = v }, { .top_p = v }, { .min_p = v },
			{ .repetition_penalty = v },
		};
		for (size_t j = 0; j < 4; j++)
			ck_assert_msg(bn_sampling_check(&p[j], 8) == -BN_E_INVALID, "value %zu field %zu",
				      i, j);
	}
	const struct bn_sampling bad[] = {
		{ .temperature = 100.01f }, { .top_p = 1.5f }, { .top_p = 1.0000001f },
		{ .min_p = -0.1f }, { .min_p = 1.01f }, { .repetition_penalty = 101 },
		{ .presence_penalty = 100.5f }, { .presence_penalty = -101 },
		{ .presence_penalty = NAN }, { .presence_penalty = INFINITY },
		{ .frequency_penalty = -100.01f }, { .frequency_penalty = 1e9f },
		{ .frequency_penalty = NAN }, { .frequency_penalty = -INFINITY },
		{ .n_logprobs = 1 },                        /* alternatives without logprobs */
		{ .want_logprobs = 1, .n_logprobs = 9 },    /* more than the capacity */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(bn_sampling_check(&bad[i], 8) == -BN_E_INVALID, "case %zu", i);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

/* The sampler's exp_neg (vec4.h) against e^x in double over [-87, 0]: every 97th float
 * there (bit patterns from -0 down to -87) within one ulp of the exact value, and never
 * smaller than at the float above it (monotone), which the sampler's narrowing relies on. */
START_TEST(exp_neg_within_one_ulp)
{
	union { float f; uint32_t u; } lo = { .f = -87.0f };
	float prev_x = 0.0f, prev_e = 1.0f;
	/* every 97th float; in a reduced run every 1601st (testutil.h) */
	const uint32_t stride = tu_reduced() ? 1601 : 97;
	for (uint32_t bits = 0x80000000u; bits <= lo.u; bits += stride) {
		union { uint32_t u; float f; } x = { .u = bits };
		v4f e4 = exp_neg((v4f){ x.f, x.f, x.f, x.f });
		double want = exp((double)x.f);
		float ulp = nextafterf((float)want, INFINITY) - (float)want;
		/* a plain test first: each ck_assert marks a point through Check's pipe */
		if (!(fabs(e4[0] - want) <= ulp))
			ck_abort_msg("exp_neg(%.9g) = %.9g, e^x %.17g (ulp %.3g)", x.f, e4[0], want,
				     ulp);
		if (e4[0] > prev_e)
			ck_abort_msg("exp_neg(%.9g) = %.9g > exp_neg(%.9g) = %.9g", x.f, e4[0],
				     prev_x, prev_e);
		prev_x = x.f;
		prev_e = e4[0];
	}
	v4f edge = exp_neg((v4f){ -INFINITY, -88.0f, -0.0f, 0.0f });
	ck_assert(edge[0] == 0.0f && edge[1] == 0.0f && edge[2] == 1.0f && edge[3] == 1.0f);
}
END_TEST

int main(void)
{
	if (TU_TSAN) { /* testutil.h */
		puts(TU_TSAN_SKIP_MSG);
		return 77;
	}
	Suite *s = suite_create("sample");
	TCase *draw = tcase_create("seeded draw");
	tcase_add_test(draw, exp_neg_within_one_ulp);
	tcase_add_test(draw, uniform_known_answer);
	tcase_add_test(draw, uniform_matches_splitmix64);
	suite_add_tcase(s, draw);
	TCase *greedy = tcase_create("greedy and logprobs");
	tcase_add_checked_fixture(greedy, setup, teardown);
	tcase_add_test(greedy, greedy_lowest_id_on_ties);
	tcase_add_test(greedy, greedy_random_rows);
	tcase_add_test(greedy, top_k_one_is_greedy);
	tcase_add_test(greedy, logprobs_match_log_softmax);
	tcase_add_test(greedy, logprobs_more_than_vocab);
	tcase_add_test(greedy, logprobs_precise);
	suite_add_tcase(s, greedy);
	TCase *dist = tcase_create("distribution");
	tcase_add_checked_fixture(dist, setup, teardown);
	tcase_set_timeout(dist, 120);
	tcase_add_test(dist, dist_temperature);
	tcase_add_test(dist, dist_top_k);
	tcase_add_test(dist, dist_top_p);
	tcase_add_test(dist, dist_min_p);
	tcase_add_test(dist, dist_combined);
	tcase_add_test(dist, dist_shift_invariant);
	suite_add_tcase(s, dist);
	TCase *det = tcase_create("determinism");
	tcase_add_checked_fixture(det, setup, teardown);
	tcase_set_timeout(det, 300);
	tcase_add_test(det, draw_follows_uniform);
	tcase_add_test(det, draw_exceeds_and_top_p_reaches);
	tcase_add_test(det, top_k_ties_keep_lower_ids);
	tcase_add_test(det, large_vocab_matches_naive);
	tcase_add_test(det, ties_in_long_prefixes_match_naive);
	tcase_add_test(det, non_finite_logits);
	suite_add_tcase(s, det);
	TCase *pen = tcase_create("penalties");
	tcase_add_checked_fixture(pen, setup, teardown);
	tcase_add_test(pen, penalties_exact);
	tcase_add_test(pen, penalties_steer_and_scratch_clears);
	suite_add_tcase(s, pen);
	TCase *chk = tcase_create("parameter checks");
	tcase_add_test(chk, check_accepts_valid);
	tcase_add_test(chk, check_rejects_invalid);
	suite_add_tcase(s, chk);
	return tu_run_suite(s);
}
