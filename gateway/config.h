/* SPDX-License-Identifier: MIT */
/*
 * config.h — bitnet-gateway's command line and its API key file.
 */
#ifndef BITNET_GATEWAY_CONFIG_H
#define BITNET_GATEWAY_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define GW_KEY_MAX 256 /* bytes of one API key */

/* One API key of --api-key-file: the daemon sessions made for it carry its admission weight;
 * at most max_requests of its requests (choices, counted one by one) run at once. */
struct gw_key {
	char secret[GW_KEY_MAX + 1];
	size_t len;
	uint32_t weight;          /* bn_connect_weighted's; 1 by default */
	uint32_t max_requests;    /* 0: --max-requests-per-key */
	char name[64];            /* for logs and metrics: "key1", ... (never the secret) */
};

struct gw_config {
	const char *socket_path;  /* NULL: libbitnet-client's default ($BITNETD_SOCKET, ...) */
	char host[256];           /* --listen HOST:PORT */
	uint16_t port;
	const char *api_key_file; /* NULL: no authentication */
	struct gw_key *keys;      /* from the file */
	size_t n_keys;
	size_t max_body;          /* bytes of a request body (413 beyond) */
	uint32_t max_connections; /* HTTP connections at once */
	uint32_t max_requests_per_key;
	uint32_t header_timeout_s; /* a connection idle this long is closed (slow headers too) */
	uint32_t request_timeout_s; /* one request's whole run, daemon included */
	const char *model_name;   /* --served-model-name: the id /v1/models reports */
	int log_level;
};

/* Parses argv. 0: run; 1: --help or --version printed (exit 0); -1: a usage error printed. */
int gw_config_parse(struct gw_config *cfg, int argc, char **argv);
void gw_config_free(struct gw_config *cfg);

/* The key file: one key per line, then optional `weight=N` and `requests=N`; blank lines and
 * lines starting with # are skipped. 0, or -1 with a message naming the line in err. */
int gw_keys_load(const char *path, struct gw_key **keys, size_t *n, char *err, size_t err_len);

/* The key that `presented` is (constant time in the presented length, whichever key it
 * matches, or none), or NULL. */
const struct gw_key *gw_key_find(const struct gw_config *cfg, const char *presented, size_t len);

#endif /* BITNET_GATEWAY_CONFIG_H */
