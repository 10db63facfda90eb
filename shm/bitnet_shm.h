/* SPDX-License-Identifier: MIT */
/*
 * bitnet_shm.h — the wire ABI between bitnetd and its clients.
 *
 * This header is the only thing the daemon and the client library share. It holds no logic:
 * fixed-width little-endian fields, flags as (1U << n) under their field, enums with explicit
 * values (append-only), reserved words that must be zero, and a compile-time assert on every
 * size and offset. shm/PROTOCOL.md is the prose twin of this file; a client in another language
 * is written from that document alone.
 *
 * Versioning: BN_ABI_VERSION changes only on an incompatible change. Compatible growth uses
 * reserved words plus a feature bit in bn_shm_header.features. Clients compute every address
 * from the offsets in the segment header, never from sizeof() of this version's structs.
 */
#ifndef BITNET_SHM_H
#define BITNET_SHM_H

#include <stddef.h>
#include <stdint.h>

#define BN_ABI_VERSION 1U

/* Default socket path; overridden by a flag (daemon), an argument (client) or $BITNETD_SOCKET. */
#define BN_DEFAULT_SOCKET_PATH "/run/bitnetd/bitnetd.sock"
#define BN_SOCKET_ENV          "BITNETD_SOCKET"

/* ------------------------------------------------------------------------------------------ */
/* Handshake and control messages on the Unix stream socket                                  */
/* ------------------------------------------------------------------------------------------ */

#define BN_HELLO_MAGIC   0x4c484e42U /* "BNHL" little-endian: client -> daemon */
#define BN_WELCOME_MAGIC 0x4c574e42U /* "BNWL": daemon -> client, carries the fds */
#define BN_CTL_MAGIC     0x51434e42U /* "BNCQ": control request, client -> daemon */
#define BN_CTL_REPLY_MAGIC 0x52434e42U /* "BNCR": control reply, daemon -> client */

/* First message on a new connection, client -> daemon, exactly 32 bytes (96 with
 * BN_HELLO_MODEL: a struct bn_model_name follows at once). */
struct bn_hello {
	uint32_t magic;           /* BN_HELLO_MAGIC */
	uint32_t abi_version;     /* BN_ABI_VERSION the client speaks */
	uint32_t flags;           /* BN_HELLO_*; other bits must be 0 */
	uint32_t requested_slots; /* 0 = daemon default; else capped to the daemon's limit */
	uint32_t weight;          /* admission weight: 0 = 1; else capped to the daemon's
	                           * --max-weight (a session with weight w is admitted up to w
	                           * requests per round-robin turn) */
	uint32_t reserved[3];     /* must be 0 */
};

/* bn_hello.flags */
#define BN_HELLO_MODEL (1U << 0) /* a model name follows the hello: the session's model
                                  * (PROTOCOL.md §15); without it the daemon's default model */

/* A model's name as the daemon serves it: UTF-8 of [A-Za-z0-9._:@+/-], starting with a letter
 * or digit, NUL-padded; all zero: the default model. After a hello with BN_HELLO_MODEL, and
 * after the control requests BN_CTL_MODEL_LOAD, _UNLOAD and _RELOAD. */
#define BN_MODEL_NAME_MAX 64
struct bn_model_name {
	uint8_t name[BN_MODEL_NAME_MAX]; /* bytes after the first NUL must be 0 too */
};

/* Reply, daemon -> client, exactly 32 bytes. When error == 0 the same sendmsg carries two fds
 * with SCM_RIGHTS: [0] the session memfd (sealed), [1] the doorbell eventfd. */
struct bn_welcome {
	uint32_t magic;        /* BN_WELCOME_MAGIC */
	uint32_t abi_version;  /* BN_ABI_VERSION the daemon speaks */
	uint32_t error;        /* 0 or an enum bn_error code; no fds attached when non-zero */
	uint32_t session_id;   /* for logs and stats */
	uint64_t segment_size; /* bytes to mmap from offset 0 of the memfd */
	uint32_t reserved[2];  /* 0 */
};

/* Control request after the handshake, client -> daemon, exactly 16 bytes. */
struct bn_ctl_request {
	uint32_t magic;       /* BN_CTL_MAGIC */
	uint32_t op;          /* enum bn_ctl_op */
	uint32_t reserved[2]; /* must be 0 */
};

/* Control reply, daemon -> client: this 16-byte head, then `length` bytes of payload. */
struct bn_ctl_reply {
	uint32_t magic;  /* BN_CTL_REPLY_MAGIC */
	uint32_t op;     /* echoes the request's op */
	uint32_t error;  /* 0 or enum bn_error */
	uint32_t length; /* payload bytes that follow */
};

enum bn_ctl_op {
	BN_CTL_STATS = 1, /* payload: daemon metrics, Prometheus text exposition format */
	BN_CTL_VOCAB = 2, /* payload: the model's vocabulary (struct bn_vocab_head, then entries);
	                   * error BN_E_INVALID when the model carries none */
	BN_CTL_TOKENIZER = 3, /* payload: the BN_CTL_VOCAB payload, whose kind may then be
	                       * BN_VOCAB_BPE, followed by a struct bn_vocab_ext and its arrays:
	                       * all a client needs to encode text as the daemon does; error
	                       * BN_E_INVALID as for BN_CTL_VOCAB (and from daemons older than it) */
	/* BN_FEAT_MODELS (PROTOCOL.md §15): */
	BN_CTL_MODELS = 4,       /* payload: a line of text per model the daemon serves */
	BN_CTL_MODEL_LOAD = 5,   /* a struct bn_model_name follows the request; answered once
	                          * the model is loaded (or could not be): its MODELS line */
	BN_CTL_MODEL_UNLOAD = 6, /* the same; answered once it is unloaded */
	BN_CTL_MODEL_RELOAD = 7, /* the same (all zero: every model); answered once each named
	                          * model has read its file again (or kept it: unchanged) */
};

/* BN_CTL_VOCAB payload: this head, then n_tokens entries in id order, each a
 * struct bn_vocab_entry followed by `length` bytes of UTF-8 text (no NUL, no padding). */
#define BN_VOCAB_MAGIC 0x42564e42U /* "BNVB" */
enum bn_vocab_kind {
	BN_VOCAB_SPM = 1,  /* SentencePiece-style (tokenizer.ggml.model = "llama") */
	BN_VOCAB_OTHER = 2, /* ids and texts only; text encoding is not offered */
	BN_VOCAB_BPE = 3,  /* byte-level BPE (tokenizer.ggml.model = "gpt2"); only in
	                    * BN_CTL_TOKENIZER payloads: BN_CTL_VOCAB reports it as OTHER */
};
struct bn_vocab_head {
	uint32_t magic;    /* BN_VOCAB_MAGIC */
	uint32_t kind;     /* enum bn_vocab_kind */
	uint32_t n_tokens;
	uint32_t bos_id, eos_id, unk_id; /* UINT32_MAX where absent */
	uint32_t add_bos;  /* tokenizer.ggml.add_bos_token (1 when absent) */
	uint32_t flags;    /* BN_VOCAB_HEAD_*; readers ignore other bits (a reserved 0 before) */
};
/* bn_vocab_head.flags */
#define BN_VOCAB_HEAD_ADD_EOS (1U << 0) /* tokenizer.ggml.add_eos_token (0 when absent): a whole
                                         * input (an embedding's) ends with eos_id */
struct bn_vocab_entry {
	float score;       /* tokenizer.ggml.scores, 0 where absent */
	uint32_t type;     /* tokenizer.ggml.token_type (1 normal, 2 unknown, 3 control,
	                    * 4 user-defined, 5 unused, 6 byte), 1 where absent */
	uint32_t length;   /* bytes of text that follow */
};

/* BN_CTL_TOKENIZER: after the last entry, this extension (unaligned: copy it out), then
 * n_merges struct bn_vocab_merge in rank order (rank 0 first), then n_eog u32 token ids. */
#define BN_VOCAB_EXT_MAGIC 0x58564e42U /* "BNVX" */
enum bn_pre_tokenizer {
	BN_PRE_NONE = 0,     /* not a BPE vocabulary */
	BN_PRE_LLAMA3 = 1,   /* "llama-bpe": LLaMA-3's split pattern */
	BN_PRE_GPT2 = 2,     /* "gpt2": GPT-2's split pattern */
	BN_PRE_FALCON3 = 3,  /* "falcon3": punctuation runs, GPT-2's pattern, digits alone */
	BN_PRE_FALCON_E = 4, /* "falcon_e": Falcon-E's, the same split as falcon3 */
	BN_PRE_QWEN2 = 5,    /* "qwen2": Qwen2's and Qwen3's, LLaMA-3's with digits alone */
	BN_PRE_NO_PREFIX = 6, /* an SPM vocabulary without SentencePiece's dummy space prefix
			       * (tokenizer.ggml.add_space_prefix false: Gemma 3's) */
};
enum bn_chat_template {
	BN_CHAT_NONE = 0,    /* the file has no tokenizer.chat_template and none was chosen */
	BN_CHAT_UNKNOWN = 1, /* the file's template is none of those below: chat needs a choice */
	BN_CHAT_BITNET = 2,  /* BitNet b1.58 2B4T's trained format: "Role: text<|eot_id|>" */
	BN_CHAT_LLAMA3 = 3,  /* <|start_header_id|>role<|end_header_id|>\n\ntext<|eot_id|> */
	BN_CHAT_CHATML = 4,  /* <|im_start|>role\ntext<|im_end|>\n */
	BN_CHAT_LLAMA2 = 5,  /* <s>[INST] <<SYS>>...<</SYS>> text [/INST] */
	BN_CHAT_FALCON3 = 6, /* <|user|>\ntext\n ... <|assistant|>\ntext<|endoftext|>\n */
	BN_CHAT_GEMMA = 7,   /* <start_of_turn>user\ntext<end_of_turn>\n<start_of_turn>model\n */
};
/* bn_vocab_ext.flags: how the daemon chose (for reports such as bitnet-cli info). */
#define BN_VOCAB_PRE_DETECTED   (1U << 0) /* tokenizer.ggml.pre absent: known by content */
#define BN_VOCAB_PRE_OVERRIDE   (1U << 1) /* chosen by the daemon's --pre-tokenizer */
#define BN_VOCAB_CHAT_PLACEHOLDER (1U << 2) /* the file's template was the 2B4T converter's
                                             * placeholder; replaced by BN_CHAT_BITNET */
#define BN_VOCAB_CHAT_OVERRIDE  (1U << 3) /* chosen by the daemon's --chat-template */
#define BN_VOCAB_EOT_DECLARED   (1U << 4) /* the file declares tokenizer.ggml.eot_token_id */
struct bn_vocab_ext {
	uint32_t magic;         /* BN_VOCAB_EXT_MAGIC */
	uint32_t pre_tokenizer; /* enum bn_pre_tokenizer */
	uint32_t chat_template; /* enum bn_chat_template */
	uint32_t flags;         /* BN_VOCAB_* above; unknown bits: ignore */
	uint32_t n_merges;      /* 0 unless the kind is BN_VOCAB_BPE */
	uint32_t n_eog;         /* end-of-generation ids, at least 1 when eos_id exists */
	uint32_t reserved[2];   /* 0 */
};
/* One BPE merge: the adjacent tokens left, right become result (whose text is theirs joined). */
struct bn_vocab_merge {
	uint32_t left, right, result;
};

/* ------------------------------------------------------------------------------------------ */
/* Error codes: in welcome.error, ctl_reply.error and slot.error. The client library returns   */
/* their negatives. Append-only; 0 means no error.                                             */
/* ------------------------------------------------------------------------------------------ */

enum bn_error {
	BN_OK = 0,
	BN_E_INVALID = 1001,       /* a request or call parameter is out of range */
	BN_E_TOKEN = 1002,         /* a prompt token id is >= vocab_size */
	BN_E_TOO_LONG = 1003,      /* prompt or prompt + max_tokens exceeds a capacity or the context */
	BN_E_AGAIN = 1004,         /* no free slot or queue room now: try again */
	BN_E_SHUTDOWN = 1005,      /* the daemon is shutting down */
	BN_E_DISCONNECTED = 1006,  /* the daemon is gone (socket closed) */
	BN_E_TIMEOUT = 1007,       /* the wait's timeout expired; the request is still running
	                            * (in a welcome: no whole hello within the handshake timeout) */
	BN_E_PROTOCOL = 1008,      /* the peer broke the protocol */
	BN_E_VERSION = 1009,       /* ABI version mismatch */
	BN_E_BUSY = 1010,          /* no room: the table is full, or the peer uid holds its share */
	BN_E_BACKEND = 1011,       /* the backend failed on this request */
	BN_E_CANCELLED = 1012,     /* the request was cancelled */
	BN_E_NOT_DONE = 1013,      /* the request has not reached a terminal status yet */
	BN_E_EMPTY = 1014,         /* the request has no prompt tokens */
	BN_E_KV_SPACE = 1015,      /* prompt + max_tokens needs more KV cache than the daemon has */
	BN_E_UNSUPPORTED = 1016,   /* the daemon does not offer this: an sqe op it does not know,
	                            * or text asked of a daemon without a tokenizer */
	BN_E_GRAMMAR = 1017,       /* BN_OP_GRAMMAR: the grammar is not valid, or asks for what the
	                            * engine cannot enforce; the text region says what and where */
	BN_E_GRAMMAR_LIMIT = 1018, /* BN_OP_GRAMMAR: the grammar is over a limit (size, nesting,
	                            * rules, states, a repetition, compile time); the text region
	                            * names it */
	BN_E_GRAMMAR_STUCK = 1019, /* BN_REQ_GRAMMAR: no token of the vocabulary continues the
	                            * output inside the grammar (tokens so far are kept) */
	BN_E_MODEL_NOT_FOUND = 1020, /* the hello or a control request names a model the daemon
	                              * does not serve */
	BN_E_MODEL_LOAD = 1021,    /* the request's model could not be loaded (the file failed, or
	                            * it does not fit the daemon's memory budget even alone) */
	BN_E_MODEL_UNLOADED = 1022, /* the request's model was unloaded (a command, a reload)
	                            * before the request ended (tokens so far are kept) */
	BN_E_DENIED = 1023,        /* a control request only root or the daemon's own user may
	                            * make (load, unload, reload) */
};

/* ------------------------------------------------------------------------------------------ */
/* The session segment (memfd): header at offset 0, then the SQ ring, its entries, the slots.  */
/* ------------------------------------------------------------------------------------------ */

#define BN_SHM_MAGIC 0x47534e42U /* "BNSG" */
#define BN_CACHE_LINE 64U

/* bn_shm_header.features */
#define BN_FEAT_STREAMING (1U << 0) /* slot.n_tokens grows while the request runs */
#define BN_FEAT_PARAMS    (1U << 1) /* slot bytes 76..123 (temperature .. deadline_ms) carry
                                     * sampling, stop ids and a deadline */
#define BN_FEAT_LOGPROBS  (1U << 2) /* slot_logprob_offset / _capacity are valid */
#define BN_FEAT_TEXT      (1U << 3) /* slot_text_offset / _capacity and slot_piece_offset are
                                     * valid: prompts as text or a conversation, text out, and
                                     * the ops BN_OP_TOKENIZE and BN_OP_DETOKENIZE */
#define BN_FEAT_SCORE     (1U << 4) /* the op BN_OP_SCORE (needs BN_FEAT_LOGPROBS too) */
#define BN_FEAT_CLASSIFY  (1U << 5) /* the op BN_OP_CLASSIFY (needs BN_FEAT_LOGPROBS too) */
#define BN_FEAT_COMPUTE   (1U << 6) /* lm_head and decode_layout say how the model is computed */
#define BN_FEAT_SPECULATE (1U << 7) /* generate requests may set BN_REQ_SPECULATE */
#define BN_FEAT_GRAMMAR   (1U << 8) /* the ops BN_OP_GRAMMAR and BN_OP_GRAMMAR_FREE, and generate
                                     * requests with BN_REQ_GRAMMAR (PROTOCOL.md §6.13) */
#define BN_FEAT_MODELS    (1U << 9) /* models by name (PROTOCOL.md §15): served_name says the
                                     * session's; the hello may name one; the control requests
                                     * BN_CTL_MODELS and BN_CTL_MODEL_* */
#define BN_FEAT_EMBED     (1U << 10) /* the op BN_OP_EMBED: one pooled, L2-normalised vector per
                                      * input (PROTOCOL.md §6.14) */
#define BN_FEAT_EMBEDDING_MODEL (1U << 11) /* the model is an embedding model (its file names a
                                      * pooling): it embeds and does not generate (GENERATE ends
                                      * 1016; SCORE, CLASSIFY, GRAMMAR, SPECULATE not offered) */

/* bn_shm_header.lm_head (BN_FEAT_COMPUTE): where logits and tokens come from. */
enum bn_lm_head_kind {
	BN_HEAD_NONE = 0,      /* no model (the loopback backend) */
	BN_HEAD_FILE = 1,      /* every logit from the file's LM head */
	BN_HEAD_SCREENED = 2,  /* the file's head; a greedy token is found through an int8 screen
	                        * with a proven error bound: the same tokens and logits as FILE */
	BN_HEAD_INT8 = 3,      /* every logit from an int8 copy of the head (--lm-head int8): an
	                        * approximation, not the file's logits */
};

/* bn_shm_header.decode_layout (BN_FEAT_COMPUTE): how one-row decode steps read the ternary
 * weights; the outputs are the same bits either way. */
enum bn_decode_layout_kind {
	BN_DECODE_LAYOUT_NONE = 0,  /* no ternary weights (loopback, a float model) */
	BN_DECODE_LAYOUT_2BIT = 1,  /* 2-bit planes */
	BN_DECODE_LAYOUT_BASE3 = 2, /* five weights a byte, base 3 (--decode-layout base3) */
};

/* bn_shm_header.daemon_flags (written by the daemon, read by the client) */
#define BN_DAEMON_SHUTTING_DOWN (1U << 0) /* new submissions will end with BN_STATUS_SHUTDOWN */
#define BN_DAEMON_CLOSED        (1U << 1) /* the daemon has taken its last sqe from this ring and
                                           * ended every request it took: once the socket hangs
                                           * up, a slot that is not DONE was never taken, and
                                           * its request ended with BN_STATUS_SHUTDOWN */

enum bn_backend_kind {
	BN_BACKEND_LOOPBACK = 1,
	BN_BACKEND_CPU = 2,
	BN_BACKEND_CUDA = 3,
};

/* Written by the daemon before the memfd is passed; read-only for the client. 256 bytes. */
struct bn_shm_header {
	uint32_t magic;           /* BN_SHM_MAGIC */
	uint32_t abi_version;     /* BN_ABI_VERSION */
	uint32_t features;        /* BN_FEAT_* */
	uint32_t header_size;     /* sizeof this header as the daemon wrote it (>= 256) */
	uint64_t segment_size;    /* total bytes of the segment */
	uint32_t session_id;
	uint32_t daemon_flags;    /* BN_DAEMON_*; changes at run time */
	uint32_t sq_offset;       /* byte offset of struct bn_sq_ring */
	uint32_t sq_entries;      /* power of two, >= slot_count */
	uint32_t sqes_offset;     /* byte offset of struct bn_sqe[sq_entries] */
	uint32_t slot_offset;     /* byte offset of slot 0 */
	uint32_t slot_count;
	uint32_t slot_size;       /* stride between slots, multiple of 64 */
	uint32_t slot_prompt_offset; /* offset of the prompt token array within a slot */
	uint32_t slot_prompt_capacity; /* max prompt tokens per request */
	uint32_t slot_output_offset; /* offset of the output token array within a slot */
	uint32_t slot_output_capacity; /* max generated tokens per request */
	/* Model information (daemon-written). */
	uint32_t vocab_size;
	uint32_t context_length;  /* max prompt + generated tokens of one sequence */
	uint32_t bos_id;
	uint32_t eos_id;
	uint32_t backend;         /* enum bn_backend_kind */
	uint32_t reserved0;       /* 0 */
	uint8_t model_name[64];   /* UTF-8, NUL-padded; not necessarily NUL-terminated at 64 */
	/* BN_FEAT_LOGPROBS: per output token i, (1 + slot_logprob_capacity) struct bn_logprob
	 * records at slot_logprob_offset + i * (1 + slot_logprob_capacity) * 8 within the slot. */
	uint32_t slot_logprob_offset;
	uint32_t slot_logprob_capacity; /* max alternatives per token (slot.n_logprobs) */
	/* BN_FEAT_TEXT: a text region of slot_text_capacity bytes at slot_text_offset within the
	 * slot (a text or conversation prompt in, text out: the text of slot_output_capacity
	 * tokens always fits), and u32 piece ends at slot_piece_offset: output token i's text is
	 * text[end[i - 1] .. end[i]) (end[-1] = 0). */
	uint32_t slot_text_offset;
	uint32_t slot_text_capacity;
	uint32_t slot_piece_offset;
	/* BN_FEAT_COMPUTE: how the model is computed (the daemon's --lm-head and --decode-layout,
	 * as far as the model and this CPU allowed them). */
	uint32_t lm_head;         /* enum bn_lm_head_kind */
	uint32_t decode_layout;   /* enum bn_decode_layout_kind */
	uint32_t reserved;        /* 0 */
	/* BN_FEAT_MODELS: the name the session's model is served under (bn_model_name's rules;
	 * model_name is what its file calls it). */
	uint8_t served_name[BN_MODEL_NAME_MAX];
};

/* bn_sq_ring.flags */
#define BN_SQ_NEED_WAKEUP (1U << 0) /* daemon is (about to be) asleep: ring the doorbell */

/* Single-producer (client) / single-consumer (daemon) submission ring. head and tail are
 * free-running u32 counters; an entry's index is counter & (sq_entries - 1); tail - head is the
 * number of queued entries. Each word sits on its own cache line so the two sides do not
 * false-share. 192 bytes. */
struct bn_sq_ring {
	uint32_t head;            /* written by the daemon only (store-release) */
	uint32_t pad0[15];
	uint32_t tail;            /* written by the client only (store-release) */
	uint32_t pad1[15];
	uint32_t flags;           /* written by the daemon only: BN_SQ_* */
	uint32_t pad2[15];
};

/* An op a daemon does not know ends its slot with BN_STATUS_ERROR / BN_E_UNSUPPORTED. */
enum bn_sq_op {
	BN_OP_GENERATE = 1,   /* run the request in slot `slot` */
	BN_OP_TOKENIZE = 2,   /* BN_FEAT_TEXT: the slot's text (or conversation) as token ids in
	                       * the output array; ends BN_STATUS_COMPLETE */
	BN_OP_DETOKENIZE = 3, /* BN_FEAT_TEXT: the prompt array's ids as bytes in the text
	                       * region; ends BN_STATUS_COMPLETE */
	BN_OP_SCORE = 4,      /* BN_FEAT_SCORE: the log-probability of each prompt token after the
	                       * first, given those before it, in the output and log-probability
	                       * arrays; ends BN_STATUS_COMPLETE */
	BN_OP_CLASSIFY = 5,   /* BN_FEAT_CLASSIFY: the log-probability of each token of N labels
	                       * after one prefix, the prefix computed once (PROTOCOL.md §6.12);
	                       * ends BN_STATUS_COMPLETE */
	BN_OP_GRAMMAR = 6,    /* BN_FEAT_GRAMMAR: compile the grammar in the text region (a struct
	                       * bn_grammar_head, then its text); ends BN_STATUS_COMPLETE with its
	                       * id in output[0], or BN_STATUS_ERROR with the reason as text */
	BN_OP_GRAMMAR_FREE = 7, /* BN_FEAT_GRAMMAR: forget the grammar whose id is prompt[0]; ends
	                       * BN_STATUS_COMPLETE (requests already using it are not affected) */
	BN_OP_EMBED = 8,      /* BN_FEAT_EMBED: the input's vector (PROTOCOL.md §6.14): n_tokens
	                       * binary32 words in the output array, pooled as embed_pooling says,
	                       * L2-normalised; ends BN_STATUS_COMPLETE */
};

/* How an embedding pools the final norm's output over the input's positions (the values of
 * llama.cpp's <arch>.pooling_type; PROTOCOL.md §6.14). */
enum bn_pooling {
	BN_POOLING_NONE = 0,  /* none: the model does not embed */
	BN_POOLING_MEAN = 1,  /* the mean over every position */
	BN_POOLING_CLS = 2,   /* the first position's */
	BN_POOLING_LAST = 3,  /* the last position's */
};

/* One submission: 16 bytes. */
struct bn_sqe {
	uint32_t op;          /* enum bn_sq_op */
	uint32_t slot;        /* slot index, < slot_count */
	uint32_t reserved[2]; /* must be 0 */
};

/* bn_slot.state */
enum bn_slot_state {
	BN_SLOT_FREE = 0,      /* owned by the client */
	BN_SLOT_SUBMITTED = 1, /* written by the client before it queues the slot */
	BN_SLOT_DONE = 2,      /* written by the daemon (store-release) after the terminal status */
};

/* bn_slot.events is the slot's one futex word: the daemon changes it (store-release) after
 * every published token and after storing DONE, so a waiter of either kind sleeps on it with
 * the value it read before checking what it waits for.
 * bn_slot.waiters: written by the client only, a plain store, before it sleeps in FUTEX_WAIT
 * (the kernel issues a full barrier before it reads the futex word, which orders this store).
 * The daemon reads it after a full fence and calls FUTEX_WAKE on `events` only when a bit
 * that applies is set. */
#define BN_WAIT_DONE (1U << 0)   /* a thread sleeps until the request ends */
#define BN_WAIT_TOKENS (1U << 1) /* a thread sleeps until a token arrives or the request ends */

/* bn_slot.status: the terminal status, valid once state is BN_SLOT_DONE. */
enum bn_status {
	BN_STATUS_NONE = 0,      /* not terminal yet */
	BN_STATUS_LENGTH = 1,    /* produced max_tokens tokens */
	BN_STATUS_EOS = 2,       /* the model produced eos_id (not stored in the output) */
	BN_STATUS_CANCELLED = 3, /* cancelled by the client */
	BN_STATUS_ERROR = 4,     /* slot.error says why */
	BN_STATUS_SHUTDOWN = 5,  /* the daemon is shutting down */
	BN_STATUS_STOP = 6,      /* the model produced one of the stop ids (not stored) */
	BN_STATUS_DEADLINE = 7,  /* slot.deadline_ms passed before the request ended */
	BN_STATUS_COMPLETE = 8,  /* a tokenize, detokenize or score request did all it was asked */
};

/* A slot's fixed part: 128 bytes, then (at offsets from the header) the prompt and output
 * token arrays. The client writes the request words and the prompt before it queues the slot;
 * the daemon copies them out once. The daemon writes the response words and output. */
struct bn_slot {
	/* cache line 0: synchronization */
	uint32_t state;       /* enum bn_slot_state */
	uint32_t cancel;      /* client writes 1 to cancel an in-flight request; 0 when submitting */
	uint32_t n_tokens;    /* daemon: output tokens published so far (store-release) */
	uint32_t status;      /* daemon: enum bn_status */
	uint32_t error;       /* daemon: enum bn_error when status is BN_STATUS_ERROR */
	uint32_t waiters;     /* client: BN_WAIT_* while a thread sleeps on this slot */
	uint32_t events;      /* daemon: futex word, changes on every token and on DONE */
	uint32_t n_text;      /* daemon (BN_FEAT_TEXT): text bytes published so far (store-release
	                       * before n_tokens) */
	uint64_t queue_ns;    /* daemon: time from the daemon seeing the request to its first step */
	uint64_t first_token_ns; /* daemon: time from seeing the request to the first token */
	uint64_t total_ns;    /* daemon: time from seeing the request to its terminal status */
	uint32_t prompt_tokens; /* daemon (BN_FEAT_TEXT): the token count of a text or conversation
	                         * prompt (also when too long) and of a tokenize request; of every
	                         * BN_OP_EMBED input */
	uint32_t embed_pooling; /* daemon (BN_OP_EMBED, at completion): enum bn_pooling and
	                         * BN_EMBED_* bits; else 0 */
	/* cache line 1: request (client-written) */
	uint32_t n_prompt;    /* prompt tokens in the prompt array, 1..slot_prompt_capacity */
	uint32_t max_tokens;  /* tokens to generate, 1..slot_output_capacity */
	uint32_t flags;       /* BN_REQ_*; unknown bits are an error */
	/* BN_FEAT_PARAMS: sampling and limits. All zero means greedy decoding with no stop ids,
	 * no penalties and no deadline (what a client that predates these words gets). */
	float temperature;    /* 0: greedy (argmax); else > 0, at most 100 */
	uint32_t top_k;       /* 0: off; else keep the k most likely tokens */
	float top_p;          /* 0: off; else in (0, 1]: smallest set with this much probability */
	float min_p;          /* 0: off; else in (0, 1]: drop tokens below min_p x the top one */
	float repetition_penalty; /* 0: off; else in (0, 100]: divide (multiply if < 0) the logits
	                           * of tokens in the prompt or the output so far */
	float presence_penalty;   /* in [-100, 100]: subtract from tokens in the output so far */
	float frequency_penalty;  /* in [-100, 100]: subtract x count in the output so far */
	uint32_t seed_lo;     /* with BN_REQ_SEED: the sampler's seed; else the daemon picks one */
	uint32_t seed_hi;
	uint32_t n_stop;      /* stop ids, stored in the prompt array after the n_prompt tokens */
	uint32_t n_logprobs;  /* with BN_REQ_LOGPROBS: alternatives per token, <= capacity */
	uint32_t deadline_ms; /* 0: none; else end with BN_STATUS_DEADLINE this long after the
	                       * daemon saw the request */
	uint32_t grammar_id;  /* with BN_REQ_GRAMMAR (BN_FEAT_GRAMMAR): the id a BN_OP_GRAMMAR of
	                       * this session returned; else must be 0 (a reserved word before) */
};

/* bn_slot.embed_pooling, above its low byte (an enum bn_pooling) */
#define BN_EMBED_TRAINED (1U << 8) /* the model was trained to embed: its file names a pooling
                                    * (an embedding model; its vectors may be truncated and
                                    * normalised again, Matryoshka-style); without it a
                                    * generative model pooled by the daemon's --pooling */

/* One log-probability record (BN_FEAT_LOGPROBS): 8 bytes. */
struct bn_logprob {
	uint32_t token;
	float logprob;        /* natural log of the token's probability */
};

/* bn_slot.flags */
#define BN_REQ_IGNORE_EOS (1U << 0) /* keep generating after eos_id; it is then stored like any token */
#define BN_REQ_SEED       (1U << 1) /* seed_lo/seed_hi hold the sampler seed */
#define BN_REQ_LOGPROBS   (1U << 2) /* write the log-probabilities of each output token */
/* BN_FEAT_TEXT (PROTOCOL.md §6.10): */
#define BN_REQ_TEXT       (1U << 3) /* the prompt is n_prompt bytes of UTF-8 in the text region;
                                     * the prompt array holds only the n_stop stop ids */
#define BN_REQ_CHAT       (1U << 4) /* the prompt is a conversation in the text region: a
                                     * struct bn_chat_head, then per message a struct
                                     * bn_chat_record, its role and its content */
#define BN_REQ_PARSE_SPECIAL (1U << 5) /* with BN_REQ_TEXT: special tokens' texts in the text are
                                        * those tokens (else plain text) */
#define BN_REQ_NO_BOS     (1U << 6) /* with BN_REQ_TEXT: no BOS first, whatever the model says */
#define BN_REQ_TEXT_OUT   (1U << 7) /* generate: write the output's text to the text region */
#define BN_REQ_SPECIAL_TEXT (1U << 8) /* text out: control tokens as their text (else nothing) */
#define BN_REQ_STRIP_SPACE (1U << 9) /* text out: drop one leading space (SentencePiece text
                                      * that starts a document) */
#define BN_REQ_SPECULATE  (1U << 10) /* generate: draft tokens from the prompt and output so
                                      * far and verify them in one step (speculative decoding;
                                      * exact: the same tokens, log-probabilities and seeded
                                      * samples as without) */
#define BN_REQ_GRAMMAR    (1U << 11) /* generate (BN_FEAT_GRAMMAR): the output is a sentence of the
                                      * grammar grammar_id names; the sampler sees only tokens
                                      * that keep it one, and an end-of-generation id only where
                                      * it is whole (PROTOCOL.md §6.13) */
#define BN_REQ_KNOWN_FLAGS (BN_REQ_IGNORE_EOS | BN_REQ_SEED | BN_REQ_LOGPROBS | BN_REQ_TEXT | \
			    BN_REQ_CHAT | BN_REQ_PARSE_SPECIAL | BN_REQ_NO_BOS | BN_REQ_TEXT_OUT | \
			    BN_REQ_SPECIAL_TEXT | BN_REQ_STRIP_SPACE | BN_REQ_SPECULATE | BN_REQ_GRAMMAR)

/* A conversation prompt (BN_REQ_CHAT), at the start of the text region; unaligned: copy the
 * words out. n_prompt is the whole conversation's bytes, head and records included. */
struct bn_chat_head {
	uint32_t chat_template; /* enum bn_chat_template; 0: the one the daemon chose */
	uint32_t n_messages;    /* >= 1 */
};
/* One message, followed by role_len bytes of role and content_len bytes of content (UTF-8,
 * no NUL in either, no padding); the next record follows at once. */
struct bn_chat_record {
	uint32_t role_len;    /* 1..32 bytes of [A-Za-z0-9_-] */
	uint32_t content_len;
};

/* A classify request (BN_OP_CLASSIFY, PROTOCOL.md §6.12). With ids, the prompt array holds
 * n_labels, n_prefix, the n_labels label lengths, the prefix's ids, then every label's ids in
 * order. With BN_REQ_TEXT the text region holds this head, the prefix's prefix_len bytes, then
 * per label a u32 length and that many bytes (unaligned: copy the words out). */
struct bn_classify_head {
	uint32_t n_labels;    /* >= 1 */
	uint32_t prefix_len;  /* bytes of prefix text that follow */
};

/* A grammar to compile (BN_OP_GRAMMAR, PROTOCOL.md §6.13), at the start of the text region;
 * unaligned: copy the words out. n_prompt is this head's 16 bytes plus the text's. */
struct bn_grammar_head {
	uint32_t kind;     /* enum bn_grammar_text_kind */
	uint32_t flags;    /* BN_GRAMMAR_JSON_* */
	uint32_t max_ws;   /* JSON forms: the longest run of whitespace between tokens, at most
	                    * 1000; 0: 20 */
	uint32_t reserved; /* must be 0 */
};
enum bn_grammar_text_kind {
	BN_GRAMMAR_KIND_JSON_SCHEMA = 1, /* a JSON Schema, drafts 4 to 2020-12 (PROTOCOL.md 6.13) */
	BN_GRAMMAR_KIND_JSON = 2,        /* any JSON value (JSON mode); the text must be empty */
	BN_GRAMMAR_KIND_REGEX = 3,       /* a regular expression the whole output matches */
	BN_GRAMMAR_KIND_GBNF = 4,        /* llama.cpp's GBNF, from the rule `root` */
};
/* bn_grammar_head.flags */
#define BN_GRAMMAR_JSON_OBJECT  (1U << 0) /* BN_GRAMMAR_KIND_JSON: an object at the top (OpenAI's
                                           * json_object) */
#define BN_GRAMMAR_JSON_COMPACT (1U << 1) /* JSON forms: no whitespace between tokens at all */
/* The longest grammar text a daemon compiles (the head not counted): a longer one is refused
 * with 1018 GRAMMAR_LIMIT. A daemon with BN_FEAT_GRAMMAR makes every slot's text region hold
 * the head and this much text (PROTOCOL.md §6.13). */
#define BN_GRAMMAR_TEXT_MAX (256u * 1024)

/* ------------------------------------------------------------------------------------------ */
/* Pinned layout                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* C11 only: C++ spells it static_assert, and the C build checks the layout for both. */
#ifndef __cplusplus

_Static_assert(sizeof(struct bn_hello) == 32, "bn_hello is 32 bytes");
_Static_assert(offsetof(struct bn_hello, requested_slots) == 12, "bn_hello layout");
_Static_assert(sizeof(struct bn_welcome) == 32, "bn_welcome is 32 bytes");
_Static_assert(offsetof(struct bn_welcome, segment_size) == 16, "bn_welcome layout");
_Static_assert(sizeof(struct bn_ctl_request) == 16, "bn_ctl_request is 16 bytes");
_Static_assert(sizeof(struct bn_ctl_reply) == 16, "bn_ctl_reply is 16 bytes");
_Static_assert(offsetof(struct bn_hello, weight) == 16, "bn_hello layout");
_Static_assert(sizeof(struct bn_vocab_head) == 32, "bn_vocab_head is 32 bytes");
_Static_assert(offsetof(struct bn_vocab_head, flags) == 28, "bn_vocab_head layout");
_Static_assert(sizeof(struct bn_vocab_entry) == 12, "bn_vocab_entry is 12 bytes");
_Static_assert(sizeof(struct bn_vocab_ext) == 32, "bn_vocab_ext is 32 bytes");
_Static_assert(offsetof(struct bn_vocab_ext, n_eog) == 20, "bn_vocab_ext layout");
_Static_assert(sizeof(struct bn_vocab_merge) == 12, "bn_vocab_merge is 12 bytes");
_Static_assert(offsetof(struct bn_ctl_reply, length) == 12, "bn_ctl_reply layout");

_Static_assert(sizeof(struct bn_shm_header) == 256, "bn_shm_header is 256 bytes");
_Static_assert(offsetof(struct bn_shm_header, segment_size) == 16, "header layout");
_Static_assert(offsetof(struct bn_shm_header, session_id) == 24, "header layout");
_Static_assert(offsetof(struct bn_shm_header, daemon_flags) == 28, "header layout");
_Static_assert(offsetof(struct bn_shm_header, sq_offset) == 32, "header layout");
_Static_assert(offsetof(struct bn_shm_header, sq_entries) == 36, "header layout");
_Static_assert(offsetof(struct bn_shm_header, sqes_offset) == 40, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_offset) == 44, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_count) == 48, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_size) == 52, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_prompt_offset) == 56, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_prompt_capacity) == 60, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_output_offset) == 64, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_output_capacity) == 68, "header layout");
_Static_assert(offsetof(struct bn_shm_header, vocab_size) == 72, "header layout");
_Static_assert(offsetof(struct bn_shm_header, context_length) == 76, "header layout");
_Static_assert(offsetof(struct bn_shm_header, bos_id) == 80, "header layout");
_Static_assert(offsetof(struct bn_shm_header, eos_id) == 84, "header layout");
_Static_assert(offsetof(struct bn_shm_header, backend) == 88, "header layout");
_Static_assert(offsetof(struct bn_shm_header, model_name) == 96, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_logprob_offset) == 160, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_logprob_capacity) == 164, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_text_offset) == 168, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_text_capacity) == 172, "header layout");
_Static_assert(offsetof(struct bn_shm_header, slot_piece_offset) == 176, "header layout");
_Static_assert(offsetof(struct bn_shm_header, lm_head) == 180, "header layout");
_Static_assert(offsetof(struct bn_shm_header, decode_layout) == 184, "header layout");
_Static_assert(offsetof(struct bn_shm_header, reserved) == 188, "header layout");
_Static_assert(offsetof(struct bn_shm_header, served_name) == 192, "header layout");
_Static_assert(sizeof(struct bn_model_name) == 64, "bn_model_name is 64 bytes");

_Static_assert(sizeof(struct bn_sq_ring) == 192, "bn_sq_ring is three cache lines");
_Static_assert(offsetof(struct bn_sq_ring, tail) == 64, "tail on its own cache line");
_Static_assert(offsetof(struct bn_sq_ring, flags) == 128, "flags on its own cache line");
_Static_assert(sizeof(struct bn_sqe) == 16, "bn_sqe is 16 bytes");

_Static_assert(sizeof(struct bn_classify_head) == 8, "bn_classify_head is 8 bytes");
_Static_assert(sizeof(struct bn_slot) == 128, "bn_slot fixed part is two cache lines");
_Static_assert(offsetof(struct bn_slot, cancel) == 4, "slot layout");
_Static_assert(offsetof(struct bn_slot, n_tokens) == 8, "slot layout");
_Static_assert(offsetof(struct bn_slot, status) == 12, "slot layout");
_Static_assert(offsetof(struct bn_slot, error) == 16, "slot layout");
_Static_assert(offsetof(struct bn_slot, waiters) == 20, "slot layout");
_Static_assert(offsetof(struct bn_slot, events) == 24, "slot layout");
_Static_assert(offsetof(struct bn_slot, n_text) == 28, "slot layout");
_Static_assert(offsetof(struct bn_slot, prompt_tokens) == 56, "slot layout");
_Static_assert(offsetof(struct bn_slot, embed_pooling) == 60, "slot layout");
_Static_assert(offsetof(struct bn_slot, queue_ns) == 32, "slot layout");
_Static_assert(offsetof(struct bn_slot, first_token_ns) == 40, "slot layout");
_Static_assert(offsetof(struct bn_slot, total_ns) == 48, "slot layout");
_Static_assert(offsetof(struct bn_slot, n_prompt) == 64, "slot layout");
_Static_assert(offsetof(struct bn_slot, max_tokens) == 68, "slot layout");
_Static_assert(offsetof(struct bn_slot, flags) == 72, "slot layout");
_Static_assert(offsetof(struct bn_slot, temperature) == 76, "slot layout");
_Static_assert(offsetof(struct bn_slot, top_k) == 80, "slot layout");
_Static_assert(offsetof(struct bn_slot, top_p) == 84, "slot layout");
_Static_assert(offsetof(struct bn_slot, min_p) == 88, "slot layout");
_Static_assert(offsetof(struct bn_slot, repetition_penalty) == 92, "slot layout");
_Static_assert(offsetof(struct bn_slot, presence_penalty) == 96, "slot layout");
_Static_assert(offsetof(struct bn_slot, frequency_penalty) == 100, "slot layout");
_Static_assert(offsetof(struct bn_slot, seed_lo) == 104, "slot layout");
_Static_assert(offsetof(struct bn_slot, n_stop) == 112, "slot layout");
_Static_assert(offsetof(struct bn_slot, n_logprobs) == 116, "slot layout");
_Static_assert(offsetof(struct bn_slot, deadline_ms) == 120, "slot layout");
_Static_assert(offsetof(struct bn_slot, grammar_id) == 124, "slot layout");
_Static_assert(sizeof(struct bn_grammar_head) == 16, "bn_grammar_head is 16 bytes");
_Static_assert(sizeof(struct bn_logprob) == 8, "bn_logprob is 8 bytes");
_Static_assert(sizeof(struct bn_chat_head) == 8, "bn_chat_head is 8 bytes");
_Static_assert(sizeof(struct bn_chat_record) == 8, "bn_chat_record is 8 bytes");
#endif /* __cplusplus */

#endif /* BITNET_SHM_H */
