/* SPDX-License-Identifier: MIT */
/*
 * Several models in one daemon (shm/PROTOCOL.md §15; daemon/README.md), as clients see them
 * through a real bitnetd: models of different shapes and vocabularies served together give
 * what each gives served alone (the oracle), bit for bit; a memory budget that holds fewer
 * than all swaps them with nothing lost; concurrent first requests load a model once; waiting
 * requests keep their deadlines and cancels; unload drains, then ends what still runs; a
 * reload picks a changed file up and closes the sessions that knew the old one; names and
 * their errors; clients killed while models load and unload; the cuda backend through the
 * host harness with two models on one device.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include "bitnet_client.h"
#include "bitnet_shm.h"

#include "ckassert.h"
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000LL
/* A wait of n seconds, scaled by the suites' one rule (timescale.h: sanitizers, a slow machine). */
#define WAIT_S(n) tu_scaled_ns((n) * SEC)
#define N_MODELS 4  /* tiny, llama3-test, falcon3-test, and the shared stories model */
#define N_REQ 4     /* requests per model in a set */
#define OUT_CAP 24

static char dir[] = "/tmp/bn-models-XXXXXX";
static char paths[N_MODELS][256];
static const char *names[N_MODELS] = { "tiny", "l3", "f3", "stories" };
static int n_models = 3;  /* 4 with $BITNET_TEST_MODELS */

/* ------------------------------------------------------------------------------------------ */
/* Daemons                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A cpu daemon of models [first, first + n) (named), then up to 12 extra arguments. */
static void start(struct tu_daemon *d, int first, int n, const char *const *extra)
{
	static char specs[N_MODELS][300];
	const char *args[48] = { "--backend", "cpu", "--threads", "2", "--grammar-threads", "1" };
	int k = 6;
	for (int i = first; i < first + n; i++) {
		snprintf(specs[i], sizeof(specs[i]), "%s=%s", names[i], paths[i]);
		args[k++] = "--model";
		args[k++] = specs[i];
	}
	for (int i = 0; extra && extra[i]; i++)
		args[k++] = extra[i];
	args[k] = NULL;
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

/* The threads of a process (its /proc tasks). */
static int count_tasks(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *tasks = opendir(path);
	ck_assert_ptr_nonnull(tasks);
	int n = 0;
	for (struct dirent *e; (e = readdir(tasks)) != NULL;)
		n += e->d_name[0] != '.';
	closedir(tasks);
	return n;
}

static struct bn_client *connect_model(const struct tu_daemon *d, const char *model)
{
	struct bn_client *c;
	int rc = bn_connect_model(d->socket_path, model, 8, 0, &c);
	ck_assert_msg(rc == 0, "connect to %s: %s", model ? model : "(default)", bn_strerror(rc));
	return c;
}

static char *stats_of(struct bn_client *c)
{
	static char buf[1 << 20];
	ck_assert_int_gt(bn_daemon_stats(c, buf, sizeof(buf)), 0);
	return buf;
}

static long long model_metric(struct bn_client *c, const char *family, const char *model,
			      const char *more)
{
	char name[256];
	snprintf(name, sizeof(name), "bitnetd_%s{model=\"%s\"%s}", family, model, more ? more : "");
	return tu_metric(stats_of(c), name);
}

/* ------------------------------------------------------------------------------------------ */
/* A set of requests and what came of them                                                     */
/* ------------------------------------------------------------------------------------------ */

struct outcome {
	uint32_t status, n;
	int32_t error;
	uint32_t tokens[OUT_CAP];
	struct bn_logprob lp[OUT_CAP];
};

/* Request r of model m: greedy, seeded sampling, greedy with log-probabilities, and a longer
 * greedy run, over prompts that differ by model and request (ids below every vocabulary). */
static void request_of(int m, int r, uint32_t *prompt, struct bn_sampling_params *sp,
		       struct bn_request *req)
{
	for (int i = 0; i < 6; i++)
		prompt[i] = 1u + (uint32_t)((m * 31 + r * 17 + i * 7) % 250);
	*sp = (struct bn_sampling_params){ 0 };
	*req = (struct bn_request){ .prompt = prompt, .n_prompt = 6, .max_tokens = 12,
				    .flags = BN_REQ_IGNORE_EOS, .sampling = sp };
	if (r == 1) {
		sp->temperature = 0.9f;
		sp->top_k = 40;
		sp->seed = 1234 + (uint64_t)m;
		req->flags |= BN_REQ_SEED;
	} else if (r == 2) {
		sp->n_logprobs = 2;
		req->flags |= BN_REQ_LOGPROBS;
	} else if (r == 3) {
		req->max_tokens = OUT_CAP;
	}
}

static void run_one(struct bn_client *c, int m, int r, struct outcome *o)
{
	uint32_t prompt[6];
	struct bn_sampling_params sp;
	struct bn_request req;
	request_of(m, r, prompt, &sp, &req);
	struct bn_handle *h;
	memset(o, 0, sizeof(*o));
	int rc;
	while ((rc = bn_submit(c, &req, &h)) == -BN_E_AGAIN)
		usleep(1000);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(bn_wait(h, WAIT_S(120)), 0);
	struct bn_result res;
	ck_assert_int_eq(bn_result(h, &res), 0);
	o->status = res.status;
	o->error = res.error;
	o->n = (uint32_t)bn_read_tokens(h, 0, o->tokens, OUT_CAP);
	if (req.flags & BN_REQ_LOGPROBS) {
		struct bn_logprob alt[OUT_CAP * 2];
		ck_assert_int_eq(bn_read_logprobs(h, 0, o->lp, alt, OUT_CAP), (int)o->n);
	}
	bn_release(h);
}

static void check_same(const struct outcome *got, const struct outcome *want, int m, int r)
{
	ck_assert_msg(got->status == want->status && got->error == want->error &&
			      got->n == want->n,
		      "%s request %d: status %u error %d n %u, alone %u %d %u", names[m], r,
		      got->status, got->error, got->n, want->status, want->error, want->n);
	ck_assert_msg(!memcmp(got->tokens, want->tokens, got->n * sizeof(uint32_t)),
		      "%s request %d: tokens differ from the model served alone", names[m], r);
	ck_assert_msg(!memcmp(got->lp, want->lp, got->n * sizeof(struct bn_logprob)),
		      "%s request %d: log-probabilities differ from the model served alone",
		      names[m], r);
}

/* Each model's set served alone: the oracle. */
static struct outcome alone[N_MODELS][N_REQ];

static void serve_alone(void)
{
	for (int m = 0; m < n_models; m++) {
		struct tu_daemon d;
		start(&d, m, 1, NULL);
		struct bn_client *c = connect_model(&d, NULL);
		for (int r = 0; r < N_REQ; r++)
			run_one(c, m, r, &alone[m][r]);
		bn_disconnect(c);
		ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	}
}

/* A client thread: its model's set, `rounds` times over, against the oracle. */
struct client_job {
	const struct tu_daemon *d;
	int model;
	int rounds;
	int failed;
};

static void *client_main(void *arg)
{
	struct client_job *j = arg;
	struct bn_client *c;
	if (bn_connect_model(j->d->socket_path, names[j->model], 8, 0, &c) < 0) {
		j->failed = 1;
		return NULL;
	}
	for (int k = 0; k < j->rounds; k++)
		for (int r = 0; r < N_REQ; r++) {
			struct outcome o;
			run_one(c, j->model, r, &o);
			check_same(&o, &alone[j->model][r], j->model, r);
		}
	bn_disconnect(c);
	return NULL;
}

/* Clients of models [0, models) at once, `per_model` each. */
static void all_at_once(const struct tu_daemon *d, int models, int per_model, int rounds)
{
	pthread_t t[N_MODELS * 4];
	struct client_job jobs[N_MODELS * 4];
	int n = 0;
	for (int m = 0; m < models; m++)
		for (int k = 0; k < per_model; k++, n++) {
			jobs[n] = (struct client_job){ .d = d, .model = m, .rounds = rounds };
			ck_assert_int_eq(pthread_create(&t[n], NULL, client_main, &jobs[n]), 0);
		}
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(!jobs[i].failed, "a client of %s could not connect",
			      names[jobs[i].model]);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* Served together                                                                             */
/* ------------------------------------------------------------------------------------------ */

START_TEST(together_equal_alone)
{
	struct tu_daemon d;
	start(&d, 0, n_models, NULL);
	all_at_once(&d, n_models, 2, TU_SANITIZED ? 1 : 2);
	/* What each session says it is, and the metrics by model. */
	for (int m = 0; m < n_models; m++) {
		struct bn_client *c = connect_model(&d, names[m]);
		char served[64];
		ck_assert_int_eq(bn_model_served_name(c, served, sizeof(served)), 0);
		ck_assert_str_eq(served, names[m]);
		struct bn_vocab *v = tu_file_vocab(paths[m]);
		struct bn_model_info info;
		ck_assert_int_eq(bn_model_info(c, &info), 0);
		ck_assert_uint_eq(info.vocab_size, bn_vocab_n_tokens(v));
		bn_vocab_free(v);
		long long want = (long long)N_REQ * 2 * (TU_SANITIZED ? 1 : 2);
		ck_assert_int_eq(model_metric(c, "model_requests_finished_total", names[m], NULL), want);
		ck_assert_int_eq(model_metric(c, "model_loads_total", names[m], NULL), 1);
		/* the cpu backend's models share one pool: their steps take turns */
		ck_assert_int_eq(model_metric(c, "model_steps_overlapped_total", names[m], NULL), 0);
		bn_disconnect(c);
	}
	struct bn_client *c = connect_model(&d, NULL);
	char served[64];
	ck_assert_int_eq(bn_model_served_name(c, served, sizeof(served)), 0);
	ck_assert_str_eq(served, names[0]); /* no name: the default, the first */
	/* One thread pool for every model's steps: the loop and its one worker, the loader, a
	 * grammar thread per model (--grammar-threads 1), and at most one cache writer still at
	 * work; a pool per model would add a worker per model. */
	int tasks = count_tasks(d.pid);
	ck_assert_msg(tasks >= 3 + n_models && tasks <= 4 + n_models,
		      "the daemon of %d models runs %d threads", n_models, tasks);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* One memory budget                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Each model's bytes under the KV pool these cases fix (--kv-memory, shared equally under a
 * budget: one that never binds, as without one --kv-memory is lent between the models). */
static uint64_t bytes_of[N_MODELS];

static void measure(const char *kv)
{
	struct tu_daemon d;
	const char *extra[] = { "--kv-memory", kv, "--memory", "1024G", NULL };
	start(&d, 0, n_models, extra);
	struct bn_client *c = connect_model(&d, NULL);
	struct bn_model_status st[N_MODELS];
	ck_assert_int_eq(bn_models_list(c, st, N_MODELS), n_models);
	for (int m = 0; m < n_models; m++) {
		ck_assert_str_eq(st[m].name, names[m]);
		ck_assert_uint_gt(st[m].weight_bytes, 0);
		bytes_of[m] = st[m].bytes;
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}

/* How many models are loaded (or loading) now, and that their bytes are within budget. */
static int resident(struct bn_client *c, uint64_t budget)
{
	struct bn_model_status st[N_MODELS];
	int n = bn_models_list(c, st, N_MODELS), k = 0;
	uint64_t bytes = 0;
	for (int i = 0; i < n; i++)
		if (st[i].state == BN_MODEL_STATE_LOADED || st[i].state == BN_MODEL_STATE_LOADING ||
		    st[i].state == BN_MODEL_STATE_UNLOADING) {
			k++;
			bytes += st[i].bytes;
		}
	ck_assert_msg(bytes <= budget, "loaded models hold %llu bytes of a %llu budget",
		      (unsigned long long)bytes, (unsigned long long)budget);
	ck_assert_uint_eq(tu_metric(stats_of(c), "bitnetd_memory_loaded_bytes"), bytes);
	return k;
}

/* A budget that holds the largest model and never two: into memory, the bytes returned. */
static uint64_t budget_of_one(char memory[32])
{
	uint64_t most = 0;
	for (int m = 0; m < n_models; m++)
		most = bytes_of[m] > most ? bytes_of[m] : most;
	snprintf(memory, 32, "%llu", (unsigned long long)(most + 1024));
	return most + 1024;
}

START_TEST(budget_of_one_swaps)
{
	char memory[32];
	uint64_t budget = budget_of_one(memory);
	const char *extra[] = { "--kv-memory", "4M", "--memory", memory, NULL };
	struct tu_daemon d;
	start(&d, 0, n_models, extra);
	struct bn_client *admin = connect_model(&d, NULL);
	/* One model at a time, back and forth: a request for a model evicted meanwhile loads it. */
	for (int k = 0; k < 2; k++)
		for (int m = n_models - 1; m >= 0; m--) {
			struct bn_client *c = connect_model(&d, names[m]);
			struct outcome o;
			run_one(c, m, k, &o);
			check_same(&o, &alone[m][k], m, k);
			ck_assert_int_ge(resident(admin, budget), 1);
			bn_disconnect(c);
		}
	ck_assert_int_ge(model_metric(admin, "model_loads_total", names[0], NULL), 2);
	ck_assert_int_ge(model_metric(admin, "model_unloads_total", names[1], ",reason=\"memory\""), 1);
	/* Every model's clients at once: turns, nothing fails, the same outputs. */
	all_at_once(&d, n_models, 1, 1);
	ck_assert_int_ge(resident(admin, budget), 1);
	bn_disconnect(admin);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Three models (at least) under a budget that holds two: the "done means". */
START_TEST(budget_of_two_serves_three)
{
	uint64_t two = 0, all = 0;
	for (int m = 0; m < n_models; m++) {
		all += bytes_of[m];
		for (int k = m + 1; k < n_models; k++)
			two = bytes_of[m] + bytes_of[k] > two ? bytes_of[m] + bytes_of[k] : two;
	}
	ck_assert_uint_lt(two, all);
	/* The most models the budget can hold at once: the smallest first. */
	uint64_t sorted[N_MODELS], sum = 0;
	memcpy(sorted, bytes_of, sizeof(sorted));
	int fit = 0;
	for (int k = 0; k < n_models; k++) {
		int least = k;
		for (int j = k + 1; j < n_models; j++)
			least = sorted[j] < sorted[least] ? j : least;
		uint64_t t = sorted[k];
		sorted[k] = sorted[least];
		sorted[least] = t;
		if ((sum += sorted[k]) <= two)
			fit++;
	}
	char memory[32];
	snprintf(memory, sizeof(memory), "%llu", (unsigned long long)two);
	const char *extra[] = { "--kv-memory", "4M", "--memory", memory, NULL };
	struct tu_daemon d;
	start(&d, 0, n_models, extra);
	all_at_once(&d, n_models, 2, 1);
	struct bn_client *c = connect_model(&d, NULL);
	ck_assert_int_le(resident(c, two), fit);
	ck_assert_int_lt(fit, n_models);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A model that cannot fit the budget even alone: its requests end with BN_E_MODEL_LOAD and
 * the reason names the bytes; the others are served. */
START_TEST(too_big_for_budget)
{
	char memory[32];
	snprintf(memory, sizeof(memory), "%llu", (unsigned long long)bytes_of[0]);
	const char *extra[] = { "--kv-memory", "4M", "--memory", memory, NULL };
	struct tu_daemon d;
	start(&d, 0, n_models, extra); /* the default fits, l3 does not */
	ck_assert_uint_gt(bytes_of[1], bytes_of[0]);
	struct bn_client *c = connect_model(&d, names[1]);
	struct outcome o;
	run_one(c, 1, 0, &o);
	ck_assert_uint_eq(o.status, BN_STATUS_ERROR);
	ck_assert_int_eq(o.error, -BN_E_MODEL_LOAD);
	ck_assert_uint_eq(o.n, 0);
	struct bn_model_status st[N_MODELS];
	ck_assert_int_eq(bn_models_list(c, st, N_MODELS), n_models);
	ck_assert_uint_eq(st[1].state, BN_MODEL_STATE_FAILED);
	ck_assert_msg(strstr(st[1].error, "bytes") && strstr(st[1].error, "--memory"), "%s",
		      st[1].error);
	bn_disconnect(c);
	c = connect_model(&d, names[0]);
	run_one(c, 0, 0, &o);
	ck_assert_uint_eq(o.status, BN_STATUS_LENGTH);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* One KV budget lent between the models                                                       */
/* ------------------------------------------------------------------------------------------ */

/* The requests of kv_lent_to_the_busy_one, in KV blocks of 16 positions out of a --kv-memory
 * of 16 blocks shared by a and b (the tiny model twice, so their blocks weigh the same): the
 * fair share of each is 8. */
enum { LEND_A, LEND_B, LEND_X, LEND_C, LEND_N };
static const uint32_t lend_prompt[LEND_N] = { 80, 6, 100, 6 };   /* blocks: A 6, B 10, */
static const uint32_t lend_max[LEND_N] = { 16, 154, 20, 90 };    /* X 8, C 6 */

static struct bn_handle *lend_submit(struct bn_client *c, int k)
{
	static uint32_t prompt[LEND_N][128];
	static const struct bn_sampling_params greedy;
	for (uint32_t i = 0; i < lend_prompt[k]; i++)
		prompt[k][i] = 3u + (uint32_t)((k * 53 + i * 11) % 200);
	struct bn_request req = { .prompt = prompt[k], .n_prompt = lend_prompt[k],
				  .max_tokens = lend_max[k], .flags = BN_REQ_IGNORE_EOS,
				  .sampling = &greedy };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	return h;
}

struct lend_outcome {
	uint32_t status, n;
	int32_t error;
	uint32_t tokens[160];
};

/* The end of h: its status and tokens into o. */
static void lend_collect(struct bn_handle *h, struct lend_outcome *o)
{
	memset(o, 0, sizeof(*o));
	ck_assert_int_eq(bn_wait(h, WAIT_S(120)), 0);
	struct bn_result res;
	ck_assert_int_eq(bn_result(h, &res), 0);
	o->status = res.status;
	o->error = res.error;
	o->n = (uint32_t)bn_read_tokens(h, 0, o->tokens, 160);
	bn_release(h);
}

static void lend_check(const struct lend_outcome *got, const struct lend_outcome *want, int k)
{
	ck_assert_msg(got->status == want->status && got->error == want->error &&
			      got->n == want->n && !memcmp(got->tokens, want->tokens, got->n * 4),
		      "request %c: status %u error %d n %u, alone %u %d %u (or other tokens)",
		      "ABXC"[k], got->status, got->error, got->n, want->status, want->error,
		      want->n);
}

/* The harness's mapping granule for the cuda variants (BN_CUDA_HOST_VMM_GRANULARITY, unless
 * set already: a GPU's own, 2 MiB on an H100, when BITNETD_CUDA_HOST is a real cuda daemon).
 * tiny's block (16 positions of its 2 layers' keys and values: 4 arrays of 8 KiB) then maps
 * in groups of 2, and an elastic arena may hold one such group past its blocks. */
#define LEND_CUDA_GRANULE "16384"
#define TINY_KV_ARRAYS 4

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* Bytes an elastic arena of tiny's blocks may hold past them: one group of granules in each
 * array (backend.h bn_model_kv_slack). */
static uint64_t tiny_kv_slack(uint64_t block_bytes)
{
	uint64_t granule = strtoull(getenv("BN_CUDA_HOST_VMM_GRANULARITY"), NULL, 10);
	uint64_t row = block_bytes / TINY_KV_ARRAYS;
	return granule / gcd64(granule, row) * row * TINY_KV_ARRAYS;
}

/* Starts d with extra (NULL-terminated), on the harness's cuda backend when `cuda`. */
static void start_backend(struct tu_daemon *d, int cuda, const char *const *args)
{
	const char *plain = getenv("BITNETD");
	char keep[512];
	snprintf(keep, sizeof(keep), "%s", plain ? plain : "build/bitnetd");
	if (cuda) {
		setenv("BITNETD", getenv("BITNETD_CUDA_HOST"), 1);
		setenv("BN_CUDA_HOST_VMM_GRANULARITY", LEND_CUDA_GRANULE, 0);
	}
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
	setenv("BITNETD", keep, 1);
}

/* --kv-memory of several models: each pool may borrow the whole budget while the others
 * idle, and lent blocks come back as sequences end (the fair share under load is
 * test_kvpool's ledger case and kv_share_fair_under_load). On the cpu (_i 0, 1): without
 * --memory (_i 0) the ledger is --kv-memory; under a --memory that holds both models'
 * weights and shares and little more (_i 1), it is the loaded models' shares (8 blocks each)
 * and the budget counts them: the loaded bytes stay within it while a borrows. On the cuda
 * backend (the host harness, _i 2 and 3, the same two), the device's memory is always a
 * budget and each pool's arena is elastic (cuda_kv.h: memory mapped under the blocks in use,
 * given back as the ledger asks), counted with one partly used group of mapping granules
 * besides its share. Every output equals the same request served alone on that backend. */
START_TEST(kv_lent_to_the_busy_one)
{
	int cuda = _i >= 2, under_memory = _i % 2;
	const char *host = getenv("BITNETD_CUDA_HOST");
	if (cuda && (!host || access(host, X_OK) != 0)) {
		printf("SKIP kv_lent_to_the_busy_one on cuda: no $BITNETD_CUDA_HOST\n");
		return;
	}
	if (cuda && TU_SANITIZED) { /* the harness's own suites run the cuda backend under them */
		printf("SKIP kv_lent_to_the_busy_one on cuda under a sanitizer: the harness takes minutes there\n");
		return;
	}
	const char *backend = cuda ? "cuda" : "cpu";
	/* The oracle, and the bytes of one block: tiny alone. */
	struct tu_daemon d;
	char spec_alone[300];
	snprintf(spec_alone, sizeof(spec_alone), "%s=%s", names[0], paths[0]);
	const char *alone_args[] = { "--backend", backend, "--threads", "2", "--grammar-threads", "1",
				"--model", spec_alone, "--kv-memory", "4M", NULL };
	start_backend(&d, cuda, alone_args);
	struct bn_client *c = connect_model(&d, NULL);
	struct lend_outcome want[LEND_N];
	for (int k = 0; k < LEND_N; k++)
		lend_collect(lend_submit(c, k), &want[k]);
	struct bn_model_status st[2];
	ck_assert_int_eq(bn_models_list(c, st, 1), 1);
	long long blocks = model_metric(c, "model_kv_blocks_total", names[0], NULL);
	ck_assert_int_gt(blocks, 0);
	uint64_t block_bytes = (st[0].bytes - st[0].weight_bytes) / (uint64_t)blocks;
	uint64_t weights = st[0].weight_bytes;
	uint64_t slack = cuda ? tiny_kv_slack(block_bytes) : 0;
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	for (int k = 0; k < LEND_N; k++)
		ck_assert_uint_eq(want[k].status, BN_STATUS_LENGTH);

	char kv[32], memory[32], spec_a[300], spec_b[300];
	/* two shares of 8 and what each arena may hold past them, 4 blocks spare */
	uint64_t budget = 2 * weights + 2 * slack + 20 * block_bytes;
	snprintf(kv, sizeof(kv), "%llu", (unsigned long long)(16 * block_bytes));
	snprintf(memory, sizeof(memory), "%llu", (unsigned long long)budget);
	snprintf(spec_a, sizeof(spec_a), "a=%s", paths[0]);
	snprintf(spec_b, sizeof(spec_b), "b=%s", paths[0]);
	const char *args[] = { "--backend", backend, "--threads", "2", "--grammar-threads", "1",
			       "--model", spec_a, "--model", spec_b, "--kv-memory", kv,
			       under_memory ? "--memory" : NULL, memory, NULL };
	start_backend(&d, cuda, args);
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b");
	struct lend_outcome o;
	lend_collect(lend_submit(b, LEND_C), &o); /* b loaded, then idle */
	lend_check(&o, &want[LEND_C], LEND_C);
	ck_assert_int_eq(model_metric(a, "model_kv_blocks_total", "b", NULL), 16);
	if (under_memory) { /* each model counted at its weights and its share of 8 blocks */
		ck_assert_int_eq(bn_models_list(a, st, 2), 2);
		ck_assert_uint_eq(st[1].kv_bytes, 8 * block_bytes + slack);
		ck_assert_uint_le(tu_metric(stats_of(a), "bitnetd_memory_loaded_bytes"), budget);
	}
	/* Lent: B's 10 blocks are past a's share of 8, but b idles. */
	struct bn_handle *hb = lend_submit(a, LEND_B);
	ck_assert_int_eq(bn_wait_tokens(hb, 0, WAIT_S(60)), 0);
	if (under_memory) /* a holds 10 blocks; what it borrowed is b's, counted in b's share */
		ck_assert_uint_le(tu_metric(stats_of(a), "bitnetd_memory_loaded_bytes"), budget);
	lend_collect(hb, &o);
	lend_check(&o, &want[LEND_B], LEND_B);

	/* Under load: a holds all 16 (A and B) and X waits for b's 8, C behind them; which of
	 * them runs when depends on the machine's speed (test_kvpool's ledger case fixes the
	 * order): none is lost and each gives what it gives alone. */
	struct bn_handle *h[LEND_N];
	h[LEND_A] = lend_submit(a, LEND_A);
	h[LEND_B] = lend_submit(a, LEND_B);
	ck_assert_int_eq(bn_wait_tokens(h[LEND_B], 0, WAIT_S(60)), 0); /* both admitted */
	h[LEND_X] = lend_submit(b, LEND_X);
	h[LEND_C] = lend_submit(a, LEND_C);
	for (int k = 0; k < LEND_N; k++) {
		lend_collect(h[k], &o);
		lend_check(&o, &want[k], k);
	}
	ck_assert_int_eq(model_metric(a, "model_kv_blocks_used", "a", NULL), 0);
	if (under_memory)
		ck_assert_uint_le(tu_metric(stats_of(a), "bitnetd_memory_loaded_bytes"), budget);
	bn_disconnect(a);
	bn_disconnect(b);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Loads                                                                                       */
/* ------------------------------------------------------------------------------------------ */

struct first_job {
	const struct tu_daemon *d;
	pthread_barrier_t *go;
	struct outcome o;
};

static void *first_main(void *arg)
{
	struct first_job *j = arg;
	struct bn_client *c;
	ck_assert_int_eq(bn_connect_model(j->d->socket_path, names[1], 2, 0, &c), 0);
	pthread_barrier_wait(j->go);
	run_one(c, 1, 3, &j->o);
	bn_disconnect(c);
	return NULL;
}

START_TEST(first_requests_load_once)
{
	struct tu_daemon d;
	start(&d, 0, 2, NULL);
	enum { N = 6 };
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, N);
	pthread_t t[N];
	struct first_job jobs[N];
	for (int i = 0; i < N; i++) {
		jobs[i] = (struct first_job){ .d = &d, .go = &go };
		ck_assert_int_eq(pthread_create(&t[i], NULL, first_main, &jobs[i]), 0);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		check_same(&jobs[i].o, &alone[1][3], 1, 3);
	}
	pthread_barrier_destroy(&go);
	struct bn_client *c = connect_model(&d, NULL);
	ck_assert_int_eq(model_metric(c, "model_loads_total", names[1], NULL), 1);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Lifecycle, with loopback models (slow steps make the timing certain)                        */
/* ------------------------------------------------------------------------------------------ */

#define LOOPBACK_VOCAB 32000
#define LOOPBACK_EOS 2

/* Two loopback models, a (the default) and b; with a budget, each one's KV pool (3 MiB)
 * fits it, both do not. Another user may connect (names_and_refusals). */
static void start_loopback(struct tu_daemon *d, const char *memory)
{
	const char *args[] = { "--model", "a=/dev/null", "--model", "b=/dev/null",
			       "--step-delay-us", "2000", "--max-batch", "1",
			       "--drain-timeout-ms", "300", "--socket-mode", "0666",
			       "--kv-memory", "6M", memory ? "--memory" : NULL, memory, NULL };
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

static struct bn_handle *submit_long(struct bn_client *c, const uint32_t *prompt, uint32_t n,
				     uint32_t max_tokens, uint32_t deadline_ms)
{
	static struct bn_sampling_params sp;
	sp = (struct bn_sampling_params){ .deadline_ms = deadline_ms };
	struct bn_request req = { .prompt = prompt, .n_prompt = n, .max_tokens = max_tokens,
				  .flags = BN_REQ_IGNORE_EOS, .sampling = &sp };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &req, &h), 0);
	return h;
}

static void check_loopback(struct bn_handle *h, const uint32_t *prompt, uint32_t n)
{
	uint32_t got[2048], want[2048], status;
	int k = bn_read_tokens(h, 0, got, 2048);
	tu_loopback(prompt, n, (uint32_t)k, BN_REQ_IGNORE_EOS, LOOPBACK_VOCAB, LOOPBACK_EOS, want,
		    &status);
	ck_assert_msg(!memcmp(got, want, (size_t)k * 4), "tokens are not the loopback's");
}

/* The end of a two-model case: its two requests and clients, then the daemon. */
static void close_two(struct tu_daemon *d, struct bn_client *a, struct bn_client *b,
		      struct bn_handle *ha, struct bn_handle *hb)
{
	bn_release(ha);
	bn_release(hb);
	bn_disconnect(a);
	bn_disconnect(b);
	ck_assert_int_eq(tu_daemon_stop(d, SIGTERM), 0);
}

/* The waiting request of a model that waits for room keeps its deadline; once the running
 * model's request ends, the other's turn comes and its requests run, equal to the oracle. */
START_TEST(waiting_for_room)
{
	struct tu_daemon d;
	start_loopback(&d, "4M");
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b");
	uint32_t pa[3] = { 5, 6, 7 }, pb[3] = { 8, 9, 10 };
	struct bn_handle *ha = submit_long(a, pa, 3, 300, 0); /* about 0.6 s */
	usleep(100000);
	struct bn_handle *hb = submit_long(b, pb, 3, 8, 100);
	struct bn_result r;
	ck_assert_int_eq(bn_wait(hb, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(hb, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_DEADLINE); /* waited for a's turn: not loaded */
	ck_assert_uint_eq(r.n_tokens, 0);
	bn_release(hb);
	hb = submit_long(b, pb, 3, 8, 0);
	ck_assert_int_eq(bn_wait(hb, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(hb, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	check_loopback(hb, pb, 3);
	ck_assert_int_eq(bn_wait(ha, WAIT_S(10)), 0); /* a ended first: nothing was cut */
	ck_assert_int_eq(bn_result(ha, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	ck_assert_uint_eq(r.n_tokens, 300);
	check_loopback(ha, pa, 3);
	close_two(&d, a, b, ha, hb);
}
END_TEST

/* The fair share of a lent KV budget under load, with loopback models (1 ms steps): a and b
 * share --kv-memory of 16 blocks of 32 positions (8 each), without --memory (_i 0) or under
 * one where the ledger is their two shares (_i 1). a holds all 16 (A 6, B 10); X (b, 8)
 * waits; A's end frees 6, which C (a, 6) must not take while b waits below its share: C's
 * first token comes only once B has ended and given its blocks back. Without the rule C
 * would start at A's end, 0.4 s before B's. Every output is the loopback's. ~1.5 s each
 * (plain and ASan: the steps' busy time). */
START_TEST(kv_share_fair_under_load)
{
	const char *args[] = { "--model", "a=/dev/null", "--model", "b=/dev/null",
			       "--step-delay-us", "1000", "--kv-block-tokens", "32",
			       "--kv-memory", "512K", _i ? "--memory" : NULL, "1M", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b");
	static uint32_t prompt[4][100];
	static const uint32_t n[4] = { 80, 6, 100, 6 }, max[4] = { 100, 310, 150, 170 };
	for (int k = 0; k < 4; k++)
		for (uint32_t i = 0; i < n[k]; i++)
			prompt[k][i] = 3u + (uint32_t)(k * 1000 + i);
	struct bn_handle *h = submit_long(b, prompt[3], 2, 1, 0); /* loads b */
	ck_assert_int_eq(bn_wait(h, WAIT_S(10)), 0);
	bn_release(h);
	struct bn_handle *hs[4];
	int64_t sent[4];
	for (int k = 0; k < 4; k++) {
		if (k == 2) { /* A and B both run; X then waits in b's queue */
			ck_assert_int_eq(bn_wait_tokens(hs[1], 0, WAIT_S(10)), 0);
		} else if (k == 3) {
			while (model_metric(a, "model_queue_depth", "b", NULL) != 1)
				usleep(1000);
			usleep(20000); /* b stepped: it asks for its share */
		}
		sent[k] = tu_now_ns();
		hs[k] = submit_long(k == 2 ? b : a, prompt[k], n[k], max[k], 0);
	}
	struct bn_result r[4];
	for (int k = 0; k < 4; k++) {
		ck_assert_int_eq(bn_wait(hs[k], WAIT_S(20)), 0);
		ck_assert_int_eq(bn_result(hs[k], &r[k]), 0);
		ck_assert_uint_eq(r[k].status, BN_STATUS_LENGTH);
		ck_assert_uint_eq(r[k].n_tokens, max[k]);
		check_loopback(hs[k], prompt[k], n[k]);
		bn_release(hs[k]);
	}
	int64_t b_end = sent[1] + (int64_t)r[1].total_ns;
	int64_t c_first = sent[3] + (int64_t)r[3].first_token_ns;
	ck_assert_msg(c_first >= b_end - 100000000,
		      "C started %.0f ms before B ended: it took the blocks b waited for",
		      (b_end - c_first) / 1e6);
	bn_disconnect(a);
	bn_disconnect(b);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A load that needs room while KV is lent waits for the borrower's requests to end; it
 * evicts the idle lender but asks the busy borrower for nothing, and nothing fails. Loopback
 * models a, b and c (1 ms steps, 32-position blocks of 32 KiB) with shares of 16 blocks
 * (--kv-memory 1536K over three) under a --memory of 1200K, which holds two shares, not
 * three. a (loaded at start) runs A, 23 blocks: 7 borrowed from b, loaded and idle. A
 * request for c then evicts b, whose 7 blocks a still holds (the overflow): c loads only once
 * A has ended, and the loaded bytes stay within the budget all along. ~1.5 s. */
START_TEST(lent_kv_comes_back_before_a_load)
{
	const char *args[] = { "--model", "a=/dev/null", "--model", "b=/dev/null",
			       "--model", "c=/dev/null", "--step-delay-us", "1000",
			       "--kv-block-tokens", "32", "--kv-memory", "1536K",
			       "--memory", "1200K", NULL };
	const uint64_t budget = 1200 * 1024;
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b"),
			 *c = connect_model(&d, "c");
	static const uint32_t pa[6] = { 11, 12, 13, 14, 15, 16 }, pb[2] = { 21, 22 },
			      pc[3] = { 31, 32, 33 };
	struct bn_result r;
	struct bn_handle *h = submit_long(b, pb, 2, 4, 0); /* loads b; then it idles */
	ck_assert_int_eq(bn_wait(h, WAIT_S(10)), 0);
	bn_release(h);
	struct bn_handle *ha = submit_long(a, pa, 6, 730, 0); /* 736 positions: 23 blocks */
	ck_assert_int_eq(bn_wait_tokens(ha, 0, WAIT_S(10)), 0);
	int64_t sent = tu_now_ns();
	struct bn_handle *hc = submit_long(c, pc, 3, 8, 0);
	int rc;
	while ((rc = bn_wait(ha, 5000000)) == -BN_E_TIMEOUT) /* the bytes every 5 ms until A ends */
		ck_assert_uint_le(tu_metric(stats_of(a), "bitnetd_memory_loaded_bytes"), budget);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(bn_result(ha, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	ck_assert_uint_eq(r.n_tokens, 730);
	check_loopback(ha, pa, 6);
	int64_t a_end = tu_now_ns();
	ck_assert_int_eq(bn_wait(hc, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(hc, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	check_loopback(hc, pc, 3);
	int64_t c_first = sent + (int64_t)r.first_token_ns;
	ck_assert_msg(c_first >= a_end - 150000000,
		      "c's first token came %.0f ms before A ended: its load took the KV a borrowed",
		      (a_end - c_first) / 1e6);
	ck_assert_int_eq(model_metric(a, "model_unloads_total", "b", ",reason=\"memory\""), 1);
	ck_assert_int_eq(model_metric(a, "model_unloads_total", "a", ",reason=\"memory\""), 0);
	ck_assert_uint_le(tu_metric(stats_of(a), "bitnetd_memory_loaded_bytes"), budget);
	bn_release(ha);
	bn_release(hc);
	bn_disconnect(a);
	bn_disconnect(b);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A request that needs more KV than any set of models loadable at once lends its model is
 * refused at once (BN_E_KV_SPACE), not left waiting for a cap that can never come: a, b, c as
 * above, each a 16-block share (512 KiB), under a --memory that holds two shares, so a may
 * borrow one other share (32 blocks) and never two. Before, a's arena was what the budget
 * left beside its weights (37 blocks), and a 34-block request waited for its deadline. One of
 * 32 blocks, with b loaded and idle, runs (its output the loopback's). ~1 s. */
START_TEST(kv_past_every_loadable_set_is_refused)
{
	const char *args[] = { "--model", "a=/dev/null", "--model", "b=/dev/null",
			       "--model", "c=/dev/null", "--step-delay-us", "1000",
			       "--kv-block-tokens", "32", "--kv-memory", "1536K",
			       "--memory", "1200K", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b");
	static uint32_t prompt[8] = { 41, 42, 43, 44, 45, 46, 47, 48 };
	struct bn_result r;
	struct bn_handle *h = submit_long(a, prompt, 8, 1080, 5000); /* 1,088 positions: 34 blocks */
	ck_assert_int_eq(bn_wait(h, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(h, &r), 0);
	ck_assert_msg(r.status == BN_STATUS_ERROR && r.error == -BN_E_KV_SPACE,
		      "status %u error %d after %.0f ms", r.status, r.error, r.total_ns / 1e6);
	ck_assert_uint_lt(r.total_ns, 1000000000ull); /* at once, not at its deadline */
	bn_release(h);
	h = submit_long(b, prompt, 2, 4, 0); /* loads b; then it idles */
	ck_assert_int_eq(bn_wait(h, WAIT_S(10)), 0);
	bn_release(h);
	h = submit_long(a, prompt, 8, 1016, 0); /* 1,024 positions: 32 blocks, 16 of them b's */
	ck_assert_int_eq(bn_wait(h, WAIT_S(20)), 0);
	ck_assert_int_eq(bn_result(h, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	ck_assert_uint_eq(r.n_tokens, 1016);
	check_loopback(h, prompt, 8);
	bn_release(h);
	bn_disconnect(a);
	bn_disconnect(b);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Two models whose backend lets steps overlap (the loopback stands in for cuda): with both
 * busy, their steps run at once, one of them on a stepper thread (one more thread in the
 * daemon), and each model's tokens are the loopback's. */
START_TEST(steps_overlap_where_the_backend_allows)
{
	/* not start_loopback: its --max-batch 1 holds across the models, so one runs at a time */
	const char *args[] = { "--model", "a=/dev/null", "--model", "b=/dev/null",
			       "--step-delay-us", "2000", "--kv-memory", "6M", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b");
	uint32_t pa[3] = { 5, 6, 7 }, pb[4] = { 8, 9, 10, 11 };
	struct bn_handle *hb = submit_long(b, pb, 4, 2, 0); /* loads b */
	ck_assert_int_eq(bn_wait(hb, WAIT_S(10)), 0);
	bn_release(hb);
	int threads = count_tasks(d.pid);
	struct bn_handle *ha = submit_long(a, pa, 3, 120, 0);
	hb = submit_long(b, pb, 4, 120, 0);
	ck_assert_int_eq(bn_wait(ha, WAIT_S(20)), 0);
	ck_assert_int_eq(bn_wait(hb, WAIT_S(20)), 0);
	check_loopback(ha, pa, 3);
	check_loopback(hb, pb, 4);
	long long oa = model_metric(a, "model_steps_overlapped_total", "a", NULL),
		  ob = model_metric(a, "model_steps_overlapped_total", "b", NULL),
		  sa = model_metric(a, "model_steps_total", "a", NULL);
	ck_assert_msg(oa > 0 && ob > 0 && oa == ob && oa <= sa,
		      "overlapped steps: a %lld, b %lld, of a's %lld", oa, ob, sa);
	ck_assert_int_eq(count_tasks(d.pid), threads + 1); /* one stepper for two models */
	close_two(&d, a, b, ha, hb);
}
END_TEST

/* --max-running-per-user holds across models: with a cap of 1, a request of this uid for
 * model b waits while its request for model a runs (b already loaded), then runs as the
 * oracle says. */
START_TEST(per_user_cap_across_models)
{
	const char *args[] = { "--model", "a=/dev/null", "--model", "b=/dev/null",
			       "--step-delay-us", "2000", "--max-batch", "2",
			       "--max-running-per-user", "1", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *a = connect_model(&d, "a"), *b = connect_model(&d, "b");
	uint32_t pa[3] = { 5, 6, 7 }, pb[3] = { 8, 9, 10 };
	struct bn_result r;
	struct bn_handle *hb = submit_long(b, pb, 3, 2, 0); /* loads b */
	ck_assert_int_eq(bn_wait(hb, WAIT_S(10)), 0);
	bn_release(hb);
	struct bn_handle *ha = submit_long(a, pa, 3, 150, 0); /* about 0.3 s */
	usleep(50000);
	hb = submit_long(b, pb, 3, 8, 0);
	ck_assert_int_eq(bn_wait(hb, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(hb, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	ck_assert_msg(r.queue_ns >= 100000000ull, "b's request waited %.1f ms beside a's",
		      r.queue_ns / 1e6);
	check_loopback(hb, pb, 3);
	ck_assert_int_eq(bn_wait(ha, 0), 0); /* a's ended before b's began */
	ck_assert_int_eq(bn_result(ha, &r), 0);
	ck_assert_uint_eq(r.n_tokens, 150);
	close_two(&d, a, b, ha, hb);
}
END_TEST

/* UNLOAD drains for the drain timeout, then ends the running request with
 * BN_E_MODEL_UNLOADED (its tokens kept); the request waiting behind it loads the model again. */
START_TEST(unload_drains_then_ends)
{
	struct tu_daemon d;
	start_loopback(&d, NULL);
	struct bn_client *b = connect_model(&d, "b"), *admin = connect_model(&d, NULL);
	uint32_t p1[3] = { 11, 12, 13 }, p2[3] = { 14, 15, 16 };
	struct bn_handle *h1 = submit_long(b, p1, 3, 2000, 0); /* 4 s alone */
	usleep(100000);
	struct bn_handle *h2 = submit_long(b, p2, 3, 5, 0); /* waits: --max-batch 1 */
	int64_t t0 = tu_now_ns();
	struct bn_model_status st;
	ck_assert_int_eq(bn_models_unload(admin, "b", &st), 0);
	int64_t took = tu_now_ns() - t0;
	ck_assert_msg(took >= 250000000LL && took < WAIT_S(3), "unload took %lld ns", (long long)took);
	struct bn_result r;
	ck_assert_int_eq(bn_wait(h1, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(h1, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_ERROR);
	ck_assert_int_eq(r.error, -BN_E_MODEL_UNLOADED);
	ck_assert_uint_gt(r.n_tokens, 0);
	check_loopback(h1, p1, 3);
	ck_assert_int_eq(bn_wait(h2, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_result(h2, &r), 0);
	ck_assert_uint_eq(r.status, BN_STATUS_LENGTH);
	check_loopback(h2, p2, 3);
	ck_assert_int_eq(model_metric(admin, "model_loads_total", "b", NULL), 2);
	ck_assert_int_eq(model_metric(admin, "model_unloads_total", "b", ",reason=\"command\""), 1);
	bn_release(h1);
	bn_release(h2);
	bn_disconnect(b);
	bn_disconnect(admin);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* bitnetd refuses a models file of this text with exit 2, naming models[0] and `key`. */
static void config_refused(const char *conf, const char *text, const char *key)
{
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	const char *bin = getenv("BITNETD") ? getenv("BITNETD") : "build/bitnetd";
	const char *argv[] = { bin, "--models-config", conf, NULL };
	static struct tu_run r;
	ck_assert_int_eq(tu_run(argv, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "models[0]") && strstr(r.err, key), "%s", r.err);
}

/* --models-config's per-model options: a pinned model is loaded at start and stays; one with
 * keep_alive 0 is unloaded once idle (reason idle); a shorter context is what its header
 * says. An option it does not know is a usage error that names it. */
START_TEST(config_file_and_keep_alive)
{
	char conf[300];
	snprintf(conf, sizeof(conf), "%s/models.json", dir);
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fputs("{\"models\": [{\"name\": \"c\", \"path\": \"/dev/null\", \"keep_alive\": \"0\", "
	      "\"context\": 512},\n {\"name\": \"p\", \"path\": \"/dev/null\", \"pinned\": true, "
	      "\"keep_alive\": 0}]}\n", f);
	fclose(f);
	const char *args[] = { "--model", "a=/dev/null", "--models-config", conf, NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_model(&d, "c"), *p = connect_model(&d, "p");
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	ck_assert_uint_eq(info.context_length, 512);
	struct bn_model_status st[3];
	ck_assert_int_eq(bn_models_list(c, st, 3), 3);
	ck_assert_uint_eq(st[1].state, BN_MODEL_STATE_UNLOADED);
	ck_assert_uint_eq(st[2].state, BN_MODEL_STATE_LOADED); /* pinned: loaded at start */
	ck_assert_uint_eq(st[2].pinned, 1);
	ck_assert_int_eq(st[1].keep_alive_ms, 0);
	uint32_t prompt[2] = { 5, 6 }, out[4];
	struct bn_request req = { prompt, 2, 4, BN_REQ_IGNORE_EOS, NULL };
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_generate(p, &req, out, 4, NULL, WAIT_S(10)), 0);
	long long idle = 0;
	for (int i = 0; i < 200 && idle < 1; i++) {
		usleep(10000);
		idle = model_metric(c, "model_unloads_total", "c", ",reason=\"idle\"");
	}
	ck_assert_int_eq(idle, 1);
	ck_assert_int_eq(bn_models_list(c, st, 3), 3);
	ck_assert_uint_eq(st[2].state, BN_MODEL_STATE_LOADED);
	ck_assert_int_eq(model_metric(c, "model_unloads_total", "p", ",reason=\"idle\""), 0);
	bn_disconnect(c);
	bn_disconnect(p);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	config_refused(conf, "{\"models\": [{\"path\": \"/dev/null\", \"keepalive\": 1}]}",
		       "'keepalive'");
}
END_TEST

/* Embeddings per model (PROTOCOL.md §6.14 with §15): --models-config's "pooling" makes that
 * model embed (feature EMBED) as --pooling does a daemon of it alone, bit for bit, and a
 * model without it not (1016 UNSUPPORTED) while it generates what it gives alone. A pooling it
 * does not know is a usage error naming it. */
#define EMBED_CAP 4096

static void embed_of(struct bn_client *c, float *vector, struct bn_embed_item *it)
{
	static const uint32_t ids[7] = { 1, 7, 19, 3, 88, 42, 5 };
	*it = (struct bn_embed_item){ .ids = ids, .n_ids = 7, .vector = vector, .cap = EMBED_CAP };
	(void)bn_embed(c, it, WAIT_S(30));
}

START_TEST(embeddings_per_model)
{
	static float alone_vec[2][EMBED_CAP], got[EMBED_CAP];
	struct bn_embed_item want[2], it;
	const char *poolings[2][3] = { { "--pooling", "mean", NULL }, { "--pooling", "last", NULL } };
	for (int k = 0; k < 2; k++) { /* the oracle: tiny, then falcon3-test, alone */
		struct tu_daemon d;
		start(&d, 2 * k, 1, poolings[k]);
		struct bn_client *c = connect_model(&d, NULL);
		embed_of(c, alone_vec[k], &want[k]);
		ck_assert_int_eq(want[k].error, 0);
		ck_assert_uint_le(want[k].dim, EMBED_CAP);
		bn_disconnect(c);
		ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	}
	char conf[300];
	snprintf(conf, sizeof(conf), "%s/embed.json", dir);
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"models\": [{\"name\": \"tiny\", \"path\": \"%s\", \"pooling\": \"mean\"}, "
		   "{\"name\": \"l3\", \"path\": \"%s\"}, {\"name\": \"f3\", \"path\": \"%s\", "
		   "\"pooling\": \"last\"}]}\n", paths[0], paths[1], paths[2]);
	fclose(f);
	const char *extra[] = { "--models-config", conf, NULL };
	struct tu_daemon d;
	start(&d, 0, 0, extra);
	for (int k = 0; k < 2; k++) {
		struct bn_client *c = connect_model(&d, names[2 * k]);
		ck_assert(bn_model_features(c) & BN_FEAT_EMBED);
		embed_of(c, got, &it);
		ck_assert_int_eq(it.error, 0);
		ck_assert_uint_eq(it.pooling, k ? BN_POOLING_LAST : BN_POOLING_MEAN);
		ck_assert_uint_eq(it.dim, want[k].dim);
		ck_assert_msg(!memcmp(got, alone_vec[k], it.dim * sizeof(float)),
			      "%s: the vector differs from the model's alone", names[2 * k]);
		bn_disconnect(c);
	}
	struct bn_client *l3 = connect_model(&d, "l3");
	ck_assert(!(bn_model_features(l3) & BN_FEAT_EMBED));
	embed_of(l3, got, &it);
	ck_assert_int_eq(it.error, -BN_E_UNSUPPORTED);
	for (int r = 0; r < N_REQ; r++) {
		struct outcome o;
		run_one(l3, 1, r, &o);
		check_same(&o, &alone[1][r], 1, r);
	}
	bn_disconnect(l3);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	char text[400];
	snprintf(text, sizeof(text), "{\"models\": [{\"path\": \"%s\", \"pooling\": \"max\"}]}",
		 paths[0]);
	config_refused(conf, text, "'pooling'");
}
END_TEST

/* Compiles grammars in c (regexes from `first` on), holding each, until one is refused or
 * cap are held. Returns how many are held; *rc and err (512 bytes) say how the last went,
 * re (64 bytes) is its text. */
static uint32_t hold_until_refused(struct bn_client *c, struct bn_grammar_handle **held,
				   uint32_t cap, uint32_t first, char *re, char *err, int *rc)
{
	uint32_t n = 0;
	*rc = 0;
	for (; n < cap && *rc == 0; n++) {
		snprintf(re, 64, "[a-z]{1,%u}(x|y{2,%u})", first + n, 3 + n);
		struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_REGEX, .text = re,
						.len = strlen(re) };
		*rc = bn_grammar_load(c, &spec, &held[n], err, 512, WAIT_S(60));
	}
	return *rc == 0 ? n : n - 1;
}

/* --grammar-memory bounds the grammars of every model together: each model's are limited to
 * its share (here 512 KiB over two models), and one model holding all its share leaves the
 * other's whole. */
START_TEST(grammar_memory_shared_by_models)
{
	const char *extra[] = { "--grammar-memory", "512K", "--grammar-cache", "1K", NULL };
	struct tu_daemon d;
	start(&d, 1, 2, extra);
	struct bn_client *l3 = connect_model(&d, "l3"), *f3 = connect_model(&d, "f3");
	struct bn_grammar_handle *held[256];
	char re[64], err[512] = "";
	int rc;
	uint32_t n = hold_until_refused(l3, held, 256, 30, re, err, &rc);
	ck_assert_msg(rc == -BN_E_GRAMMAR_LIMIT && n >= 1 &&
			      strstr(err, "over its grammar memory limit of 262144"),
		      "%u grammars, then %s: %s", n, bn_strerror(rc), err);
	struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_REGEX, .text = re, .len = strlen(re) };
	struct bn_grammar_handle *g;
	rc = bn_grammar_load(f3, &spec, &g, err, sizeof(err), WAIT_S(60));
	ck_assert_msg(rc == 0, "f3 beside l3's full share: %s: %s", bn_strerror(rc), err);
	bn_grammar_release(g);
	for (uint32_t i = 0; i < n; i++)
		bn_grammar_release(held[i]);
	bn_disconnect(l3);
	bn_disconnect(f3);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Grammars count inside --memory: a budget that holds l3 and f3 with 64 KiB to spare serves
 * both while no grammar is held. Grammars l3's cache only keeps for a next time go before
 * a model does (f3 loads, l3 stays). With both loaded, a compile past the 64 KiB is refused
 * with the bytes named (no model is unloaded for a grammar), and goes through for f3 once the
 * grammars l3's session held are only kept by l3's cache (they go first, whichever model
 * compiles: the budget drops the least recently used over every model). With l3's session
 * holding more than the spare bytes in grammars compiled while f3 was unloaded, f3's load
 * unloads the idle l3 for room (reason memory). f3 answers as alone. */
static void hold_grammars(struct bn_client *c, struct bn_grammar_handle **held, uint32_t n,
			  uint32_t first)
{
	char re[64], err[512];
	for (uint32_t k = 0; k < n; k++) {
		snprintf(re, sizeof(re), "[a-z]{1,%u}(x|y{2,%u})", first + k, 3 + k);
		struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_REGEX, .text = re,
						.len = strlen(re) };
		int rc = bn_grammar_load(c, &spec, &held[k], err, sizeof(err), WAIT_S(60));
		ck_assert_msg(rc == 0, "%s: %s", bn_strerror(rc), err);
	}
}

/* f3 (unloaded) loads for a request and answers as alone. */
static void load_f3_again(struct bn_client *f3)
{
	struct outcome o;
	run_one(f3, 2, 0, &o);
	check_same(&o, &alone[2][0], 2, 0);
}

START_TEST(grammars_count_inside_memory)
{
	struct tu_daemon d;
	/* the same KV share under the --memory below */
	const char *kv[] = { "--kv-memory", "2M", "--memory", "1024G", NULL };
	start(&d, 1, 2, kv);
	struct bn_client *f3 = connect_model(&d, "f3");
	struct outcome o;
	run_one(f3, 2, 0, &o); /* loads f3 */
	struct bn_model_status st[2];
	ck_assert_int_eq(bn_models_list(f3, st, 2), 2);
	uint64_t both = st[0].bytes + st[1].bytes;
	bn_disconnect(f3);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	char memory[32];
	snprintf(memory, sizeof(memory), "%llu", (unsigned long long)(both + 65536));
	const char *extra[] = { "--kv-memory", "2M", "--memory", memory, "--grammar-memory", "8M",
				"--grammar-cache", "8M", NULL };
	start(&d, 1, 2, extra);
	struct bn_client *l3 = connect_model(&d, "l3");
	f3 = connect_model(&d, "f3");
	run_one(f3, 2, 0, &o); /* both fit */
	struct bn_grammar_handle *held[64];
	ck_assert_int_eq(bn_models_unload(l3, "f3", NULL), 0);
	hold_grammars(l3, held, 16, 30); /* room: f3's bytes */
	for (uint32_t k = 0; k < 16; k++)
		bn_grammar_release(held[k]); /* kept by l3's cache only */
	load_f3_again(f3);
	ck_assert_int_eq(model_metric(l3, "model_unloads_total", "l3", ",reason=\"memory\""), 0);
	/* Both loaded: 64 KiB for grammars. */
	char re[64], err[512] = "";
	int rc;
	uint32_t n = hold_until_refused(l3, held, 64, 100, re, err, &rc);
	ck_assert_msg(rc == -BN_E_GRAMMAR_LIMIT && n >= 1 &&
			      strstr(err, "over the 65536 its memory budget leaves them") &&
			      strstr(err, "--memory"),
		      "%u grammars, then %s: %s", n, bn_strerror(rc), err);
	ck_assert_int_eq(model_metric(l3, "model_unloads_total", "l3", ",reason=\"memory\""), 0);
	ck_assert_int_eq(model_metric(l3, "model_unloads_total", "f3", ",reason=\"memory\""), 0);
	for (uint32_t k = 0; k < n; k++)
		bn_grammar_release(held[k]); /* kept by l3's cache: they go for the next, f3's too */
	/* Those compiled last may still be held by the filling of their token sets ahead of use
	 * (l3's grammar workers): f3's compile makes them let go (bitnetd.8,
	 * --grammar-compile-ms), so it is taken at once, however loaded the machine. */
	struct bn_grammar_spec spec = { .kind = BN_GRAMMAR_KIND_REGEX, .text = re, .len = strlen(re) };
	rc = bn_grammar_load(f3, &spec, &held[0], err, sizeof(err), WAIT_S(60));
	ck_assert_msg(rc == 0, "f3, after l3's held grammars were released: %s: %s",
		      bn_strerror(rc), err);
	bn_grammar_release(held[0]);
	ck_assert_int_eq(bn_models_unload(l3, "f3", NULL), 0);
	hold_grammars(l3, held, 16, 60);
	load_f3_again(f3);
	ck_assert_int_eq(model_metric(l3, "model_unloads_total", "l3", ",reason=\"memory\""), 1);
	for (uint32_t k = 0; k < 16; k++)
		bn_grammar_release(held[k]);
	bn_disconnect(l3);
	bn_disconnect(f3);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Reload                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Writes preset into path through a temporary name: the daemon's mapping keeps the old file. */
static void write_model(const char *preset, const char *path)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s write --preset %s --out %s.new >/dev/null && mv %s.new %s",
		 getenv("BITNET_MODEL_TOOL"), preset, path, path, path);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(reload_picks_a_changed_file_up)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/changing.gguf", dir);
	write_model("tiny", path);
	char spec[320], other[320];
	snprintf(spec, sizeof(spec), "m=%s", path);
	snprintf(other, sizeof(other), "d=%s", paths[0]);
	const char *args[] = { "--backend", "cpu", "--model", other, "--model", spec,
			       "--threads", "2", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_model(&d, "m"), *admin = connect_model(&d, NULL);
	struct bn_model_info info;
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	ck_assert_uint_eq(info.vocab_size, 512);
	uint32_t prompt[3] = { 1, 2, 3 }, out[4];
	struct bn_request req = { prompt, 3, 4, 0, NULL };
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), 0); /* loads m */
	ck_assert_int_eq(bn_models_reload(admin, "m"), 0); /* unchanged: nothing happens */
	ck_assert_int_eq(model_metric(admin, "model_loads_total", "m", NULL), 1);
	write_model("llama3-test", path);
	/* Not picked up silently: the loaded model goes on. */
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), 0);
	ck_assert_int_eq(bn_models_reload(admin, NULL), 0);
	/* Its sessions were closed: the client learns it at its next call. */
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), -BN_E_DISCONNECTED);
	bn_disconnect(c);
	c = connect_model(&d, "m");
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	ck_assert_uint_eq(info.vocab_size, 1024);
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), 0);
	ck_assert_int_eq(model_metric(admin, "model_unloads_total", "m", ",reason=\"reload\""), 1);
	ck_assert_int_eq(model_metric(admin, "model_loads_total", "m", NULL), 2);
	/* Unloaded, its file changed: the next load is refused rather than reading another
	 * model under the sessions that know this one, until a reload. */
	ck_assert_int_eq(bn_models_unload(admin, "m", NULL), 0);
	write_model("tiny", path);
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), -BN_E_MODEL_LOAD);
	struct bn_model_status st[2];
	ck_assert_int_eq(bn_models_list(admin, st, 2), 2);
	ck_assert_uint_eq(st[1].state, BN_MODEL_STATE_FAILED);
	ck_assert_msg(strstr(st[1].error, "changed since the daemon read it"), "%s", st[1].error);
	ck_assert_int_eq(model_metric(admin, "model_loads_total", "m", NULL), 2);
	ck_assert_int_eq(bn_models_reload(admin, "m"), 0);
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), -BN_E_DISCONNECTED);
	bn_disconnect(c);
	c = connect_model(&d, "m");
	ck_assert_int_eq(bn_model_info(c, &info), 0);
	ck_assert_uint_eq(info.vocab_size, 512);
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, WAIT_S(10)), 0);
	bn_disconnect(c);
	bn_disconnect(admin);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* A raw hello with flag MODEL and the given 64-byte record: the welcome's error. */
static int hello_with(const struct tu_daemon *d, const uint8_t record[64])
{
	int fd = tu_dial(d->socket_path);
	ck_assert_int_ge(fd, 0);
	struct bn_hello h = { .magic = BN_HELLO_MAGIC, .abi_version = BN_ABI_VERSION,
			      .flags = BN_HELLO_MODEL };
	uint8_t msg[96];
	memcpy(msg, &h, 32);
	memcpy(msg + 32, record, 64);
	ck_assert_int_eq(write(fd, msg, sizeof(msg)), (int)sizeof(msg));
	int err = tu_welcome_error(fd, 2000);
	close(fd);
	return err;
}

START_TEST(names_and_refusals)
{
	struct tu_daemon d;
	start_loopback(&d, NULL);
	struct bn_client *c;
	ck_assert_int_eq(bn_connect_model(d.socket_path, "zz", 1, 0, &c), -BN_E_MODEL_NOT_FOUND);
	ck_assert_int_eq(bn_connect_model(d.socket_path, "-a", 1, 0, &c), -BN_E_INVALID);
	uint8_t rec[64] = "b";
	ck_assert_int_eq(hello_with(&d, rec), 0);
	rec[10] = 'x'; /* a byte after the NUL */
	ck_assert_int_eq(hello_with(&d, rec), BN_E_PROTOCOL);
	memset(rec, 0, sizeof(rec)); /* the empty name: the default */
	ck_assert_int_eq(hello_with(&d, rec), 0);
	c = connect_model(&d, NULL);
	struct bn_model_status st[3];
	ck_assert_int_eq(bn_models_list(c, st, 3), 2);
	ck_assert_str_eq(st[0].name, "a");
	ck_assert_uint_eq(st[0].is_default, 1);
	ck_assert_uint_eq(st[0].state, BN_MODEL_STATE_LOADED);
	ck_assert_str_eq(st[1].name, "b");
	ck_assert_uint_eq(st[1].state, BN_MODEL_STATE_UNLOADED);
	ck_assert_int_eq(bn_models_load(c, "zz", NULL), -BN_E_MODEL_NOT_FOUND);
	ck_assert_int_eq(bn_models_load(c, "b", &st[1]), 0);
	ck_assert_uint_eq(st[1].state, BN_MODEL_STATE_LOADED);
	ck_assert_int_eq(tu_metric(stats_of(c), "bitnetd_connections_refused_total"
						"{reason=\"model_not_found\"}"), 1);
	bn_disconnect(c);
	if (getuid() == 0) { /* another user may use the models, not command them */
		pid_t p = fork();
		if (p == 0) {
			struct bn_client *o;
			int ok = tu_become_other_user() == 0 &&
				 bn_connect_model(d.socket_path, "b", 1, 0, &o) == 0 &&
				 bn_models_unload(o, "b", NULL) == -BN_E_DENIED &&
				 bn_models_list(o, NULL, 0) == 2;
			_exit(ok ? 0 : 1);
		}
		int status;
		ck_assert_int_eq(waitpid(p, &status, 0), p);
		ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			      "another user's unload was not denied");
	}
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Clients killed while models load and unload                                                 */
/* ------------------------------------------------------------------------------------------ */

START_TEST(clients_killed_during_loads)
{
	char memory[32];
	budget_of_one(memory);
	/* Without the packed-weight cache every load repacks: loads last long enough to be hit. */
	const char *extra[] = { "--kv-memory", "4M", "--memory", memory, "--cache-dir", "none",
				NULL };
	struct tu_daemon d;
	start(&d, 0, n_models, extra);
	int rounds = TU_SANITIZED ? 8 : 24;
	for (int i = 0; i < rounds; i++) {
		pid_t p = fork();
		if (p == 0) {
			struct bn_client *c;
			if (bn_connect_model(d.socket_path, names[i % n_models], 4, 0, &c) < 0)
				_exit(1);
			struct outcome o;
			for (;;)
				run_one(c, i % n_models, 3, &o);
		}
		usleep((useconds_t)(1000 + (i * 7919) % 20000));
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
	}
	/* Nothing lost, nothing stuck: every model still answers as it does alone. */
	for (int m = 0; m < n_models; m++) {
		struct bn_client *c = connect_model(&d, names[m]);
		struct outcome o;
		run_one(c, m, 0, &o);
		check_same(&o, &alone[m][0], m, 0);
		bn_disconnect(c);
	}
	ck_assert_int_eq(tu_daemon_wait_no_sessions(&d), 0);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The cuda backend (host harness): two models on one device                                   */
/* ------------------------------------------------------------------------------------------ */

/* Three greedy tokens: a prefill step and two decode steps (the harness takes about a second
 * a step). */
static void cuda_host_greedy(const struct tu_daemon *d, int m, uint32_t out[3])
{
	struct bn_client *c = connect_model(d, names[m]);
	uint32_t prompt[2] = { 1, 5 };
	struct bn_request req = { prompt, 2, 3, BN_REQ_IGNORE_EOS, NULL };
	ck_assert_int_eq(bn_generate(c, &req, out, 3, NULL, WAIT_S(300)), 0);
	bn_disconnect(c);
}

/* cuda_host_greedy's request to both models at once: their steps run together, one of them
 * on a stepper thread (models_overlap.c). */
static void cuda_host_greedy_together(const struct tu_daemon *d, uint32_t out[2][3])
{
	struct bn_client *c[2];
	struct bn_handle *h[2];
	uint32_t prompt[2] = { 1, 5 };
	struct bn_request req = { prompt, 2, 3, BN_REQ_IGNORE_EOS, NULL };
	for (int m = 0; m < 2; m++) {
		c[m] = connect_model(d, names[m]);
		ck_assert_int_eq(bn_submit(c[m], &req, &h[m]), 0);
	}
	for (int m = 0; m < 2; m++) {
		ck_assert_int_eq(bn_wait(h[m], WAIT_S(300)), 0);
		ck_assert_int_eq(bn_read_tokens(h[m], 0, out[m], 3), 3);
		bn_release(h[m]);
	}
	ck_assert_int_gt(model_metric(c[0], "model_steps_overlapped_total", names[0], NULL), 0);
	ck_assert_int_gt(model_metric(c[0], "model_steps_overlapped_total", names[1], NULL), 0);
	for (int m = 0; m < 2; m++)
		bn_disconnect(c[m]);
}

/* One daemon of the harness's cuda backend, one device: tiny alone on it (l3 not loaded
 * yet), both loaded, both at once (their steps overlapped), then l3 alone (tiny unloaded).
 * Each model's tokens are the same whether the other holds the device too or not. Run with
 * BITNETD_CUDA_HOST set to a real cuda daemon, it checks the same on a GPU. */
START_TEST(cuda_host_two_models)
{
	const char *host = getenv("BITNETD_CUDA_HOST"), *plain = getenv("BITNETD");
	if (!host || access(host, X_OK) != 0) {
		printf("SKIP cuda_host_two_models: no $BITNETD_CUDA_HOST\n");
		return;
	}
	if (TU_SANITIZED) { /* the harness's own suites run the cuda backend under them */
		printf("SKIP cuda_host_two_models under a sanitizer: the harness takes minutes there\n");
		return;
	}
	char keep[512];
	snprintf(keep, sizeof(keep), "%s", plain ? plain : "build/bitnetd");
	setenv("BITNETD", host, 1);
	struct tu_daemon d;
	const char *extra[] = { "--backend", "cuda", "--kv-memory", "4M", NULL };
	start(&d, 0, 2, extra);
	setenv("BITNETD", keep, 1);
	uint32_t tiny_alone[3], tiny_both[3], l3_both[3], l3_alone[3], together[2][3];
	cuda_host_greedy(&d, 0, tiny_alone);
	cuda_host_greedy(&d, 1, l3_both);
	cuda_host_greedy(&d, 0, tiny_both);
	cuda_host_greedy_together(&d, together);
	struct bn_client *admin = connect_model(&d, names[1]);
	struct bn_model_status st[2];
	ck_assert_int_eq(bn_models_list(admin, st, 2), 2);
	ck_assert_uint_eq(st[0].state, BN_MODEL_STATE_LOADED); /* both on the device */
	ck_assert_uint_eq(st[1].state, BN_MODEL_STATE_LOADED);
	ck_assert_int_eq(bn_models_unload(admin, names[0], NULL), 0);
	cuda_host_greedy(&d, 1, l3_alone);
	bn_disconnect(admin);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	ck_assert_msg(!memcmp(tiny_alone, together[0], sizeof(tiny_both)) &&
		      !memcmp(l3_alone, together[1], sizeof(l3_both)),
		      "a model's tokens change when its steps overlap the other's");
	ck_assert_msg(!memcmp(tiny_alone, tiny_both, sizeof(tiny_both)),
		      "tiny's tokens change when l3 shares the device");
	ck_assert_msg(!memcmp(l3_alone, l3_both, sizeof(l3_both)),
		      "l3's tokens change when tiny shares the device");
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

/* The oracle, each model served alone, and each model's bytes with a 4 MiB KV budget shared
 * by all. */
static void prepare(void)
{
	serve_alone();
	measure("4M");
}

static void write_preset(const char *preset, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s.gguf", dir, preset);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s write --preset %s --out %s >/dev/null",
		 getenv("BITNET_MODEL_TOOL"), preset, out);
	if (system(cmd) != 0) {
		fprintf(stderr, "failed: %s\n", cmd);
		exit(EXIT_FAILURE);
	}
}

int main(void)
{
	tu_models_dir(dir);
	snprintf(paths[0], sizeof(paths[0]), "%s", tu_default_model());
	write_preset("llama3-test", paths[1], sizeof(paths[1]));
	write_preset("falcon3-test", paths[2], sizeof(paths[2]));
	const char *shared = getenv("BITNET_TEST_MODELS");
	if (shared && *shared) {
		snprintf(paths[3], sizeof(paths[3]), "%s/stories260K.gguf", shared);
		n_models = access(paths[3], R_OK) == 0 ? 4 : 3;
	}
	if (n_models == 3)
		printf("the shared stories model is not used: $BITNET_TEST_MODELS is not set "
		       "(three models of the model tool's presets instead of four)\n");
	Suite *s = suite_create("models");
	TCase *served = tcase_create("served");
	/* The oracle and the bytes, once, before the cases fork from the runner. */
	tcase_add_unchecked_fixture(served, prepare, NULL);
	tcase_add_test(served, together_equal_alone);
	tcase_add_test(served, budget_of_one_swaps);
	tcase_add_test(served, budget_of_two_serves_three);
	tcase_add_test(served, too_big_for_budget);
	tcase_add_test(served, first_requests_load_once);
	tcase_add_test(served, reload_picks_a_changed_file_up);
	tcase_add_test(served, clients_killed_during_loads);
	tcase_add_test(served, embeddings_per_model);
	tcase_add_test(served, grammar_memory_shared_by_models);
	tcase_add_test(served, grammars_count_inside_memory);
	tcase_add_loop_test(served, kv_lent_to_the_busy_one, 0, 2);
	tcase_set_timeout(served, 300);
	suite_add_tcase(s, served);
	TCase *life = tcase_create("lifecycle");
	tcase_add_test(life, waiting_for_room);
	tcase_add_test(life, per_user_cap_across_models);
	tcase_add_test(life, steps_overlap_where_the_backend_allows);
	tcase_add_loop_test(life, kv_share_fair_under_load, 0, 2);
	tcase_add_test(life, lent_kv_comes_back_before_a_load);
	tcase_add_test(life, kv_past_every_loadable_set_is_refused);
	tcase_add_test(life, unload_drains_then_ends);
	tcase_add_test(life, names_and_refusals);
	tcase_add_test(life, config_file_and_keep_alive);
	tcase_set_timeout(life, 60);
	suite_add_tcase(s, life);
	TCase *cuda = tcase_create("cuda_host");
	tcase_add_test(cuda, cuda_host_two_models);
	/* On cuda the variant under --memory (3), which also checks the budget's count of the
	 * arena's slack: with --kv-memory alone (a fixed ledger) the elastic arena is the same,
	 * and the ledger's lending is the scheduler's, which the cpu variants check (each cuda
	 * variant took 100 s of make check's plain pass on CI's 2-core machine) */
	tcase_add_loop_test(cuda, kv_lent_to_the_busy_one, 3, 4);
	tcase_set_timeout(cuda, 600);
	suite_add_tcase(s, cuda);
	int rc = tu_run_suite(s);
	tu_remove_dir(dir);
	return rc;
}
