/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli's shared helpers (cli.h): usage and failure messages, number and id-list
 * parsing, reading standard input whole. Every command file uses them; they use none.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"
#include "bitnet_shm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int cli_usage(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "bitnet-cli %s: ", cmd);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 2;
}

int cli_failed(const char *cmd, const char *what, int rc)
{
	fprintf(stderr, "bitnet-cli %s: %s: %s\n", cmd, what, bn_strerror(rc));
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* tokenize, detokenize                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Standard input to its end, bytes as they are (NUL included). */
char *cli_read_all(FILE *f, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap)
			break;
		char *grown = realloc(buf, 2 * cap);
		if (!grown) {
			free(buf);
			return NULL;
		}
		buf = grown;
		cap *= 2;
	}
	if (buf && ferror(f)) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}

int cli_parse_u32(const char *text, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

int cli_parse_ids(const char *text, uint32_t **out)
{
	size_t cap = 16, n = 0;
	uint32_t *ids = malloc(cap * sizeof(*ids));
	const char *p = text;
	while (ids) {
		while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		unsigned long v = strtoul(p, &end, 10);
		if (errno || end == p || *p == '-' || *p == '+' || v > UINT32_MAX ||
		    (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
			free(ids);
			return -1;
		}
		if (n == cap) {
			uint32_t *grown = realloc(ids, 2 * cap * sizeof(*ids));
			if (!grown)
				break;
			ids = grown;
			cap *= 2;
		}
		ids[n++] = (uint32_t)v;
		p = end;
	}
	if (!ids)
		return -1;
	*out = ids;
	return (int)n;
}

int cli_connect_failed(const char *socket_path, int rc)
{
	const char *path = socket_path && *socket_path ? socket_path : getenv(BN_SOCKET_ENV);
	if (!path || !*path)
		path = BN_DEFAULT_SOCKET_PATH;
	const char *why = rc == -ENOENT	      ? "no such socket (is bitnetd running, and listening there?)"
			  : rc == -ECONNREFUSED ? "nothing accepts there: the daemon that made the socket is gone"
			  : rc == -EACCES	      ? "permission denied: whoever may use the daemon is in the socket's group (bitnetd's --socket-mode)"
						      : bn_strerror(rc);
	fprintf(stderr, "bitnet-cli: cannot connect to bitnetd at %s: %s; choose another socket with --socket PATH or $BITNETD_SOCKET\n",
		path, why);
	return 1;
}
