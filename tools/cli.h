/* SPDX-License-Identifier: MIT */
#ifndef BITNET_CLI_H
#define BITNET_CLI_H

#include <stdint.h>

/* `bitnet-cli bench`: argv[0] is "bench". Returns the exit status. */
int cli_bench(const char *socket_path, int argc, char **argv);

/* Parses a decimal u32; returns 0 or -1. */
int cli_parse_u32(const char *text, uint32_t *out);

#endif /* BITNET_CLI_H */
