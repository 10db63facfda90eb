/* SPDX-License-Identifier: MIT */
/*
 * model_pull.c — `bitnet-model pull`: a model by name from the Hugging Face Hub, as
 * `huggingface-cli download` and `ollama pull` do it, into the cache they share with Python
 * (hub/hub.h). Everything for a person goes to stderr; stdout carries only what a script
 * reads: the file's path, as the last line (`--dry-run`: key=value lines, the path last).
 */
#include "model_pull.h"

#include "hub.h"
#include "model_cmd.h"
#include "pull_progress.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define EXIT_PULL 1

static const char usage_text[] =
	"Usage: bitnet-model pull REPO[:FILE] [OPTIONS]\n"
	"\n"
	"Downloads a GGUF file of a Hugging Face Hub repository into huggingface_hub's cache and\n"
	"prints its path (the last line on stdout). Without FILE: the repository's only GGUF\n"
	"file, else its I2_S, TQ2_0 or TQ1_0 file; otherwise the error lists the files.\n"
	"A download is resumed where an earlier one stopped, checked against the Hub's sha256,\n"
	"and shared with Python's huggingface_hub (the same cache, the same locks).\n"
	"\n"
	"  --revision REV    a branch, tag or commit (default main)\n"
	"  --cache-dir DIR   the cache (default $HF_HUB_CACHE, else $HF_HOME/hub, else\n"
	"                    ~/.cache/huggingface/hub)\n"
	"  --dry-run         say which file, how big and whether it is cached; fetch nothing\n"
	"  --quiet           no progress, only errors\n"
	"\n"
	"Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN or the file\n"
	"HF_TOKEN_PATH (default $HF_HOME/token) for gated and private repositories,\n"
	"HF_HUB_OFFLINE=1 (the cache only), https_proxy.\n"
	"Exit status: 0, 1 the pull failed (the message says why), 2 bad usage.\n";

struct pull_args {
	const char *name, *revision, *cache_dir;
	int dry_run, quiet, help;
};

static int usage(const char *what, const char *arg)
{
	return model_cmd_usage("pull", what, arg);
}

static int get_args(int argc, char **argv, struct pull_args *a)
{
	enum { O_REVISION = 256, O_CACHE_DIR, O_DRY_RUN, O_QUIET, O_HELP };
	static const struct option opts[] = {
		{ "revision", required_argument, NULL, O_REVISION },
		{ "cache-dir", required_argument, NULL, O_CACHE_DIR },
		{ "dry-run", no_argument, NULL, O_DRY_RUN },
		{ "quiet", no_argument, NULL, O_QUIET },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	int opt;
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (opt) {
		case O_REVISION: a->revision = optarg; break;
		case O_CACHE_DIR: a->cache_dir = optarg; break;
		case O_DRY_RUN: a->dry_run = 1; break;
		case O_QUIET: a->quiet = 1; break;
		case O_HELP: a->help = 1; return 0;
		default: return model_cmd_bad_option("pull", opt, argv[optind - 1]);
		}
	}
	if (optind == argc)
		return usage("which model? give REPO[:FILE], e.g.",
			     "microsoft/bitnet-b1.58-2B-4T-gguf");
	a->name = argv[optind++];
	if (optind < argc)
		return usage("unexpected argument", argv[optind]);
	return 0;
}

static void print_dry_run(const struct bn_hub_result *r, const char *revision)
{
	printf("repo=%s\nrevision=%s\ncommit=%s\nfile=%s\nsize=%llu\ncached=%s\npath=%s\n",
	       r->repo, revision, r->commit, r->file, (unsigned long long)r->size,
	       r->was_cached ? "yes" : "no", r->path);
}

int model_pull_main(int argc, char **argv)
{
	struct pull_args a = { 0 };
	int rc = get_args(argc, argv, &a);
	if (rc || a.help) {
		if (a.help)
			fputs(usage_text, stdout);
		return rc;
	}
	struct bn_hub_options o;
	struct bn_hub_result r;
	struct pull_progress progress;
	char err[4096];
	pull_progress_init(&progress, a.quiet);
	struct bn_hub_reporter report = pull_progress_reporter(&progress);
	if (a.cache_dir && strlen(a.cache_dir) >= sizeof(o.cache_dir))
		return usage("--cache-dir is too long:", a.cache_dir);
	rc = bn_hub_options_from_env(&o, err, sizeof(err));
	if (rc == 0 && a.cache_dir)
		strcpy(o.cache_dir, a.cache_dir);
	if (rc == 0) {
		o.dry_run = a.dry_run;
		o.report = &report;
		rc = bn_hub_pull(&o, a.name, a.revision, &r, err, sizeof(err));
	}
	bn_hub_options_clear(&o);
	if (rc < 0) {
		fprintf(stderr, "bitnet-model pull: %s\n", err);
		return EXIT_PULL;
	}
	if (a.dry_run)
		print_dry_run(&r, a.revision ? a.revision : BN_HUB_DEFAULT_REVISION);
	else
		printf("%s\n", r.path);
	return 0;
}
