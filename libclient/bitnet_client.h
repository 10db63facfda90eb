/* SPDX-License-Identifier: MIT */
/*
 * bitnet_client.h — libbitnet-client, the C API to bitnetd.
 *
 * Every call returns 0 (or a count, where it says so) or a negative error code: -BN_E_* from
 * <bitnet/bitnet_shm.h>, or -errno for a failed system call. bn_strerror() names any of them.
 * errno is left alone.
 *
 * Threads: one struct bn_client may be shared by any number of threads. A handle belongs to
 * whoever submitted it: one thread at a time may wait on, read or release a given handle.
 *
 * Timeouts are in nanoseconds: < 0 waits without limit, 0 only checks. Whatever the timeout,
 * a call that waits on the daemon returns -BN_E_DISCONNECTED within one 50 ms sleep slice of
 * the daemon's socket closing; nothing waits forever on a daemon that is gone. (A SIGKILLed
 * daemon's socket closes once the kernel has released its memory: tests/faults.c measures
 * 50-100 ms from the kill.)
 */
#ifndef BITNET_CLIENT_H
#define BITNET_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "bitnet_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bn_client;
struct bn_handle; /* one submitted request and its slot */

struct bn_model_info {
	char name[65];            /* NUL-terminated */
	char backend[16];         /* "loopback", "cpu", "cuda" */
	uint32_t vocab_size;
	uint32_t context_length;
	uint32_t bos_id;
	uint32_t eos_id;
	uint32_t max_prompt_tokens; /* per request, this session */
	uint32_t max_output_tokens; /* per request, this session */
	uint32_t slots;           /* requests this connection may have in flight */
};

/* How the daemon picks tokens (shm/PROTOCOL.md, "Sampling"). All zero: greedy decoding. */
struct bn_sampling_params {
	float temperature;        /* 0: greedy; else (0, 100] */
	uint32_t top_k;           /* 0: off */
	float top_p;              /* 0: off; else (0, 1] */
	float min_p;              /* 0: off; else (0, 1] */
	float repetition_penalty; /* 0: off; else (0, 100] */
	float presence_penalty;   /* [-100, 100] */
	float frequency_penalty;  /* [-100, 100] */
	uint64_t seed;            /* used when flags has BN_REQ_SEED */
	const uint32_t *stop_ids; /* generation ends (BN_STATUS_STOP) at any of these */
	uint32_t n_stop;          /* n_prompt + n_stop <= max_prompt_tokens */
	uint32_t n_logprobs;      /* with BN_REQ_LOGPROBS: alternatives per token */
	uint32_t deadline_ms;     /* 0: none; else BN_STATUS_DEADLINE after this long */
};

struct bn_request {
	const uint32_t *prompt;   /* token ids, used as given (the caller decides about BOS) */
	uint32_t n_prompt;
	uint32_t max_tokens;
	uint32_t flags;           /* BN_REQ_* from bitnet_shm.h */
	const struct bn_sampling_params *sampling; /* NULL: greedy, no stop ids, no deadline */
};

struct bn_result {
	uint32_t status;          /* enum bn_status: terminal status */
	int32_t error;            /* 0, or -BN_E_* when status is BN_STATUS_ERROR */
	uint32_t n_tokens;        /* tokens produced */
	uint64_t queue_ns;        /* daemon: waiting before the first step */
	uint64_t first_token_ns;  /* daemon: until the first token */
	uint64_t total_ns;        /* daemon: until the terminal status */
};

/* Counters of this connection's system calls, for benchmarks and tuning. */
struct bn_client_stats {
	uint64_t submits;         /* requests queued */
	uint64_t doorbells;       /* eventfd writes (the daemon was asleep) */
	uint64_t futex_waits;     /* FUTEX_WAIT calls */
};

/* Connects to the daemon: socket_path, else $BITNETD_SOCKET, else the default path.
 * slots: requests this connection may have in flight (0: the daemon's default). Besides
 * -errno of connect(2): -BN_E_BUSY (no room: the daemon's sessions, or this user's share of
 * them, are taken), -BN_E_SHUTDOWN, -BN_E_TIMEOUT (the hello did not reach the daemon within
 * its handshake timeout), -BN_E_PROTOCOL, -BN_E_VERSION, -BN_E_BACKEND. */
int bn_connect(const char *socket_path, uint32_t slots, struct bn_client **out);
/* bn_connect with an admission weight: the daemon admits up to `weight` of this session's
 * requests per round-robin turn (0 = 1; capped by the daemon's --max-weight). */
int bn_connect_weighted(const char *socket_path, uint32_t slots, uint32_t weight,
			struct bn_client **out);
/* Ends the session; requests still in flight are abandoned (the daemon drops them).
 * Handles of this client become invalid. Returns 0. */
int bn_disconnect(struct bn_client *c);

int bn_model_info(struct bn_client *c, struct bn_model_info *out);
/* How the daemon computes the model, from the segment header: *lm_head an enum
 * bn_lm_head_kind (BN_HEAD_INT8: logits from an int8 copy of the LM head, not the file's),
 * *decode_layout an enum bn_decode_layout_kind. 0, or -BN_E_UNSUPPORTED from a daemon that
 * does not say (no BN_FEAT_COMPUTE; both then 0). */
int bn_model_compute(struct bn_client *c, uint32_t *lm_head, uint32_t *decode_layout);

/* How long a wait spins before it sleeps (default 20000 ns). Returns 0. */
int bn_client_set_spin_ns(struct bn_client *c, uint32_t spin_ns);

/* Queues a request (req->flags without BN_REQ_GRAMMAR: see bn_submit_grammar). -BN_E_AGAIN:
 * every slot is in flight, try again after a wait or release.
 * -BN_E_SHUTDOWN: the daemon is shutting down, or has shut down (its header says so);
 * -BN_E_DISCONNECTED: a wait found it gone without shutting down.
 * Prompt length and max_tokens beyond this session's capacities fail here with
 * -BN_E_TOO_LONG; everything else is checked by the daemon and reported in the result. */
int bn_submit(struct bn_client *c, const struct bn_request *req, struct bn_handle **out);
/* Waits until the request has its terminal status: 0, -BN_E_TIMEOUT, -BN_E_DISCONNECTED.
 * A request the daemon never took because it shut down first has status BN_STATUS_SHUTDOWN
 * (shm/PROTOCOL.md §11.3), not -BN_E_DISCONNECTED. */
int bn_wait(struct bn_handle *h, int64_t timeout_ns);
/* Waits until more than `have` tokens exist or the request ended: 0 or as bn_wait. */
int bn_wait_tokens(struct bn_handle *h, uint32_t have, int64_t timeout_ns);
/* Copies tokens [from, n) that exist now into out (at most cap); returns how many, >= 0. */
int bn_read_tokens(struct bn_handle *h, uint32_t from, uint32_t *out, uint32_t cap);
/* Asks the daemon to stop the request; it ends with BN_STATUS_CANCELLED unless it ended
 * first. Returns 0. */
int bn_cancel(struct bn_handle *h);
/* The terminal result: 0, or -BN_E_NOT_DONE. */
int bn_result(struct bn_handle *h, struct bn_result *out);
/* Log-probabilities of output tokens [from, n) that exist now (BN_REQ_LOGPROBS): out[i] gets
 * the chosen token's record, alt[i * n_alt ...] its n_alt alternatives (n_alt = the request's
 * n_logprobs; alt may be NULL when 0). Returns how many tokens were copied (at most cap), or
 * -BN_E_INVALID when the request did not ask for log-probabilities. */
int bn_read_logprobs(struct bn_handle *h, uint32_t from, struct bn_logprob *out,
		     struct bn_logprob *alt, uint32_t cap);
/* Gives the slot back. A request still running is cancelled and its slot reclaimed once the
 * daemon has ended it. The handle is invalid afterwards. Returns 0. */
int bn_release(struct bn_handle *h);

/* Submits, waits, copies the tokens (at most cap) and releases. Waits for a free slot when
 * all are busy. Returns 0 when the request ended with LENGTH, EOS or STOP, else its error:
 * -BN_E_CANCELLED, -BN_E_SHUTDOWN, the request's -BN_E_* error, -BN_E_TIMEOUT (the wait's
 * timeout, after which the request is cancelled, or the request's deadline),
 * -BN_E_DISCONNECTED. result may be NULL. */
int bn_generate(struct bn_client *c, const struct bn_request *req, uint32_t *out, uint32_t cap,
		struct bn_result *result, int64_t timeout_ns);

/* One item of a batch call: the request, where its tokens go, and what became of it. */
struct bn_batch_item {
	struct bn_request req;
	uint32_t *out;
	uint32_t out_cap;
	int32_t error;            /* as bn_generate's return value for this item */
	struct bn_result result;
};

struct bn_batch_result {
	uint32_t n_ok;
	uint32_t n_failed;
};

/* Runs every item, keeping as many in flight as the slots allow. Each item fails or succeeds
 * alone (item->error). Returns 0 when the batch ran (even if items failed), or a batch-level
 * error: -BN_E_INVALID for bad arguments, -BN_E_DISCONNECTED when the daemon went away (items
 * not finished then carry -BN_E_DISCONNECTED). The timeout covers the whole batch. */
int bn_generate_batch(struct bn_client *c, struct bn_batch_item *items, size_t n,
		      struct bn_batch_result *result, int64_t timeout_ns);

/* Daemon metrics in Prometheus text format into buf (NUL-terminated, truncated to cap).
 * Returns the full length of the text, which may exceed cap - 1. */
int bn_daemon_stats(struct bn_client *c, char *buf, size_t cap);

int bn_client_stats(struct bn_client *c, struct bn_client_stats *out);

/* ------------------------------------------------------------------------------------------ */
/* Text (BITNET_CLIENT_1.1). The wire carries token ids only; the library turns text into ids  */
/* and back with the model's vocabulary, which the daemon hands out (BN_CTL_VOCAB).           */
/* ------------------------------------------------------------------------------------------ */

struct bn_vocab; /* a private, read-only copy of the vocabulary; any threads may share it */

/* Fetches the model's vocabulary from the daemon (one control round trip; the payload comes
 * in a sealed memfd and is copied). -BN_E_INVALID: the daemon serves none (the loopback
 * backend, a model file without tokenizer keys or with ones it refused, or a daemon that
 * predates this call); -BN_E_PROTOCOL: the payload failed a check. Free with bn_vocab_free. */
int bn_vocab_fetch(struct bn_client *c, struct bn_vocab **out);
/* The same from a BN_CTL_VOCAB payload in memory (shm/PROTOCOL.md §10.3), e.g. a saved copy.
 * Every length and offset is checked against size: -BN_E_PROTOCOL when one does not fit. */
int bn_vocab_from_payload(const void *payload, size_t size, struct bn_vocab **out);
void bn_vocab_free(struct bn_vocab *v);

uint32_t bn_vocab_kind(const struct bn_vocab *v);     /* enum bn_vocab_kind */
uint32_t bn_vocab_n_tokens(const struct bn_vocab *v);
uint32_t bn_vocab_bos_id(const struct bn_vocab *v);   /* UINT32_MAX: none */
uint32_t bn_vocab_eos_id(const struct bn_vocab *v);   /* UINT32_MAX: none */
uint32_t bn_vocab_unk_id(const struct bn_vocab *v);   /* UINT32_MAX: none */
int bn_vocab_add_bos(const struct bn_vocab *v);       /* 1: prompts start with bos_id */
/* 1: a whole input (an embedding's text) ends with eos_id, the file's
 * tokenizer.ggml.add_eos_token (BN_TOK_ADD_EOS); 0 without it and from a daemon that predates
 * it (BITNET_CLIENT_1.9). */
int bn_vocab_add_eos(const struct bn_vocab *v);
/* The stored text of token id (not NUL-terminated; SentencePiece's word-start mark U+2581
 * included) and its length in *len; NULL for an id out of range. */
const char *bn_vocab_token_text(const struct bn_vocab *v, uint32_t id, size_t *len);

/* Text (UTF-8; invalid bytes are taken one by one) to token ids, the way SentencePiece's BPE
 * does it: spaces become U+2581, one is prepended, then the best-scoring adjacent pair is
 * merged until none is a token; what is left and not a token is spelled in byte tokens
 * <0xXX> (else the unknown token). add_bos puts bos_id first (if the vocabulary has one:
 * bn_vocab_add_bos says whether the model wants it). Writes at most cap ids and
 * returns how many the text needs (which may exceed cap), or -BN_E_INVALID for a vocabulary
 * that encodes no text (BN_VOCAB_OTHER), -BN_E_TOKEN when a byte has neither a byte token nor the unknown
 * token to stand for it, -BN_E_TOO_LONG when the count would not fit an int, -ENOMEM. Empty
 * text gives no ids (only bos_id with add_bos). */
int bn_tokenize(const struct bn_vocab *v, const char *text, size_t len, int add_bos,
		uint32_t *out, uint32_t cap);
/* Token ids to text: U+2581 becomes a space, a byte token its byte, a control token
 * nothing, the unknown token " U+2047 " (SentencePiece's surface for it), any other token its
 * text. strip_leading_space drops one leading space of the result (for the start of a text,
 * not for a continuation). Writes at most cap - 1 bytes and a NUL (nothing when cap is 0) and
 * returns the full length, as snprintf does; -BN_E_TOKEN for an id out of range (buf is
 * then empty), -BN_E_TOO_LONG when the length would not fit an int. */
int bn_detokenize(const struct bn_vocab *v, const uint32_t *ids, uint32_t n,
		  int strip_leading_space, char *buf, size_t cap);

/* ------------------------------------------------------------------------------------------ */
/* Text, continued (BITNET_CLIENT_1.2): byte-level BPE, special tokens, end of generation,     */
/* streams, chat.                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* bn_vocab_fetch asks for the BN_CTL_TOKENIZER payload (kind BN_VOCAB_BPE for gpt2
 * vocabularies, with merges, pre-tokenizer, end-of-generation ids and chat template) and falls
 * back to BN_CTL_VOCAB with a daemon that predates it. */
uint32_t bn_vocab_pre_tokenizer(const struct bn_vocab *v); /* enum bn_pre_tokenizer */
uint32_t bn_vocab_chat_template(const struct bn_vocab *v); /* enum bn_chat_template */
uint32_t bn_vocab_flags(const struct bn_vocab *v);         /* BN_VOCAB_PRE_DETECTED, ... */
/* The ids that end generation (the daemon ends a request with BN_STATUS_EOS at any of them):
 * eos, eot and eom where the file declares them, and end-of-turn tokens found by their text.
 * Returns how many; *ids points into v, ascending. */
uint32_t bn_vocab_eog_ids(const struct bn_vocab *v, const uint32_t **ids);
int bn_vocab_is_eog(const struct bn_vocab *v, uint32_t id);

/* "llama-bpe", "gpt2", "none" (and "unknown" out of range); the reverse also takes llama.cpp's
 * other names of the same splits ("llama3", "llama-v3", "gpt-2"), -1 for others. */
const char *bn_pre_tokenizer_name(uint32_t pre);
int bn_pre_tokenizer_from_name(const char *name);
/* "bitnet", "llama3", "chatml", "llama2", "none", "unknown"; the reverse takes the first four
 * (-1 for others). */
const char *bn_chat_template_name(uint32_t tmpl);
int bn_chat_template_from_name(const char *name);

/* bn_tokenize_ex flags */
#define BN_TOK_ADD_BOS       (1U << 0) /* put bos_id first (if the vocabulary has one) */
#define BN_TOK_PARSE_SPECIAL (1U << 1) /* control and user-defined tokens' texts in the text are
                                        * those tokens (leftmost, longest first); without it
                                        * they are plain text like any other */
#define BN_TOK_ADD_EOS       (1U << 2) /* put eos_id last (if the vocabulary has one): for a
                                        * whole input when bn_vocab_add_eos says so, as
                                        * llama.cpp's add_special; never for a prompt to be
                                        * continued (BITNET_CLIENT_1.9; -BN_E_INVALID before) */
/* bn_tokenize with flags; BN_VOCAB_BPE vocabularies too: the pre-tokenizer's split, GPT-2's
 * byte alphabet, merges by rank. Returns as bn_tokenize. */
int bn_tokenize_ex(const struct bn_vocab *v, const char *text, size_t len, uint32_t flags,
		   uint32_t *out, uint32_t cap);

/* bn_detokenize_ex flags */
#define BN_DETOK_STRIP_SPACE (1U << 0) /* drop one leading space (SentencePiece text start) */
#define BN_DETOK_SPECIAL     (1U << 1) /* control tokens as their text (else nothing) */
/* bn_detokenize with flags: a BPE token gives its bytes (which need not be whole UTF-8
 * characters: see bn_text_stream for text that arrives token by token). */
int bn_detokenize_ex(const struct bn_vocab *v, const uint32_t *ids, uint32_t n, uint32_t flags,
		     char *buf, size_t cap);

/* A decoder for tokens that arrive one by one: each push returns the text that is complete so
 * far, always valid UTF-8; the first bytes of a character whose end has not come are held
 * back; bytes that cannot become a character are U+FFFD (one per invalid sequence). finish()
 * returns what was held: U+FFFD, once, if a character never got its end. The returned text
 * (not NUL-terminated) is valid until the next call on the stream. flags: BN_DETOK_*. */
struct bn_text_stream;
int bn_text_stream_new(const struct bn_vocab *v, uint32_t flags, struct bn_text_stream **out);
int bn_text_stream_push(struct bn_text_stream *s, const uint32_t *ids, uint32_t n,
			const char **text, size_t *len);
int bn_text_stream_finish(struct bn_text_stream *s, const char **text, size_t *len);
void bn_text_stream_free(struct bn_text_stream *s);

/* One chat message: role and content, NUL-terminated UTF-8. Roles are 1 to 32 characters of
 * [A-Za-z0-9_-]; the llama2 template takes system (first only), user and assistant, users
 * and assistants alternating. */
struct bn_chat_message {
	const char *role;
	const char *content;
};

/* The conversation rendered by a template (enum bn_chat_template; BN_CHAT_NONE: the one the
 * daemon chose for the model, bn_vocab_chat_template) with the generation prompt for the
 * assistant's reply, byte for byte what Hugging Face's apply_chat_template(messages,
 * add_generation_prompt=True) gives for that template (the BOS the tokenizer adds is not in
 * it). Writes at most cap - 1 bytes and a NUL; returns the full length, or -BN_E_INVALID
 * (a bad role, an empty conversation, a role order the template refuses, no known template),
 * -BN_E_TOO_LONG. */
int bn_chat_render(const struct bn_vocab *v, uint32_t tmpl, const struct bn_chat_message *msgs,
		   size_t n, char *buf, size_t cap);
/* The ids of the rendered conversation: the template's own markers become special tokens, the
 * messages' texts never do (a message containing "<|eot_id|>" does not end its turn); exactly
 * one BOS first when the vocabulary adds one. Returns the count (may exceed cap) or as
 * bn_chat_render, -BN_E_TOKEN. */
int bn_chat_tokenize(const struct bn_vocab *v, uint32_t tmpl, const struct bn_chat_message *msgs,
		     size_t n, uint32_t *out, uint32_t cap);

/* The client's copy of the model's vocabulary, fetched on first use and kept until
 * bn_disconnect (do not free it). Returns as bn_vocab_fetch. */
int bn_client_vocab(struct bn_client *c, const struct bn_vocab **out);

/* One conversation to answer. */
struct bn_chat_item {
	const struct bn_chat_message *messages;
	size_t n_messages;
	uint32_t chat_template;   /* 0: the model's */
	uint32_t max_tokens;
	uint32_t flags;           /* BN_REQ_SEED, BN_REQ_LOGPROBS */
	const struct bn_sampling_params *sampling; /* NULL: greedy */
	char *reply;              /* the reply's text, NUL-terminated, truncated to reply_cap */
	size_t reply_cap;
	size_t reply_len;         /* the reply's full length */
	int32_t error;            /* 0, or as bn_generate's return value, or bn_chat_tokenize's */
	struct bn_result result;
};

/* Renders, tokenizes, generates until an end-of-generation id (which is not in the reply) or
 * max_tokens, and decodes the reply. Returns item->error. */
int bn_chat(struct bn_client *c, struct bn_chat_item *item, int64_t timeout_ns);
/* Every item as bn_chat, as many in flight as the slots allow; each fails or succeeds alone
 * and equals the same item run alone. Returns as bn_generate_batch. */
int bn_chat_batch(struct bn_client *c, struct bn_chat_item *items, size_t n,
		  struct bn_batch_result *result, int64_t timeout_ns);

/* ------------------------------------------------------------------------------------------ */
/* Text over the protocol (BITNET_CLIENT_1.3; shm/PROTOCOL.md §6.10): the daemon tokenizes      */
/* ------------------------------------------------------------------------------------------ */

/* bn_submit with a prompt of len bytes of text, which the daemon encodes (with the model's
 * BOS unless req->flags has BN_REQ_NO_BOS; special tokens' texts only with
 * BN_REQ_PARSE_SPECIAL): the ids are bn_tokenize_ex's on the fetched vocabulary.
 * req->prompt must be NULL and req->n_prompt 0; stop ids and sampling as for bn_submit.
 * With BN_REQ_TEXT_OUT the daemon writes the output's text as it goes (bn_read_text).
 * Returns as bn_submit; -BN_E_UNSUPPORTED when the daemon has no tokenizer (no
 * BN_FEAT_TEXT), -BN_E_TOO_LONG for a text larger than the slot's text region. bn_submit
 * refuses BN_REQ_TEXT and BN_REQ_CHAT (its prompt is ids). */
int bn_submit_text(struct bn_client *c, const struct bn_request *req, const char *text,
		   size_t len, struct bn_handle **out);
/* The request's text so far (BN_REQ_TEXT_OUT: valid UTF-8, complete characters only, growing
 * while it runs): copies bytes [from, from + cap) of it that exist and returns its whole
 * length so far; *prompt_tokens (may be NULL) gets the ids the text prompt became (valid
 * once the request has run or ended). -BN_E_INVALID without BN_FEAT_TEXT. */
int bn_read_text(struct bn_handle *h, size_t from, char *buf, size_t cap, uint32_t *prompt_tokens);

/* ------------------------------------------------------------------------------------------ */
/* Scoring (BITNET_CLIENT_1.3; shm/PROTOCOL.md §6.11): log-probabilities of a given text        */
/* ------------------------------------------------------------------------------------------ */

/* One text to score: its ids (BOS first if wanted), or text the daemon encodes (BOS as the
 * model says), never both. Position i >= 1 gets the log-probability of token i given tokens
 * 0 .. i-1: logprobs[i - 1] = { token i, its log-probability }, with its n_top most likely
 * alternatives at top[(i - 1) * n_top ...]. */
struct bn_score_item {
	const uint32_t *ids;
	uint32_t n_ids;
	const char *text;
	size_t text_len;
	uint32_t n_top;           /* alternatives per position, <= the daemon's --max-logprobs */
	uint32_t cap;             /* positions logprobs (and top) have room for */
	struct bn_logprob *logprobs; /* [cap] */
	struct bn_logprob *top;   /* [cap * n_top]; NULL when n_top is 0 */
	uint32_t n_tokens;        /* out: the text's tokens */
	uint32_t n_scored;        /* out: positions scored, n_tokens - 1 (may exceed cap) */
	double sum;               /* out: the sum of all n_scored log-probabilities */
	int32_t error;            /* out: 0 or -BN_E_*: -BN_E_EMPTY, -BN_E_TOO_LONG (longer than
	                           * the context), -BN_E_TOKEN, -BN_E_UNSUPPORTED (a backend that
	                           * does not score, e.g. loopback) ... */
	struct bn_result result;  /* out: status BN_STATUS_COMPLETE when scored */
};

/* Scores one item; returns item->error. */
int bn_score(struct bn_client *c, struct bn_score_item *item, int64_t timeout_ns);
/* Every item as bn_score, as many in flight as the slots allow; each fails or succeeds alone
 * and equals the same item scored alone, bit for bit. Returns as bn_generate_batch. */
int bn_score_batch(struct bn_client *c, struct bn_score_item *items, size_t n,
		   struct bn_batch_result *result, int64_t timeout_ns);

/* ------------------------------------------------------------------------------------------ */
/* Classification (BITNET_CLIENT_1.4; shm/PROTOCOL.md §6.12): which continuation is likeliest  */
/* ------------------------------------------------------------------------------------------ */

/* One label's result. */
struct bn_label_score {
	double logprob;    /* the sum of its tokens' log-probabilities after the prefix */
	double mean;       /* logprob / n_tokens */
	double prob;       /* exp(logprob) normalized over the item's labels */
	uint32_t n_tokens; /* the label's tokens */
};

/* One prefix and its candidate continuations (labels). The prefix is computed once; each
 * label's log-probabilities are those bn_score gives for the prefix followed by the label,
 * bit for bit. Give the prefix as ids (BOS first if wanted) with label_ids, or as text (the
 * daemon encodes it with BOS as the model says) with labels, never both. */
struct bn_classify_item {
	const uint32_t *prefix_ids;
	uint32_t n_prefix_ids;
	const char *text;
	size_t text_len;
	const uint32_t *const *label_ids;  /* with prefix_ids: label i is label_ids[i][0 ..
					    * label_n_ids[i]) */
	const uint32_t *label_n_ids;
	const char *const *labels;         /* with text: NUL-terminated texts; a label's ids are
					    * those text + label gets past text's own ids (so a
					    * label that follows a word needs its leading space) */
	uint32_t n_labels;
	struct bn_label_score *scores;     /* [n_labels] out */
	uint32_t best;                     /* out: the label with the highest logprob (the first
					    * on a tie) */
	int32_t error;                     /* out: 0 or -BN_E_*: -BN_E_EMPTY (no label, an empty
					    * prefix or label), -BN_E_TOO_LONG (prefix + a label
					    * longer than the context, or the labels' tokens more
					    * than the slot's output), -BN_E_TOKEN, -BN_E_INVALID,
					    * -BN_E_UNSUPPORTED (a daemon without BN_FEAT_CLASSIFY)
					    * ... */
	struct bn_result result;           /* out: status BN_STATUS_COMPLETE when classified */
};

/* Classifies one item; returns item->error. */
int bn_classify(struct bn_client *c, struct bn_classify_item *item, int64_t timeout_ns);
/* Every item as bn_classify, as many in flight as the slots allow; each fails or succeeds alone
 * and equals the same item classified alone, bit for bit. Returns as bn_generate_batch. */
int bn_classify_batch(struct bn_client *c, struct bn_classify_item *items, size_t n,
		      struct bn_batch_result *result, int64_t timeout_ns);

/* ------------------------------------------------------------------------------------------ */
/* Structured output (BITNET_CLIENT_1.6; shm/PROTOCOL.md §6.13): outputs a grammar constrains   */
/* ------------------------------------------------------------------------------------------ */

/* A grammar to compile: a JSON Schema, any JSON (JSON mode), a regular expression or GBNF. */
struct bn_grammar_spec {
	uint32_t kind;            /* BN_GRAMMAR_KIND_JSON_SCHEMA, _JSON, _REGEX or _GBNF */
	uint32_t flags;           /* BN_GRAMMAR_JSON_OBJECT (kind JSON: an object at the top, as
				   * OpenAI's json_object), BN_GRAMMAR_JSON_COMPACT (JSON forms:
				   * no whitespace between tokens) */
	uint32_t max_ws;          /* JSON forms: the longest whitespace run, <= 1000; 0: 20 */
	const char *text;         /* the schema, expression or grammar (UTF-8); kind JSON: empty */
	size_t len;
};

/* A grammar compiled in the daemon for this connection; any thread may use it. */
struct bn_grammar_handle;

/* Compiles spec in the daemon (on its compile threads; cached there by content, so compiling
 * the same text again is cheap) and returns a handle to constrain requests with. On refusal
 * err (NUL-terminated, truncated to err_cap; may be NULL) gets the daemon's reason, which
 * names the keyword or construct and where it is. Returns 0, or -BN_E_GRAMMAR (not valid, or
 * not enforceable), -BN_E_GRAMMAR_LIMIT (over a limit: size — text over BN_GRAMMAR_TEXT_MAX,
 * 256 KiB, refused here before a round trip —, nesting, rules, states, a repetition, compile
 * work, the daemon's --grammar-memory or what its --memory leaves beside the loaded models),
 * -BN_E_BUSY (the session holds the daemon's
 * --max-grammars), -BN_E_UNSUPPORTED (no BN_FEAT_GRAMMAR: the loopback backend, a model
 * without a text vocabulary), -BN_E_TOO_LONG (larger than an older daemon's text region),
 * -BN_E_INVALID (bad arguments), -BN_E_TIMEOUT (the compile was still running: it is
 * dropped), -ENOMEM, or as bn_submit. Release the handle with bn_grammar_release. */
int bn_grammar_load(struct bn_client *c, const struct bn_grammar_spec *spec,
		    struct bn_grammar_handle **out, char *err, size_t err_cap, int64_t timeout_ns);
/* Forgets the grammar in the daemon (requests already submitted with it keep it) and frees
 * the handle, which is invalid afterwards. Returns 0, or -BN_E_DISCONNECTED (the daemon is
 * gone; the handle is freed anyway). */
int bn_grammar_release(struct bn_grammar_handle *g);

/* bn_submit (text NULL, len 0) or bn_submit_text (the prompt is text), constrained by g (NULL:
 * not constrained): every token the request generates keeps its output a prefix of a sentence
 * of the grammar, and it ends with BN_STATUS_EOS only where the output is a whole one. Near
 * max_tokens the draws that would leave the output unable to end in time are drawn again
 * among those that can, so an output ends within max_tokens wherever the grammar allows;
 * one that cannot ends with BN_STATUS_LENGTH. Log-probabilities are those of the allowed
 * tokens (the distribution the token is drawn from). Returns as bn_submit, or -BN_E_INVALID
 * (g is another connection's, or req->flags has BN_REQ_IGNORE_EOS), -BN_E_UNSUPPORTED. A
 * request the grammar cannot continue ends with BN_STATUS_ERROR / -BN_E_GRAMMAR_STUCK. */
int bn_submit_grammar(struct bn_client *c, const struct bn_request *req, const char *text,
		      size_t len, const struct bn_grammar_handle *g, struct bn_handle **out);

/* ------------------------------------------------------------------------------------------ */
/* Embeddings (BITNET_CLIENT_1.7; shm/PROTOCOL.md §6.14): one vector per input                  */
/* ------------------------------------------------------------------------------------------ */

/* One input to embed: its ids (BOS first if wanted: nothing is added), or text the daemon
 * encodes (BOS first and EOS last as the model says, bn_vocab_add_bos and bn_vocab_add_eos;
 * flags BN_REQ_PARSE_SPECIAL, BN_REQ_NO_BOS: neither), never both. Its
 * vector is the final norm's output at its positions (what the LM head reads, as llama.cpp's
 * embeddings), pooled as the model says (mean, first position, last position) and divided by
 * its L2 norm; dim floats, of which the first cap are copied to vector. */
struct bn_embed_item {
	const uint32_t *ids;
	uint32_t n_ids;
	const char *text;
	size_t text_len;
	uint32_t flags;           /* with text: BN_REQ_PARSE_SPECIAL, BN_REQ_NO_BOS; else 0 */
	float *vector;            /* [cap] out */
	uint32_t cap;
	uint32_t dim;             /* out: the vector's length, the model's hidden size */
	uint32_t n_tokens;        /* out: the input's tokens (also when it was too long) */
	uint32_t pooling;         /* out: enum bn_pooling */
	uint32_t trained;         /* out: 1 when the model was trained to embed (its file names a
	                           * pooling: an embedding model, whose vectors may be truncated
	                           * and normalised again, Matryoshka-style); 0 for a generative
	                           * model pooled by the daemon's --pooling */
	int32_t error;            /* out: 0 or -BN_E_*: -BN_E_EMPTY (no input, or text that encodes
	                           * to nothing), -BN_E_TOO_LONG (longer than the context),
	                           * -BN_E_TOKEN (an id outside the vocabulary), -BN_E_UNSUPPORTED (a
	                           * daemon that does not embed: a generative model without
	                           * bitnetd --pooling, the loopback backend, an older daemon) ... */
	struct bn_result result;  /* out: status BN_STATUS_COMPLETE when embedded */
};

/* Embeds one item; returns item->error. */
int bn_embed(struct bn_client *c, struct bn_embed_item *item, int64_t timeout_ns);
/* Every item as bn_embed, as many in flight as the slots allow and batched together in the
 * daemon; each fails or succeeds alone and equals the same item embedded alone, bit for bit.
 * Returns as bn_generate_batch. */
int bn_embed_batch(struct bn_client *c, struct bn_embed_item *items, size_t n,
		   struct bn_batch_result *result, int64_t timeout_ns);
/* The session header's BN_FEAT_* bits: BN_FEAT_EMBED (the daemon embeds),
 * BN_FEAT_EMBEDDING_MODEL (an embedding model: it does not generate), ... (0 for NULL). */
uint32_t bn_model_features(const struct bn_client *c);

/* Names of error codes (negative or positive) and statuses. Never NULL. */
/* ------------------------------------------------------------------------------------------ */
/* Models by name (BITNET_CLIENT_1.8, shm/PROTOCOL.md §15): a session is bound to one model.   */
/* ------------------------------------------------------------------------------------------ */

/* bn_connect_weighted to the model the daemon serves as `model` (NULL or "": its default
 * model, which is what every other connect gets). Besides bn_connect's errors:
 * -BN_E_MODEL_NOT_FOUND (the daemon serves no such model), -BN_E_INVALID (not a model name:
 * 1-63 bytes of letters, digits and ._:@+/-, starting with a letter or digit). */
int bn_connect_model(const char *socket_path, const char *model, uint32_t slots, uint32_t weight,
		     struct bn_client **out);
/* The name the session's model is served under, NUL-terminated into out (cap >= 64 holds any
 * name). 0, or -BN_E_UNSUPPORTED from a daemon that serves no models by name (out then "").
 * bn_model_info's name is what the model's file calls it. */
int bn_model_served_name(struct bn_client *c, char *out, size_t cap);

/* A model's state in the daemon. */
enum bn_model_state_kind {
	BN_MODEL_STATE_UNLOADED = 0,
	BN_MODEL_STATE_LOADING = 1,
	BN_MODEL_STATE_LOADED = 2,
	BN_MODEL_STATE_UNLOADING = 3,  /* draining its running requests */
	BN_MODEL_STATE_FAILED = 4,     /* its last load failed; error says why */
	BN_MODEL_STATE_UNKNOWN = 5,    /* a state this library does not know */
};

/* One model as the daemon reports it (a line of the MODELS reply). */
struct bn_model_status {
	char name[64];            /* NUL-terminated */
	uint32_t state;           /* enum bn_model_state_kind */
	uint32_t is_default;      /* 1: clients that name no model get it */
	uint32_t pinned;          /* 1: never unloaded for room or idleness */
	uint64_t bytes;           /* weight_bytes + kv_bytes: what the memory budget counts */
	uint64_t weight_bytes;    /* its weights, as last loaded */
	uint64_t kv_bytes;        /* its KV pool (its share, where models lend KV under --memory) */
	int64_t idle_since_ms;    /* loaded and idle: since when (ms since the epoch); else 0 */
	uint32_t waiting;         /* its requests waiting (for a batch, or for its load) */
	uint32_t running;         /* its requests running */
	uint32_t context_length;
	uint32_t vocab_size;
	uint64_t loads;           /* loads since the daemon started */
	int64_t keep_alive_ms;    /* idle time before it unloads; -1: never */
	char error[256];          /* FAILED: why (NUL-terminated, cut to fit); else "" */
};

/* The daemon's models, the default first: up to cap entries into out (out may be NULL when cap
 * is 0). Returns how many the daemon serves (which may exceed cap), or -BN_E_UNSUPPORTED
 * from a daemon without models by name, or a connection error. */
int bn_models_list(struct bn_client *c, struct bn_model_status *out, size_t cap);
/* Loads the model named `name` and waits for it (a load can take seconds: the file is read,
 * and the least recently used idle models are unloaded to make room). *out (may be NULL)
 * gets its state then. 0; -BN_E_MODEL_LOAD when it could not be loaded (out->error says
 * why); -BN_E_MODEL_NOT_FOUND; -BN_E_DENIED unless the caller is root or the daemon's user;
 * -BN_E_UNSUPPORTED, or a connection error. */
int bn_models_load(struct bn_client *c, const char *name, struct bn_model_status *out);
/* Unloads the model named `name` once its running requests end (they end with
 * BN_E_MODEL_UNLOADED after the daemon's drain timeout; its waiting ones load it again). The
 * errors of bn_models_load. */
int bn_models_unload(struct bn_client *c, const char *name, struct bn_model_status *out);
/* Reads the model's file again if it changed on disk (NULL or "": every model's), and waits
 * until it did: a model loaded then is unloaded as bn_models_unload does and loaded from the
 * new file; sessions whose model now says something else (vocabulary, context, ...) are
 * closed (their clients connect again). The errors of bn_models_load. */
int bn_models_reload(struct bn_client *c, const char *name);
/* "unloaded", "loading", "loaded", "unloading", "failed", or "unknown". */
const char *bn_model_state_name(uint32_t state);

const char *bn_strerror(int code);
const char *bn_status_name(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif /* BITNET_CLIENT_H */
