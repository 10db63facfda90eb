/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli perplexity FILE: the text's perplexity under the model, from score requests
 * (bn_score_batch), with llama.cpp's llama-perplexity conventions by default so a user can
 * compare with the number they know (DESIGN.md): the whole text tokenized with BOS, cut into
 * floor(n / ctx) chunks of ctx tokens (the tail dropped), BOS in each chunk's first position,
 * only positions ctx/2 .. ctx-2 of a chunk scored (predicting the next token). --stride S
 * instead slides a window of ctx tokens by S, scoring each token once, with the context the
 * window gives it (Hugging Face's perplexity recipe; no BOS inserted).
 * PPL = exp(mean NLL) +/- sqrt((mean(NLL^2) - mean(NLL)^2) / (count - 1)) * PPL.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_CTX 512
#define DEFAULT_BATCH 8

/* One window: tokens [start, start + len) of the text, targets from index `from` on. */
struct window {
	size_t start;
	uint32_t len, from;
};

struct nll {
	double sum, sum2;
	uint64_t count;
};

/* llama-perplexity's chunks, or sliding windows with stride. Returns the count, or -1 (no
 * memory); *out is malloc'd. */
static long make_windows(size_t n, uint32_t ctx, uint32_t stride, struct window **out)
{
	size_t cap = stride ? n / stride + 2 : n / ctx + 1, k = 0;
	struct window *w = malloc(cap * sizeof(*w));
	if (!w)
		return -1;
	if (!stride) {
		for (size_t c = 0; c < n / ctx; c++)
			w[k++] = (struct window){ c * ctx, ctx, ctx / 2 + 1 };
	} else {
		for (size_t begin = 0, prev_end = 0; prev_end < n; begin += stride) {
			size_t end = begin + ctx < n ? begin + ctx : n;
			size_t first = prev_end > begin ? prev_end - begin : 0;
			w[k++] = (struct window){ begin, (uint32_t)(end - begin), first ? (uint32_t)first : 1 };
			prev_end = end;
		}
	}
	*out = w;
	return (long)k;
}

/* Scores windows [first, first + count) in one batch and adds their targets' NLL, printing
 * the running estimate after each. Returns 0 or the first item's error. */
static int score_windows(struct bn_client *c, const uint32_t *ids, uint32_t bos, int llama,
			 const struct window *w, size_t first, size_t count, struct nll *acc)
{
	struct bn_score_item *items = calloc(count, sizeof(*items));
	uint32_t ctx = w[first].len;
	for (size_t i = 1; i < count; i++)
		ctx = w[first + i].len > ctx ? w[first + i].len : ctx;
	uint32_t *tok = malloc(count * ctx * sizeof(*tok));
	struct bn_logprob *lp = malloc(count * ctx * sizeof(*lp));
	int rc = items && tok && lp ? 0 : -ENOMEM;
	for (size_t i = 0; rc == 0 && i < count; i++) {
		const struct window *x = &w[first + i];
		memcpy(tok + i * ctx, ids + x->start, x->len * sizeof(*tok));
		if (llama)
			tok[i * ctx] = bos; /* llama-perplexity's BOS in every chunk */
		items[i] = (struct bn_score_item){ .ids = tok + i * ctx, .n_ids = x->len,
						   .cap = ctx, .logprobs = lp + i * ctx };
	}
	struct bn_batch_result br;
	if (rc == 0)
		rc = bn_score_batch(c, items, count, &br, -1);
	for (size_t i = 0; rc == 0 && i < count; i++) {
		if ((rc = items[i].error) != 0)
			break;
		const struct window *x = &w[first + i];
		for (uint32_t t = x->from; t < x->len; t++) {
			double nll = -(double)items[i].logprobs[t - 1].logprob;
			acc->sum += nll;
			acc->sum2 += nll * nll;
			acc->count++;
		}
		printf("[%zu]%.4f,", first + i + 1, exp(acc->sum / (double)acc->count));
		fflush(stdout);
	}
	free(items);
	free(tok);
	free(lp);
	return rc;
}

struct ppl_options {
	const char *file;
	uint32_t ctx, stride, batch;
};

static int parse(int argc, char **argv, struct ppl_options *o)
{
	for (int i = 1; i < argc; i++) {
		uint32_t *dst = strcmp(argv[i], "--ctx") == 0      ? &o->ctx
				: strcmp(argv[i], "--stride") == 0 ? &o->stride
				: strcmp(argv[i], "--batch") == 0  ? &o->batch
								   : NULL;
		if (dst && i + 1 < argc) {
			if (cli_parse_u32(argv[++i], dst) < 0)
				return cli_usage("perplexity", "%s needs a number, not '%s'",
						 argv[i - 1], argv[i]);
		} else if (argv[i][0] != '-' && !o->file) {
			o->file = argv[i];
		} else {
			return cli_usage("perplexity", "unknown option '%s'", argv[i]);
		}
	}
	if (!o->file)
		return cli_usage("perplexity", "give the FILE (- reads standard input)");
	if (o->batch == 0)
		return cli_usage("perplexity", "--batch must be at least 1");
	return 0;
}

/* The text's ids with BOS (as llama-perplexity tokenizes), malloc'd. */
static int text_ids(const struct bn_vocab *v, const char *file, uint32_t **ids, size_t *n)
{
	FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
	if (!f)
		return -errno;
	size_t len;
	char *text = cli_read_all(f, &len);
	if (f != stdin)
		fclose(f);
	if (!text)
		return -ENOMEM;
	int k = bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, NULL, 0);
	*ids = k > 0 ? malloc((size_t)k * sizeof(**ids)) : NULL;
	if (k > 0 && *ids)
		k = bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, *ids, (uint32_t)k);
	free(text);
	if (k < 0)
		return k;
	*n = (size_t)k;
	return *ids ? 0 : -ENOMEM;
}

int cli_perplexity(struct bn_client *c, int argc, char **argv)
{
	struct bn_model_info mi;
	int rc = bn_model_info(c, &mi);
	if (rc < 0)
		return cli_failed("perplexity", "model info", rc);
	struct ppl_options o = { .ctx = mi.context_length < DEFAULT_CTX ? mi.context_length
									   : DEFAULT_CTX,
				 .batch = DEFAULT_BATCH };
	if ((rc = parse(argc, argv, &o)) != 0)
		return rc;
	if (o.ctx < 4 || o.ctx > mi.context_length)
		return cli_usage("perplexity", "--ctx must be 4 .. %u (the model's context)",
				 mi.context_length);
	if (o.stride > o.ctx)
		return cli_usage("perplexity", "--stride must be at most --ctx");
	const struct bn_vocab *v;
	if ((rc = cli_text_vocab(c, "perplexity", &v)) != 0)
		return rc;
	uint32_t *ids = NULL;
	size_t n = 0;
	if ((rc = text_ids(v, o.file, &ids, &n)) < 0)
		return cli_failed("perplexity", o.file, rc);
	if (!o.stride && n < 2 * (size_t)o.ctx) {
		fprintf(stderr, "bitnet-cli: perplexity: the text is %zu tokens; --ctx %u needs at "
				"least %u (two chunks)\n", n, o.ctx, 2 * o.ctx);
		free(ids);
		return 1;
	}
	struct window *w = NULL;
	long n_win = make_windows(n, o.ctx, o.stride, &w);
	struct nll acc = { 0 };
	rc = n_win < 0 ? -ENOMEM : 0;
	fprintf(stderr, "perplexity: %zu tokens, %ld %s of %u, scored in batches of %u\n", n, n_win,
		o.stride ? "windows" : "chunks", o.ctx, o.batch);
	for (long k = 0; rc == 0 && k < n_win; k += o.batch) {
		size_t count = (size_t)(n_win - k) < o.batch ? (size_t)(n_win - k) : o.batch;
		rc = score_windows(c, ids, bn_vocab_bos_id(v), !o.stride, w, (size_t)k, count, &acc);
	}
	if (rc == 0 && acc.count > 1) {
		double mean = acc.sum / (double)acc.count, ppl = exp(mean);
		double var = acc.sum2 / (double)acc.count - mean * mean;
		double err = sqrt(var > 0 ? var / (double)(acc.count - 1) : 0) * ppl;
		printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
	}
	free(w);
	free(ids);
	return rc < 0 ? cli_failed("perplexity", "scoring", rc) : 0;
}
