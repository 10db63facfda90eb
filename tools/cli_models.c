/* SPDX-License-Identifier: MIT */
/*
 * bitnet-cli models: the daemon's models and their state (shm/PROTOCOL.md §15), and the
 * load, unload and reload commands.
 */
#define _GNU_SOURCE
#include "bitnet_client.h"
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* When a model went idle, as local time (or "-" when it is busy or not loaded). */
static const char *idle_text(int64_t ms, char *buf, size_t cap)
{
	if (ms <= 0)
		return "-";
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	if (!localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm))
		return "-";
	return buf;
}

static void print_model(const struct bn_model_status *m)
{
	char idle[32];
	printf("%-24s %-9s %12llu %12llu %12llu %7u %7u %-19s %s%s%s%s\n", m->name,
	       bn_model_state_name(m->state), (unsigned long long)m->bytes,
	       (unsigned long long)m->weight_bytes, (unsigned long long)m->kv_bytes, m->waiting,
	       m->running, idle_text(m->idle_since_ms, idle, sizeof(idle)),
	       m->is_default ? "default " : "", m->pinned ? "pinned " : "",
	       m->error[0] ? "error: " : "", m->error);
}

static void print_header(void)
{
	printf("%-24s %-9s %12s %12s %12s %7s %7s %-19s %s\n", "NAME", "STATE", "BYTES",
	       "WEIGHTS", "KV", "WAITING", "RUNNING", "IDLE_SINCE", "");
}

static int list(struct bn_client *c)
{
	int n = bn_models_list(c, NULL, 0);
	if (n < 0)
		return cli_failed("models", "list", n);
	struct bn_model_status *ms = calloc((size_t)n + 1, sizeof(*ms));
	if (!ms)
		return cli_failed("models", "list", -ENOMEM);
	int got = bn_models_list(c, ms, (size_t)n);
	if (got < 0) {
		free(ms);
		return cli_failed("models", "list", got);
	}
	print_header();
	for (int i = 0; i < got && i < n; i++)
		print_model(&ms[i]);
	free(ms);
	return 0;
}

int cli_models(struct bn_client *c, int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "list";
	const char *name = argc > 2 ? argv[2] : NULL;
	if (argc > 3 || (!strcmp(what, "list") && name))
		return cli_usage("models", "unexpected argument '%s'", argv[argc - 1]);
	if (!strcmp(what, "list"))
		return list(c);
	struct bn_model_status st;
	int rc;
	if (!strcmp(what, "reload")) {
		rc = bn_models_reload(c, name);
		return rc < 0 ? cli_failed("models", "reload", rc) : list(c);
	}
	if (!name)
		return cli_usage("models", "%s needs a model's name", what);
	if (!strcmp(what, "load"))
		rc = bn_models_load(c, name, &st);
	else if (!strcmp(what, "unload"))
		rc = bn_models_unload(c, name, &st);
	else
		return cli_usage("models", "'%s' is not list, load, unload or reload", what);
	if (rc == 0 || rc == -BN_E_MODEL_LOAD) {
		print_header();
		print_model(&st);
	}
	return rc < 0 ? cli_failed("models", what, rc) : 0;
}
