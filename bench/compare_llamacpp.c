/* SPDX-License-Identifier: MIT */
/*
 * compare-llamacpp — bitnetd's outputs beside llama.cpp's (libllama, linked only by `make
 * compare-llamacpp LLAMA_CPP_DIR=... LLAMA_CPP_BUILD=...`; never part of make all or make
 * check), on the same GGUF weights and the same token ids. bench/compare_llamacpp.sh runs the
 * daemon, writes what it said to a file, and hands it here:
 *
 *   compare_llamacpp logits --model FILE --ids IDS --bitnetd SCORES [--margin M] [--threads N]
 *     IDS: one sequence a line (token ids, BOS included as the model wants it); SCORES: the
 *     `bitnet-cli score --ids ... --top 2` output of each line, in order. For every position
 *     i >= 1, llama.cpp's logits after ids[0..i-1] (one decode of the whole line) against
 *     bitnetd's two most likely next tokens. Keys: positions, agree_all (llama.cpp's argmax is
 *     bitnetd's top-1), and for the clear-margin positions (bitnetd's top-1 log-probability
 *     minus its top-2 at least M, default 1 nat) clear_positions and agree_clear, the same
 *     at 0.1, 0.25, 0.5, 1 and 2 nats, and lp_delta_mean / lp_delta_max: |llama.cpp's log-softmax
 *     of bitnetd's top-1 token - bitnetd's log-probability of it|, how far apart the two are.
 *
 *   compare_llamacpp score --model FILE --ids IDS [--threads N]
 *     llama.cpp's own score file of IDS's lines in `bitnet-cli score --top 2`'s format (to
 *     stdout), so that one llama.cpp file's logits can be compared with another's, e.g. the
 *     IQ2_BN twin's with the F16 twin's (bench/agreement.h; bench/ref_bitnet.c reads it too).
 *
 *   compare_llamacpp embed --model FILE --ids IDS --bitnetd EMBEDS [--pooling P] [--threads N]
 *     EMBEDS: the `bitnet-cli embed --ids L1 --ids L2 ...` output for the lines of IDS, in
 *     order. llama.cpp embeds each line alone (the model's pooling, or P: mean, cls, last),
 *     L2-normalised; keys: cosine_K per input, cosine_min, cosine_mean.
 *
 * llama.cpp quantises activations its own way (ik_llama.cpp's IQ2_BN path: Q8_K64 rows), so
 * exact equality is not expected of ternary files; of float files (the stories260K test
 * model) it nearly is.
 */
#define _GNU_SOURCE
#include <llama.h>

#include "agreement.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 1024 /* a line's tokens: llama.cpp's context and batch (its KV cache) */
#define LINE_MAX_BYTES (1 << 20)

struct opts {
	const char *mode, *model, *ids, *bitnetd, *pooling;
	double margin;
	int threads;
};

/* One sequence of token ids (a line of IDS). */
struct seq {
	llama_token ids[MAX_IDS];
	int n;
};

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("compare_llamacpp: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

/* llama.cpp's own log: errors only, so the report stays readable. */
static void quiet_log(enum ggml_log_level level, const char *text, void *user)
{
	(void)user;
	if (level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

/* ------------------------------------------------------------------------------------------ */
/* Input files                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* The next non-empty line of f as ids; 0 at the end, -1 on a bad line. */
static int read_seq(FILE *f, char *line, struct seq *s)
{
	return read_ids_line(f, line, LINE_MAX_BYTES, s->ids, MAX_IDS, &s->n, INT32_MAX);
}

/* ------------------------------------------------------------------------------------------ */
/* llama.cpp                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static struct llama_context *open_context(struct llama_model *m, const struct opts *o,
					  int embeddings)
{
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = MAX_IDS;
	cp.n_batch = MAX_IDS;
	cp.n_ubatch = MAX_IDS;
	cp.n_seq_max = 1;
	cp.n_threads = o->threads;
	cp.n_threads_batch = o->threads;
	cp.embeddings = embeddings;
	if (o->pooling) {
		static const char *const names[] = { "none", "mean", "cls", "last" };
		for (int i = 0; i < 4; i++)
			if (!strcmp(o->pooling, names[i]))
				cp.pooling_type = (enum llama_pooling_type)i;
	}
	return llama_init_from_model(m, cp);
}

/* One decode of the whole sequence from an empty cache, every position an output. */
static int decode_seq(struct llama_context *ctx, const struct seq *s)
{
	struct llama_batch b = llama_batch_init(s->n, 0, 1);
	for (int i = 0; i < s->n; i++) {
		b.token[i] = s->ids[i];
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = 1;
	}
	b.n_tokens = s->n;
	llama_kv_cache_clear(ctx);
	int rc = llama_decode(ctx, b);
	llama_batch_free(b);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* logits: top-1 agreement                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* The logits of one decoded line, in double, into row; NULL if llama.cpp gave none. */
/* The vocabulary's size, through the calls ik_llama.cpp and upstream llama.cpp both have
 * (upstream's llama_n_vocab takes a vocabulary, ik_llama.cpp's a model). */
static int vocab_size(struct llama_context *ctx)
{
	return llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
}

/* Frees a model: llama_free_model is ik_llama.cpp's only name for it and upstream's
 * deprecated one. */
static void free_model(struct llama_model *m)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	llama_free_model(m);
#pragma GCC diagnostic pop
}

static const double *logits_row(struct llama_context *ctx, int i, int n_vocab, double *row)
{
	const float *logits = llama_get_logits_ith(ctx, i);
	for (int v = 0; logits && v < n_vocab; v++)
		row[v] = logits[v];
	return logits ? row : NULL;
}

/* Each position of a decoded line against its line of SCORES. */
static int compare_rows(struct llama_context *ctx, const struct opts *o, const struct seq *s,
			FILE *scores, char *buf, int line, struct agreement *a, double *row)
{
	int n_vocab = vocab_size(ctx);
	for (int i = 1; i < s->n; i++) {
		struct top2 t;
		if (!fgets(buf, LINE_MAX_BYTES, scores) || parse_score_line(buf, &t) || t.pos != i ||
		    t.scored != s->ids[i])
			return fail("%s: not bitnet-cli score --top 2 output for IDS's lines",
				    o->bitnetd);
		if (t.id[0] >= n_vocab || t.id[1] >= n_vocab)
			return fail("%s: a token id beyond llama.cpp's vocabulary", o->bitnetd);
		const double *logits = logits_row(ctx, i - 1, n_vocab, row);
		if (!logits)
			return fail("llama.cpp gave no logits at position %d", i - 1);
		count_position(a, logits, n_vocab, &t, line);
	}
	if (!fgets(buf, LINE_MAX_BYTES, scores) || strncmp(buf, "sum=", 4))
		return fail("%s: a block without its sum= line", o->bitnetd);
	return 0;
}

/* One line of IDS against its block of SCORES (n - 1 position lines, then "sum=..."). */
static int compare_line(struct llama_context *ctx, const struct opts *o, const struct seq *s,
			FILE *scores, char *buf, int line, struct agreement *a)
{
	int n_vocab = vocab_size(ctx);
	if (decode_seq(ctx, s))
		return fail("llama_decode failed on a line of %s", o->ids);
	double *row = malloc(sizeof(double) * n_vocab);
	int rc = row ? compare_rows(ctx, o, s, scores, buf, line, a, row)
		     : fail("%s", strerror(ENOMEM));
	free(row);
	return rc;
}

static int run_logits(struct llama_context *ctx, const struct opts *o, FILE *ids, FILE *scores)
{
	struct agreement a = { .margin = o->margin };
	struct seq *s = malloc(sizeof(*s));
	char *buf = malloc(LINE_MAX_BYTES), *line = malloc(LINE_MAX_BYTES);
	int rc = s && buf && line ? 0 : fail("%s", strerror(ENOMEM));
	for (int k = 1, got; !rc && (got = read_seq(ids, line, s)) != 0; k++)
		rc = got < 0 ? fail("%s: a line that is not token ids", o->ids)
			     : compare_line(ctx, o, s, scores, buf, k, &a);
	if (!rc)
		print_agreement(&a);
	free(s);
	free(buf);
	free(line);
	return rc;
}

/* llama.cpp's score file of every line of IDS (bench/agreement.h's format). */
static int run_score(struct llama_context *ctx, const struct opts *o, FILE *ids)
{
	int n_vocab = vocab_size(ctx), rc = 0;
	struct seq *s = malloc(sizeof(*s));
	char *line = malloc(LINE_MAX_BYTES);
	double *row = malloc(sizeof(double) * n_vocab);
	if (!s || !line || !row)
		rc = fail("%s", strerror(ENOMEM));
	for (int got; !rc && (got = read_seq(ids, line, s)) != 0;) {
		if (got < 0 || decode_seq(ctx, s)) {
			rc = fail("%s: a line llama.cpp could not decode", o->ids);
			break;
		}
		double sum = 0;
		for (int i = 1; !rc && i < s->n; i++) {
			if (!logits_row(ctx, i - 1, n_vocab, row))
				rc = fail("llama.cpp gave no logits at position %d", i - 1);
			else
				write_score_line(stdout, i, s->ids[i], row, n_vocab, &sum);
		}
		printf("sum=%.17g tokens=%d scored=%d\n", sum, s->n, s->n - 1);
	}
	free(s);
	free(line);
	free(row);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* embed: cosine similarity                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* bitnet-cli embed's "input=K dim=D ..." line, then its D values; returns D, or -1. */
static int read_vector(FILE *f, char *buf, float *v, int cap)
{
	int k, dim;
	if (!fgets(buf, LINE_MAX_BYTES, f) || sscanf(buf, "input=%d dim=%d", &k, &dim) != 2 ||
	    dim <= 0 || dim > cap || !fgets(buf, LINE_MAX_BYTES, f))
		return -1;
	char *p = buf, *end;
	for (int i = 0; i < dim; i++, p = end) {
		v[i] = strtof(p, &end);
		if (end == p)
			return -1;
	}
	return dim;
}

static double cosine(const float *a, const float *b, int n)
{
	double ab = 0, aa = 0, bb = 0;
	for (int i = 0; i < n; i++) {
		ab += (double)a[i] * b[i];
		aa += (double)a[i] * a[i];
		bb += (double)b[i] * b[i];
	}
	return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

static int run_embed(struct llama_context *ctx, const struct opts *o, FILE *ids, FILE *embeds)
{
	int n_embd = llama_model_n_embd(llama_get_model(ctx)), k = 0, rc = 0;
	struct seq *s = malloc(sizeof(*s));
	char *buf = malloc(LINE_MAX_BYTES);
	float *theirs = malloc(sizeof(float) * n_embd);
	double min = 2, sum = 0;
	if (!s || !buf || !theirs)
		rc = fail("%s", strerror(ENOMEM));
	for (int got; !rc && (got = read_seq(ids, buf, s)) != 0; k++) {
		if (got < 0 || decode_seq(ctx, s)) {
			rc = fail("%s: a line llama.cpp could not embed", o->ids);
			break;
		}
		const float *mine = llama_get_embeddings_seq(ctx, 0);
		if (!mine || read_vector(embeds, buf, theirs, n_embd) != n_embd) {
			rc = fail(!mine ? "%s: llama.cpp gave no pooled embedding (--pooling?)"
					: "%s: not bitnet-cli embed output of the model's width",
				  !mine ? o->model : o->bitnetd);
			break;
		}
		double c = cosine(mine, theirs, n_embd);
		printf("cosine_%d=%.6f\n", k, c);
		sum += c;
		if (c < min)
			min = c;
	}
	if (!rc)
		printf("inputs=%d\ncosine_min=%.6f\ncosine_mean=%.6f\n", k, k ? min : 0,
		       k ? sum / k : 0);
	free(s);
	free(buf);
	free(theirs);
	return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* main                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static int usage(void)
{
	fputs("usage: compare_llamacpp logits|embed --model FILE --ids IDS --bitnetd OUTPUT\n"
	      "       compare_llamacpp score --model FILE --ids IDS [--threads N]\n"
	      "                        [--margin NATS] [--pooling mean|cls|last] [--threads N]\n",
	      stderr);
	return 2;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .margin = 1.0, .threads = 2 };
	if (argc < 2)
		return usage();
	o->mode = argv[1];
	for (int i = 2; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		if (!strcmp(k, "--model"))
			o->model = v;
		else if (!strcmp(k, "--ids"))
			o->ids = v;
		else if (!strcmp(k, "--bitnetd"))
			o->bitnetd = v;
		else if (!strcmp(k, "--pooling"))
			o->pooling = v;
		else if (!strcmp(k, "--margin"))
			o->margin = strtod(v, NULL);
		else if (!strcmp(k, "--threads"))
			o->threads = atoi(v);
		else
			return usage();
	}
	int score = !strcmp(o->mode, "score");
	if (argc % 2 || !o->model || !o->ids || (!o->bitnetd && !score) || o->threads < 1 ||
	    !(o->margin >= 0) || (strcmp(o->mode, "logits") && strcmp(o->mode, "embed") && !score))
		return usage();
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc;
	int score = !strcmp(o.mode, "score");
	FILE *ids = fopen(o.ids, "r"), *out = score ? NULL : fopen(o.bitnetd, "r");
	if (!ids || (!score && !out))
		return fail("cannot open %s", !ids ? o.ids : o.bitnetd);
	llama_log_set(quiet_log, NULL);
	llama_backend_init();
	struct llama_model *m = llama_model_load_from_file(o.model, llama_model_default_params());
	int embed = !strcmp(o.mode, "embed");
	struct llama_context *ctx = m ? open_context(m, &o, embed) : NULL;
	if (!ctx)
		rc = fail("llama.cpp cannot run %s", o.model);
	else
		rc = score   ? run_score(ctx, &o, ids)
		     : embed ? run_embed(ctx, &o, ids, out)
			     : run_logits(ctx, &o, ids, out);
	if (ctx)
		llama_free(ctx);
	if (m)
		free_model(m);
	llama_backend_free();
	fclose(ids);
	if (out)
		fclose(out);
	return rc;
}
