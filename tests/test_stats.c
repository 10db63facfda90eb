/* SPDX-License-Identifier: MIT */
/*
 * The STATS text: histogram buckets, the tokens-per-second window, per-session lines, buffer
 * growth, and a validator of the exposition format run over a fully populated render.
 */
#include "../daemon/common/clock.h"
#include "../daemon/common/stats.h"
#include "bitnet_shm.h"

#include "testutil.h"

#include "ckassert.h"
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_NS 1000000000ull

/* ------------------------------------------------------------------------------------------ */
/* Reading the text                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* The value of the sample line that starts with `key` (name and labels, exactly), or NAN. */
static double sample(const char *text, const char *key)
{
	size_t len = strlen(key);
	for (const char *p = text; *p;) {
		if (strncmp(p, key, len) == 0 && p[len] == ' ')
			return strtod(p + len + 1, NULL);
		const char *nl = strchr(p, '\n');
		if (!nl)
			break;
		p = nl + 1;
	}
	return NAN;
}

static double samplef(const char *text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static double samplef(const char *text, const char *fmt, ...)
{
	char key[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(key, sizeof(key), fmt, ap);
	va_end(ap);
	return sample(text, key);
}

static int count_prefix(const char *text, const char *prefix)
{
	int n = 0;
	size_t len = strlen(prefix);
	for (const char *p = text; *p;) {
		n += strncmp(p, prefix, len) == 0;
		const char *nl = strchr(p, '\n');
		if (!nl)
			break;
		p = nl + 1;
	}
	return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Exposition-format validator                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* What the validator checks, from the Prometheus text format: every line ends in \n; comments
 * are `# HELP name text`, `# TYPE name type` or free text; every other line is
 * `name{label="value",...} value` or `name value` (no timestamps: the daemon sends none); each
 * family has at most one HELP and exactly one TYPE, before its samples, and its samples are
 * together; no sample (name and labels) twice; histograms: `_bucket` lines with strictly rising
 * le and non-decreasing counts, ending at le="+Inf" equal to `_count`, and a `_sum`. The
 * daemon's histograms carry no label but le, so a family is one series here. */

#define MAX_FAMILIES 256

struct family {
	char name[128];
	char type[16];
	int help, samples, closed;
	/* histogram series */
	int n_buckets, inf_seen, has_sum, has_count;
	double last_le, last_bucket, inf_value, count;
};

struct checker {
	struct family fam[MAX_FAMILIES];
	int n_fam, current;
	char **keys; /* name + labels of every sample, for duplicates */
	size_t n_keys, cap_keys;
	char err[256];
	int line;
};

static int reject(struct checker *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reject(struct checker *c, const char *fmt, ...)
{
	int n = snprintf(c->err, sizeof(c->err), "line %d: ", c->line);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err + n, sizeof(c->err) - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static struct family *find_family(struct checker *c, const char *name, size_t len)
{
	for (int i = 0; i < c->n_fam; i++)
		if (strlen(c->fam[i].name) == len && strncmp(c->fam[i].name, name, len) == 0)
			return &c->fam[i];
	return NULL;
}

static struct family *add_family(struct checker *c, const char *name, size_t len)
{
	struct family *f = find_family(c, name, len);
	if (f || c->n_fam == MAX_FAMILIES || len >= sizeof(f->name))
		return f;
	f = &c->fam[c->n_fam++];
	memset(f, 0, sizeof(*f));
	memcpy(f->name, name, len);
	return f;
}

static size_t name_len(const char *p, int metric)
{
	size_t n = 0;
	while (isalpha((unsigned char)p[n]) || p[n] == '_' || (metric && p[n] == ':') ||
	       (n && isdigit((unsigned char)p[n])))
		n++;
	return n;
}

static int check_comment(struct checker *c, const char *p)
{
	int help = strncmp(p, "# HELP ", 7) == 0, type = strncmp(p, "# TYPE ", 7) == 0;
	if (!help && !type)
		return 0; /* free-form comment */
	p += 7;
	size_t len = name_len(p, 1);
	if (!len || p[len] != ' ')
		return reject(c, "bad metric name in HELP/TYPE");
	struct family *f = add_family(c, p, len);
	if (!f)
		return reject(c, "too many families");
	if (help) {
		if (f->help++)
			return reject(c, "second HELP for %s", f->name);
		return 0;
	}
	if (f->type[0])
		return reject(c, "second TYPE for %s", f->name);
	if (f->samples)
		return reject(c, "TYPE for %s after its samples", f->name);
	const char *t = p + len + 1;
	static const char *const types[] = { "counter", "gauge", "histogram", "summary",
					     "untyped" };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strcmp(t, types[i]) == 0) {
			strcpy(f->type, t);
			return 0;
		}
	return reject(c, "unknown type \"%s\"", t);
}

static int parse_value(const char *s, double *out)
{
	if (strcmp(s, "+Inf") == 0 || strcmp(s, "-Inf") == 0 || strcmp(s, "NaN") == 0) {
		*out = strcmp(s, "NaN") == 0 ? NAN : s[0] == '+' ? INFINITY : -INFINITY;
		return 0;
	}
	char *end;
	*out = strtod(s, &end);
	return *s && !*end && !isspace((unsigned char)*s) ? 0 : -1;
}

/* Parses `{a="x",b="y"}` at *pp; leaves the le value (unescaped) in le[] if there is one. */
static int parse_labels(struct checker *c, const char **pp, char *le, size_t le_cap, int *n_labels)
{
	const char *p = *pp + 1;
	char seen[8][64];
	*n_labels = 0;
	le[0] = '\0';
	while (*p != '}') {
		size_t len = name_len(p, 0);
		if (!len || len >= 64 || p[len] != '=' || p[len + 1] != '"')
			return reject(c, "bad label");
		for (int i = 0; i < *n_labels; i++)
			if (strlen(seen[i]) == len && strncmp(seen[i], p, len) == 0)
				return reject(c, "label repeated");
		if (*n_labels == 8)
			return reject(c, "too many labels");
		memcpy(seen[*n_labels], p, len);
		seen[(*n_labels)++][len] = '\0';
		int is_le = len == 2 && strncmp(p, "le", 2) == 0;
		p += len + 2;
		size_t o = 0;
		for (; *p != '"'; p++) {
			if (!*p || *p == '\n')
				return reject(c, "unterminated label value");
			char ch = *p;
			if (ch == '\\') {
				p++;
				if (*p != '\\' && *p != '"' && *p != 'n')
					return reject(c, "bad escape in label value");
				ch = *p == 'n' ? '\n' : *p;
			}
			if (is_le && o + 1 < le_cap)
				le[o++] = ch;
		}
		if (is_le)
			le[o] = '\0';
		p++;
		if (*p == ',')
			p++;
		else if (*p != '}')
			return reject(c, "expected , or } after a label");
	}
	*pp = p + 1;
	return 0;
}

static int add_key(struct checker *c, const char *line, size_t len)
{
	if (c->n_keys == c->cap_keys) {
		c->cap_keys = c->cap_keys ? 2 * c->cap_keys : 256;
		c->keys = realloc(c->keys, c->cap_keys * sizeof(*c->keys));
		ck_assert_ptr_nonnull(c->keys);
	}
	c->keys[c->n_keys] = strndup(line, len);
	ck_assert_ptr_nonnull(c->keys[c->n_keys]);
	c->n_keys++;
	return 0;
}

/* The family a sample name belongs to: itself, or a histogram's _bucket/_sum/_count. */
static struct family *sample_family(struct checker *c, const char *name, size_t len,
				    const char **suffix)
{
	static const char *const suffixes[] = { "_bucket", "_sum", "_count" };
	*suffix = "";
	struct family *f = find_family(c, name, len);
	if (f && f->type[0] && strcmp(f->type, "histogram") != 0)
		return f;
	for (size_t i = 0; i < 3; i++) {
		size_t sl = strlen(suffixes[i]);
		if (len > sl && strncmp(name + len - sl, suffixes[i], sl) == 0) {
			f = find_family(c, name, len - sl);
			if (f && strcmp(f->type, "histogram") == 0) {
				*suffix = suffixes[i];
				return f;
			}
		}
	}
	return NULL;
}

static int check_histogram(struct checker *c, struct family *f, const char *suffix,
			   const char *le, int n_labels, double v)
{
	if (strcmp(suffix, "_bucket") != 0) {
		if (n_labels)
			return reject(c, "%s%s has labels", f->name, suffix);
		if (strcmp(suffix, "_sum") == 0)
			f->has_sum++;
		else {
			f->has_count++;
			f->count = v;
		}
		return 0;
	}
	double bound;
	if (n_labels != 1 || !le[0] || parse_value(le, &bound) < 0 || isnan(bound))
		return reject(c, "%s_bucket needs exactly a numeric le label", f->name);
	if (f->inf_seen)
		return reject(c, "%s bucket after le=\"+Inf\"", f->name);
	if (f->n_buckets && !(bound > f->last_le))
		return reject(c, "%s le not rising", f->name);
	if (f->n_buckets && v < f->last_bucket)
		return reject(c, "%s bucket counts decrease", f->name);
	f->n_buckets++;
	f->last_le = bound;
	f->last_bucket = v;
	if (isinf(bound)) {
		f->inf_seen = 1;
		f->inf_value = v;
	}
	return 0;
}

static int check_sample(struct checker *c, const char *p)
{
	const char *line = p;
	size_t len = name_len(p, 1);
	if (!len)
		return reject(c, "line is neither a comment nor a sample");
	const char *suffix;
	struct family *f = sample_family(c, p, len, &suffix);
	if (!f)
		return reject(c, "sample %.*s has no TYPE before it", (int)len, p);
	int idx = (int)(f - c->fam);
	if (c->current != idx) {
		if (f->closed)
			return reject(c, "samples of %s are not together", f->name);
		if (c->current >= 0)
			c->fam[c->current].closed = 1;
		c->current = idx;
	}
	f->samples++;
	p += len;
	char le[32];
	int n_labels = 0;
	if (*p == '{' && parse_labels(c, &p, le, sizeof(le), &n_labels) < 0)
		return -1;
	add_key(c, line, (size_t)(p - line));
	double v;
	if (*p != ' ' || parse_value(p + 1, &v) < 0)
		return reject(c, "bad value (or a timestamp) in \"%s\"", line);
	if (strcmp(f->type, "counter") == 0 && !(v >= 0))
		return reject(c, "counter %s is negative or NaN", f->name);
	if (strcmp(f->type, "histogram") == 0)
		return check_histogram(c, f, suffix, le, n_labels, v);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int check_end(struct checker *c)
{
	for (int i = 0; i < c->n_fam; i++) {
		struct family *f = &c->fam[i];
		if (!f->type[0])
			return reject(c, "%s has no TYPE", f->name);
		int hist_ok = f->inf_seen && f->has_sum == 1 && f->has_count == 1 &&
			      f->inf_value == f->count;
		if (strcmp(f->type, "histogram") == 0 && !hist_ok)
			return reject(c, "histogram %s: needs le=\"+Inf\" == _count and one _sum",
				    f->name);
	}
	qsort(c->keys, c->n_keys, sizeof(*c->keys), cmp_str);
	for (size_t i = 1; i < c->n_keys; i++)
		if (strcmp(c->keys[i - 1], c->keys[i]) == 0)
			return reject(c, "sample %s twice", c->keys[i]);
	return 0;
}

/* NULL when `text` is valid exposition text, else what is wrong (static storage). */
static const char *validate(const char *text)
{
	static struct checker c;
	memset(&c, 0, sizeof(c));
	c.current = -1;
	int rc = 0;
	char *copy = strdup(text);
	ck_assert_ptr_nonnull(copy);
	char *p = copy;
	if (!*p) {
		rc = reject(&c, "empty text");
	} else if (p[strlen(p) - 1] != '\n') {
		rc = reject(&c, "text does not end with a newline");
	}
	while (rc == 0 && *p) {
		char *nl = strchr(p, '\n');
		*nl = '\0';
		c.line++;
		if (!*p)
			rc = reject(&c, "empty line");
		else
			rc = *p == '#' ? check_comment(&c, p) : check_sample(&c, p);
		p = nl + 1;
	}
	if (rc == 0)
		rc = check_end(&c);
	for (size_t i = 0; i < c.n_keys; i++)
		free(c.keys[i]);
	free(c.keys);
	free(copy);
	return rc ? c.err : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Rendering helpers                                                                           */
/* ------------------------------------------------------------------------------------------ */

struct view_storage {
	struct bn_stats_view v;
	uint32_t *ids, *uids;
	struct bn_session_counters *counters;
	const struct bn_session_counters **ptrs;
};

/* n sessions: id 7 + 5i, uid 1000 + i % 3, counters i+1, 2i+2, i % 5, 10i + 3. */
static void make_view(struct view_storage *s, uint32_t n)
{
	s->ids = calloc(n + 1, sizeof(*s->ids));
	s->uids = calloc(n + 1, sizeof(*s->uids));
	s->counters = calloc(n + 1, sizeof(*s->counters));
	s->ptrs = calloc(n + 1, sizeof(*s->ptrs));
	ck_assert(s->ids && s->uids && s->counters && s->ptrs);
	for (uint32_t i = 0; i < n; i++) {
		s->ids[i] = 7 + 5 * i;
		s->uids[i] = 1000 + i % 3;
		s->counters[i] =
			(struct bn_session_counters){ i + 1, 2 * i + 2, i % 5, 10 * i + 3 };
		s->ptrs[i] = &s->counters[i];
	}
	s->v = (struct bn_stats_view){ .sessions_open = n,
				       .queued = 3,
				       .running = 2,
				       .kv_blocks_total = 100,
				       .kv_blocks_used = 30,
				       .kv_blocks_reserved = 20,
				       .kv_block_tokens = 16,
				       .n_sessions = n,
				       .session_ids = s->ids,
				       .session_uids = s->uids,
				       .session_counters = s->ptrs };
}

static void free_view(struct view_storage *s)
{
	free(s->ids);
	free(s->uids);
	free(s->counters);
	free(s->ptrs);
}

static char *render(const struct bn_stats_view *v, long *len)
{
	char *buf = NULL;
	size_t cap = 0;
	*len = bn_stats_render(&buf, &cap, v);
	ck_assert_int_gt(*len, 0);
	ck_assert_uint_eq(strlen(buf), (size_t)*len);
	ck_assert_uint_gt(cap, (size_t)*len);
	return buf;
}

/* Every counter, status, reason and histogram with something in it. */
static void populate(void)
{
	bn_stats.sessions_opened = 4;
	bn_stats.requests_submitted = 40;
	for (int s = 1; s < BN_STATS_STATUSES; s++)
		bn_stats.requests_finished[s] = (uint64_t)s;
	for (uint32_t e = BN_E_INVALID; e < BN_E_INVALID + BN_STATS_ERRORS; e++)
		bn_stats_count_error(e);
	bn_stats.tokens_generated = 1000;
	bn_stats.batch_padding = 25;
	bn_stats.batch_cells = 100;
	for (int h = 0; h < BN_HIST_COUNT; h++)
		for (double x = 1e-5; x < 1e4; x *= 3)
			bn_stats_observe((enum bn_hist)h, x);
	bn_stats_count_tokens(50, bn_now_ns());
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                       */
/* ------------------------------------------------------------------------------------------ */

START_TEST(histogram_buckets_exact)
{
	bn_stats_reset();
	const double rows[] = { 1, 1, 3, 8, 9, 200 };
	for (size_t i = 0; i < 6; i++)
		bn_stats_observe(BN_HIST_BATCH_ROWS, rows[i]);
	/* At a bound counts in that bucket; above the last only in +Inf; NaN is dropped. */
	const double secs[] = { 0.0001, 0.0003, 0.7, 0.5, 120, NAN };
	for (size_t i = 0; i < 6; i++)
		bn_stats_observe(BN_HIST_STEP_SECONDS, secs[i]);
	struct view_storage vs;
	make_view(&vs, 0);
	long len;
	char *t = render(&vs.v, &len);

	const char *le_rows[] = { "1", "2", "4", "8", "16", "32", "64", "128", "+Inf" };
	const double want_rows[] = { 2, 2, 3, 4, 5, 5, 5, 5, 6 };
	for (int i = 0; i < 9; i++)
		ck_assert_double_eq(samplef(t, "bitnetd_batch_rows_bucket{le=\"%s\"}", le_rows[i]),
				    want_rows[i]);
	ck_assert_double_eq(sample(t, "bitnetd_batch_rows_sum"), 222);
	ck_assert_double_eq(sample(t, "bitnetd_batch_rows_count"), 6);
	ck_assert_int_eq(count_prefix(t, "bitnetd_batch_rows_bucket{"), 9);

	const char *le_s[] = { "0.0001", "0.00025", "0.0005", "0.001", "0.5",
			       "1",      "30",      "60",     "+Inf" };
	const double want_s[] = { 1, 1, 2, 2, 3, 4, 4, 4, 5 };
	for (int i = 0; i < 9; i++)
		ck_assert_double_eq(samplef(t, "bitnetd_step_seconds_bucket{le=\"%s\"}", le_s[i]),
				    want_s[i]);
	ck_assert_double_eq_tol(sample(t, "bitnetd_step_seconds_sum"), 121.2004, 1e-9);
	ck_assert_double_eq(sample(t, "bitnetd_step_seconds_count"), 5);
	ck_assert_int_eq(count_prefix(t, "bitnetd_step_seconds_bucket{"), 19);
	/* Untouched histograms are all zeros, and still there. */
	ck_assert_double_eq(sample(t, "bitnetd_batch_tokens_bucket{le=\"2048\"}"), 0);
	ck_assert_double_eq(sample(t, "bitnetd_batch_tokens_bucket{le=\"+Inf\"}"), 0);
	ck_assert_double_eq(sample(t, "bitnetd_inter_token_seconds_count"), 0);
	ck_assert_double_eq(sample(t, "bitnetd_time_to_first_token_seconds_sum"), 0);
	ck_assert_double_eq(sample(t, "bitnetd_queue_seconds_count"), 0);
	free(t);
	free_view(&vs);
}
END_TEST

START_TEST(valid_exposition)
{
	bn_stats_reset();
	populate();
	struct view_storage vs;
	make_view(&vs, 3);
	long len;
	char *t = render(&vs.v, &len);
	const char *err = validate(t);
	ck_assert_msg(err == NULL, "%s", err);
	/* Names the tests, tools and docs already use are still there. */
	const char *keep[] = { "bitnetd_sessions", "bitnetd_running_sequences",
			       "bitnetd_requests_submitted_total", "bitnetd_sessions_refused_total",
			       "bitnetd_protocol_violations_total", "bitnetd_futex_wakes_total",
			       "bitnetd_sleeps_total", "bitnetd_uring_submits_total",
			       "bitnetd_doorbells_total", "bitnetd_tokens_generated_total" };
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		ck_assert_msg(!isnan(sample(t, keep[i])), "%s is missing", keep[i]);
	ck_assert_double_eq(sample(t, "bitnetd_requests_finished_total{status=\"stop\"}"), 6);
	ck_assert_double_eq(sample(t, "bitnetd_requests_finished_total{status=\"deadline\"}"), 7);
	ck_assert_double_eq(sample(t, "bitnetd_requests_finished_total{status=\"length\"}"), 1);
	ck_assert_int_eq(count_prefix(t, "bitnetd_requests_finished_total{"), 8);
	ck_assert_double_eq(sample(t, "bitnetd_request_errors_total{reason=\"kv_space\"}"), 1);
	ck_assert_double_eq(sample(t, "bitnetd_request_errors_total{reason=\"protocol\"}"), 1);
	ck_assert_int_eq(count_prefix(t, "bitnetd_request_errors_total{"), 23); /* 1001 .. 1023 */
	/* Gauges from the view and from the counters. */
	ck_assert_double_eq(sample(t, "bitnetd_queue_depth"), 3);
	ck_assert_double_eq(sample(t, "bitnetd_kv_blocks_total"), 100);
	ck_assert_double_eq(sample(t, "bitnetd_kv_blocks_used"), 30);
	ck_assert_double_eq(sample(t, "bitnetd_kv_blocks_reserved"), 20);
	ck_assert_double_eq(sample(t, "bitnetd_kv_blocks_free"), 50);
	ck_assert_double_eq(sample(t, "bitnetd_kv_block_tokens"), 16);
	ck_assert_double_eq(sample(t, "bitnetd_batch_padding_ratio"), 0.25);
	free(t);
	/* More used and reserved than there is (a racing reader): free is 0, not a wrap. */
	vs.v.kv_blocks_used = 90;
	t = render(&vs.v, &len);
	ck_assert_double_eq(sample(t, "bitnetd_kv_blocks_free"), 0);
	ck_assert_ptr_null(validate(t));
	free(t);
	free_view(&vs);
}
END_TEST

/* The validator itself: each of these breaks one rule. */
START_TEST(validator_rejects)
{
	static const char *const bad[] = {
		"bitnetd_x 1\n",                                          /* no TYPE */
		"# TYPE bitnetd_x gauge\n# TYPE bitnetd_x gauge\nbitnetd_x 1\n",
		"bitnetd_x 1\n# TYPE bitnetd_x gauge\n",
		"# TYPE bitnetd_x gauge\nbitnetd_x 1",                   /* no final newline */
		"# TYPE bitnetd_x gauge\nbitnetd_x one\n",
		"# TYPE bitnetd_x gauge\nbitnetd_x 1 1700000000\n",
		"# TYPE bitnetd_x gauge\nbitnetd_x{a=\"1\"} 1\nbitnetd_x{a=\"1\"} 2\n",
		"# TYPE bitnetd_x gauge\nbitnetd_x{a=\"1} 1\n",
		"# TYPE bitnetd_x gauge\nbitnetd_x{a=\"\\q\"} 1\n",
		"# TYPE bitnetd_x counter\nbitnetd_x -1\n",
		"# TYPE bitnetd_x gauge\n# TYPE bitnetd_y gauge\nbitnetd_x 1\nbitnetd_y 1\n"
		"bitnetd_x{a=\"2\"} 1\n",
		"# TYPE bitnetd_h histogram\nbitnetd_h_bucket{le=\"1\"} 2\n"
		"bitnetd_h_bucket{le=\"2\"} 1\nbitnetd_h_bucket{le=\"+Inf\"} 2\n"
		"bitnetd_h_sum 1\nbitnetd_h_count 2\n",
		"# TYPE bitnetd_h histogram\nbitnetd_h_bucket{le=\"2\"} 1\n"
		"bitnetd_h_bucket{le=\"1\"} 1\nbitnetd_h_bucket{le=\"+Inf\"} 2\n"
		"bitnetd_h_sum 1\nbitnetd_h_count 2\n",
		"# TYPE bitnetd_h histogram\nbitnetd_h_bucket{le=\"1\"} 1\n"
		"bitnetd_h_bucket{le=\"+Inf\"} 2\nbitnetd_h_sum 1\nbitnetd_h_count 3\n",
		"# TYPE bitnetd_h histogram\nbitnetd_h_bucket{le=\"1\"} 1\n"
		"bitnetd_h_sum 1\nbitnetd_h_count 1\n",
		"# TYPE bitnetd_h histogram\nbitnetd_h 1\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(validate(bad[i]) != NULL, "case %zu passed: %s", i, bad[i]);
	ck_assert_ptr_null(validate("# HELP bitnetd_x X.\n# TYPE bitnetd_x gauge\n"
				    "bitnetd_x{a=\"q\\\"\\\\\\n\"} +Inf\n"));
}
END_TEST

START_TEST(per_session_lines)
{
	bn_stats_reset();
	struct view_storage vs;
	make_view(&vs, 4);
	vs.ids[2] = 4000000000u;
	vs.ptrs[3] = NULL; /* a session without counters renders zeros */
	long len;
	char *t = render(&vs.v, &len);
	ck_assert_ptr_null(validate(t));
	for (uint32_t i = 0; i < 4; i++) {
		const struct bn_session_counters *c = vs.ptrs[i];
		const char *lb = "{session=\"%u\",uid=\"%u\"}";
		char fmt[128];
		snprintf(fmt, sizeof(fmt), "bitnetd_session_requests_submitted_total%s", lb);
		ck_assert_double_eq(samplef(t, fmt, vs.ids[i], vs.uids[i]), c ? c->submitted : 0);
		snprintf(fmt, sizeof(fmt), "bitnetd_session_requests_finished_total%s", lb);
		ck_assert_double_eq(samplef(t, fmt, vs.ids[i], vs.uids[i]), c ? c->finished : 0);
		snprintf(fmt, sizeof(fmt), "bitnetd_session_request_errors_total%s", lb);
		ck_assert_double_eq(samplef(t, fmt, vs.ids[i], vs.uids[i]), c ? c->errors : 0);
		snprintf(fmt, sizeof(fmt), "bitnetd_session_tokens_generated_total%s", lb);
		ck_assert_double_eq(samplef(t, fmt, vs.ids[i], vs.uids[i]), c ? c->tokens : 0);
	}
	ck_assert_double_eq(sample(t, "bitnetd_session_tokens_generated_total"
				      "{session=\"4000000000\",uid=\"1002\"}"),
			    23);
	ck_assert_int_eq(count_prefix(t, "bitnetd_session_"), 16);
	ck_assert_int_eq(count_prefix(t, "# TYPE bitnetd_session_"), 4);
	free(t);
	/* No sessions: the families are announced, with no samples. */
	vs.v.n_sessions = 0;
	t = render(&vs.v, &len);
	ck_assert_ptr_null(validate(t));
	ck_assert_int_eq(count_prefix(t, "bitnetd_session_"), 0);
	ck_assert_int_eq(count_prefix(t, "# TYPE bitnetd_session_"), 4);
	free(t);
	free_view(&vs);
}
END_TEST

START_TEST(tokens_per_second_window)
{
	bn_stats_reset();
	ck_assert_double_eq(bn_stats_tokens_per_second(20 * S_NS), 0);
	/* 100 tokens in each of the seconds 1..5: 500 tokens in the window. */
	for (uint64_t s = 1; s <= 5; s++)
		bn_stats_count_tokens(100, s * S_NS + S_NS / 4);
	ck_assert_double_eq_tol(bn_stats_tokens_per_second(5 * S_NS + S_NS / 2), 50, 1e-9);
	ck_assert_double_eq_tol(bn_stats_tokens_per_second(10 * S_NS + S_NS / 2), 50, 1e-9);
	/* Second 1 is half outside the window (1.5, 11.5]: 400 + 100 / 2 tokens. */
	ck_assert_double_eq_tol(bn_stats_tokens_per_second(11 * S_NS + S_NS / 2), 45, 1e-9);
	ck_assert_double_eq_tol(bn_stats_tokens_per_second(15 * S_NS + S_NS / 4), 7.5, 1e-9);
	ck_assert_double_eq(bn_stats_tokens_per_second(16 * S_NS), 0);
	/* New tokens reuse the ring's buckets; a timestamp older than a bucket's is dropped. */
	bn_stats_count_tokens(30, 23 * S_NS);
	bn_stats_count_tokens(999, 12 * S_NS);
	ck_assert_double_eq_tol(bn_stats_tokens_per_second(23 * S_NS + 1), 3, 1e-9);
	ck_assert_double_eq_tol(bn_stats_tokens_per_second(30 * S_NS), 3, 1e-9);
	ck_assert_double_eq(bn_stats_tokens_per_second(40 * S_NS), 0);

	/* The rendered gauge reads the monotonic clock: tokens counted now are inside it. */
	bn_stats_reset();
	bn_stats_count_tokens(100, bn_now_ns());
	struct view_storage vs;
	make_view(&vs, 0);
	long len;
	char *t = render(&vs.v, &len);
	ck_assert_double_eq(sample(t, "bitnetd_tokens_per_second"), 10);
	free(t);
	free_view(&vs);
}
END_TEST

START_TEST(buffer_grows)
{
	bn_stats_reset();
	populate();
	struct view_storage vs;
	make_view(&vs, 2000);
	size_t cap = 1024;
	char *buf = malloc(cap);
	ck_assert_ptr_nonnull(buf);
	long len = bn_stats_render(&buf, &cap, &vs.v);
	ck_assert_int_gt(len, 1024);
	ck_assert_uint_gt(cap, (size_t)len);
	ck_assert_uint_eq(strlen(buf), (size_t)len);
	ck_assert_ptr_null(validate(buf));
	ck_assert_int_eq(count_prefix(buf, "bitnetd_session_tokens_generated_total{"), 2000);
	/* The last line is the last session's. */
	char last[128];
	snprintf(last, sizeof(last),
		 "bitnetd_session_tokens_generated_total{session=\"%u\",uid=\"%u\"} %u\n",
		 7 + 5 * 1999u, 1000 + 1999u % 3, 10 * 1999u + 3);
	ck_assert_str_eq(buf + len - strlen(last), last);
	/* A second render into the grown buffer gives the same text. */
	char *first = strdup(buf);
	size_t cap2 = cap;
	ck_assert_int_eq(bn_stats_render(&buf, &cap, &vs.v), len);
	ck_assert_uint_eq(cap, cap2);
	ck_assert_str_eq(buf, first);
	free(first);
	free(buf);
	free_view(&vs);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("stats");
	TCase *tc = tcase_create("render");
	tcase_add_test(tc, histogram_buckets_exact);
	tcase_add_test(tc, valid_exposition);
	tcase_add_test(tc, validator_rejects);
	tcase_add_test(tc, per_session_lines);
	tcase_add_test(tc, tokens_per_second_window);
	tcase_add_test(tc, buffer_grows);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
