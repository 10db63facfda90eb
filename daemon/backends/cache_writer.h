/* SPDX-License-Identifier: MIT */
/*
 * cache_writer.h — writes the weights a backend built at its start to the packed-weight cache
 * (model/wcache.h) from a thread of its own, once the daemon is ready: the first client waits
 * for the repack, not for a disk write of the same size too. The thread runs at nice 10, below
 * the forward pass, with every signal blocked (a SIGTERM is the loop's, through its signalfd,
 * never a default action in the writer). It says what came of the write in STATS
 * (bn_load_report_set_cache: built or failed) and in the log. Before it writes, it prunes the
 * cache's directory of the caches that can never be used again (bn_wcache_prune), logging
 * each removal: the disk they hold is what the new file may need.
 */
#ifndef BITNETD_CACHE_WRITER_H
#define BITNETD_CACHE_WRITER_H

#include "common/stats.h"
#include "model/wcache.h"

#include <stdint.h>

struct bn_cache_writer;

/* A writer of blobs[0..n_blobs) under key k (and `contents`) to path. It takes the blobs array,
 * and the n_owned buffers in owned[] (the array too), which it frees once the file is written
 * or given up; the other bytes the blobs name are borrowed until bn_cache_writer_stop. NULL
 * when there is no memory for it (then nothing is taken). */
struct bn_cache_writer *bn_cache_writer_new(const char *path, const struct bn_wcache_key *k,
					    uint32_t contents, struct bn_wcache_blob *blobs,
					    uint32_t n_blobs, void **owned, uint32_t n_owned);
/* Where the write's outcome goes (NULL, the default: the daemon-wide state). */
void bn_cache_writer_report_to(struct bn_cache_writer *w, struct bn_load_report *report);

/* Starts the writer's thread once the weights are final. The state it ends in: writing (the
 * thread runs), or failed (no thread, logged; the caller stops the writer, freeing it). */
enum bn_weights_cache bn_cache_writer_start(struct bn_cache_writer *w);

/* Gives a write in progress up (its temporary file removed), waits for the thread and frees
 * the writer. NULL is a no-op. */
void bn_cache_writer_stop(struct bn_cache_writer *w);

/* Removes from dir the caches that can never be used again and dead writers' temporary files
 * (bn_wcache_prune), one log line each: what a writer does before it writes, and what the
 * daemon does at start-up (a start that hits every cache writes none). */
void bn_cache_prune_dir(const char *dir);

#endif /* BITNETD_CACHE_WRITER_H */
