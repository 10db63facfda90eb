/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli embed: one vector per input (bn_embed_batch; the daemon encodes --text, so its
 * ids are the daemon's), each printed whole so a test can compare it bit for bit.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMBED_TIMEOUT_NS (-1)
#define MAX_INPUTS 256

static const char *pooling_name(uint32_t p)
{
	static const char *const names[] = { "none", "mean", "cls", "last" };
	return p < 4 ? names[p] : "unknown";
}

/* A header line per input (or its error), then its values, %.9g each: every float back. */
static void print_item(size_t k, const struct bn_embed_item *it)
{
	if (it->error) {
		printf("input=%zu error=%s tokens=%u\n", k, bn_strerror(it->error), it->n_tokens);
		return;
	}
	printf("input=%zu dim=%u tokens=%u pooling=%s model=%s\n", k, it->dim, it->n_tokens,
	       pooling_name(it->pooling), it->trained ? "embedding" : "generative");
	for (uint32_t i = 0; i < it->dim && i < it->cap; i++)
		printf(i ? " %.9g" : "%.9g", (double)it->vector[i]);
	putchar('\n');
}

/* The inputs in the order given: --text TEXT or --ids "...", each one item. */
static int parse_inputs(int argc, char **argv, struct bn_embed_item *items, size_t *n,
			uint32_t *flags)
{
	for (int i = 1; i < argc; i++) {
		int text = strcmp(argv[i], "--text") == 0, ids = strcmp(argv[i], "--ids") == 0;
		if (strcmp(argv[i], "--special") == 0) {
			*flags |= BN_REQ_PARSE_SPECIAL;
		} else if (strcmp(argv[i], "--no-bos") == 0) {
			*flags |= BN_REQ_NO_BOS;
		} else if ((text || ids) && i + 1 < argc && *n < MAX_INPUTS) {
			struct bn_embed_item *it = &items[(*n)++];
			const char *arg = argv[++i];
			if (text) {
				it->text = arg;
				it->text_len = strlen(arg);
				continue;
			}
			uint32_t *v = NULL;
			int count = cli_parse_ids(arg, &v);
			if (count <= 0)
				return cli_usage("embed", "--ids needs token ids, e.g. \"1 9906 1917\"");
			it->ids = v;
			it->n_ids = (uint32_t)count;
		} else {
			return cli_usage("embed", "unknown option or too many inputs at '%s'", argv[i]);
		}
	}
	return *n ? 0 : cli_usage("embed", "give --text TEXT or --ids \"1 2 3\" (repeatable)");
}

int cli_embed(struct bn_client *c, int argc, char **argv)
{
	static struct bn_embed_item items[MAX_INPUTS];
	size_t n = 0;
	uint32_t flags = 0;
	int rc = parse_inputs(argc, argv, items, &n, &flags);
	struct bn_model_info mi;
	if (rc == 0 && (rc = bn_model_info(c, &mi)) < 0)
		rc = cli_failed("embed", "asking the model", rc);
	for (size_t k = 0; rc == 0 && k < n; k++) {
		items[k].flags = items[k].text ? flags : 0;
		items[k].cap = mi.max_output_tokens;
		items[k].vector = calloc(items[k].cap, sizeof(float));
		if (!items[k].vector)
			rc = cli_failed("embed", "allocating", -ENOMEM);
	}
	struct bn_batch_result br = { 0 };
	if (rc == 0 && (rc = bn_embed_batch(c, items, n, &br, EMBED_TIMEOUT_NS)) < 0)
		rc = cli_failed("embed", "embedding", rc);
	for (size_t k = 0; rc == 0 && k < n; k++)
		print_item(k, &items[k]);
	for (size_t k = 0; k < n; k++) {
		free(items[k].vector);
		free((void *)items[k].ids);
	}
	return rc ? rc : br.n_failed ? 1 : 0;
}
