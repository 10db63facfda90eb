/* SPDX-License-Identifier: MIT */
/*
 * config.c — bitnet-gateway's options and API keys.
 */
#define _GNU_SOURCE
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GW_VERSION "1.0.0"

static const char usage[] =
	"usage: bitnet-gateway [options]\n"
	"The OpenAI-compatible HTTP API of a bitnetd daemon, as one of its ring clients.\n"
	"  --socket PATH            the daemon's socket (default: $BITNETD_SOCKET, else\n"
	"                           libbitnet-client's default path)\n"
	"  --listen HOST:PORT       where to listen (default 127.0.0.1:8080; [::1]:8080 for IPv6)\n"
	"  --api-key-file FILE      require `Authorization: Bearer KEY`; one key per line, then\n"
	"                           optional weight=N (admission weight) and requests=N\n"
	"  --max-body-bytes N       largest request body (default 8388608; 413 beyond)\n"
	"  --max-connections N      HTTP connections at once (default 1024)\n"
	"  --max-requests-per-key N requests (each choice counts) one key runs at once\n"
	"                           (default 256; 429 beyond)\n"
	"  --header-timeout-s N     a request's headers must arrive within N s, and an idle\n"
	"                           connection is closed after N s (default 30)\n"
	"  --request-timeout-s N    one request's whole run (default 600)\n"
	"  --served-model-name NAME the model id of /v1/models (default: the daemon's name)\n"
	"  --log-level LEVEL        error, warn, info (default) or debug\n"
	"  --help, --version\n";

enum { OPT_SOCKET = 256, OPT_LISTEN, OPT_KEYS, OPT_BODY, OPT_CONNS, OPT_PER_KEY, OPT_HEADER_TO,
       OPT_REQUEST_TO, OPT_MODEL, OPT_LOG, OPT_HELP, OPT_VERSION };

static const struct option options[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "api-key-file", required_argument, NULL, OPT_KEYS },
	{ "max-body-bytes", required_argument, NULL, OPT_BODY },
	{ "max-connections", required_argument, NULL, OPT_CONNS },
	{ "max-requests-per-key", required_argument, NULL, OPT_PER_KEY },
	{ "header-timeout-s", required_argument, NULL, OPT_HEADER_TO },
	{ "request-timeout-s", required_argument, NULL, OPT_REQUEST_TO },
	{ "served-model-name", required_argument, NULL, OPT_MODEL },
	{ "log-level", required_argument, NULL, OPT_LOG },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* A decimal in [lo, hi]. */
static int parse_number(const char *name, const char *text, uint64_t lo, uint64_t hi,
			uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || end == text || *end || text[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "bitnet-gateway: --%s wants a number from %llu to %llu, not \"%s\"\n",
			name, (unsigned long long)lo, (unsigned long long)hi, text);
		return -1;
	}
	*out = v;
	return 0;
}

/* HOST:PORT, [V6HOST]:PORT or :PORT (every address). */
static int parse_listen(struct gw_config *cfg, const char *text)
{
	const char *colon = strrchr(text, ':');
	const char *host = text, *host_end = colon;
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (!close || close[1] != ':')
			colon = NULL;
		host = text + 1;
		host_end = close;
	}
	uint64_t port;
	if (!colon || (size_t)(host_end - host) >= sizeof(cfg->host) ||
	    parse_number("listen's port", colon + 1, 1, 65535, &port) < 0) {
		fprintf(stderr, "bitnet-gateway: --listen wants HOST:PORT, [HOST]:PORT or :PORT, not \"%s\"\n",
			text);
		return -1;
	}
	memcpy(cfg->host, host, (size_t)(host_end - host));
	cfg->host[host_end - host] = '\0';
	cfg->port = (uint16_t)port;
	return 0;
}

static int parse_level(const char *text)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	for (int i = 0; i < 4; i++)
		if (strcmp(text, names[i]) == 0)
			return i;
	fprintf(stderr, "bitnet-gateway: --log-level is error, warn, info or debug, not \"%s\"\n",
		text);
	return -1;
}

static int apply(struct gw_config *cfg, int opt, const char *arg)
{
	uint64_t v;
	switch (opt) {
	case OPT_SOCKET: cfg->socket_path = arg; return 0;
	case OPT_LISTEN: return parse_listen(cfg, arg);
	case OPT_KEYS: cfg->api_key_file = arg; return 0;
	case OPT_MODEL: cfg->model_name = arg; return 0;
	case OPT_LOG: return (cfg->log_level = parse_level(arg)) < 0 ? -1 : 0;
	case OPT_BODY:
		if (parse_number("max-body-bytes", arg, 1024, 1u << 30, &v) < 0)
			return -1;
		cfg->max_body = (size_t)v;
		return 0;
	case OPT_CONNS:
		if (parse_number("max-connections", arg, 1, 65536, &v) < 0)
			return -1;
		cfg->max_connections = (uint32_t)v;
		return 0;
	case OPT_PER_KEY:
		if (parse_number("max-requests-per-key", arg, 1, 65536, &v) < 0)
			return -1;
		cfg->max_requests_per_key = (uint32_t)v;
		return 0;
	case OPT_HEADER_TO:
		if (parse_number("header-timeout-s", arg, 1, 3600, &v) < 0)
			return -1;
		cfg->header_timeout_s = (uint32_t)v;
		return 0;
	case OPT_REQUEST_TO:
		if (parse_number("request-timeout-s", arg, 1, 86400, &v) < 0)
			return -1;
		cfg->request_timeout_s = (uint32_t)v;
		return 0;
	}
	return -1;
}

int gw_config_parse(struct gw_config *cfg, int argc, char **argv)
{
	*cfg = (struct gw_config){ .host = "127.0.0.1", .port = 8080, .max_body = 8u << 20,
				   .max_connections = 1024, .max_requests_per_key = 256,
				   .header_timeout_s = 30, .request_timeout_s = 600,
				   .log_level = GW_LOG_INFO };
	optind = 1;
	for (int opt; (opt = getopt_long(argc, argv, "", options, NULL)) != -1;) {
		if (opt == OPT_HELP || opt == OPT_VERSION) {
			fputs(opt == OPT_HELP ? usage : "bitnet-gateway " GW_VERSION "\n", stdout);
			return 1;
		}
		if (opt == '?' || apply(cfg, opt, optarg) < 0) {
			fputs(usage, stderr);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "bitnet-gateway: unexpected argument \"%s\"\n%s", argv[optind], usage);
		return -1;
	}
	char err[512];
	if (cfg->api_key_file &&
	    gw_keys_load(cfg->api_key_file, &cfg->keys, &cfg->n_keys, err, sizeof(err)) < 0) {
		fprintf(stderr, "bitnet-gateway: %s\n", err);
		return -1;
	}
	return 0;
}

void gw_config_free(struct gw_config *cfg)
{
	if (cfg->keys)
		memset(cfg->keys, 0, cfg->n_keys * sizeof(*cfg->keys)); /* no secret left behind */
	free(cfg->keys);
	cfg->keys = NULL;
	cfg->n_keys = 0;
}

/* ---- the key file ------------------------------------------------------------------------ */

/* One `name=N` attribute of a key line into *weight or *requests. */
static int key_attribute(const char *word, struct gw_key *k)
{
	unsigned long v;
	char *end;
	const char *eq = strchr(word, '=');
	if (!eq)
		return -1;
	errno = 0;
	v = strtoul(eq + 1, &end, 10);
	if (errno || end == eq + 1 || *end || eq[1] == '-' || v < 1 || v > 65536)
		return -1;
	if (strncmp(word, "weight=", 7) == 0)
		k->weight = (uint32_t)v;
	else if (strncmp(word, "requests=", 9) == 0)
		k->max_requests = (uint32_t)v;
	else
		return -1;
	return 0;
}

/* A non-blank, non-comment line: the key, then attributes. */
static int parse_key_line(char *line, struct gw_key *k, size_t index)
{
	char *save = NULL, *word = strtok_r(line, " \t", &save);
	size_t len = strlen(word);
	if (len > GW_KEY_MAX)
		return -1;
	memcpy(k->secret, word, len + 1);
	k->len = len;
	k->weight = 1;
	snprintf(k->name, sizeof(k->name), "key%zu", index + 1);
	while ((word = strtok_r(NULL, " \t", &save)) != NULL)
		if (key_attribute(word, k) < 0)
			return -1;
	return 0;
}

int gw_keys_load(const char *path, struct gw_key **keys, size_t *n, char *err, size_t err_len)
{
	FILE *f = fopen(path, "r");
	*keys = NULL;
	*n = 0;
	if (!f) {
		snprintf(err, err_len, "cannot read the API key file %s: %s", path, strerror(errno));
		return -1;
	}
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;
	for (size_t number = 1; rc == 0 && getline(&line, &cap, f) >= 0; number++) {
		line[strcspn(line, "\r\n")] = '\0';
		char *p = line;
		while (isspace((unsigned char)*p))
			p++;
		if (!*p || *p == '#')
			continue;
		struct gw_key *grown = realloc(*keys, (*n + 1) * sizeof(**keys));
		if (!grown || parse_key_line(p, &grown[*n], *n) < 0) {
			snprintf(err, err_len,
				 grown ? "%s line %zu: a key (at most %d bytes), then weight=N or requests=N (1 to 65536)"
				       : "%s line %zu: out of memory",
				 path, number, GW_KEY_MAX);
			rc = -1;
		}
		if (grown)
			*keys = grown;
		if (rc == 0)
			(*n)++;
	}
	if (line)
		memset(line, 0, cap);
	free(line);
	fclose(f);
	if (rc == 0 && *n == 0) {
		snprintf(err, err_len, "the API key file %s holds no key", path);
		rc = -1;
	}
	if (rc < 0) {
		free(*keys);
		*keys = NULL;
		*n = 0;
	}
	return rc;
}

/* Whether a (presented, len) equals the key, in time that depends on len only. */
static int same_key(const char *presented, size_t len, const struct gw_key *k)
{
	volatile unsigned char diff = (unsigned char)(len != k->len);
	for (size_t i = 0; i < len; i++)
		diff |= (unsigned char)(presented[i] ^ k->secret[i % (k->len ? k->len : 1)]);
	return diff == 0;
}

const struct gw_key *gw_key_find(const struct gw_config *cfg, const char *presented, size_t len)
{
	const struct gw_key *found = NULL;
	for (size_t i = 0; i < cfg->n_keys; i++) /* every key compared: no early exit */
		if (same_key(presented, len, &cfg->keys[i]) && !found)
			found = &cfg->keys[i];
	return found;
}
