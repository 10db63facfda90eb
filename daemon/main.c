/* SPDX-License-Identifier: MIT */
/*
 * bitnetd — serve a BitNet model to the programs of one machine over shared memory.
 * Start-up is the only place with fatal errors (documented exit codes in config.h and --help);
 * once serving, a failure ends the request or session it belongs to, never the daemon.
 */
#include "backends/backend.h"
#include "common/log.h"
#include "config.h"
#include "hf_model.h"
#include "listen.h"
#include "loop.h"
#include "textprep.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

static int open_named(const char *name, const struct bn_config *cfg, int probing,
		      const struct bn_backend_ops **ops, void **backend, struct bn_model_desc *model)
{
	*ops = bn_backend_find(name);
	if (!*ops) {
		bn_log_error("msg=\"unknown backend or not in this build\" backend=%s", name);
		return -1;
	}
	struct bn_backend_options opt = {
		.model_path = cfg->model_path,
		.cache_dir = cfg->cache_dir,
		/* The second half is for forked sequences: a classify request's labels (sched.h). */
		.max_seqs = 2 * cfg->max_batch,
		.vocab_size = cfg->vocab_size,
		.step_delay_us = cfg->step_delay_us,
		.n_threads = cfg->threads,
		.lm_head_mode = cfg->lm_head_mode,
		.base3_decode = cfg->base3_decode,
		.device_index = cfg->device_index,
		.cuda_kernels = cfg->cuda_kernels,
		.probing = probing,
		.activation = cfg->activation,
	};
	if ((*ops)->open(&opt, model, backend) < 0) {
		if (!probing)
			bn_log_error("msg=\"backend failed to start\" backend=%s", name);
		return -1;
	}
	bn_log_info("msg=\"model loaded\" backend=%s model=\"%s\" vocab_size=%u context_length=%u",
		    name, model->name, model->vocab_size, model->context_length);
	return 0;
}

/* Whether the default KV pool has room on the device just opened: without --kv-memory, one
 * whose memory is taken (by the weights, or by other processes) down to the scratch headroom
 * would leave the scheduler no KV block, and the daemon would not start. */
static int device_has_kv_room(const struct bn_config *cfg, const struct bn_model_desc *model)
{
	if (!model->kv_on_device || cfg->kv_memory)
		return 1;
	uint64_t block = model->kv_bytes_per_token * cfg->kv_block_tokens;
	if (bn_model_device_kv_room(model, block))
		return 1;
	bn_log_info("msg=\"the GPU has no memory left for the KV cache\" free_mib=%llu headroom_mib=%llu",
		    (unsigned long long)(model->device_free >> 20),
		    (unsigned long long)(model->device_headroom >> 20));
	return 0;
}

/* --device auto: the GPU when this build has the cuda backend, it opens and its memory has
 * room for the default KV pool; else the CPU. */
static int open_backend(const struct bn_config *cfg, const struct bn_backend_ops **ops,
			void **backend, struct bn_model_desc *model)
{
	if (strcmp(cfg->backend, "auto") != 0)
		return open_named(cfg->backend, cfg, 0, ops, backend, model);
	if (!bn_backend_find("cuda")) {
		bn_log_info("msg=\"--device auto: this build has no cuda backend (built without nvcc); using the cpu\"");
		return open_named("cpu", cfg, 0, ops, backend, model);
	}
	if (open_named("cuda", cfg, 1, ops, backend, model) == 0) {
		if (device_has_kv_room(cfg, model))
			return 0;
		(*ops)->close(*backend);
		*backend = NULL;
	}
	bn_log_info("msg=\"--device auto: the GPU cannot be used (reason above); using the cpu\"");
	return open_named("cpu", cfg, 0, ops, backend, model);
}

int main(int argc, char **argv)
{
	struct bn_config cfg;
	int rc = bn_config_parse(&cfg, argc, argv);
	if (rc != 0)
		return rc > 0 ? BN_EXIT_OK : BN_EXIT_USAGE;
	bn_log_set_level(cfg.log_level);
	/* A model name (hf:REPO) becomes a file before the signals are blocked: a first pull can
	 * take minutes, and Ctrl-C or a stop must end it (the partial file stays for the next). */
	static char model_file[PATH_MAX];
	if (bn_hf_model_resolve(&cfg.model_path, model_file, sizeof(model_file)) < 0)
		return BN_EXIT_BACKEND;
	/* A stop asked for during the load is served once the loop runs (bn_signals_block). */
	if (bn_signals_block() < 0)
		return BN_EXIT_SYSTEM;

	/* The vocabulary and tokenizers are built while the backend loads the weights. */
	static struct bn_text_prep prep;
	bn_text_prep_start(&prep, &cfg);
	const struct bn_backend_ops *ops;
	void *backend = NULL;
	struct bn_model_desc model;
	if (open_backend(&cfg, &ops, &backend, &model) < 0) {
		bn_text_prep_free(&prep);
		return BN_EXIT_BACKEND;
	}
	bn_model_describe_embedding(&model, cfg.pooling);

	int exit_code;
	struct bn_loop *loop = bn_loop_new(&cfg, ops, backend, &model, &prep, &exit_code);
	bn_text_prep_free(&prep); /* what the loop did not take */
	if (!loop) {
		ops->close(backend);
		return exit_code;
	}
	bn_loop_run(loop);
	bn_loop_free(loop);
	ops->close(backend);
	return BN_EXIT_OK;
}
