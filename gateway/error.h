/* SPDX-License-Identifier: MIT */
/*
 * error.h — an error as the gateway answers it (OpenAI's error object and its HTTP status), and
 * JSON text from bytes that may not be UTF-8.
 */
#ifndef BITNET_GATEWAY_ERROR_H
#define BITNET_GATEWAY_ERROR_H

#include "bitnet_client.h"

#include <jansson.h>
#include <stddef.h>

/* An error as OpenAI's error object says it, with its HTTP status. */
struct gw_error {
	int status;               /* 0: none */
	char message[384];
	char param[64];           /* "" when no parameter is to blame */
	const char *type;         /* "invalid_request_error", ... */
	const char *code;         /* NULL or "model_not_found", ... */
};

void gw_error_set(struct gw_error *e, int status, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The HTTP error a failed ring call or request becomes. */
void gw_error_from_bn(struct gw_error *e, int bn_error, const char *what);
/* {"error": {...}} */
json_t *gw_error_json(const struct gw_error *e);

/* A JSON string of bytes that may not be valid UTF-8 (a token's bytes): invalid sequences
 * become U+FFFD. */
json_t *gw_json_text(const char *s, size_t len);

#endif /* BITNET_GATEWAY_ERROR_H */
