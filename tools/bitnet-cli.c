/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli — talk to bitnetd from a shell: info, generate, stats, bench.
 * Output is meant for scripts: key=value lines, or ids on one line.
 */
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
	"Usage: bitnet-cli [--socket PATH] COMMAND [OPTIONS]\n"
	"\n"
	"Commands:\n"
	"  info                       model and backend, as key=value lines\n"
	"  generate --ids \"1 2 3\"     generate from token ids; prints the generated ids\n"
	"           [--max-tokens N]  on one line as they arrive (default 16)\n"
	"           [--ignore-eos]    keep going past the end-of-sequence token\n"
	"           [--timeout-ms N]  give up (and cancel) after N ms (default: no limit)\n"
	"  stats                      daemon metrics (Prometheus text format)\n"
	"  bench [OPTIONS]            transport benchmark; see 'bitnet-cli bench --help'\n"
	"\n"
	"The socket is --socket, else $BITNETD_SOCKET, else " BN_DEFAULT_SOCKET_PATH ".\n"
	"On failure the error name goes to stderr and the exit status is 1 (2: bad usage).\n";

static int fail(const char *what, int rc)
{
	fprintf(stderr, "bitnet-cli: %s: %s\n", what, bn_strerror(rc));
	return 1;
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

/* Parses space- or comma-separated ids. Returns the count, or -1. */
static int parse_ids(const char *text, uint32_t **out)
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
		if (errno || end == p || *p == '-' || v > UINT32_MAX) {
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

static int cmd_info(struct bn_client *c)
{
	struct bn_model_info mi;
	int rc = bn_model_info(c, &mi);
	if (rc < 0)
		return fail("info", rc);
	printf("model=%s\nvocab_size=%u\ncontext_length=%u\nbos_id=%u\neos_id=%u\nbackend=%s\n"
	       "max_prompt_tokens=%u\nmax_output_tokens=%u\nslots=%u\n",
	       mi.name, mi.vocab_size, mi.context_length, mi.bos_id, mi.eos_id, mi.backend,
	       mi.max_prompt_tokens, mi.max_output_tokens, mi.slots);
	return 0;
}

/* Prints tokens as they arrive; returns the request's outcome as bn_generate would. */
static int stream_tokens(struct bn_handle *h, int64_t timeout_ns)
{
	uint32_t have = 0, buf[256];
	for (;;) {
		int rc = bn_wait_tokens(h, have, timeout_ns);
		int k;
		while ((k = bn_read_tokens(h, have, buf, 256)) > 0) {
			for (int i = 0; i < k; i++)
				printf(have + (uint32_t)i ? " %u" : "%u", buf[i]);
			have += (uint32_t)k;
			fflush(stdout);
		}
		if (rc < 0)
			return rc;
		struct bn_result r;
		if (bn_result(h, &r) == 0) {
			if (r.status == BN_STATUS_LENGTH || r.status == BN_STATUS_EOS)
				return 0;
			if (r.status == BN_STATUS_CANCELLED)
				return -BN_E_CANCELLED;
			if (r.status == BN_STATUS_SHUTDOWN)
				return -BN_E_SHUTDOWN;
			return r.error ? r.error : -BN_E_PROTOCOL;
		}
	}
}

static int cmd_generate(struct bn_client *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ids", required_argument, NULL, 'i' },
		{ "max-tokens", required_argument, NULL, 'n' },
		{ "ignore-eos", no_argument, NULL, 'e' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	const char *ids_text = NULL;
	struct bn_request req = { .max_tokens = 16 };
	uint32_t timeout_ms = 0;
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (opt == 'i')
			ids_text = optarg;
		else if (opt == 'n' && cli_parse_u32(optarg, &req.max_tokens) == 0)
			continue;
		else if (opt == 'e')
			req.flags |= BN_REQ_IGNORE_EOS;
		else if (opt == 't' && cli_parse_u32(optarg, &timeout_ms) == 0)
			continue;
		else
			return fprintf(stderr, "bitnet-cli generate: bad option\n"), 2;
	}
	uint32_t *ids = NULL;
	int n = ids_text ? parse_ids(ids_text, &ids) : -1;
	if (n < 0)
		return fprintf(stderr, "bitnet-cli generate: --ids needs token ids, e.g. \"1 2 3\"\n"), 2;
	req.prompt = ids;
	req.n_prompt = (uint32_t)n;
	struct bn_handle *h;
	int rc = bn_submit(c, &req, &h);
	free(ids);
	if (rc < 0)
		return fail("generate", rc);
	rc = stream_tokens(h, timeout_ms ? (int64_t)timeout_ms * 1000000 : -1);
	printf("\n");
	bn_release(h);
	return rc < 0 ? fail("generate", rc) : 0;
}

static int cmd_stats(struct bn_client *c)
{
	size_t cap = 1 << 16;
	char *buf = malloc(cap);
	if (!buf)
		return fail("stats", -ENOMEM);
	int rc = bn_daemon_stats(c, buf, cap);
	if (rc >= 0)
		fputs(buf, stdout);
	free(buf);
	return rc < 0 ? fail("stats", rc) : 0;
}

int main(int argc, char **argv)
{
	const char *socket_path = NULL;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
			socket_path = argv[++i];
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return fputs(usage_text, stdout), 0;
		else
			return fputs(usage_text, stderr), 2;
	}
	if (i >= argc)
		return fputs(usage_text, stderr), 2;
	const char *cmd = argv[i];
	if (strcmp(cmd, "bench") == 0)
		return cli_bench(socket_path, argc - i, argv + i);
	if (strcmp(cmd, "info") && strcmp(cmd, "generate") && strcmp(cmd, "stats"))
		return fprintf(stderr, "bitnet-cli: unknown command '%s'\n", cmd), 2;
	struct bn_client *c;
	int rc = bn_connect(socket_path, 0, &c);
	if (rc < 0)
		return fail("connect", rc);
	if (strcmp(cmd, "info") == 0)
		rc = cmd_info(c);
	else if (strcmp(cmd, "generate") == 0)
		rc = cmd_generate(c, argc - i, argv + i);
	else
		rc = cmd_stats(c);
	bn_disconnect(c);
	return rc;
}
