/* SPDX-License-Identifier: MIT */
/*
 * render.h — a run as OpenAI's response objects: the whole completion (chat.completion,
 * text_completion) or, for a stream, the chunks of what each slice released, as server-sent
 * events ("data: {chunk}\n\n", then "data: [DONE]\n\n").
 */
#ifndef BITNET_GATEWAY_RENDER_H
#define BITNET_GATEWAY_RENDER_H

#include "run.h"

#include <stddef.h>

/* A growing byte buffer. */
struct gw_buf {
	char *data;
	size_t len, cap;
};
int gw_buf_add(struct gw_buf *b, const char *s, size_t n);
void gw_buf_free(struct gw_buf *b);

/* The finished run's response body (compact JSON), malloc'd; NULL without memory. */
char *gw_render_response(const struct gw_run *r);
/* Appends to out the events for what the run released since the last call (a choice that
 * ended: its last chunk with its finish_reason; one that failed: an error object with its
 * index first), and with final (every choice ended) the usage chunk when asked for and
 * [DONE]. 0 or -ENOMEM. */
int gw_render_stream(struct gw_run *r, int final, struct gw_buf *out);
/* An error inside a stream (the response's status is already sent): the error object as one
 * event, then [DONE]. */
int gw_render_stream_error(const struct gw_error *e, struct gw_buf *out);

#endif /* BITNET_GATEWAY_RENDER_H */
