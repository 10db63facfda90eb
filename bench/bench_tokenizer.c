/* SPDX-License-Identifier: MIT */
/*
 * bench-tokenizer — text <-> ids with the LLaMA-3 vocabulary (BitNet 2B4T's), one thread, and
 * the vocabulary's transfer from a daemon. `make bench-tokenizer` makes the model file (the
 * tiny preset with ../shared/models/llama3/tokenizer.json's vocabulary) and runs it. Keys:
 *
 *   corpus_bytes, corpus_tokens   the text: half English prose (the project's Markdown and man
 *                                 pages), half C (its sources), 1 MiB in all
 *   tok_encode_mbps               bn_tokenize_ex over the whole text, MB/s (10^6 bytes),
 *                                 median of 7 (target >= 20)
 *   tok_encode_tokens_per_s       the same in tokens per second
 *   tok_encode_100tok_us          one 100-token prompt (the text's first 100 tokens' worth),
 *                                 median of 2001: what encoding a request's text costs
 *   tok_encode_100tok_cold_us     the same after 64 MiB of other data passed through the
 *                                 caches each time (median of 201): the daemon's case
 *   tok_decode_mbps               bn_detokenize_ex of all the ids, MB/s of text, median of 7
 *                                 (target >= 200)
 *   tok_stream_decode_mbps        the same one id at a time through a bn_text_stream
 *   vocab_fetch_ms, vocab_fetch_min_ms   bn_vocab_fetch from a running daemon (control round
 *                                 trip, mapping, checks, text map, merge table, split pattern),
 *                                 median and best of 21 (target <= 50)
 *   text_request_us, ids_request_us   one request (the 100-token prompt, 1 token out) sent as
 *                                 text (bn_submit_text: the daemon encodes it) and as its ids,
 *                                 alternating, medians of 301 each
 *   text_request_overhead_us      the median of the 301 paired differences: what a text
 *                                 request adds (target <= 50)
 */
#define _GNU_SOURCE
#include "bitnet_client.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CORPUS_BYTES (1u << 20)
#define REPS 7

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_i64);
	return v[n / 2];
}

static int die(const char *what)
{
	fprintf(stderr, "bench-tokenizer: %s\n", what);
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* The corpus                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static int has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	return n > k && strcmp(name + n - k, suffix) == 0;
}

/* Appends the files of dir whose names end in suffix, in name order, up to cap bytes. */
static size_t append_dir(const char *dir, const char *suffix, char *buf, size_t at, size_t cap)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		FILE *f = has_suffix(names[i]->d_name, suffix) ? fopen(path, "rb") : NULL;
		if (f) {
			at += fread(buf + at, 1, cap - at, f);
			fclose(f);
		}
		free(names[i]);
	}
	free(names);
	return at;
}

/* Prose first, then code, each filling half (the sources repeat if they are short). */
static char *make_corpus(void)
{
	char *buf = malloc(CORPUS_BYTES);
	if (!buf)
		return NULL;
	size_t half = CORPUS_BYTES / 2, at = 0;
	static const char *const prose[][2] = { { "docs", ".md" }, { "shm", ".md" }, { ".", ".md" },
						{ "systemd", ".md" }, { "docs", ".8" } };
	static const char *const code[][2] = { { "daemon", ".c" }, { "libclient", ".c" },
					       { "tools", ".c" }, { "kernels/cpu", ".c" } };
	while (at < half) {
		size_t before = at;
		for (size_t i = 0; i < sizeof(prose) / sizeof(prose[0]); i++)
			at = append_dir(prose[i][0], prose[i][1], buf, at, half);
		if (at == before)
			return free(buf), NULL;
	}
	while (at < CORPUS_BYTES) {
		size_t before = at;
		for (size_t i = 0; i < sizeof(code) / sizeof(code[0]); i++)
			at = append_dir(code[i][0], code[i][1], buf, at, CORPUS_BYTES);
		if (at == before)
			return free(buf), NULL;
	}
	return buf;
}

/* ------------------------------------------------------------------------------------------ */
/* The daemon                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static pid_t start_daemon(const char *model, const char *sock)
{
	const char *bin = getenv("BITNETD");
	pid_t pid = fork();
	if (pid == 0) {
		execl(bin && *bin ? bin : "build/bitnetd", "bitnetd", "--backend", "cpu", "--model",
		      model, "--socket", sock, "--threads", "1", "--log-level", "warn", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static struct bn_client *connect_daemon(const char *sock, pid_t pid)
{
	for (int i = 0; i < 3000; i++) {
		struct bn_client *c;
		if (bn_connect(sock, 1, &c) == 0)
			return c;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return NULL;
		usleep(10000);
	}
	return NULL;
}

static int fetch_times(struct bn_client *c)
{
	int64_t t[21];
	for (int i = 0; i < 21; i++) {
		struct bn_vocab *v;
		int64_t t0 = now_ns();
		int rc = bn_vocab_fetch(c, &v);
		t[i] = now_ns() - t0;
		if (rc < 0)
			return die("bn_vocab_fetch failed");
		bn_vocab_free(v);
	}
	int64_t best = t[0];
	for (int i = 1; i < 21; i++)
		best = t[i] < best ? t[i] : best;
	printf("vocab_fetch_ms=%.2f\nvocab_fetch_min_ms=%.2f\n", (double)median(t, 21) * 1e-6,
	       (double)best * 1e-6);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding and decoding                                                                       */
/* ------------------------------------------------------------------------------------------ */

static int encode(const struct bn_vocab *v, const char *text, uint32_t **ids)
{
	int n = bn_tokenize_ex(v, text, CORPUS_BYTES, 0, NULL, 0);
	*ids = n > 0 ? malloc((size_t)n * sizeof(**ids)) : NULL;
	if (!*ids)
		return -1;
	int64_t t[REPS];
	for (int r = 0; r < REPS; r++) {
		int64_t t0 = now_ns();
		bn_tokenize_ex(v, text, CORPUS_BYTES, 0, *ids, (uint32_t)n);
		t[r] = now_ns() - t0;
	}
	double s = (double)median(t, REPS) * 1e-9;
	printf("corpus_bytes=%u\ncorpus_tokens=%d\ntok_encode_mbps=%.1f\n"
	       "tok_encode_tokens_per_s=%.0f\n",
	       CORPUS_BYTES, n, CORPUS_BYTES / s * 1e-6, n / s);
	return n;
}

/* The shortest prefix of the text that encodes to at least 100 ids. */
static size_t prompt_len(const struct bn_vocab *v, const char *text)
{
	size_t len = 100;
	while (bn_tokenize_ex(v, text, len, 0, NULL, 0) < 100)
		len += 8;
	return len;
}

#define EVICT_BYTES (64u << 20)
#define COLD_REPS 201

/* A 100-token prompt's encoding: repeated (hot caches), and after 64 MiB of other memory went
 * through the caches each time (cold, as in a daemon between forward steps). */
static void encode_prompt(const struct bn_vocab *v, const char *text)
{
	size_t len = prompt_len(v, text);
	uint32_t ids[256];
	int64_t t[2001];
	for (int r = 0; r < 2001; r++) {
		int64_t t0 = now_ns();
		bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, ids, 256);
		t[r] = now_ns() - t0;
	}
	printf("tok_encode_100tok_us=%.2f\n", (double)median(t, 2001) * 1e-3);
	volatile uint8_t *evict = malloc(EVICT_BYTES);
	if (!evict)
		return;
	for (int r = 0; r < COLD_REPS; r++) {
		for (size_t i = 0; i < EVICT_BYTES; i += 64)
			evict[i] = (uint8_t)(evict[i] + r);
		int64_t t0 = now_ns();
		bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, ids, 256);
		t[r] = now_ns() - t0;
	}
	printf("tok_encode_100tok_cold_us=%.2f\n", (double)median(t, COLD_REPS) * 1e-3);
	free((void *)evict);
}

static void decode(const struct bn_vocab *v, const uint32_t *ids, int n)
{
	char *buf = malloc(2 * CORPUS_BYTES);
	int64_t t[REPS];
	int len = 0;
	for (int r = 0; r < REPS && buf; r++) {
		int64_t t0 = now_ns();
		len = bn_detokenize_ex(v, ids, (uint32_t)n, 0, buf, 2 * CORPUS_BYTES);
		t[r] = now_ns() - t0;
	}
	printf("tok_decode_mbps=%.1f\n", len / ((double)median(t, REPS) * 1e-9) * 1e-6);
	for (int r = 0; r < REPS; r++) {
		struct bn_text_stream *s;
		const char *chunk;
		size_t k;
		bn_text_stream_new(v, 0, &s);
		int64_t t0 = now_ns();
		for (int i = 0; i < n; i++)
			bn_text_stream_push(s, &ids[i], 1, &chunk, &k);
		bn_text_stream_finish(s, &chunk, &k);
		t[r] = now_ns() - t0;
		bn_text_stream_free(s);
	}
	printf("tok_stream_decode_mbps=%.1f\n", len / ((double)median(t, REPS) * 1e-9) * 1e-6);
	free(buf);
}

#define PAIRS 301

/* One request to its end: the prompt as text (ids NULL) or as its n ids; returns its time, or
 * -1 when it failed, its text did not become n ids, or its token differs from *token (set by
 * the first call). */
static int64_t one_request(struct bn_client *c, const char *text, size_t len, const uint32_t *ids,
			   uint32_t n, uint32_t *token)
{
	struct bn_request req = { .prompt = ids, .n_prompt = ids ? n : 0, .max_tokens = 1,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_handle *h;
	struct bn_result res;
	uint32_t out = UINT32_MAX;
	int64_t t0 = now_ns();
	int rc = ids ? bn_submit(c, &req, &h) : bn_submit_text(c, &req, text, len, &h);
	if (rc < 0)
		return -1;
	rc = bn_wait(h, -1);
	int64_t t = now_ns() - t0;
	if (rc == 0)
		rc = bn_result(h, &res);
	bn_read_tokens(h, 0, &out, 1);
	uint32_t prompt_tokens = n;
	if (!ids)
		bn_read_text(h, 0, NULL, 0, &prompt_tokens);
	bn_release(h);
	if (rc < 0 || res.n_tokens != 1 || prompt_tokens != n ||
	    (*token != UINT32_MAX && out != *token))
		return -1;
	*token = out;
	return t;
}

/* The same 100-token prompt as text and as ids, alternating: what the daemon's encoding adds. */
static int text_overhead(struct bn_client *c, const struct bn_vocab *v, const char *text)
{
	size_t len = prompt_len(v, text);
	uint32_t ids[256], token = UINT32_MAX;
	int n = bn_tokenize_ex(v, text, len, bn_vocab_add_bos(v) ? BN_TOK_ADD_BOS : 0, ids, 256);
	static int64_t as_text[PAIRS], as_ids[PAIRS], diff[PAIRS];
	for (int i = 0; i < PAIRS; i++) {
		/* Which goes first alternates too, so neither gets the warmer caches. */
		int text_first = i % 2 == 0;
		int64_t a = text_first ? one_request(c, text, len, NULL, (uint32_t)n, &token) : 0;
		int64_t b = one_request(c, NULL, 0, ids, (uint32_t)n, &token);
		if (!text_first)
			a = one_request(c, text, len, NULL, (uint32_t)n, &token);
		if (a < 0 || b < 0)
			return die("a text or id request failed, or their tokens differ");
		as_text[i] = a;
		as_ids[i] = b;
		diff[i] = a - b;
	}
	printf("text_request_us=%.1f\nids_request_us=%.1f\ntext_request_overhead_us=%.1f\n",
	       (double)median(as_text, PAIRS) * 1e-3, (double)median(as_ids, PAIRS) * 1e-3,
	       (double)median(diff, PAIRS) * 1e-3);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[1], "--model"))
		return die("usage: bench-tokenizer --model FILE (a GGUF with a BPE vocabulary)");
	char *text = make_corpus();
	if (!text)
		return die("cannot read the corpus (run from the repository root)");
	char sock[64];
	snprintf(sock, sizeof(sock), "/tmp/bn-bench-tok-%d.sock", (int)getpid());
	pid_t pid = start_daemon(argv[2], sock);
	struct bn_client *c = pid > 0 ? connect_daemon(sock, pid) : NULL;
	struct bn_vocab *v = NULL;
	int rc = !c ? die("the daemon did not start") : bn_vocab_fetch(c, &v) < 0 ? die("no vocabulary") : 0;
	if (rc == 0 && bn_vocab_kind(v) != BN_VOCAB_BPE)
		rc = die("the model's vocabulary is not byte-level BPE");
	uint32_t *ids = NULL;
	int n = rc ? -1 : encode(v, text, &ids);
	if (n > 0) {
		encode_prompt(v, text);
		decode(v, ids, n);
		rc = fetch_times(c);
		if (rc == 0)
			rc = text_overhead(c, v, text);
	}
	free(ids);
	bn_vocab_free(v);
	bn_disconnect(c);
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	free(text);
	return rc || n <= 0;
}
