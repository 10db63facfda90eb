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

struct bn_config;
struct bn_grammar_vocab;
struct bn_model_desc;
struct bn_text_prep;
struct bn_sched;
struct bn_session;

struct bn_control {
	struct bn_vocab_served vocab; /* sealed memfds of the VOCAB and TOKENIZER payloads */
	struct bn_text_service text;  /* the tokenizer of text requests, from that payload */
	struct bn_grammar_vocab *grammar_vocab; /* the grammar engine's, when textprep made it:
						 * the grammar service takes it */
	char *stats_buf;              /* STATS text, grown by bn_stats_render */
	size_t stats_cap;
};

/* Opens the vocabulary of the file the backend loaded (cfg->model_path) and, when it can
 * encode text, the text service: what `prep` built while the backend loaded, when it ran
 * (textprep.h; its results are taken), else built here. A file without one, or with one
 * refused, is served without (logged): the model itself loaded, and token ids still work. */
void bn_control_open(struct bn_control *c, const struct bn_config *cfg,
		     const struct bn_model_desc *model, struct bn_text_prep *prep);
void bn_control_close(struct bn_control *c);

/* BN_CTL_VOCAB and BN_CTL_TOKENIZER: the reply head and the sealed memfd. 0, or -1 when the
 * reply was not accepted. */
int bn_control_reply_vocab(const struct bn_control *c, int sock_fd, uint32_t op);

/* BN_CTL_STATS (any other op is answered BN_E_INVALID): the counters, the scheduler's gauges
 * and one row per session of the table. 0, or -1 when the reply was not accepted. */
int bn_control_reply_stats(struct bn_control *c, int sock_fd, uint32_t session_id, uint32_t op,
			   struct bn_sched *sched, struct bn_session *const *sessions,
			   uint32_t n_sessions);

#endif /* BITNETD_CONTROL_H */
