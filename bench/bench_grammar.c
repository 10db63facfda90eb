/* SPDX-License-Identifier: MIT */
/*
 * bench_grammar — the grammar engine (daemon/grammar/) on LLaMA-3's vocabulary (128,256
 * tokens): per grammar, compile time (text to automaton), the time to fill every state's token
 * set, memory (the automaton, the token sets, all a bound grammar holds once filled), and the
 * mask's cost per token over seeded random walks, first with token sets
 * filled on first use (a grammar's first request) and then with all filled (later requests),
 * plus accept and rollback. Prints key=value lines; issue 46's targets: mask p50 <= 50 us,
 * compile of a 20-property schema <= 50 ms.
 *
 *   bench_grammar --tokenizer PATH/tokenizer.json [--walks N] [--tokens N] [--only NAME]
 */
#include "../daemon/grammar/grammar.h"
#include "../tools/hf_vocab.h"
#include "bench_util.h"

#include <getopt.h>

struct vocab {
	struct bn_grammar_vocab *v;
	uint32_t n;
	uint8_t *kind;
	uint32_t *len;
};

static int load_vocab(const char *path, struct vocab *out)
{
	struct hf_vocab hv;
	char err[256];
	if (hf_vocab_load(path, &hv, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	uint32_t n = hv.n_tokens;
	uint8_t **bytes = calloc(n, sizeof(*bytes)), *kind = calloc(n, 1);
	uint32_t *len = calloc(n, sizeof(uint32_t));
	for (uint32_t i = 0; i < n; i++) {
		const char *t = hv.tokens[i] ? hv.tokens[i] : "";
		size_t tl = strlen(t);
		bytes[i] = malloc(tl + 1);
		if (hv.types[i] != 1) {
			kind[i] = !strcmp(t, "<|eot_id|>") || !strcmp(t, "<|end_of_text|>")
				  ? BN_GRAMMAR_TOKEN_EOG : BN_GRAMMAR_TOKEN_SPECIAL;
			continue;
		}
		int k = bn_grammar_piece_bytes(BN_GRAMMAR_PIECES_BYTE_LEVEL, t, tl, bytes[i], tl + 1);
		len[i] = k > 0 ? (uint32_t)k : 0;
	}
	int64_t t0 = bench_now_ns();
	int rc = bn_grammar_vocab_new(n, (const uint8_t *const *)bytes, len, kind, &out->v);
	printf("vocab_tokens=%u\nvocab_build_ms=%.1f\n", n, (bench_now_ns() - t0) / 1e6);
	for (uint32_t i = 0; i < n; i++)
		free(bytes[i]);
	free(bytes);
	hf_vocab_free(&hv);
	out->n = n;
	out->kind = kind;
	out->len = len;
	return rc;
}

/* 20 properties of the kinds real schemas have. */
static const char schema20[] =
	"{\"type\":\"object\",\"properties\":{"
	"\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
	"\"name\":{\"type\":\"string\",\"maxLength\":64},"
	"\"email\":{\"type\":\"string\",\"format\":\"email\"},"
	"\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
	"\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
	"\"active\":{\"type\":\"boolean\"},"
	"\"role\":{\"enum\":[\"admin\",\"editor\",\"viewer\"]},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"
	"\"created\":{\"type\":\"string\",\"format\":\"date-time\"},"
	"\"birthday\":{\"type\":\"string\",\"format\":\"date\"},"
	"\"country\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}$\"},"
	"\"phone\":{\"type\":[\"string\",\"null\"]},"
	"\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
	"\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
	"\"required\":[\"street\",\"city\"],\"additionalProperties\":false},"
	"\"balance\":{\"type\":\"number\"},"
	"\"visits\":{\"type\":\"integer\",\"minimum\":0},"
	"\"notes\":{\"type\":\"string\"},"
	"\"level\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10},"
	"\"website\":{\"type\":\"string\",\"format\":\"hostname\"},"
	"\"ip\":{\"type\":\"string\",\"format\":\"ipv4\"},"
	"\"verified\":{\"type\":\"boolean\"}},"
	"\"required\":[\"id\",\"name\",\"email\",\"age\",\"score\",\"active\",\"role\",\"tags\","
	"\"created\",\"country\",\"address\",\"level\"],\"additionalProperties\":false}";

static const char schema_small[] =
	"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
	"\"integer\"}},\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static const char schema_recursive[] =
	"{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"label\":{\"type\":\"string\"},"
	"\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":"
	"[\"label\",\"children\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";

static const char gbnf_json[] =
	"root ::= object\nvalue ::= object | array | string | number | (\"true\" | \"false\" | "
	"\"null\") ws\nobject ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws "
	"value)* )? \"}\" ws\narray ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
	"string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" "
	"[0-9a-fA-F]{4}) )* \"\\\"\" ws\nnumber ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) "
	"(\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\nws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const struct {
	const char *name;
	uint32_t kind, top;
	const char *text;
} cases[] = {
	{ "schema_small", BN_GRAMMAR_JSON_SCHEMA, 0, schema_small },
	{ "schema20", BN_GRAMMAR_JSON_SCHEMA, 0, schema20 },
	{ "schema_recursive", BN_GRAMMAR_JSON_SCHEMA, 0, schema_recursive },
	{ "json_object", BN_GRAMMAR_JSON, BN_GRAMMAR_TOP_OBJECT, "" },
	{ "regex_email", BN_GRAMMAR_REGEX, 0, "[a-z0-9._]{1,20}@[a-z0-9-]{1,20}\\.(com|org|net)" },
	{ "gbnf_json", BN_GRAMMAR_GBNF, 0, gbnf_json },
};

static double percentile(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), bench_cmp_double);
	return n ? v[(size_t)(p * (double)(n - 1))] : 0;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 11);
}

static uint32_t pick(const uint64_t *mask, uint32_t words, uint32_t n)
{
	uint32_t k = rng() % n;
	for (uint32_t w = 0; w < words; w++) {
		uint32_t c = (uint32_t)__builtin_popcountll(mask[w]);
		if (k < c) {
			uint64_t x = mask[w];
			while (k--)
				x &= x - 1;
			return w * 64 + (uint32_t)__builtin_ctzll(x);
		}
		k -= c;
	}
	return 0;
}

struct timings {
	double *mask_us, *accept_us;
	size_t n;
	size_t matcher_bytes;
};

/* Random walks (uniform among allowed tokens, closed in time), each step timed. */
static void walks(struct bn_grammar_bound *b, const struct vocab *v, int n_walks, int max_tokens,
		  struct timings *t)
{
	uint32_t words = (v->n + 63) / 64;
	uint64_t *mask = malloc(words * 8);
	for (int w = 0; w < n_walks; w++) {
		struct bn_grammar_matcher *m;
		if (bn_grammar_matcher_new(b, 0, &m))
			exit(1);
		for (int i = 0; i < max_tokens; i++) {
			uint32_t left = (uint32_t)(max_tokens - i - 1);
			int64_t t0 = bench_now_ns();
			int n = bn_grammar_matcher_fill_mask(m, mask);
			t->mask_us[t->n] = (bench_now_ns() - t0) / 1e3;
			if (n <= 0)
				break;
			uint32_t id = pick(mask, words, (uint32_t)n);
			t0 = bench_now_ns();
			bn_grammar_matcher_accept(m, id);
			t->accept_us[t->n++] = (bench_now_ns() - t0) / 1e3;
			if (v->kind[id] == BN_GRAMMAR_TOKEN_EOG)
				break;
			if (bn_grammar_matcher_tokens_to_accept(m) + 1 > left) {
				bn_grammar_matcher_rollback(m, 1);
				n = bn_grammar_matcher_fill_mask_within(m, mask, left);
				if (n <= 0)
					break;
				bn_grammar_matcher_accept(m, pick(mask, words, (uint32_t)n));
			}
		}
		size_t bytes = bn_grammar_matcher_bytes(m);
		t->matcher_bytes = bytes > t->matcher_bytes ? bytes : t->matcher_bytes;
		bn_grammar_matcher_free(m);
	}
	free(mask);
}

static void report_walks(const char *name, const char *phase, struct timings *t)
{
	printf("%s_%s_steps=%zu\n", name, phase, t->n);
	printf("%s_%s_mask_us_p50=%.2f\n", name, phase, percentile(t->mask_us, t->n, 0.5));
	printf("%s_%s_mask_us_p99=%.2f\n", name, phase, percentile(t->mask_us, t->n, 0.99));
	printf("%s_%s_mask_us_max=%.2f\n", name, phase, percentile(t->mask_us, t->n, 1.0));
	printf("%s_%s_accept_us_p50=%.2f\n", name, phase, percentile(t->accept_us, t->n, 0.5));
}

static void run_case(size_t i, const struct vocab *v, int n_walks, int max_tokens)
{
	const char *name = cases[i].name;
	struct bn_grammar_options o = { .kind = cases[i].kind, .json_top = cases[i].top };
	char err[BN_GRAMMAR_ERR_LEN];
	struct bn_grammar *g = NULL;
	double compile_ms[7];
	for (int r = 0; r < 7; r++) {
		bn_grammar_unref(g);
		int64_t t0 = bench_now_ns();
		if (bn_grammar_compile(cases[i].text, strlen(cases[i].text), &o, &g, err)) {
			printf("%s_error=%s\n", name, err);
			return;
		}
		compile_ms[r] = (bench_now_ns() - t0) / 1e6;
	}
	struct bn_grammar_info gi;
	bn_grammar_get_info(g, &gi);
	printf("%s_compile_ms_p50=%.3f\n", name, bench_median(compile_ms, 7));
	printf("%s_rules=%u\n%s_states=%u\n%s_automaton_bytes=%zu\n", name, gi.n_rules, name,
	       gi.n_states, name, gi.bytes);

	size_t cap = (size_t)n_walks * (size_t)(max_tokens + 1);
	struct timings cold = { calloc(cap, sizeof(double)), calloc(cap, sizeof(double)), 0, 0 };
	struct timings warm = { calloc(cap, sizeof(double)), calloc(cap, sizeof(double)), 0, 0 };
	struct bn_grammar_bound *b;
	bn_grammar_bind(g, v->v, &b);
	rng_state = 0x9E3779B97F4A7C15ull + i;
	walks(b, v, n_walks, max_tokens, &cold);
	report_walks(name, "first_use", &cold);
	bn_grammar_bound_unref(b);

	bn_grammar_bind(g, v->v, &b);
	int64_t t0 = bench_now_ns();
	bn_grammar_bound_warm(b, UINT64_MAX / 2);
	printf("%s_fill_all_ms=%.1f\n", name, (bench_now_ns() - t0) / 1e6);
	struct bn_grammar_bound_info bi;
	bn_grammar_bound_get_info(b, &bi);
	printf("%s_token_set_bytes=%zu\n", name, bi.set_bytes);
	printf("%s_bytes_per_grammar=%zu\n", name, bn_grammar_bound_bytes(b));
	rng_state = 0x9E3779B97F4A7C15ull + i;
	walks(b, v, n_walks, max_tokens, &warm);
	report_walks(name, "filled", &warm);
	printf("%s_matcher_bytes_max=%zu\n", name, warm.matcher_bytes);
	bn_grammar_bound_unref(b);
	bn_grammar_unref(g);
	free(cold.mask_us), free(cold.accept_us), free(warm.mask_us), free(warm.accept_us);
}

int main(int argc, char **argv)
{
	const char *tokenizer = NULL, *only = NULL;
	int n_walks = 20, max_tokens = 400;
	static const struct option opts[] = {
		{ "tokenizer", required_argument, NULL, 't' }, { "walks", required_argument, NULL, 'w' },
		{ "tokens", required_argument, NULL, 'n' }, { "only", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (c == 't')
			tokenizer = optarg;
		else if (c == 'w')
			n_walks = atoi(optarg);
		else if (c == 'n')
			max_tokens = atoi(optarg);
		else if (c == 'o')
			only = optarg;
		else
			return 2;
	}
	if (!tokenizer) {
		fprintf(stderr, "usage: bench_grammar --tokenizer PATH/tokenizer.json [--walks N] "
			"[--tokens N] [--only NAME]\n");
		return 2;
	}
	struct vocab v;
	if (load_vocab(tokenizer, &v))
		return 1;
	printf("walks=%d\nmax_tokens=%d\n", n_walks, max_tokens);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!only || !strcmp(only, cases[i].name))
			run_case(i, &v, n_walks, max_tokens);
	bn_grammar_vocab_unref(v.v);
	free(v.kind);
	free(v.len);
	return 0;
}
