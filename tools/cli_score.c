/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli score: the log-probability of each token of a text given the tokens before it
 * (bn_score; the daemon encodes --text, so its ids are the daemon's).
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCORE_TIMEOUT_NS (-1)

static void print_scores(const struct bn_score_item *it)
{
	uint32_t shown = it->n_scored < it->cap ? it->n_scored : it->cap;
	for (uint32_t i = 0; i < shown; i++) {
		printf("%u %u %.9g", i + 1, it->logprobs[i].token, (double)it->logprobs[i].logprob);
		for (uint32_t k = 0; k < it->n_top; k++) {
			const struct bn_logprob *a = &it->top[(size_t)i * it->n_top + k];
			printf(" %u:%.9g", a->token, (double)a->logprob);
		}
		putchar('\n');
	}
	printf("sum=%.17g tokens=%u scored=%u\n", it->sum, it->n_tokens, it->n_scored);
}

int cli_score(struct bn_client *c, int argc, char **argv)
{
	const char *ids_text = NULL, *text = NULL;
	uint32_t n_top = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
			ids_text = argv[++i];
		else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
			text = argv[++i];
		else if (strcmp(argv[i], "--top") == 0 && i + 1 < argc) {
			if (cli_parse_u32(argv[++i], &n_top) < 0)
				return cli_usage("score", "--top needs a count, not '%s'", argv[i]);
		} else {
			return cli_usage("score", "unknown option '%s'", argv[i]);
		}
	}
	if (!ids_text == !text)
		return cli_usage("score", "give --ids \"1 2 3\" or --text TEXT (one of them)");
	struct bn_score_item it = { .text = text, .text_len = text ? strlen(text) : 0,
				    .n_top = n_top };
	uint32_t *ids = NULL;
	if (ids_text) {
		int n = cli_parse_ids(ids_text, &ids);
		if (n <= 0)
			return cli_usage("score", "--ids needs token ids, e.g. \"1 9906 1917\"");
		it.ids = ids;
		it.n_ids = (uint32_t)n;
	}
	struct bn_model_info mi;
	int rc = bn_model_info(c, &mi);
	it.cap = rc == 0 ? mi.context_length : 0;
	it.logprobs = calloc(it.cap ? it.cap : 1, sizeof(*it.logprobs));
	it.top = n_top ? calloc((size_t)it.cap * n_top, sizeof(*it.top)) : NULL;
	if (rc == 0 && (!it.logprobs || (n_top && !it.top)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = bn_score(c, &it, SCORE_TIMEOUT_NS);
	if (rc == 0)
		print_scores(&it);
	else if (rc == -BN_E_TOO_LONG && text)
		fprintf(stderr, "bitnet-cli: score: the text is %u tokens, the context %u\n",
			it.n_tokens, mi.context_length);
	free(it.logprobs);
	free(it.top);
	free(ids);
	return rc < 0 ? cli_failed("score", "scoring", rc) : 0;
}
