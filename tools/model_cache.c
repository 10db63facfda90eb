/* SPDX-License-Identifier: MIT */
/*
 * model_cache.c — `bitnet-model cache`: what the daemon's packed-weight cache directory holds
 * (one file per model, option set and kernel variant, 0.5 to 4 GB each), which files can
 * still be used, and with --prune the removal of those that cannot (bn_wcache_prune, the
 * function the daemon's cache writer runs before it writes a cache). Output is key=value
 * lines on stdout: the directory, one line per file, then the totals.
 */
#include "model_cache.h"

#include "../daemon/model/wcache.h"
#include "hub.h"
#include "model_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define EXIT_CACHE 1

static const char usage_text[] =
	"Usage: bitnet-model cache [--cache-dir DIR] [--prune]\n"
	"\n"
	"Lists the files of bitnetd's packed-weight cache directory, one line each: whether it\n"
	"can still be used (state=live), can never be (state=dead, why= says why: its model\n"
	"file is gone or was replaced, an older layout version, a truncated or corrupt header,\n"
	"a temporary file of a writer that died) or cannot be told (state=kept: a newer\n"
	"bitnetd's layout, a model file this user cannot look at); its size, model file,\n"
	"options and kernel variant. bitnetd removes dead files itself before it writes a cache.\n"
	"\n"
	"  --cache-dir DIR   the directory (default as bitnetd's: $CACHE_DIRECTORY, else\n"
	"                    $XDG_CACHE_HOME/bitnetd, else ~/.cache/bitnetd; a system\n"
	"                    service's is /var/cache/bitnetd)\n"
	"  --prune           remove the dead files (state=removed) and print what was freed\n"
	"\n"
	"Files other than caches (no cache's magic, another name, links, directories) are never\n"
	"looked at nor touched. Run it as a user who sees the model files as the daemon does.\n"
	"Exit status: 0, 1 the directory cannot be read or a file cannot be removed, 2 bad usage.\n";

struct cache_args {
	const char *dir;
	int prune, help;
};

struct totals {
	unsigned files, live, dead, kept, removed, failed;
	uint64_t bytes, dead_bytes, freed_bytes;
};

static int get_args(int argc, char **argv, struct cache_args *a)
{
	enum { O_CACHE_DIR = 256, O_PRUNE, O_HELP };
	static const struct option opts[] = {
		{ "cache-dir", required_argument, NULL, O_CACHE_DIR },
		{ "prune", no_argument, NULL, O_PRUNE },
		{ "help", no_argument, NULL, O_HELP },
		{ NULL, 0, NULL, 0 },
	};
	int opt;
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (opt) {
		case O_CACHE_DIR: a->dir = optarg; break;
		case O_PRUNE: a->prune = 1; break;
		case O_HELP: a->help = 1; return 0;
		default: return model_cmd_bad_option("cache", opt, argv[optind - 1]);
		}
	}
	if (optind < argc)
		return model_cmd_usage("cache", "unexpected argument", argv[optind]);
	if (a->dir && strcmp(a->dir, "none") == 0)
		return model_cmd_usage("cache", "--cache-dir none is no directory", NULL);
	return 0;
}

/* The daemon's flags that a cache's options stand for. */
static const char *options_text(uint32_t o, char *buf, size_t cap)
{
	static const struct {
		uint32_t bit;
		const char *flag;
	} flags[] = {
		{ BN_WCACHE_OPT_SCREEN, "--lm-head screened" },
		{ BN_WCACHE_OPT_INT8_HEAD, "--lm-head int8" },
		{ BN_WCACHE_OPT_BASE3, "--decode-layout base3" },
	};
	size_t n = 0;
	buf[0] = 0;
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (o & flags[i].bit)
			n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? " " : "", flags[i].flag);
	if (o & ~(uint32_t)(BN_WCACHE_OPT_SCREEN | BN_WCACHE_OPT_INT8_HEAD | BN_WCACHE_OPT_BASE3))
		snprintf(buf + n, cap - n, "%s0x%x", n ? " " : "", o);
	return buf;
}

static const char *state_text(const struct bn_wcache_file *f)
{
	if (f->removed > 0)
		return "removed";
	if (f->temporary && f->fate == BN_WCACHE_LIVE)
		return "writing";
	return f->fate == BN_WCACHE_LIVE ? "live" : f->fate == BN_WCACHE_DEAD ? "dead" : "kept";
}

static void count(struct totals *t, const struct bn_wcache_file *f)
{
	t->files++;
	t->bytes += f->bytes;
	t->live += f->fate == BN_WCACHE_LIVE;
	t->kept += f->fate == BN_WCACHE_KEPT;
	if (f->fate == BN_WCACHE_DEAD) {
		t->dead++;
		t->dead_bytes += f->bytes;
	}
	if (f->removed > 0) {
		t->removed++;
		t->freed_bytes += f->bytes;
	} else if (f->removed < 0 && f->removed != -EBUSY && f->removed != -ENOENT) {
		t->failed++; /* EBUSY, ENOENT: a daemon replaced or removed it meanwhile */
	}
}

static void print_file(void *ctx, const struct bn_wcache_file *f)
{
	char size[32], opts[128];
	count(ctx, f);
	printf("state=%s size=\"%s\" bytes=%llu", state_text(f), bn_hub_size_text(f->bytes, size),
	       (unsigned long long)f->bytes);
	if (f->model[0])
		printf(" model=\"%s\" options=\"%s\" kernels=%s", f->model,
		       options_text(f->options, opts, sizeof(opts)), f->kernels);
	if (f->why[0])
		printf(" why=\"%s\"", f->why);
	if (f->removed == -EBUSY)
		printf(" error=\"another file took its name meanwhile; not removed\"");
	else if (f->removed == -ENOENT)
		printf(" error=\"removed by another process meanwhile\"");
	else if (f->removed < 0)
		printf(" error=\"%s\"", strerror(-f->removed));
	printf(" file=\"%s\"\n", f->name);
}

static void print_totals(const struct cache_args *a, const struct totals *t)
{
	char size[32];
	if (a->prune) {
		printf("freed files=%u bytes=%llu size=\"%s\"", t->removed,
		       (unsigned long long)t->freed_bytes, bn_hub_size_text(t->freed_bytes, size));
		if (t->failed)
			printf(" not_removed=%u", t->failed);
		printf("\n");
		return;
	}
	printf("total files=%u bytes=%llu size=\"%s\" live=%u dead=%u kept=%u", t->files,
	       (unsigned long long)t->bytes, bn_hub_size_text(t->bytes, size), t->live, t->dead,
	       t->kept);
	printf(" dead_bytes=%llu\n", (unsigned long long)t->dead_bytes);
	if (t->dead)
		fprintf(stderr, "bitnet-model cache: %u dead file%s (%s): `bitnet-model cache%s%s "
				"--prune` removes %s\n",
			t->dead, t->dead == 1 ? "" : "s", bn_hub_size_text(t->dead_bytes, size),
			a->dir ? " --cache-dir " : "", a->dir ? a->dir : "",
			t->dead == 1 ? "it" : "them");
}

int model_cache_main(int argc, char **argv)
{
	struct cache_args a = { 0 };
	int rc = get_args(argc, argv, &a);
	if (rc || a.help) {
		if (a.help)
			fputs(usage_text, stdout);
		return rc;
	}
	char dir[PATH_MAX];
	rc = bn_wcache_dir(a.dir, dir, sizeof(dir));
	if (rc < 0) {
		fprintf(stderr, "bitnet-model cache: no cache directory: %s (give --cache-dir DIR, "
				"or set $CACHE_DIRECTORY, $XDG_CACHE_HOME or $HOME)\n",
			strerror(-rc));
		return EXIT_CACHE;
	}
	printf("dir=\"%s\"\n", dir);
	struct totals t = { 0 };
	rc = bn_wcache_prune(dir, a.prune, print_file, &t);
	if (rc == -ENOENT)
		fprintf(stderr, "bitnet-model cache: %s does not exist: nothing is cached there\n",
			dir);
	else if (rc < 0)
		fprintf(stderr, "bitnet-model cache: cannot read %s: %s\n", dir, strerror(-rc));
	print_totals(&a, &t);
	return (rc < 0 && rc != -ENOENT) || t.failed ? EXIT_CACHE : 0;
}
