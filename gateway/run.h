/* SPDX-License-Identifier: MIT */
/*
 * run.h — a job's choices run on the daemon: submitted together on one lease, their tokens
 * read as they come, turned into text (valid UTF-8, stop strings cut out: text that could be
 * the start of a stop string is held back until it is not), with their log-probabilities.
 * The caller advances the run in slices (gw_run_advance), so it can watch its HTTP client in
 * between and cancel (gw_run_cancel) when it goes; a streaming response sends what each slice
 * released (emitted counters), a plain one waits for the end.
 */
#ifndef BITNET_GATEWAY_RUN_H
#define BITNET_GATEWAY_RUN_H

#include "job.h"
#include "ring.h"

struct gw_choice {
	uint32_t index;           /* in the response's choices */
	struct gw_prompt *prompt;
	struct bn_handle *handle; /* NULL once released (or never submitted) */
	struct bn_text_stream *stream;
	uint32_t have;            /* output tokens read */
	char *text;               /* released text: the reply so far, stop strings cut out */
	size_t text_len, text_cap;
	char *pending;            /* decoded, not yet released: could begin a stop string */
	size_t pending_len, pending_cap;
	struct bn_logprob *lp;    /* [have] the chosen tokens */
	struct bn_logprob *alt;   /* [have * top_logprobs] their alternatives */
	uint32_t lp_cap;
	const char *finish;       /* NULL while it runs; "stop" or "length" */
	struct gw_error error;    /* status != 0: it failed */
	size_t emitted_text;      /* bytes of text a stream has sent */
	uint32_t emitted_lp;      /* tokens whose log-probabilities a stream has sent */
	size_t emitted_offset;    /* text_offset after them (completions' logprobs) */
	int emitted_role, emitted_finish;
	int emitted_call;         /* a tool call's id, type and name are sent */
	char call_id[32];         /* with tools: "call_..." */
};

/* The prompt's own log-probabilities (completions, echo with logprobs): position i >= 1. */
struct gw_prompt_scores {
	struct bn_logprob *lp;    /* [n_ids - 1] */
	struct bn_logprob *top;   /* [(n_ids - 1) * top_logprobs] */
	uint32_t n;
};

struct gw_run {
	struct gw_job *job;
	struct gw_model *model;
	struct gw_lease lease;
	struct gw_choice *choices;
	size_t n_choices, n_done;
	struct gw_prompt_scores *scores; /* [n_prompts] with echo and logprobs, else NULL */
	int64_t deadline_ns;
	int daemon_gone;          /* a call said the session is gone: its lease ends so */
	char id[40];              /* "cmpl-..." or "chatcmpl-..." */
	long long created;
};

/* Starts every choice of job on lease (held by the run from now on). 0, or -1 with err set
 * when nothing could start (every choice failed alike; otherwise an array's prompts fail
 * alone). */
int gw_run_start(struct gw_run *r, struct gw_job *job, struct gw_model *m,
		 const struct gw_lease *lease, int64_t deadline_ns, struct gw_error *err);
/* Waits up to slice_ns for tokens, then takes what came. 1 when every choice has ended. */
int gw_run_advance(struct gw_run *r, int64_t slice_ns);
/* The HTTP client went away: every running choice is cancelled in the daemon. */
void gw_run_cancel(struct gw_run *r);
/* Releases the handles; the lease goes back to pool. */
void gw_run_free(struct gw_run *r, struct gw_pool *pool);

/* Output tokens of every choice, for usage. */
uint32_t gw_run_completion_tokens(const struct gw_run *r);
uint32_t gw_run_prompt_tokens(const struct gw_run *r);
/* Every choice failed with the same status: the first one's error, else NULL. */
const struct gw_error *gw_run_failure(const struct gw_run *r);

#endif /* BITNET_GATEWAY_RUN_H */
