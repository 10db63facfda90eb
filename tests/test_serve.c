/* SPDX-License-Identifier: MIT */
/*
 * Serving: continuous batching, sampling, cancellation, deadlines, KV pool, fairness, as a
 * client sees them through a real bitnetd. Oracles: the same request run alone (batch
 * invariance), the loopback function (testutil.h), the test model's known ids, and the
 * daemon's own KV accounting returning to zero.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "../daemon/model/forward.h"
#include "../daemon/model/model.h"
#include "../daemon/serve/sched.h"

#include "bitnet_client.h"
#include "bitnet_shm.h"

#include "ckassert.h"
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000LL
#define MAX_OUT 64

static struct bn_client *connect_to(const struct tu_daemon *d, uint32_t slots)
{
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d->socket_path, slots, &c), 0);
	return c;
}

static char *stats_text(struct bn_client *c)
{
	static char buf[1 << 20];
	ck_assert_int_gt(bn_daemon_stats(c, buf, sizeof(buf)), 0);
	return buf;
}

/* Waits until the request has published at least n tokens (bn_wait_tokens takes the count the
 * caller already has and returns when it changes). */
static int wait_for_tokens(struct bn_handle *h, uint32_t n)
{
	uint32_t have = 0, buf[64];
	while (have < n) {
		int rc = bn_wait_tokens(h, have, tu_scaled_ns(10 * SEC));
		if (rc < 0)
			return rc;
		struct bn_result res;
		int now = bn_read_tokens(h, 0, buf, 64);
		if ((uint32_t)now == have && bn_result(h, &res) == 0)
			return -BN_E_NOT_DONE - 1; /* ended before n tokens */
		have = (uint32_t)now;
	}
	return 0;
}

/* Waits until the daemon reports no running sequence and no KV block in use or promised. */
static void wait_kv_idle(struct bn_client *c)
{
	long long used = -1, reserved = -1, running = -1;
	for (int i = 0, end = tu_scaled(500); i < end; i++) { /* 5 s, scaled */
		char *t = stats_text(c);
		used = tu_metric(t, "bitnetd_kv_blocks_used");
		reserved = tu_metric(t, "bitnetd_kv_blocks_reserved");
		running = tu_metric(t, "bitnetd_running_sequences");
		if (used == 0 && reserved == 0 && running == 0)
			return;
		usleep(10000);
	}
	ck_abort_msg("KV pool did not return to idle: used %lld reserved %lld running %lld", used,
		     reserved, running);
}

/* ------------------------------------------------------------------------------------------ */
/* Requests and their outcomes                                                                 */
/* ------------------------------------------------------------------------------------------ */

struct job {
	uint32_t prompt[96];
	uint32_t n_prompt, max_tokens, flags;
	struct bn_sampling_params sp;
	int use_sp;
	/* outcome */
	uint32_t out[MAX_OUT];
	struct bn_result res;
	int rc;
};

static struct bn_request job_request(const struct job *j)
{
	return (struct bn_request){ .prompt = j->prompt, .n_prompt = j->n_prompt,
				    .max_tokens = j->max_tokens, .flags = j->flags,
				    .sampling = j->use_sp ? &j->sp : NULL };
}

static void run_alone(struct bn_client *c, struct job *j)
{
	struct bn_request req = job_request(j);
	j->rc = bn_generate(c, &req, j->out, MAX_OUT, &j->res, tu_scaled_ns(120 * SEC));
}

/* Submits every job before waiting for any, so they share steps. */
static void run_together(struct bn_client *c, struct job *jobs, uint32_t n)
{
	struct bn_handle *h[64];
	ck_assert_uint_le(n, 64);
	for (uint32_t i = 0; i < n; i++) {
		struct bn_request req = job_request(&jobs[i]);
		ck_assert_int_eq(bn_submit(c, &req, &h[i]), 0);
	}
	for (uint32_t i = 0; i < n; i++) {
		ck_assert_int_eq(tu_wait(h[i], 120 * SEC), 0);
		ck_assert_int_eq(bn_result(h[i], &jobs[i].res), 0);
		bn_read_tokens(h[i], 0, jobs[i].out, MAX_OUT);
		bn_release(h[i]);
	}
}

static void assert_same_tokens(const struct job *a, const struct job *b, uint32_t i)
{
	ck_assert_msg(a->res.status == b->res.status, "request %u: status %s alone, %s together", i,
		      bn_status_name(a->res.status), bn_status_name(b->res.status));
	ck_assert_msg(a->res.n_tokens == b->res.n_tokens, "request %u: %u tokens alone, %u together",
		      i, a->res.n_tokens, b->res.n_tokens);
	for (uint32_t t = 0; t < a->res.n_tokens; t++)
		ck_assert_msg(a->out[t] == b->out[t], "request %u token %u: %u alone, %u together", i,
			      t, a->out[t], b->out[t]);
}

/* 16 requests of mixed prompt lengths and output lengths; odd ones sampled with seeds and
 * every truncation kind, even ones greedy. */
static void make_mixed_jobs(struct job *jobs, uint32_t n, uint32_t vocab)
{
	uint32_t x = 12345;
	for (uint32_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		memset(j, 0, sizeof(*j));
		j->n_prompt = 1 + (i * 37) % 90;
		for (uint32_t k = 0; k < j->n_prompt; k++) {
			x = x * 1103515245u + 12345u;
			j->prompt[k] = 3 + (x >> 8) % (vocab - 3);
		}
		j->max_tokens = 8 + (i * 13) % 40;
		j->flags = BN_REQ_IGNORE_EOS;
		if (i % 2) {
			j->use_sp = 1;
			j->flags |= BN_REQ_SEED;
			j->sp = (struct bn_sampling_params){ .temperature = 0.7f + 0.1f * (float)(i % 5),
							     .seed = 1000 + i };
			if (i % 3 == 0)
				j->sp.top_k = 20;
			if (i % 3 == 1)
				j->sp.top_p = 0.9f;
			if (i % 7 == 1)
				j->sp.min_p = 0.05f;
			if (i % 5 == 3)
				j->sp.repetition_penalty = 1.3f;
			if (i % 4 == 3)
				j->sp.frequency_penalty = 0.5f;
		}
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Determinism: alone = inside a batch of 16 (greedy and sampled), prompts chunked or not      */
/* ------------------------------------------------------------------------------------------ */

START_TEST(sixteen_together_equal_alone)
{
	/* Alone on a daemon that reads each prompt in one step; together on one that cuts every
	 * prompt into chunks of a few tokens while the others decode. */
	const char *alone_args[] = { "--backend", "cpu", "--model", tu_default_model(),
				     "--token-budget", "4096", NULL };
	const char *crowd_args[] = { "--backend", "cpu", "--model", tu_default_model(),
				     "--token-budget", "24", NULL };
	static struct job alone[16], together[16];
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, alone_args), 0);
	struct bn_client *c = connect_to(&d, 16);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	make_mixed_jobs(alone, 16, info.vocab_size);
	for (uint32_t i = 0; i < 16; i++) {
		run_alone(c, &alone[i]);
		ck_assert_msg(alone[i].rc == 0, "request %u alone: %s", i, bn_strerror(alone[i].rc));
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);

	ck_assert_int_eq(tu_daemon_start(&d, crowd_args), 0);
	c = connect_to(&d, 16);
	make_mixed_jobs(together, 16, info.vocab_size);
	run_together(c, together, 16);
	for (uint32_t i = 0; i < 16; i++)
		assert_same_tokens(&alone[i], &together[i], i);
	/* The sampled ones are not simply greedy: some differ from their argmax twins. */
	uint32_t differ = 0;
	for (uint32_t i = 1; i < 16; i += 2) {
		struct job greedy = alone[i];
		greedy.use_sp = 0;
		greedy.flags = BN_REQ_IGNORE_EOS;
		run_alone(c, &greedy);
		ck_assert_int_eq(greedy.rc, 0);
		differ += memcmp(greedy.out, alone[i].out, alone[i].res.n_tokens * sizeof(uint32_t)) != 0;
	}
	ck_assert_msg(differ >= 2, "only %u of 8 sampled requests differ from greedy", differ);
	wait_kv_idle(c);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The test model: 8 clients with different prompts, and the unprompted known ids              */
/* ------------------------------------------------------------------------------------------ */

#define KNOWN_STEPS TU_STORIES_KNOWN
static char stories_path[512];

struct client_thread {
	const char *socket;
	struct job job;
	uint32_t known[KNOWN_STEPS];
	int known_run;
	int rc;
	struct bn_result res;
};

static void *client_main(void *arg)
{
	struct client_thread *t = arg;
	struct bn_client *c;
	t->rc = bn_connect(t->socket, 1, &c);
	if (t->rc)
		return NULL;
	if (t->known_run) {
		uint32_t bos = 1;
		struct bn_request req = { .prompt = &bos, .n_prompt = 1, .max_tokens = KNOWN_STEPS,
					  .flags = BN_REQ_IGNORE_EOS };
		t->rc = bn_generate(c, &req, t->known, KNOWN_STEPS, &t->res, tu_scaled_ns(120 * SEC));
	} else {
		run_alone(c, &t->job);
		t->rc = t->job.rc;
	}
	bn_disconnect(c);
	return NULL;
}

START_TEST(stories_eight_clients)
{
	const char *args[] = { "--backend", "cpu", "--model", stories_path, NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	static struct client_thread th[9];
	static struct job solo[8];
	struct bn_client *c = connect_to(&d, 1);
	for (uint32_t i = 0; i < 8; i++) {
		struct job *j = &th[i].job;
		memset(j, 0, sizeof(*j));
		j->prompt[0] = 1; /* BOS, then a different story start each */
		j->n_prompt = 1 + 1 + i;
		for (uint32_t k = 1; k < j->n_prompt; k++)
			j->prompt[k] = tu_stories_known[(i * 11 + k) % KNOWN_STEPS];
		j->max_tokens = 48;
		j->flags = BN_REQ_IGNORE_EOS;
		if (i % 2) { /* half sampled */
			j->use_sp = 1;
			j->flags |= BN_REQ_SEED;
			j->sp = (struct bn_sampling_params){ .temperature = 0.8f, .top_p = 0.95f,
							     .seed = 77 + i };
		}
		solo[i] = *j;
		run_alone(c, &solo[i]);
		ck_assert_int_eq(solo[i].rc, 0);
	}
	bn_disconnect(c);
	pthread_t tid[9];
	for (uint32_t i = 0; i < 9; i++) {
		th[i].socket = d.socket_path;
		th[i].known_run = i == 8;
		ck_assert_int_eq(pthread_create(&tid[i], NULL, client_main, &th[i]), 0);
	}
	for (uint32_t i = 0; i < 9; i++)
		pthread_join(tid[i], NULL);
	for (uint32_t i = 0; i < 8; i++) {
		ck_assert_msg(th[i].rc == 0, "client %u: %s", i, bn_strerror(th[i].rc));
		assert_same_tokens(&solo[i], &th[i].job, i);
	}
	ck_assert_int_eq(th[8].rc, 0);
	for (uint32_t i = 0; i < KNOWN_STEPS; i++)
		ck_assert_msg(th[8].known[i] == tu_stories_known[i], "known token %u: %u, want %u", i,
			      th[8].known[i], tu_stories_known[i]);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Log-probabilities                                                                           */
/* ------------------------------------------------------------------------------------------ */

START_TEST(logprobs_of_greedy_tokens)
{
	const char *args[] = { "--backend", "cpu", "--model", tu_default_model(), NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_to(&d, 1);
	uint32_t prompt[3] = { 1, 40, 41 };
	struct bn_sampling_params sp = { .n_logprobs = 4 };
	struct bn_request req = { .prompt = prompt, .n_prompt = 3, .max_tokens = 10,
				  .flags = BN_REQ_IGNORE_EOS | BN_REQ_LOGPROBS, .sampling = &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	ck_assert_int_eq(tu_wait(h, 60 * SEC), 0);
	uint32_t out[10];
	struct bn_logprob lp[10], alt[40];
	ck_assert_int_eq(bn_read_tokens(h, 0, out, 10), 10);
	ck_assert_int_eq(bn_read_logprobs(h, 0, lp, alt, 10), 10);
	for (uint32_t i = 0; i < 10; i++) {
		const struct bn_logprob *a = alt + i * 4;
		/* Greedy: the chosen token is the most likely one. */
		ck_assert_uint_eq(lp[i].token, out[i]);
		ck_assert_uint_eq(a[0].token, out[i]);
		ck_assert(lp[i].logprob == a[0].logprob);
		double mass = 0.0;
		for (uint32_t k = 0; k < 4; k++) {
			ck_assert(a[k].logprob <= 0.0f && isfinite(a[k].logprob));
			if (k)
				ck_assert(a[k].logprob <= a[k - 1].logprob);
			mass += exp(a[k].logprob);
		}
		ck_assert(mass <= 1.0 + 1e-5);
	}
	bn_release(h);
	/* Asking for more alternatives than the daemon offers is that request's error. */
	sp.n_logprobs = 1000;
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, 10, &res, tu_scaled_ns(10 * SEC)), -BN_E_INVALID);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Stop ids, deadlines, streaming                                                              */
/* ------------------------------------------------------------------------------------------ */

START_TEST(stop_ids_end_at_first_occurrence)
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, NULL), 0);
	struct bn_client *c = connect_to(&d, 1);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	uint32_t prompt[8], want[40], status;
	uint32_t n_prompt = tu_prompt(3, 4, prompt, 8);
	uint32_t n = tu_loopback(prompt, n_prompt, 40, BN_REQ_IGNORE_EOS, info.vocab_size,
				 info.eos_id, want, &status);
	ck_assert_uint_eq(n, 40);
	uint32_t stop_at = 7, first = 0;
	while (want[first] != want[stop_at])
		first++;
	uint32_t stops[2] = { 999999 % info.vocab_size == want[first] ? 5 : 999999 % info.vocab_size,
			      want[stop_at] };
	struct bn_sampling_params sp = { .stop_ids = stops, .n_stop = 2 };
	struct bn_request req = { .prompt = prompt, .n_prompt = n_prompt, .max_tokens = 40,
				  .flags = BN_REQ_IGNORE_EOS, .sampling = &sp };
	uint32_t out[40];
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, 40, &res, tu_scaled_ns(10 * SEC)), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_STOP);
	ck_assert_uint_eq(res.n_tokens, first);
	ck_assert_int_eq(memcmp(out, want, first * sizeof(uint32_t)), 0);
	/* A stop id outside the vocabulary is the request's error. */
	stops[0] = info.vocab_size;
	ck_assert_int_eq(bn_generate(c, &req, out, 40, &res, tu_scaled_ns(10 * SEC)), -BN_E_TOKEN);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(deadline_ends_request)
{
	const char *args[] = { "--step-delay-us", "5000", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_to(&d, 2);
	uint32_t prompt[4] = { 5, 6, 7, 8 }, out[1000];
	struct bn_sampling_params sp = { .deadline_ms = 100 };
	struct bn_request req = { .prompt = prompt, .n_prompt = 4, .max_tokens = 1000,
				  .flags = BN_REQ_IGNORE_EOS, .sampling = &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	/* Streaming: tokens are visible while the request still runs. */
	ck_assert_int_eq(wait_for_tokens(h, 3), 0);
	struct bn_result res;
	ck_assert_int_eq(bn_result(h, &res), -BN_E_NOT_DONE);
	ck_assert_int_eq(bn_wait(h, tu_scaled_ns(10 * SEC)), 0);
	ck_assert_int_eq(bn_result(h, &res), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_DEADLINE);
	ck_assert_uint_gt(res.n_tokens, 2);
	ck_assert_uint_lt(res.n_tokens, 1000);
	ck_assert_uint_ge(res.total_ns, 100000000u);
	/* The daemon's own figure: a deadline kept within 2 s, not scaled (timescale.h), since this
	 * is what the test is about (a step is 5 ms here). */
	ck_assert_uint_lt(res.total_ns, 2000000000u);
	bn_release(h);
	/* bn_generate reports the deadline as a timeout, with the tokens made before it. */
	ck_assert_int_eq(bn_generate(c, &req, out, 1000, &res, tu_scaled_ns(10 * SEC)), -BN_E_TIMEOUT);
	ck_assert_uint_eq(res.status, BN_STATUS_DEADLINE);
	wait_kv_idle(c);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* KV pool: cancellation and client death give blocks back; exhaustion waits, never loses      */
/* ------------------------------------------------------------------------------------------ */

START_TEST(cancel_and_death_free_kv)
{
	const char *args[] = { "--step-delay-us", "2000", "--max-batch", "16", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	pid_t child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) { /* a client that dies with requests running */
		struct bn_client *dc;
		if (bn_connect(d.socket_path, 4, &dc) != 0)
			_exit(1);
		uint32_t p[4] = { 9, 9, 9, 9 };
		struct bn_request r = { .prompt = p, .n_prompt = 4, .max_tokens = 3000,
					.flags = BN_REQ_IGNORE_EOS };
		struct bn_handle *hh;
		for (int i = 0; i < 4; i++)
			if (bn_submit(dc, &r, &hh) != 0)
				_exit(2);
		if (wait_for_tokens(hh, 3) != 0)
			_exit(3);
		_exit(0); /* no disconnect: the daemon sees the socket close */
	}
	struct bn_client *c = connect_to(&d, 8);
	uint32_t p[6] = { 3, 4, 5, 6, 7, 8 };
	struct bn_request req = { .prompt = p, .n_prompt = 6, .max_tokens = 3000,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h[8];
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(bn_submit(c, &req, &h[i]), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(wait_for_tokens(h[i], 3), 0);
	long long used = tu_metric(stats_text(c), "bitnetd_kv_blocks_used");
	ck_assert_int_gt(used, 0);
	for (int i = 0; i < 8; i++)
		bn_cancel(h[i]);
	for (int i = 0; i < 8; i++) {
		struct bn_result res;
		ck_assert_int_eq(bn_wait(h[i], tu_scaled_ns(10 * SEC)), 0);
		ck_assert_int_eq(bn_result(h[i], &res), 0);
		ck_assert_uint_eq(res.status, BN_STATUS_CANCELLED);
		bn_release(h[i]);
	}
	int st;
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	wait_kv_idle(c);
	long long total = tu_metric(stats_text(c), "bitnetd_kv_blocks_free");
	ck_assert_int_eq(total, tu_metric(stats_text(c), "bitnetd_kv_blocks_total"));
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(kv_exhaustion_waits_and_loses_nothing)
{
	/* Loopback declares 1 KiB per position: 128 KiB is 8 blocks of 16 positions, and each
	 * request below needs 3, so at most two run at once while 24 are queued. */
	const char *args[] = { "--kv-memory", "128K", "--kv-block-tokens", "16", "--max-batch", "8",
			       NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_to(&d, 32);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	static struct job jobs[24];
	for (uint32_t i = 0; i < 24; i++) {
		memset(&jobs[i], 0, sizeof(jobs[i]));
		jobs[i].n_prompt = tu_prompt(1, i, jobs[i].prompt, 10);
		jobs[i].max_tokens = 48 - jobs[i].n_prompt;
		jobs[i].flags = BN_REQ_IGNORE_EOS;
	}
	run_together(c, jobs, 24);
	for (uint32_t i = 0; i < 24; i++) {
		uint32_t want[MAX_OUT], status;
		uint32_t n = tu_loopback(jobs[i].prompt, jobs[i].n_prompt, jobs[i].max_tokens,
					 jobs[i].flags, info.vocab_size, info.eos_id, want, &status);
		ck_assert_uint_eq(jobs[i].res.status, status);
		ck_assert_uint_eq(jobs[i].res.n_tokens, n);
		ck_assert_int_eq(memcmp(jobs[i].out, want, n * sizeof(uint32_t)), 0);
	}
	/* One that could never fit (9 blocks) is refused at once, and says why. */
	uint32_t p[1] = { 5 }, out[200];
	struct bn_request big = { .prompt = p, .n_prompt = 1, .max_tokens = 140,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &big, out, 200, &res, tu_scaled_ns(10 * SEC)), -BN_E_KV_SPACE);
	ck_assert_uint_eq(res.status, BN_STATUS_ERROR);
	ck_assert_uint_eq(res.n_tokens, 0);
	wait_kv_idle(c);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Fairness                                                                                    */
/* ------------------------------------------------------------------------------------------ */

struct flood {
	const char *socket;
	int64_t submit_ns[64];
	struct bn_result res[64];
	int started; /* atomic: the main thread polls it */
	int rc;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	struct bn_client *c;
	if ((f->rc = bn_connect(f->socket, 64, &c)) != 0)
		return NULL;
	uint32_t p[3] = { 11, 12, 13 };
	struct bn_request req = { .prompt = p, .n_prompt = 3, .max_tokens = 20,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h[64];
	for (int i = 0; i < 64; i++) {
		f->submit_ns[i] = tu_now_ns();
		if ((f->rc = bn_submit(c, &req, &h[i])) != 0)
			return NULL;
	}
	__atomic_store_n(&f->started, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 64; i++) {
		tu_wait(h[i], 120 * SEC);
		bn_result(h[i], &f->res[i]);
		bn_release(h[i]);
	}
	bn_disconnect(c);
	return NULL;
}

START_TEST(flooding_session_cannot_starve_another)
{
	const char *args[] = { "--max-batch", "4", "--step-delay-us", "1000", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	static struct flood f;
	memset(&f, 0, sizeof(f));
	f.socket = d.socket_path;
	pthread_t tid;
	ck_assert_int_eq(pthread_create(&tid, NULL, flood_main, &f), 0);
	while (!__atomic_load_n(&f.started, __ATOMIC_ACQUIRE))
		usleep(100);
	struct bn_client *c = connect_to(&d, 1);
	int64_t light_submit[5], light_done[5];
	for (int i = 0; i < 5; i++) {
		uint32_t p[2] = { 21, (uint32_t)(22 + i) }, out[20];
		struct bn_request req = { .prompt = p, .n_prompt = 2, .max_tokens = 20,
					  .flags = BN_REQ_IGNORE_EOS };
		struct bn_result res;
		light_submit[i] = tu_now_ns();
		ck_assert_int_eq(bn_generate(c, &req, out, 20, &res, tu_scaled_ns(60 * SEC)), 0);
		/* when the daemon ended it, as for the flood's below: when this thread woke to see
		 * it would count the flood requests that end while a busy machine keeps it asleep
		 * (10 once, under AddressSanitizer on a 2-core machine at load 10) */
		light_done[i] = light_submit[i] + (int64_t)res.total_ns;
	}
	pthread_join(tid, NULL);
	ck_assert_int_eq(f.rc, 0);
	/* While a light request was in the daemon, at most the flood's requests already running
	 * (max batch 4) and one round-robin turn behind it may finish: 2 x 4, not dozens. */
	for (int i = 0; i < 5; i++) {
		int overtaken = 0;
		for (int k = 0; k < 64; k++) {
			int64_t done = f.submit_ns[k] + (int64_t)f.res[k].total_ns;
			overtaken += done > light_submit[i] && done < light_done[i];
		}
		ck_assert_msg(overtaken <= 8, "light request %d waited for %d flood requests", i,
			      overtaken);
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Session A decodes 4 sequences and has two 200-token prompts admitted; session B's 8-token
 * prompt comes after them. B's session decodes nothing, so its prompt is read first: B is
 * done while A's long prompts are still being read (read oldest first, B would wait for both:
 * ~100 steps at 4 prompt tokens a step). */
START_TEST(prompt_of_idle_session_goes_first)
{
	const char *args[] = { "--max-batch", "16", "--token-budget", "8", "--step-delay-us", "2000",
			       NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *a = connect_to(&d, 8), *b = connect_to(&d, 1);
	uint32_t one = 3, long_prompt[200], short_prompt[8];
	for (uint32_t i = 0; i < 200; i++)
		long_prompt[i] = 3 + i % 50;
	for (uint32_t i = 0; i < 8; i++)
		short_prompt[i] = 60 + i;
	struct bn_handle *dec[4], *pre[2], *hb;
	struct bn_request rd = { .prompt = &one, .n_prompt = 1, .max_tokens = 1000,
				 .flags = BN_REQ_IGNORE_EOS };
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(bn_submit(a, &rd, &dec[i]), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(wait_for_tokens(dec[i], 1), 0);
	struct bn_request rp = { .prompt = long_prompt, .n_prompt = 200, .max_tokens = 1,
				 .flags = BN_REQ_IGNORE_EOS };
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(bn_submit(a, &rp, &pre[i]), 0);
	usleep(10000); /* a few steps: A's prompts are admitted and being read, far from done */
	struct bn_request rb = { .prompt = short_prompt, .n_prompt = 8, .max_tokens = 1,
				 .flags = BN_REQ_IGNORE_EOS };
	ck_assert_int_eq(bn_submit(b, &rb, &hb), 0);
	ck_assert_int_eq(bn_wait(hb, tu_scaled_ns(60 * SEC)), 0); /* not tu_wait: A works meanwhile */
	uint32_t buf[2];
	for (int i = 0; i < 2; i++)
		ck_assert_msg(bn_read_tokens(pre[i], 0, buf, 2) == 0,
			      "session A's long prompt %d finished before session B's short one", i);
	struct bn_result res;
	ck_assert_int_eq(bn_result(hb, &res), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_LENGTH);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(tu_wait(pre[i], 60 * SEC), 0);
	for (int i = 0; i < 4; i++)
		bn_cancel(dec[i]);
	bn_disconnect(b);
	bn_disconnect(a);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A session that only reads prompts (max_tokens 1: it never decodes) keeps 8 long prompts in
 * flight; the other session decodes one sequence and then sends a prompt. The prompt flood's
 * session decodes fewer sequences, so its prompts go first every step; the other prompt still
 * finishes while the flood goes on, because the oldest prompt reads a token every step. */
struct prompt_flood {
	const char *socket;
	int stop;      /* atomic: set by the main thread */
	int rc;        /* atomic: polled by the main thread */
	uint32_t done; /* atomic: polled by the main thread */
};

static void *prompt_flood_main(void *arg)
{
	struct prompt_flood *f = arg;
	struct bn_client *c;
	int rc = bn_connect(f->socket, 8, &c);
	if (rc != 0) {
		__atomic_store_n(&f->rc, rc, __ATOMIC_RELAXED);
		return NULL;
	}
	uint32_t p[64];
	for (uint32_t i = 0; i < 64; i++)
		p[i] = 5 + i;
	struct bn_request req = { .prompt = p, .n_prompt = 64, .max_tokens = 1,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h[8];
	for (int i = 0; i < 8 && !rc; i++)
		rc = bn_submit(c, &req, &h[i]);
	/* oldest first, resubmitted in its slot */
	for (uint32_t k = 0; !rc && !__atomic_load_n(&f->stop, __ATOMIC_RELAXED); k++) {
		struct bn_handle **slot = &h[k % 8];
		if ((rc = tu_wait(*slot, 60 * SEC)) != 0)
			break;
		bn_release(*slot);
		__atomic_fetch_add(&f->done, 1, __ATOMIC_RELAXED);
		rc = bn_submit(c, &req, slot);
	}
	__atomic_store_n(&f->rc, rc, __ATOMIC_RELAXED);
	bn_disconnect(c);
	return NULL;
}

static uint32_t flood_done(struct prompt_flood *f)
{
	return __atomic_load_n(&f->done, __ATOMIC_RELAXED);
}

START_TEST(oldest_prompt_progresses_under_prompt_flood)
{
	const char *args[] = { "--max-batch", "16", "--token-budget", "8", "--step-delay-us", "1000",
			       NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_to(&d, 2);
	uint32_t one = 3, prompt[32];
	for (uint32_t i = 0; i < 32; i++)
		prompt[i] = 70 + i;
	struct bn_request rd = { .prompt = &one, .n_prompt = 1, .max_tokens = 1000,
				 .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *dec, *h;
	ck_assert_int_eq(bn_submit(c, &rd, &dec), 0);
	ck_assert_int_eq(wait_for_tokens(dec, 1), 0);
	static struct prompt_flood f;
	memset(&f, 0, sizeof(f));
	f.socket = d.socket_path;
	pthread_t tid;
	ck_assert_int_eq(pthread_create(&tid, NULL, prompt_flood_main, &f), 0);
	while (flood_done(&f) < 8 && !__atomic_load_n(&f.rc, __ATOMIC_RELAXED))
		usleep(1000); /* until the flood is in full swing */
	struct bn_request rp = { .prompt = prompt, .n_prompt = 32, .max_tokens = 1,
				 .flags = BN_REQ_IGNORE_EOS };
	ck_assert_int_eq(bn_submit(c, &rp, &h), 0);
	uint32_t done_before = flood_done(&f);
	int rc = bn_wait(h, tu_scaled_ns(20 * SEC)); /* not tu_wait: the flood's steps go on */
	uint32_t done_meanwhile = flood_done(&f) - done_before;
	__atomic_store_n(&f.stop, 1, __ATOMIC_RELAXED);
	pthread_join(tid, NULL);
	ck_assert_int_eq(f.rc, 0);
	ck_assert_msg(rc == 0, "the prompt did not finish while the prompt flood went on (rc %d)", rc);
	/* Counted in the flood's requests, not in time: ours waits for at most the 8 flood
	 * prompts admitted before it, then reads a token a step for its 32 tokens, in which the
	 * flood reads ~7 x 32 tokens, 3.5 of its 64-token prompts. Oldest-first-by-session alone
	 * let ~100 flood prompts by. */
	ck_assert_msg(done_meanwhile <= 16, "%u flood prompts finished while ours waited",
		      done_meanwhile);
	bn_cancel(dec);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

static pthread_barrier_t weighted_ready;

struct weighted {
	const char *socket;
	uint32_t weight;
	int64_t done_ns[12];
	int rc;
};

static void *weighted_main(void *arg)
{
	struct weighted *w = arg;
	struct bn_client *c;
	w->rc = bn_connect_weighted(w->socket, 12, w->weight, &c);
	/* Both sessions connected before either submits: their queues fill together. */
	pthread_barrier_wait(&weighted_ready);
	if (w->rc)
		return NULL;
	uint32_t p[2] = { 30, 31 };
	struct bn_request req = { .prompt = p, .n_prompt = 2, .max_tokens = 2,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h[12];
	int64_t submitted[12];
	for (int i = 0; i < 12; i++) {
		submitted[i] = tu_now_ns();
		if ((w->rc = bn_submit(c, &req, &h[i])) != 0)
			return NULL;
	}
	for (int i = 0; i < 12; i++) {
		struct bn_result res;
		tu_wait(h[i], 60 * SEC);
		bn_result(h[i], &res);
		/* When the daemon ended it: submission plus the daemon's own duration (waiting in
		 * bn_wait here would order the ends by our reading, not by the daemon). */
		w->done_ns[i] = submitted[i] + (int64_t)res.total_ns;
		bn_release(h[i]);
	}
	bn_disconnect(c);
	return NULL;
}

/* One sequence at a time, 10 ms a step; both sessions queue 12 requests at once. Weight 3
 * against weight 1 admits three of the heavy session's for each of the light one's. */
START_TEST(weights_share_admissions)
{
	const char *args[] = { "--max-batch", "1", "--step-delay-us", "10000", NULL };
	pthread_barrier_init(&weighted_ready, NULL, 2);
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	static struct weighted w[2];
	pthread_t tid[2];
	for (int i = 0; i < 2; i++) {
		w[i] = (struct weighted){ .socket = d.socket_path, .weight = i == 0 ? 3 : 1 };
		ck_assert_int_eq(pthread_create(&tid[i], NULL, weighted_main, &w[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(tid[i], NULL);
	ck_assert_int_eq(w[0].rc, 0);
	ck_assert_int_eq(w[1].rc, 0);
	/* Each session's requests end in order; while the light one has finished k, the heavy one
	 * has finished about 3k. Count the heavy ones done before the light one's 3rd. */
	int heavy_before = 0;
	for (int i = 0; i < 12; i++)
		heavy_before += w[0].done_ns[i] < w[1].done_ns[2];
	ck_assert_msg(heavy_before >= 6 && heavy_before <= 10,
		      "%d heavy requests ended before the light one's third", heavy_before);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

START_TEST(per_session_cap_holds)
{
	const char *args[] = { "--max-running-per-session", "2", "--step-delay-us", "2000", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_to(&d, 10), *watcher = connect_to(&d, 1);
	uint32_t p[2] = { 7, 8 };
	struct bn_request req = { .prompt = p, .n_prompt = 2, .max_tokens = 15,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h[10];
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(bn_submit(c, &req, &h[i]), 0);
	/* Sampled until every request ended, not for a fixed time: a slow machine or a sanitizer
	 * stretches when the first two are admitted, and the cap must hold all along. */
	long long most = 0;
	int ended = 0;
	for (int i = 0, end = tu_scaled(15000); i < end && ended < 10; i++) { /* 30 s, scaled */
		long long running = tu_metric(stats_text(watcher), "bitnetd_running_sequences");
		most = running > most ? running : most;
		ended = 0;
		for (int k = 0; k < 10; k++)
			ended += bn_wait(h[k], 0) == 0;
		usleep(2000);
	}
	ck_assert_int_eq(most, 2);
	for (int i = 0; i < 10; i++) {
		struct bn_result res;
		ck_assert_int_eq(tu_wait(h[i], 30 * SEC), 0);
		ck_assert_int_eq(bn_result(h[i], &res), 0);
		ck_assert_uint_eq(res.status, BN_STATUS_LENGTH);
		bn_release(h[i]);
	}
	bn_disconnect(c);
	bn_disconnect(watcher);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Batch API: every bad item fails alone                                                       */
/* ------------------------------------------------------------------------------------------ */

START_TEST(batch_bad_items_fail_alone)
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, NULL), 0);
	struct bn_client *c = connect_to(&d, 4);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	enum { N = 14 };
	static uint32_t prompts[N][8], outs[N][16];
	static struct bn_sampling_params sp[N];
	struct bn_batch_item items[N];
	int32_t want_error[N];
	memset(sp, 0, sizeof(sp));
	for (uint32_t i = 0; i < N; i++) {
		uint32_t n = tu_prompt(2, i, prompts[i], 8);
		items[i] = (struct bn_batch_item){ .req = { prompts[i], n, 12, BN_REQ_IGNORE_EOS, NULL },
						   .out = outs[i], .out_cap = 16 };
		want_error[i] = 0;
	}
	/* Valid: 0, 1, 13 (greedy), 2 (sampled). The rest each break one thing. */
	items[2].req.sampling = &sp[2];
	sp[2] = (struct bn_sampling_params){ .temperature = 0.5f, .top_k = 3 };
	items[3].req.sampling = &sp[3];
	sp[3].temperature = NAN;
	items[4].req.sampling = &sp[4];
	sp[4].top_p = 1.5f;
	items[5].req.sampling = &sp[5];
	sp[5].min_p = -0.25f;
	items[6].req.sampling = &sp[6];
	sp[6].repetition_penalty = -1.0f;
	items[7].req.sampling = &sp[7];
	sp[7].frequency_penalty = INFINITY;
	items[8].req.sampling = &sp[8];
	sp[8].n_logprobs = 2; /* without BN_REQ_LOGPROBS */
	items[9].req.flags |= 1u << 30; /* unknown flag */
	prompts[10][0] = info.vocab_size; /* token id outside the vocabulary */
	items[11].req.n_prompt = 0;
	items[12].req.sampling = &sp[12];
	sp[12].temperature = -0.5f;
	int32_t errs[N] = { 0, 0, 0, -BN_E_INVALID, -BN_E_INVALID, -BN_E_INVALID, -BN_E_INVALID,
			    -BN_E_INVALID, -BN_E_INVALID, -BN_E_INVALID, -BN_E_TOKEN, -BN_E_EMPTY,
			    -BN_E_INVALID, 0 };
	memcpy(want_error, errs, sizeof(errs));
	struct bn_batch_result br;
	ck_assert_int_eq(bn_generate_batch(c, items, N, &br, tu_scaled_ns(30 * SEC)), 0);
	ck_assert_uint_eq(br.n_ok, 4);
	ck_assert_uint_eq(br.n_failed, N - 4);
	for (uint32_t i = 0; i < N; i++) {
		ck_assert_msg(items[i].error == want_error[i], "item %u: %s, want %s", i,
			      bn_strerror(items[i].error), bn_strerror(want_error[i]));
		if (want_error[i] || i == 2)
			continue;
		uint32_t want[16], status;
		uint32_t n = tu_loopback(prompts[i], items[i].req.n_prompt, 12, BN_REQ_IGNORE_EOS,
					 info.vocab_size, info.eos_id, want, &status);
		ck_assert_uint_eq(items[i].result.n_tokens, n);
		ck_assert_int_eq(memcmp(outs[i], want, n * sizeof(uint32_t)), 0);
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The step budget weighs tokens by their attention                                           */
/* ------------------------------------------------------------------------------------------ */

/* Oracle: the budget cost of tokens pos .. pos + n - 1, summed one by one in doubles. */
static double cost_of(uint32_t a, uint32_t pos, uint32_t n)
{
	double sum = 0;
	for (uint32_t i = 0; i < n; i++)
		sum += a ? (double)a + pos + i : 1.0;
	return sum;
}

START_TEST(chunk_is_the_most_that_fits)
{
	static const uint32_t attn[] = { 0, 1, 7, 100, 2715, 4000000000u };
	static const uint32_t pos[] = { 0, 1, 15, 2047, 100000, 4000000000u };
	static const uint64_t units[] = { 0, 1, 99, 100, 101, 303, 406, 86880, 1ull << 40 };
	for (size_t i = 0; i < sizeof(attn) / sizeof(attn[0]); i++)
		for (size_t j = 0; j < sizeof(pos) / sizeof(pos[0]); j++)
			for (size_t k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
				uint32_t n = bn_sched_chunk_tokens(attn[i], pos[j], 64, units[k]);
				ck_assert_uint_le(n, 64);
				ck_assert(cost_of(attn[i], pos[j], n) <= (double)units[k]);
				if (n < 64) /* one more token would not have fitted */
					ck_assert(cost_of(attn[i], pos[j], n + 1) > (double)units[k]);
			}
	/* Unweighed, a token costs 1; weighed by 100, tokens at 0, 1, 2 cost 100 + 101 + 102. */
	ck_assert_uint_eq(bn_sched_chunk_tokens(0, 5000, 64, 16), 16);
	ck_assert_uint_eq(bn_sched_chunk_tokens(100, 0, 64, 405), 3);
	ck_assert_uint_eq(bn_sched_chunk_tokens(100, 0, 64, 406), 4);
	ck_assert_uint_eq(bn_sched_chunk_tokens(100, 0, 2, 1000), 2);
}
END_TEST

/* The weight the cpu backend reports for the BitNet 2B4T shape (its attention multiply-add
 * costs 8 weight multiply-adds, daemon/backends/cpu.c) matches what the manual page says: a token
 * at position ~1,700 counts as two. */
START_TEST(attention_weight_of_2b4t_shape)
{
	struct bn_model_config c = { .name = "2b4t", .n_embd = 2560, .n_layer = 30, .n_head = 20,
				     .n_head_kv = 5, .head_dim = 128, .n_ff = 6912, .n_vocab = 128256,
				     .n_ctx = 4096 };
	struct bn_model_desc d;
	bn_model_describe(&c, 0, 8.0, &d);
	/* weights: 30 x 2560 x (2 x 2560 + 2 x 640 + 3 x 6912) multiply-adds; attention: 30 x 20
	 * x 128 x 2 per position, x 8 */
	ck_assert_uint_eq(d.attn_positions_per_token, 1696);
	bn_model_describe(&c, 0, 1.0, &d);
	ck_assert_uint_eq(d.attn_positions_per_token, 13568);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("serve");
	TCase *budget = tcase_create("budget");
	tcase_add_test(budget, chunk_is_the_most_that_fits);
	tcase_add_test(budget, attention_weight_of_2b4t_shape);
	suite_add_tcase(s, budget);
	TCase *loop = tcase_create("loopback");
	tcase_set_timeout(loop, 60);
	tcase_add_test(loop, stop_ids_end_at_first_occurrence);
	tcase_add_test(loop, deadline_ends_request);
	tcase_add_test(loop, cancel_and_death_free_kv);
	tcase_add_test(loop, kv_exhaustion_waits_and_loses_nothing);
	tcase_add_test(loop, flooding_session_cannot_starve_another);
	tcase_add_test(loop, prompt_of_idle_session_goes_first);
	tcase_add_test(loop, oldest_prompt_progresses_under_prompt_flood);
	tcase_add_test(loop, per_session_cap_holds);
	tcase_add_test(loop, weights_share_admissions);
	tcase_add_test(loop, batch_bad_items_fail_alone);
	suite_add_tcase(s, loop);
	TCase *cpu = tcase_create("cpu");
	tcase_set_timeout(cpu, 180);
	tcase_add_test(cpu, sixteen_together_equal_alone);
	tcase_add_test(cpu, logprobs_of_greedy_tokens);
	suite_add_tcase(s, cpu);
	const char *models = getenv("BITNET_TEST_MODELS");
	if (models && *models) {
		snprintf(stories_path, sizeof(stories_path), "%s/stories260K.gguf", models);
		TCase *real = tcase_create("test model");
		tcase_set_timeout(real, 180);
		tcase_add_test(real, stories_eight_clients);
		suite_add_tcase(s, real);
	} else {
		printf("SKIP: test-model serving tests (BITNET_TEST_MODELS is not set; .ci/run sets it to ../shared/models)\n");
	}
	return tu_run_suite(s);
}
