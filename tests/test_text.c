/* SPDX-License-Identifier: MIT */
/*
 * Text and chat with the real BitNet 2B4T vocabulary (LLaMA-3's byte-level BPE), in model
 * files whose tokenizer keys are written as the published files have them:
 *  - "microsoft": the official GGUF's keys (no tokenizer.ggml.pre, no eot_token_id, padding =
 *    eos, the converter's placeholder chat template);
 *  - "llama.cpp": a llama.cpp conversion's (pre = llama-bpe, the trained template).
 * The files are made by the model tool from ../shared/models/llama3/tokenizer.json
 * ($BITNET_TEST_MODELS); without it every test here is skipped with a message.
 *
 * Oracles: llama.cpp's 46 tokenizer test vectors (llama-bpe.inp/.out); byte equality of
 * decode(encode(s)) with s; chat renders checked against Hugging Face's apply_chat_template
 * (jinja2, trim_blocks and lstrip_blocks, as transformers sets them) for the same templates;
 * the same conversation answered alone; a model rigged so that its most likely token is
 * <|eot_id|>.
 */
#define _GNU_SOURCE
#include "../daemon/model/vocab.h"
#include "bitnet_client.h"
#include "testutil.h"

#include "ckassert.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SECOND 1000000000LL
#define N_VECTORS 46
#define BOS 128000u
#define EOS 128001u
#define EOT 128009u

static char llama3_dir[512];
static char model_dir[64];
static char ms_path[128], cpp_path[128], rigged_path[128];

/* ------------------------------------------------------------------------------------------ */
/* The files                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* llama.cpp's vectors: text i of the .inp file (each followed by "\n__ggml_vocab_test__\n")
 * and the ids on line i of the .out file. */
struct vectors {
	char *inp, *out;
	const char *text[N_VECTORS];
	size_t len[N_VECTORS];
	uint32_t ids[N_VECTORS][256];
	uint32_t n_ids[N_VECTORS];
};

static void vectors_load(struct vectors *v)
{
	char path[600];
	size_t n;
	snprintf(path, sizeof(path), "%s/llama-bpe.inp", llama3_dir);
	v->inp = read_file(path, &n);
	snprintf(path, sizeof(path), "%s/llama-bpe.out", llama3_dir);
	v->out = read_file(path, &n);
	static const char sep[] = "\n__ggml_vocab_test__\n";
	char *p = v->inp, *line = v->out;
	for (int i = 0; i < N_VECTORS; i++) {
		char *end = strstr(p, sep);
		ck_assert_ptr_nonnull(end);
		v->text[i] = p;
		v->len[i] = (size_t)(end - p);
		p = end + sizeof(sep) - 1;
		char *eol = strchr(line, '\n');
		ck_assert_ptr_nonnull(eol);
		*eol = '\0';
		v->n_ids[i] = 0;
		for (char *q = line; *q;) {
			char *e;
			unsigned long id = strtoul(q, &e, 10);
			if (e == q)
				break;
			ck_assert_uint_lt(v->n_ids[i], 256);
			v->ids[i][v->n_ids[i]++] = (uint32_t)id;
			q = e;
		}
		line = eol + 1;
	}
}

static void vectors_free(struct vectors *v)
{
	free(v->inp);
	free(v->out);
}

static void expect_vectors(const struct bn_vocab *v, const struct vectors *vec)
{
	for (int i = 0; i < N_VECTORS; i++) {
		uint32_t ids[256];
		int n = bn_tokenize_ex(v, vec->text[i], vec->len[i], 0, ids, 256);
		ck_assert_msg(n == (int)vec->n_ids[i], "vector %d: %d ids, want %u", i, n,
			      vec->n_ids[i]);
		ck_assert_msg(memcmp(ids, vec->ids[i], (size_t)n * 4) == 0, "vector %d differs", i);
	}
}

static struct bn_client *connect_or_die(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 0, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

/* A cpu daemon on model, with one more option and its value (or none). */
static void start(struct tu_daemon *d, const char *model, const char *opt, const char *value)
{
	const char *args[] = { "--backend", "cpu", "--model", model, "--threads", "1", opt, value,
			       NULL };
	ck_assert_int_eq(tu_daemon_start(d, args), 0);
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const char *s, size_t n)
{
	const uint8_t *p = (const uint8_t *)s;
	for (size_t i = 0; i < n;) {
		size_t need = p[i] < 0x80 ? 0 : p[i] >= 0xc2 && p[i] <= 0xdf ? 1
					    : p[i] >= 0xe0 && p[i] <= 0xef ? 2
					    : p[i] >= 0xf0 && p[i] <= 0xf4 ? 3 : 9;
		if (need == 9 || i + need >= n + (need ? 0 : 1))
			return 0;
		uint8_t lo = p[i] == 0xe0 ? 0xa0 : p[i] == 0xf0 ? 0x90 : 0x80;
		uint8_t hi = p[i] == 0xed ? 0x9f : p[i] == 0xf4 ? 0x8f : 0xbf;
		for (size_t k = 1; k <= need; k++)
			if (p[i + k] < (k == 1 ? lo : 0x80) || p[i + k] > (k == 1 ? hi : 0xbf))
				return 0;
		i += need + 1;
	}
	return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding: llama.cpp's vectors, through the library and through a daemon                     */
/* ------------------------------------------------------------------------------------------ */

/* Both kinds of file: the official one has no tokenizer.ggml.pre, and the vocabulary is
 * recognised as LLaMA-3's; the conversion names llama-bpe. Either way every id is llama.cpp's. */
START_TEST(llama_cpp_vectors_in_both_kinds_of_file)
{
	struct vectors vec;
	vectors_load(&vec);
	const char *paths[] = { ms_path, cpp_path };
	for (int k = 0; k < 2; k++) {
		struct bn_vocab *v = tu_file_vocab(paths[k]);
		ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_BPE);
		ck_assert_uint_eq(bn_vocab_pre_tokenizer(v), BN_PRE_LLAMA3);
		ck_assert_uint_eq(bn_vocab_flags(v) & BN_VOCAB_PRE_DETECTED, k == 0 ? BN_VOCAB_PRE_DETECTED : 0);
		expect_vectors(v, &vec);
		bn_vocab_free(v);
	}
	vectors_free(&vec);
}
END_TEST

/* The vocabulary as a client fetches it from a daemon encodes the same, and the CLI prints
 * the same ids (BOS first unless --no-bos). */
START_TEST(llama_cpp_vectors_through_a_daemon)
{
	struct vectors vec;
	vectors_load(&vec);
	struct tu_daemon d;
	start(&d, ms_path, NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	struct bn_vocab *v;
	ck_assert_int_eq(bn_vocab_fetch(c, &v), 0);
	expect_vectors(v, &vec);
	struct tu_run *r = malloc(sizeof(*r));
	for (int i = 0; i < N_VECTORS; i += 5) {
		char want[4096] = "128000";
		for (uint32_t j = 0; j < vec.n_ids[i]; j++)
			sprintf(want + strlen(want), " %u", vec.ids[i][j]);
		strcat(want, "\n");
		ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "tokenize", "-", NULL },
					    vec.text[i], vec.len[i], r), 0);
		ck_assert_msg(r->status == 0, "%s", r->err);
		ck_assert_str_eq(r->out, want);
		ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "tokenize", "--no-bos", "-",
								       NULL },
					    vec.text[i], vec.len[i], r), 0);
		ck_assert_str_eq(r->out, want + 7);
	}
	free(r);
	bn_vocab_free(v);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	vectors_free(&vec);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Pieces random texts are made of: scripts, emoji (ZWJ sequences, variation selectors),
 * white-space runs, digits, punctuation, contractions. */
static const char *const pieces[] = {
	"a", "Hello", " world", "don't", "'S", "I'LL", "123", "4567890", " ", "  ", "\t", "\n",
	"\r\n", "\n\n\n", " \t ", "!", "...", "(", "é", "ß", "½", "Führer", "нещо", "Бълг", "中文",
	"我想在", "ភាសា", "🦙", "🚀", "😶\u200d🌫️", "👨\u200d👩\u200d👧", "\u00a0", "\u3000",
	"Cửa", "ℕ", "ﬁ", "x²", "٣٤", "עברית", "العربية", "🇫🇷", "e\u0301", "<|eot_id|>", "\\",
};

static size_t random_text(char *buf, size_t cap)
{
	size_t n = 0, k = tu_rng_next() % 24;
	for (size_t i = 0; i < k; i++) {
		const char *p = pieces[tu_rng_next() % (sizeof(pieces) / sizeof(pieces[0]))];
		size_t len = strlen(p);
		if (n + len >= cap)
			break;
		memcpy(buf + n, p, len);
		n += len;
	}
	buf[n] = '\0';
	return n;
}

/* decode(encode(s)) == s, byte for byte, for 10,000 random valid UTF-8 texts. */
START_TEST(round_trip_random_texts)
{
	struct bn_vocab *v = tu_file_vocab(ms_path);
	tu_rng_seed(23);
	for (int t = 0; t < 10000; t++) {
		char text[1024], back[2048];
		uint32_t ids[1024];
		size_t len = random_text(text, sizeof(text));
		int n = bn_tokenize_ex(v, text, len, BN_TOK_ADD_BOS, ids, 1024);
		ck_assert_int_gt(n, 0);
		ck_assert_uint_eq(ids[0], BOS);
		int k = bn_detokenize_ex(v, ids, (uint32_t)n, 0, back, sizeof(back));
		ck_assert_msg(k == (int)len && memcmp(back, text, len) == 0, "text %d: '%s' -> '%s'",
			      t, text, back);
	}
	bn_vocab_free(v);
}
END_TEST

/* A text whose tokens split characters (the llama and the Khmer are several byte tokens) fed
 * to a stream at every split point: every chunk is valid UTF-8 and together they are the text. */
START_TEST(stream_decoder_at_every_split)
{
	struct bn_vocab *v = tu_file_vocab(ms_path);
	const char *text = "Führer 🦙.cpp ½ ភាសា 😶\u200d🌫️ end";
	uint32_t ids[128];
	int n = bn_tokenize_ex(v, text, strlen(text), 0, ids, 128);
	ck_assert_int_gt(n, 10);
	for (int cut = 0; cut <= n; cut++) {
		struct bn_text_stream *s;
		ck_assert_int_eq(bn_text_stream_new(v, 0, &s), 0);
		char out[256] = "";
		const char *chunk;
		size_t len;
		/* Up to the cut one id at a time, then the rest at once, then the end. */
		for (int i = 0; i < cut; i++) {
			ck_assert_int_eq(bn_text_stream_push(s, &ids[i], 1, &chunk, &len), 0);
			ck_assert(utf8_valid(chunk, len));
			strncat(out, chunk, len);
		}
		ck_assert_int_eq(bn_text_stream_push(s, ids + cut, (uint32_t)(n - cut), &chunk, &len), 0);
		strncat(out, chunk, len);
		ck_assert_int_eq(bn_text_stream_finish(s, &chunk, &len), 0);
		ck_assert_uint_eq(len, 0);
		ck_assert_str_eq(out, text);
		bn_text_stream_free(s);
	}
	bn_vocab_free(v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Chat                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* A system message and three turns, with white space the templates trim (or keep: chatml),
 * a no-break space (Python's strip removes it), and a special token's text in a message. */
static const struct bn_chat_message conv[] = {
	{ "system", " You are terse. " },
	{ "user", "  Hi there!\n" },
	{ "assistant", "Hello.  " },
	{ "user", "What is 2+2? <|eot_id|> ok\xc2\xa0" },
};
#define N_CONV (sizeof(conv) / sizeof(conv[0]))

/* jinja2 (transformers' settings) rendered each template for conv with
 * add_generation_prompt=True; these are its outputs. */
static const struct {
	uint32_t tmpl;
	const char *name;
	const char *render;
} renders[] = {
	{ BN_CHAT_BITNET, "bitnet",
	  "System: You are terse.<|eot_id|>User: Hi there!<|eot_id|>Assistant: Hello.<|eot_id|>"
	  "User: What is 2+2? <|eot_id|> ok<|eot_id|>Assistant: " },
	{ BN_CHAT_LLAMA3, "llama3",
	  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
	  "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
	  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
	  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2? <|eot_id|> ok<|eot_id|>"
	  "<|start_header_id|>assistant<|end_header_id|>\n\n" },
	{ BN_CHAT_CHATML, "chatml",
	  "<|im_start|>system\n You are terse. <|im_end|>\n<|im_start|>user\n  Hi there!\n<|im_end|>\n"
	  "<|im_start|>assistant\nHello.  <|im_end|>\n<|im_start|>user\nWhat is 2+2? <|eot_id|> "
	  "ok\xc2\xa0<|im_end|>\n<|im_start|>assistant\n" },
	{ BN_CHAT_LLAMA2, "llama2",
	  "<|begin_of_text|>[INST] <<SYS>>\n You are terse. \n<</SYS>>\n\n  Hi there! [/INST] "
	  "Hello. <|end_of_text|><|begin_of_text|>[INST] What is 2+2? <|eot_id|> ok [/INST]" },
};

START_TEST(templates_render_as_hugging_face)
{
	struct bn_vocab *v = tu_file_vocab(ms_path);
	char buf[2048];
	int n = bn_chat_render(v, renders[_i].tmpl, conv, N_CONV, buf, sizeof(buf));
	ck_assert_int_eq(n, (int)strlen(renders[_i].render));
	ck_assert_str_eq(buf, renders[_i].render);
	/* Truncated like snprintf: the full length is still returned. */
	ck_assert_int_eq(bn_chat_render(v, renders[_i].tmpl, conv, N_CONV, buf, 8), n);
	ck_assert_uint_eq(strlen(buf), 7);
	bn_vocab_free(v);
}
END_TEST

static int count(const uint32_t *ids, int n, uint32_t id)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += ids[i] == id;
	return k;
}

/* The template's own <|eot_id|> (one per message in bitnet and llama3) is the special token;
 * the one the user typed is text. One BOS, first. */
START_TEST(message_text_is_never_special)
{
	struct bn_vocab *v = tu_file_vocab(ms_path);
	uint32_t ids[512];
	for (int t = 0; t < 2; t++) {
		uint32_t tmpl = t ? BN_CHAT_LLAMA3 : BN_CHAT_BITNET;
		int n = bn_chat_tokenize(v, tmpl, conv, N_CONV, ids, 512);
		ck_assert_int_gt(n, 20);
		ck_assert_uint_eq(ids[0], BOS);
		ck_assert_int_eq(count(ids, n, BOS), 1);
		ck_assert_int_eq(count(ids, n, EOT), (int)N_CONV);
		/* The typed marker's own ids: " <|" "e" "ot" "_id" "|" ">" as plain text. */
		static const uint32_t typed[] = { 83739, 68, 354, 851, 91, 29 };
		int found = 0;
		for (int i = 0; i + 6 <= n && !found; i++)
			found = memcmp(ids + i, typed, sizeof(typed)) == 0;
		ck_assert_msg(found, "template %u: the typed <|eot_id|> is not plain text", tmpl);
	}
	/* The default template is the file's, resolved: the placeholder became bitnet. */
	ck_assert_uint_eq(bn_vocab_chat_template(v), BN_CHAT_BITNET);
	int a = bn_chat_tokenize(v, 0, conv, N_CONV, ids, 512);
	uint32_t again[512];
	ck_assert_int_eq(bn_chat_tokenize(v, BN_CHAT_BITNET, conv, N_CONV, again, 512), a);
	ck_assert_int_eq(memcmp(ids, again, (size_t)a * 4), 0);
	bn_vocab_free(v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* What the daemon chose, and end of generation                                                */
/* ------------------------------------------------------------------------------------------ */

static void expect_info(const char *model, const char *opt, const char *value,
			const char *const *lines)
{
	struct tu_daemon d;
	start(&d, model, opt, value);
	struct tu_run *r = malloc(sizeof(*r));
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "info", NULL }, NULL, 0, r), 0);
	ck_assert_msg(r->status == 0, "%s", r->err);
	for (int i = 0; lines[i]; i++)
		ck_assert_msg(strstr(r->out, lines[i]), "'%s' not in:\n%s", lines[i], r->out);
	free(r);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}

START_TEST(info_says_what_was_chosen)
{
	expect_info(ms_path, NULL, NULL,
		    (const char *const[]){ "vocab=gpt2\n", "pre_tokenizer=llama-bpe (detected)\n",
					   "chat_template=bitnet (placeholder replaced)\n",
					   "eog_ids=128001,128009\n", "add_bos=1\n", "add_eos=0\n",
					   "lm_head=screened (the file's tokens and logits)\n",
					   "decode_layout=2bit\n", NULL });
	expect_info(cpp_path, NULL, NULL,
		    (const char *const[]){ "pre_tokenizer=llama-bpe\n", "chat_template=bitnet\n",
					   "eog_ids=128001,128009\n", NULL });
	expect_info(ms_path, "--chat-template", "chatml",
		    (const char *const[]){ "chat_template=chatml (override)\n", NULL });
	expect_info(ms_path, "--pre-tokenizer", "gpt2",
		    (const char *const[]){ "pre_tokenizer=gpt2 (override)\n", NULL });
	/* The file declares add_bos_token: it stands with the falcon3 split too. */
	expect_info(ms_path, "--pre-tokenizer", "falcon3",
		    (const char *const[]){ "pre_tokenizer=falcon3 (override)\n", "add_bos=1\n",
					   NULL });
	expect_info(ms_path, "--chat-template", "falcon3",
		    (const char *const[]){ "chat_template=falcon3 (override)\n", NULL });
}
END_TEST

/* The official file declares eos 128001 only; its turns end with <|eot_id|> 128009. A model
 * whose most likely token is always 128009 ends at once with EOS, and with IGNORE_EOS emits
 * 128009 again and again. */
START_TEST(official_metadata_stops_at_eot)
{
	struct tu_daemon d;
	start(&d, rigged_path, NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	uint32_t prompt[] = { BOS, 9906 }, out[8];
	struct bn_request req = { .prompt = prompt, .n_prompt = 2, .max_tokens = 8 };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, 8, &res, tu_scaled_ns(30 * SECOND)), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_EOS);
	ck_assert_uint_eq(res.n_tokens, 0);
	req.flags = BN_REQ_IGNORE_EOS;
	ck_assert_int_eq(bn_generate(c, &req, out, 8, &res, tu_scaled_ns(30 * SECOND)), 0);
	ck_assert_uint_eq(res.status, BN_STATUS_LENGTH);
	ck_assert_int_eq(count(out, 8, EOT), 8);
	/* A chat reply on it is empty: the model ends its turn at once. */
	char reply[64] = "x";
	struct bn_chat_item item = { .messages = conv, .n_messages = N_CONV, .max_tokens = 16,
				     .reply = reply, .reply_cap = sizeof(reply) };
	ck_assert_int_eq(bn_chat(c, &item, tu_scaled_ns(30 * SECOND)), 0);
	ck_assert_uint_eq(item.result.status, BN_STATUS_EOS);
	ck_assert_str_eq(reply, "");
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Four conversations, the third with an empty role: it fails alone, the others' replies are
 * those of the same conversations run alone. */
START_TEST(chat_batch_item_fails_alone)
{
	struct tu_daemon d;
	start(&d, ms_path, NULL, NULL);
	struct bn_client *c = connect_or_die(&d);
	static const struct bn_chat_message bad[] = { { "", "hello" } };
	struct bn_chat_message one[4][2] = {
		{ { "user", "Tell me a story." } },
		{ { "system", "Be brief." }, { "user", "Why is the sky blue?" } },
		{ { "user", "x" } },
		{ { "user", "Füße 🦙" } },
	};
	size_t n_msgs[4] = { 1, 2, 1, 1 };
	struct bn_chat_item items[4];
	char replies[4][512], alone[512];
	for (int i = 0; i < 4; i++)
		items[i] = (struct bn_chat_item){ .messages = i == 2 ? bad : one[i],
						  .n_messages = n_msgs[i], .max_tokens = 24,
						  .reply = replies[i], .reply_cap = 512 };
	struct bn_batch_result br;
	ck_assert_int_eq(bn_chat_batch(c, items, 4, &br, tu_scaled_ns(60 * SECOND)), 0);
	ck_assert_uint_eq(br.n_ok, 3);
	ck_assert_uint_eq(br.n_failed, 1);
	ck_assert_int_eq(items[2].error, -BN_E_INVALID);
	for (int i = 0; i < 4; i++) {
		if (i == 2)
			continue;
		ck_assert_int_eq(items[i].error, 0);
		ck_assert_uint_eq(items[i].result.n_tokens, 24);
		struct bn_chat_item a = items[i];
		a.reply = alone;
		ck_assert_int_eq(bn_chat(c, &a, tu_scaled_ns(30 * SECOND)), 0);
		ck_assert_str_eq(alone, replies[i]);
		ck_assert_uint_eq(a.reply_len, items[i].reply_len);
	}
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* The CLI: render and render-ids from a JSON file (or standard input), detokenize, usage
 * errors, and generate --prompt streaming valid UTF-8 that is the text of its ids. */
START_TEST(cli_text_commands)
{
	struct tu_daemon d;
	start(&d, ms_path, NULL, NULL);
	struct tu_run *r = malloc(sizeof(*r));
	static const char json[] =
		"[{\"role\":\"system\",\"content\":\" You are terse. \"},"
		"{\"role\":\"user\",\"content\":\"  Hi there!\\n\"},"
		"{\"role\":\"assistant\",\"content\":\"Hello.  \"},"
		"{\"role\":\"user\",\"content\":\"What is 2+2? <|eot_id|> ok\\u00a0\"}]";
	for (size_t t = 0; t < sizeof(renders) / sizeof(renders[0]); t++) {
		ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "chat", "--messages", "-",
								       "--render", "--chat-template",
								       renders[t].name, NULL },
					    json, sizeof(json) - 1, r), 0);
		ck_assert_msg(r->status == 0, "%s", r->err);
		ck_assert_uint_eq(r->out_len, strlen(renders[t].render) + 1);
		ck_assert_int_eq(memcmp(r->out, renders[t].render, r->out_len - 1), 0);
	}
	struct bn_vocab *v = tu_file_vocab(ms_path);
	uint32_t ids[512];
	int n = bn_chat_tokenize(v, 0, conv, N_CONV, ids, 512);
	char want[4096] = "";
	for (int i = 0; i < n; i++)
		sprintf(want + strlen(want), i ? " %u" : "%u", ids[i]);
	strcat(want, "\n");
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "chat", "--messages", "-",
							       "--render-ids", NULL },
				    json, sizeof(json) - 1, r), 0);
	ck_assert_str_eq(r->out, want);

	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "detokenize", "--ids",
							       "128000 9906 1917 128009", NULL },
				    NULL, 0, r), 0);
	ck_assert_str_eq(r->out, "Hello world\n");
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "detokenize", "--special", "--ids",
							       "128000 9906 1917 128009", NULL },
				    NULL, 0, r), 0);
	ck_assert_str_eq(r->out, "<|begin_of_text|>Hello world<|eot_id|>\n");
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "tokenize", "--special", "--no-bos",
							       "<|eot_id|>hi", NULL },
				    NULL, 0, r), 0);
	ck_assert_str_eq(r->out, "128009 6151\n");
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "chat", "--render", NULL }, NULL, 0,
				    r), 0);
	ck_assert_int_eq(r->status, 2);
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "chat", "--chat-template", "zephyr",
							       "--message", "hi", NULL },
				    NULL, 0, r), 0);
	ck_assert_int_eq(r->status, 2);
	ck_assert_msg(strstr(r->err, "bitnet, llama3, chatml, llama2 or falcon3"), "%s", r->err);

	/* A random model's tokens split characters: the streamed text must still be valid UTF-8,
	 * and equal to the text of the ids it printed. */
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "generate", "--prompt", "Füße",
							       "--max-tokens", "48", "--ignore-eos",
							       "--print-ids", NULL },
				    NULL, 0, r), 0);
	ck_assert_msg(r->status == 0, "%s", r->err);
	char *line = strchr(r->out, '\n');
	ck_assert_ptr_nonnull(line);
	*line = '\0';
	uint32_t out[64];
	int k = 0;
	for (char *p = line + 1; k < 64;) {
		char *e;
		unsigned long id = strtoul(p, &e, 10);
		if (e == p)
			break;
		out[k++] = (uint32_t)id;
		p = e;
	}
	ck_assert_int_eq(k, 48);
	ck_assert(utf8_valid(r->out, strlen(r->out)));
	struct bn_text_stream *s;
	const char *chunk;
	size_t len;
	char text[4096] = "";
	ck_assert_int_eq(bn_text_stream_new(v, 0, &s), 0);
	ck_assert_int_eq(bn_text_stream_push(s, out, 48, &chunk, &len), 0);
	strncat(text, chunk, len);
	ck_assert_int_eq(bn_text_stream_finish(s, &chunk, &len), 0);
	strncat(text, chunk, len);
	bn_text_stream_free(s);
	ck_assert_str_eq(r->out, text);
	bn_vocab_free(v);
	free(r);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

static int make_model(const char *path, const char *metadata, const char *rig)
{
	const char *tool = getenv("BITNET_MODEL_TOOL");
	if (!tool || !*tool)
		tool = "build/bitnet-model";
	char vocab[600];
	snprintf(vocab, sizeof(vocab), "%s/tokenizer.json", llama3_dir);
	const char *argv[] = { tool, "write", "--preset", "tiny", "--vocab-from", vocab,
			       "--metadata", metadata, "--out", path,
			       rig ? "--untied" : NULL, "--rig-argmax", rig, NULL };
	struct tu_run *r = malloc(sizeof(*r));
	int rc = tu_run(argv, NULL, 0, r) == 0 && r->status == 0 ? 0 : -1;
	if (rc)
		fprintf(stderr, "%s: %s\n", path, r->err);
	free(r);
	return rc;
}

static pid_t main_pid;

/* Check runs each test in a child, which exits too: only the parent removes the files. */
static void remove_models(void)
{
	if (getpid() != main_pid)
		return;
	unlink(ms_path);
	unlink(cpp_path);
	unlink(rigged_path);
	rmdir(model_dir);
}

int main(void)
{
	Suite *s = suite_create("text");
	const char *models = getenv("BITNET_TEST_MODELS");
	if (!models || !*models) {
		printf("SKIP: LLaMA-3 vocabulary tests (BITNET_TEST_MODELS is not set; .ci/run sets "
		       "it to ../shared/models)\n");
		return tu_run_suite(s);
	}
	snprintf(llama3_dir, sizeof(llama3_dir), "%s/llama3", models);
	snprintf(model_dir, sizeof(model_dir), "/tmp/bn-text-XXXXXX");
	if (!mkdtemp(model_dir))
		return EXIT_FAILURE;
	snprintf(ms_path, sizeof(ms_path), "%s/microsoft.gguf", model_dir);
	snprintf(cpp_path, sizeof(cpp_path), "%s/llamacpp.gguf", model_dir);
	snprintf(rigged_path, sizeof(rigged_path), "%s/rigged.gguf", model_dir);
	main_pid = getpid();
	atexit(remove_models);
	if (make_model(ms_path, "microsoft", NULL))
		return EXIT_FAILURE;
	if (TU_TSAN) {
		/* Under ThreadSanitizer (111 s on the Zen 5 VM, about twice that on CI's; 99 s
		 * with the daemon's vectors, which start bitnet-cli 20 times) the chat batch runs,
		 * where the daemon serves several requests at once; the tokenizer and the
		 * templates, in process on one thread, and the one-request cases are the plain
		 * and AddressSanitizer passes'. */
		printf("note: under ThreadSanitizer only the chat batch runs\n");
		TCase *served = tcase_create("served");
		tcase_set_timeout(served, 120);
		tcase_add_test(served, chat_batch_item_fails_alone); /* the microsoft file's */
		suite_add_tcase(s, served);
		return tu_run_suite(s);
	}
	/* (each model written takes seconds under ThreadSanitizer: these only when their cases
	 * run) */
	if (make_model(cpp_path, "llama.cpp", NULL) || make_model(rigged_path, "microsoft", "128009"))
		return EXIT_FAILURE;
	TCase *enc = tcase_create("encode and decode");
	tcase_set_timeout(enc, 120);
	tcase_add_test(enc, llama_cpp_vectors_in_both_kinds_of_file);
	tcase_add_test(enc, llama_cpp_vectors_through_a_daemon);
	tcase_add_test(enc, round_trip_random_texts);
	tcase_add_test(enc, stream_decoder_at_every_split);
	suite_add_tcase(s, enc);
	TCase *chat = tcase_create("chat");
	tcase_set_timeout(chat, 120);
	tcase_add_loop_test(chat, templates_render_as_hugging_face, 0,
			    sizeof(renders) / sizeof(renders[0]));
	tcase_add_test(chat, message_text_is_never_special);
	tcase_add_test(chat, info_says_what_was_chosen);
	tcase_add_test(chat, official_metadata_stops_at_eot);
	tcase_add_test(chat, chat_batch_item_fails_alone);
	tcase_add_test(chat, cli_text_commands);
	suite_add_tcase(s, chat);
	return tu_run_suite(s);
}
