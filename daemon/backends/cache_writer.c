/* SPDX-License-Identifier: MIT */
/*
 * The packed-weight cache's writer thread (cache_writer.h), shared by the cpu and cuda
 * backends.
 */
#include "cache_writer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The writer's nice value: it gets about a tenth of a core that the forward pass wants (CFS
 * weights), all of an idle one. */
#define CACHE_WRITER_NICE 10

struct bn_cache_writer {
	pthread_t thread;
	int started;                 /* thread runs (or ran) */
	int stop;                    /* set by bn_cache_writer_stop: give up, leave no file */
	char path[PATH_MAX];
	struct bn_wcache_key key;
	uint32_t contents;
	struct bn_wcache_blob *blobs;
	uint32_t n_blobs;
	void **owned;                /* freed once written (by the thread) or at stop */
	uint32_t n_owned;
	struct bn_load_report *report; /* where the outcome goes; NULL: the daemon-wide state */
};

static void free_owned(struct bn_cache_writer *w)
{
	for (uint32_t i = 0; i < w->n_owned; i++)
		free(w->owned[i]);
	free(w->owned);
	w->owned = NULL;
	w->n_owned = 0;
}

/* One line for each file the pruning removed (or failed to). */
static void log_removed(void *ctx, const struct bn_wcache_file *f)
{
	const char *dir = ctx;
	if (f->removed > 0)
		bn_log_info("msg=\"weights cache removed\" cache=\"%s/%s\" bytes=%llu why=\"%s\"", dir,
			    f->name, (unsigned long long)f->bytes, f->why);
	else if (f->removed < 0 && f->removed != -EBUSY && f->removed != -ENOENT)
		/* not EBUSY, a new file took its name, nor ENOENT, another daemon removed it */
		bn_log_info("msg=\"weights cache not removed\" cache=\"%s/%s\" bytes=%llu why=\"%s\" error=\"%s\"",
			    dir, f->name, (unsigned long long)f->bytes, f->why, strerror(-f->removed));
}

void bn_cache_prune_dir(const char *dir)
{
	int rc = bn_wcache_prune(dir, 1, log_removed, (void *)dir);
	if (rc < 0 && rc != -ENOENT && rc != -ENOTDIR) /* a write makes it, or says why not */
		bn_log_info("msg=\"weights cache directory not pruned\" dir=\"%s\" error=\"%s\"", dir,
			    strerror(-rc));
}

/* The caches in the directory that can never be used again (their model file gone or
 * replaced, an older layout) and dead writers' temporary files, removed before this cache is
 * written: the disk they hold is what the new file may need. */
static void prune_dir(const struct bn_cache_writer *w)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", w->path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else
		*slash = 0;
	bn_cache_prune_dir(dir);
}

static void *write_cache(void *arg)
{
	struct bn_cache_writer *w = arg;
	char why[BN_WCACHE_WHY_LEN];
	/* Below the forward pass's threads: the disk write takes what they leave. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), CACHE_WRITER_NICE);
	prune_dir(w);
	uint64_t t0 = bn_now_ns();
	int rc = bn_wcache_write(w->path, &w->key, w->contents, w->blobs, w->n_blobs, &w->stop,
				 why);
	double ms = (double)(bn_now_ns() - t0) / 1e6;
	free_owned(w); /* the rest of the daemon's life without them; stop joins before reading */
	if (rc == 0)
		bn_log_info("msg=\"weights cache written\" cache=\"%s\" write_ms=%.0f", w->path, ms);
	else if (rc == -ECANCELED)
		bn_log_info("msg=\"weights cache not written\" cache=\"%s\" why=\"%s\"", w->path,
			    why);
	else
		bn_log_warn("msg=\"weights cache not written; the next start builds the weights again\" cache=\"%s\" why=\"%s\"",
			    w->path, why);
	if (rc != -ECANCELED)
		bn_load_report_set_cache(w->report, rc == 0 ? BN_WEIGHTS_CACHE_BUILT
							       : BN_WEIGHTS_CACHE_FAILED);
	return NULL;
}

struct bn_cache_writer *bn_cache_writer_new(const char *path, const struct bn_wcache_key *k,
					    uint32_t contents, struct bn_wcache_blob *blobs,
					    uint32_t n_blobs, void **owned, uint32_t n_owned)
{
	struct bn_cache_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->key = *k;
	w->contents = contents;
	w->blobs = blobs;
	w->n_blobs = n_blobs;
	w->owned = owned;
	w->n_owned = n_owned;
	return w;
}

void bn_cache_writer_report_to(struct bn_cache_writer *w, struct bn_load_report *report)
{
	w->report = report;
}

void bn_cache_writer_stop(struct bn_cache_writer *w)
{
	if (!w)
		return;
	if (w->started) {
		__atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED);
		pthread_join(w->thread, NULL);
	}
	free_owned(w);
	free(w->blobs);
	free(w);
}

enum bn_weights_cache bn_cache_writer_start(struct bn_cache_writer *w)
{
	int rc = bn_thread_start(&w->thread, write_cache, w);
	if (rc == 0) {
		w->started = 1;
		return BN_WEIGHTS_CACHE_WRITING;
	}
	bn_log_warn("msg=\"weights cache not written: no thread to write it\" error=\"%s\"",
		    strerror(rc));
	return BN_WEIGHTS_CACHE_FAILED;
}
