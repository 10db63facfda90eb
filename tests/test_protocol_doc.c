/* SPDX-License-Identifier: MIT */
/*
 * test_protocol_doc — shm/PROTOCOL.md's numbers are the daemon's numbers.
 *
 * A client is written from the document alone, so a figure in it that has gone stale is a bug
 * in the protocol. The document marks the blocks whose figures are checked here with
 * "<!-- checked: WHAT ... -->" and "<!-- end checked -->"; each test reads one kind of block and
 * compares it with what the daemon's own code computes:
 *  - stats families: the STATS families, their order, types, label values and value kinds,
 *    against bn_stats_render;
 *  - layout: the segment layout tables (§12), against bn_segment_layout;
 *  - addresses: every "`field` @N" of the worked example, against the layout of its block;
 *  - sample draws: the seeded draw's test vectors (§6.9), against bn_sample_uniform.
 *
 * Environment: BITNET_PROTOCOL_DOC (default shm/PROTOCOL.md, relative to the repository root).
 */
#define _GNU_SOURCE
#include "../daemon/common/clock.h"
#include "../daemon/model/sample.h"
#include "../daemon/session.h"
#include "../daemon/common/stats.h"
#include "bitnet_shm.h"
#include "testutil.h"

#include "ckassert.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINES 4096
#define MAX_CELLS 8
#define MAX_FAMILIES 96
#define MAX_VALUES 32

/* ------------------------------------------------------------------------------------------ */
/* The document, as lines                                                                      */
/* ------------------------------------------------------------------------------------------ */

struct doc {
	char *text;
	char *lines[MAX_LINES];
	int n;
};

static void doc_load(struct doc *d)
{
	const char *path = getenv("BITNET_PROTOCOL_DOC");
	if (!path || !*path)
		path = "shm/PROTOCOL.md";
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot open %s: %s", path, strerror(errno));
	size_t cap = 1 << 20, len = 0;
	d->text = malloc(cap + 1);
	ck_assert_ptr_nonnull(d->text);
	len = fread(d->text, 1, cap, f);
	fclose(f);
	ck_assert_msg(len < cap, "%s is larger than this test reads", path);
	d->text[len] = '\0';
	d->n = 0;
	for (char *p = d->text; *p && d->n < MAX_LINES;) {
		d->lines[d->n++] = p;
		char *nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
}

/* The index of the first line of the n-th block (0-based) whose marker starts with `what`,
 * after the marker; *end gets the index of its end marker. -1 when there is no such block. */
static int doc_block(const struct doc *d, const char *what, int nth, int *end, const char **marker)
{
	char want[128];
	snprintf(want, sizeof(want), "<!-- checked: %s", what);
	for (int i = 0; i < d->n; i++) {
		if (!strstr(d->lines[i], want) || nth-- > 0)
			continue;
		*marker = d->lines[i];
		for (int j = i + 1; j < d->n; j++)
			if (strstr(d->lines[j], "<!-- end checked -->")) {
				*end = j;
				return i + 1;
			}
		ck_abort_msg("block '%s' has no end marker", what);
	}
	return -1;
}

/* Splits a table row "| a | b | c |" into trimmed cells (in place). Returns the count, or 0
 * for a line that is not a row or is the header's separator. */
static int table_cells(char *line, char **cells)
{
	char *p = line;
	while (*p == ' ')
		p++;
	if (*p != '|' || strstr(p, "|--") || strstr(p, "|:-") || strstr(p, "-:|"))
		return 0;
	int n = 0;
	for (p++; *p && n < MAX_CELLS;) {
		char *bar = strchr(p, '|');
		if (!bar)
			break;
		*bar = '\0';
		while (*p == ' ')
			p++;
		char *e = bar;
		while (e > p && e[-1] == ' ')
			*--e = '\0';
		cells[n++] = p;
		p = bar + 1;
	}
	return n;
}

/* The text between the k-th pair of backticks of s, copied into out. 0, or -1 if none. */
static int backticked(const char *s, int k, char *out, size_t cap)
{
	for (;;) {
		const char *a = strchr(s, '`');
		if (!a)
			return -1;
		const char *b = strchr(a + 1, '`');
		if (!b)
			return -1;
		if (k-- == 0) {
			size_t n = (size_t)(b - a - 1) < cap - 1 ? (size_t)(b - a - 1) : cap - 1;
			memcpy(out, a + 1, n);
			out[n] = '\0';
			return 0;
		}
		s = b + 1;
	}
}

static int count_backticked(const char *s)
{
	char tmp[128];
	int n = 0;
	while (backticked(s, n, tmp, sizeof(tmp)) == 0)
		n++;
	return n;
}

/* ------------------------------------------------------------------------------------------ */
/* STATS families                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* A family as the document's table states it. */
struct doc_family {
	char name[96];
	char type[16];
	char values[16];                  /* integer, float, histogram */
	char label[32];                   /* the one label with fixed values, or "" */
	char fixed[MAX_VALUES][32];       /* its values, in order */
	int n_fixed;
	int per_session;                  /* labels session and uid, a line per session */
	int per_model;                    /* label model first: a line per model (and value) */
	char free_label[32];              /* one label of any value, one line, or "" */
};

static void parse_labels(struct doc_family *f, const char *cell)
{
	if (strncmp(cell, "`model`", 7) == 0) { /* `model`: ..., or `model`, `x` = values */
		f->per_model = 1;
		cell += 7;
		if (!strstr(cell, "` = "))
			return;
	}
	const char *eq = strstr(cell, "` = ");
	if (eq) {
		ck_assert_int_eq(backticked(cell, 0, f->label, sizeof(f->label)), 0);
		int n = count_backticked(eq + 1);
		ck_assert_int_le(n, MAX_VALUES);
		for (int k = 0; k < n; k++)
			backticked(eq + 1, k, f->fixed[k], sizeof(f->fixed[k]));
		f->n_fixed = n;
		return;
	}
	char a[32], b[32];
	if (backticked(cell, 0, a, sizeof(a)) == 0) {
		if (backticked(cell, 1, b, sizeof(b)) != 0) { /* one free label, one line */
			snprintf(f->free_label, sizeof(f->free_label), "%s", a);
			return;
		}
		ck_assert_msg(strcmp(a, "session") == 0 && strcmp(b, "uid") == 0,
			      "unknown label spec '%s'", cell);
		f->per_session = 1;
	}
}

static int doc_families(struct doc *d, struct doc_family *out)
{
	const char *marker;
	int end, i = doc_block(d, "stats families", 0, &end, &marker);
	ck_assert_msg(i >= 0, "no checked stats families block");
	int n = 0;
	for (; i < end; i++) {
		char *cells[MAX_CELLS];
		if (table_cells(d->lines[i], cells) < 5 || strncmp(cells[0], "`bitnetd_", 9) != 0)
			continue;
		ck_assert_int_lt(n, MAX_FAMILIES);
		struct doc_family *f = &out[n++];
		memset(f, 0, sizeof(*f));
		backticked(cells[0], 0, f->name, sizeof(f->name));
		snprintf(f->type, sizeof(f->type), "%s", cells[1]);
		snprintf(f->values, sizeof(f->values), "%s", cells[3]);
		parse_labels(f, cells[2]);
	}
	return n;
}

/* One sample line of the rendering: the metric name, its label text, its value. */
struct sample_line {
	char name[128];
	char labels[160];
	char value[48];
};

static void split_sample(const char *line, struct sample_line *s)
{
	const char *brace = strchr(line, '{'), *space = strrchr(line, ' ');
	ck_assert_ptr_nonnull(space);
	const char *name_end = brace && brace < space ? brace : space;
	snprintf(s->name, sizeof(s->name), "%.*s", (int)(name_end - line), line);
	s->labels[0] = '\0';
	if (brace && brace < space)
		snprintf(s->labels, sizeof(s->labels), "%.*s", (int)(space - brace), brace);
	snprintf(s->value, sizeof(s->value), "%s", space + 1);
}

static int is_integer(const char *v)
{
	if (!*v)
		return 0;
	for (; *v; v++)
		if (*v < '0' || *v > '9')
			return 0;
	return 1;
}

static int is_float(const char *v)
{
	if (!strcmp(v, "NaN") || !strcmp(v, "+Inf") || !strcmp(v, "-Inf"))
		return 1;
	char *end;
	errno = 0;
	strtod(v, &end);
	return *v && !*end && !errno;
}

/* The label value of `key` in "{k="v",...}" into out. */
static void label_value(const char *labels, const char *key, char *out, size_t cap)
{
	char pat[40];
	snprintf(pat, sizeof(pat), "%s=\"", key);
	const char *p = strstr(labels, pat);
	ck_assert_msg(p != NULL, "no label %s in %s", key, labels);
	p += strlen(pat);
	const char *q = strchr(p, '"');
	snprintf(out, cap, "%.*s", (int)(q - p), p);
}

/* Two models, each with a line in the per-model families. */
#define SAMPLE_MODELS 2
static const char *const sample_models[SAMPLE_MODELS] = { "chat", "org/draft:2b" };

/* Checks one family's samples (lines[0..n)) against what the document says of it. */
static void check_samples(const struct doc_family *f, struct sample_line *lines, int n,
			  uint32_t n_sessions)
{
	const char *short_name = f->name + strlen("bitnetd_");
	int hist = strcmp(f->type, "histogram") == 0;
	int per_model_values = f->n_fixed ? f->n_fixed : 1;
	int want = f->per_session ? (int)n_sessions
		   : f->per_model ? SAMPLE_MODELS * per_model_values
		   : f->n_fixed ? f->n_fixed : 1;
	ck_assert_msg(n == want + (hist ? 2 : 0), "%s: %d sample lines, the document says %d",
		      f->name, n, want + (hist ? 2 : 0));
	for (int k = 0; k < n; k++) {
		struct sample_line *s = &lines[k];
		char expect[160];
		const char *suffix = !hist ? "" : k < want ? "_bucket" : k == want ? "_sum" : "_count";
		snprintf(expect, sizeof(expect), "%s%s", f->name, suffix);
		ck_assert_msg(strcmp(s->name, expect) == 0, "%s: line %d is %s", f->name, k, s->name);
		int is_sum = hist && k == want;
		int want_float = strcmp(f->values, "float") == 0 || is_sum;
		ck_assert_msg(want_float ? is_float(s->value) : is_integer(s->value),
			      "%s: value '%s' is not a%s", s->name, s->value,
			      want_float ? " float" : "n unsigned integer");
		if (k >= want)
			continue;
		if (f->per_model) {
			char v[48];
			label_value(s->labels, "model", v, sizeof(v));
			ck_assert_str_eq(v, sample_models[k / per_model_values]);
			if (f->n_fixed) {
				label_value(s->labels, f->label, v, sizeof(v));
				ck_assert_msg(strcmp(v, f->fixed[k % per_model_values]) == 0,
					      "%s: label %s is '%s', document '%s'", f->name, f->label,
					      v, f->fixed[k % per_model_values]);
			}
		} else if (f->n_fixed) {
			char v[48];
			label_value(s->labels, f->label, v, sizeof(v));
			ck_assert_msg(strcmp(v, f->fixed[k]) == 0, "%s: label %s is '%s', document '%s'",
				      f->name, f->label, v, f->fixed[k]);
		} else if (f->per_session) {
			ck_assert_msg(strstr(s->labels, "session=\"") && strstr(s->labels, ",uid=\""),
				      "%s: labels %s", f->name, s->labels);
		} else if (f->free_label[0]) {
			char v[48];
			label_value(s->labels, f->free_label, v, sizeof(v)); /* present, any value */
		} else {
			ck_assert_msg(!s->labels[0], "%s: unexpected labels %s", short_name, s->labels);
		}
	}
}

/* A rendering where floats are not whole numbers, every histogram has samples, and there are
 * two sessions and two models. */
static char *render_sample_stats(uint32_t *n_sessions)
{
	bn_stats_reset();
	/* the families a model or a backend adds (cuda's kernels, the graph of a bitnet* float
	 * file with a packed matrix and one kept float) */
	snprintf(bn_stats.cuda_kernels, sizeof(bn_stats.cuda_kernels), "fast");
	snprintf(bn_stats.activation, sizeof(bn_stats.activation), "silu");
	snprintf(bn_stats.activation_why, sizeof(bn_stats.activation_why), "a rule");
	bn_stats.float_candidates[0] = 2;
	bn_stats.ternary_from_float[0] = 1;
	snprintf(bn_stats.kept_float, sizeof(bn_stats.kept_float), "blk.1.attn_q.weight");
	bn_stats.batch_padding = 1;
	bn_stats.batch_cells = 3;
	bn_stats_count_tokens(5, bn_now_ns()); /* 0.5 per second over the window */
	for (int h = 0; h < BN_HIST_COUNT; h++)
		bn_stats_observe((enum bn_hist)h, 0.3);
	static const uint32_t ids[2] = { 7, 8 }, uids[2] = { 1000, 65534 };
	static const struct bn_session_counters c[2] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 } };
	static const struct bn_session_counters *pc[2] = { &c[0], &c[1] };
	static const char *const states[] = { "unloaded", "loading", "loaded", "unloading",
					      "failed" };
	static const char *const reasons[BN_STATS_UNLOAD_REASONS] = { "memory", "idle", "command",
								      "reload" };
	static const struct bn_model_counters mc = { 1, 2, 3, 4, 5, 9, 6, 7, { 1, 2, 3, 4 } };
	static const struct bn_load_report load = { .seconds = 0.25, .path = "/x" };
	static struct bn_stats_model models[SAMPLE_MODELS];
	for (int i = 0; i < SAMPLE_MODELS; i++)
		models[i] = (struct bn_stats_model){ .name = sample_models[i], .state = states[2 * i],
						     .bytes = 10, .counters = &mc, .load = &load };
	struct bn_stats_view v = { .sessions_open = 2, .n_sessions = 2, .session_ids = ids,
				   .session_uids = uids, .session_counters = pc,
				   .kv_blocks_total = 10, .kv_block_tokens = 16,
				   .models = models, .n_models = SAMPLE_MODELS,
				   .model_states = states, .n_model_states = 5,
				   .unload_reasons = reasons, .memory_budget = 100 };
	char *buf = NULL;
	size_t cap = 0;
	ck_assert_int_gt(bn_stats_render(&buf, &cap, &v), 0);
	*n_sessions = 2;
	return buf;
}

START_TEST(stats_families_match_doc)
{
	struct doc d;
	doc_load(&d);
	static struct doc_family fam[MAX_FAMILIES];
	int n_doc = doc_families(&d, fam);
	uint32_t n_sessions;
	char *text = render_sample_stats(&n_sessions);
	static struct sample_line lines[256];
	int fi = -1, n_lines = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "# HELP ", 7) == 0)
			continue;
		if (strncmp(line, "# TYPE ", 7) == 0) {
			if (fi >= 0)
				check_samples(&fam[fi], lines, n_lines, n_sessions);
			fi++;
			n_lines = 0;
			ck_assert_msg(fi < n_doc, "the daemon renders more families than the document "
						  "lists (%s)", line + 7);
			char name[128], type[32];
			ck_assert_int_eq(sscanf(line + 7, "%127s %31s", name, type), 2);
			ck_assert_msg(strcmp(name, fam[fi].name) == 0,
				      "family %d: the daemon renders %s, the document lists %s", fi,
				      name, fam[fi].name);
			ck_assert_msg(strcmp(type, fam[fi].type) == 0, "%s: type %s, document %s",
				      name, type, fam[fi].type);
			continue;
		}
		ck_assert_int_ge(fi, 0);
		ck_assert_int_lt(n_lines, 256);
		split_sample(line, &lines[n_lines++]);
	}
	ck_assert_int_ge(fi, 0);
	check_samples(&fam[fi], lines, n_lines, n_sessions);
	ck_assert_msg(fi + 1 == n_doc, "the document lists %d families, the daemon renders %d",
		      n_doc, fi + 1);
	free(text);
	free(d.text);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Layout tables and the worked example's addresses                                           */
/* ------------------------------------------------------------------------------------------ */

#define HFIELD(f) { #f, offsetof(struct bn_shm_header, f), sizeof(((struct bn_shm_header *)0)->f) }
static const struct {
	const char *name;
	size_t offset, size;
} header_fields[] = {
	HFIELD(sq_offset),          HFIELD(sq_entries),          HFIELD(sqes_offset),
	HFIELD(slot_offset),        HFIELD(slot_count),          HFIELD(slot_size),
	HFIELD(slot_prompt_offset), HFIELD(slot_prompt_capacity), HFIELD(slot_output_offset),
	HFIELD(slot_output_capacity), HFIELD(slot_logprob_offset), HFIELD(slot_logprob_capacity),
	HFIELD(segment_size),
};

static uint64_t header_value(const struct bn_shm_header *h, const char *name)
{
	for (size_t i = 0; i < sizeof(header_fields) / sizeof(header_fields[0]); i++) {
		if (strcmp(header_fields[i].name, name) != 0)
			continue;
		const char *p = (const char *)h + header_fields[i].offset;
		if (header_fields[i].size == 8)
			return *(const uint64_t *)(const void *)p;
		return *(const uint32_t *)(const void *)p;
	}
	ck_abort_msg("the document names a header field this test does not know: %s", name);
	return 0;
}

/* The layout a block's marker describes ("context_length=N slots=N logprobs=N"). */
static void marker_layout(const char *marker, struct bn_shm_header *h)
{
	const char *p = strstr(marker, "context_length=");
	ck_assert_ptr_nonnull(p);
	unsigned ctx, slots, logprobs;
	ck_assert_int_eq(sscanf(p, "context_length=%u slots=%u logprobs=%u", &ctx, &slots, &logprobs),
			 3);
	struct bn_session_limits lim = { .slots = slots, .prompt_capacity = ctx,
					 .output_capacity = ctx, .logprob_capacity = logprobs };
	memset(h, 0, sizeof(*h));
	bn_segment_layout(&lim, slots, h);
}

START_TEST(layout_tables_match_doc)
{
	struct doc d;
	doc_load(&d);
	int blocks = 0, rows = 0;
	for (int b = 0;; b++) {
		const char *marker;
		int end, i = doc_block(&d, "layout", b, &end, &marker);
		if (i < 0)
			break;
		blocks++;
		struct bn_shm_header h;
		marker_layout(marker, &h);
		for (; i < end; i++) {
			char *cells[MAX_CELLS], name[64];
			if (table_cells(d.lines[i], cells) < 2 || backticked(cells[0], 0, name, sizeof(name)))
				continue;
			unsigned long long v = strtoull(cells[1], NULL, 10);
			ck_assert_msg(v == header_value(&h, name), "%s: %s is %llu in the document, %llu "
							       "in the daemon", marker, name, v,
				      (unsigned long long)header_value(&h, name));
			rows++;
		}
	}
	ck_assert_int_eq(blocks, 2);
	ck_assert_int_ge(rows, 17);
	free(d.text);
}
END_TEST

#define SFIELD(f) { #f, offsetof(struct bn_slot, f) }
static const struct {
	const char *name;
	size_t offset;
} slot_fields[] = {
	SFIELD(state),    SFIELD(cancel),         SFIELD(n_tokens),   SFIELD(status),
	SFIELD(error),    SFIELD(waiters),        SFIELD(events),     SFIELD(queue_ns),
	SFIELD(first_token_ns), SFIELD(total_ns), SFIELD(n_prompt),   SFIELD(max_tokens),
	SFIELD(flags),
};

/* Whether `name` @at is a field of slot `slot` or of the ring in layout h. */
static int address_is(const struct bn_shm_header *h, uint32_t slot, const char *name, uint64_t at)
{
	uint64_t s = h->slot_offset + (uint64_t)slot * h->slot_size;
	for (size_t i = 0; i < sizeof(slot_fields) / sizeof(slot_fields[0]); i++)
		if (!strcmp(slot_fields[i].name, name) && at == s + slot_fields[i].offset)
			return 1;
	if (!strcmp(name, "prompt"))
		return at == s + h->slot_prompt_offset;
	if (!strcmp(name, "output"))
		return at == s + h->slot_output_offset;
	if (!strcmp(name, "head"))
		return at == h->sq_offset + offsetof(struct bn_sq_ring, head);
	if (!strcmp(name, "tail"))
		return at == h->sq_offset + offsetof(struct bn_sq_ring, tail);
	return !strcmp(name, "flags") && at == h->sq_offset + offsetof(struct bn_sq_ring, flags);
}

START_TEST(worked_example_addresses_match_doc)
{
	struct doc d;
	doc_load(&d);
	const char *marker;
	int end, i = doc_block(&d, "addresses of slot 1", 0, &end, &marker);
	ck_assert_msg(i >= 0, "no checked addresses block");
	int layout_end;
	const char *layout_marker;
	ck_assert_int_ge(doc_block(&d, "layout", 0, &layout_end, &layout_marker), 0);
	struct bn_shm_header h;
	marker_layout(layout_marker, &h);
	int checked = 0;
	for (; i < end; i++) {
		/* "`name` @N" and "`name`\n   @N" (a line break inside the pair) */
		for (const char *p = d.lines[i]; (p = strchr(p, '@')) != NULL; p++) {
			if (p[1] < '0' || p[1] > '9')
				continue;
			const char *line = d.lines[i];
			const char *q = p;
			while (q > line && q[-1] == ' ')
				q--;
			if (q == line) { /* the name ends the previous line */
				line = d.lines[i - 1];
				q = line + strlen(line);
			}
			if (q == line || q[-1] != '`')
				continue;
			const char *a = q - 2;
			while (a >= line && *a != '`')
				a--;
			ck_assert_msg(a >= line, "unbalanced backticks before %s", p);
			char name[32];
			snprintf(name, sizeof(name), "%.*s", (int)(q - 1 - (a + 1)), a + 1);
			unsigned long long at = strtoull(p + 1, NULL, 10);
			ck_assert_msg(address_is(&h, 1, name, at), "§12: `%s` @%llu is not where the "
								   "daemon puts it", name, at);
			checked++;
		}
	}
	ck_assert_int_ge(checked, 20);
	free(d.text);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The seeded draw                                                                            */
/* ------------------------------------------------------------------------------------------ */

static uint64_t doc_u64(const char *cell)
{
	char tmp[40];
	const char *text = backticked(cell, 0, tmp, sizeof(tmp)) == 0 ? tmp : cell;
	return strtoull(text, NULL, 0);
}

START_TEST(sample_draws_match_doc)
{
	struct doc d;
	doc_load(&d);
	const char *marker;
	int end, i = doc_block(&d, "sample draws", 0, &end, &marker);
	ck_assert_msg(i >= 0, "no checked sample draws block");
	int rows = 0;
	for (; i < end; i++) {
		char *cells[MAX_CELLS];
		if (table_cells(d.lines[i], cells) < 5 || cells[1][0] < '0' || cells[1][0] > '9')
			continue; /* the header row */
		uint64_t seed = doc_u64(cells[0]), z = doc_u64(cells[2]), k = doc_u64(cells[3]);
		uint32_t step = (uint32_t)strtoul(cells[1], NULL, 10);
		double u = strtod(cells[4], NULL);
		float got = bn_sample_uniform(seed, step);
		ck_assert_msg(z == bn_sample_bits(seed, step), "seed %llu step %u: z is %#llx in "
							       "the daemon", (unsigned long long)seed,
			      step, (unsigned long long)bn_sample_bits(seed, step));
		ck_assert_msg(z >> 40 == k, "row %d: z >> 40 is not the document's %llu", rows,
			      (unsigned long long)k);
		ck_assert_msg((double)got * 0x1p24 == (double)k, "seed %llu step %u: the daemon draws "
								 "%.17g, the document %llu / 2^24",
			      (unsigned long long)seed, step, (double)got, (unsigned long long)k);
		ck_assert_msg((double)got == u, "seed %llu step %u: u %.17g, the document %s",
			      (unsigned long long)seed, step, (double)got, cells[4]);
		rows++;
	}
	ck_assert_int_ge(rows, 4);
	free(d.text);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("protocol_doc");
	TCase *tc = tcase_create("figures");
	tcase_add_test(tc, stats_families_match_doc);
	tcase_add_test(tc, layout_tables_match_doc);
	tcase_add_test(tc, worked_example_addresses_match_doc);
	tcase_add_test(tc, sample_draws_match_doc);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
