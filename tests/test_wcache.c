/* SPDX-License-Identifier: MIT */
/*
 * The packed-weight cache (daemon/model/wcache.h): the file format's checks on their own, then
 * daemons on the tiny presets: outputs (greedy ids and log-probabilities, to the bit) equal
 * with no cache, a cache built and a cache hit, for every preset and option; a changed model
 * file, a corrupt, truncated or empty cache, another kernel variant's cache are rebuilt, never
 * used; two daemons starting together leave one valid cache; an unusable directory means
 * running without one. Pruning: a directory of live, dead and foreign files, listed and
 * pruned (bn_wcache_prune and bitnet-model cache), and a daemon's writer pruning its own.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "../daemon/model/wcache.h"
#include "quant.h"
#include "bitnet_client.h"

#include "ckassert.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECOND 1000000000LL

/* ---- the format -------------------------------------------------------------------------- */

static const struct bn_wcache_key key0 = { .dev = 1, .ino = 2, .size = 3, .mtime_ns = 4,
					   .ctime_ns = 5, .header_hash = 6, .options = 1,
					   .kernels = "avx2" };

/* Three blobs of odd sizes, one over a chunk (1 MiB), with known bytes. */
static uint8_t *blob_bytes(uint32_t i, uint64_t n)
{
	uint8_t *b = malloc(n);
	for (uint64_t k = 0; k < n; k++)
		b[k] = (uint8_t)(k * 131 + i * 7 + (k >> 12));
	return b;
}

static const uint64_t blob_sizes[3] = { 5000, 3u << 20 | 17, 1 };

static void write_sample(const char *path)
{
	struct bn_wcache_blob blobs[3];
	for (uint32_t i = 0; i < 3; i++)
		blobs[i] = (struct bn_wcache_blob){ (enum bn_wcache_tag)(i + 1),
						    blob_bytes(i, blob_sizes[i]), blob_sizes[i] };
	char why[BN_WCACHE_WHY_LEN];
	ck_assert_int_eq(bn_wcache_write(path, &key0, BN_WCACHE_HAS_T3, blobs, 3, NULL, why), 0);
	for (uint32_t i = 0; i < 3; i++)
		free((void *)blobs[i].data);
}

static int open_sample(const char *path, const struct bn_wcache_key *k)
{
	struct bn_wcache c;
	char why[BN_WCACHE_WHY_LEN];
	int rc = bn_wcache_open(&c, path, k, NULL, NULL, why);
	if (rc == 0)
		bn_wcache_close(&c);
	return rc;
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	ck_assert_int_eq(pread(fd, &b, 1, at), 1);
	b ^= 0x10;
	ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

static off_t file_size(const char *path)
{
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	return st.st_size;
}

START_TEST(format_round_trip_and_checks)
{
	char dir[] = "/tmp/bn-wcache-XXXXXX", path[64];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/sub/x.wcache", dir); /* the directory is made */
	write_sample(path);
	struct bn_wcache c;
	char why[BN_WCACHE_WHY_LEN];
	ck_assert_int_eq(bn_wcache_open(&c, path, &key0, NULL, NULL, why), 0);
	ck_assert_uint_eq(c.contents, BN_WCACHE_HAS_T3);
	/* Mapped 2 MiB-aligned, so the kernel can map the writer's 2 MiB folios as huge pages. */
	ck_assert_uint_eq((uintptr_t)c.base % (2u << 20), 0);
	for (uint32_t i = 0; i < 3; i++) {
		uint8_t *want = blob_bytes(i, blob_sizes[i]);
		ck_assert_ptr_null(bn_wcache_take(&c, (enum bn_wcache_tag)(i + 2), blob_sizes[i]));
		ck_assert_ptr_null(bn_wcache_take(&c, (enum bn_wcache_tag)(i + 1), blob_sizes[i] + 1));
		const uint8_t *got = bn_wcache_take(&c, (enum bn_wcache_tag)(i + 1), blob_sizes[i]);
		ck_assert_ptr_nonnull(got);
		ck_assert_uint_eq((uintptr_t)got % 4096, 0);
		ck_assert_int_eq(memcmp(got, want, blob_sizes[i]), 0);
		ck_assert_int_eq(bn_wcache_taken_all(&c), i == 2);
		free(want);
	}
	ck_assert_ptr_null(bn_wcache_take(&c, BN_WCACHE_T2_CODES, 1));
	bn_wcache_close(&c);
	/* Any field of the key, another variant: built from something else. */
	struct bn_wcache_key k = key0;
	k.mtime_ns++;
	ck_assert_int_eq(open_sample(path, &k), -ESTALE);
	k = key0;
	k.ctime_ns++;
	ck_assert_int_eq(open_sample(path, &k), -ESTALE);
	k = key0;
	k.header_hash ^= 1;
	ck_assert_int_eq(open_sample(path, &k), -ESTALE);
	k = key0;
	k.options = 0;
	ck_assert_int_eq(open_sample(path, &k), -ESTALE);
	k = key0;
	snprintf(k.kernels, sizeof(k.kernels), "scalar");
	ck_assert_int_eq(open_sample(path, &k), -ESTALE);
	/* A byte flipped anywhere: the last blob, the middle of the big one, the chunk table. */
	off_t size = file_size(path);
	static const off_t where[] = { -1, -(1 << 20), 8192 + 3 * 32 + 5 }; /* after the header */
	for (size_t w = 0; w < sizeof(where) / sizeof(where[0]); w++) {
		off_t at = where[w] < 0 ? size + where[w] : where[w];
		flip_byte(path, at);
		ck_assert_msg(open_sample(path, &key0) == -EBADMSG, "flip at %lld", (long long)at);
		flip_byte(path, at);
		ck_assert_int_eq(open_sample(path, &key0), 0);
	}
	ck_assert_int_eq(truncate(path, size - 1), 0);
	ck_assert_int_eq(open_sample(path, &key0), -EBADMSG);
	ck_assert_int_eq(truncate(path, 0), 0);
	ck_assert_int_eq(open_sample(path, &key0), -EBADMSG);
	unlink(path);
	ck_assert_int_eq(open_sample(path, &key0), -ENOENT);
	char sub[64];
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	rmdir(sub);
	rmdir(dir);
}
END_TEST

START_TEST(directory_and_name)
{
	char out[256];
	ck_assert_int_eq(bn_wcache_dir("none", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "");
	ck_assert_int_eq(bn_wcache_dir("/srv/c", out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/srv/c");
	setenv("CACHE_DIRECTORY", "/var/cache/bitnetd:/var/cache/other", 1);
	ck_assert_int_eq(bn_wcache_dir(NULL, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/var/cache/bitnetd");
	unsetenv("CACHE_DIRECTORY");
	setenv("XDG_CACHE_HOME", "/x/cache", 1);
	ck_assert_int_eq(bn_wcache_dir(NULL, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/x/cache/bitnetd");
	setenv("XDG_CACHE_HOME", "relative", 1); /* ignored, as the spec says */
	setenv("HOME", "/home/u", 1);
	ck_assert_int_eq(bn_wcache_dir(NULL, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "/home/u/.cache/bitnetd");
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HOME");
	ck_assert_int_eq(bn_wcache_dir(NULL, out, sizeof(out)), -ENOENT);
	ck_assert_int_eq(bn_wcache_path("/c", "/m/my model.gguf", &key0, out, sizeof(out)), 0);
	ck_assert_msg(strncmp(out, "/c/my_model.gguf.", 17) == 0 &&
			      strstr(out, ".o1.avx2.wcache"),
		      "%s", out);
}
END_TEST

/* ---- pruning ----------------------------------------------------------------------------- */

/* The key a daemon has for the model file at path (its identity and resolved path; the rest
 * key0's). */
static void key_for(const char *path, struct bn_wcache_key *k)
{
	struct stat st;
	ck_assert_int_eq(stat(path, &st), 0);
	*k = key0;
	k->dev = (uint64_t)st.st_dev;
	k->ino = (uint64_t)st.st_ino;
	k->size = (uint64_t)st.st_size;
	k->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
	k->ctime_ns = (uint64_t)st.st_ctim.tv_sec * 1000000000u + (uint64_t)st.st_ctim.tv_nsec;
	ck_assert_ptr_nonnull(realpath(path, k->model));
}

static void put_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

/* A small cache of the model file at model, named as the daemon names it in dir (cache NULL)
 * or at cache; a valid one: it opens under the model's key. Its path in out. */
static void cache_of(const char *dir, const char *model, const char *cache, char *out,
		     size_t cap)
{
	struct bn_wcache_key k;
	key_for(model, &k);
	if (cache)
		snprintf(out, cap, "%s", cache);
	else
		ck_assert_int_eq(bn_wcache_path(dir, model, &k, out, cap), 0);
	static const uint8_t data[100] = { 1, 2, 3 };
	struct bn_wcache_blob b = { BN_WCACHE_T2_CODES, data, sizeof(data) };
	char why[BN_WCACHE_WHY_LEN];
	ck_assert_int_eq(bn_wcache_write(out, &k, 0, &b, 1, NULL, why), 0);
	ck_assert_int_eq(open_sample(out, &k), 0);
}

static void put_version(const char *path, uint32_t version)
{
	int fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, &version, 4, 8), 4); /* after the 8-byte magic */
	close(fd);
}

/* What bn_wcache_prune reported. */
struct reported {
	uint32_t n;
	struct {
		char name[128], why[BN_WCACHE_WHY_LEN], model[PATH_MAX];
		enum bn_wcache_fate fate;
		int removed;
	} f[16];
};

static void note(void *ctx, const struct bn_wcache_file *f)
{
	struct reported *r = ctx;
	ck_assert_uint_lt(r->n, 16);
	snprintf(r->f[r->n].name, sizeof(r->f[0].name), "%s", f->name);
	snprintf(r->f[r->n].why, sizeof(r->f[0].why), "%s", f->why);
	snprintf(r->f[r->n].model, sizeof(r->f[0].model), "%s", f->model);
	r->f[r->n].fate = f->fate;
	r->f[r->n].removed = f->removed;
	r->n++;
}

/* The report of the file whose name begins with prefix: its fate, why and removal; its
 * index. */
static uint32_t assert_reported(const struct reported *r, const char *prefix,
			    enum bn_wcache_fate fate, const char *why, int removed)
{
	for (uint32_t i = 0; i < r->n; i++) {
		if (strncmp(r->f[i].name, prefix, strlen(prefix)) != 0)
			continue;
		ck_assert_msg(r->f[i].fate == fate && strstr(r->f[i].why, why) &&
				      r->f[i].removed == removed,
			      "%s: fate %d why \"%s\" removed %d", r->f[i].name, r->f[i].fate,
			      r->f[i].why, r->f[i].removed);
		return i;
	}
	ck_abort_msg("%s* was not reported", prefix);
	return 0;
}

static int exists(const char *dir, const char *name)
{
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &st) == 0;
}

/* A pid no process has: a child's, reaped. */
static pid_t gone_pid(void)
{
	pid_t kid = fork();
	if (kid == 0)
		_exit(0);
	waitpid(kid, NULL, 0);
	return kid;
}

/* A directory of every kind of file: caches live, dead (model gone, model replaced, an older
 * version, truncated), kept (a newer version), writers' temporary files of a dead and a live
 * process, and what is no cache (no magic, a symlink to a dead cache, a dead cache under
 * another name, a directory). Listed, nothing moves; pruned, exactly the dead go; listed
 * again, the rest is there. */
START_TEST(prune_removes_only_what_can_never_be_used)
{
	char top[] = "/tmp/bn-wcache-prune-XXXXXX", dir[64], p[PATH_MAX], q[PATH_MAX];
	ck_assert_ptr_nonnull(mkdtemp(top));
	snprintf(dir, sizeof(dir), "%s/cache", top);
	static const char *const models[] = { "live", "gone", "changed" };
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s.gguf", top, models[i]);
		put_text(p, "a model file's bytes\n");
		cache_of(dir, p, NULL, q, sizeof(q));
	}
	char live[PATH_MAX], gone[PATH_MAX];
	snprintf(live, sizeof(live), "%s/live.gguf", top);
	snprintf(gone, sizeof(gone), "%s/gone.gguf", top);
	static const struct {
		const char *name;
		uint32_t version;
		off_t size; /* 0: whole */
	} copies[] = {
		{ "older.wcache", BN_WCACHE_VERSION - 1, 0 },
		{ "newer.wcache", BN_WCACHE_VERSION + 1, 0 },
		{ "truncated.wcache", BN_WCACHE_VERSION, 100 },
	};
	for (int i = 0; i < 3; i++) { /* caches of the live model */
		snprintf(p, sizeof(p), "%s/%s", dir, copies[i].name);
		cache_of(dir, live, p, q, sizeof(q));
		put_version(p, copies[i].version);
		if (copies[i].size)
			ck_assert_int_eq(truncate(p, copies[i].size), 0);
	}
	snprintf(p, sizeof(p), "%s/dead.wcache.bak", dir); /* dead, not a cache's name */
	cache_of(dir, gone, p, q, sizeof(q));
	snprintf(p, sizeof(p), "%s/target.wcache", top); /* dead, outside; a link to it inside */
	cache_of(top, gone, p, q, sizeof(q));
	snprintf(q, sizeof(q), "%s/link.wcache", dir);
	ck_assert_int_eq(symlink(p, q), 0);
	snprintf(p, sizeof(p), "%s/nomagic.wcache", dir);
	put_text(p, "not a cache, whatever its name\n");
	snprintf(p, sizeof(p), "%s/sub.wcache", dir);
	ck_assert_int_eq(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/a.wcache.tmp.%d.abcdef", dir, (int)gone_pid());
	put_text(p, "torn");
	snprintf(p, sizeof(p), "%s/b.wcache.tmp.%d.abcdef", dir, (int)getpid());
	put_text(p, "being written");
	/* The model files change: one removed, one replaced by another file. */
	ck_assert_int_eq(unlink(gone), 0);
	snprintf(p, sizeof(p), "%s/changed.new", top);
	snprintf(q, sizeof(q), "%s/changed.gguf", top);
	put_text(p, "the model file's new bytes\n");
	ck_assert_int_eq(rename(p, q), 0);

	for (int remove = 0; remove <= 1; remove++) {
		struct reported r = { 0 };
		ck_assert_int_eq(bn_wcache_prune(dir, remove, note, &r), 0);
		ck_assert_uint_eq(r.n, 8);
		uint32_t i = assert_reported(&r, "live.gguf.", BN_WCACHE_LIVE, "", 0);
		ck_assert_str_eq(r.f[i].model, realpath(live, p));
		assert_reported(&r, "gone.gguf.", BN_WCACHE_DEAD, "model file is gone", remove);
		assert_reported(&r, "changed.gguf.", BN_WCACHE_DEAD, "replaced or changed", remove);
		assert_reported(&r, "older.wcache", BN_WCACHE_DEAD, "older layout version", remove);
		assert_reported(&r, "newer.wcache", BN_WCACHE_KEPT, "newer layout version", 0);
		assert_reported(&r, "truncated.wcache", BN_WCACHE_DEAD, "shorter than its header",
				remove);
		assert_reported(&r, "a.wcache.tmp.", BN_WCACHE_DEAD, "writer that died", remove);
		assert_reported(&r, "b.wcache.tmp.", BN_WCACHE_LIVE, "being written", 0);
	}
	struct reported after = { 0 };
	ck_assert_int_eq(bn_wcache_prune(dir, 1, note, &after), 0);
	ck_assert_uint_eq(after.n, 3);
	static const char *const kept[] = { "newer.wcache", "dead.wcache.bak", "link.wcache",
					    "nomagic.wcache", "sub.wcache" };
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		ck_assert_msg(exists(dir, kept[i]), "%s was removed", kept[i]);
	ck_assert(exists(top, "target.wcache"));
	tu_remove_dir(top);
}
END_TEST

/* bitnet-model cache lists a live and a dead cache; --prune removes the dead one and says
 * what it freed. */
START_TEST(model_tool_lists_and_prunes)
{
	char top[] = "/tmp/bn-wcache-tool-XXXXXX", dir[64], live[64], gone[64];
	char live_cache[PATH_MAX], gone_cache[PATH_MAX], want[3 * PATH_MAX];
	ck_assert_ptr_nonnull(mkdtemp(top));
	snprintf(dir, sizeof(dir), "%s/cache", top);
	snprintf(live, sizeof(live), "%s/live.gguf", top);
	snprintf(gone, sizeof(gone), "%s/gone.gguf", top);
	put_text(live, "a model file's bytes\n");
	put_text(gone, "another model file's bytes\n");
	cache_of(dir, live, NULL, live_cache, sizeof(live_cache));
	cache_of(dir, gone, NULL, gone_cache, sizeof(gone_cache));
	ck_assert_int_eq(unlink(gone), 0);
	const char *tool = getenv("BITNET_MODEL_TOOL");
	ck_assert_msg(tool, "BITNET_MODEL_TOOL is not set (make check sets it)");
	struct tu_run r;
	ck_assert_int_eq(tu_run((const char *const[]){ tool, "cache", "--cache-dir", dir, NULL },
				NULL, 0, &r),
			 0);
	ck_assert_msg(r.status == 0, "%d: %s", r.status, r.err);
	char real[PATH_MAX];
	ck_assert_ptr_nonnull(realpath(top, real));
	unsigned long long bytes = (unsigned long long)file_size(gone_cache);
	/* key0's options and kernels; the line begins with the state and the size for people */
	snprintf(want, sizeof(want),
		 " bytes=%llu model=\"%s/live.gguf\" options=\"--lm-head screened\" kernels=avx2 "
		 "file=\"%s\"\n",
		 bytes, real, strrchr(live_cache, '/') + 1);
	const char *line = strstr(r.out, want);
	ck_assert_msg(line, "no\n%sin\n%s", want, r.out);
	while (line > r.out && line[-1] != '\n')
		line--;
	static const char state[] = "state=live size=\"";
	ck_assert_msg(!strncmp(line, state, sizeof(state) - 1), "%s", r.out);
	snprintf(want, sizeof(want),
		 " bytes=%llu model=\"%s/gone.gguf\" options=\"--lm-head screened\" kernels=avx2 "
		 "why=\"its model file is gone\" file=\"%s\"\n",
		 bytes, real, strrchr(gone_cache, '/') + 1);
	ck_assert_msg(strstr(r.out, want) && strstr(r.out, "\nstate=dead size="), "%s", r.out);
	snprintf(want, sizeof(want), "\ntotal files=2 bytes=%llu ", 2 * bytes);
	ck_assert_msg(strstr(r.out, want) && strstr(r.out, " live=1 dead=1 kept=0 "), "%s",
		      r.out);
	ck_assert_msg(strstr(r.err, "1 dead file") && strstr(r.err, "--prune"), "%s", r.err);
	ck_assert_int_eq(tu_run((const char *const[]){ tool, "cache", "--cache-dir", dir,
						       "--prune", NULL },
				NULL, 0, &r),
			 0);
	ck_assert_msg(r.status == 0, "%d: %s", r.status, r.err);
	snprintf(want, sizeof(want), "\nfreed files=1 bytes=%llu ", bytes);
	ck_assert_msg(strstr(r.out, "\nstate=removed ") && strstr(r.out, want), "%s", r.out);
	ck_assert_int_eq(access(gone_cache, F_OK), -1);
	ck_assert_int_eq(access(live_cache, F_OK), 0);
	ck_assert_int_eq(tu_run((const char *const[]){ tool, "cache", "--bogus", NULL }, NULL, 0,
				&r),
			 0);
	ck_assert_int_eq(r.status, 2);
	tu_remove_dir(top);
}
END_TEST

/* ---- daemons ----------------------------------------------------------------------------- */

#define N_PROMPTS 3
#define N_TOKENS 6
#define N_ALT 2

/* What a daemon answers: greedy ids and their log-probability records, to the bit. */
struct answers {
	uint32_t ids[N_PROMPTS][N_TOKENS];
	struct bn_logprob lp[N_PROMPTS][N_TOKENS], alt[N_PROMPTS][N_TOKENS * N_ALT];
};

static char work[] = "/tmp/bn-wcache-daemon-XXXXXX";

static void answers_of(const struct tu_daemon *d, struct answers *a)
{
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d->socket_path, 2, &c), 0);
	memset(a, 0, sizeof(*a));
	for (uint32_t p = 0; p < N_PROMPTS; p++) {
		uint32_t prompt[8] = { 1, 20 + p, 300 + 7 * p, 40, 5 + p };
		struct bn_sampling_params sp = { .n_logprobs = N_ALT };
		struct bn_request req = { prompt, 5, N_TOKENS, BN_REQ_IGNORE_EOS | BN_REQ_LOGPROBS,
					  &sp };
		struct bn_handle *h;
		ck_assert_int_eq(bn_submit(c, &req, &h), 0);
		ck_assert_int_eq(tu_wait(h, 30 * SECOND), 0);
		ck_assert_int_eq(bn_read_tokens(h, 0, a->ids[p], N_TOKENS), N_TOKENS);
		ck_assert_int_eq(bn_read_logprobs(h, 0, a->lp[p], a->alt[p], N_TOKENS), N_TOKENS);
		bn_release(h);
	}
	bn_disconnect(c);
}

/* The daemon's weights-cache state, from STATS, now. */
static const char *cache_state_now(struct bn_client *c)
{
	static const char *const states[] = { "hit", "writing", "built", "failed", "off" };
	static char text[1 << 16];
	ck_assert_int_ge(bn_daemon_stats(c, text, sizeof(text)), 0);
	for (size_t i = 0; i < 5; i++) {
		char name[64];
		snprintf(name, sizeof(name), "bitnetd_weights_cache{state=\"%s\"}", states[i]);
		if (tu_metric(text, name) == 1)
			return states[i];
	}
	return "?";
}

/* The daemon's weights-cache state, from STATS: once written when the daemon writes it after
 * it is ready (the state says writing until then; a minute at most, scaled). */
static const char *cache_state(const struct tu_daemon *d)
{
	struct bn_client *c;
	ck_assert_int_eq(bn_connect(d->socket_path, 1, &c), 0);
	const char *state = cache_state_now(c);
	for (int tries = 0, end = tu_scaled(6000); strcmp(state, "writing") == 0 && tries < end;
	     tries++) {
		usleep(10000);
		state = cache_state_now(c);
	}
	bn_disconnect(c);
	return state;
}

/* A daemon on model with --cache-dir dir and the extra flags: its answers and cache state. */
static const char *run(const char *model, const char *dir, const char *const *extra,
		       struct answers *a)
{
	const char *args[8] = { "--cache-dir", dir };
	for (int i = 0; extra && extra[i]; i++)
		args[2 + i] = extra[i];
	struct tu_daemon d;
	ck_assert_msg(tu_daemon_start_cpu(&d, model, args) == 0, "daemon on %s", model);
	const char *state = cache_state(&d);
	answers_of(&d, a);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	return state;
}

static void assert_same(const struct answers *a, const struct answers *b, const char *what)
{
	ck_assert_msg(memcmp(a, b, sizeof(*a)) == 0, "answers differ: %s", what);
}

/* Where the embedding's data starts in a GGUF file. */
static off_t embedding_offset(const char *path)
{
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	ck_assert_msg(bn_gguf_open(&g, path, err) == 0, "%s", err);
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&g, "token_embd.weight");
	ck_assert_ptr_nonnull(t);
	off_t at = (off_t)((const uint8_t *)t->data - g.base);
	bn_gguf_close(&g);
	return at;
}

static void model_path(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s.gguf", work, name);
}

/* A tiny preset written by the model tool. */
static void make_model(const char *name, const char *type, const char *embed)
{
	char path[256];
	model_path(name, path, sizeof(path));
	tu_write_tiny_model(path, (const char *const[]){ "--type", type, "--embed-type", embed, NULL });
}

static void cache_dir(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/cache-%s", work, name);
}

static int files_in(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL)
		n += strstr(e->d_name, suffix) != NULL;
	if (d)
		closedir(d);
	return n;
}

/* The only cache file in dir. */
static void the_cache(const char *dir, char *out, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	out[0] = 0;
	while (d && (e = readdir(d)) != NULL)
		if (strstr(e->d_name, ".wcache") && !strstr(e->d_name, ".tmp."))
			snprintf(out, cap, "%s/%s", dir, e->d_name);
	if (d)
		closedir(d);
	ck_assert_msg(out[0], "no cache in %s", dir);
}

static const struct {
	const char *name, *type, *embed;
} presets[] = {
	{ "i2s", "i2_s", "f16" },
	{ "tq2", "tq2_0", "f16" },
	{ "tq1", "tq1_0", "bf16" },
	{ "f16", "f16", "f32" },
	{ "q8head", "i2_s", "q8_0" },
};

static const char *const *const option_sets[] = {
	(const char *const[]){ NULL },
	(const char *const[]){ "--lm-head", "full", NULL },
	(const char *const[]){ "--lm-head", "int8", NULL },
	(const char *const[]){ "--decode-layout", "base3", NULL },
	(const char *const[]){ "--lm-head", "int8", "--decode-layout", "base3", NULL },
};

START_TEST(outputs_equal_without_built_and_hit)
{
	uint32_t p = (uint32_t)_i / 5, o = (uint32_t)_i % 5;
	char model[256], dir[256], what[128];
	model_path(presets[p].name, model, sizeof(model));
	snprintf(what, sizeof(what), "%s options %u", presets[p].name, o);
	snprintf(dir, sizeof(dir), "%s/cache-%s-%u", work, presets[p].name, o);
	struct answers none, built, hit;
	ck_assert_str_eq(run(model, "none", option_sets[o], &none), "off");
	ck_assert_str_eq(run(model, dir, option_sets[o], &built), "built");
	ck_assert_str_eq(run(model, dir, option_sets[o], &hit), "hit");
	assert_same(&none, &built, what);
	assert_same(&none, &hit, what);
	ck_assert_int_eq(files_in(dir, ".wcache"), 1);
	ck_assert_int_eq(files_in(dir, ".tmp."), 0);
}
END_TEST

/* A new mtime is a miss; so is an edited tensor with its old mtime put back (ctime moved). */
START_TEST(changed_model_file_is_a_miss)
{
	char model[256], dir[256];
	model_path("i2s", model, sizeof(model));
	char copy[300];
	snprintf(copy, sizeof(copy), "%s/changed.gguf", work);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "cp %s %s", model, copy);
	ck_assert_int_eq(system(cmd), 0);
	cache_dir("changed", dir, sizeof(dir));
	struct answers a, b;
	ck_assert_str_eq(run(copy, dir, NULL, &a), "built");
	ck_assert_str_eq(run(copy, dir, NULL, &a), "hit");
	struct timespec later[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = time(NULL) + 100 } };
	ck_assert_int_eq(utimensat(AT_FDCWD, copy, later, 0), 0);
	ck_assert_str_eq(run(copy, dir, NULL, &a), "built");
	ck_assert_str_eq(run(copy, dir, NULL, &a), "hit");
	/* Edit a weight (a mantissa bit of the embedding's first value), then put the mtime
	 * back: only the ctime tells. */
	struct stat st;
	ck_assert_int_eq(stat(copy, &st), 0);
	flip_byte(copy, embedding_offset(copy));
	struct timespec same[2] = { { .tv_nsec = UTIME_OMIT }, st.st_mtim };
	ck_assert_int_eq(utimensat(AT_FDCWD, copy, same, 0), 0);
	struct stat after;
	ck_assert_int_eq(stat(copy, &after), 0);
	ck_assert(after.st_mtim.tv_sec == st.st_mtim.tv_sec &&
		  after.st_mtim.tv_nsec == st.st_mtim.tv_nsec);
	ck_assert_str_eq(run(copy, dir, NULL, &a), "built");
	ck_assert_str_eq(run(copy, "none", NULL, &b), "off");
	assert_same(&a, &b, "the edited file");
	ck_assert_int_eq(files_in(dir, ".wcache"), 1); /* replaced, not added */
	unlink(copy);
}
END_TEST

/* Flipped, truncated and emptied caches are rebuilt, and the answers stay the file's. */
START_TEST(corrupt_caches_are_rebuilt)
{
	char model[256], dir[256], path[512];
	model_path("i2s", model, sizeof(model));
	cache_dir("corrupt", dir, sizeof(dir));
	struct answers want, got;
	ck_assert_str_eq(run(model, "none", NULL, &want), "off");
	ck_assert_str_eq(run(model, dir, NULL, &got), "built");
	the_cache(dir, path, sizeof(path));
	off_t size = file_size(path);
	const off_t flips[] = { 10, 8192 + 8, size / 2, size - 1 }; /* 8192: the directory */
	for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		flip_byte(path, flips[i]);
		ck_assert_str_eq(run(model, dir, NULL, &got), "built");
		assert_same(&want, &got, "after a flipped byte");
		ck_assert_str_eq(run(model, dir, NULL, &got), "hit");
	}
	ck_assert_int_eq(truncate(path, size / 3), 0);
	ck_assert_str_eq(run(model, dir, NULL, &got), "built");
	ck_assert_int_eq(truncate(path, 0), 0);
	ck_assert_str_eq(run(model, dir, NULL, &got), "built");
	assert_same(&want, &got, "after an empty cache");
	ck_assert_str_eq(run(model, dir, NULL, &got), "hit");
	assert_same(&want, &got, "from the rebuilt cache");
}
END_TEST

/* A cache another kernel variant wrote, under this variant's name: not used. */
START_TEST(other_kernel_variant_is_not_used)
{
	char model[256], dir[256], path[512], renamed[600];
	model_path("i2s", model, sizeof(model));
	cache_dir("variant", dir, sizeof(dir));
	struct answers a, b;
	ck_assert_str_eq(run(model, dir, NULL, &a), "built");
	the_cache(dir, path, sizeof(path));
	const char *v = strstr(path, ".o1.");
	ck_assert_ptr_nonnull(v);
	snprintf(renamed, sizeof(renamed), "%.*s.o1.scalar.wcache", (int)(v - path), path);
	ck_assert_int_eq(rename(path, renamed), 0);
	setenv("BITNET_KERNELS", "scalar", 1);
	ck_assert_str_eq(run(model, dir, NULL, &a), "built");
	ck_assert_str_eq(run(model, "none", NULL, &b), "off");
	unsetenv("BITNET_KERNELS");
	assert_same(&a, &b, "the scalar kernels");
}
END_TEST

/* One weight of a tensor's data in the file, as half bits, scaled by 1.5: that F16 matrix is
 * then no longer ternary (model.h). */
static void unternary_one_weight(const char *path, const char *tensor)
{
	struct bn_gguf g;
	char err[BN_GGUF_ERR_LEN];
	ck_assert_msg(bn_gguf_open(&g, path, err) == 0, "%s", err);
	const struct bn_gguf_tensor *t = bn_gguf_find_tensor(&g, tensor);
	ck_assert(t && t->type == BN_TYPE_F16);
	off_t at = (off_t)((const uint8_t *)t->data - g.base);
	uint16_t h = 0;
	for (uint64_t i = 0; (h & 0x7fff) == 0; i++, at += 2)
		memcpy(&h, t->data + 2 * i, 2);
	at -= 2;
	bn_gguf_close(&g);
	h = bn_float_to_half(1.5f * bn_half_to_float(h));
	int fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, &h, 2, at), 2);
	close(fd);
}

/* A bitnet-b1.58 F16 file with one matrix that is not ternary: the others are packed, that one
 * stays float, the cache records both decisions, and the answers and bitnet-cli info's
 * packing are the same built, from the cache and without one. */
START_TEST(mixed_float_file_from_the_cache)
{
	char model[256], dir[256];
	model_path("mixed", model, sizeof(model));
	tu_write_tiny_model(model, (const char *const[]){ "--type", "f16", NULL });
	unternary_one_weight(model, "blk.1.ffn_up.weight");
	cache_dir("mixed", dir, sizeof(dir));
	struct answers none, built, hit;
	ck_assert_str_eq(run(model, "none", NULL, &none), "off");
	ck_assert_str_eq(run(model, dir, NULL, &built), "built");
	ck_assert_str_eq(run(model, dir, NULL, &hit), "hit");
	assert_same(&none, &built, "mixed, built");
	assert_same(&none, &hit, "mixed, from the cache");
	const char *args[] = { "--cache-dir", dir, NULL };
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start_cpu(&d, model, args), 0);
	struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, (const char *const[]){ "info", NULL }, NULL, 0, &r), 0);
	ck_assert_msg(strstr(r.out, "\nternary_from_float=attn_q 2/2,attn_k 2/2,attn_v 2/2,"
				    "attn_output 2/2,ffn_gate 2/2,ffn_up 1/2,ffn_down 2/2\n") &&
			      strstr(r.out, "\nkept_float=blk.1.ffn_up.weight\n") &&
			      strstr(r.out, "\nweights_cache=hit\n"),
		      "%s", r.out);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
}
END_TEST

/* The second daemon of two_daemons_start_together: exit 10 when it built the cache, 11 when
 * it found the other's, 1 when it did not serve. */
static int start_beside(const char *model, const char *const *args)
{
	struct tu_daemon d;
	if (tu_daemon_start_cpu(&d, model, args) != 0)
		return 1;
	const char *state = cache_state(&d);
	int code = strcmp(state, "built") == 0 ? 10 : strcmp(state, "hit") == 0 ? 11 : 1;
	return tu_daemon_stop(&d, SIGTERM) == 0 ? code : 1;
}

/* Two daemons on an empty directory at once: both serve, one valid cache is left. Which one
 * builds depends on the scheduler (on a loaded machine one can be ready, its cache written,
 * before the other looks): each has built it or found the other's, and one of them built. */
START_TEST(two_daemons_start_together)
{
	char model[256], dir[256];
	model_path("i2s", model, sizeof(model));
	cache_dir("together", dir, sizeof(dir));
	const char *args[] = { "--cache-dir", dir, NULL };
	struct tu_daemon d1;
	pid_t kid = fork();
	if (kid == 0)
		_exit(start_beside(model, args));
	ck_assert_int_eq(tu_daemon_start_cpu(&d1, model, args), 0);
	int st;
	ck_assert_int_eq(waitpid(kid, &st, 0), kid);
	ck_assert(WIFEXITED(st) && (WEXITSTATUS(st) == 10 || WEXITSTATUS(st) == 11));
	struct answers a, b;
	answers_of(&d1, &a);
	const char *state = cache_state(&d1);
	ck_assert_msg(strcmp(state, "built") == 0 ||
			      (strcmp(state, "hit") == 0 && WEXITSTATUS(st) == 10),
		      "the first daemon's cache was %s, the second's %s", state,
		      WEXITSTATUS(st) == 10 ? "built" : "hit");
	ck_assert_int_eq(tu_daemon_stop(&d1, SIGTERM), 0);
	ck_assert_int_eq(files_in(dir, ".wcache"), 1);
	ck_assert_int_eq(files_in(dir, ".tmp."), 0);
	ck_assert_str_eq(run(model, dir, NULL, &b), "hit");
	assert_same(&a, &b, "the cache two daemons wrote");
}
END_TEST

/* A daemon stopped as soon as it is ready, its cache perhaps still being written: it leaves
 * the whole cache or none, never its temporary file, and the next start serves the same. */
START_TEST(a_stop_during_the_write_leaves_no_file)
{
	char model[256], dir[256];
	model_path("i2s", model, sizeof(model));
	cache_dir("stopped", dir, sizeof(dir));
	const char *args[] = { "--cache-dir", dir, NULL };
	struct answers a, b;
	ck_assert_str_eq(run(model, "none", NULL, &a), "off");
	for (int round = 0; round < 3; round++) {
		struct tu_daemon d;
		ck_assert_int_eq(tu_daemon_start_cpu(&d, model, args), 0);
		ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
		ck_assert_int_eq(files_in(dir, ".tmp."), 0);
		int whole = files_in(dir, ".wcache");
		ck_assert_str_eq(run(model, dir, NULL, &b), whole ? "hit" : "built");
		assert_same(&a, &b, "after a stop during the write");
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -f %s/*", dir);
		ck_assert_int_eq(system(cmd), 0);
	}
}
END_TEST

/* A directory that cannot be made (its parent is a file): the daemon serves without. */
START_TEST(unusable_directory_runs_without)
{
	char model[256], dir[300];
	model_path("i2s", model, sizeof(model));
	snprintf(dir, sizeof(dir), "%s/i2s.gguf/cache", work); /* under a regular file */
	struct answers a, b;
	ck_assert_str_eq(run(model, dir, NULL, &a), "failed");
	ck_assert_str_eq(run(model, "none", NULL, &b), "off");
	assert_same(&a, &b, "without a cache");
}
END_TEST

/* A writer killed mid-write leaves a temporary file: the next writer of that cache removes
 * it, and a half-written file never becomes the cache. That writer prunes the directory too:
 * a cache whose model file is gone is removed; and so does a start that hits its cache. */
START_TEST(a_dead_writers_temporary_file_is_removed)
{
	char model[256], dir[256], path[512], orphan[600], gone[300], dead_cache[PATH_MAX];
	model_path("i2s", model, sizeof(model));
	cache_dir("orphan", dir, sizeof(dir));
	struct answers a;
	ck_assert_str_eq(run(model, dir, NULL, &a), "built");
	the_cache(dir, path, sizeof(path));
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	snprintf(orphan, sizeof(orphan), "%s.tmp.%d.abcdef", path, (int)dead);
	int fd = open(orphan, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "torn", 4), 4);
	close(fd);
	snprintf(gone, sizeof(gone), "%s/gone.gguf", work);
	put_text(gone, "a model file, removed\n");
	cache_of(dir, gone, NULL, dead_cache, sizeof(dead_cache));
	ck_assert_int_eq(unlink(gone), 0);
	unlink(path); /* the next start writes the cache again */
	ck_assert_str_eq(run(model, dir, NULL, &a), "built");
	ck_assert_int_eq(access(orphan, F_OK), -1);
	ck_assert_int_eq(access(dead_cache, F_OK), -1);
	ck_assert_int_eq(files_in(dir, ".wcache"), 1);
	ck_assert_int_eq(files_in(dir, ".tmp."), 0);
	/* A start that hits its cache writes none, and prunes all the same. */
	put_text(gone, "another model file, removed\n");
	cache_of(dir, gone, NULL, dead_cache, sizeof(dead_cache));
	ck_assert_int_eq(unlink(gone), 0);
	ck_assert_str_eq(run(model, dir, NULL, &a), "hit");
	ck_assert_int_eq(access(dead_cache, F_OK), -1);
	ck_assert_int_eq(files_in(dir, ".wcache"), 1);
}
END_TEST

/* bitnet-cli names the socket it tried, why it failed, and how to choose another. */
START_TEST(cli_connect_error_says_where_and_why)
{
	char absent[300], dead[300];
	snprintf(absent, sizeof(absent), "%s/absent.sock", work);
	snprintf(dead, sizeof(dead), "%s/dead.sock", work);
	const char *const args_absent[] = { getenv("BITNET_CLI"), "--socket", absent, "info", NULL };
	struct tu_run r;
	ck_assert_int_eq(tu_run(args_absent, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 1);
	ck_assert_msg(strstr(r.err, absent) && strstr(r.err, "no such socket") &&
			      strstr(r.err, "--socket PATH") && strstr(r.err, "$BITNETD_SOCKET"),
		      "%s", r.err);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%.107s", dead);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0); /* nothing listens */
	close(fd);
	const char *const args_dead[] = { getenv("BITNET_CLI"), "--socket", dead, "info", NULL };
	ck_assert_int_eq(tu_run(args_dead, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 1);
	ck_assert_msg(strstr(r.err, dead) && strstr(r.err, "nothing accepts"), "%s", r.err);
}
END_TEST

/* bitnet-cli info says how the model was loaded. */
START_TEST(cli_info_reports_the_load)
{
	char model[256], dir[256];
	model_path("i2s", model, sizeof(model));
	cache_dir("info", dir, sizeof(dir));
	const char *args[] = { "--cache-dir", dir, NULL };
	for (int start = 0; start < 2; start++) {
		struct tu_daemon d;
		ck_assert_int_eq(tu_daemon_start_cpu(&d, model, args), 0);
		cache_state(&d); /* written */
		const char *const info[] = { "info", NULL };
		struct tu_run r;
		ck_assert_int_eq(tu_run_cli(&d, info, NULL, 0, &r), 0);
		ck_assert_msg(strstr(r.out, start ? "weights_cache=hit\n" : "weights_cache=built\n") &&
				      strstr(r.out, "weights_cache_path=") && strstr(r.out, dir) &&
				      strstr(r.out, "load_ms="),
			      "%s", r.out);
		ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	}
}
END_TEST

static void setup_models(void)
{
	tu_models_dir(work);
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		make_model(presets[i].name, presets[i].type, presets[i].embed);
}

int main(void)
{
	setup_models();
	Suite *s = suite_create("wcache");
	TCase *f = tcase_create("format");
	tcase_add_test(f, format_round_trip_and_checks);
	tcase_add_test(f, directory_and_name);
	suite_add_tcase(s, f);
	TCase *p = tcase_create("prune");
	tcase_add_test(p, prune_removes_only_what_can_never_be_used);
	tcase_add_test(p, model_tool_lists_and_prunes);
	suite_add_tcase(s, p);
	TCase *d = tcase_create("daemons");
	tcase_set_tags(d, TU_TAG_DAEMON);
	tcase_set_timeout(d, 300);
	tcase_add_loop_test(d, outputs_equal_without_built_and_hit, 0, 25);
	tcase_add_test(d, changed_model_file_is_a_miss);
	tcase_add_test(d, corrupt_caches_are_rebuilt);
	tcase_add_test(d, other_kernel_variant_is_not_used);
	tcase_add_test(d, two_daemons_start_together);
	tcase_add_test(d, mixed_float_file_from_the_cache);
	tcase_add_test(d, a_stop_during_the_write_leaves_no_file);
	tcase_add_test(d, unusable_directory_runs_without);
	tcase_add_test(d, a_dead_writers_temporary_file_is_removed);
	tcase_add_test(d, cli_connect_error_says_where_and_why);
	tcase_add_test(d, cli_info_reports_the_load);
	suite_add_tcase(s, d);
	int failed = tu_run_suite(s);
	tu_remove_dir(work);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
