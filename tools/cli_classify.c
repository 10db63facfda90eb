/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli classify: which of some labels the model finds likeliest after a text (bn_classify;
 * the daemon encodes the text and the labels, and reads the text once for all of them).
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLASSIFY_TIMEOUT_NS (-1)

/* Splits a comma-separated list into labels, each with a leading space unless `as_given`
 * (a label continues the text after a word, where BPE vocabularies put the space in the
 * token). Returns the count, or -1 for an empty label or no memory. */
static int split_labels(const char *list, int as_given, char ***out)
{
	size_t n = 1;
	for (const char *p = list; *p; p++)
		n += *p == ',';
	char **labels = calloc(n, sizeof(*labels));
	if (!labels)
		return -1;
	const char *start = list;
	for (size_t i = 0; i < n; i++) {
		size_t len = strcspn(start, ",");
		if (len == 0 || !(labels[i] = malloc(len + 2))) {
			while (i)
				free(labels[--i]);
			free(labels);
			return -1;
		}
		snprintf(labels[i], len + 2, "%s%.*s", as_given ? "" : " ", (int)len, start);
		start += len + 1;
	}
	*out = labels;
	return (int)n;
}

static void print_labels(const struct bn_classify_item *it, char **labels)
{
	for (uint32_t i = 0; i < it->n_labels; i++) {
		const struct bn_label_score *s = &it->scores[i];
		printf("%u tokens=%u logprob=%.9g mean=%.9g prob=%.6f label=\"%s\"\n", i, s->n_tokens,
		       s->logprob, s->mean, s->prob, labels[i]);
	}
	printf("best=%u label=\"%s\"\n", it->best, labels[it->best]);
}

int cli_classify(struct bn_client *c, int argc, char **argv)
{
	const char *text = NULL, *list = NULL;
	int as_given = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
			text = argv[++i];
		else if (strcmp(argv[i], "--labels") == 0 && i + 1 < argc)
			list = argv[++i];
		else if (strcmp(argv[i], "--no-space") == 0)
			as_given = 1;
		else
			return cli_usage("classify", "unknown option '%s'", argv[i]);
	}
	if (!text || !list)
		return cli_usage("classify", "give --text TEXT and --labels \"a,b,c\"");
	char **labels = NULL;
	int n = split_labels(list, as_given, &labels);
	if (n < 0)
		return cli_usage("classify", "--labels needs non-empty labels separated by commas");
	struct bn_classify_item it = { .text = text, .text_len = strlen(text),
				       .labels = (const char *const *)labels,
				       .n_labels = (uint32_t)n,
				       .scores = calloc((size_t)n, sizeof(*it.scores)) };
	int rc = it.scores ? bn_classify(c, &it, CLASSIFY_TIMEOUT_NS) : -ENOMEM;
	if (rc == 0)
		print_labels(&it, labels);
	for (int i = 0; i < n; i++)
		free(labels[i]);
	free(labels);
	free(it.scores);
	return rc < 0 ? cli_failed("classify", "classifying", rc) : 0;
}
