/* SPDX-License-Identifier: MIT */
/*
 * Text in, text out:
 *  - the encoder on a small hand-made vocabulary whose merges are worked out by hand (score
 *    order, leftmost of equal scores, stale candidates, spaces, UTF-8, byte fallback, the
 *    unknown token), the decoder, and text -> ids -> text on random bytes;
 *  - the client's payload parser: every truncation and a set of corruptions are refused, and
 *    random mutations never read out of bounds (each parse reads an allocation of exactly the
 *    payload's size, so under ASan an overread fails the test);
 *  - the daemon's payload builder (daemon/model/vocab.c) on GGUF files made in memory: defaults,
 *    every check with its message, the sealed memfd;
 *  - through a daemon: the vocabulary of the built-in tiny model, none from loopback, and the
 *    CLI's usage errors;
 *  - the real test model (../shared/models/stories260K.gguf, $BITNET_TEST_MODELS): the README's
 *    200 greedy ids decode to its text, that text encodes back to the same ids, and
 *    `bitnet-cli generate --prompt` prints what greedy decoding through the library gives.
 */
#define _GNU_SOURCE
#include "../daemon/model/gguf.h"
#include "../daemon/model/vocab.h"
#include "../daemon/config.h"
#include "../daemon/control.h"
#include "../daemon/backends/backend.h"
#include "../daemon/textprep.h"
#include "../tools/gguf_write.h"
#include "bitnet_client.h"
#include "client_internal.h"
#include "testutil.h"

#include "ckassert.h"
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NONE UINT32_MAX
#define SECOND 1000000000LL
#define KNOWN_STEPS TU_STORIES_KNOWN

#define STORIES_START "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
#define STORIES_END "Lily didn't want to help her mom, so she"

static char stories_path[512];

/* ------------------------------------------------------------------------------------------ */
/* Payloads made by hand                                                                       */
/* ------------------------------------------------------------------------------------------ */

struct tok {
	const char *text;
	float score;
	uint32_t type; /* 1 normal, 2 unknown, 3 control, 6 byte */
};

struct spec {
	const struct tok *toks;   /* the tokens after the specials and bytes */
	uint32_t n_toks;
	int with_bytes;           /* <0x00>..<0xFF> at ids 3..258 */
	uint32_t kind, unk_id;
};

#define W "\xe2\x96\x81" /* U+2581 */
#define BYTE(b) (3u + (b))

/* The toy vocabulary: <unk> <s> </s>, the 256 byte tokens, then these from id 259. */
enum {
	T_W = 259, T_A, T_B, T_C, T_D, T_WA, T_AB, T_WC, T_CD, T_AA, T_WW, T_WE_ACUTE, T_U_UML,
};
static const struct tok toy_toks[] = {
	{ W, -10, 1 },      { "a", -10, 1 },   { "b", -10, 1 },  { "c", -10, 1 },
	{ "d", -10, 1 },    { W "a", -2, 1 },  { "ab", -1, 1 },  { W "c", -1, 1 },
	{ "cd", -2, 1 },    { "aa", -1, 1 },   { W W, -5, 1 },   { W "\xc3\xa9", -1, 1 },
	{ "\xc3\xbc", -10, 1 },
};
static const struct spec toy = { toy_toks, sizeof(toy_toks) / sizeof(toy_toks[0]), 1,
				 BN_VOCAB_SPM, 0 };

/* No byte tokens: <unk> <s> </s> ▁ x ▁x. */
static const struct tok small_toks[] = { { W, -10, 1 }, { "x", -10, 1 }, { W "x", -1, 1 } };
static const struct spec small = { small_toks, 3, 0, BN_VOCAB_SPM, 0 };
static const struct spec small_no_unk = { small_toks, 3, 0, BN_VOCAB_SPM, NONE };
static const struct spec toy_other = { toy_toks, sizeof(toy_toks) / sizeof(toy_toks[0]), 1,
				       BN_VOCAB_OTHER, 0 };

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = 2 * (b->n + n) + 64;
		b->p = realloc(b->p, b->cap);
		ck_assert_ptr_nonnull(b->p);
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void put_entry(struct buf *b, const char *text, float score, uint32_t type)
{
	struct bn_vocab_entry e = { .score = score, .type = type, .length = (uint32_t)strlen(text) };
	put(b, &e, sizeof(e));
	put(b, text, e.length);
}

static struct buf payload_of(const struct spec *s)
{
	struct buf b = { 0 };
	uint32_t n = 3 + (s->with_bytes ? 256 : 0) + s->n_toks;
	struct bn_vocab_head h = { .magic = BN_VOCAB_MAGIC, .kind = s->kind, .n_tokens = n,
				   .bos_id = 1, .eos_id = 2, .unk_id = s->unk_id, .add_bos = 1 };
	put(&b, &h, sizeof(h));
	put_entry(&b, "<unk>", 0, 2);
	put_entry(&b, "<s>", 0, 3);
	put_entry(&b, "</s>", 0, 3);
	for (uint32_t i = 0; s->with_bytes && i < 256; i++) {
		char t[8];
		snprintf(t, sizeof(t), "<0x%02X>", i);
		put_entry(&b, t, 0, 6);
	}
	for (uint32_t i = 0; i < s->n_toks; i++)
		put_entry(&b, s->toks[i].text, s->toks[i].score, s->toks[i].type);
	return b;
}

static struct bn_vocab *vocab_of(const struct spec *s)
{
	struct buf b = payload_of(s);
	struct bn_vocab *v = NULL;
	ck_assert_int_eq(bn_vocab_from_payload(b.p, b.n, &v), 0);
	free(b.p);
	return v;
}

/* Encodes text (no BOS) and compares with the expected ids. */
static void expect_ids(const struct bn_vocab *v, const char *text, size_t len,
		       const uint32_t *want, int n_want)
{
	uint32_t got[64];
	int n = bn_tokenize(v, text, len, 0, got, 64);
	ck_assert_msg(n == n_want, "'%s': %d ids, want %d", text, n, n_want);
	for (int i = 0; i < n; i++)
		ck_assert_msg(got[i] == want[i], "'%s': id %d is %u, want %u", text, i, got[i],
			      want[i]);
}
#define EXPECT(v, text, ...)                                                                   \
	do {                                                                                   \
		static const uint32_t want_[] = { __VA_ARGS__ };                               \
		expect_ids(v, text, sizeof(text) - 1, want_, (int)(sizeof(want_) / 4));       \
	} while (0)

/* ------------------------------------------------------------------------------------------ */
/* Encoding on the toy vocabulary                                                              */
/* ------------------------------------------------------------------------------------------ */

/* "▁ab": the candidates ▁+a ("▁a", -2) and a+b ("ab", -1): the better score merges first and
 * leaves no candidate ("▁ab" is no token). For "▁cd" the scores are the other way round. */
START_TEST(higher_score_merges_first)
{
	struct bn_vocab *v = vocab_of(&toy);
	EXPECT(v, "ab", T_W, T_AB);
	EXPECT(v, "cd", T_WC, T_D);
	bn_vocab_free(v);
}
END_TEST

/* "▁aaa": a+a twice with the same score (-1, better than ▁+a at -2): the leftmost pair
 * merges, which leaves ▁+a stale; "▁aa" and "aaa" are no tokens, so [▁, aa, a]. (Rightmost
 * first would give [▁, a, aa], then ▁+a: [▁a, aa].) */
START_TEST(equal_scores_leftmost_first)
{
	struct bn_vocab *v = vocab_of(&toy);
	EXPECT(v, "aaa", T_W, T_AA, T_A);
	bn_vocab_free(v);
}
END_TEST

/* " a  b" -> "▁▁a▁▁b". Candidates: ▁▁ (-5) at 0, ▁a (-2) at 1, ▁▁ (-5) at 3. ▁a merges first,
 * which makes the candidate ▁▁ at 0 stale (its right side grew); then ▁▁ at 3 merges:
 * [▁, ▁a, ▁▁, b]. Decoding with the leading space stripped gives the text back. */
START_TEST(spaces_and_stale_candidates)
{
	struct bn_vocab *v = vocab_of(&toy);
	EXPECT(v, " a  b", T_W, T_WA, T_WW, T_B);
	uint32_t ids[] = { T_W, T_WA, T_WW, T_B };
	char text[32];
	ck_assert_int_eq(bn_detokenize(v, ids, 4, 1, text, sizeof(text)), 5);
	ck_assert_str_eq(text, " a  b");
	EXPECT(v, " ", T_WW);
	bn_vocab_free(v);
}
END_TEST

START_TEST(utf8_characters_are_symbols)
{
	struct bn_vocab *v = vocab_of(&toy);
	EXPECT(v, "\xc3\xa9", T_WE_ACUTE);          /* é: ▁ + é merge into the token "▁é" */
	EXPECT(v, "\xc3\xbc", T_W, T_U_UML);        /* ü: a token of its own */
	EXPECT(v, "\xc3\xbc" "a", T_W, T_U_UML, T_A);
	bn_vocab_free(v);
}
END_TEST

/* What is no token is spelled in byte tokens; invalid UTF-8 is taken byte by byte. */
START_TEST(byte_fallback)
{
	struct bn_vocab *v = vocab_of(&toy);
	EXPECT(v, "\xc3\xb1", T_W, BYTE(0xc3), BYTE(0xb1));                     /* ñ */
	EXPECT(v, "\xe2\x82\xac", T_W, BYTE(0xe2), BYTE(0x82), BYTE(0xac));     /* € */
	EXPECT(v, "\xf0\x9f\x98\x80", T_W, BYTE(0xf0), BYTE(0x9f), BYTE(0x98), BYTE(0x80));
	EXPECT(v, "\n", T_W, BYTE('\n'));
	EXPECT(v, "a\xc3", T_WA, BYTE(0xc3));       /* a lead byte at the end */
	EXPECT(v, "\xc3(", T_W, BYTE(0xc3), BYTE('('));  /* a lead byte without continuation */
	EXPECT(v, "\xa9", T_W, BYTE(0xa9));         /* a lone continuation byte */
	EXPECT(v, "\xff" "ab", T_W, BYTE(0xff), T_AB);
	static const char nul[] = { 'a', 0, 'b' };
	static const uint32_t want[] = { T_WA, BYTE(0), T_B };
	expect_ids(v, nul, 3, want, 3);
	bn_vocab_free(v);
}
END_TEST

START_TEST(unknown_without_byte_tokens)
{
	struct bn_vocab *v = vocab_of(&small);
	EXPECT(v, "x\xc3\xb1", 5, 0); /* [▁x, <unk>]: ñ is no token and has no byte tokens */
	EXPECT(v, "x", 5);
	bn_vocab_free(v);
	v = vocab_of(&small_no_unk);
	uint32_t out[8];
	ck_assert_int_eq(bn_tokenize(v, "x\xc3\xb1", 4, 0, out, 8), -BN_E_TOKEN);
	ck_assert_int_eq(bn_tokenize(v, "x x", 3, 0, out, 8), 2);
	bn_vocab_free(v);
}
END_TEST

START_TEST(empty_text_bos_and_cap)
{
	struct bn_vocab *v = vocab_of(&toy);
	uint32_t out[8] = { 0 };
	ck_assert_int_eq(bn_tokenize(v, "", 0, 0, out, 8), 0);
	ck_assert_int_eq(bn_tokenize(v, NULL, 0, 0, NULL, 0), 0);
	ck_assert_int_eq(bn_tokenize(v, "", 0, 1, out, 8), 1);
	ck_assert_uint_eq(out[0], 1);
	ck_assert_int_eq(bn_tokenize(v, "ab", 2, 1, out, 8), 3);
	ck_assert_uint_eq(out[0], 1);
	ck_assert_uint_eq(out[1], T_W);
	ck_assert_uint_eq(out[2], T_AB);
	/* Too small a buffer: the full count, and only cap ids written. */
	uint32_t few[3] = { 77, 77, 77 };
	ck_assert_int_eq(bn_tokenize(v, "aaa", 3, 0, few, 1), 3);
	ck_assert_uint_eq(few[0], T_W);
	ck_assert_uint_eq(few[1], 77);
	ck_assert_int_eq(bn_tokenize(v, "aaa", 3, 1, NULL, 0), 4);
	ck_assert_int_eq(bn_tokenize(v, NULL, 1, 0, out, 8), -BN_E_INVALID);
	ck_assert_int_eq(bn_tokenize(v, "a", 1, 0, NULL, 8), -BN_E_INVALID);
	bn_vocab_free(v);
}
END_TEST

START_TEST(other_vocabularies_do_not_encode)
{
	struct bn_vocab *v = vocab_of(&toy_other);
	uint32_t out[8];
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_OTHER);
	ck_assert_int_eq(bn_tokenize(v, "ab", 2, 0, out, 8), -BN_E_INVALID);
	uint32_t ids[] = { T_WA, T_B };
	char text[16];
	ck_assert_int_eq(bn_detokenize(v, ids, 2, 0, text, sizeof(text)), 3);
	ck_assert_str_eq(text, " ab");
	bn_vocab_free(v);
}
END_TEST

START_TEST(accessors)
{
	struct bn_vocab *v = vocab_of(&toy);
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_SPM);
	ck_assert_uint_eq(bn_vocab_n_tokens(v), T_U_UML + 1);
	ck_assert_uint_eq(bn_vocab_bos_id(v), 1);
	ck_assert_uint_eq(bn_vocab_eos_id(v), 2);
	ck_assert_uint_eq(bn_vocab_unk_id(v), 0);
	ck_assert_int_eq(bn_vocab_add_bos(v), 1);
	size_t len = 0;
	const char *t = bn_vocab_token_text(v, T_WA, &len);
	ck_assert_uint_eq(len, 4);
	ck_assert_int_eq(memcmp(t, W "a", 4), 0);
	t = bn_vocab_token_text(v, BYTE(0x41), &len);
	ck_assert_int_eq(memcmp(t, "<0x41>", 6), 0);
	ck_assert_ptr_null(bn_vocab_token_text(v, T_U_UML + 1, &len));
	bn_vocab_free(v);
	bn_vocab_free(NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                    */
/* ------------------------------------------------------------------------------------------ */

START_TEST(decode_pieces)
{
	struct bn_vocab *v = vocab_of(&toy);
	char text[32];
	uint32_t ids[] = { 1, T_WA, T_AB, 2 }; /* control tokens decode to nothing */
	ck_assert_int_eq(bn_detokenize(v, ids, 4, 0, text, sizeof(text)), 4);
	ck_assert_str_eq(text, " aab");
	ck_assert_int_eq(bn_detokenize(v, ids, 4, 1, text, sizeof(text)), 3);
	ck_assert_str_eq(text, "aab");
	uint32_t bytes[] = { BYTE(0xc3), BYTE(0xa9), BYTE('!') };
	ck_assert_int_eq(bn_detokenize(v, bytes, 3, 1, text, sizeof(text)), 3);
	ck_assert_str_eq(text, "\xc3\xa9!");
	uint32_t unk[] = { T_A, 0 };
	ck_assert_int_eq(bn_detokenize(v, unk, 2, 0, text, sizeof(text)), 6);
	ck_assert_str_eq(text, "a \xe2\x81\x87 ");
	/* Only one leading space goes. */
	uint32_t two[] = { T_W, T_W };
	ck_assert_int_eq(bn_detokenize(v, two, 2, 1, text, sizeof(text)), 1);
	ck_assert_str_eq(text, " ");
	ck_assert_int_eq(bn_detokenize(v, NULL, 0, 1, text, sizeof(text)), 0);
	ck_assert_str_eq(text, "");
	bn_vocab_free(v);
}
END_TEST

START_TEST(decode_like_snprintf)
{
	struct bn_vocab *v = vocab_of(&toy);
	uint32_t ids[] = { T_WA, T_AB };
	char text[8];
	memset(text, 'z', sizeof(text));
	ck_assert_int_eq(bn_detokenize(v, ids, 2, 0, text, 3), 4);
	ck_assert_str_eq(text, " a");
	ck_assert_int_eq(text[3], 'z');
	ck_assert_int_eq(bn_detokenize(v, ids, 2, 0, NULL, 0), 4);
	ck_assert_int_eq(bn_detokenize(v, ids, 2, 0, text, 1), 4);
	ck_assert_str_eq(text, "");
	uint32_t bad[] = { T_A, T_U_UML + 1 };
	ck_assert_int_eq(bn_detokenize(v, bad, 2, 0, text, sizeof(text)), -BN_E_TOKEN);
	ck_assert_str_eq(text, "");
	ck_assert_int_eq(bn_detokenize(v, ids, 2, 0, NULL, 4), -BN_E_INVALID);
	bn_vocab_free(v);
}
END_TEST

/* Any bytes: decode(encode(text)) with the leading space stripped is the text. */
START_TEST(random_bytes_round_trip)
{
	static const char *const pieces[] = { "a", "b", "c", "d", " ", "  ", "\xc3\xa9", "\xc3\xbc",
					      "\xc3\xb1", "\n", "\xe2\x82\xac", "\xff", "\xc3",
					      "\x80", "ab", "aa", "\t" };
	struct bn_vocab *v = vocab_of(&toy);
	uint32_t x = 12345, ids[512];
	char text[256], back[512];
	for (int round = 0; round < 2000; round++) {
		size_t len = 0;
		for (int k = (int)((x = x * 1664525u + 1013904223u) >> 28); k >= 0; k--) {
			x = x * 1664525u + 1013904223u;
			const char *p = pieces[(x >> 16) % (sizeof(pieces) / sizeof(pieces[0]))];
			if (round % 2) { /* every other round: raw random bytes */
				text[len++] = (char)(x >> 8);
				continue;
			}
			memcpy(text + len, p, strlen(p));
			len += strlen(p);
		}
		int n = bn_tokenize(v, text, len, 0, ids, 512);
		ck_assert_int_gt(n, 0);
		int m = bn_detokenize(v, ids, (uint32_t)n, 1, back, sizeof(back));
		ck_assert_msg(m == (int)len && memcmp(back, text, len) == 0,
			      "round %d: %zu bytes in, %d out", round, len, m);
	}
	bn_vocab_free(v);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Payload checks                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* Parses from an allocation of exactly n bytes, so ASan sees any read past the end. */
static int parse_exact(const uint8_t *p, size_t n)
{
	uint8_t *copy = malloc(n ? n : 1);
	memcpy(copy, p, n);
	struct bn_vocab *v = NULL;
	int rc = bn_vocab_from_payload(copy, n, &v);
	if (rc == 0) {
		uint32_t ids[64];
		char text[256];
		bn_tokenize(v, "ab c\xc3\xa9", 6, 1, ids, 64);
		uint32_t some[] = { 0, 1, 2, bn_vocab_n_tokens(v) - 1 };
		bn_detokenize(v, some, 4, 1, text, sizeof(text));
		bn_vocab_free(v);
	}
	free(copy);
	return rc;
}

START_TEST(every_truncation_is_refused)
{
	struct buf b = payload_of(&toy);
	ck_assert_int_eq(parse_exact(b.p, b.n), 0);
	for (size_t n = 0; n < b.n; n++)
		ck_assert_msg(parse_exact(b.p, n) == -BN_E_PROTOCOL, "a payload cut to %zu bytes", n);
	free(b.p);
}
END_TEST

static void patch32(struct buf *b, size_t at, uint32_t v)
{
	memcpy(b->p + at, &v, 4);
}

/* One corruption of the small payload: <unk> <s> </s> ▁ x ▁x; the first entry at 32. */
static int corrupted(size_t at, uint32_t value)
{
	struct buf b = payload_of(&small);
	patch32(&b, at, value);
	int rc = parse_exact(b.p, b.n);
	free(b.p);
	return rc;
}

START_TEST(corruptions_are_refused)
{
	const size_t E0 = sizeof(struct bn_vocab_head); /* entry 0: score, type, length */
	ck_assert_int_eq(corrupted(0, 0x12345678), -BN_E_PROTOCOL);        /* magic */
	ck_assert_int_eq(corrupted(4, 0), -BN_E_PROTOCOL);                 /* kind */
	ck_assert_int_eq(corrupted(4, 3), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(8, 0), -BN_E_PROTOCOL);                 /* n_tokens */
	ck_assert_int_eq(corrupted(8, 7), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(8, 5), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(8, 0xfffffffe), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(8, NONE), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(12, 6), -BN_E_PROTOCOL);                /* bos_id */
	ck_assert_int_eq(corrupted(16, 6), -BN_E_PROTOCOL);                /* eos_id */
	ck_assert_int_eq(corrupted(20, 6), -BN_E_PROTOCOL);                /* unk_id */
	ck_assert_int_eq(corrupted(24, 2), -BN_E_PROTOCOL);                /* add_bos */
	ck_assert_int_eq(corrupted(E0 + 4, 7), -BN_E_PROTOCOL);            /* type */
	ck_assert_int_eq(corrupted(E0, 0x7fc00000), -BN_E_PROTOCOL);       /* score NaN */
	ck_assert_int_eq(corrupted(E0 + 8, 6), -BN_E_PROTOCOL);            /* length too long */
	ck_assert_int_eq(corrupted(E0 + 8, 1000), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(E0 + 8, NONE), -BN_E_PROTOCOL);
	ck_assert_int_eq(corrupted(E0 + 8, 0x80000000u), -BN_E_PROTOCOL);
	/* Absent ids and unknown flag bits are fine. */
	ck_assert_int_eq(corrupted(12, NONE), 0);
	ck_assert_int_eq(corrupted(28, 99), 0);
	/* A byte more than the entries take. */
	struct buf b = payload_of(&small);
	put(&b, "", 1);
	ck_assert_int_eq(parse_exact(b.p, b.n), -BN_E_PROTOCOL);
	free(b.p);
	struct bn_vocab *v;
	ck_assert_int_eq(bn_vocab_from_payload(NULL, 10, &v), -BN_E_INVALID);
}
END_TEST

START_TEST(random_mutations_stay_in_bounds)
{
	struct buf b = payload_of(&toy);
	uint8_t *m = malloc(b.n);
	uint32_t x = 99, ok = 0;
	for (int round = 0; round < 3000; round++) {
		memcpy(m, b.p, b.n);
		for (int k = 0; k < 1 + round % 3; k++) {
			x = x * 1664525u + 1013904223u;
			/* Mostly the head and the first entries, where the lengths are. */
			size_t at = round % 2 ? (x >> 8) % 96 : (x >> 8) % b.n;
			m[at] ^= (uint8_t)(1u << ((x >> 4) % 8));
		}
		int rc = parse_exact(m, b.n);
		ck_assert_msg(rc == 0 || rc == -BN_E_PROTOCOL, "round %d: %d", round, rc);
		ok += rc == 0;
	}
	ck_assert_uint_gt(ok, 0); /* a flipped score bit or text byte is still a vocabulary */
	free(m);
	free(b.p);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The daemon's payload (daemon/model/vocab.c) from GGUF metadata                                    */
/* ------------------------------------------------------------------------------------------ */

static const char *const gg_tokens[] = { "<unk>", "<s>", "</s>", "<0x41>", W "hi", "hi" };
static const float gg_scores[] = { 0, 0, 0, 0, -1.5f, -2 };
static const int32_t gg_types[] = { 2, 3, 3, 6, 1, 1 };
#define GG_N 6

enum gg_part {
	GG_TOKENS = 1 << 0, GG_SCORES = 1 << 1, GG_TYPES = 1 << 2, GG_MODEL = 1 << 3, GG_IDS = 1 << 4,
	GG_ALL = 31,
};

static struct bn_gguf_writer *gg_writer(unsigned parts)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_eq(bn_gguf_add_str(w, "general.name", "t"), 0);
	if (parts & GG_MODEL)
		ck_assert_int_eq(bn_gguf_add_str(w, "tokenizer.ggml.model", "llama"), 0);
	if (parts & GG_TOKENS)
		ck_assert_int_eq(bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", gg_tokens, GG_N), 0);
	if (parts & GG_SCORES)
		ck_assert_int_eq(bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", gg_scores, GG_N), 0);
	if (parts & GG_TYPES)
		ck_assert_int_eq(bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", gg_types, GG_N), 0);
	if (parts & GG_IDS) {
		ck_assert_int_eq(bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 1), 0);
		ck_assert_int_eq(bn_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 2), 0);
		ck_assert_int_eq(bn_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 0), 0);
	}
	return w;
}

/* Builds the payload of the writer's file; returns bn_vocab_payload_build's result. */
static int gg_build(struct bn_gguf_writer *w, uint8_t **payload, size_t *size, char *err)
{
	uint8_t *file;
	size_t file_size;
	ck_assert_int_eq(bn_gguf_write_mem(w, &file, &file_size), 0);
	bn_gguf_writer_free(w);
	struct bn_gguf g;
	char gerr[BN_GGUF_ERR_LEN];
	ck_assert_msg(bn_gguf_parse(&g, file, file_size, "t.gguf", gerr) == 0, "%s", gerr);
	struct bn_vocab_built built;
	int rc = bn_vocab_payload_build(&g, NULL, &built, err);
	*payload = built.payload;
	*size = built.size;
	bn_gguf_close(&g);
	free(file);
	return rc;
}

static struct bn_vocab *gg_vocab(struct bn_gguf_writer *w)
{
	uint8_t *p;
	size_t n;
	char err[BN_VOCAB_ERR_LEN];
	ck_assert_msg(gg_build(w, &p, &n, err) == 1, "%s", err);
	struct bn_vocab *v;
	ck_assert_int_eq(parse_exact(p, n), 0);
	ck_assert_int_eq(bn_vocab_from_payload(p, n, &v), 0);
	free(p);
	return v;
}

START_TEST(daemon_payload_from_gguf)
{
	struct bn_vocab *v = gg_vocab(gg_writer(GG_ALL));
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_SPM);
	ck_assert_uint_eq(bn_vocab_n_tokens(v), GG_N);
	ck_assert_uint_eq(bn_vocab_bos_id(v), 1);
	ck_assert_uint_eq(bn_vocab_eos_id(v), 2);
	ck_assert_uint_eq(bn_vocab_unk_id(v), 0);
	ck_assert_int_eq(bn_vocab_add_bos(v), 1);
	ck_assert_int_eq(bn_vocab_add_eos(v), 0); /* no tokenizer.ggml.add_eos_token: none */
	for (uint32_t i = 0; i < GG_N; i++) {
		size_t len;
		const char *t = bn_vocab_token_text(v, i, &len);
		ck_assert_uint_eq(len, strlen(gg_tokens[i]));
		ck_assert_int_eq(memcmp(t, gg_tokens[i], len), 0);
	}
	/* Scores and types made it: "▁hi" (-1.5) beats "hi" (-2), <0x41> is the byte 'A'. */
	uint32_t ids[8];
	ck_assert_int_eq(bn_tokenize(v, "hi", 2, 1, ids, 8), 2);
	ck_assert_uint_eq(ids[1], 4);
	uint32_t a = 3;
	char text[8];
	ck_assert_int_eq(bn_detokenize(v, &a, 1, 0, text, sizeof(text)), 1);
	ck_assert_str_eq(text, "A");
	bn_vocab_free(v);
}
END_TEST

START_TEST(daemon_payload_defaults)
{
	struct bn_vocab *v = gg_vocab(gg_writer(GG_TOKENS));
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_OTHER); /* no tokenizer.ggml.model */
	ck_assert_uint_eq(bn_vocab_bos_id(v), NONE);
	ck_assert_uint_eq(bn_vocab_eos_id(v), NONE);
	ck_assert_uint_eq(bn_vocab_unk_id(v), NONE);
	ck_assert_int_eq(bn_vocab_add_bos(v), 1);
	/* Type 1 everywhere: "<s>" decodes as text. */
	uint32_t s = 1;
	char text[8];
	ck_assert_int_eq(bn_detokenize(v, &s, 1, 0, text, sizeof(text)), 3);
	bn_vocab_free(v);

	struct bn_gguf_writer *w = gg_writer(GG_TOKENS);
	ck_assert_int_eq(bn_gguf_add_str(w, "tokenizer.ggml.model", "bert"), 0);
	ck_assert_int_eq(bn_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", 0), 0);
	ck_assert_int_eq(bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", UINT32_MAX), 0);
	v = gg_vocab(w);
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_OTHER);
	ck_assert_int_eq(bn_vocab_add_bos(v), 0);
	ck_assert_uint_eq(bn_vocab_bos_id(v), NONE);
	bn_vocab_free(v);

	uint8_t *p = (uint8_t *)1;
	size_t n = 1;
	char err[BN_VOCAB_ERR_LEN];
	ck_assert_int_eq(gg_build(gg_writer(GG_SCORES | GG_MODEL), &p, &n, err), 0);
	ck_assert_ptr_null(p);
	ck_assert_uint_eq(n, 0);
}
END_TEST

/* The payload's flags word (offset 28) of a file that says add_eos_token, or not (-1). */
static uint32_t gg_head_flags(int add_eos)
{
	struct bn_gguf_writer *w = gg_writer(GG_ALL);
	if (add_eos >= 0)
		ck_assert_int_eq(bn_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", add_eos), 0);
	uint8_t *p;
	size_t n;
	char err[BN_VOCAB_ERR_LEN];
	ck_assert_msg(gg_build(w, &p, &n, err) == 1, "%s", err);
	uint32_t flags;
	memcpy(&flags, p + 28, 4);
	free(p);
	return flags;
}

/* tokenizer.ggml.add_eos_token: true sets the head's ADD_EOS bit (and nothing else), false or
 * absent leaves the word 0; the library reads it, and BN_TOK_ADD_EOS puts eos_id (2) last:
 * after the text, after a special token, alone for empty text, after BOS. */
START_TEST(daemon_payload_add_eos)
{
	ck_assert_uint_eq(gg_head_flags(1), BN_VOCAB_HEAD_ADD_EOS);
	ck_assert_uint_eq(gg_head_flags(0), 0);
	ck_assert_uint_eq(gg_head_flags(-1), 0);
	struct bn_gguf_writer *w = gg_writer(GG_ALL);
	ck_assert_int_eq(bn_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", 1), 0);
	struct bn_vocab *v = gg_vocab(w);
	ck_assert_int_eq(bn_vocab_add_eos(v), 1);
	ck_assert_int_eq(bn_vocab_add_bos(v), 1);
	uint32_t ids[8];
	ck_assert_int_eq(bn_tokenize_ex(v, "hi", 2, BN_TOK_ADD_BOS | BN_TOK_ADD_EOS, ids, 8), 3);
	ck_assert_uint_eq(ids[0], 1);
	ck_assert_uint_eq(ids[1], 4);
	ck_assert_uint_eq(ids[2], 2);
	ck_assert_int_eq(bn_tokenize_ex(v, "hi", 2, BN_TOK_ADD_EOS, ids, 8), 2);
	ck_assert_uint_eq(ids[0], 4);
	ck_assert_uint_eq(ids[1], 2);
	uint32_t special = BN_TOK_ADD_EOS | BN_TOK_PARSE_SPECIAL;
	ck_assert_int_eq(bn_tokenize_ex(v, "hi<s>", 5, special, ids, 8), 3);
	ck_assert_uint_eq(ids[1], 1);
	ck_assert_uint_eq(ids[2], 2);
	ck_assert_int_eq(bn_tokenize_ex(v, "", 0, BN_TOK_ADD_EOS, ids, 8), 1);
	ck_assert_uint_eq(ids[0], 2);
	/* Counted when it does not fit, and only on request. */
	ck_assert_int_eq(bn_tokenize_ex(v, "hi", 2, BN_TOK_ADD_EOS, ids, 1), 2);
	ck_assert_int_eq(bn_tokenize_ex(v, "hi", 2, 0, ids, 8), 1);
	ck_assert_int_eq(bn_tokenize_ex(v, "hi", 2, 1U << 3, ids, 8), -BN_E_INVALID);
	bn_vocab_free(v);
}
END_TEST

/* The wire's flags word: bit 0 is ADD_EOS, the other bits are ignored (the word was reserved:
 * a client must not refuse what a later daemon sets there). */
START_TEST(payload_flags_word)
{
	static const uint32_t words[] = { 0, 1, 0xfffffffe, 0xffffffff, 99 };
	for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
		struct buf b = payload_of(&small);
		patch32(&b, 28, words[k]);
		struct bn_vocab *v;
		ck_assert_int_eq(bn_vocab_from_payload(b.p, b.n, &v), 0);
		ck_assert_int_eq(bn_vocab_add_eos(v), (int)(words[k] & 1));
		bn_vocab_free(v);
		free(b.p);
	}
}
END_TEST

typedef void (*gg_mutation)(struct bn_gguf_writer *w);

static void bad_scores_len(struct bn_gguf_writer *w)
{
	bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", gg_scores, 2);
}
static void bad_scores_type(struct bn_gguf_writer *w)
{
	bn_gguf_add_arr_i32(w, "tokenizer.ggml.scores", gg_types, GG_N);
}
static void bad_scores_nan(struct bn_gguf_writer *w)
{
	float s[GG_N] = { 0, 0, 0, 0, NAN, 0 };
	bn_gguf_add_arr_f32(w, "tokenizer.ggml.scores", s, GG_N);
}
static void bad_types_len(struct bn_gguf_writer *w)
{
	bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", gg_types, GG_N - 1);
}
static void bad_types_value(struct bn_gguf_writer *w)
{
	int32_t t[GG_N] = { 2, 3, 3, 6, 9, 1 };
	bn_gguf_add_arr_i32(w, "tokenizer.ggml.token_type", t, GG_N);
}
static void bad_types_float(struct bn_gguf_writer *w)
{
	bn_gguf_add_arr_f32(w, "tokenizer.ggml.token_type", gg_scores, GG_N);
}
static void bad_bos(struct bn_gguf_writer *w)
{
	bn_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", GG_N);
}
static void bad_eos_type(struct bn_gguf_writer *w)
{
	bn_gguf_add_str(w, "tokenizer.ggml.eos_token_id", "2");
}
static void bad_unk(struct bn_gguf_writer *w)
{
	bn_gguf_add_u32(w, "tokenizer.ggml.unknown_token_id", 1000);
}
static void bad_add_bos(struct bn_gguf_writer *w)
{
	bn_gguf_add_u32(w, "tokenizer.ggml.add_bos_token", 1);
}
static void bad_add_eos(struct bn_gguf_writer *w)
{
	bn_gguf_add_str(w, "tokenizer.ggml.add_eos_token", "true");
}
static void bad_model(struct bn_gguf_writer *w)
{
	bn_gguf_add_u32(w, "tokenizer.ggml.model", 1);
}

static const struct {
	gg_mutation add;
	unsigned parts;
	const char *message;
} gg_bad[] = {
	{ bad_scores_len, GG_TOKENS, "t.gguf: tokenizer.ggml.scores has 2 elements for 6 tokens" },
	{ bad_scores_type, GG_TOKENS, "t.gguf: tokenizer.ggml.scores is not an array of f32" },
	{ bad_scores_nan, GG_TOKENS, "t.gguf: tokenizer.ggml.scores[4] is NaN" },
	{ bad_types_len, GG_TOKENS, "t.gguf: tokenizer.ggml.token_type has 5 elements for 6 tokens" },
	{ bad_types_value, GG_TOKENS, "t.gguf: tokenizer.ggml.token_type[4] is 9 (0 to 6 allowed)" },
	{ bad_types_float, GG_TOKENS, "t.gguf: tokenizer.ggml.token_type is not an array of integers" },
	{ bad_bos, GG_TOKENS, "t.gguf: tokenizer.ggml.bos_token_id 6 is not below the token count 6" },
	{ bad_eos_type, GG_TOKENS, "t.gguf: tokenizer.ggml.eos_token_id is not an unsigned 32-bit integer" },
	{ bad_unk, GG_TOKENS, "t.gguf: tokenizer.ggml.unknown_token_id 1000 is not below the token count 6" },
	{ bad_add_bos, GG_TOKENS, "t.gguf: tokenizer.ggml.add_bos_token is not a bool" },
	{ bad_add_eos, GG_TOKENS, "t.gguf: tokenizer.ggml.add_eos_token is not a bool" },
	{ bad_model, GG_TOKENS, "t.gguf: tokenizer.ggml.model is not a string" },
};

START_TEST(daemon_payload_refuses_bad_metadata)
{
	struct bn_gguf_writer *w = gg_writer(gg_bad[_i].parts);
	gg_bad[_i].add(w);
	uint8_t *p = NULL;
	size_t n;
	char err[BN_VOCAB_ERR_LEN] = "";
	ck_assert_int_eq(gg_build(w, &p, &n, err), -1);
	ck_assert_ptr_null(p);
	ck_assert_str_eq(err, gg_bad[_i].message);
}
END_TEST

START_TEST(daemon_payload_tokens_not_strings)
{
	struct bn_gguf_writer *w = bn_gguf_writer_new(3, 32);
	int32_t nums[3] = { 1, 2, 3 };
	bn_gguf_add_arr_i32(w, "tokenizer.ggml.tokens", nums, 3);
	uint8_t *p;
	size_t n;
	char err[BN_VOCAB_ERR_LEN];
	ck_assert_int_eq(gg_build(w, &p, &n, err), -1);
	ck_assert_str_eq(err, "t.gguf: tokenizer.ggml.tokens is not an array of strings");
	w = bn_gguf_writer_new(3, 32);
	bn_gguf_add_arr_str(w, "tokenizer.ggml.tokens", gg_tokens, 0);
	ck_assert_int_eq(gg_build(w, &p, &n, err), -1);
	ck_assert_str_eq(err, "t.gguf: tokenizer.ggml.tokens has 0 elements (1 to 4294967294 allowed)");
}
END_TEST

START_TEST(daemon_payload_memfd_is_sealed)
{
	static const char data[] = "payload bytes";
	int fd = bn_vocab_payload_seal(data, sizeof(data));
	ck_assert_int_ge(fd, 0);
	int seals = fcntl(fd, F_GET_SEALS);
	ck_assert_int_eq(seals, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(st.st_size, sizeof(data));
	char back[sizeof(data)];
	ck_assert_int_eq(pread(fd, back, sizeof(back), 0), sizeof(back));
	ck_assert_int_eq(memcmp(back, data, sizeof(data)), 0);
	ck_assert_int_lt(pwrite(fd, "x", 1, 0), 0);
	ck_assert_int_lt(ftruncate(fd, 1), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), -1); /* F_SEAL_SEAL */
	ck_assert_ptr_eq(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
	void *ro = mmap(NULL, sizeof(data), PROT_READ, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(ro, MAP_FAILED);
	munmap(ro, sizeof(data));
	close(fd);
}
END_TEST

START_TEST(daemon_payload_open_checks_the_model_size)
{
	struct bn_vocab_served sv;
	char err[BN_VOCAB_ERR_LEN];
	int rc = bn_vocab_serve_open(tu_default_model(), 512, NULL, &sv, err);
	ck_assert_msg(rc == 1, "%s", err);
	ck_assert_int_ge(sv.vocab_fd, 0);
	ck_assert_int_ge(sv.tokenizer_fd, 0);
	ck_assert_uint_gt(sv.vocab_bytes, 512 * sizeof(struct bn_vocab_entry));
	/* The tokenizer payload is the vocabulary's, then the extension and the one eog id. */
	ck_assert_uint_eq(sv.tokenizer_bytes, sv.vocab_bytes + sizeof(struct bn_vocab_ext) + 4);
	ck_assert_uint_eq(sv.choice.n_eog, 1);
	ck_assert_uint_eq(sv.choice.eog[0], 2);
	bn_vocab_served_close(&sv);
	ck_assert_int_eq(sv.vocab_fd, -1);
	ck_assert_int_eq(bn_vocab_serve_open(tu_default_model(), 511, NULL, &sv, err), -1);
	ck_assert_msg(strstr(err, "the vocabulary has 512 tokens, the model 511"), "%s", err);
	ck_assert_int_eq(sv.vocab_fd, -1);
	ck_assert_int_eq(sv.tokenizer_fd, -1);
	ck_assert_int_eq(bn_vocab_serve_open("/nonexistent.gguf", 0, NULL, &sv, err), -1);
}
END_TEST

static void *map_fd(int fd, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	return p;
}

/* The text side built beside the backend (textprep.h) is what bn_control_open builds alone:
 * the same payload bytes, a text service and the grammar engine's vocabulary, and the same
 * check against the model's vocabulary size. */
START_TEST(prepared_text_side_is_the_one_built_in_place)
{
	const char *path = tu_default_model();
	struct bn_model_desc model = { .kind = BN_BACKEND_CPU, .vocab_size = 512 };
	struct bn_control alone, adopted;
	bn_control_open(&alone, path, NULL, NULL, &model, NULL);
	struct bn_text_prep prep;
	bn_text_prep_start(&prep, path, NULL, NULL);
	ck_assert_int_eq(prep.state, BN_TEXT_PREP_RUNNING);
	bn_control_open(&adopted, path, NULL, NULL, &model, &prep);
	ck_assert_int_eq(prep.state, BN_TEXT_PREP_DONE);
	ck_assert_int_eq(prep.vocab.tokenizer_fd, -1); /* taken */
	ck_assert_ptr_null(prep.text.vocab);
	ck_assert_ptr_null(prep.grammar);
	bn_text_prep_free(&prep);
	ck_assert_uint_eq(adopted.vocab.tokenizer_bytes, alone.vocab.tokenizer_bytes);
	ck_assert_uint_eq(adopted.vocab.vocab_bytes, alone.vocab.vocab_bytes);
	void *a = map_fd(alone.vocab.tokenizer_fd, alone.vocab.tokenizer_bytes);
	void *b = map_fd(adopted.vocab.tokenizer_fd, adopted.vocab.tokenizer_bytes);
	ck_assert_int_eq(memcmp(a, b, alone.vocab.tokenizer_bytes), 0);
	munmap(a, alone.vocab.tokenizer_bytes);
	munmap(b, adopted.vocab.tokenizer_bytes);
	ck_assert_ptr_nonnull(adopted.text.vocab);
	ck_assert_uint_eq(adopted.text.piece_bound, alone.text.piece_bound);
	ck_assert_ptr_nonnull(adopted.grammar_vocab);
	ck_assert_ptr_null(alone.grammar_vocab); /* built by the grammar service itself */
	bn_control_close(&alone);
	bn_control_close(&adopted);
	/* A model of another vocabulary size: served without one, as bn_vocab_serve_open says. */
	model.vocab_size = 511;
	bn_text_prep_start(&prep, path, NULL, NULL);
	bn_control_open(&adopted, path, NULL, NULL, &model, &prep);
	ck_assert_int_eq(adopted.vocab.tokenizer_fd, -1);
	ck_assert_ptr_null(adopted.text.vocab);
	ck_assert_ptr_null(adopted.grammar_vocab);
	bn_control_close(&adopted);
	bn_text_prep_free(&prep);
	/* Nothing to prepare without a file (the registry gives none for the loopback backend). */
	bn_text_prep_start(&prep, NULL, NULL, NULL);
	ck_assert_int_eq(prep.state, BN_TEXT_PREP_NONE);
	bn_text_prep_free(&prep);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Through a daemon                                                                            */
/* ------------------------------------------------------------------------------------------ */

static struct bn_client *connect_or_die(const struct tu_daemon *d)
{
	struct bn_client *c = NULL;
	int rc = bn_connect(d->socket_path, 0, &c);
	ck_assert_msg(rc == 0, "connect: %s", bn_strerror(rc));
	return c;
}

/* Runs bitnet-cli --socket S args... and waits for it. */
static void run_cli(const struct tu_daemon *d, const char *const *args, struct tu_run *r)
{
	ck_assert_int_eq(tu_run_cli(d, args, NULL, 0, r), 0);
}

START_TEST(loopback_serves_no_vocabulary)
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, NULL), 0);
	struct bn_client *c = connect_or_die(&d);
	struct bn_vocab *v = NULL;
	ck_assert_int_eq(bn_vocab_fetch(c, &v), -BN_E_INVALID);
	ck_assert_ptr_null(v);
	/* The control socket is still in step: a stats reply follows. */
	char text[1 << 14];
	ck_assert_int_gt(bn_daemon_stats(c, text, sizeof(text)), 0);
	bn_disconnect(c);

	struct tu_run r;
	run_cli(&d, (const char *const[]){ "generate", "--prompt", "hi", NULL }, &r);
	ck_assert_int_eq(r.status, 1);
	ck_assert_msg(strstr(r.err, "serves no vocabulary"), "%s", r.err);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* Options are checked strictly, with a message naming the option. */
static const struct {
	const char *args[6];
	const char *message;
} cli_bad[] = {
	{ { "generate", "--ids", "1", "--prompt", "x" }, "exactly one of --ids and --prompt" },
	{ { "generate" }, "exactly one of --ids and --prompt" },
	{ { "generate", "--ids", "1", "--temperature", "abc" }, "--temperature: 'abc' is not a number in [0, 100]" },
	{ { "generate", "--ids", "1", "--temperature", "nan" }, "--temperature: 'nan'" },
	{ { "generate", "--ids", "1", "--temperature", "1e3" }, "--temperature: '1e3'" },
	{ { "generate", "--ids", "1", "--top-p", "1.5" }, "--top-p: '1.5' is not a number in [0, 1]" },
	{ { "generate", "--ids", "1", "--min-p", "0.5x" }, "--min-p: '0.5x'" },
	{ { "generate", "--ids", "1", "--presence-penalty", "-101" }, "--presence-penalty: '-101'" },
	{ { "generate", "--ids", "1", "--top-k", "-1" }, "--top-k: '-1' is not a whole number" },
	{ { "generate", "--ids", "1", "--top-k", "4294967296" }, "--top-k: '4294967296'" },
	{ { "generate", "--ids", "1", "--seed", "-1" }, "--seed: '-1' is not a whole number" },
	{ { "generate", "--ids", "1", "--seed", "18446744073709551616" }, "--seed: '18446744073709551616'" },
	{ { "generate", "--ids", "1", "--stop-ids", "1,x" }, "--stop-ids: '1,x'" },
	{ { "generate", "--ids", "1", "--logprobs", "" }, "--logprobs: ''" },
	{ { "generate", "--ids", "1", "--max-tokens", "0" }, "--max-tokens must be at least 1" },
	{ { "generate", "--ids", "1", "--print-ids" }, "--print-ids goes with --prompt" },
	{ { "generate", "--ids", "1 2x" }, "--ids needs token ids" },
};

START_TEST(cli_refuses_bad_options)
{
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, NULL), 0);
	for (size_t i = 0; i < sizeof(cli_bad) / sizeof(cli_bad[0]); i++) {
		struct tu_run r;
		run_cli(&d, cli_bad[i].args, &r);
		ck_assert_msg(r.status == 2, "case %zu: exit %d (%s)", i, r.status, r.err);
		ck_assert_msg(strstr(r.err, cli_bad[i].message), "case %zu: '%s'", i, r.err);
		ck_assert_str_eq(r.out, "");
	}
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A text request (bn_submit_text) runs as its ids computed here (bn_tokenize_ex on the
 * fetched vocabulary), and its text out is what a local stream decoder makes of its ids. */
START_TEST(text_request_equals_local_tokenizer)
{
	const char *args[] = { "--backend", "cpu", "--model", tu_default_model(), NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_or_die(&d);
	const struct bn_vocab *v;
	ck_assert_int_eq(bn_client_vocab(c, &v), 0);
	static const char *const texts[] = { "Once upon a time", "caf\xc3\xa9 \xf0\x9f\x99\x82!",
					     "  two  spaces\n", "x" };
	for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
		uint32_t ids[64], a[24], b[24], prompt_tokens = 0;
		int n = bn_tokenize_ex(v, texts[k], strlen(texts[k]), BN_TOK_ADD_BOS, ids, 64);
		ck_assert_int_gt(n, 0);
		struct bn_request by_text = { .max_tokens = 24,
					      .flags = BN_REQ_IGNORE_EOS | BN_REQ_TEXT_OUT };
		struct bn_request by_ids = { .prompt = ids, .n_prompt = (uint32_t)n, .max_tokens = 24,
					     .flags = BN_REQ_IGNORE_EOS };
		struct bn_handle *h;
		struct bn_result res;
		ck_assert_int_eq(bn_submit_text(c, &by_text, texts[k], strlen(texts[k]), &h), 0);
		ck_assert_int_eq(tu_wait(h, 30 * 1000000000LL), 0);
		ck_assert_int_eq(bn_result(h, &res), 0);
		ck_assert_int_eq(bn_read_tokens(h, 0, a, 24), 24);
		char text[24 * 64];
		int len = bn_read_text(h, 0, text, sizeof(text), &prompt_tokens);
		ck_assert_int_ge(len, 0);
		ck_assert_uint_eq(prompt_tokens, (uint32_t)n);
		bn_release(h);
		ck_assert_int_eq(bn_generate(c, &by_ids, b, 24, &res, tu_scaled_ns(30 * SECOND)), 0);
		ck_assert_uint_eq(res.n_tokens, 24);
		ck_assert_mem_eq(a, b, sizeof(a));
		/* The local stream decoder's text of the same ids. */
		struct bn_text_stream *st;
		const char *piece;
		size_t piece_len, at = 0;
		char want[24 * 64];
		ck_assert_int_eq(bn_text_stream_new(v, 0, &st), 0);
		for (int i = 0; i < 24; i++) {
			ck_assert_int_eq(bn_text_stream_push(st, &a[i], 1, &piece, &piece_len), 0);
			memcpy(want + at, piece, piece_len);
			at += piece_len;
		}
		ck_assert_int_eq(bn_text_stream_finish(st, &piece, &piece_len), 0);
		memcpy(want + at, piece, piece_len);
		at += piece_len;
		bn_text_stream_free(st);
		ck_assert_uint_eq((size_t)len, at);
		ck_assert_mem_eq(text, want, at);
	}
	/* Ids prompts cannot claim to be text. */
	uint32_t one = 1;
	struct bn_request bad = { .prompt = &one, .n_prompt = 1, .max_tokens = 1, .flags = BN_REQ_TEXT };
	struct bn_handle *h;
	ck_assert_int_eq(bn_submit(c, &bad, &h), -BN_E_INVALID);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* The tiny default model's vocabulary (the model tool's) through the daemon equals the one
 * the daemon's code builds from the file here. */
START_TEST(vocabulary_through_the_daemon)
{
	const char *args[] = { "--backend", "cpu", "--model", tu_default_model(), NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_or_die(&d);
	struct bn_vocab *v = NULL, *again = NULL;
	ck_assert_int_eq(bn_vocab_fetch(c, &v), 0);
	ck_assert_int_eq(bn_vocab_fetch(c, &again), 0);
	struct bn_vocab *local = tu_file_vocab(tu_default_model());
	/* What a client older than BN_CTL_TOKENIZER asks for: the same tokens. */
	struct bn_ctl_reply r;
	int fd = -1;
	ck_assert_int_eq(bn_client_ctl(c, BN_CTL_VOCAB, &r, &fd), 0);
	ck_assert_uint_eq(r.error, 0);
	ck_assert_int_ge(fd, 0);
	void *p = mmap(NULL, r.length, PROT_READ, MAP_PRIVATE, fd, 0);
	struct bn_vocab *legacy;
	ck_assert_int_eq(parse_exact(p, r.length), 0);
	ck_assert_int_eq(bn_vocab_from_payload(p, r.length, &legacy), 0);
	munmap(p, r.length);
	close(fd);
	ck_assert_uint_eq(bn_vocab_n_tokens(legacy), 512);
	ck_assert_uint_eq(bn_vocab_kind(legacy), BN_VOCAB_SPM);
	bn_vocab_free(legacy);
	ck_assert_uint_eq(bn_vocab_n_tokens(v), 512);
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_SPM);
	ck_assert_uint_eq(bn_vocab_bos_id(v), 1);
	ck_assert_uint_eq(bn_vocab_eos_id(v), 2);
	for (uint32_t i = 0; i < 512; i++) {
		size_t a, b, e;
		const char *ta = bn_vocab_token_text(v, i, &a), *tb = bn_vocab_token_text(local, i, &b);
		const char *te = bn_vocab_token_text(again, i, &e);
		ck_assert(a == b && a == e && memcmp(ta, tb, a) == 0 && memcmp(ta, te, a) == 0);
	}
	/* The model tool's pieces are syllables: a text of them encodes and decodes back. */
	const char *text = "tana sene tatata";
	uint32_t ids[64];
	char back[64];
	int n = bn_tokenize(v, text, strlen(text), 1, ids, 64);
	ck_assert_int_gt(n, 1);
	ck_assert_int_eq(bn_detokenize(v, ids, (uint32_t)n, 1, back, sizeof(back)), (int)strlen(text));
	ck_assert_str_eq(back, text);
	char stats[1 << 14];
	ck_assert_int_gt(bn_daemon_stats(c, stats, sizeof(stats)), 0);
	bn_vocab_free(v);
	bn_vocab_free(again);
	bn_vocab_free(local);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* A model whose tokenizer metadata fails a check (scores stored as i32: same size, so the file
 * still parses) loads and serves, without a vocabulary. */
START_TEST(malformed_tokenizer_is_served_without_vocabulary)
{
	FILE *in = fopen(tu_default_model(), "rb");
	ck_assert_ptr_nonnull(in);
	static uint8_t file[8 << 20];
	size_t size = fread(file, 1, sizeof(file), in);
	fclose(in);
	ck_assert_uint_lt(size, sizeof(file));
	static const char key[] = "tokenizer.ggml.scores";
	uint8_t *at = memmem(file, size, key, sizeof(key) - 1);
	ck_assert_ptr_nonnull(at);
	at += sizeof(key) - 1; /* then: u32 ARRAY, u32 element type, u64 count */
	uint32_t words[2];
	memcpy(words, at, sizeof(words));
	ck_assert_uint_eq(words[0], BN_GGUF_ARRAY);
	ck_assert_uint_eq(words[1], BN_GGUF_FLOAT32);
	words[1] = BN_GGUF_INT32;
	memcpy(at, words, sizeof(words));
	char path[] = "/tmp/bn-vocab-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, file, size), (ssize_t)size);
	close(fd);

	char err[BN_VOCAB_ERR_LEN];
	struct bn_vocab_served sv;
	ck_assert_int_eq(bn_vocab_serve_open(path, 0, NULL, &sv, err), -1);
	ck_assert_msg(strstr(err, "tokenizer.ggml.scores is not an array of f32"), "%s", err);
	const char *args[] = { "--backend", "cpu", "--model", path, "--log-level", "error", NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_or_die(&d);
	struct bn_vocab *v = NULL;
	ck_assert_int_eq(bn_vocab_fetch(c, &v), -BN_E_INVALID);
	uint32_t prompt[] = { 1, 300 }, out[4];
	struct bn_request req = { .prompt = prompt, .n_prompt = 2, .max_tokens = 4,
				  .flags = BN_REQ_IGNORE_EOS };
	ck_assert_int_eq(bn_generate(c, &req, out, 4, NULL, tu_scaled_ns(30 * SECOND)), 0);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	unlink(path);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The real test model                                                                         */
/* ------------------------------------------------------------------------------------------ */

static struct bn_vocab *stories_vocab(void)
{
	return tu_file_vocab(stories_path);
}

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);
	return n >= k && strcmp(s + n - k, tail) == 0;
}

/* Decoding the README's ids gives its text. Encoding that text gives the same 200 ids: greedy
 * decoding picks, at every step, a piece that SentencePiece's merges would also have built,
 * because a model trained on SentencePiece's output has only ever seen canonical pieces (the
 * ids could differ if the model chose e.g. "▁" then "he" where the encoder makes "▁he"; for
 * these 200 they do not). Encode(decode(ids)) == ids is therefore checked for this text, and
 * decode(encode(text)) == text, which holds for every text, besides. */
START_TEST(stories_known_ids_round_trip)
{
	struct bn_vocab *v = stories_vocab();
	ck_assert_uint_eq(bn_vocab_kind(v), BN_VOCAB_SPM);
	ck_assert_uint_eq(bn_vocab_unk_id(v), 0);
	ck_assert_int_eq(bn_vocab_add_bos(v), 1);
	char text[4096], back[4096];
	int len = bn_detokenize(v, tu_stories_known, KNOWN_STEPS, 1, text, sizeof(text));
	ck_assert_int_gt(len, 0);
	ck_assert_int_lt(len, (int)sizeof(text));
	ck_assert_msg(strncmp(text, STORIES_START, strlen(STORIES_START)) == 0, "%s", text);
	ck_assert_msg(ends_with(text, STORIES_END), "%s", text);
	ck_assert_ptr_nonnull(strchr(text, '\n')); /* token 13 is the byte token <0x0A> */
	uint32_t ids[512];
	int n = bn_tokenize(v, text, (size_t)len, 0, ids, 512);
	ck_assert_int_eq(n, KNOWN_STEPS);
	for (int i = 0; i < n; i++)
		ck_assert_msg(ids[i] == tu_stories_known[i], "id %d: %u, want %u", i, ids[i],
			      tu_stories_known[i]);
	ck_assert_int_eq(bn_detokenize(v, ids, (uint32_t)n, 1, back, sizeof(back)), len);
	ck_assert_str_eq(back, text);
	n = bn_tokenize(v, "Once upon a time", 16, 1, ids, 512);
	ck_assert_int_eq(n, 5);
	ck_assert_uint_eq(ids[0], 1);
	ck_assert_int_eq(memcmp(ids + 1, tu_stories_known, 4 * sizeof(uint32_t)), 0);
	bn_vocab_free(v);
}
END_TEST

#define CLI_TOKENS 40

START_TEST(stories_cli_prints_greedy_text)
{
	const char *args[] = { "--backend", "cpu", "--model", stories_path, NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start(&d, args), 0);
	struct bn_client *c = connect_or_die(&d);
	struct bn_vocab *v;
	ck_assert_int_eq(bn_vocab_fetch(c, &v), 0);
	ck_assert_uint_eq(bn_vocab_n_tokens(v), 512);

	/* The oracle: the same prompt ids, greedy, through the library. */
	const char *prompt = "Once upon a time";
	uint32_t ids[16], out[CLI_TOKENS];
	int n = bn_tokenize(v, prompt, strlen(prompt), bn_vocab_add_bos(v), ids, 16);
	ck_assert_int_eq(n, 5);
	struct bn_request req = { .prompt = ids, .n_prompt = (uint32_t)n, .max_tokens = CLI_TOKENS,
				  .flags = BN_REQ_IGNORE_EOS };
	struct bn_result res;
	ck_assert_int_eq(bn_generate(c, &req, out, CLI_TOKENS, &res, tu_scaled_ns(60 * SECOND)), 0);
	ck_assert_uint_eq(res.n_tokens, CLI_TOKENS);
	/* Greedy from [BOS, Once, upon, a, time] continues the README's greedy run. */
	ck_assert_int_eq(memcmp(out, tu_stories_known + 4, sizeof(out)), 0);
	char want[4096];
	int len = bn_detokenize(v, out, CLI_TOKENS, 0, want, sizeof(want) - 1024);
	ck_assert_int_gt(len, 0);
	ck_assert_msg(strncmp(want, ", there was a little girl named Lily.", 37) == 0, "%s", want);
	strcat(want, "\n");
	for (uint32_t i = 0; i < CLI_TOKENS; i++)
		sprintf(want + strlen(want), i + 1 < CLI_TOKENS ? "%u " : "%u\n", out[i]);

	struct tu_run r;
	run_cli(&d, (const char *const[]){ "generate", "--prompt", prompt, "--max-tokens", "40",
					   "--ignore-eos", "--print-ids", NULL }, &r);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, want);
	ck_assert_msg(strstr(r.err, "status=length tokens=40"), "%s", r.err);

	/* The same through --ids prints the ids on one line, as before. */
	run_cli(&d, (const char *const[]){ "generate", "--ids", "1 403 407 261 378", "--max-tokens",
					   "40", "--ignore-eos", NULL }, &r);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, strchr(want, '\n') + 1);

	/* An empty prompt is BOS alone: the text starts the story, its leading space dropped. */
	run_cli(&d, (const char *const[]){ "generate", "--prompt", "", "--max-tokens", "4", NULL }, &r);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "Once upon a time\n");
	bn_vocab_free(v);
	bn_disconnect(c);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tokenizer");
	TCase *unit = tcase_create("encode and decode");
	tcase_add_test(unit, higher_score_merges_first);
	tcase_add_test(unit, equal_scores_leftmost_first);
	tcase_add_test(unit, spaces_and_stale_candidates);
	tcase_add_test(unit, utf8_characters_are_symbols);
	tcase_add_test(unit, byte_fallback);
	tcase_add_test(unit, unknown_without_byte_tokens);
	tcase_add_test(unit, empty_text_bos_and_cap);
	tcase_add_test(unit, other_vocabularies_do_not_encode);
	tcase_add_test(unit, accessors);
	tcase_add_test(unit, decode_pieces);
	tcase_add_test(unit, decode_like_snprintf);
	tcase_add_test(unit, random_bytes_round_trip);
	suite_add_tcase(s, unit);

	TCase *payload = tcase_create("payload");
	tcase_set_timeout(payload, 60);
	tcase_add_test(payload, every_truncation_is_refused);
	tcase_add_test(payload, corruptions_are_refused);
	tcase_add_test(payload, random_mutations_stay_in_bounds);
	tcase_add_test(payload, daemon_payload_from_gguf);
	tcase_add_test(payload, daemon_payload_defaults);
	tcase_add_test(payload, daemon_payload_add_eos);
	tcase_add_test(payload, payload_flags_word);
	tcase_add_loop_test(payload, daemon_payload_refuses_bad_metadata, 0,
			    sizeof(gg_bad) / sizeof(gg_bad[0]));
	tcase_add_test(payload, daemon_payload_tokens_not_strings);
	tcase_add_test(payload, daemon_payload_memfd_is_sealed);
	tcase_add_test(payload, daemon_payload_open_checks_the_model_size);
	tcase_add_test(payload, prepared_text_side_is_the_one_built_in_place);
	suite_add_tcase(s, payload);

	TCase *daemon = tcase_create("daemon");
	tcase_set_tags(daemon, TU_TAG_DAEMON);
	tcase_set_timeout(daemon, 60);
	tcase_add_test(daemon, loopback_serves_no_vocabulary);
	tcase_add_test(daemon, cli_refuses_bad_options);
	tcase_add_test(daemon, vocabulary_through_the_daemon);
	tcase_add_test(daemon, text_request_equals_local_tokenizer);
	tcase_add_test(daemon, malformed_tokenizer_is_served_without_vocabulary);
	suite_add_tcase(s, daemon);

	const char *models = getenv("BITNET_TEST_MODELS");
	if (models && *models) {
		snprintf(stories_path, sizeof(stories_path), "%s/stories260K.gguf", models);
		TCase *real = tcase_create("test model");
		tcase_set_timeout(real, 120);
		tcase_add_test(real, stories_known_ids_round_trip);
		suite_add_tcase(s, real);
		TCase *served = tcase_create("test model in a daemon");
		tcase_set_tags(served, TU_TAG_DAEMON);
		tcase_set_timeout(served, 120);
		tcase_add_test(served, stories_cli_prints_greedy_text);
		suite_add_tcase(s, served);
	} else {
		printf("SKIP: test-model tests (BITNET_TEST_MODELS is not set; .ci/run sets it to ../shared/models)\n");
	}
	return tu_run_suite(s);
}
