/* SPDX-License-Identifier: MIT */
/*
 * test_embed — embedding requests (shm/PROTOCOL.md §6.14; bn_embed, bn_embed_batch,
 * bitnet-cli embed) against oracles:
 *  - the published description, written here from the reference forward: each position's
 *    final hidden state from bn_ref_step_hidden (the scalar forward, not the batched one),
 *    pooled (mean over the positions, the first, the last) and divided by its L2 norm in
 *    binary64 by this file's own code; the daemon's vector within 2e-5 of it (one length of
 *    four may be within 1e-2: a rounding flip, TOLERANCE below), of unit length;
 *  - alone == batched, bit for bit: a batch with bad items (empty, too long, a token outside
 *    the vocabulary) gives those their errors and every other item the vector it gets alone,
 *    and a daemon reading prompts 8 tokens a step gives the bits of one reading 512;
 *  - the prefix cache: last-token pooling takes a shared start from it (the STATS hit
 *    counter) and gives the bits of a daemon without the cache; mean pooling takes none;
 *  - refusals: a generative model without --pooling and the loopback backend refuse EMBED
 *    with 1016 and their reason, an op past EMBED gets 1016 (what a daemon that predates
 *    EMBED answers), and an embedding model (its file names a pooling) embeds but refuses to
 *    generate, with its reason;
 *  - bitnet-cli embed prints the library's floats;
 *  - EOS last (tokenizer.ggml.add_eos_token, as BitNet-embedding-0.6B's file says): a text's
 *    vector is, bit for bit, that of the ids BOS + its ids + EOS built here from the tiny
 *    vocabulary's known ids, and not that of the ids without EOS; the TOKENIZE op, bitnet-cli
 *    tokenize and info agree; a file that says false gets none, nor does NO_BOS, nor a
 *    generative model's text prompt.
 * Cost: about 10 daemons on the tiny model; a few seconds plain.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"
#include "client_internal.h"

#include "ckassert.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_DIM 4096
#define MAX_LEN 160

static char models_dir[] = "/tmp/bn-embed-XXXXXX";
static char embedding_model[256]; /* the tiny preset with <arch>.pooling_type = last */
/* the tiny preset with add_eos_token true (generative: no pooling_type), and an embedding model
 * (pooling_type last) with add_eos_token false */
static char eos_model[256], no_eos_model[256];

static struct bn_client *connect_or_die(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 0, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

/* A cpu daemon on model with one thread and up to six more arguments. */
static void start(struct tu_daemon *d, const char *model, const char *a, const char *b,
		  const char *e, const char *f)
{
	const char *args[] = { "--backend", "cpu", "--model", model, "--threads", "1",
			       a, b, e, f, NULL };
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

/* A deterministic sequence of n ids in [1, vocab), BOS first. */
static void sequence(uint32_t *ids, uint32_t n, uint32_t vocab, uint32_t salt)
{
	ids[0] = 1;
	for (uint32_t i = 1; i < n; i++)
		ids[i] = 3 + (i * 37 + salt * 101 + i * i * salt) % (vocab - 3);
}

static void embed_ok(struct bn_client *c, struct bn_embed_item *it, float *vec)
{
	it->vector = vec;
	it->cap = MAX_DIM;
	int rc = bn_embed(c, it, tu_scaled_ns(30 * SEC));
	ck_assert_msg(rc == 0, "embed: %s", bn_strerror(rc));
	ck_assert_uint_eq(it->result.status, BN_STATUS_COMPLETE);
}

/* ------------------------------------------------------------------------------------------ */
/* The description, from the reference forward's hidden states                                */
/* ------------------------------------------------------------------------------------------ */

/* The embedding of ids as §6.14 describes it, from the scalar reference: P = the mean of the
 * positions' final hidden states (cls: the first's; last: the last's), then P / |P|. */
static void described(const struct bn_model *m, const uint32_t *ids, uint32_t n,
		      uint32_t pooling, double *out)
{
	uint32_t dim = m->cfg.n_embd;
	struct bn_ref *ref = bn_ref_new(m, n);
	float *h = malloc(dim * sizeof(float));
	ck_assert_ptr_nonnull(ref);
	for (uint32_t i = 0; i < dim; i++)
		out[i] = 0;
	for (uint32_t p = 0; p < n; p++) {
		ck_assert_int_eq(bn_ref_step_hidden(ref, ids[p], h, NULL), 0);
		int take = pooling == BN_POOLING_MEAN || (pooling == BN_POOLING_CLS && p == 0) ||
			   (pooling == BN_POOLING_LAST && p == n - 1);
		for (uint32_t i = 0; take && i < dim; i++)
			out[i] = pooling == BN_POOLING_MEAN ? out[i] + h[i] / (double)n : h[i];
	}
	double norm = 0;
	for (uint32_t i = 0; i < dim; i++)
		norm += out[i] * out[i];
	for (uint32_t i = 0; i < dim; i++)
		out[i] /= sqrt(norm);
	free(h);
	bn_ref_free(ref);
}

/* The daemon's kernels quantize activations to int8 from floats summed in another order than
 * the reference sums them, so now and then one activation lies within an ulp of a rounding
 * boundary and the two round it apart (test_forward.c: FLIP_TOLERANCE): one quantum of one
 * activation at one position, which moves the hidden states after it by up to ~1e-3 of
 * their unit-length pooling (seen: the AVX2 kernels, 100 tokens, once in the four lengths).
 * A vector may exceed TOLERANCE if it stays within FLIP_TOLERANCE and no more than one of a
 * pooling's lengths does; a pooling that is wrong is wrong at every length, and by more. */
#define TOLERANCE 2e-5
#define FLIP_TOLERANCE 1e-2
#define FLIP_LENGTHS 1

static const char *const pooling_names[] = { "none", "mean", "cls", "last" };
static const uint32_t lengths[] = { 1, 5, 40, 100 };
#define N_LENGTHS (sizeof(lengths) / sizeof(lengths[0]))

START_TEST(pooling_vs_reference)
{
	uint32_t pooling = (uint32_t)_i; /* 1 mean, 2 cls, 3 last */
	struct bn_model m;
	char err[BN_MODEL_ERR_LEN];
	ck_assert_msg(bn_model_load(&m, tu_default_model(), err) == 0, "load: %s", err);
	uint32_t dim = m.cfg.n_embd;
	struct tu_daemon d;
	start(&d, tu_default_model(), "--pooling", pooling_names[pooling], NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	ck_assert(bn_model_features(c) & BN_FEAT_EMBED);
	ck_assert(!(bn_model_features(c) & BN_FEAT_EMBEDDING_MODEL));
	static uint32_t ids[N_LENGTHS][MAX_LEN];
	static float vec[N_LENGTHS][MAX_DIM];
	struct bn_embed_item items[N_LENGTHS];
	for (uint32_t k = 0; k < N_LENGTHS; k++) {
		sequence(ids[k], lengths[k], m.cfg.n_vocab, k);
		items[k] = (struct bn_embed_item){ .ids = ids[k], .n_ids = lengths[k],
						   .vector = vec[k], .cap = MAX_DIM };
	}
	struct bn_batch_result br;
	ck_assert_int_eq(bn_embed_batch(c, items, N_LENGTHS, &br, tu_scaled_ns(60 * SEC)), 0);
	ck_assert_uint_eq(br.n_ok, N_LENGTHS);
	double *want = malloc(dim * sizeof(double));
	uint32_t flips = 0;
	for (uint32_t k = 0; k < N_LENGTHS; k++) {
		ck_assert_uint_eq(items[k].dim, dim);
		ck_assert_uint_eq(items[k].n_tokens, lengths[k]);
		ck_assert_uint_eq(items[k].pooling, pooling);
		ck_assert_uint_eq(items[k].trained, 0);
		described(&m, ids[k], lengths[k], pooling, want);
		double len2 = 0, worst = 0;
		uint32_t at = 0;
		for (uint32_t i = 0; i < dim; i++) {
			len2 += (double)vec[k][i] * vec[k][i];
			double e = fabs(vec[k][i] - want[i]);
			if (!(e <= worst)) { /* NaN counts as worst */
				worst = e;
				at = i;
			}
		}
		ck_assert_msg(worst <= FLIP_TOLERANCE && (worst <= TOLERANCE || ++flips <= FLIP_LENGTHS),
			      "%s, %u tokens, [%u]: %.9g, described %.9g (%u lengths past %g)",
			      pooling_names[pooling], lengths[k], at, (double)vec[k][at], want[at],
			      flips, TOLERANCE);
		if (worst > TOLERANCE)
			printf("note: %s, %u tokens: %.3g from the description at [%u], a rounding "
			       "flip (within %g)\n", pooling_names[pooling], lengths[k], worst, at,
			       FLIP_TOLERANCE);
		ck_assert_msg(fabs(len2 - 1) <= 1e-5, "|v|^2 = %.9g", len2);
	}
	/* cls on a causal model: the first position depends on the first token alone. */
	if (pooling == BN_POOLING_CLS)
		ck_assert_mem_eq(vec[1], vec[3], dim * sizeof(float));
	free(want);
	bn_model_free(&m);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Batches: one result per item, each equal to the item alone, whatever the chunks            */
/* ------------------------------------------------------------------------------------------ */

#define GOOD 8
#define ITEMS (GOOD + 4)

START_TEST(batch_equals_alone)
{
	struct tu_daemon d, whole;
	start(&d, tu_default_model(), "--pooling", "mean", "--token-budget", "8");
	start(&whole, tu_default_model(), "--pooling", "mean", "--token-budget", "512");
	struct bn_client *c = connect_or_die(&d), *cw = connect_or_die(&whole);
	struct bn_model_info mi;
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	static uint32_t good[GOOD][MAX_LEN], bad_token[4] = { 1, 7, 0, 9 }, *too_long;
	too_long = calloc(mi.context_length + 1, sizeof(*too_long));
	bad_token[2] = mi.vocab_size;
	static float vec[ITEMS][MAX_DIM], alone[MAX_DIM];
	/* Bad items among the good: after good items 1, 3, 4 and 6. */
	const struct bn_embed_item bad_items[4] = {
		{ .ids = bad_token, .n_ids = 4 },
		{ .text = "", .text_len = 0 },
		{ .ids = too_long, .n_ids = mi.context_length + 1 },
		{ .ids = good[0], .n_ids = 0 },
	};
	static const uint32_t bad_after[4] = { 1, 3, 4, 6 };
	static const int32_t bad_error[4] = { -BN_E_TOKEN, -BN_E_EMPTY, -BN_E_TOO_LONG,
					      -BN_E_INVALID };
	struct bn_embed_item items[ITEMS];
	uint32_t k = 0, bad[4], b = 0;
	for (uint32_t g = 0; g < GOOD; g++) {
		uint32_t n = 1 + (g * 23) % (MAX_LEN - 1);
		sequence(good[g], n, mi.vocab_size, 10 + g);
		items[k++] = (struct bn_embed_item){ .ids = good[g], .n_ids = n };
		if (b < 4 && bad_after[b] == g) {
			bad[b] = k;
			items[k++] = bad_items[b++];
		}
	}
	for (k = 0; k < ITEMS; k++) {
		items[k].vector = vec[k];
		items[k].cap = MAX_DIM;
	}
	struct bn_batch_result br;
	ck_assert_int_eq(bn_embed_batch(c, items, ITEMS, &br, tu_scaled_ns(60 * SEC)), 0);
	ck_assert_uint_eq(br.n_ok, GOOD);
	for (b = 0; b < 4; b++)
		ck_assert_int_eq(items[bad[b]].error, bad_error[b]);
	struct bn_embed_item again[ITEMS];
	memcpy(again, items, sizeof(items));
	static float whole_vec[ITEMS][MAX_DIM];
	for (k = 0; k < ITEMS; k++)
		again[k].vector = whole_vec[k];
	ck_assert_int_eq(bn_embed_batch(cw, again, ITEMS, &br, tu_scaled_ns(60 * SEC)), 0);
	for (k = 0; k < ITEMS; k++) {
		if (items[k].error)
			continue;
		struct bn_embed_item one = { .ids = items[k].ids, .n_ids = items[k].n_ids };
		embed_ok(c, &one, alone);
		ck_assert_uint_eq(one.dim, items[k].dim);
		ck_assert_mem_eq(alone, vec[k], one.dim * sizeof(float));
		ck_assert_mem_eq(whole_vec[k], vec[k], one.dim * sizeof(float));
	}
	free(too_long);
	bn_disconnect(c);
	bn_disconnect(cw);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&whole, SIGTERM), 0);
}
END_TEST

/* A text longer than the context: TOO_LONG, with the count it came to. */
START_TEST(text_over_the_context)
{
	struct tu_daemon d;
	start(&d, tu_default_model(), "--pooling", "last", NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	struct bn_model_info mi;
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	size_t len = (size_t)mi.context_length * 3;
	char *text = malloc(len);
	for (size_t i = 0; i < len; i++)
		text[i] = "ab cd "[i % 6];
	static float v[MAX_DIM];
	struct bn_embed_item it = { .text = text, .text_len = len, .vector = v, .cap = MAX_DIM };
	ck_assert_int_eq(bn_embed(c, &it, tu_scaled_ns(30 * SEC)), -BN_E_TOO_LONG);
	ck_assert_uint_gt(it.n_tokens, mi.context_length);
	free(text);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The prefix cache                                                                            */
/* ------------------------------------------------------------------------------------------ */

static long long hit_tokens(struct bn_client *c)
{
	static char buf[1 << 16];
	ck_assert_int_gt(bn_daemon_stats(c, buf, sizeof(buf)), 0);
	return tu_metric(buf, "bitnetd_prefix_cache_hit_tokens_total");
}

/* A then B (A's first 40 ids, then 8 others): B's hits and its vector. */
static long long shared_start(struct bn_client *c, float *b_vec)
{
	static uint32_t a[48], b[48];
	static float a_vec[MAX_DIM];
	sequence(a, 48, 512, 3);
	memcpy(b, a, 40 * sizeof(*b));
	for (uint32_t i = 40; i < 48; i++)
		b[i] = 200 + i;
	struct bn_embed_item ia = { .ids = a, .n_ids = 48 }, ib = { .ids = b, .n_ids = 48 };
	embed_ok(c, &ia, a_vec);
	long long before = hit_tokens(c);
	embed_ok(c, &ib, b_vec);
	return hit_tokens(c) - before;
}

START_TEST(last_pooling_takes_the_prefix_cache)
{
	struct tu_daemon cached, uncached, mean;
	start(&cached, tu_default_model(), "--pooling", "last", "--kv-block-tokens", "16");
	start(&uncached, tu_default_model(), "--pooling", "last", "--prefix-cache", "off");
	start(&mean, tu_default_model(), "--pooling", "mean", "--kv-block-tokens", "16");
	struct bn_client *c = connect_or_die(&cached), *u = connect_or_die(&uncached),
			 *m = connect_or_die(&mean);
	static float hit[MAX_DIM], computed[MAX_DIM], mean_b[MAX_DIM];
	/* B's full blocks before its last position: 2 of 16, both A's. */
	ck_assert_int_eq(shared_start(c, hit), 32);
	ck_assert_int_eq(shared_start(u, computed), 0);
	ck_assert_mem_eq(hit, computed, 256 * sizeof(float)); /* the tiny model's width */
	ck_assert_int_eq(shared_start(m, mean_b), 0); /* mean reads every position itself */
	bn_disconnect(c);
	bn_disconnect(u);
	bn_disconnect(m);
	ck_assert_int_eq(tu_daemon_stop(&cached, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&uncached, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&mean, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Refusals                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct raw {
	uint32_t flags, n, max_tokens, n_logprobs;
	const uint32_t *ids;
};

static void fill_raw(struct bn_client *c, uint32_t slot, const void *arg)
{
	const struct raw *r = arg;
	struct bn_slot *s = slot_of(c, slot);
	s->n_prompt = r->n;
	s->flags = r->flags;
	s->max_tokens = r->max_tokens;
	s->n_logprobs = r->n_logprobs;
	memcpy(prompt_of(c, slot), r->ids, r->n * sizeof(uint32_t));
}

static const uint32_t raw_ids[] = { 1, 9, 17 };

/* r sent as is (past the library's checks): its error, and its reason in buf. */
static int32_t raw_request(struct bn_client *c, uint32_t op, const struct raw *r, char *buf,
			   size_t cap)
{
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit_op(c, op, fill_raw, r, &h), 0);
	ck_assert_int_eq(tu_wait(h, tu_scaled_ns(10 * SEC)), 0);
	struct bn_result res;
	ck_assert_int_eq(bn_result(h, &res), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_ERROR);
	ck_assert_uint_eq(res.n_tokens, 0);
	memset(buf, 0, cap);
	if (bn_model_features(c) & BN_FEAT_TEXT)
		ck_assert_int_ge(bn_read_text(h, 0, buf, cap - 1, NULL), 0);
	bn_release(h);
	return res.error;
}

/* op sent as is with three ids: its error, and its reason in buf. */
static int32_t raw_op(struct bn_client *c, uint32_t op, char *buf, size_t cap)
{
	struct raw r = { .n = 3, .ids = raw_ids };
	return raw_request(c, op, &r, buf, cap);
}

START_TEST(generative_model_without_pooling)
{
	struct tu_daemon d;
	start(&d, tu_default_model(), NULL, NULL, NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	ck_assert(!(bn_model_features(c) & BN_FEAT_EMBED));
	static float v[MAX_DIM];
	static const uint32_t ids[] = { 1, 2, 3 };
	struct bn_embed_item it = { .ids = ids, .n_ids = 3, .vector = v, .cap = MAX_DIM };
	ck_assert_int_eq(bn_embed(c, &it, tu_scaled_ns(10 * SEC)), -BN_E_UNSUPPORTED);
	char why[512];
	ck_assert_int_eq(raw_op(c, BN_OP_EMBED, why, sizeof(why)), -BN_E_UNSUPPORTED);
	ck_assert_msg(strstr(why, "--pooling"), "reason: %s", why);
	/* A daemon that predates an op answers it so: an op past EMBED here. */
	ck_assert_int_eq(raw_op(c, BN_OP_EMBED + 1, why, sizeof(why)), -BN_E_UNSUPPORTED);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(loopback_does_not_embed)
{
	struct tu_daemon d;
	const char *args[] = { "--pooling", "mean", NULL };
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_or_die(&d);
	ck_assert(!(bn_model_features(c) & BN_FEAT_EMBED));
	char why[512];
	ck_assert_int_eq(raw_op(c, BN_OP_EMBED, why, sizeof(why)), -BN_E_UNSUPPORTED);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* The floats of bitnet-cli embed's value line for input k. */
static void cli_vector(const char *out, uint32_t k, float *v, uint32_t dim)
{
	char head[32];
	snprintf(head, sizeof(head), "input=%u dim=", k);
	const char *line = strstr(out, head);
	ck_assert_ptr_nonnull(line);
	line = strchr(line, '\n') + 1;
	for (uint32_t i = 0; i < dim; i++) {
		char *end;
		v[i] = (float)strtod(line, &end); /* 9 digits: the float, exactly */
		ck_assert_ptr_ne(end, line);
		line = end;
	}
}

START_TEST(embedding_model_embeds_only)
{
	struct tu_daemon d;
	start(&d, embedding_model, NULL, NULL, NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	uint32_t f = bn_model_features(c);
	ck_assert(f & BN_FEAT_EMBED);
	ck_assert(f & BN_FEAT_EMBEDDING_MODEL);
	ck_assert(!(f & (BN_FEAT_SCORE | BN_FEAT_CLASSIFY | BN_FEAT_SPECULATE | BN_FEAT_GRAMMAR)));
	static const uint32_t ids[] = { 1, 40, 41, 42, 43 };
	static float v[MAX_DIM], printed[MAX_DIM];
	struct bn_embed_item it = { .ids = ids, .n_ids = 5 };
	embed_ok(c, &it, v);
	ck_assert_uint_eq(it.pooling, BN_POOLING_LAST);
	ck_assert_uint_eq(it.trained, 1);
	char why[512];
	ck_assert_int_eq(raw_op(c, BN_OP_GENERATE, why, sizeof(why)), -BN_E_UNSUPPORTED);
	ck_assert_msg(strstr(why, "embedding model"), "reason: %s", why);
	/* hostile words: max_tokens, LOGPROBS, n_logprobs, an id past the vocabulary */
	struct raw hostile[] = { { .n = 3, .ids = raw_ids, .max_tokens = 1 },
				 { .n = 3, .ids = raw_ids, .flags = BN_REQ_LOGPROBS },
				 { .n = 3, .ids = raw_ids, .n_logprobs = 1 },
				 { .n = 3, .ids = (const uint32_t[]){ 1, 512, 2 } },
				 { .n = 0, .ids = raw_ids } };
	static const int32_t hostile_error[] = { -BN_E_INVALID, -BN_E_INVALID, -BN_E_INVALID,
						 -BN_E_TOKEN, -BN_E_EMPTY };
	for (size_t k = 0; k < sizeof(hostile) / sizeof(hostile[0]); k++)
		ck_assert_int_eq(raw_request(c, BN_OP_EMBED, &hostile[k], why, sizeof(why)),
				 hostile_error[k]);
	uint32_t out[4];
	struct bn_request req = { .prompt = ids, .n_prompt = 5, .max_tokens = 4 };
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, tu_scaled_ns(10 * SEC)), -BN_E_UNSUPPORTED);
	const char *args[] = { "embed", "--ids", "1 40 41 42 43", "--text", "", NULL };
	static struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, args, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 1, "bitnet-cli embed: %d %s", r.status, r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "input=0 dim=256 tokens=5 pooling=last model=embedding"));
	ck_assert_ptr_nonnull(strstr(r.out, "input=1 error="));
	cli_vector(r.out, 0, printed, it.dim);
	ck_assert_mem_eq(printed, v, it.dim * sizeof(float));
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* EOS last, as the file says                                                                  */
/* ------------------------------------------------------------------------------------------ */

#define TINY_BOS 1u /* the tiny preset's SentencePiece vocabulary: <s>, </s> */
#define TINY_EOS 2u

static void fill_tokenize(struct bn_client *c, uint32_t slot, const void *arg)
{
	const char *text = arg;
	struct bn_slot *s = slot_of(c, slot);
	s->n_prompt = (uint32_t)strlen(text);
	s->flags = BN_REQ_TEXT;
	memcpy(text_of(c, slot), text, strlen(text));
}

/* The daemon's TOKENIZE op on text: its ids into out; returns how many. */
static uint32_t tokenize_op(struct bn_client *c, const char *text, uint32_t *out, uint32_t cap)
{
	struct bn_handle *h;
	struct bn_result res;
	ck_assert_int_eq(bn_submit_op(c, BN_OP_TOKENIZE, fill_tokenize, text, &h), 0);
	ck_assert_int_eq(tu_wait(h, tu_scaled_ns(10 * SEC)), 0);
	ck_assert_int_eq(bn_result(h, &res), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_COMPLETE);
	ck_assert_uint_le(res.n_tokens, cap);
	ck_assert_int_eq(bn_read_tokens(h, 0, out, res.n_tokens), (int)res.n_tokens);
	bn_release(h);
	return res.n_tokens;
}

/* The ids on bitnet-cli's output line, space-separated: how many, into out. */
static uint32_t cli_ids(const char *line, uint32_t *out, uint32_t cap)
{
	uint32_t n = 0;
	char *end;
	for (unsigned long x = strtoul(line, &end, 10); end != line && n < cap;
	     x = strtoul(line, &end, 10)) {
		out[n++] = (uint32_t)x;
		line = end;
	}
	return n;
}

/* The GENERATE of text reads the text as it stands: BOS and its ids, never an EOS after
 * them (n_plain of them). */
static void expect_prompt_without_eos(struct bn_client *c, const char *text, uint32_t n_plain)
{
	struct bn_request req = { .max_tokens = 1, .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h;
	uint32_t prompt_tokens = 0;
	char out[64];
	ck_assert_int_eq(bn_submit_text(c, &req, text, strlen(text), &h), 0);
	ck_assert_int_eq(tu_wait(h, tu_scaled_ns(10 * SEC)), 0);
	ck_assert_int_ge(bn_read_text(h, 0, out, sizeof(out), &prompt_tokens), 0);
	ck_assert_uint_eq(prompt_tokens, n_plain);
	bn_release(h);
}

/* The daemon on model (its file's add_eos_token is add_eos; `pooling`: bitnetd --pooling, a
 * generative model that embeds too): the vector of a text is the one of BOS + the text's ids +
 * (EOS when add_eos), bit for bit, and differs from the other one; the TOKENIZE op and
 * bitnet-cli tokenize give those ids, bitnet-cli info says add_eos; with NO_BOS the text's
 * vector is its bare ids'; a generative model's text prompt gets no EOS. */
static void expect_eos_last(const char *model, const char *pooling, int add_eos)
{
	struct tu_daemon d;
	start(&d, model, pooling ? "--pooling" : NULL, pooling, NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	const struct bn_vocab *v;
	ck_assert_int_eq(bn_client_vocab(c, &v), 0);
	ck_assert_int_eq(bn_vocab_add_eos(v), add_eos);
	ck_assert_uint_eq(bn_vocab_bos_id(v), TINY_BOS);
	ck_assert_uint_eq(bn_vocab_eos_id(v), TINY_EOS);
	static const char text[] = "the cat sat";
	uint32_t ids[MAX_LEN + 2], got[MAX_LEN + 2];
	ids[0] = TINY_BOS;
	int body = bn_tokenize_ex(v, text, strlen(text), 0, ids + 1, MAX_LEN);
	ck_assert_int_gt(body, 0);
	ck_assert_uint_ne(ids[body], TINY_EOS);
	ids[body + 1] = TINY_EOS;
	uint32_t n_plain = (uint32_t)body + 1, n_want = n_plain + (add_eos ? 1 : 0);
	static float by_text[MAX_DIM], with_eos[MAX_DIM], without[MAX_DIM], bare[MAX_DIM],
		bare_ids[MAX_DIM];
	struct bn_embed_item t = { .text = text, .text_len = strlen(text) };
	struct bn_embed_item e = { .ids = ids, .n_ids = n_plain + 1 };
	struct bn_embed_item p = { .ids = ids, .n_ids = n_plain };
	struct bn_embed_item nb = { .text = text, .text_len = strlen(text), .flags = BN_REQ_NO_BOS };
	struct bn_embed_item b = { .ids = ids + 1, .n_ids = (uint32_t)body };
	embed_ok(c, &t, by_text);
	embed_ok(c, &e, with_eos);
	embed_ok(c, &p, without);
	embed_ok(c, &nb, bare);
	ck_assert_uint_eq(t.n_tokens, n_want);
	ck_assert_mem_eq(by_text, add_eos ? with_eos : without, t.dim * sizeof(float));
	ck_assert(memcmp(with_eos, without, t.dim * sizeof(float)) != 0);
	ck_assert_uint_eq(nb.n_tokens, (uint32_t)body);
	embed_ok(c, &b, bare_ids);
	ck_assert_mem_eq(bare, bare_ids, t.dim * sizeof(float));
	ck_assert_uint_eq(tokenize_op(c, text, got, MAX_LEN + 2), n_want);
	ck_assert_mem_eq(got, ids, n_want * sizeof(uint32_t));
	if (pooling)
		expect_prompt_without_eos(c, text, n_plain);
	static struct tu_run r;
	const char *const tokenize[] = { "tokenize", text, NULL };
	ck_assert_int_eq(tu_run_cli(&d, tokenize, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0, "bitnet-cli tokenize: %s", r.err);
	ck_assert_uint_eq(cli_ids(r.out, got, MAX_LEN + 2), n_want);
	ck_assert_mem_eq(got, ids, n_want * sizeof(uint32_t));
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "info", NULL }, NULL, 0, &r), 0);
	ck_assert_ptr_nonnull(strstr(r.out, add_eos ? "\nadd_eos=1\n" : "\nadd_eos=0\n"));
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}

START_TEST(text_ends_with_eos_as_the_file_says)
{
	expect_eos_last(eos_model, "last", 1);
	expect_eos_last(no_eos_model, NULL, 0);
}
END_TEST

int main(void)
{
	tu_models_dir(models_dir);
	snprintf(embedding_model, sizeof(embedding_model), "%s/embed-last.gguf", models_dir);
	const char *args[] = { "--pooling", "last", NULL };
	tu_write_tiny_model(embedding_model, args);
	snprintf(eos_model, sizeof(eos_model), "%s/embed-eos.gguf", models_dir);
	snprintf(no_eos_model, sizeof(no_eos_model), "%s/embed-no-eos.gguf", models_dir);
	tu_write_tiny_model(eos_model, (const char *const[]){ "--add-eos", "true", NULL });
	tu_write_tiny_model(no_eos_model, (const char *const[]){ "--pooling", "last", "--add-eos",
								"false", NULL });
	Suite *s = suite_create("embed");
	TCase *tc = tcase_create("daemon");
	tcase_set_timeout(tc, 120);
	if (TU_TSAN) {
		/* Under ThreadSanitizer (146 s on CI's 2-core machine) the cases where requests
		 * meet in a batch or in the prefix cache run; the others check one request's
		 * vector or refusal, which the plain and AddressSanitizer passes run. */
		printf("note: under ThreadSanitizer only the batched and prefix-cache cases run\n");
		tcase_add_test(tc, batch_equals_alone);
		tcase_add_test(tc, last_pooling_takes_the_prefix_cache);
	} else {
		tcase_add_loop_test(tc, pooling_vs_reference, BN_POOLING_MEAN,
				    BN_POOLING_LAST + 1);
		tcase_add_test(tc, batch_equals_alone);
		tcase_add_test(tc, text_over_the_context);
		tcase_add_test(tc, last_pooling_takes_the_prefix_cache);
		tcase_add_test(tc, generative_model_without_pooling);
		tcase_add_test(tc, loopback_does_not_embed);
		tcase_add_test(tc, embedding_model_embeds_only);
		tcase_add_test(tc, text_ends_with_eos_as_the_file_says);
	}
	suite_add_tcase(s, tc);
	int rc = tu_run_suite(s);
	tu_remove_dir(models_dir);
	return rc;
}
