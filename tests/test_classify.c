/* SPDX-License-Identifier: MIT */
/*
 * test_classify — classify requests (shm/PROTOCOL.md §6.12; bn_classify, bn_classify_batch,
 * bitnet-cli classify) against oracles:
 *  - score alone: each label's summed log-probability is, bit for bit, the sum over the label's
 *    positions of bn_score on prefix + label, for prefixes that end on, before and after a KV
 *    block boundary, labels longer than a block, more labels than may run at once (few fork
 *    ids, a small KV pool) and labels read in several chunks (a small step budget), on the
 *    built-in model and on the real test model ($BITNET_TEST_MODELS/stories260K.gguf);
 *  - the prefix is read once: the tokens the daemon computes (its batch cells less padding)
 *    are the prefix but its last token, plus every label's length;
 *  - alone == batched: bad items in the middle of a batch get their errors, the others the
 *    results they get alone;
 *  - the CLI prints what the library returns; a backend that cannot classify refuses;
 *  - the KV pool is idle again afterwards (forks give back what they hold).
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"

#include "ckassert.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_LABELS 8
#define MAX_IDS 128

static struct bn_client *connect_or_die(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 0, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

static char stories_path[512];

static void start_cpu_on(struct tu_daemon *d, const char *model, const char *const *more)
{
	const char *args[16] = { "--backend", "cpu", "--model", model, "--threads", "1" };
	for (int i = 0; more && more[i]; i++)
		args[6 + i] = more[i];
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

static void start_cpu(struct tu_daemon *d, const char *const *more)
{
	start_cpu_on(d, tu_default_model(), more);
}

static char *stats_text(struct bn_client *c)
{
	static char buf[1 << 20];
	ck_assert_int_gt(bn_daemon_stats(c, buf, sizeof(buf)), 0);
	return buf;
}

static long long computed_tokens(struct bn_client *c)
{
	const char *t = stats_text(c);
	return tu_metric(t, "bitnetd_batch_cells_total") -
	       tu_metric(t, "bitnetd_batch_padding_cells_total");
}

static void assert_kv_idle(struct bn_client *c)
{
	long long used = -1, reserved = -1;
	for (int i = 0, end = tu_scaled(300); i < end; i++) { /* 3 s, scaled */
		const char *t = stats_text(c);
		used = tu_metric(t, "bitnetd_kv_blocks_used");
		reserved = tu_metric(t, "bitnetd_kv_blocks_reserved");
		if (used == 0 && reserved == 0)
			return;
		usleep(10000);
	}
	ck_abort_msg("KV pool not idle: used %lld reserved %lld", used, reserved);
}

/* The oracle: score prefix + label alone and add the label's positions in order. */
static double label_sum_alone(struct bn_client *c, const uint32_t *prefix, uint32_t n_prefix,
			      const uint32_t *label, uint32_t n_label)
{
	static uint32_t ids[2 * MAX_IDS];
	static struct bn_logprob lp[2 * MAX_IDS];
	memcpy(ids, prefix, n_prefix * sizeof(*ids));
	memcpy(ids + n_prefix, label, n_label * sizeof(*ids));
	struct bn_score_item it = { .ids = ids, .n_ids = n_prefix + n_label, .cap = 2 * MAX_IDS,
				    .logprobs = lp };
	int rc = bn_score(c, &it, tu_scaled_ns(30 * SEC));
	ck_assert_msg(rc == 0, "score: %s", bn_strerror(rc));
	double sum = 0;
	for (uint32_t i = 0; i < n_label; i++) {
		ck_assert_uint_eq(lp[n_prefix - 1 + i].token, label[i]);
		sum += lp[n_prefix - 1 + i].logprob;
	}
	return sum;
}

/* Deterministic ids in [3, vocab). */
static void fill_ids(uint32_t *ids, uint32_t n, uint32_t seed, uint32_t vocab)
{
	for (uint32_t i = 0; i < n; i++)
		ids[i] = 3 + (seed * 131 + i * 17 + i * i) % (vocab - 3);
}

struct id_case {
	uint32_t prefix[MAX_IDS];
	uint32_t n_prefix;
	uint32_t labels[MAX_LABELS][MAX_IDS];
	const uint32_t *label_ptr[MAX_LABELS];
	uint32_t label_n[MAX_LABELS];
	uint32_t n_labels;
	struct bn_label_score scores[MAX_LABELS];
};

static void make_case(struct id_case *k, uint32_t n_prefix, const uint32_t *lens, uint32_t n,
		      uint32_t vocab)
{
	memset(k, 0, sizeof(*k));
	k->prefix[0] = 1; /* BOS */
	fill_ids(k->prefix + 1, n_prefix - 1, n_prefix, vocab);
	k->n_prefix = n_prefix;
	k->n_labels = n;
	for (uint32_t i = 0; i < n; i++) {
		fill_ids(k->labels[i], lens[i], 7 * i + n_prefix, vocab);
		k->label_ptr[i] = k->labels[i];
		k->label_n[i] = lens[i];
	}
}

static struct bn_classify_item item_of(struct id_case *k)
{
	return (struct bn_classify_item){ .prefix_ids = k->prefix, .n_prefix_ids = k->n_prefix,
					  .label_ids = k->label_ptr, .label_n_ids = k->label_n,
					  .n_labels = k->n_labels, .scores = k->scores };
}

/* Every label as scored alone; mean, prob and best consistent with the sums. */
static void assert_case(struct bn_client *c, const struct id_case *k,
			const struct bn_classify_item *it)
{
	double probs = 0;
	uint32_t best = 0;
	for (uint32_t i = 0; i < k->n_labels; i++) {
		const struct bn_label_score *s = &it->scores[i];
		double alone = label_sum_alone(c, k->prefix, k->n_prefix, k->labels[i], k->label_n[i]);
		ck_assert_msg(s->logprob == alone, "prefix %u label %u: classify %.17g, alone %.17g",
			      k->n_prefix, i, s->logprob, alone);
		ck_assert_uint_eq(s->n_tokens, k->label_n[i]);
		ck_assert(s->mean == s->logprob / k->label_n[i]);
		probs += s->prob;
		if (s->logprob > it->scores[best].logprob)
			best = i;
	}
	ck_assert_msg(fabs(probs - 1.0) < 1e-12, "probabilities add up to %.17g", probs);
	ck_assert_uint_eq(it->best, best);
}

/* Prefixes whose last token (where the labels fork) sits at the start of a block, inside
 * one, and alone; labels of one token, of more than a block, and more of them than run at
 * once. */
static void run_label_cases(struct bn_client *c)
{
	struct bn_model_info mi;
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	static const uint32_t prefixes[] = { 1, 2, 16, 17, 18, 33 };
	static const uint32_t lens[] = { 1, 3, 20, 2, 40, 1 };
	static struct id_case k;
	for (size_t p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]); p++) {
		make_case(&k, prefixes[p], lens, 6, mi.vocab_size);
		struct bn_classify_item it = item_of(&k);
		int rc = bn_classify(c, &it, tu_scaled_ns(30 * SEC));
		ck_assert_msg(rc == 0, "classify, prefix %u: %s", prefixes[p], bn_strerror(rc));
		ck_assert_uint_eq(it.result.status, BN_STATUS_COMPLETE);
		ck_assert_uint_eq(it.result.n_tokens, 1 + 3 + 20 + 2 + 40 + 1);
		assert_case(c, &k, &it);
	}
	assert_kv_idle(c);
}

/* run_label_cases on a daemon of `model` started with `more` arguments, whose KV pool has
 * `blocks` blocks (0: any). */
static void label_cases_on(const char *model, const char *const *more, long long blocks)
{
	struct tu_daemon d;
	start_cpu_on(&d, model, more);
	struct bn_client *c = connect_or_die(&d);
	if (blocks)
		ck_assert_int_eq(tu_metric(stats_text(c), "bitnetd_kv_blocks_total"), blocks);
	run_label_cases(c);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}

START_TEST(labels_equal_score_alone)
{
	label_cases_on(tu_default_model(), NULL, 0);
}
END_TEST

/* Two fork ids, and steps of 8 tokens: labels run two at a time, in several chunks each. */
START_TEST(labels_in_waves_and_chunks)
{
	static const char *const more[] = { "--max-batch", "2", "--token-budget", "8", NULL };
	label_cases_on(tu_default_model(), more, 0);
}
END_TEST

/* Eight 32 KiB blocks (the tiny model: 2 KiB a position, 16 a block): the prefix of 33 takes
 * two, each fork of the 40-token label three more, so two labels at a time fit. */
START_TEST(labels_within_a_small_kv_pool)
{
	static const char *const more[] = { "--kv-memory", "256K", NULL };
	label_cases_on(tu_default_model(), more, 8);
}
END_TEST

/* The real test model (../shared/models/stories260K.gguf), its labels in waves of two. */
START_TEST(stories_labels_equal_score_alone)
{
	static const char *const more[] = { "--max-batch", "2", NULL };
	label_cases_on(stories_path, more, 0);
}
END_TEST

START_TEST(prefix_is_read_once)
{
	struct tu_daemon d;
	start_cpu(&d, NULL);
	struct bn_client *c = connect_or_die(&d);
	struct bn_model_info mi;
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	static const uint32_t lens[8] = { 4, 4, 4, 4, 4, 4, 4, 4 };
	static struct id_case k;
	make_case(&k, 64, lens, 8, mi.vocab_size);
	struct bn_classify_item it = item_of(&k);
	long long before = computed_tokens(c);
	ck_assert_int_eq(bn_classify(c, &it, tu_scaled_ns(30 * SEC)), 0);
	long long spent = computed_tokens(c) - before;
	/* 63 prefix tokens, then each fork: the prefix's last token and three label tokens. */
	ck_assert_int_eq(spent, 63 + 8 * 4);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Text labels are the ids the prefix + label text gets past the prefix's own. */
START_TEST(text_labels_continue_the_prefix)
{
	struct tu_daemon d;
	start_cpu(&d, NULL);
	struct bn_client *c = connect_or_die(&d);
	static const char prefix[] = "Once upon a time, there was a little";
	static const char *const labels[] = { " girl", " boy", " dog named Max" };
	struct bn_label_score scores[3];
	struct bn_classify_item it = { .text = prefix, .text_len = strlen(prefix),
				       .labels = labels, .n_labels = 3, .scores = scores };
	int rc = bn_classify(c, &it, tu_scaled_ns(30 * SEC));
	ck_assert_msg(rc == 0, "classify: %s", bn_strerror(rc));
	static struct bn_logprob lp[MAX_IDS];
	struct bn_score_item alone = { .text = prefix, .text_len = strlen(prefix), .cap = MAX_IDS,
				       .logprobs = lp };
	ck_assert_int_eq(bn_score(c, &alone, tu_scaled_ns(30 * SEC)), 0);
	uint32_t n_prefix = alone.n_tokens;
	for (uint32_t i = 0; i < 3; i++) {
		char text[128];
		snprintf(text, sizeof(text), "%s%s", prefix, labels[i]);
		alone = (struct bn_score_item){ .text = text, .text_len = strlen(text),
						.cap = MAX_IDS, .logprobs = lp };
		ck_assert_int_eq(bn_score(c, &alone, tu_scaled_ns(30 * SEC)), 0);
		ck_assert_uint_eq(scores[i].n_tokens, alone.n_tokens - n_prefix);
		double sum = 0;
		for (uint32_t p = n_prefix - 1; p < alone.n_scored; p++)
			sum += lp[p].logprob;
		ck_assert_msg(scores[i].logprob == sum, "label %u: %.17g, alone %.17g", i,
			      scores[i].logprob, sum);
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

#define ITEMS 7

START_TEST(batch_items_fail_alone)
{
	struct tu_daemon d;
	start_cpu(&d, NULL);
	struct bn_client *c = connect_or_die(&d);
	struct bn_model_info mi;
	ck_assert_int_eq(bn_model_info(c, &mi), 0);
	static const uint32_t lens[3] = { 2, 5, 1 };
	static struct id_case good[3], bad_token, empty_label, too_long, no_labels;
	for (uint32_t i = 0; i < 3; i++)
		make_case(&good[i], 10 + 9 * i, lens, 3, mi.vocab_size);
	make_case(&bad_token, 5, lens, 3, mi.vocab_size);
	bad_token.labels[1][2] = mi.vocab_size;
	make_case(&empty_label, 5, lens, 3, mi.vocab_size);
	empty_label.label_n[2] = 0;
	make_case(&too_long, 5, lens, 3, mi.vocab_size);
	static uint32_t long_label[2048];
	ck_assert_uint_le(mi.context_length, 2048);
	too_long.label_ptr[0] = long_label;
	too_long.label_n[0] = mi.context_length; /* + the prefix: past the context */
	make_case(&no_labels, 5, lens, 0, mi.vocab_size);
	struct id_case *cases[ITEMS] = { &good[0], &bad_token, &good[1], &empty_label, &too_long,
					 &no_labels, &good[2] };
	static const int32_t want[ITEMS] = { 0, -BN_E_TOKEN, 0, -BN_E_EMPTY, -BN_E_TOO_LONG,
					     -BN_E_EMPTY, 0 };
	struct bn_classify_item items[ITEMS];
	for (uint32_t i = 0; i < ITEMS; i++)
		items[i] = item_of(cases[i]);
	struct bn_batch_result br;
	ck_assert_int_eq(bn_classify_batch(c, items, ITEMS, &br, tu_scaled_ns(60 * SEC)), 0);
	ck_assert_uint_eq(br.n_ok, 3);
	ck_assert_uint_eq(br.n_failed, 4);
	for (uint32_t i = 0; i < ITEMS; i++) {
		ck_assert_msg(items[i].error == want[i], "item %u: %s, want %s", i,
			      bn_strerror(items[i].error), bn_strerror(want[i]));
		if (want[i] == 0)
			assert_case(c, cases[i], &items[i]);
	}
	assert_kv_idle(c);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(cli_prints_the_labels)
{
	struct tu_daemon d;
	start_cpu(&d, NULL);
	struct bn_client *c = connect_or_die(&d);
	static const char *const labels[] = { " up", " down" };
	struct bn_label_score scores[2];
	struct bn_classify_item it = { .text = "The ball went", .text_len = 13, .labels = labels,
				       .n_labels = 2, .scores = scores };
	ck_assert_int_eq(bn_classify(c, &it, tu_scaled_ns(30 * SEC)), 0);
	const char *args[] = { "classify", "--text", "The ball went", "--labels", "up,down", NULL };
	static struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, args, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0, "bitnet-cli classify: %s", r.err);
	char *line = r.out;
	for (uint32_t i = 0; i < 2; i++) {
		unsigned index, tokens;
		double logprob, mean, prob;
		ck_assert_int_eq(sscanf(line, "%u tokens=%u logprob=%lf mean=%lf prob=%lf", &index,
					&tokens, &logprob, &mean, &prob), 5);
		ck_assert_uint_eq(index, i);
		ck_assert_uint_eq(tokens, scores[i].n_tokens);
		ck_assert(fabs(logprob - scores[i].logprob) <= 1e-8 * fabs(scores[i].logprob));
		ck_assert(strstr(line, labels[i]) != NULL);
		line = strchr(line, '\n') + 1;
	}
	unsigned best;
	ck_assert_int_eq(sscanf(line, "best=%u", &best), 1);
	ck_assert_uint_eq(best, it.best);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(loopback_does_not_classify)
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, NULL), 0);
	struct bn_client *c = connect_or_die(&d);
	static struct id_case k;
	static const uint32_t lens[1] = { 1 };
	make_case(&k, 3, lens, 1, 64);
	struct bn_classify_item it = item_of(&k);
	ck_assert_int_eq(bn_classify(c, &it, tu_scaled_ns(10 * SEC)), -BN_E_UNSUPPORTED);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("classify");
	TCase *tc = tcase_create("classify");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, labels_equal_score_alone);
	tcase_add_test(tc, labels_in_waves_and_chunks);
	tcase_add_test(tc, labels_within_a_small_kv_pool);
	tcase_add_test(tc, prefix_is_read_once);
	tcase_add_test(tc, text_labels_continue_the_prefix);
	tcase_add_test(tc, batch_items_fail_alone);
	tcase_add_test(tc, cli_prints_the_labels);
	tcase_add_test(tc, loopback_does_not_classify);
	suite_add_tcase(s, tc);
	const char *models = getenv("BITNET_TEST_MODELS");
	if (models && *models) {
		snprintf(stories_path, sizeof(stories_path), "%s/stories260K.gguf", models);
		TCase *real = tcase_create("stories260K");
		tcase_set_timeout(real, 120);
		tcase_add_test(real, stories_labels_equal_score_alone);
		suite_add_tcase(s, real);
	} else {
		printf("SKIP: test-model tests (BITNET_TEST_MODELS is not set; .ci/run sets it to "
		       "../shared/models)\n");
	}
	return tu_run_suite(s);
}
