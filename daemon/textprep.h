/* SPDX-License-Identifier: MIT */
/*
 * textprep.h — the model's text side built while the backend loads the weights.
 *
 * The vocabulary payloads (model/vocab.h), the text service's tokenizer (textreq.h) and the
 * grammar engine's vocabulary (grammars.h) come from the model file's metadata alone and cost
 * a few hundred milliseconds for LLaMA-3's 128,256 tokens and 280,147 merges: as much as a
 * start from the weights cache spends on the weights. They are built on a thread of their
 * own from the moment the file is known, and bn_control_open adopts them (after checking the
 * vocabulary against the model the backend loaded). The thread logs nothing: what it decided
 * is logged by whoever adopts it, in the order a start without it logs.
 */
#ifndef BITNETD_TEXTPREP_H
#define BITNETD_TEXTPREP_H

#include "model/vocab.h"
#include "textreq.h"

#include <pthread.h>
#include <stdint.h>

struct bn_config;
struct bn_grammar_vocab;

struct bn_text_prep {
	pthread_t thread;
	enum { BN_TEXT_PREP_NONE, BN_TEXT_PREP_RUNNING, BN_TEXT_PREP_DONE } state;
	const char *path;                 /* the model file */
	struct bn_vocab_options opt;
	/* What the thread made (each taken by its adopter, then NULL or closed). */
	int vocab_rc;                     /* bn_vocab_serve_open's result */
	char err[BN_VOCAB_ERR_LEN];
	struct bn_vocab_served vocab;
	int text_rc;                      /* bn_text_service_open's (0 also without text) */
	struct bn_text_service text;
	struct bn_grammar_vocab *grammar; /* NULL: not made (the service builds and logs) */
	uint64_t ns;                      /* the thread's time, for the log */
};

/* Starts the thread for a model file a model backend will load (nothing for the loopback
 * backend or without a file, or when the thread cannot start: the text side is then built
 * where it is adopted, as before). */
void bn_text_prep_start(struct bn_text_prep *p, const struct bn_config *cfg);
/* Waits for the thread; p's results are then the adopter's to take. */
void bn_text_prep_finish(struct bn_text_prep *p);
/* Waits for the thread and frees whatever nobody took. */
void bn_text_prep_free(struct bn_text_prep *p);

#endif /* BITNETD_TEXTPREP_H */
