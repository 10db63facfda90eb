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

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 1024 /* a line's tokens: llama.cpp's context and batch (its KV cache) */
#define LINE_MAX_BYTES (1 << 20)
#define N_MARGINS 5

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
	while (fgets(line, LINE_MAX_BYTES, f)) {
		char *p = line, *end;
		s->n = 0;
		for (long v; (v = strtol(p, &end, 10)), end != p; p = end) {
			if (v < 0 || s->n == MAX_IDS)
				return -1;
			s->ids[s->n++] = (llama_token)v;
		}
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p)
			return -1;
		if (s->n)
			return 1;
	}
	return 0;
}

/* bitnet-cli score's line "POS ID LOGPROB A:LP B:LP": the two alternatives, best first. */
struct top2 {
	int pos;
	llama_token scored;                  /* the line's own token at pos */
	llama_token id[2];
	double lp[2];
};

static int parse_score_line(const char *line, struct top2 *t)
{
	unsigned tok, a, b;
	double lp, la, lb;
	if (sscanf(line, "%d %u %lf %u:%lf %u:%lf", &t->pos, &tok, &lp, &a, &la, &b, &lb) != 7)
		return -1;
	int swap = lb > la;
	t->scored = (llama_token)tok;
	t->id[0] = (llama_token)(swap ? b : a);
	t->id[1] = (llama_token)(swap ? a : b);
	t->lp[0] = swap ? lb : la;
	t->lp[1] = swap ? la : lb;
	return 0;
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

static const double margins[N_MARGINS] = { 0.1, 0.25, 0.5, 1.0, 2.0 };

struct agreement {
	long positions, agree;
	long clear, agree_clear;             /* at --margin */
	long m_clear[N_MARGINS], m_agree[N_MARGINS];
	double delta_sum, delta_max;
	int shown;                           /* disagreements printed */
};

static void count_position(struct agreement *a, const struct opts *o, const float *logits,
			   int n_vocab, const struct top2 *t, int line)
{
	int best = 0;
	double max = logits[0], sum = 0;
	for (int v = 1; v < n_vocab; v++)
		if (logits[v] > max) {
			max = logits[v];
			best = v;
		}
	for (int v = 0; v < n_vocab; v++)
		sum += exp((double)logits[v] - max);
	double lse = max + log(sum), margin = t->lp[0] - t->lp[1];
	double delta = fabs(((double)logits[t->id[0]] - lse) - t->lp[0]);
	int agree = best == t->id[0];
	a->positions++;
	a->agree += agree;
	a->delta_sum += delta;
	if (delta > a->delta_max)
		a->delta_max = delta;
	for (int k = 0; k < N_MARGINS; k++)
		if (margin >= margins[k]) {
			a->m_clear[k]++;
			a->m_agree[k] += agree;
		}
	if (margin >= o->margin) {
		a->clear++;
		a->agree_clear += agree;
		if (!agree && a->shown++ < 10)
			printf("# clear-margin disagreement: line %d pos %d: bitnetd %d (%.4f, margin "
			       "%.4f), llama.cpp %d (its log-prob of bitnetd's %.4f)\n", line, t->pos,
			       t->id[0], t->lp[0], margin, best, (double)logits[t->id[0]] - lse);
	}
}

/* One line of IDS against its block of SCORES (n - 1 position lines, then "sum=..."). */
static int compare_line(struct llama_context *ctx, const struct opts *o, const struct seq *s,
			FILE *scores, char *buf, int line, struct agreement *a)
{
	int n_vocab = llama_n_vocab(llama_get_model(ctx));
	if (decode_seq(ctx, s))
		return fail("llama_decode failed on a line of %s", o->ids);
	for (int i = 1; i < s->n; i++) {
		struct top2 t;
		if (!fgets(buf, LINE_MAX_BYTES, scores) || parse_score_line(buf, &t) || t.pos != i ||
		    t.scored != s->ids[i])
			return fail("%s: not bitnet-cli score --top 2 output for IDS's lines",
				    o->bitnetd);
		if (t.id[0] >= n_vocab || t.id[1] >= n_vocab)
			return fail("%s: a token id beyond llama.cpp's vocabulary", o->bitnetd);
		const float *logits = llama_get_logits_ith(ctx, i - 1);
		if (!logits)
			return fail("llama.cpp gave no logits at position %d", i - 1);
		count_position(a, o, logits, n_vocab, &t, line);
	}
	if (!fgets(buf, LINE_MAX_BYTES, scores) || strncmp(buf, "sum=", 4))
		return fail("%s: a block without its sum= line", o->bitnetd);
	return 0;
}

static void print_agreement(const struct agreement *a, const struct opts *o)
{
	printf("positions=%ld\nagree_all=%.4f\nagree_all_count=%ld\n", a->positions,
	       a->positions ? (double)a->agree / a->positions : 0, a->agree);
	printf("margin=%g\nclear_positions=%ld\nagree_clear=%.4f\nagree_clear_count=%ld\n",
	       o->margin, a->clear, a->clear ? (double)a->agree_clear / a->clear : 0,
	       a->agree_clear);
	for (int k = 0; k < N_MARGINS; k++)
		printf("margin_%g_positions=%ld margin_%g_agree=%.4f\n", margins[k], a->m_clear[k],
		       margins[k], a->m_clear[k] ? (double)a->m_agree[k] / a->m_clear[k] : 0);
	printf("lp_delta_mean=%.6f\nlp_delta_max=%.6f\n",
	       a->positions ? a->delta_sum / a->positions : 0, a->delta_max);
}

static int run_logits(struct llama_context *ctx, const struct opts *o, FILE *ids, FILE *scores)
{
	struct agreement a = { 0 };
	struct seq *s = malloc(sizeof(*s));
	char *buf = malloc(LINE_MAX_BYTES), *line = malloc(LINE_MAX_BYTES);
	int rc = s && buf && line ? 0 : fail("%s", strerror(ENOMEM));
	for (int k = 1, got; !rc && (got = read_seq(ids, line, s)) != 0; k++)
		rc = got < 0 ? fail("%s: a line that is not token ids", o->ids)
			     : compare_line(ctx, o, s, scores, buf, k, &a);
	if (!rc)
		print_agreement(&a, o);
	free(s);
	free(buf);
	free(line);
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
	if (argc % 2 || !o->model || !o->ids || !o->bitnetd || o->threads < 1 || !(o->margin >= 0) ||
	    (strcmp(o->mode, "logits") && strcmp(o->mode, "embed")))
		return usage();
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc;
	FILE *ids = fopen(o.ids, "r"), *out = fopen(o.bitnetd, "r");
	if (!ids || !out)
		return fail("cannot open %s", !ids ? o.ids : o.bitnetd);
	llama_log_set(quiet_log, NULL);
	llama_backend_init();
	struct llama_model *m = llama_model_load_from_file(o.model, llama_model_default_params());
	int embed = !strcmp(o.mode, "embed");
	struct llama_context *ctx = m ? open_context(m, &o, embed) : NULL;
	if (!ctx)
		rc = fail("llama.cpp cannot run %s", o.model);
	else
		rc = embed ? run_embed(ctx, &o, ids, out) : run_logits(ctx, &o, ids, out);
	if (ctx)
		llama_free(ctx);
	if (m)
		llama_free_model(m);
	llama_backend_free();
	fclose(ids);
	fclose(out);
	return rc;
}
