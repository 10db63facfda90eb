/* SPDX-License-Identifier: MIT */
#ifndef BITNET_MODEL_CMD_H
#define BITNET_MODEL_CMD_H

/* What bitnet-model's option-taking subcommands (pull, cache) share: their usage errors. */

/* "bitnet-model CMD: WHAT[ ARG] (see bitnet-model CMD --help)" on stderr; returns 2, the
 * exit status of bad usage. */
int model_cmd_usage(const char *cmd, const char *what, const char *arg);

/* An option getopt_long (optstring ":") refused: opt ':' (it needs a value) or another (not
 * one of cmd's), arg as given; model_cmd_usage's return. */
int model_cmd_bad_option(const char *cmd, int opt, const char *arg);

#endif /* BITNET_MODEL_CMD_H */
