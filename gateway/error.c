/* SPDX-License-Identifier: MIT */
/*
 * error.c — OpenAI's error objects, the HTTP error a ring call's failure becomes, and JSON
 * strings of bytes that may not be valid UTF-8. Shared by the request parsers (job.c,
 * prompts.c), the runner and the handlers; it calls none of them.
 */
#define _GNU_SOURCE
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gw_error_set(struct gw_error *e, int status, const char *param, const char *fmt, ...)
{
	e->status = status;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	e->type = status == 401   ? "invalid_request_error"
		  : status == 429 ? "rate_limit_error"
		  : status >= 500 ? "server_error"
				  : "invalid_request_error";
	e->code = status == 401 ? "invalid_api_key" : status == 404 && param && !strcmp(param, "model")
								? "model_not_found"
								: NULL;
}

void gw_error_from_bn(struct gw_error *e, int bn_error, const char *what)
{
	int code = bn_error < 0 ? -bn_error : bn_error;
	const char *why = bn_strerror(bn_error);
	switch (code) {
	case BN_E_TOO_LONG:
	case BN_E_KV_SPACE:
		gw_error_set(e, 400, "max_tokens",
			     "%s: the prompt and max_tokens need more than the model's context or the daemon's memory allows (%s)",
			     what, why);
		e->code = "context_length_exceeded";
		return;
	case BN_E_TOKEN:
		gw_error_set(e, 400, "prompt", "%s: a token id is not in the vocabulary", what);
		return;
	case BN_E_EMPTY:
	case BN_E_INVALID:
		gw_error_set(e, 400, NULL, "%s: %s", what, why);
		return;
	case BN_E_BUSY:
	case BN_E_AGAIN:
	case BN_E_SHUTDOWN:
	case BN_E_DISCONNECTED:
	case ECONNREFUSED:
	case ENOENT:
		gw_error_set(e, 503, NULL, "%s: the daemon cannot take it now (%s)", what, why);
		return;
	case BN_E_TIMEOUT:
		gw_error_set(e, 504, NULL, "%s: it did not finish within the gateway's time (%s)",
			     what, why);
		return;
	case BN_E_MODEL_NOT_FOUND:
		gw_error_set(e, 404, "model", "%s: the daemon serves no such model (GET /v1/models "
			     "lists them)", what);
		return;
	case BN_E_MODEL_LOAD:
	case BN_E_MODEL_UNLOADED:
		/* the model is not there now (unloaded, or it could not load: the daemon's log and
		 * GET /v1/models say why); another try may find it */
		gw_error_set(e, 503, "model", "%s: the model is not available now (%s)", what, why);
		return;
	}
	gw_error_set(e, 500, NULL, "%s: %s", what, why);
}

json_t *gw_error_json(const struct gw_error *e)
{
	return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type",
			 e->type ? e->type : "invalid_request_error", "param",
			 e->param[0] ? json_string(e->param) : json_null(), "code",
			 e->code ? json_string(e->code) : json_null());
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if there is none. */
static size_t utf8_valid(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
	if (!len || len > n || (len == 2 && c < 0xc2) || (len == 4 && c > 0xf4))
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (len == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0)))
		return 0; /* overlong, surrogate */
	if (len == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
		return 0;
	return len;
}

json_t *gw_json_text(const char *s, size_t len)
{
	char *out = malloc(len * 3 + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		size_t k = utf8_valid((const unsigned char *)s + i, len - i);
		if (k) {
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		}
	}
	json_t *j = json_stringn(out, o);
	free(out);
	return j;
}
