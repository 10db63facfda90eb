/* SPDX-License-Identifier: MIT */
/*
 * test_prefix_cache — KV blocks shared by content across requests (daemon/serve/prefix_cache.h,
 * --prefix-cache), against oracles:
 *  - a daemon started with --prefix-cache off: every request's tokens and log-probabilities
 *    (greedy, seeded sampling, alternatives) are the same bits with the cache;
 *  - the computed-token count (batch cells less padding): a prompt seen before computes only
 *    what follows its full cached blocks; a prompt sharing part of a block reuses only the
 *    full blocks before it;
 *  - a tiny KV pool and 64 distinct prompts: every request completes, cached blocks are
 *    evicted, the outputs are the no-cache daemon's;
 *  - a classify request's prefix takes cached blocks too, its label sums unchanged;
 *  - sharing scopes: another uid finds nothing under the default (uid), everything with all;
 *  - a client killed while another session runs on its cached blocks: the other's output is
 *    right and the pool's counts come back.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"

#include "ckassert.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000LL
#define BT 16
#define GEN 12
#define N_TOP 2
#define MAX_PROMPT 160

static struct bn_client *connect_or_die(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 0, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

static void start_cpu(struct tu_daemon *d, const char *const *more)
{
	const char *args[16] = { "--backend", "cpu", "--model", tu_default_model(), "--threads",
				 "1", "--socket-mode", "0666" };
	for (int i = 0; more && more[i]; i++)
		args[8 + i] = more[i];
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

static long long metric(struct bn_client *c, const char *name)
{
	static char buf[1 << 20];
	ck_assert_int_gt(bn_daemon_stats(c, buf, sizeof(buf)), 0);
	return tu_metric(buf, name);
}

static long long computed_tokens(struct bn_client *c)
{
	return metric(c, "bitnetd_batch_cells_total") -
	       metric(c, "bitnetd_batch_padding_cells_total");
}

/* What one request gave: its tokens and their records. */
struct outcome {
	uint32_t tokens[GEN];
	struct bn_logprob lp[GEN], top[GEN * N_TOP];
	uint32_t n;
};

enum mode { GREEDY, SAMPLED };

static void generate(struct bn_client *c, const uint32_t *prompt, uint32_t n, enum mode m,
		     struct outcome *o)
{
	struct bn_sampling_params sp = { .n_logprobs = N_TOP };
	if (m == SAMPLED) {
		sp.temperature = 0.9f;
		sp.top_p = 0.95f;
		sp.seed = 1234;
	}
	struct bn_request req = { .prompt = prompt, .n_prompt = n, .max_tokens = GEN,
				  .flags = BN_REQ_IGNORE_EOS | BN_REQ_LOGPROBS |
					   (m == SAMPLED ? BN_REQ_SEED : 0),
				  .sampling = &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	ck_assert_int_eq(tu_wait(h, 30 * SEC), 0);
	memset(o, 0, sizeof(*o));
	o->n = (uint32_t)bn_read_tokens(h, 0, o->tokens, GEN);
	ck_assert_uint_eq(o->n, GEN);
	ck_assert_int_eq(bn_read_logprobs(h, 0, o->lp, o->top, GEN), GEN);
	bn_release(h);
}

static void assert_same(const struct outcome *a, const struct outcome *b, const char *what)
{
	ck_assert_msg(memcmp(a, b, sizeof(*a)) == 0, "%s: outputs differ with the cache", what);
}

static void fill_prompt(uint32_t *p, uint32_t n, uint32_t seed, uint32_t vocab)
{
	p[0] = 1;
	for (uint32_t i = 1; i < n; i++)
		p[i] = 3 + (seed * 977 + i * 31 + i * i * 7) % (vocab - 3);
}

/* ------------------------------------------------------------------------------------------ */

START_TEST(same_prompt_twice_is_exact_and_cheaper)
{
	struct tu_daemon on, off;
	static const char *const no_cache[] = { "--prefix-cache", "off", NULL };
	start_cpu(&on, NULL);
	start_cpu(&off, no_cache);
	struct bn_client *c = connect_or_die(&on), *ref = connect_or_die(&off);
	uint32_t prompt[100];
	fill_prompt(prompt, 100, 1, 512);
	for (enum mode m = GREEDY; m <= SAMPLED; m++) {
		struct outcome first, second, want;
		generate(ref, prompt, 100, m, &want);
		long long t0 = computed_tokens(c);
		generate(c, prompt, 100, m, &first);
		long long t1 = computed_tokens(c);
		generate(c, prompt, 100, m, &second);
		long long t2 = computed_tokens(c);
		assert_same(&first, &want, m == GREEDY ? "greedy, first" : "sampled, first");
		assert_same(&second, &want, m == GREEDY ? "greedy, again" : "sampled, again");
		/* The first reads 100 prompt tokens (only if nothing was cached before: the greedy
		 * pass ran the same prompt) and 11 more; the second 100 - 96 and 11. */
		if (m == GREEDY)
			ck_assert_int_eq(t1 - t0, 100 + GEN - 1);
		ck_assert_int_eq(t2 - t1, 100 - 6 * BT + GEN - 1);
	}
	ck_assert_int_ge(metric(c, "bitnetd_prefix_cache_hit_tokens_total"), 3 * 6 * BT);
	/* The next turn of a conversation: prompt + reply + more; the reply's blocks are cached
	 * too, so only what follows the last full block is read. */
	struct outcome reply, next, want;
	generate(c, prompt, 100, GREEDY, &reply);
	static uint32_t turn[MAX_PROMPT];
	memcpy(turn, prompt, sizeof(prompt));
	memcpy(turn + 100, reply.tokens, sizeof(reply.tokens));
	fill_prompt(turn + 100 + GEN, 20, 9, 512);
	turn[100 + GEN] = 5;
	uint32_t n = 100 + GEN + 20;
	generate(ref, turn, n, GREEDY, &want);
	long long t0 = computed_tokens(c);
	generate(c, turn, n, GREEDY, &next);
	/* 100 + 11 positions were written by the reply's request: 6 full blocks. */
	ck_assert_int_eq(computed_tokens(c) - t0, n - 6 * BT + GEN - 1);
	assert_same(&next, &want, "next turn");
	bn_disconnect(c);
	bn_disconnect(ref);
	ck_assert_int_eq(tu_daemon_stop(&on, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&off, SIGTERM), 0);
}
END_TEST

START_TEST(partial_block_reuses_only_full_blocks)
{
	struct tu_daemon d;
	start_cpu(&d, NULL);
	struct bn_client *c = connect_or_die(&d);
	uint32_t a[60], b[60];
	fill_prompt(a, 60, 2, 512);
	memcpy(b, a, sizeof(a));
	for (uint32_t i = 40; i < 60; i++)
		b[i] = 3 + (b[i] + 1) % 500; /* same first 40 tokens: 2.5 blocks */
	struct outcome o;
	generate(c, a, 60, GREEDY, &o);
	long long t0 = computed_tokens(c);
	generate(c, b, 60, GREEDY, &o);
	ck_assert_int_eq(computed_tokens(c) - t0, 60 - 2 * BT + GEN - 1);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A classify request's prefix takes cached blocks like a prompt (the same mechanism its
 * labels fork by): the second classify of a prefix reads only what follows its full cached
 * blocks, and its labels' sums are the same bits. */
START_TEST(classify_prefix_uses_the_cache)
{
	struct tu_daemon d;
	start_cpu(&d, NULL);
	struct bn_client *c = connect_or_die(&d);
	uint32_t prefix[41], l0[3] = { 7, 8, 9 }, l1[2] = { 10, 11 };
	fill_prompt(prefix, 41, 5, 512);
	const uint32_t *labels[2] = { l0, l1 };
	const uint32_t lens[2] = { 3, 2 };
	struct bn_label_score first[2], again[2];
	struct bn_classify_item it = { .prefix_ids = prefix, .n_prefix_ids = 41,
				       .label_ids = labels, .label_n_ids = lens, .n_labels = 2,
				       .scores = first };
	long long t0 = computed_tokens(c);
	ck_assert_int_eq(bn_classify(c, &it, tu_scaled_ns(30 * SEC)), 0);
	long long t1 = computed_tokens(c);
	it.scores = again;
	ck_assert_int_eq(bn_classify(c, &it, tu_scaled_ns(30 * SEC)), 0);
	long long t2 = computed_tokens(c);
	ck_assert_int_eq(t1 - t0, 40 + 3 + 2);
	ck_assert_int_eq(t2 - t1, 40 - 2 * BT + 3 + 2);
	ck_assert_mem_eq(first, again, sizeof(first));
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

#define DISTINCT 64

/* Sixteen blocks of 32 KiB (the tiny model: 2 KiB a position), two requests of four blocks
 * running at once: the other eight are what the cache can keep. The first round's 64
 * distinct prompts evict; the second's prompts come back after two others, still cached. */
START_TEST(tiny_pool_evicts_and_stays_exact)
{
	struct tu_daemon on, off;
	static const char *const small[] = { "--kv-memory", "512K", "--max-batch", "2", NULL };
	static const char *const small_off[] = { "--kv-memory", "512K", "--max-batch", "2",
						  "--prefix-cache", "off", NULL };
	start_cpu(&on, small);
	start_cpu(&off, small_off);
	struct bn_client *c = connect_or_die(&on), *ref = connect_or_die(&off);
	static uint32_t prompts[DISTINCT][40], out[DISTINCT][GEN], want[DISTINCT][GEN];
	static struct bn_batch_item items[DISTINCT], ref_items[DISTINCT];
	for (uint32_t round = 0; round < 2; round++) {
		for (uint32_t i = 0; i < DISTINCT; i++) {
			fill_prompt(prompts[i], 40, 100 + i % (round ? 3 : DISTINCT), 512);
			items[i] = (struct bn_batch_item){
				.req = { .prompt = prompts[i], .n_prompt = 40, .max_tokens = GEN,
					 .flags = BN_REQ_IGNORE_EOS },
				.out = out[i], .out_cap = GEN };
			ref_items[i] = items[i];
			ref_items[i].out = want[i];
		}
		struct bn_batch_result br, ref_br;
		int64_t limit = tu_scaled_ns(120 * SEC);
		ck_assert_int_eq(bn_generate_batch(c, items, DISTINCT, &br, limit), 0);
		ck_assert_int_eq(bn_generate_batch(ref, ref_items, DISTINCT, &ref_br, limit), 0);
		ck_assert_uint_eq(br.n_ok, DISTINCT);
		ck_assert_uint_eq(ref_br.n_ok, DISTINCT);
		ck_assert_mem_eq(out, want, sizeof(out));
	}
	ck_assert_int_gt(metric(c, "bitnetd_prefix_cache_evictions_total"), 0);
	ck_assert_int_gt(metric(c, "bitnetd_prefix_cache_hit_tokens_total"), 0);
	ck_assert_int_eq(metric(c, "bitnetd_kv_blocks_used"), 0);
	ck_assert_int_eq(metric(c, "bitnetd_kv_blocks_reserved"), 0);
	bn_disconnect(c);
	bn_disconnect(ref);
	ck_assert_int_eq(tu_daemon_stop(&on, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&off, SIGTERM), 0);
}
END_TEST

/* A child of another uid runs the prompt; exit 0 when served, 77 when not root. */
static int run_as_other_user(const char *socket_path, const uint32_t *prompt, uint32_t n)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (tu_become_other_user() < 0)
			_exit(77);
		struct bn_client *c;
		if (bn_connect(socket_path, 1, &c) < 0)
			_exit(1);
		uint32_t out[GEN];
		struct bn_request req = { .prompt = prompt, .n_prompt = n, .max_tokens = GEN,
					  .flags = BN_REQ_IGNORE_EOS };
		struct bn_result r;
		int rc = bn_generate(c, &req, out, GEN, &r, tu_scaled_ns(30 * SEC));
		bn_disconnect(c);
		_exit(rc == 0 ? 0 : 2);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* The hits another uid's run of a prompt this uid ran first gets, under `mode`; -1: no root. */
static long long other_uid_hits(const char *mode)
{
	struct tu_daemon d;
	const char *more[] = { "--prefix-cache", mode, NULL };
	start_cpu(&d, more);
	struct bn_client *c = connect_or_die(&d);
	uint32_t prompt[64];
	fill_prompt(prompt, 64, 3, 512);
	struct outcome o;
	generate(c, prompt, 64, GREEDY, &o);
	long long before = metric(c, "bitnetd_prefix_cache_hit_tokens_total");
	int rc = run_as_other_user(d.socket_path, prompt, 64);
	long long hits = rc == 77 ? -1 : metric(c, "bitnetd_prefix_cache_hit_tokens_total") - before;
	ck_assert_msg(rc == 0 || rc == 77, "the other user's request failed (%d)", rc);
	/* The same uid, another session, finds the blocks. */
	struct bn_client *again = connect_or_die(&d);
	before = metric(c, "bitnetd_prefix_cache_hit_tokens_total");
	generate(again, prompt, 64, GREEDY, &o);
	ck_assert_int_eq(metric(c, "bitnetd_prefix_cache_hit_tokens_total") - before,
			 strcmp(mode, "session") == 0 ? 0 : 3 * BT);
	bn_disconnect(again);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	return hits;
}

START_TEST(sharing_follows_the_scope)
{
	long long uid = other_uid_hits("uid"), all = other_uid_hits("all");
	other_uid_hits("session");
	if (uid < 0) {
		fprintf(stderr, "note: not root, so no second uid: the other user's part is skipped\n");
		return;
	}
	ck_assert_int_eq(uid, 0);
	ck_assert_int_eq(all, 3 * BT);
}
END_TEST

/* A child process of this uid holds a long generation on a prompt; this process runs the same
 * prompt (sharing the child's blocks) while the child is killed. */
START_TEST(killed_owner_leaves_sharers_whole)
{
	struct tu_daemon d, off;
	static const char *const no_cache[] = { "--prefix-cache", "off", NULL };
	start_cpu(&d, NULL);
	start_cpu(&off, no_cache);
	static uint32_t prompt[MAX_PROMPT];
	fill_prompt(prompt, MAX_PROMPT, 4, 512);
	pid_t pid = fork();
	if (pid == 0) {
		struct bn_client *c;
		if (bn_connect(d.socket_path, 1, &c) < 0)
			_exit(1);
		static uint32_t out[800];
		struct bn_request req = { .prompt = prompt, .n_prompt = MAX_PROMPT,
					  .max_tokens = 800, .flags = BN_REQ_IGNORE_EOS };
		struct bn_result r;
		bn_generate(c, &req, out, 800, &r, tu_scaled_ns(60 * SEC));
		_exit(0);
	}
	struct bn_client *c = connect_or_die(&d), *ref = connect_or_die(&off);
	/* Wait until the child's prompt is read (its blocks are cached): up to 1 s, scaled. */
	long long cached = 0;
	for (int i = 0, end = tu_scaled(500); i < end && cached < MAX_PROMPT / BT; i++) {
		usleep(2000);
		cached = metric(c, "bitnetd_kv_blocks_cached");
	}
	ck_assert_int_ge(metric(c, "bitnetd_kv_blocks_cached"), MAX_PROMPT / BT);
	struct bn_sampling_params sp = { 0 };
	struct bn_request req = { .prompt = prompt, .n_prompt = MAX_PROMPT, .max_tokens = GEN,
				  .flags = BN_REQ_IGNORE_EOS, .sampling = &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	ck_assert_int_eq(tu_wait(h, 30 * SEC), 0);
	uint32_t got[GEN], want[GEN];
	ck_assert_int_eq(bn_read_tokens(h, 0, got, GEN), GEN);
	bn_release(h);
	struct bn_result r;
	ck_assert_int_eq(bn_generate(ref, &req, want, GEN, &r, tu_scaled_ns(30 * SEC)), 0);
	ck_assert_mem_eq(got, want, sizeof(got));
	ck_assert_int_ge(metric(c, "bitnetd_prefix_cache_hit_tokens_total"), (MAX_PROMPT / BT - 1) * BT);
	for (int i = 0, end = tu_scaled(500); i < end && metric(c, "bitnetd_kv_blocks_used"); i++)
		usleep(2000);
	ck_assert_int_eq(metric(c, "bitnetd_kv_blocks_used"), 0);
	ck_assert_int_eq(metric(c, "bitnetd_kv_blocks_reserved"), 0);
	ck_assert_int_eq(metric(c, "bitnetd_kv_blocks_free") + 0,
			 metric(c, "bitnetd_kv_blocks_total"));
	bn_disconnect(c);
	bn_disconnect(ref);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	ck_assert_int_eq(tu_daemon_stop(&off, SIGTERM), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prefix_cache");
	TCase *tc = tcase_create("prefix_cache");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, same_prompt_twice_is_exact_and_cheaper);
	tcase_add_test(tc, partial_block_reuses_only_full_blocks);
	tcase_add_test(tc, classify_prefix_uses_the_cache);
	tcase_add_test(tc, tiny_pool_evicts_and_stays_exact);
	tcase_add_test(tc, sharing_follows_the_scope);
	tcase_add_test(tc, killed_owner_leaves_sharers_whole);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
