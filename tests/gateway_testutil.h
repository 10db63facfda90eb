/* SPDX-License-Identifier: MIT */
/*
 * gateway_testutil.h — what the gateway's suites share (test_gateway.c,
 * test_gateway_structured.c): bitnet-gateway started and stopped, HTTP by hand over raw
 * sockets, replies as JSON, OpenAI's error objects checked, streams joined.
 */
#ifndef BITNET_GATEWAY_TESTUTIL_H
#define BITNET_GATEWAY_TESTUTIL_H

#include "ckassert.h"
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timescale.h"

/* ---- the gateway ------------------------------------------------------------------------- */

struct gateway {
	pid_t pid;
	int port;
};

/* A port nothing listens on now. */
static inline int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static inline int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* bitnet-gateway on socket with the extra arguments; waits until it accepts. */
static inline void gateway_start(struct gateway *g, const char *socket, const char *const *extra)
{
	const char *bin = getenv("BITNET_GATEWAY") ? getenv("BITNET_GATEWAY") : "build/bitnet-gateway";
	char listen[32];
	g->port = free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", g->port);
	const char *argv[24] = { bin, "--socket", socket, "--listen", listen, "--log-level", "warn" };
	int argc = 7;
	for (int i = 0; extra && extra[i]; i++)
		argv[argc++] = extra[i];
	g->pid = fork();
	ck_assert_int_ge(g->pid, 0);
	if (g->pid == 0) {
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0, end = tu_scaled(1000); i < end; i++) { /* 10 s, scaled */
		int fd = dial(g->port);
		if (fd >= 0) {
			close(fd);
			return;
		}
		ck_assert_int_eq(waitpid(g->pid, NULL, WNOHANG), 0);
		usleep(10000);
	}
	ck_abort_msg("the gateway did not listen");
}

static inline void gateway_stop(struct gateway *g)
{
	int st;
	kill(g->pid, SIGTERM);
	ck_assert_int_eq(waitpid(g->pid, &st, 0), g->pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the gateway exited with %d", st);
}

/* ---- HTTP, by hand ----------------------------------------------------------------------- */

struct reply {
	int status;
	char head[4096];
	char *body;               /* de-chunked, NUL-terminated */
	size_t len;
};

static inline void reply_free(struct reply *r)
{
	free(r->body);
	r->body = NULL;
}

/* Reads the whole response of a Connection: close request. */
static inline char *read_all(int fd, size_t *n)
{
	size_t cap = 1 << 16;
	char *buf = malloc(cap);
	*n = 0;
	for (;;) {
		if (*n + 4096 > cap)
			buf = realloc(buf, cap *= 2);
		ssize_t k = read(fd, buf + *n, cap - *n - 1);
		if (k <= 0)
			break;
		*n += (size_t)k;
	}
	buf[*n] = '\0';
	return buf;
}

static inline void dechunk(struct reply *r, const char *body, size_t len)
{
	r->body = malloc(len + 1);
	r->len = 0;
	const char *p = body, *end = body + len;
	while (p < end) {
		char *after;
		unsigned long size = strtoul(p, &after, 16);
		const char *data = strstr(after, "\r\n");
		if (!data || size == 0)
			break;
		data += 2;
		memcpy(r->body + r->len, data, size);
		r->len += size;
		p = data + size + 2;
	}
	r->body[r->len] = '\0';
}

static inline void parse_reply(struct reply *r, const char *raw, size_t n)
{
	const char *split = strstr(raw, "\r\n\r\n");
	ck_assert_msg(split, "no header end in: %.200s", raw);
	size_t hl = (size_t)(split - raw);
	snprintf(r->head, sizeof(r->head), "%.*s", (int)(hl < sizeof(r->head) - 1 ? hl : sizeof(r->head) - 1), raw);
	ck_assert_int_eq(sscanf(raw, "HTTP/1.1 %d", &r->status), 1);
	const char *body = split + 4;
	size_t blen = n - (size_t)(body - raw);
	if (strcasestr(r->head, "transfer-encoding: chunked")) {
		dechunk(r, body, blen);
	} else {
		r->body = strndup(body, blen);
		r->len = blen;
	}
}

/* One request on a new connection. headers: extra lines, each ending in \r\n (may be NULL). */
static inline struct reply http(int port, const char *method, const char *path, const char *headers,
			 const char *body)
{
	struct reply r = { 0 };
	int fd = dial(port);
	ck_assert_int_ge(fd, 0);
	char *req = NULL;
	size_t blen = body ? strlen(body) : 0;
	int n = asprintf(&req, "%s %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n%sContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			 method, path, headers ? headers : "", blen);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(write(fd, req, (size_t)n), n);
	if (blen)
		ck_assert_int_eq(write(fd, body, blen), (ssize_t)blen);
	free(req);
	size_t got;
	char *raw = read_all(fd, &got);
	close(fd);
	parse_reply(&r, raw, got);
	free(raw);
	return r;
}

static inline json_t *json_of(const struct reply *r)
{
	json_error_t e;
	json_t *j = json_loads(r->body, 0, &e);
	ck_assert_msg(j, "not JSON (%s): %.300s", e.text, r->body);
	return j;
}

/* The error object of a reply with status: its param (or "" for null). */
static inline void assert_error(const struct reply *r, int status, const char *param)
{
	ck_assert_msg(r->status == status, "status %d, want %d: %s", r->status, status, r->body);
	json_t *j = json_of(r);
	json_t *e = json_object_get(j, "error");
	ck_assert_msg(json_is_string(json_object_get(e, "message")) &&
			      json_is_string(json_object_get(e, "type")),
		      "%s", r->body);
	json_t *p = json_object_get(e, "param");
	ck_assert_str_eq(json_is_string(p) ? json_string_value(p) : "", param ? param : "");
	json_decref(j);
}

/* The text of choice i of a whole completion. */
static inline char *choice_text(json_t *j, size_t i)
{
	json_t *c = json_array_get(json_object_get(j, "choices"), i);
	json_t *t = json_object_get(c, "text");
	if (!t)
		t = json_object_get(json_object_get(c, "message"), "content");
	ck_assert_msg(json_is_string(t), "choice %zu has no text", i);
	return strdup(json_string_value(t));
}

/* The text of a stream (the events' texts joined, by choice index), its finish reasons and
 * whether it ended with [DONE]. */
struct streamed {
	char text[4][8192];
	char finish[4][16];
	int done, errors, chunks;
};

static inline void read_stream(const char *body, struct streamed *s)
{
	memset(s, 0, sizeof(*s));
	for (const char *p = body; (p = strstr(p, "data: ")) != NULL;) {
		p += 6;
		const char *end = strstr(p, "\n\n");
		ck_assert_msg(end, "an event without its blank line");
		if (strncmp(p, "[DONE]", 6) == 0) {
			s->done = 1;
			break;
		}
		json_t *j = json_loadb(p, (size_t)(end - p), 0, NULL);
		ck_assert_msg(j, "an event that is not JSON: %.*s", (int)(end - p), p);
		s->errors += json_object_get(j, "error") != NULL;
		size_t i;
		json_t *c;
		json_array_foreach(json_object_get(j, "choices"), i, c)
		{
			size_t idx = (size_t)json_integer_value(json_object_get(c, "index"));
			json_t *t = json_object_get(c, "text");
			if (!t)
				t = json_object_get(json_object_get(c, "delta"), "content");
			if (idx < 4 && json_is_string(t))
				strncat(s->text[idx], json_string_value(t),
					sizeof(s->text[idx]) - strlen(s->text[idx]) - 1);
			const char *f = json_string_value(json_object_get(c, "finish_reason"));
			if (idx < 4 && f)
				snprintf(s->finish[idx], sizeof(s->finish[idx]), "%s", f);
		}
		s->chunks++;
		json_decref(j);
		p = end;
	}
}

#endif /* BITNET_GATEWAY_TESTUTIL_H */
