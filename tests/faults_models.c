/* SPDX-License-Identifier: MIT */
/*
 * bn-faults' model-swap campaign (tests/faults.c): two models of the tiny shape (the built-in
 * one and one of other weights) under a memory budget that holds one, so loads and evictions
 * go on all the time, while in each round 8 clients run their jobs (4 per model), 2 clients
 * are SIGKILLed at a random moment while they stream (often during a load), and one command
 * unloads a model under its running requests (a 5 ms drain: they are cut). Every request
 * must end with its tokens alone (a prefix, ended BN_E_MODEL_UNLOADED, when the unload caught
 * it running); the daemon's descriptors and KV blocks come back, and it exits 0.
 */
#define _GNU_SOURCE
#include "faults.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SWAP_CLIENTS 8
#define SWAP_JOBS 3 /* per client and round */
#define SWAP_VICTIMS 2

static char swap_dir[] = "/tmp/bn-faults-models-XXXXXX";
static char model_b[256];

/* The daemon of models a (the built-in tiny model) and b, plus extra (NULL-terminated). */
static int start_swap(struct tu_daemon *d, const char *const *extra)
{
	static char spec_a[300], spec_b[300];
	snprintf(spec_a, sizeof(spec_a), "a=%s", tu_default_model());
	snprintf(spec_b, sizeof(spec_b), "b=%s", model_b);
	const char *args[24] = { "--backend", "cpu", "--threads", "1", "--model", spec_a, "--model",
				 spec_b, "--kv-memory", "512K", "--drain-timeout-ms", "5" };
	int n = 12;
	for (int i = 0; extra && extra[i] && n < 23; i++)
		args[n++] = extra[i];
	args[n] = NULL;
	return tu_daemon_start(d, args);
}

/* Each model's jobs alone (its own daemon), and the bytes of the larger one. */
static int swap_alone(struct outcome alone[2][N_JOBS], const struct job *jobs, uint64_t *most)
{
	static const char *const only[2][3] = { { "a", NULL }, { "b", NULL } };
	/* A budget that never binds: the KV shares the swap's budget counts (without one,
	 * --kv-memory is lent between the models and each pool's arena is the whole of it). */
	static const char *const unbound[] = { "--memory", "1024G", NULL };
	for (int m = 0; m < 2; m++) {
		struct tu_daemon d;
		if (start_swap(&d, unbound) < 0)
			return -1;
		struct bn_client *c;
		if (bn_connect_model(d.socket_path, only[m][0], 1, 0, &c) < 0)
			return -1;
		struct bn_model_status st[2];
		int n = bn_models_list(c, st, 2);
		for (int i = 0; i < n; i++)
			*most = st[i].bytes > *most ? st[i].bytes : *most;
		for (uint32_t i = 0; i < N_JOBS; i++)
			run_job(c, &jobs[i], &alone[m][i]);
		bn_disconnect(c);
		tu_daemon_stop(&d, SIGTERM);
	}
	return 0;
}

struct swap_client {
	const char *path;
	int model;
	int first_job;
	const struct job *jobs;
	const struct outcome (*alone)[N_JOBS];
	long attempts, lost, wrong;
};

static void *swap_client_main(void *arg)
{
	struct swap_client *s = arg;
	struct bn_client *c;
	if (bn_connect_model(s->path, s->model ? "b" : "a", 2, 0, &c) < 0) {
		s->attempts += SWAP_JOBS;
		s->lost += SWAP_JOBS;
		return NULL;
	}
	for (int k = 0; k < SWAP_JOBS; k++) {
		int i = (s->first_job + k) % N_JOBS;
		struct outcome o;
		run_job(c, &s->jobs[i], &o);
		const struct outcome *want = &s->alone[s->model][i];
		s->attempts++;
		if (o.rc == -BN_E_MODEL_UNLOADED) /* running when the unload's drain ran out */
			s->wrong += !same_tokens(want, &o.res, o.out, 1);
		else if (o.rc != 0)
			s->lost++;
		else
			s->wrong += !same_tokens(want, &o.res, o.out, 0);
	}
	bn_disconnect(c);
	return NULL;
}

/* A client of `model` killed while it streams, after a random 1-30 ms. */
static void swap_victim(const char *path, int model, const struct job *jobs, unsigned r)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct bn_client *c;
		if (bn_connect_model(path, model ? "b" : "a", 4, 0, &c) < 0)
			_exit(1);
		for (int i = 0;; i++) {
			struct bn_handle *h;
			struct job j = jobs[i % N_JOBS];
			struct bn_request req = request_of(&j);
			if (bn_submit(c, &req, &h) == 0)
				bn_wait(h, 10 * SEC);
		}
	}
	usleep(1000 + r % 30000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void swap_round(const struct tu_daemon *d, const struct job *jobs,
		       const struct outcome alone[2][N_JOBS], int round, struct result *r)
{
	pthread_t t[SWAP_CLIENTS];
	struct swap_client s[SWAP_CLIENTS];
	for (int i = 0; i < SWAP_CLIENTS; i++) {
		s[i] = (struct swap_client){ .path = d->socket_path, .model = i % 2,
					     .first_job = round * 5 + i, .jobs = jobs,
					     .alone = alone };
		pthread_create(&t[i], NULL, swap_client_main, &s[i]);
	}
	for (int v = 0; v < SWAP_VICTIMS; v++)
		swap_victim(d->socket_path, (round + v) % 2, jobs, (unsigned)(round * 7919 + v * 104729));
	struct bn_client *admin;
	if (bn_connect(d->socket_path, 1, &admin) == 0) {
		r->attempts++;
		r->lost += bn_models_unload(admin, round % 2 ? "b" : "a", NULL) != 0;
		bn_disconnect(admin);
	}
	for (int i = 0; i < SWAP_CLIENTS; i++) {
		pthread_join(t[i], NULL);
		r->attempts += s[i].attempts;
		r->lost += s[i].lost;
		r->wrong += s[i].wrong;
	}
}

void campaign_model_swap(struct result *r, const struct job *jobs, int rounds)
{
	static struct outcome alone[2][N_JOBS];
	uint64_t most = 0;
	char cmd[600];
	if (!mkdtemp(swap_dir)) {
		r->skipped = "no temporary directory";
		return;
	}
	snprintf(model_b, sizeof(model_b), "%s/b.gguf", swap_dir);
	snprintf(cmd, sizeof(cmd), "%s write --preset tiny --seed 7 --out %s >/dev/null",
		 getenv("BITNET_MODEL_TOOL") ? getenv("BITNET_MODEL_TOOL") : "build/bitnet-model",
		 model_b);
	if (system(cmd) != 0 || swap_alone(alone, jobs, &most) < 0) {
		r->crashes++;
		tu_remove_dir(swap_dir);
		return;
	}
	char memory[32];
	snprintf(memory, sizeof(memory), "%llu", (unsigned long long)(most + 4096));
	const char *extra[] = { "--memory", memory, NULL };
	struct tu_daemon d;
	if (start_swap(&d, extra) < 0) {
		r->crashes++;
		tu_remove_dir(swap_dir);
		return;
	}
	struct usage u0, u;
	wait_idle(&d, &u0);
	for (int i = 0; i < rounds; i++)
		swap_round(&d, jobs, alone, i, r);
	wait_idle(&d, &u);
	r->leaked_blocks = (long)u.kv_blocks;
	r->leaked_fds = u.fds - u0.fds;
	struct bn_client *c;
	if (bn_connect(d.socket_path, 1, &c) == 0) {
		printf("note: model-swap: %lld loads of a, %lld of b; %lld unloads for room\n",
		       tu_metric_of(c, "bitnetd_model_loads_total{model=\"a\"}"),
		       tu_metric_of(c, "bitnetd_model_loads_total{model=\"b\"}"),
		       tu_metric_of(c, "bitnetd_model_unloads_total{model=\"a\",reason=\"memory\"}") +
			       tu_metric_of(c, "bitnetd_model_unloads_total{model=\"b\",reason=\"memory\"}"));
		bn_disconnect(c);
	}
	stop_daemon(&d, r);
	tu_remove_dir(swap_dir);
}
