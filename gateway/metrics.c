/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const route_names[GW_N_ROUTES] = { "chat_completions", "completions",
						      "models", "health", "metrics", "embeddings",
						      "other" };
/* The statuses the gateway answers with; any other is counted as "other". */
static const int statuses[] = { 200, 400, 401, 404, 405, 413, 429, 500, 503, 504 };
#define N_STATUSES (sizeof(statuses) / sizeof(statuses[0]))
static const double buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
				   1, 2.5, 5, 10, 30, 60 };
#define N_BUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct histogram {
	uint64_t counts[N_BUCKETS + 1]; /* the last: above every bucket */
	uint64_t n;
	double sum;
};

static struct {
	uint64_t requests[GW_N_ROUTES][N_STATUSES + 1];
	struct histogram duration[GW_N_ROUTES], first_token;
	uint64_t prompt_tokens, completion_tokens, client_gone;
	int64_t running, connections;
} m;

static void observe(struct histogram *h, double v)
{
	size_t b = 0;
	while (b < N_BUCKETS && v > buckets[b])
		b++;
	__atomic_fetch_add(&h->counts[b], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->n, 1, __ATOMIC_RELAXED);
	/* the sum under a compare-and-swap: doubles have no atomic add */
	double old, new;
	__atomic_load(&h->sum, &old, __ATOMIC_RELAXED);
	do {
		new = old + v;
	} while (!__atomic_compare_exchange(&h->sum, &old, &new, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED));
}

void gw_metrics_request(enum gw_route route, int status, double seconds)
{
	size_t s = 0;
	while (s < N_STATUSES && statuses[s] != status)
		s++;
	__atomic_fetch_add(&m.requests[route][s], 1, __ATOMIC_RELAXED);
	observe(&m.duration[route], seconds);
}

void gw_metrics_first_token(double seconds)
{
	observe(&m.first_token, seconds);
}

void gw_metrics_tokens(uint32_t prompt, uint32_t completion)
{
	__atomic_fetch_add(&m.prompt_tokens, prompt, __ATOMIC_RELAXED);
	__atomic_fetch_add(&m.completion_tokens, completion, __ATOMIC_RELAXED);
}

void gw_metrics_running(int delta)
{
	__atomic_fetch_add(&m.running, delta, __ATOMIC_RELAXED);
}

void gw_metrics_connections(int delta)
{
	__atomic_fetch_add(&m.connections, delta, __ATOMIC_RELAXED);
}

void gw_metrics_client_gone(void)
{
	__atomic_fetch_add(&m.client_gone, 1, __ATOMIC_RELAXED);
}

/* ---- exposition -------------------------------------------------------------------------- */

struct text {
	char *buf;
	size_t len, cap;
	int failed;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < t->cap - t->len) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap * 2 + (n > 0 ? (size_t)n : 0);
		char *p = realloc(t->buf, cap);
		if (!p || n < 0) {
			t->failed = 1;
			return;
		}
		t->buf = p;
		t->cap = cap;
	}
}

static void histogram(struct text *t, const char *name, const char *labels,
		      const struct histogram *h)
{
	uint64_t cum = 0;
	const char *sep = labels[0] ? "," : "";
	for (size_t b = 0; b <= N_BUCKETS; b++) {
		cum += __atomic_load_n(&h->counts[b], __ATOMIC_RELAXED);
		if (b < N_BUCKETS)
			put(t, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, buckets[b],
			    (unsigned long long)cum);
		else
			put(t, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
			    (unsigned long long)cum);
	}
	double sum;
	__atomic_load(&h->sum, &sum, __ATOMIC_RELAXED);
	put(t, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, sum, name, labels,
	    (unsigned long long)__atomic_load_n(&h->n, __ATOMIC_RELAXED));
}

static void requests(struct text *t)
{
	put(t, "# HELP bitnet_gateway_requests_total HTTP requests answered, by route and status.\n"
	       "# TYPE bitnet_gateway_requests_total counter\n");
	for (int r = 0; r < GW_N_ROUTES; r++)
		for (size_t s = 0; s <= N_STATUSES; s++) {
			uint64_t n = __atomic_load_n(&m.requests[r][s], __ATOMIC_RELAXED);
			if (!n)
				continue;
			if (s < N_STATUSES)
				put(t, "bitnet_gateway_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
				    route_names[r], statuses[s], (unsigned long long)n);
			else
				put(t, "bitnet_gateway_requests_total{route=\"%s\",code=\"other\"} %llu\n",
				    route_names[r], (unsigned long long)n);
		}
	put(t, "# HELP bitnet_gateway_request_duration_seconds From the request's headers to its last byte queued.\n"
	       "# TYPE bitnet_gateway_request_duration_seconds histogram\n");
	for (int r = 0; r < GW_N_ROUTES; r++) {
		char labels[64];
		snprintf(labels, sizeof(labels), "route=\"%s\"", route_names[r]);
		histogram(t, "bitnet_gateway_request_duration_seconds", labels, &m.duration[r]);
	}
}

char *gw_metrics_render(size_t *len)
{
	struct text t = { .buf = malloc(8192), .cap = 8192 };
	if (!t.buf)
		return NULL;
	t.buf[0] = '\0';
	requests(&t);
	put(&t, "# HELP bitnet_gateway_time_to_first_token_seconds Streams: from the request's headers to its first token sent.\n"
		"# TYPE bitnet_gateway_time_to_first_token_seconds histogram\n");
	histogram(&t, "bitnet_gateway_time_to_first_token_seconds", "", &m.first_token);
	put(&t, "# HELP bitnet_gateway_prompt_tokens_total Prompt tokens of answered requests.\n"
		"# TYPE bitnet_gateway_prompt_tokens_total counter\n"
		"bitnet_gateway_prompt_tokens_total %llu\n"
		"# HELP bitnet_gateway_completion_tokens_total Tokens generated for answered requests.\n"
		"# TYPE bitnet_gateway_completion_tokens_total counter\n"
		"bitnet_gateway_completion_tokens_total %llu\n"
		"# HELP bitnet_gateway_client_disconnects_total Requests cancelled in the daemon because their HTTP client left.\n"
		"# TYPE bitnet_gateway_client_disconnects_total counter\n"
		"bitnet_gateway_client_disconnects_total %llu\n"
		"# HELP bitnet_gateway_requests_running Completion requests running now.\n"
		"# TYPE bitnet_gateway_requests_running gauge\n"
		"bitnet_gateway_requests_running %lld\n"
		"# HELP bitnet_gateway_connections HTTP connections open now.\n"
		"# TYPE bitnet_gateway_connections gauge\n"
		"bitnet_gateway_connections %lld\n",
	    (unsigned long long)__atomic_load_n(&m.prompt_tokens, __ATOMIC_RELAXED),
	    (unsigned long long)__atomic_load_n(&m.completion_tokens, __ATOMIC_RELAXED),
	    (unsigned long long)__atomic_load_n(&m.client_gone, __ATOMIC_RELAXED),
	    (long long)__atomic_load_n(&m.running, __ATOMIC_RELAXED),
	    (long long)__atomic_load_n(&m.connections, __ATOMIC_RELAXED));
	if (t.failed) {
		free(t.buf);
		return NULL;
	}
	*len = t.len;
	return t.buf;
}
