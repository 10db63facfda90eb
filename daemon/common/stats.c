/* SPDX-License-Identifier: MIT */
#include "stats.h"

#include "bitnet_shm.h"

#include "clock.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define NS_PER_S 1000000000u

struct bn_stats bn_stats;

static const char *const status_names[] = {
	"none", "length", "eos", "cancelled", "error", "shutdown", "stop", "deadline", "complete",
};
_Static_assert(ARRAY_LEN(status_names) == BN_STATS_STATUSES, "a name per enum bn_status");

static const char *const error_names[] = {
	"invalid", "token", "too_long", "again", "shutdown", "disconnected", "timeout",
	"protocol", "version", "busy", "backend", "cancelled", "not_done", "empty",
	"kv_space", "unsupported", "grammar", "grammar_limit", "grammar_stuck",
	"model_not_found", "model_load", "model_unloaded", "denied",
};
_Static_assert(ARRAY_LEN(error_names) == BN_STATS_ERRORS, "a name per enum bn_error");

static const char *const refusal_names[] = {
	"max_sessions", "user_sessions", "user_handshakes", "shutdown", "hello_timeout",
	"protocol",     "version",       "backend",         "welcome_failed",
	"model_not_found",
};
_Static_assert(ARRAY_LEN(refusal_names) == BN_REFUSALS, "a name per enum bn_refusal");

void bn_stats_count_error(uint32_t error)
{
	if (error >= BN_E_INVALID && error < BN_E_INVALID + BN_STATS_ERRORS)
		bn_stats.request_errors[error - BN_E_INVALID]++;
}

/* ------------------------------------------------------------------------------------------ */
/* Histograms                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static const double rows_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128 };
static const double tokens_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048 };
/* 1-2.5-5 steps from 100 us to a minute: a decode step takes milliseconds, a queue wait or a
 * first token under load can take seconds. */
static const double seconds_bounds[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
					 0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
					 1,      2.5,     5,      10,    30,     60 };
#define HIST_MAX_BOUNDS ARRAY_LEN(seconds_bounds)

struct hist_desc {
	const char *name; /* after "bitnetd_" */
	const char *help;
	const double *bounds; /* ascending; +Inf is implied */
	uint32_t n_bounds;
};

#define BOUNDS(a) a, ARRAY_LEN(a)
static const struct hist_desc hist_descs[BN_HIST_COUNT] = {
	[BN_HIST_BATCH_ROWS] = { "batch_rows", "Rows (sequences) in one batched step.",
				 BOUNDS(rows_bounds) },
	[BN_HIST_BATCH_TOKENS] = { "batch_tokens",
				   "Tokens (cells that are not padding) in one step.",
				   BOUNDS(tokens_bounds) },
	[BN_HIST_STEP_SECONDS] = { "step_seconds", "Wall time of one backend step.",
				   BOUNDS(seconds_bounds) },
	[BN_HIST_QUEUE_SECONDS] = { "queue_seconds",
				    "From the daemon seeing a request to its first step.",
				    BOUNDS(seconds_bounds) },
	[BN_HIST_TTFT_SECONDS] = { "time_to_first_token_seconds",
				   "From the daemon seeing a request to its first token.",
				   BOUNDS(seconds_bounds) },
	[BN_HIST_ITL_SECONDS] = { "inter_token_seconds",
				  "Between consecutive tokens of one request.",
				  BOUNDS(seconds_bounds) },
};

struct hist {
	uint64_t buckets[HIST_MAX_BOUNDS + 1]; /* not cumulative; [n_bounds] is above every bound */
	uint64_t count;
	double sum;
};

static struct hist hists[BN_HIST_COUNT];

void bn_stats_observe(enum bn_hist h, double value)
{
	if ((unsigned)h >= BN_HIST_COUNT || isnan(value))
		return;
	const struct hist_desc *d = &hist_descs[h];
	uint32_t i = 0;
	while (i < d->n_bounds && value > d->bounds[i])
		i++;
	hists[h].buckets[i]++;
	hists[h].count++;
	hists[h].sum += value;
}

/* ------------------------------------------------------------------------------------------ */
/* Tokens per second                                                                           */
/* ------------------------------------------------------------------------------------------ */

#define TOKEN_WINDOW_S 10
/* One bucket per second of the window, and one for the second that is partly outside it. */
#define TOKEN_RING (TOKEN_WINDOW_S + 1)

struct token_second {
	uint64_t sec; /* which second (now_ns / 1e9) the count belongs to */
	uint64_t tokens;
};

static struct token_second token_ring[TOKEN_RING];

void bn_stats_count_tokens(uint32_t n, uint64_t now_ns)
{
	uint64_t sec = now_ns / NS_PER_S;
	struct token_second *b = &token_ring[sec % TOKEN_RING];
	if (b->sec != sec) {
		if (sec < b->sec)
			return; /* older than the second this bucket now holds: out of the window */
		b->sec = sec;
		b->tokens = 0;
	}
	b->tokens += n;
}

/* The window (now - 10 s, now] spans the current partial second, the nine before it, and the
 * tail of the second before those: that bucket counts for the fraction still inside. Exact for
 * a steady rate, and no per-token timestamps to keep. */
double bn_stats_tokens_per_second(uint64_t now_ns)
{
	uint64_t sec = now_ns / NS_PER_S;
	double inside = 1.0 - (double)(now_ns % NS_PER_S) / NS_PER_S;
	double sum = 0;
	for (uint64_t k = 0; k <= TOKEN_WINDOW_S && k <= sec; k++) {
		const struct token_second *b = &token_ring[(sec - k) % TOKEN_RING];
		if (b->sec == sec - k)
			sum += (double)b->tokens * (k < TOKEN_WINDOW_S ? 1.0 : inside);
	}
	return sum / TOKEN_WINDOW_S;
}

void bn_stats_reset(void)
{
	memset(&bn_stats, 0, sizeof(bn_stats));
	memset(hists, 0, sizeof(hists));
	memset(token_ring, 0, sizeof(token_ring));
}

/* ------------------------------------------------------------------------------------------ */
/* Text                                                                                        */
/* ------------------------------------------------------------------------------------------ */

#define TEXT_INITIAL_CAP (16 * 1024)

/* The caller's buffer, grown by doubling. After a failed allocation nothing more is written:
 * the buffer keeps the whole lines that fit. */
struct text {
	char **buf;
	size_t *cap;
	size_t len;
	int failed;
};

static int text_grow(struct text *t, size_t need)
{
	size_t cap = *t->cap && *t->buf ? *t->cap : TEXT_INITIAL_CAP;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return -1;
		cap *= 2;
	}
	if (cap == *t->cap && *t->buf)
		return 0;
	char *p = realloc(*t->buf, cap);
	if (!p)
		return -1;
	*t->buf = p;
	*t->cap = cap;
	return 0;
}

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
	while (!t->failed) {
		size_t room = *t->cap - t->len;
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(*t->buf + t->len, room, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < room) {
			t->len += (size_t)n;
			return;
		}
		if (n < 0 || text_grow(t, t->len + (size_t)n + 1) < 0) {
			t->failed = 1;
			(*t->buf)[t->len] = '\0';
		}
	}
}

/* Prometheus float: shortest of %.15g / %.17g that reads back exactly; +Inf, -Inf, NaN. */
static const char *fmt_double(char out[32], double v)
{
	if (isnan(v))
		return "NaN";
	if (isinf(v))
		return v > 0 ? "+Inf" : "-Inf";
	snprintf(out, 32, "%.15g", v);
	if (strtod(out, NULL) != v)
		snprintf(out, 32, "%.17g", v);
	return out;
}

/* A label value escaped for the exposition format: backslash, double quote and newline. */
static const char *label_escape(char *out, size_t cap, const char *in)
{
	size_t o = 0;
	for (; *in && o + 3 <= cap; in++) {
		if (*in == '\\' || *in == '"' || *in == '\n')
			out[o++] = '\\';
		out[o++] = *in == '\n' ? 'n' : *in;
	}
	out[o] = '\0';
	return out;
}

static void family(struct text *t, const char *name, const char *type, const char *help)
{
	put(t, "# HELP bitnetd_%s %s\n# TYPE bitnetd_%s %s\n", name, help, name, type);
}

static void counter(struct text *t, const char *name, const char *help, uint64_t v)
{
	family(t, name, "counter", help);
	put(t, "bitnetd_%s %" PRIu64 "\n", name, v);
}

static void gauge(struct text *t, const char *name, const char *help, uint64_t v)
{
	family(t, name, "gauge", help);
	put(t, "bitnetd_%s %" PRIu64 "\n", name, v);
}

static void gauge_real(struct text *t, const char *name, const char *help, double v)
{
	char num[32];
	family(t, name, "gauge", help);
	put(t, "bitnetd_%s %s\n", name, fmt_double(num, v));
}

/* ------------------------------------------------------------------------------------------ */
/* Rendering                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void render_requests(struct text *t)
{
	char esc[64];
	family(t, "requests_finished_total", "counter", "Requests ended, by terminal status.");
	for (int s = 1; s < BN_STATS_STATUSES; s++)
		put(t, "bitnetd_requests_finished_total{status=\"%s\"} %" PRIu64 "\n",
		    label_escape(esc, sizeof(esc), status_names[s]), bn_stats.requests_finished[s]);
	family(t, "request_errors_total", "counter", "Requests ended in error, by reason.");
	for (int e = 0; e < BN_STATS_ERRORS; e++)
		put(t, "bitnetd_request_errors_total{reason=\"%s\"} %" PRIu64 "\n",
		    label_escape(esc, sizeof(esc), error_names[e]), bn_stats.request_errors[e]);
}

static uint64_t refusals_total(void)
{
	uint64_t all = 0;
	for (int r = 0; r < BN_REFUSALS; r++)
		all += bn_stats.refusals[r];
	return all;
}

/* Refusals by reason: a family of its own, after the old ones, so readers of the total and
 * of the old order keep what they read. */
static void render_refusals(struct text *t)
{
	family(t, "connections_refused_total", "counter",
	       "Connections that got no session, by reason.");
	for (int r = 0; r < BN_REFUSALS; r++)
		put(t, "bitnetd_connections_refused_total{reason=\"%s\"} %" PRIu64 "\n",
		    refusal_names[r], bn_stats.refusals[r]);
}

/* The counters the daemon always had, in their old order: a client reading into a small
 * buffer still finds them. */
static void render_counters(struct text *t)
{
	counter(t, "sessions_opened_total", "Sessions opened.", bn_stats.sessions_opened);
	counter(t, "sessions_closed_total", "Sessions closed.", bn_stats.sessions_closed);
	counter(t, "sessions_refused_total", "Connections that got no session.", refusals_total());
	counter(t, "protocol_violations_total", "Sessions closed for breaking the protocol.",
		bn_stats.protocol_violations);
	counter(t, "requests_submitted_total", "Requests taken from the rings.",
		bn_stats.requests_submitted);
	render_requests(t);
	counter(t, "tokens_generated_total", "Tokens written to response slots.",
		bn_stats.tokens_generated);
	counter(t, "steps_total", "Batched forward steps.", bn_stats.steps);
	counter(t, "batch_rows_total", "Rows over all steps.", bn_stats.batch_rows);
	counter(t, "batch_cells_total", "Rows times padded width over all steps.",
		bn_stats.batch_cells);
	counter(t, "batch_padding_cells_total", "Padded cells that held no token.",
		bn_stats.batch_padding);
	counter(t, "futex_wakes_total", "FUTEX_WAKE system calls.", bn_stats.futex_wakes);
	counter(t, "doorbells_total", "Doorbell eventfd wake-ups.", bn_stats.doorbells);
	counter(t, "sleeps_total", "Times the loop slept in io_uring.", bn_stats.sleeps);
	counter(t, "sleep_timeouts_total",
		"Sleeps that ended by their timeout (housekeeping, the watchdog), not by an event.",
		bn_stats.sleep_timeouts);
	counter(t, "uring_submits_total", "io_uring_enter calls made only to submit.",
		bn_stats.uring_submits);
	render_refusals(t);
}

const char *const bn_weights_cache_names[] = { "off", "hit", "writing", "built", "failed" };

void bn_stats_set_load(double seconds, enum bn_weights_cache state, const char *cache_path)
{
	bn_stats.load_seconds = seconds;
	snprintf(bn_stats.weights_cache_path, sizeof(bn_stats.weights_cache_path), "%s",
		 cache_path);
	bn_stats_set_weights_cache(state);
}

void bn_stats_set_weights_cache(enum bn_weights_cache state)
{
	__atomic_store_n(&bn_stats.weights_cache, (int)state, __ATOMIC_RELEASE);
}

void bn_load_report_set(struct bn_load_report *r, double seconds, enum bn_weights_cache state,
			const char *cache_path)
{
	if (!r) {
		bn_stats_set_load(seconds, state, cache_path);
		return;
	}
	r->seconds = seconds;
	snprintf(r->path, sizeof(r->path), "%s", cache_path);
	bn_load_report_set_cache(r, state);
}

void bn_load_report_set_cache(struct bn_load_report *r, enum bn_weights_cache state)
{
	if (r)
		__atomic_store_n(&r->weights_cache, (int)state, __ATOMIC_RELEASE);
	else
		bn_stats_set_weights_cache(state);
}

/* The model's load: its time, the weights cache's state (a sample per state, 1 for the
 * current one, 0 for the others) and its file (one sample, as an info metric). */
static double ratio(uint64_t num, uint64_t den)
{
	return den ? (double)num / (double)den : 0.0;
}

static void render_speculative(struct text *t)
{
	static const char *const modes[] = { "request", "ngram", "off" };
	const char *mode = bn_stats.spec_mode ? bn_stats.spec_mode : "off";
	family(t, "speculative", "gauge",
	       "Speculative decoding, 1 for who drafts: request (requests that ask), ngram (every "
	       "generate request), off (none, or a backend that cannot rewind).");
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		put(t, "bitnetd_speculative{mode=\"%s\"} %d\n", modes[i], strcmp(mode, modes[i]) == 0);
	gauge(t, "speculative_draft_tokens", "Drafts a request verifies in one step at most.",
	      bn_stats.spec_draft_tokens);
	counter(t, "speculative_rows_total", "Decode rows that verified drafted tokens.",
		bn_stats.spec_rows);
	counter(t, "speculative_drafted_tokens_total", "Drafted tokens those rows verified.",
		bn_stats.spec_drafted);
	counter(t, "speculative_accepted_tokens_total",
		"Drafted tokens that were the model's own, published.", bn_stats.spec_accepted);
	counter(t, "speculative_tokens_total", "Tokens published by those rows.",
		bn_stats.spec_tokens);
	gauge_real(t, "speculative_acceptance_ratio", "Accepted over drafted tokens, since start.",
		   ratio(bn_stats.spec_accepted, bn_stats.spec_drafted));
	gauge_real(t, "speculative_tokens_per_row",
		   "Tokens a verifying decode row published, on average since start.",
		   ratio(bn_stats.spec_tokens, bn_stats.spec_rows));
}

static void render_load(struct text *t, const struct bn_stats_view *v)
{
	static char path[2 * sizeof(bn_stats.weights_cache_path)];
	const struct bn_load_report *r = v->load;
	int now = __atomic_load_n(r ? &r->weights_cache : &bn_stats.weights_cache, __ATOMIC_ACQUIRE);
	gauge_real(t, "model_load_seconds",
		   "Seconds the backend took to load the model, the weights cache included.",
		   r ? r->seconds : bn_stats.load_seconds);
	family(t, "weights_cache", "gauge",
	       "The packed-weight cache, 1 for its state: hit (mapped), writing (built at this "
	       "start, being written after ready), built (written), failed (not written), off "
	       "(none). The weights of writing, built and failed are the daemon's own.");
	for (int i = BN_WEIGHTS_CACHE_HIT; i <= BN_WEIGHTS_CACHE_FAILED; i++)
		put(t, "bitnetd_weights_cache{state=\"%s\"} %d\n", bn_weights_cache_names[i],
		    now == i);
	put(t, "bitnetd_weights_cache{state=\"off\"} %d\n", now == BN_WEIGHTS_CACHE_OFF);
	family(t, "weights_cache_path", "gauge", "The packed-weight cache's file (value 1).");
	put(t, "bitnetd_weights_cache_path{path=\"%s\"} 1\n",
	    label_escape(path, sizeof(path), r ? r->path : bn_stats.weights_cache_path));
}

/* The cuda backend's kernel paths (--cuda-kernels), as an info metric; nothing elsewhere. */
static void render_kernels(struct text *t)
{
	static char name[2 * sizeof(bn_stats.cuda_kernels)];
	if (!bn_stats.cuda_kernels[0])
		return;
	family(t, "cuda_kernels", "gauge", "The cuda backend's kernel paths, --cuda-kernels (value 1).");
	put(t, "bitnetd_cuda_kernels{variant=\"%s\"} 1\n",
	    label_escape(name, sizeof(name), bn_stats.cuda_kernels));
}

/* The graph the weights run: the activation with what chose it, and the float matrices of a
 * bitnet* file packed to the ternary kernels, by role (info metrics; nothing without a
 * model). */
static void render_graph(struct text *t)
{
	static const char *const roles[] = { "attn_q", "attn_k", "attn_v", "attn_output",
					     "ffn_gate", "ffn_up", "ffn_down" };
	static char why[2 * sizeof(bn_stats.activation_why)], kept[2 * sizeof(bn_stats.kept_float)];
	if (!bn_stats.activation[0])
		return;
	family(t, "model_activation", "gauge", "The FFN activation the model runs: 1 on its line.");
	put(t, "bitnetd_model_activation{name=\"silu\"} %d\n", !strcmp(bn_stats.activation, "silu"));
	put(t, "bitnetd_model_activation{name=\"relu2\"} %d\n", !strcmp(bn_stats.activation, "relu2"));
	put(t, "bitnetd_model_activation{name=\"gelu\"} %d\n", !strcmp(bn_stats.activation, "gelu"));
	family(t, "model_activation_why", "gauge",
	       "What chose the activation: the key, the rule or --activation (value 1).");
	put(t, "bitnetd_model_activation_why{why=\"%s\"} 1\n",
	    label_escape(why, sizeof(why), bn_stats.activation_why));
	uint32_t any = 0;
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		any += bn_stats.float_candidates[i];
	if (!any)
		return;
	family(t, "float_matrices", "gauge",
	       "Float layer matrices of a bitnet* file, by role: candidates for the ternary kernels.");
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		put(t, "bitnetd_float_matrices{role=\"%s\"} %u\n", roles[i],
		    bn_stats.float_candidates[i]);
	family(t, "ternary_from_float_matrices", "gauge",
	       "Of those, the matrices whose rows are exactly {-s, 0, +s}, packed to the ternary "
	       "kernels at load.");
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		put(t, "bitnetd_ternary_from_float_matrices{role=\"%s\"} %u\n", roles[i],
		    bn_stats.ternary_from_float[i]);
	family(t, "kept_float", "gauge", "The float matrices that stayed float (value 1).");
	put(t, "bitnetd_kept_float{tensors=\"%s\"} 1\n",
	    label_escape(kept, sizeof(kept), bn_stats.kept_float));
}

static void render_gauges(struct text *t, const struct bn_stats_view *v)
{
	double waste = bn_stats.batch_cells
			       ? (double)bn_stats.batch_padding / (double)bn_stats.batch_cells
			       : 0.0;
	gauge_real(t, "batch_padding_ratio", "Padded cells over all cells, over all steps.", waste);
	gauge_real(t, "tokens_per_second", "Tokens generated per second over the last 10 s.",
		   bn_stats_tokens_per_second(bn_now_ns()));
	uint64_t taken = (uint64_t)v->kv_blocks_used + v->kv_blocks_reserved;
	gauge(t, "kv_blocks_total", "KV cache blocks.", v->kv_blocks_total);
	gauge(t, "kv_blocks_used", "KV cache blocks holding positions.", v->kv_blocks_used);
	gauge(t, "kv_blocks_reserved",
	      "KV cache blocks promised to running sequences, not used yet.",
	      v->kv_blocks_reserved);
	gauge(t, "kv_blocks_free", "KV cache blocks neither used nor reserved.",
	      taken < v->kv_blocks_total ? v->kv_blocks_total - taken : 0);
	gauge(t, "kv_block_tokens", "Positions per KV cache block.", v->kv_block_tokens);
	gauge(t, "kv_blocks_cached",
	      "KV cache blocks the prefix cache can give again (held by sequences or parked).",
	      v->kv_blocks_cached);
	counter(t, "prefix_cache_evictions_total", "Cached blocks taken for other contents.",
		v->kv_evictions);
	counter(t, "prefix_cache_lookup_tokens_total",
		"Prompt positions the prefix cache could have given.", bn_stats.prefix_lookup_tokens);
	counter(t, "prefix_cache_hit_tokens_total",
		"Prompt positions the prefix cache gave (not computed).", bn_stats.prefix_hit_tokens);
	double rate = bn_stats.prefix_lookup_tokens ? (double)bn_stats.prefix_hit_tokens /
							      (double)bn_stats.prefix_lookup_tokens
						    : 0.0;
	gauge_real(t, "prefix_cache_hit_ratio", "Hit tokens over lookup tokens, since start.", rate);
	counter(t, "lm_head_screened_rows_total",
		"Greedy tokens found through the LM head's int8 screen (--lm-head screened).",
		bn_stats.lm_head_screened_rows);
	counter(t, "lm_head_screen_groups_total",
		"64-row groups of the float LM head computed for screened rows.",
		bn_stats.lm_head_screen_groups);
	counter(t, "lm_head_screen_full_rows_total",
		"Rows the screen left to the full float head (a non-finite input).",
		bn_stats.lm_head_full_rows);
	render_speculative(t);
	render_load(t, v);
	render_kernels(t);
	render_graph(t);
}

static void render_hist(struct text *t, enum bn_hist h)
{
	const struct hist_desc *d = &hist_descs[h];
	const struct hist *g = &hists[h];
	char num[32];
	uint64_t below = 0;
	family(t, d->name, "histogram", d->help);
	for (uint32_t i = 0; i < d->n_bounds; i++) {
		below += g->buckets[i];
		put(t, "bitnetd_%s_bucket{le=\"%s\"} %" PRIu64 "\n", d->name,
		    fmt_double(num, d->bounds[i]), below);
	}
	put(t, "bitnetd_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", d->name, g->count);
	put(t, "bitnetd_%s_sum %s\n", d->name, fmt_double(num, g->sum));
	put(t, "bitnetd_%s_count %" PRIu64 "\n", d->name, g->count);
}

static const struct {
	const char *name;
	const char *help;
	size_t offset; /* in struct bn_session_counters */
} session_families[] = {
	{ "session_requests_submitted_total", "Requests taken from this session's ring.",
	  offsetof(struct bn_session_counters, submitted) },
	{ "session_requests_finished_total", "Requests of this session ended (any status).",
	  offsetof(struct bn_session_counters, finished) },
	{ "session_request_errors_total", "Requests of this session ended in error.",
	  offsetof(struct bn_session_counters, errors) },
	{ "session_tokens_generated_total", "Tokens written to this session's slots.",
	  offsetof(struct bn_session_counters, tokens) },
};

/* One family at a time, a line per session: the format wants a family's samples together. */
static void render_sessions(struct text *t, const struct bn_stats_view *v)
{
	int rows = v->n_sessions && v->session_ids && v->session_uids && v->session_counters;
	for (size_t f = 0; f < ARRAY_LEN(session_families); f++) {
		family(t, session_families[f].name, "counter", session_families[f].help);
		for (uint32_t i = 0; rows && i < v->n_sessions; i++) {
			const struct bn_session_counters *c = v->session_counters[i];
			uint64_t value = 0;
			if (c)
				memcpy(&value, (const char *)c + session_families[f].offset,
				       sizeof(value));
			put(t,
			    "bitnetd_%s{session=\"%" PRIu32 "\",uid=\"%" PRIu32 "\"} %" PRIu64
			    "\n",
			    session_families[f].name, v->session_ids[i], v->session_uids[i], value);
		}
	}
}

/* ---- per model ------------------------------------------------------------------------ */

#define MODEL_U64(field) offsetof(struct bn_model_counters, field)
static const struct {
	const char *name;
	const char *help;
	size_t offset; /* in struct bn_model_counters */
} model_counter_families[] = {
	{ "model_requests_submitted_total", "Requests of this model taken from the rings.",
	  MODEL_U64(submitted) },
	{ "model_requests_finished_total", "Requests of this model ended (any status).",
	  MODEL_U64(finished) },
	{ "model_request_errors_total", "Requests of this model ended in error.", MODEL_U64(errors) },
	{ "model_tokens_generated_total", "Tokens of this model written to slots.", MODEL_U64(tokens) },
	{ "model_steps_total", "Batched forward steps of this model.", MODEL_U64(steps) },
	{ "model_steps_overlapped_total",
	  "Steps of this model run at the same time as another model's step.",
	  MODEL_U64(overlapped_steps) },
	{ "model_loads_total", "Loads of this model that succeeded.", MODEL_U64(loads) },
	{ "model_load_failures_total", "Loads of this model that failed.", MODEL_U64(load_failures) },
};

static uint64_t model_counter(const struct bn_stats_model *m, size_t offset)
{
	uint64_t value;
	memcpy(&value, (const char *)m->counters + offset, sizeof(value));
	return value;
}

enum model_gauge { MG_BYTES, MG_QUEUED, MG_RUNNING, MG_KV_TOTAL, MG_KV_USED };

static uint64_t model_gauge_of(const struct bn_stats_model *m, enum model_gauge g)
{
	switch (g) {
	case MG_BYTES: return m->bytes;
	case MG_QUEUED: return m->queued;
	case MG_RUNNING: return m->running;
	case MG_KV_TOTAL: return m->kv_blocks_total;
	default: return m->kv_blocks_used;
	}
}

/* A gauge family with a line per model. */
static void model_gauges(struct text *t, const struct bn_stats_view *v, const char *name,
			 const char *help, enum model_gauge g)
{
	family(t, name, "gauge", help);
	for (uint32_t i = 0; i < v->n_models; i++)
		put(t, "bitnetd_%s{model=\"%s\"} %" PRIu64 "\n", name, v->models[i].name,
		    model_gauge_of(&v->models[i], g));
}

static void render_model_states(struct text *t, const struct bn_stats_view *v)
{
	char num[32];
	family(t, "model_state", "gauge", "A model's state, 1 on its line.");
	for (uint32_t i = 0; i < v->n_models; i++)
		for (uint32_t k = 0; k < v->n_model_states; k++)
			put(t, "bitnetd_model_state{model=\"%s\",state=\"%s\"} %d\n",
			    v->models[i].name, v->model_states[k],
			    !strcmp(v->models[i].state, v->model_states[k]));
	family(t, "model_unloads_total", "counter", "Unloads of a model, by reason.");
	for (uint32_t i = 0; i < v->n_models; i++)
		for (uint32_t k = 0; v->unload_reasons && k < BN_STATS_UNLOAD_REASONS; k++)
			put(t, "bitnetd_model_unloads_total{model=\"%s\",reason=\"%s\"} %" PRIu64 "\n",
			    v->models[i].name, v->unload_reasons[k], v->models[i].counters->unloads[k]);
	family(t, "model_last_load_seconds", "gauge",
	       "Seconds a model's last load took, the weights cache included.");
	for (uint32_t i = 0; i < v->n_models; i++)
		put(t, "bitnetd_model_last_load_seconds{model=\"%s\"} %s\n", v->models[i].name,
		    fmt_double(num, v->models[i].load ? v->models[i].load->seconds : 0));
	family(t, "model_weights_cache", "gauge",
	       "A model's packed-weight cache at its last load, 1 for its state.");
	for (uint32_t i = 0; i < v->n_models; i++) {
		const struct bn_load_report *r = v->models[i].load;
		int now = r ? __atomic_load_n(&r->weights_cache, __ATOMIC_ACQUIRE) : 0;
		for (int k = BN_WEIGHTS_CACHE_OFF; k <= BN_WEIGHTS_CACHE_FAILED; k++)
			put(t, "bitnetd_model_weights_cache{model=\"%s\",state=\"%s\"} %d\n",
			    v->models[i].name, bn_weights_cache_names[k], now == k);
	}
}

static void render_models(struct text *t, const struct bn_stats_view *v)
{
	gauge(t, "memory_budget_bytes", "Bytes all loaded models may hold (--memory); 0: none.",
	      v->memory_budget);
	gauge(t, "memory_loaded_bytes", "Bytes the loaded models hold, weights and KV.",
	      v->memory_loaded);
	render_model_states(t, v);
	model_gauges(t, v, "model_bytes", "A model's weights and KV as last loaded.",
		     MG_BYTES);
	model_gauges(t, v, "model_queue_depth", "A model's requests waiting to join a batch.",
		     MG_QUEUED);
	model_gauges(t, v, "model_running_sequences", "A model's sequences in its running batch.",
		     MG_RUNNING);
	model_gauges(t, v, "model_kv_blocks_total", "Blocks of a model's KV pool (0 unloaded).",
		     MG_KV_TOTAL);
	model_gauges(t, v, "model_kv_blocks_used", "A model's KV blocks holding positions.",
		     MG_KV_USED);
	for (size_t f = 0; f < ARRAY_LEN(model_counter_families); f++) {
		family(t, model_counter_families[f].name, "counter", model_counter_families[f].help);
		for (uint32_t i = 0; i < v->n_models; i++)
			put(t, "bitnetd_%s{model=\"%s\"} %" PRIu64 "\n", model_counter_families[f].name,
			    v->models[i].name,
			    model_counter(&v->models[i], model_counter_families[f].offset));
	}
}

long bn_stats_render(char **buf, size_t *cap, const struct bn_stats_view *v)
{
	struct text t = { buf, cap, 0, 0 };
	if (text_grow(&t, 1) < 0)
		return -ENOMEM;
	(*buf)[0] = '\0';
	gauge(&t, "sessions", "Client sessions open.", v->sessions_open);
	gauge(&t, "queue_depth", "Requests accepted and waiting to join a batch.", v->queued);
	gauge(&t, "running_sequences", "Sequences in the running batch.", v->running);
	render_counters(&t);
	render_gauges(&t, v);
	for (int h = 0; h < BN_HIST_COUNT; h++)
		render_hist(&t, (enum bn_hist)h);
	render_sessions(&t, v);
	if (v->n_models)
		render_models(&t, v);
	return t.failed ? -ENOMEM : (long)t.len;
}
