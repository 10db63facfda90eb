/* SPDX-License-Identifier: MIT */
/*
 * model_ops.c — the control requests about models (shm/PROTOCOL.md §15): MODELS, answered at
 * once, and LOAD, UNLOAD and RELOAD, answered when the model got there. Only root and the
 * daemon's own user may load, unload or reload: those reach every client of the model.
 */
#define _GNU_SOURCE
#include "model_ops.h"

#include "common/log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t bn_model_op_extra(uint32_t op)
{
	return op == BN_CTL_MODEL_LOAD || op == BN_CTL_MODEL_UNLOAD || op == BN_CTL_MODEL_RELOAD
		       ? (uint32_t)sizeof(struct bn_model_name)
		       : 0;
}

static int reply(struct bn_session *s, uint32_t op, uint32_t error, const char *text, size_t len)
{
	struct bn_ctl_reply head = { .magic = BN_CTL_REPLY_MAGIC, .op = op, .error = error,
				     .length = (uint32_t)len };
	return bn_control_send(s->sock_fd, &head, text, len) < 0 ? -1 : 0;
}

/* The lines of e (NULL: every model); a command's answer says 1021 when one failed. */
static int reply_lines(struct bn_models *m, struct bn_session *s, uint32_t op,
		       const struct bn_model_entry *e)
{
	char *text;
	long len = 0;
	uint32_t error = 0;
	if (e) {
		text = malloc(1024);
		if (text)
			len = (long)bn_model_line(m, e, text, 1024);
		error = e->state == BN_MODEL_FAILED ? BN_E_MODEL_LOAD : 0;
	} else {
		len = bn_models_text(m, &text);
		for (uint32_t i = 0; op != BN_CTL_MODELS && i < bn_models_count(m); i++)
			if (bn_models_at(m, i)->state == BN_MODEL_FAILED)
				error = BN_E_MODEL_LOAD;
	}
	if (!text || len < 0)
		return reply(s, op, BN_E_AGAIN, NULL, 0);
	int rc = reply(s, op, error, text, (size_t)len);
	free(text);
	return rc;
}

static int may_command(const struct bn_session *s)
{
	return s->peer_uid == 0 || s->peer_uid == geteuid();
}

int bn_model_op(struct bn_models *m, struct bn_session *s, const struct bn_ctl_request *q,
		uint64_t now)
{
	if (q->op == BN_CTL_MODELS)
		return reply_lines(m, s, q->op, NULL);
	char name[BN_MODEL_NAME_MAX + 1];
	if (bn_model_name_read(s->rx + sizeof(*q), name) < 0)
		return -2; /* a protocol violation */
	struct bn_model_entry *e = name[0] || q->op != BN_CTL_MODEL_RELOAD ? bn_models_find(m, name)
									  : NULL;
	if (!may_command(s))
		return reply(s, q->op, BN_E_DENIED, NULL, 0);
	if (!e && (name[0] || q->op != BN_CTL_MODEL_RELOAD))
		return reply(s, q->op, BN_E_MODEL_NOT_FOUND, NULL, 0);
	bn_log_info("msg=\"model command\" session=%u uid=%u op=%s model=%s", s->id,
		    (unsigned)s->peer_uid,
		    q->op == BN_CTL_MODEL_LOAD ? "load" : q->op == BN_CTL_MODEL_UNLOAD ? "unload" : "reload",
		    e ? e->opt.name : "(all)");
	s->ctl_wait_op = q->op;
	s->ctl_wait_entry = e;
	if (q->op == BN_CTL_MODEL_LOAD) {
		bn_model_command_load(m, e);
	} else if (q->op == BN_CTL_MODEL_UNLOAD) {
		s->ctl_wait_mark = e->counters.unloads[BN_UNLOAD_COMMAND];
		bn_model_command_unload(m, e, now);
	} else {
		bn_model_command_reload(m, e, now);
	}
	int done = bn_model_op_poll(m, s);
	return done == 0 ? 1 : done < 0 ? -1 : 0;
}

/* Whether the command s waits on is done. */
static int command_done(const struct bn_models *m, const struct bn_session *s)
{
	const struct bn_model_entry *e = s->ctl_wait_entry;
	switch (s->ctl_wait_op) {
	case BN_CTL_MODEL_LOAD:
		return !e->load_asked && (e->state == BN_MODEL_LOADED || e->state == BN_MODEL_FAILED);
	case BN_CTL_MODEL_UNLOAD:
		return !e->unload_asked && e->state != BN_MODEL_UNLOADING &&
		       (e->state != BN_MODEL_LOADED ||
			e->counters.unloads[BN_UNLOAD_COMMAND] != s->ctl_wait_mark);
	default:
		return e ? e->reloads == e->reload_asked : bn_models_reloads_done(m);
	}
}

int bn_model_op_poll(struct bn_models *m, struct bn_session *s)
{
	if (!s->ctl_wait_op || !command_done(m, s))
		return 0;
	uint32_t op = s->ctl_wait_op;
	s->ctl_wait_op = 0;
	return reply_lines(m, s, op, s->ctl_wait_entry) < 0 ? -1 : 1;
}
