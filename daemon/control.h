/* SPDX-License-Identifier: MIT */
/*
 * control.h — the control socket's ops (shm/PROTOCOL.md §10): STATS, VOCAB and TOKENIZER, and
 * the vocabulary the last two serve, opened once at start-up from the model file; text
 * requests get their tokenizer from that same payload (textreq.h).
 *
 * The loop receives a control request and calls one of these; each sends its reply on the
 * session's socket without blocking the loop for long (a reply that does not go is the
 * session's end: the loop closes it).
 */
#ifndef BITNETD_CONTROL_H
#define BITNETD_CONTROL_H

#include "model/vocab.h"
#include "textreq.h"

#include <stddef.h>
#include <stdint.h>

struct bn_grammar_vocab;
struct bn_model_desc;
struct bn_text_prep;
struct bn_session;
struct bn_stats_view;
struct bn_ctl_reply;

/* One model's vocabulary, as the control ops serve it and text requests use it. */
struct bn_control {
	struct bn_vocab_served vocab; /* sealed memfds of the VOCAB and TOKENIZER payloads */
	struct bn_text_service text;  /* the tokenizer of text requests, from that payload */
	struct bn_grammar_vocab *grammar_vocab; /* the grammar engine's, when textprep made it:
						 * the grammar service takes it */
};

/* Opens the vocabulary of the model file the backend loaded (path; the --pre-tokenizer and
 * --chat-template choices, NULL: the file's) and, when it can encode text, the text service:
 * what `prep` built while the backend loaded, when it ran (textprep.h; its results are
 * taken), else built here. A file without one, or with one refused, is served without
 * (logged): the model itself loaded, and token ids still work. */
void bn_control_open(struct bn_control *c, const char *path, const char *pre_tokenizer,
		     const char *chat_template, const struct bn_model_desc *model,
		     struct bn_text_prep *prep);
void bn_control_close(struct bn_control *c);

/* Whether two vocabularies serve the same bytes (a reload that keeps its sessions). */
int bn_control_same(const struct bn_control *a, const struct bn_control *b);

/* Sends a control reply head and its payload (len bytes of body), within a bounded time.
 * 0, or -1 when the reply was not accepted. */
int bn_control_send(int sock_fd, struct bn_ctl_reply *head, const void *body, size_t len);

/* BN_CTL_VOCAB and BN_CTL_TOKENIZER: the reply head and the sealed memfd. 0, or -1 when the
 * reply was not accepted. */
int bn_control_reply_vocab(const struct bn_control *c, int sock_fd, uint32_t op);

/* The STATS text's buffer, grown by bn_stats_render. */
struct bn_stats_text {
	char *buf;
	size_t cap;
};

/* BN_CTL_STATS: the counters, the gauges the caller filled into *v (the models') and one row
 * per session of the table. 0, or -1 when the reply was not accepted. */
int bn_control_reply_stats(struct bn_stats_text *t, int sock_fd, uint32_t session_id,
			   struct bn_stats_view *v, struct bn_session *const *sessions,
			   uint32_t n_sessions);

#endif /* BITNETD_CONTROL_H */
