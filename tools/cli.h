/* SPDX-License-Identifier: MIT */
#ifndef BITNET_CLI_H
#define BITNET_CLI_H

#include <stdint.h>

/* `bitnet-cli bench`: argv[0] is "bench". Returns the exit status. */
int cli_bench(const char *socket_path, int argc, char **argv);

/* Parses a decimal u32; returns 0 or -1. */
int cli_parse_u32(const char *text, uint32_t *out);
/* Parses space- or comma-separated ids into a malloc'd array. Returns the count, or -1. */
int cli_parse_ids(const char *text, uint32_t **out);

/* All of f, malloc'd (not NUL-terminated), its length in *len; NULL on a read error or no
 * memory. */
#include <stdio.h>
char *cli_read_all(FILE *f, size_t *len);

/* "bitnet-cli CMD: message" on stderr; returns 2, the exit status of bad usage. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Why a connect to the daemon failed, naming the socket it tried (the option, else
 * $BITNETD_SOCKET, else the default) and how to choose another; returns 1. */
int cli_connect_failed(const char *socket_path, int rc);
/* "bitnet-cli CMD: what: the error's name" on stderr; returns 1. */
int cli_failed(const char *cmd, const char *what, int rc);

struct bn_client;
struct bn_vocab;
struct bn_handle;
struct bn_text_stream;

/* The client's vocabulary for a text command; 0, or the exit status after saying why (no
 * vocabulary, or one whose text cannot be encoded). */
int cli_text_vocab(struct bn_client *c, const char *cmd, const struct bn_vocab **out);

/* Generated tokens as they arrive: their text (valid UTF-8, through a bn_text_stream) with a
 * vocabulary, else their ids; the ids are kept either way. */
struct cli_output {
	const struct bn_vocab *vocab;
	struct bn_text_stream *stream;
	uint32_t *ids;
	uint32_t n, cap;
};
int cli_output_init(struct cli_output *o, const struct bn_vocab *v, uint32_t detok_flags);
/* Prints tokens until the request ends: 0, or a wait's error. */
int cli_output_stream(struct bn_handle *h, struct cli_output *o, int64_t timeout_ns);
/* Prints what the stream held back (U+FFFD for a character that never ended). */
int cli_output_finish(struct cli_output *o);
void cli_output_free(struct cli_output *o);

/* The text commands; argv[0] is the command. Return the exit status. */
int cli_tokenize(struct bn_client *c, int argc, char **argv);
int cli_detokenize(struct bn_client *c, int argc, char **argv);
int cli_chat(struct bn_client *c, int argc, char **argv);
int cli_score(struct bn_client *c, int argc, char **argv);
int cli_perplexity(struct bn_client *c, int argc, char **argv);
int cli_classify(struct bn_client *c, int argc, char **argv);
int cli_embed(struct bn_client *c, int argc, char **argv);

#endif /* BITNET_CLI_H */
