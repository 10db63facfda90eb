/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli — talk to bitnetd from a shell: info, generate, stats, bench.
 * Output is meant for scripts: key=value lines, ids on one line, or the generated text.
 */
#include "bitnet_client.h"
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
	"Usage: bitnet-cli [--socket PATH] [--model NAME] COMMAND [OPTIONS]\n"
	"\n"
	"Commands:\n"
	"  info                       model and backend, as key=value lines (served_name:\n"
	"                             the model's name in the daemon)\n"
	"  generate --ids \"1 2 3\"     generate from token ids; prints the generated ids\n"
	"                             on one line as they arrive\n"
	"  generate --prompt TEXT     generate from text (the model's vocabulary must be\n"
	"                             SentencePiece-style or byte-level BPE); prints the\n"
	"                             generated text as it arrives (never a broken UTF-8\n"
	"                             character), then a newline\n"
	"    options of generate:\n"
	"           [--max-tokens N]  tokens to generate (default 16)\n"
	"           [--ignore-eos]    keep going past the end-of-sequence token\n"
	"           [--speculative]   draft tokens from the prompt and output so far and\n"
	"                             verify them in one step: faster when the output\n"
	"                             repeats its input, the same tokens either way\n"
	"           [--timeout-ms N]  give up (and cancel) after N ms (default: no limit)\n"
	"           [--print-ids]     with --prompt: also print the generated ids on a line\n"
	"           [--temperature F] 0 (default): greedy; else sample, at most 100\n"
	"           [--top-k N] [--top-p F] [--min-p F]   0: off; top-p, min-p in [0, 1]\n"
	"           [--repetition-penalty F]   0 (default): off; else at most 100\n"
	"           [--presence-penalty F] [--frequency-penalty F]   in [-100, 100]\n"
	"           [--seed N]        sampler seed (default: the daemon picks one)\n"
	"           [--stop-ids a,b]  end (status stop) when the model produces one of them\n"
	"           [--logprobs N]    afterwards, each token's log-probability and its N\n"
	"                             most likely alternatives, one line per token\n"
	"           [--deadline-ms N] end (status deadline) N ms after the daemon saw it\n"
	"           [--json-schema FILE | --json | --regex RE | --grammar FILE]\n"
	"                             structured output: the output follows a JSON Schema,\n"
	"                             is any JSON object, matches RE, or follows a GBNF\n"
	"                             grammar (llama.cpp's format); a grammar the daemon\n"
	"                             refuses is reported with its reason\n"
	"  tokenize [--special] [--no-bos] TEXT   the ids of TEXT on one line (- reads\n"
	"                             standard input to its end); --special: special tokens'\n"
	"                             texts are those tokens; BOS first and EOS last as\n"
	"                             the model wants them (--no-bos: neither)\n"
	"  detokenize --ids \"...\" [--special]   the text of the ids, then a newline;\n"
	"                             --special: control tokens as their text\n"
	"  score --ids \"...\" | --text TEXT [--top N]   the log-probability of each token\n"
	"                             given those before it: a line POS ID LOGPROB (and N\n"
	"                             alternatives ID:LOGPROB) per token after the first,\n"
	"                             then sum=S tokens=N scored=N-1; --text: the daemon\n"
	"                             encodes it, BOS as the model wants it\n"
	"  perplexity FILE [--ctx N] [--stride S] [--batch B]   the text's perplexity as\n"
	"                             llama-perplexity computes it (chunks of N tokens,\n"
	"                             default 512, BOS first, their second half scored);\n"
	"                             --stride: windows of N every S tokens, each token\n"
	"                             scored once; prints [i]PPL, as chunks end, then\n"
	"                             Final estimate: PPL = X +/- E\n"
	"  classify --text TEXT --labels \"a,b,c\" [--no-space]   which label the model finds\n"
	"                             likeliest after TEXT: a line per label (tokens, summed\n"
	"                             and mean log-probability, probability over the labels),\n"
	"                             then best=I; the text is read once for all labels; each\n"
	"                             label gets a leading space unless --no-space\n"
	"  embed --text TEXT | --ids \"...\" ... [--special] [--no-bos]   one vector per input\n"
	"                             (repeatable; embedded together): a line input=K dim=D\n"
	"                             tokens=N pooling=P model=embedding|generative, then the\n"
	"                             D values, or input=K error=NAME; the daemon embeds only\n"
	"                             with a pooling (bitnetd --pooling, or an embedding\n"
	"                             model's); --text: BOS first and EOS last as the\n"
	"                             model wants them (--no-bos: neither)\n"
	"  chat [OPTIONS]             talk to the model with its chat template; see\n"
	"                             'bitnet-cli chat --help'\n"
	"  stats                      daemon metrics (Prometheus text format)\n"
	"  models [list]              the daemon's models: name, state (unloaded, loading,\n"
	"                             loaded, unloading, failed), bytes (weights, KV),\n"
	"                             requests waiting and running, idle since\n"
	"  models load NAME | unload NAME | reload [NAME]   load a model and wait until it\n"
	"                             is; unload one once its running requests end; read a\n"
	"                             model's file again if it changed (every model's\n"
	"                             without NAME); root or the daemon's user only\n"
	"  bench [OPTIONS]            transport benchmark; see 'bitnet-cli bench --help'\n"
	"\n"
	"The socket is --socket, else $BITNETD_SOCKET, else " BN_DEFAULT_SOCKET_PATH ".\n"
	"--model NAME: the model the commands use, by the name the daemon serves it under\n"
	"(default: the daemon's default model; bitnet-cli models lists them).\n"
	"generate writes status=NAME tokens=N to stderr when the request ends (NAME: length,\n"
	"eos, stop, deadline, cancelled, error, shutdown).\n"
	"On failure the error name goes to stderr and the exit status is 1 (2: bad usage).\n";

static int fail(const char *what, int rc)
{
	fprintf(stderr, "bitnet-cli: %s: %s\n", what, bn_strerror(rc));
	return 1;
}

/* Decimal digits only: no sign, no spaces, no base prefixes, no overflow. */
static int parse_u64(const char *text, uint64_t *out)
{
	char *end;
	errno = 0;
	if (text[0] < '0' || text[0] > '9')
		return -1;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_float(const char *flag, const char *text, float lo, float hi, float *out)
{
	char *end = (char *)text;
	errno = 0;
	/* strtof would also take leading spaces, "inf", "nan" and hex: only plain numbers pass. */
	float v = isspace((unsigned char)text[0]) || strpbrk(text, "xX") ? NAN : strtof(text, &end);
	if (errno || end == text || *end || !isfinite(v) || v < lo || v > hi)
		return cli_usage("generate", "--%s: '%s' is not a number in [%g, %g]", flag, text, lo, hi);
	*out = v;
	return 0;
}

static int parse_count(const char *flag, const char *text, uint32_t *out)
{
	if (cli_parse_u32(text, out) < 0 || text[0] < '0' || text[0] > '9')
		return cli_usage("generate", "--%s: '%s' is not a whole number in [0, %u]", flag, text,
				   UINT32_MAX);
	return 0;
}

/* What the daemon chose for text, and why where the file did not say (vocab=none without a
 * vocabulary). */
static void print_vocab_info(struct bn_client *c)
{
	const struct bn_vocab *v;
	if (bn_client_vocab(c, &v) < 0) {
		printf("vocab=none\n");
		return;
	}
	uint32_t kind = bn_vocab_kind(v), flags = bn_vocab_flags(v);
	printf("vocab=%s\n", kind == BN_VOCAB_SPM ? "spm" : kind == BN_VOCAB_BPE ? "gpt2" : "other");
	if (kind == BN_VOCAB_BPE || bn_vocab_pre_tokenizer(v) == BN_PRE_NO_PREFIX)
		printf("pre_tokenizer=%s%s\n", bn_pre_tokenizer_name(bn_vocab_pre_tokenizer(v)),
		       flags & BN_VOCAB_PRE_DETECTED   ? " (detected)"
		       : flags & BN_VOCAB_PRE_OVERRIDE ? " (override)"
						       : "");
	printf("chat_template=%s%s\n", bn_chat_template_name(bn_vocab_chat_template(v)),
	       flags & BN_VOCAB_CHAT_OVERRIDE	   ? " (override)"
	       : flags & BN_VOCAB_CHAT_PLACEHOLDER ? " (placeholder replaced)"
						   : "");
	const uint32_t *eog;
	uint32_t n = bn_vocab_eog_ids(v, &eog);
	printf("eog_ids=");
	for (uint32_t i = 0; i < n; i++)
		printf(i ? ",%u" : "%u", eog[i]);
	printf("\nadd_bos=%d\nadd_eos=%d\n", bn_vocab_add_bos(v), bn_vocab_add_eos(v));
}

/* How the daemon computes the model (bn_model_compute): whether the logits are the file's. */
static void print_compute_info(struct bn_client *c)
{
	static const char *const heads[] = {
		[BN_HEAD_NONE] = "none", [BN_HEAD_FILE] = "file",
		[BN_HEAD_SCREENED] = "screened (the file's tokens and logits)",
		[BN_HEAD_INT8] = "int8 (approximate: not the file's logits)",
	};
	static const char *const layouts[] = {
		[BN_DECODE_LAYOUT_NONE] = "none", [BN_DECODE_LAYOUT_2BIT] = "2bit",
		[BN_DECODE_LAYOUT_BASE3] = "base3",
	};
	uint32_t head, layout;
	if (bn_model_compute(c, &head, &layout) < 0) {
		printf("lm_head=unknown (the daemon does not say)\ndecode_layout=unknown\n");
		return;
	}
	printf("lm_head=%s\ndecode_layout=%s\n",
	       head < sizeof(heads) / sizeof(heads[0]) ? heads[head] : "unknown (not exact)",
	       layout < sizeof(layouts) / sizeof(layouts[0]) ? layouts[layout] : "unknown");
}

/* Who drafts tokens for speculative decoding, and how many a step (STATS); nothing from a
 * daemon that predates it. */
static void print_speculative(const char *text)
{
	static const char *const modes[] = { "request", "ngram", "off" };
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		char line[64];
		snprintf(line, sizeof(line), "\nbitnetd_speculative{mode=\"%s\"} 1", modes[i]);
		if (strstr(text, line))
			printf("speculative=%s\n", modes[i]);
	}
	static const char key[] = "\nbitnetd_speculative_draft_tokens ";
	const char *k = strstr(text, key);
	if (k)
		printf("draft_tokens=%ld\n", strtol(k + sizeof(key) - 1, NULL, 10));
}

/* A label's value from a STATS line, its escapes undone, into out. */
static void label_value(const char *at, char *out, size_t cap)
{
	size_t n = 0;
	for (; *at && *at != '"' && n + 1 < cap; at++) {
		char ch = *at;
		if (ch == '\\' && at[1])
			ch = *++at == 'n' ? '\n' : *at;
		out[n++] = ch;
	}
	out[n] = 0;
}

/* The value of bitnetd_<name>{role="<role>"} in STATS, 0 when absent. */
static long role_metric(const char *text, const char *name, const char *role)
{
	char key[128];
	snprintf(key, sizeof(key), "\nbitnetd_%s{role=\"%s\"} ", name, role);
	const char *at = strstr(text, key);
	return at ? strtol(at + strlen(key), NULL, 10) : 0;
}

/* The graph the daemon runs (STATS): the FFN activation and why, and for a float bitnet* file
 * the matrices packed to the ternary kernels by role, and those kept float. Nothing from a
 * daemon that predates them. */
static void print_graph_info(const char *text)
{
	static const char *const roles[] = { "attn_q", "attn_k", "attn_v", "attn_output",
					     "ffn_gate", "ffn_up", "ffn_down" };
	static char value[2048];
	static const char *const acts[] = { "silu", "relu2", "gelu" };
	const char *act = NULL;
	for (size_t i = 0; i < sizeof(acts) / sizeof(acts[0]); i++) {
		char line[64];
		snprintf(line, sizeof(line), "\nbitnetd_model_activation{name=\"%s\"} 1", acts[i]);
		if (strstr(text, line))
			act = acts[i];
	}
	if (!act)
		return;
	printf("activation=%s", act);
	const char *why = strstr(text, "\nbitnetd_model_activation_why{why=\"");
	if (why) {
		label_value(why + strlen("\nbitnetd_model_activation_why{why=\""), value,
			    sizeof(value));
		printf(" (%s)", value);
	}
	putchar('\n');
	if (!strstr(text, "\nbitnetd_float_matrices{"))
		return;
	fputs("ternary_from_float=", stdout);
	for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++)
		printf("%s%s %ld/%ld", i ? "," : "", roles[i],
		       role_metric(text, "ternary_from_float_matrices", roles[i]),
		       role_metric(text, "float_matrices", roles[i]));
	putchar('\n');
	const char *kept = strstr(text, "\nbitnetd_kept_float{tensors=\"");
	if (kept) {
		label_value(kept + strlen("\nbitnetd_kept_float{tensors=\""), value, sizeof(value));
		printf("kept_float=%s\n", value[0] ? value : "none");
	}
}

/* How the daemon loaded its model (STATS: bitnetd_model_load_seconds and the weights cache's
 * state and file); nothing from a daemon that predates them. */
static void print_load_info(struct bn_client *c)
{
	static const char *const states[] = { "hit", "writing", "built", "failed", "off" };
	static char text[1 << 16];
	if (bn_daemon_stats(c, text, sizeof(text)) < 0)
		return;
	const char *load = strstr(text, "\nbitnetd_model_load_seconds ");
	if (load)
		printf("load_ms=%.0f\n", strtod(load + 29, NULL) * 1e3);
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		char line[64];
		snprintf(line, sizeof(line), "\nbitnetd_weights_cache{state=\"%s\"} 1", states[i]);
		if (strstr(text, line))
			printf("weights_cache=%s\n", states[i]);
	}
	print_speculative(text);
	print_graph_info(text);
	/* the cuda backend's kernel paths (--cuda-kernels) */
	static const char kernels[] = "\nbitnetd_cuda_kernels{variant=\"";
	const char *k = strstr(text, kernels);
	if (k) {
		k += sizeof(kernels) - 1;
		printf("cuda_kernels=%.*s\n", (int)strcspn(k, "\""), k);
	}
	const char *path = strstr(text, "\nbitnetd_weights_cache_path{path=\"");
	if (!path)
		return;
	path += strlen("\nbitnetd_weights_cache_path{path=\"");
	static char value[4096 * 2];
	label_value(path, value, sizeof(value));
	printf("weights_cache_path=%s\n", value);
}

static int cmd_info(struct bn_client *c)
{
	struct bn_model_info mi;
	int rc = bn_model_info(c, &mi);
	if (rc < 0)
		return fail("info", rc);
	printf("model=%s\nvocab_size=%u\ncontext_length=%u\nbos_id=%u\neos_id=%u\nbackend=%s\n"
	       "max_prompt_tokens=%u\nmax_output_tokens=%u\nslots=%u\n",
	       mi.name, mi.vocab_size, mi.context_length, mi.bos_id, mi.eos_id, mi.backend,
	       mi.max_prompt_tokens, mi.max_output_tokens, mi.slots);
	char served[64];
	if (bn_model_served_name(c, served, sizeof(served)) == 0)
		printf("served_name=%s\n", served);
	print_compute_info(c);
	uint32_t features = bn_model_features(c);
	printf("embeddings=%s\nembedding_model=%s\n", features & BN_FEAT_EMBED ? "yes" : "no",
	       features & BN_FEAT_EMBEDDING_MODEL ? "yes (it does not generate)" : "no");
	print_vocab_info(c);
	print_load_info(c);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* generate: options                                                                           */
/* ------------------------------------------------------------------------------------------ */

struct gen_opts {
	const char *ids_text;
	const char *prompt;
	struct bn_request req;
	struct bn_sampling_params sp;
	int sampling;             /* an option of sp was given */
	uint32_t *stop_ids;
	uint32_t timeout_ms;
	int print_ids;
	struct bn_grammar_spec grammar; /* kind 0: none */
	const char *grammar_arg;  /* the file (schema, GBNF) or the expression */
	char *grammar_text;       /* a file's contents */
};

enum gen_opt {
	G_IDS = 256, G_PROMPT, G_MAX_TOKENS, G_IGNORE_EOS, G_TIMEOUT, G_PRINT_IDS, G_TEMPERATURE,
	G_TOP_K, G_TOP_P, G_MIN_P, G_REPETITION, G_PRESENCE, G_FREQUENCY, G_SEED, G_STOP_IDS,
	G_LOGPROBS, G_DEADLINE, G_SPECULATIVE, G_JSON_SCHEMA, G_JSON, G_REGEX, G_GRAMMAR,
};

static const struct option gen_options[] = {
	{ "ids", required_argument, NULL, G_IDS },
	{ "prompt", required_argument, NULL, G_PROMPT },
	{ "max-tokens", required_argument, NULL, G_MAX_TOKENS },
	{ "ignore-eos", no_argument, NULL, G_IGNORE_EOS },
	{ "speculative", no_argument, NULL, G_SPECULATIVE },
	{ "timeout-ms", required_argument, NULL, G_TIMEOUT },
	{ "print-ids", no_argument, NULL, G_PRINT_IDS },
	{ "temperature", required_argument, NULL, G_TEMPERATURE },
	{ "top-k", required_argument, NULL, G_TOP_K },
	{ "top-p", required_argument, NULL, G_TOP_P },
	{ "min-p", required_argument, NULL, G_MIN_P },
	{ "repetition-penalty", required_argument, NULL, G_REPETITION },
	{ "presence-penalty", required_argument, NULL, G_PRESENCE },
	{ "frequency-penalty", required_argument, NULL, G_FREQUENCY },
	{ "seed", required_argument, NULL, G_SEED },
	{ "stop-ids", required_argument, NULL, G_STOP_IDS },
	{ "logprobs", required_argument, NULL, G_LOGPROBS },
	{ "deadline-ms", required_argument, NULL, G_DEADLINE },
	{ "json-schema", required_argument, NULL, G_JSON_SCHEMA },
	{ "json", no_argument, NULL, G_JSON },
	{ "regex", required_argument, NULL, G_REGEX },
	{ "grammar", required_argument, NULL, G_GRAMMAR },
	{ NULL, 0, NULL, 0 },
};

/* The sampling options: fill o->sp. Returns 0, or 2 after printing why. */
static int apply_sampling_option(struct gen_opts *o, int opt, const char *arg)
{
	struct bn_sampling_params *sp = &o->sp;
	o->sampling = 1;
	switch (opt) {
	case G_TEMPERATURE: return parse_float("temperature", arg, 0, 100, &sp->temperature);
	case G_TOP_K: return parse_count("top-k", arg, &sp->top_k);
	case G_TOP_P: return parse_float("top-p", arg, 0, 1, &sp->top_p);
	case G_MIN_P: return parse_float("min-p", arg, 0, 1, &sp->min_p);
	case G_REPETITION: return parse_float("repetition-penalty", arg, 0, 100, &sp->repetition_penalty);
	case G_PRESENCE: return parse_float("presence-penalty", arg, -100, 100, &sp->presence_penalty);
	case G_FREQUENCY: return parse_float("frequency-penalty", arg, -100, 100, &sp->frequency_penalty);
	case G_DEADLINE: return parse_count("deadline-ms", arg, &sp->deadline_ms);
	case G_SEED:
		if (parse_u64(arg, &sp->seed) < 0)
			return cli_usage("generate", "--seed: '%s' is not a whole number in [0, %llu]", arg,
					   (unsigned long long)UINT64_MAX);
		o->req.flags |= BN_REQ_SEED;
		return 0;
	case G_LOGPROBS:
		o->req.flags |= BN_REQ_LOGPROBS;
		return parse_count("logprobs", arg, &sp->n_logprobs);
	case G_STOP_IDS: {
		free(o->stop_ids);
		o->stop_ids = NULL;
		int n = cli_parse_ids(arg, &o->stop_ids);
		if (n <= 0)
			return cli_usage("generate", "--stop-ids: '%s' is not a list of token ids, e.g. 2,13", arg);
		sp->stop_ids = o->stop_ids;
		sp->n_stop = (uint32_t)n;
		return 0;
	}
	default: return cli_usage("generate", "bad option");
	}
}

/* --json-schema, --json, --regex, --grammar: one of them. */
static int apply_grammar_option(struct gen_opts *o, int opt, const char *arg)
{
	if (o->grammar.kind)
		return cli_usage("generate", "give one of --json-schema, --json, --regex and --grammar");
	o->grammar_arg = arg;
	switch (opt) {
	case G_JSON_SCHEMA: o->grammar.kind = BN_GRAMMAR_KIND_JSON_SCHEMA; return 0;
	case G_REGEX: o->grammar.kind = BN_GRAMMAR_KIND_REGEX; return 0;
	case G_GRAMMAR: o->grammar.kind = BN_GRAMMAR_KIND_GBNF; return 0;
	default: /* --json: OpenAI's json_object, an object at the top */
		o->grammar.kind = BN_GRAMMAR_KIND_JSON;
		o->grammar.flags = BN_GRAMMAR_JSON_OBJECT;
		return 0;
	}
}

static int apply_option(struct gen_opts *o, int opt, const char *arg)
{
	switch (opt) {
	case G_JSON_SCHEMA:
	case G_JSON:
	case G_REGEX:
	case G_GRAMMAR: return apply_grammar_option(o, opt, arg);
	case G_IDS: o->ids_text = arg; return 0;
	case G_PROMPT: o->prompt = arg; return 0;
	case G_IGNORE_EOS: o->req.flags |= BN_REQ_IGNORE_EOS; return 0;
	case G_SPECULATIVE: o->req.flags |= BN_REQ_SPECULATE; return 0;
	case G_PRINT_IDS: o->print_ids = 1; return 0;
	case G_MAX_TOKENS:
		if (parse_count("max-tokens", arg, &o->req.max_tokens))
			return 2;
		return o->req.max_tokens ? 0 : cli_usage("generate", "--max-tokens must be at least 1");
	case G_TIMEOUT: return parse_count("timeout-ms", arg, &o->timeout_ms);
	case '?': return 2; /* getopt said why */
	default: return apply_sampling_option(o, opt, arg);
	}
}

static int parse_generate(struct gen_opts *o, int argc, char **argv)
{
	*o = (struct gen_opts){ .req = { .max_tokens = 16 } };
	int opt;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", gen_options, NULL)) != -1)
		if (apply_option(o, opt, optarg))
			return 2;
	if (optind < argc)
		return cli_usage("generate", "unexpected argument '%s'", argv[optind]);
	if (!o->ids_text == !o->prompt)
		return cli_usage("generate", "give exactly one of --ids and --prompt");
	if (o->print_ids && !o->prompt)
		return cli_usage("generate", "--print-ids goes with --prompt (--ids prints ids anyway)");
	if (o->sampling)
		o->req.sampling = &o->sp;
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* generate: prompt, streaming, result                                                         */
/* ------------------------------------------------------------------------------------------ */

/* The prompt's ids, from --ids or by encoding --prompt (with BOS when the model wants it). */
static int prompt_ids(const struct gen_opts *o, const struct bn_vocab *v, uint32_t **ids,
		      uint32_t *n)
{
	if (o->ids_text) {
		int k = cli_parse_ids(o->ids_text, ids);
		if (k < 0)
			return cli_usage("generate", "--ids needs token ids, e.g. \"1 2 3\"");
		*n = (uint32_t)k;
		return 0;
	}
	size_t len = strlen(o->prompt);
	uint32_t flags = bn_vocab_add_bos(v) ? BN_TOK_ADD_BOS : 0;
	int k = bn_tokenize_ex(v, o->prompt, len, flags, NULL, 0);
	if (k < 0)
		return fail("encoding the prompt", k);
	*ids = malloc(((size_t)k + 1) * sizeof(uint32_t));
	if (!*ids)
		return fail("encoding the prompt", -ENOMEM);
	bn_tokenize_ex(v, o->prompt, len, flags, *ids, (uint32_t)k);
	*n = (uint32_t)k;
	return 0;
}

/* A request that ran to one of these ends did what was asked; the others are failures. */
static int status_error(const struct bn_result *r)
{
	switch (r->status) {
	case BN_STATUS_LENGTH:
	case BN_STATUS_EOS:
	case BN_STATUS_STOP:
	case BN_STATUS_DEADLINE: return 0;
	case BN_STATUS_CANCELLED: return -BN_E_CANCELLED;
	case BN_STATUS_SHUTDOWN: return -BN_E_SHUTDOWN;
	default: return r->error ? r->error : -BN_E_PROTOCOL;
	}
}

/* Text of one token for a logprob line: JSON-like escapes, so a line stays one line. */
static void print_piece(const struct bn_vocab *v, uint32_t id)
{
	char buf[256];
	int len = bn_detokenize_ex(v, &id, 1, BN_DETOK_SPECIAL, buf, sizeof(buf));
	fputs(" text=\"", stdout);
	for (int i = 0; i < len && i < (int)sizeof(buf) - 1; i++) {
		unsigned char b = (unsigned char)buf[i];
		if (b == '"' || b == '\\')
			printf("\\%c", b);
		else if (b < 0x20 || b == 0x7f)
			printf("\\x%02x", b);
		else
			putchar(b);
	}
	putchar('"');
}

/* One line per generated token: logprob index=I token=ID logprob=F [text="..."]
 * alternatives=ID:F,ID:F,... */
static int print_logprobs(struct bn_handle *h, const struct bn_vocab *v, uint32_t n,
			  uint32_t n_alt)
{
	struct bn_logprob *lp = calloc(n ? n : 1, sizeof(*lp));
	struct bn_logprob *alt = calloc((size_t)n * n_alt + 1, sizeof(*alt));
	int k = lp && alt ? bn_read_logprobs(h, 0, lp, n_alt ? alt : NULL, n) : -ENOMEM;
	for (int i = 0; i < k; i++) {
		printf("logprob index=%d token=%u logprob=%.6g", i, lp[i].token, lp[i].logprob);
		if (v)
			print_piece(v, lp[i].token);
		printf(" alternatives=");
		for (uint32_t j = 0; j < n_alt; j++) {
			const struct bn_logprob *a = &alt[(size_t)i * n_alt + j];
			printf(j ? ",%u:%.6g" : "%u:%.6g", a->token, a->logprob);
		}
		putchar('\n');
	}
	free(lp);
	free(alt);
	return k < 0 ? k : 0;
}

/* After the stream: the newline, the ids (--print-ids), the status, the log-probabilities. */
static int finish(struct bn_handle *h, const struct gen_opts *o, struct cli_output *out, int rc)
{
	if (rc == 0)
		rc = cli_output_finish(out);
	printf("\n");
	if (o->print_ids)
		for (uint32_t i = 0; i < out->n; i++)
			printf(i + 1 < out->n ? "%u " : "%u\n", out->ids[i]);
	fflush(stdout);
	struct bn_result r;
	if (rc < 0 || bn_result(h, &r) < 0)
		return fail("generate", rc < 0 ? rc : -BN_E_NOT_DONE);
	fprintf(stderr, "status=%s tokens=%u\n", bn_status_name(r.status), r.n_tokens);
	if (o->req.flags & BN_REQ_LOGPROBS) {
		int err = print_logprobs(h, out->vocab, r.n_tokens, o->sp.n_logprobs);
		if (err < 0)
			return fail("reading log-probabilities", err);
	}
	rc = status_error(&r);
	return rc < 0 ? fail("generate", rc) : 0;
}

/* The grammar option's text: the expression itself, or a file's contents. */
static int grammar_text(struct gen_opts *o)
{
	struct bn_grammar_spec *g = &o->grammar;
	if (g->kind == BN_GRAMMAR_KIND_JSON)
		return 0;
	if (g->kind == BN_GRAMMAR_KIND_REGEX) {
		g->text = o->grammar_arg;
		g->len = strlen(o->grammar_arg);
		return 0;
	}
	FILE *f = fopen(o->grammar_arg, "rb");
	size_t cap = 1 << 20, len = 0;
	o->grammar_text = f ? malloc(cap) : NULL;
	if (o->grammar_text)
		len = fread(o->grammar_text, 1, cap, f);
	int bad = !f || !o->grammar_text || ferror(f) || len == cap;
	if (f)
		fclose(f);
	if (bad) {
		fprintf(stderr, "bitnet-cli: generate: cannot read %s%s\n", o->grammar_arg,
			len == cap ? " (over 1 MiB)" : "");
		return 1;
	}
	g->text = o->grammar_text;
	g->len = len;
	return 0;
}

/* Compiles the grammar in the daemon; a refusal prints the daemon's reason. */
static int load_grammar(struct bn_client *c, struct gen_opts *o, struct bn_grammar_handle **g)
{
	*g = NULL;
	if (!o->grammar.kind)
		return 0;
	int rc = grammar_text(o);
	if (rc)
		return rc;
	char why[512];
	rc = bn_grammar_load(c, &o->grammar, g, why, sizeof(why), -1);
	if (rc == 0)
		return 0;
	fprintf(stderr, "bitnet-cli: generate: %s%s%s\n", bn_strerror(rc), why[0] ? ": " : "", why);
	return 1;
}

static int cmd_generate(struct bn_client *c, int argc, char **argv)
{
	struct gen_opts o;
	int rc = parse_generate(&o, argc, argv);
	const struct bn_vocab *vocab = NULL;
	struct bn_grammar_handle *g = NULL;
	uint32_t *ids = NULL, n = 0;
	if (rc == 0 && o.prompt)
		rc = cli_text_vocab(c, "generate", &vocab);
	if (rc == 0)
		rc = prompt_ids(&o, vocab, &ids, &n);
	if (rc == 0)
		rc = load_grammar(c, &o, &g);
	struct bn_handle *h = NULL;
	if (rc == 0) {
		o.req.prompt = ids;
		o.req.n_prompt = n;
		int err = bn_submit_grammar(c, &o.req, NULL, 0, g, &h);
		rc = err < 0 ? fail("generate", err) : 0;
	}
	if (rc == 0) {
		/* A SentencePiece continuation keeps its leading space; a text from nothing (BOS)
		 * drops it. */
		struct cli_output out;
		int strip = vocab && bn_vocab_kind(vocab) == BN_VOCAB_SPM && !*o.prompt;
		int64_t timeout = o.timeout_ms ? (int64_t)o.timeout_ms * 1000000 : -1;
		rc = cli_output_init(&out, vocab, strip ? BN_DETOK_STRIP_SPACE : 0);
		if (rc == 0)
			rc = cli_output_stream(h, &out, timeout);
		rc = finish(h, &o, &out, rc);
		cli_output_free(&out);
		bn_release(h);
	}
	bn_grammar_release(g);
	free(ids);
	free(o.stop_ids);
	free(o.grammar_text);
	return rc;
}

static int cmd_stats(struct bn_client *c)
{
	size_t cap = 1 << 16;
	char *buf = malloc(cap);
	if (!buf)
		return fail("stats", -ENOMEM);
	int rc = bn_daemon_stats(c, buf, cap);
	if (rc >= 0)
		fputs(buf, stdout);
	free(buf);
	return rc < 0 ? fail("stats", rc) : 0;
}

int main(int argc, char **argv)
{
	const char *socket_path = NULL, *model = NULL;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
			socket_path = argv[++i];
		else if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
			model = argv[++i];
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return fputs(usage_text, stdout), 0;
		else
			return fputs(usage_text, stderr), 2;
	}
	if (i >= argc)
		return fputs(usage_text, stderr), 2;
	const char *cmd = argv[i];
	if (strcmp(cmd, "bench") == 0)
		return cli_bench(socket_path, argc - i, argv + i);
	static const char *const commands[] = { "info", "generate", "stats", "tokenize",
						 "detokenize", "chat", "score", "perplexity",
						 "classify", "embed", "models" };
	size_t k = 0;
	while (k < sizeof(commands) / sizeof(commands[0]) && strcmp(cmd, commands[k]))
		k++;
	if (k == sizeof(commands) / sizeof(commands[0]))
		return fprintf(stderr, "bitnet-cli: unknown command '%s'\n", cmd), 2;
	struct bn_client *c;
	int rc = bn_connect_model(socket_path, model, 0, 0, &c);
	if (rc == -BN_E_MODEL_NOT_FOUND || rc == -BN_E_INVALID)
		return fprintf(stderr, "bitnet-cli: --model %s: %s (bitnet-cli models lists the "
				       "daemon's models)\n", model, bn_strerror(rc)), 1;
	if (rc < 0)
		return cli_connect_failed(socket_path, rc);
	if (strcmp(cmd, "info") == 0)
		rc = cmd_info(c);
	else if (strcmp(cmd, "generate") == 0)
		rc = cmd_generate(c, argc - i, argv + i);
	else if (strcmp(cmd, "tokenize") == 0)
		rc = cli_tokenize(c, argc - i, argv + i);
	else if (strcmp(cmd, "detokenize") == 0)
		rc = cli_detokenize(c, argc - i, argv + i);
	else if (strcmp(cmd, "chat") == 0)
		rc = cli_chat(c, argc - i, argv + i);
	else if (strcmp(cmd, "score") == 0)
		rc = cli_score(c, argc - i, argv + i);
	else if (strcmp(cmd, "perplexity") == 0)
		rc = cli_perplexity(c, argc - i, argv + i);
	else if (strcmp(cmd, "classify") == 0)
		rc = cli_classify(c, argc - i, argv + i);
	else if (strcmp(cmd, "embed") == 0)
		rc = cli_embed(c, argc - i, argv + i);
	else if (strcmp(cmd, "models") == 0)
		rc = cli_models(c, argc - i, argv + i);
	else
		rc = cmd_stats(c);
	bn_disconnect(c);
	return rc;
}
