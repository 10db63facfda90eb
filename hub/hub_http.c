/* SPDX-License-Identifier: MIT */
/*
 * hub_http.c — GET requests with libcurl, redirects followed by hand.
 *
 * The Hub answers a download with a redirect to a CDN host that signs its own URLs. curl
 * could follow it, and recent curl leaves a custom Authorization header behind on another
 * host, but "the token goes only to the Hub" is a promise worth keeping in code that is ours
 * and tested: every hop is its own request, and the token is added only when that hop's
 * origin (scheme, host, port) is the endpoint's.
 */
#include "hub_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_HOPS 10
#define URL_MAX 16384 /* a CDN's signed URL runs to a few kB */
#define CONNECT_TIMEOUT_S 15L
/* A transfer that moves no byte for this long is cut, and resumed like one the server cut. */
#define STALL_S 30L

struct hub_http {
	CURL *curl;
	const struct bn_hub_options *o;
	char origin[1200];                 /* the endpoint's scheme://host:port */
	char curl_error[CURL_ERROR_SIZE];
	struct hub_reply *rep;             /* the transfer under way */
	hub_sink_fn sink;
	void *sink_ctx;
	int sink_stopped;
};

/* scheme://host:port of url, the host in lower case, the port always written. */
static int origin_of(const char *url, char *out, size_t cap, char *host_out, size_t host_cap)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL;
	int rc = -EINVAL;
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
		for (char *p = host; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		rc = hub_path(out, cap, "%s://%s:%s", scheme, host, port);
		if (rc == 0 && host_out)
			rc = hub_path(host_out, host_cap, "%s", host);
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return rc;
}

static int is_http(const char *url)
{
	return strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
}

/* "Name: value" when line is that header (any case), the value without its CR LF. */
static int header_value(const char *line, size_t len, const char *name, char *out, size_t cap)
{
	size_t name_len = strlen(name);
	if (len <= name_len || strncasecmp(line, name, name_len) != 0 || line[name_len] != ':')
		return 0;
	const char *v = line + name_len + 1;
	const char *end = line + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	snprintf(out, cap, "%.*s", (int)(end - v), v);
	return 1;
}

/* "bytes START-END/TOTAL" */
static void parse_content_range(struct hub_reply *rep, const char *v)
{
	char *end;
	if (strncasecmp(v, "bytes ", 6) != 0)
		return;
	unsigned long long start = strtoull(v + 6, &end, 10);
	if (*end != '-' || !(end = strchr(end, '/')))
		return;
	unsigned long long total = strtoull(end + 1, &end, 10);
	if (*end)
		return;
	rep->has_range = 1;
	rep->range_start = start;
	rep->range_total = total;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct hub_http *h = ctx;
	struct hub_reply *rep = h->rep;
	size_t len = size * nmemb;
	char value[128];
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* A new response (after a 100 Continue, say): forget the last one's headers. */
		rep->error_code[0] = rep->error_message[0] = '\0';
		rep->has_range = 0;
	} else if (header_value(data, len, "x-error-code", rep->error_code,
				sizeof(rep->error_code)) ||
		   header_value(data, len, "x-error-message", rep->error_message,
				sizeof(rep->error_message))) {
		/* kept for hub_status_error */
	} else if (header_value(data, len, "content-range", value, sizeof(value))) {
		parse_content_range(rep, value);
	}
	return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct hub_http *h = ctx;
	struct hub_reply *rep = h->rep;
	size_t len = size * nmemb;
	long status = 0;
	curl_off_t length = -1;
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(h->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
	rep->status = status;
	rep->content_length = length;
	if (status >= 300 && status < 400)
		return len; /* a redirect's body: nobody reads it */
	if (status < 200 || status >= 300) {
		/* An error's body, kept for the message when the headers say nothing. */
		size_t room = sizeof(rep->body) - 1 - rep->body_len;
		size_t take = len < room ? len : room;
		memcpy(rep->body + rep->body_len, data, take);
		rep->body_len += take;
		rep->body[rep->body_len] = '\0';
		return len;
	}
	size_t took = h->sink ? h->sink(h->sink_ctx, rep, data, len) : len;
	if (took != len)
		h->sink_stopped = 1;
	return took;
}

int hub_http_new(const struct bn_hub_options *o, struct hub_http **out, char *err,
		 size_t err_cap)
{
	struct hub_http *h = calloc(1, sizeof(*h));
	if (!h)
		return hub_fail(err, err_cap, -ENOMEM, "out of memory");
	h->o = o;
	if (origin_of(o->endpoint, h->origin, sizeof(h->origin), NULL, 0) < 0 ||
	    !is_http(o->endpoint)) {
		free(h);
		return hub_fail(err, err_cap, -EINVAL,
				"the Hub's endpoint '%s' (HF_ENDPOINT) is not an http or https URL",
				o->endpoint);
	}
	/* Reference-counted by libcurl: paired with the cleanup in hub_http_free. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || !(h->curl = curl_easy_init())) {
		free(h);
		return hub_fail(err, err_cap, -ENOMEM, "libcurl could not start");
	}
	char agent[128];
	snprintf(agent, sizeof(agent), "bitnetd-hub/1 libcurl/%s", curl_version_info(CURLVERSION_NOW)->version);
	CURL *c = h->curl;
	curl_easy_setopt(c, CURLOPT_USERAGENT, agent);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
	curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, STALL_S);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->curl_error);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
	*out = h;
	return 0;
}

void hub_http_free(struct hub_http *h)
{
	if (!h)
		return;
	curl_easy_cleanup(h->curl);
	curl_global_cleanup();
	free(h);
}

/* Why a transfer failed, as a person reads it. */
static int transfer_error(struct hub_http *h, CURLcode c, char *err, size_t err_cap)
{
	const char *host = h->rep->host, *why = h->curl_error[0] ? h->curl_error : curl_easy_strerror(c);
	switch (c) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return hub_fail(err, err_cap, -ENETUNREACH,
				"cannot resolve %s (%s): no network, or no name server", host, why);
	case CURLE_COULDNT_CONNECT:
		return hub_fail(err, err_cap, -ENETUNREACH, "cannot connect to %s (%s)", host, why);
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
		return hub_fail(err, err_cap, -ENETUNREACH, "no TLS connection to %s (%s)", host,
				why);
	case CURLE_OPERATION_TIMEDOUT:
		return hub_fail(err, err_cap, -ETIMEDOUT, "%s stopped answering (%s)", host, why);
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return hub_fail(err, err_cap, -ECONNRESET, "%s cut the connection (%s)", host, why);
	case CURLE_WRITE_ERROR:
		if (h->sink_stopped)
			return -ECANCELED; /* the sink has said why */
		/* fall through */
	default:
		return hub_fail(err, err_cap, -EIO, "request to %s failed: %s", host, why);
	}
}

/* One request, no redirect followed. */
static int request(struct hub_http *h, const char *url, uint64_t range_from, char *err,
		   size_t err_cap)
{
	struct hub_reply *rep = h->rep;
	char origin[1200], range[32];
	memset(rep, 0, sizeof(*rep));
	rep->content_length = -1;
	if (origin_of(url, origin, sizeof(origin), rep->host, sizeof(rep->host)) < 0)
		return hub_fail(err, err_cap, -EPROTO, "'%.200s' is not a URL", url);
	struct curl_slist *headers = NULL;
	if (h->o->token[0] && strcmp(origin, h->origin) == 0) {
		char line[1100];
		snprintf(line, sizeof(line), "Authorization: Bearer %s", h->o->token);
		headers = curl_slist_append(NULL, line);
		explicit_bzero(line, sizeof(line));
		if (!headers)
			return hub_fail(err, err_cap, -ENOMEM, "out of memory");
		rep->token_sent = 1;
	}
	snprintf(range, sizeof(range), "%llu-", (unsigned long long)range_from);
	curl_easy_setopt(h->curl, CURLOPT_URL, url);
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(h->curl, CURLOPT_RANGE, range_from ? range : NULL);
	h->curl_error[0] = '\0';
	h->sink_stopped = 0;
	CURLcode c = curl_easy_perform(h->curl);
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, NULL);
	for (struct curl_slist *s = headers; s; s = s->next)
		explicit_bzero(s->data, strlen(s->data)); /* the token's copy */
	curl_slist_free_all(headers);
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &rep->status);
	return c == CURLE_OK ? 0 : transfer_error(h, c, err, err_cap);
}

int hub_http_get(struct hub_http *h, const char *url, uint64_t range_from, hub_sink_fn sink,
		 void *sink_ctx, struct hub_reply *rep, char *err, size_t err_cap)
{
	char *next = malloc(URL_MAX);
	if (!next)
		return hub_fail(err, err_cap, -ENOMEM, "out of memory");
	h->rep = rep;
	h->sink = sink;
	h->sink_ctx = sink_ctx;
	int rc = hub_path(next, URL_MAX, "%s", url);
	for (int hop = 0; rc == 0; hop++) {
		rc = request(h, next, range_from, err, err_cap);
		if (rc < 0 || rep->status < 300 || rep->status >= 400)
			break;
		char *location = NULL;
		curl_easy_getinfo(h->curl, CURLINFO_REDIRECT_URL, &location);
		if (hop == MAX_HOPS)
			rc = hub_fail(err, err_cap, -EPROTO, "more than %d redirects from %s",
				      MAX_HOPS, rep->host);
		else if (!location || !is_http(location))
			rc = hub_fail(err, err_cap, -EPROTO,
				      "%s answered %ld with no http(s) place to go", rep->host,
				      rep->status);
		else if (hub_path(next, URL_MAX, "%s", location) < 0)
			rc = hub_fail(err, err_cap, -EPROTO, "%s redirected to a URL too long",
				      rep->host);
	}
	free(next);
	h->rep = NULL;
	return rc;
}

int hub_url_escape(struct hub_http *h, const char *s, int keep_slash, char *out, size_t cap)
{
	size_t used = 0;
	out[0] = '\0';
	for (;;) {
		size_t n = keep_slash ? strcspn(s, "/") : strlen(s);
		char *e = curl_easy_escape(h->curl, s, (int)n);
		if (!e)
			return -ENOMEM;
		int rc = hub_path(out + used, cap - used, "%s%s", e, s[n] ? "/" : "");
		used += strlen(out + used);
		curl_free(e);
		if (rc < 0)
			return rc;
		if (!s[n])
			return 0;
		s += n + 1;
	}
}
