/* SPDX-License-Identifier: MIT */
/*
 * agreement.h — top-1 agreement between a row of logits and a score file's two most likely
 * tokens, shared by the programs that put two forward passes side by side
 * (bench/compare_llamacpp.c: llama.cpp's logits; bench/ref_bitnet.c: the double-precision
 * reference's). A score file is `bitnet-cli score --ids ... --top 2` output, one block per
 * sequence: a line "POS ID LOGPROB A:LP B:LP" for every position POS >= 1 (ID the sequence's
 * own token there, A and B the two most likely), then "sum=...". Both programs also write
 * that format (write_score_line), so any of the forward passes can be the score file.
 *
 * IDS files: one sequence of token ids a line (read_ids_line).
 *
 * Clear margin: the score file's top-1 log-probability minus its top-2 at least the margin.
 * Header-only (static functions): compare_llamacpp is built alone against libllama.
 */
#ifndef BITNETD_BENCH_AGREEMENT_H
#define BITNETD_BENCH_AGREEMENT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define AGREE_N_MARGINS 5

/* The next non-empty line of f (read into line, cap bytes) as at most max token ids below
 * n_vocab: 1 with *n set, 0 at the end, -1 on a line that is not that. */
static inline int read_ids_line(FILE *f, char *line, int cap, int32_t *ids, int max, int *n,
				long n_vocab)
{
	while (fgets(line, cap, f)) {
		char *p = line, *end;
		*n = 0;
		for (long v; (v = strtol(p, &end, 10)), end != p; p = end) {
			if (v < 0 || v >= n_vocab || *n == max)
				return -1;
			ids[(*n)++] = (int32_t)v;
		}
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p)
			return -1;
		if (*n)
			return 1;
	}
	return 0;
}

/* A score line: the two alternatives, best first. */
struct top2 {
	int pos;
	int32_t scored;                      /* the sequence's own token at pos */
	int32_t id[2];
	double lp[2];
};

static inline int parse_score_line(const char *line, struct top2 *t)
{
	unsigned tok, a, b;
	double lp, la, lb;
	if (sscanf(line, "%d %u %lf %u:%lf %u:%lf", &t->pos, &tok, &lp, &a, &la, &b, &lb) != 7)
		return -1;
	int swap = lb > la;
	t->scored = (int32_t)tok;
	t->id[0] = (int32_t)(swap ? b : a);
	t->id[1] = (int32_t)(swap ? a : b);
	t->lp[0] = swap ? lb : la;
	t->lp[1] = swap ? la : lb;
	return 0;
}

static const double agree_margins[AGREE_N_MARGINS] = { 0.1, 0.25, 0.5, 1.0, 2.0 };

struct agreement {
	double margin;                       /* the clear-margin threshold, nats */
	long positions, agree;
	long clear, agree_clear;             /* at margin */
	long m_clear[AGREE_N_MARGINS], m_agree[AGREE_N_MARGINS];
	double delta_sum, delta_max;
	int shown;                           /* disagreements printed */
};

/* The argmax of a row and its log-sum-exp, in double. */
static inline int row_argmax_lse(const double *logits, int n_vocab, double *lse)
{
	int best = 0;
	double max = logits[0], sum = 0;
	for (int v = 1; v < n_vocab; v++)
		if (logits[v] > max) {
			max = logits[v];
			best = v;
		}
	for (int v = 0; v < n_vocab; v++)
		sum += exp(logits[v] - max);
	*lse = max + log(sum);
	return best;
}

/* One position: the logits' argmax against the score line's top-1; delta is |the logits'
 * log-softmax of the score file's top-1 - the score file's log-probability of it|. */
static inline void count_position(struct agreement *a, const double *logits, int n_vocab,
				  const struct top2 *t, int line)
{
	double lse;
	int best = row_argmax_lse(logits, n_vocab, &lse);
	double margin = t->lp[0] - t->lp[1];
	double delta = fabs((logits[t->id[0]] - lse) - t->lp[0]);
	int agree = best == t->id[0];
	a->positions++;
	a->agree += agree;
	a->delta_sum += delta;
	if (delta > a->delta_max)
		a->delta_max = delta;
	for (int k = 0; k < AGREE_N_MARGINS; k++)
		if (margin >= agree_margins[k]) {
			a->m_clear[k]++;
			a->m_agree[k] += agree;
		}
	if (margin >= a->margin) {
		a->clear++;
		a->agree_clear += agree;
		if (!agree && a->shown++ < 10)
			printf("# clear-margin disagreement: line %d pos %d: scores' top-1 %d (%.4f, "
			       "margin %.4f), logits' argmax %d (their log-prob of the scores' top-1 "
			       "%.4f)\n", line, t->pos, t->id[0], t->lp[0], margin, best,
			       logits[t->id[0]] - lse);
	}
}

static inline void print_agreement(const struct agreement *a)
{
	printf("positions=%ld\nagree_all=%.4f\nagree_all_count=%ld\n", a->positions,
	       a->positions ? (double)a->agree / a->positions : 0, a->agree);
	printf("margin=%g\nclear_positions=%ld\nagree_clear=%.4f\nagree_clear_count=%ld\n",
	       a->margin, a->clear, a->clear ? (double)a->agree_clear / a->clear : 0,
	       a->agree_clear);
	for (int k = 0; k < AGREE_N_MARGINS; k++)
		printf("margin_%g_positions=%ld margin_%g_agree=%.4f\n", agree_margins[k],
		       a->m_clear[k], agree_margins[k],
		       a->m_clear[k] ? (double)a->m_agree[k] / a->m_clear[k] : 0);
	printf("lp_delta_mean=%.6f\nlp_delta_max=%.6f\n",
	       a->positions ? a->delta_sum / a->positions : 0, a->delta_max);
}

/* The score line of position pos (>= 1) from the logits after ids[0..pos-1]: the sequence's
 * own token `scored`, its log-probability, and the two most likely tokens; *sum gains the
 * scored token's log-probability (the block's closing "sum=" line). */
static inline void write_score_line(FILE *out, int pos, int32_t scored, const double *logits,
				    int n_vocab, double *sum)
{
	double lse;
	int a = row_argmax_lse(logits, n_vocab, &lse), b = a == 0 ? 1 : 0;
	for (int v = 0; v < n_vocab; v++)
		if (v != a && logits[v] > logits[b])
			b = v;
	double lp = logits[scored] - lse;
	*sum += lp;
	fprintf(out, "%d %d %.9g %d:%.9g %d:%.9g\n", pos, scored, lp, a, logits[a] - lse, b,
		logits[b] - lse);
}

#endif /* BITNETD_BENCH_AGREEMENT_H */
