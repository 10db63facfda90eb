/* SPDX-License-Identifier: MIT */
/* textprep.c — the model's text side built while the backend loads (textprep.h). */
#include "textprep.h"

#include "common/clock.h"
#include "config.h"
#include "grammar/grammar.h"
#include "grammars.h"

#include <string.h>
#include <sys/mman.h>

static void *prepare(void *arg)
{
	struct bn_text_prep *p = arg;
	uint64_t t0 = bn_now_ns();
	/* 0 for the vocabulary size: the adopter checks it against the loaded model. */
	p->vocab_rc = bn_vocab_serve_open(p->path, 0, &p->opt, &p->vocab, p->err);
	if (p->vocab_rc == 1) {
		size_t size = p->vocab.tokenizer_bytes;
		void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, p->vocab.tokenizer_fd, 0);
		p->text_rc = m == MAP_FAILED ? -1 : bn_text_service_open(&p->text, m, size);
		if (m != MAP_FAILED)
			munmap(m, size);
		if (p->text_rc == 0 && p->text.vocab &&
		    bn_grammar_service_vocab(p->text.vocab, &p->grammar) < 0)
			p->grammar = NULL;
	}
	p->ns = bn_now_ns() - t0;
	return NULL;
}

void bn_text_prep_start(struct bn_text_prep *p, const struct bn_config *cfg)
{
	memset(p, 0, sizeof(*p));
	p->vocab.vocab_fd = p->vocab.tokenizer_fd = -1;
	if (!cfg->model_path || strcmp(cfg->backend, "loopback") == 0)
		return;
	p->path = cfg->model_path;
	p->opt = (struct bn_vocab_options){ .pre_tokenizer = cfg->pre_tokenizer,
					    .chat_template = cfg->chat_template };
	if (pthread_create(&p->thread, NULL, prepare, p) == 0)
		p->state = BN_TEXT_PREP_RUNNING;
}

void bn_text_prep_finish(struct bn_text_prep *p)
{
	if (p->state != BN_TEXT_PREP_RUNNING)
		return;
	pthread_join(p->thread, NULL);
	p->state = BN_TEXT_PREP_DONE;
}

void bn_text_prep_free(struct bn_text_prep *p)
{
	bn_text_prep_finish(p);
	bn_vocab_served_close(&p->vocab);
	bn_text_service_close(&p->text);
	bn_grammar_vocab_unref(p->grammar);
	p->grammar = NULL;
}
