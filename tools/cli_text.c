/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli's text commands: tokenize, detokenize, chat; and the streamed text output that
 * generate shares. Text goes through libbitnet-client with the vocabulary the daemon serves,
 * so the ids are the daemon's.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECOND_NS 1000000000LL

int cli_text_vocab(struct bn_client *c, const char *cmd, const struct bn_vocab **out)
{
	int rc = bn_client_vocab(c, out);
	if (rc == -BN_E_INVALID) {
		fprintf(stderr, "bitnet-cli %s: the daemon serves no vocabulary for this model "
				"(loopback backend, no tokenizer in the model file, or one it refused: "
				"see its log); use token ids\n", cmd);
		return 1;
	}
	if (rc < 0)
		return cli_failed(cmd, "fetching the vocabulary", rc);
	if (bn_vocab_kind(*out) != BN_VOCAB_SPM && bn_vocab_kind(*out) != BN_VOCAB_BPE) {
		fprintf(stderr, "bitnet-cli %s: the model's vocabulary is neither SentencePiece-style "
				"nor byte-level BPE (tokenizer.ggml.model is not \"llama\" or \"gpt2\"): "
				"text cannot be encoded; use token ids\n", cmd);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Streamed output                                                                             */
/* ------------------------------------------------------------------------------------------ */

int cli_output_init(struct cli_output *o, const struct bn_vocab *v, uint32_t detok_flags)
{
	*o = (struct cli_output){ .vocab = v };
	return v ? bn_text_stream_new(v, detok_flags, &o->stream) : 0;
}

void cli_output_free(struct cli_output *o)
{
	bn_text_stream_free(o->stream);
	free(o->ids);
}

/* Keeps the ids (for --print-ids) and prints their text, or the ids without a vocabulary. */
static int output_take(struct cli_output *o, const uint32_t *ids, uint32_t k)
{
	if (o->n + k > o->cap) {
		uint32_t cap = 2 * (o->n + k);
		uint32_t *grown = realloc(o->ids, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		o->ids = grown;
		o->cap = cap;
	}
	memcpy(o->ids + o->n, ids, k * sizeof(*ids));
	if (!o->stream) {
		for (uint32_t i = 0; i < k; i++)
			printf(o->n + i ? " %u" : "%u", ids[i]);
		o->n += k;
		return 0;
	}
	o->n += k;
	const char *text;
	size_t len;
	int rc = bn_text_stream_push(o->stream, ids, k, &text, &len);
	if (rc == 0)
		fwrite(text, 1, len, stdout);
	return rc;
}

int cli_output_stream(struct bn_handle *h, struct cli_output *o, int64_t timeout_ns)
{
	uint32_t buf[256];
	for (;;) {
		int rc = bn_wait_tokens(h, o->n, timeout_ns);
		int k;
		while ((k = bn_read_tokens(h, o->n, buf, 256)) > 0) {
			int err = output_take(o, buf, (uint32_t)k);
			if (err < 0)
				return err;
			fflush(stdout);
		}
		if (rc < 0)
			return rc;
		struct bn_result r;
		if (bn_result(h, &r) == 0 && o->n >= r.n_tokens)
			return 0;
	}
}

int cli_output_finish(struct cli_output *o)
{
	const char *text;
	size_t len;
	int rc = o->stream ? bn_text_stream_finish(o->stream, &text, &len) : 0;
	if (rc == 0 && o->stream)
		fwrite(text, 1, len, stdout);
	return rc;
}

static void print_ids(const uint32_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf(i ? " %u" : "%u", ids[i]);
	putchar('\n');
}

int cli_tokenize(struct bn_client *c, int argc, char **argv)
{
	uint32_t flags = BN_TOK_ADD_BOS;
	int i = 1, no_bos = 0;
	for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
		if (strcmp(argv[i], "--special") == 0)
			flags |= BN_TOK_PARSE_SPECIAL;
		else if (strcmp(argv[i], "--no-bos") == 0)
			no_bos = 1;
		else
			return cli_usage("tokenize", "unknown option '%s'", argv[i]);
	}
	if (i + 1 != argc)
		return cli_usage("tokenize", "give one TEXT (- reads standard input)");
	const struct bn_vocab *v;
	int rc = cli_text_vocab(c, "tokenize", &v);
	if (rc)
		return rc;
	if (no_bos || !bn_vocab_add_bos(v))
		flags &= ~(uint32_t)BN_TOK_ADD_BOS;
	if (!no_bos && bn_vocab_add_eos(v)) /* as the daemon's TOKENIZE op: a whole input */
		flags |= BN_TOK_ADD_EOS;
	size_t len = strlen(argv[i]);
	char *text = strcmp(argv[i], "-") == 0 ? cli_read_all(stdin, &len) : strdup(argv[i]);
	if (!text)
		return cli_failed("tokenize", "reading the text", -ENOMEM);
	int n = bn_tokenize_ex(v, text, len, flags, NULL, 0);
	uint32_t *ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof(*ids)) : NULL;
	if (n >= 0 && ids)
		n = bn_tokenize_ex(v, text, len, flags, ids, (uint32_t)n);
	rc = n < 0 ? cli_failed("tokenize", "encoding", n) : !ids ? cli_failed("tokenize", "", -ENOMEM) : 0;
	if (rc == 0)
		print_ids(ids, (size_t)n);
	free(ids);
	free(text);
	return rc;
}

int cli_detokenize(struct bn_client *c, int argc, char **argv)
{
	uint32_t flags = 0;
	const char *ids_text = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--special") == 0)
			flags |= BN_DETOK_SPECIAL;
		else if (strcmp(argv[i], "--ids") == 0 && i + 1 < argc)
			ids_text = argv[++i];
		else
			return cli_usage("detokenize", "unknown option '%s'", argv[i]);
	}
	uint32_t *ids = NULL;
	int n = ids_text ? cli_parse_ids(ids_text, &ids) : -1;
	if (n < 0)
		return cli_usage("detokenize", "--ids needs token ids, e.g. \"9906 1917\"");
	const struct bn_vocab *v;
	int rc = cli_text_vocab(c, "detokenize", &v);
	int len = rc ? 0 : bn_detokenize_ex(v, ids, (uint32_t)n, flags, NULL, 0);
	char *text = !rc && len >= 0 ? malloc((size_t)len + 1) : NULL;
	if (!rc && len < 0)
		rc = cli_failed("detokenize", "decoding", len);
	else if (!rc && !text)
		rc = cli_failed("detokenize", "decoding", -ENOMEM);
	if (!rc) {
		bn_detokenize_ex(v, ids, (uint32_t)n, flags, text, (size_t)len + 1);
		fwrite(text, 1, (size_t)len, stdout);
		putchar('\n');
	}
	free(text);
	free(ids);
	return rc;
}
