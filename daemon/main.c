/* SPDX-License-Identifier: MIT */
/*
 * bitnetd — serve BitNet models to the programs of one machine over shared memory.
 * Start-up is the only place with fatal errors (documented exit codes in config.h and --help);
 * once serving, a failure ends the request or session it belongs to, never the daemon.
 */
#include "common/log.h"
#include "config.h"
#include "hf_model.h"
#include "listen.h"
#include "loop.h"
#include "models.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

/* Every hf:REPO model becomes a file (its path in the model's options). */
static int resolve_names(struct bn_config *cfg)
{
	for (uint32_t i = 0; i < cfg->n_models; i++) {
		struct bn_model_options *m = &cfg->models[i];
		const char *source = m->source;
		char file[PATH_MAX];
		if (!source)
			continue;
		if (bn_hf_model_resolve(&source, file, sizeof(file)) < 0)
			return -1;
		snprintf(m->path, sizeof(m->path), "%s", source);
	}
	cfg->model_path = cfg->models[0].source ? cfg->models[0].path : NULL;
	return 0;
}

static int serve(struct bn_config *cfg)
{
	/* A model name (hf:REPO) becomes a file before the signals are blocked: a first pull can
	 * take minutes, and Ctrl-C or a stop must end it (the partial file stays for the next). */
	if (resolve_names(cfg) < 0)
		return BN_EXIT_BACKEND;
	/* A stop asked for during the loads is served once the loop runs (bn_signals_block). */
	if (bn_signals_block() < 0)
		return BN_EXIT_SYSTEM;
	int exit_code;
	struct bn_models *models = bn_models_open(cfg, &exit_code);
	if (!models)
		return exit_code;
	struct bn_loop *loop = bn_loop_new(cfg, models, &exit_code);
	if (!loop) {
		bn_models_close(models);
		return exit_code;
	}
	bn_loop_run(loop);
	bn_loop_free(loop);
	bn_models_close(models);
	return BN_EXIT_OK;
}

int main(int argc, char **argv)
{
	struct bn_config cfg;
	int rc = bn_config_parse(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? BN_EXIT_OK : BN_EXIT_USAGE;
	bn_log_set_level(cfg.log_level);
	int exit_code = serve(&cfg);
	bn_config_free(&cfg);
	return exit_code;
}
