/* SPDX-License-Identifier: MIT */
/*
 * textreq.h — text over the protocol (feature BN_FEAT_TEXT, shm/PROTOCOL.md §6.10): prompts as
 * UTF-8 text or as a conversation, the output's text as it is generated, and the tokenize and
 * detokenize ops. The tokenizer is the client library's (libclient/tokenizer.c and friends,
 * built into the daemon too), run on the very payload BN_CTL_TOKENIZER serves, so a text sent
 * here and a text the C library encodes give the same ids.
 *
 * Everything runs on the loop thread when the request is taken (encoding) or a token is
 * published (decoding): encoding runs at ~50 MB/s (docs/PERFORMANCE.md), so the largest text a
 * slot holds costs the loop about 10 ms once.
 */
#ifndef BITNETD_TEXTREQ_H
#define BITNETD_TEXTREQ_H

#include <stddef.h>
#include <stdint.h>

struct bn_vocab;
struct bn_segment;
struct bn_req;

/* The daemon's tokenizer and what it implies for the segment layout. */
struct bn_text_service {
	struct bn_vocab *vocab;  /* NULL: the daemon offers no text (BN_FEAT_TEXT unset) */
	uint32_t piece_bound;    /* bytes a stream may emit for one token, at most */
};

/* Builds the tokenizer from a BN_CTL_TOKENIZER payload. A vocabulary that cannot encode text
 * (kind OTHER, or byte-level BPE without a pre-tokenizer) leaves t->vocab NULL and returns 0;
 * -ENOMEM or -BN_E_PROTOCOL otherwise. */
int bn_text_service_open(struct bn_text_service *t, const void *payload, size_t size);
void bn_text_service_close(struct bn_text_service *t);

/* Bytes of a slot's text region: the text of `tokens` tokens, streamed or whole, always fits
 * (0 without text; UINT32_MAX when it would not fit a u32). */
uint32_t bn_text_capacity(const struct bn_text_service *t, uint32_t tokens);

/* Turns a text or conversation prompt (r->flags has BN_REQ_TEXT or BN_REQ_CHAT; r->n_prompt
 * is its bytes) into r->prompt[0..n) and sets r->n_prompt = n, writes the slot's
 * prompt_tokens, and copies the stop ids after the prompt. BOS first as the model's add_bos
 * says; EOS last as its add_eos says for an EMBED's text only (and TOKENIZE's, in
 * bn_text_tokenize_op), never with NO_BOS. Returns 0 or the bn_error that ends
 * the request (TOO_LONG, INVALID, TOKEN; ENOMEM as BACKEND). */
uint32_t bn_text_prompt_take(const struct bn_segment *g, struct bn_req *r);

/* A classify request's text (r->n_prompt bytes: struct bn_classify_head, the prefix, the
 * labels; shm/PROTOCOL.md §6.12): the prefix's ids in r->prompt[0..n) with r->n_prompt = n,
 * the labels' ids after them, their counts in r->label_len (at the end of the prompt arena),
 * r->n_labels; publishes the counts (text region, n_text) and prompt_tokens. Returns 0 or the
 * bn_error that ends the request. */
uint32_t bn_text_classify_take(const struct bn_segment *g, struct bn_req *r);

/* A generate request with BN_REQ_TEXT_OUT gets its stream decoder. Returns 0 or BN_E_BACKEND. */
uint32_t bn_text_out_begin(const struct bn_segment *g, struct bn_req *r);
/* Publishes the text of output token r->n_out (called before the token itself is published):
 * the bytes, the piece end, then n_text (store-release). 0, or -ENOMEM. */
int bn_text_out_token(const struct bn_segment *g, struct bn_req *r, uint32_t token);
/* At the terminal status: what the decoder held back (U+FFFD for an unfinished character),
 * the final n_text, and the decoder freed. */
void bn_text_out_end(const struct bn_segment *g, struct bn_req *r);

/* The ops: run at once on the request's private copy of its words. Return 0 or the bn_error
 * that ends the request; on 0 the caller ends it with BN_STATUS_COMPLETE. */
uint32_t bn_text_tokenize_op(const struct bn_segment *g, struct bn_req *r);
uint32_t bn_text_detokenize_op(const struct bn_segment *g, struct bn_req *r);

#endif /* BITNETD_TEXTREQ_H */
