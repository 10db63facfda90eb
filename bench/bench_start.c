/* SPDX-License-Identifier: MIT */
/*
 * bench-start — how long bitnetd takes to be ready, with and without its packed-weight cache
 * (issue 39), in one run. `make bench-start` makes the 2B4T-shape model and runs it. Each
 * start runs `bitnetd --model FILE --socket S --cache-dir D` (cpu backend) and times from the
 * fork to the moment `bitnet-cli info` against it has answered; the file is in the page cache
 * first (read once). Keys, each the median of --runs starts:
 *   file_mb                      the model file
 *   ready_s_nocache              --cache-dir none: the repack at every start (the old path)
 *   ready_s_old                  with --old BIN: that build of bitnetd (no cache flag), for
 *                                the old path against the new in one run
 *   ready_s_first                an empty cache directory: the repack (the cache is written
 *                                after ready)
 *   cache_written_s              that start's cache written (STATS: weights_cache built),
 *                                from the daemon's start
 *   ready_s_cached               the cache written by the start before
 *   cached_over_nocache          ready_s_cached / ready_s_nocache
 *   rss_anon_over_file_nocache, rss_anon_over_file_cached   the daemon's anonymous resident
 *                                memory once ready, over the file's size (the weights of a
 *                                cached start are file-backed: shared, evictable)
 *   rss_anon_mb_second_daemon    a second daemon on the same model and cache, beside the first
 *   socket_activation_ttft_s     a listening socket made first (as systemd does), a client
 *                                connected and its 1-token request submitted; then the daemon
 *                                started on that socket (LISTEN_FDS), cache warm: the request's
 *                                first token, from the daemon's start
 * What the bytes cost on this machine, measured first (the floors the figures are held to):
 *   first_touch_gbs_4k, first_touch_gbs_huge   fresh anonymous memory written once, by as
 *                                many threads as the daemon's pool (one per CPU), in 4 KiB
 *                                pages (MADV_NOHUGEPAGE) and in 2 MiB ones (MADV_HUGEPAGE),
 *                                medians of 3 rounds alternating the two: what
 *                                a start that repacks pays for the memory it fills; a VM
 *                                charges for the first touch of each page
 *   rewrite_gbs                  the same memory written again (the machine's write rate)
 *   page_cache_read_gbs          the model file read (read(2)) from the page cache
 *   hash_gbs, hash_gbs_pool      the kernel variant's XXH3 (kernels.h hash64) on memory, on
 *                                one thread and on the pool: the weights cache's check
 *   cache_mb                     the weights cache the first start wrote
 *   ready_s_cached_target        0.3 s plus cache_mb at page_cache_read_gbs (issue 57's target)
 *   ready_s_cached_floor         cache_mb at hash_gbs_pool: the check alone
 *   ready_s_first_target         1.5 s per GB of the model file (issue 57's target)
 *   ready_s_first_floor          cache_mb at first_touch_gbs_huge: the repacked bytes' first
 *                                touch alone
 * BENCH_START_TOUCH_MB (default 512) sizes the first-touch and hash buffers.
 */
#define _GNU_SOURCE
#include "bench_util.h"
#include "bitnet_client.h"
#include "kernels.h"
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#define MAX_RUNS 15
#define READY_TIMEOUT_NS (120LL * 1000000000LL)

struct setup {
	const char *bitnetd, *cli, *model;
	const char *old;     /* NULL, or an older bitnetd to time beside (--old) */
	char dir[128];       /* scratch: sockets, cache directories */
	int runs;
};

/* bitnetd with the cpu backend on `socket`; extra: a --cache-dir value (NULL: the --old
 * build, without the flag). fd >= 0: passed as the listening socket (LISTEN_FDS). */
static pid_t start_daemon(const struct setup *s, const char *socket, const char *cache_dir,
			  int listen_fd)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	if (listen_fd >= 0) {
		char pid_text[32];
		snprintf(pid_text, sizeof(pid_text), "%d", (int)getpid());
		if (dup2(listen_fd, 3) < 0)
			_exit(127);
		setenv("LISTEN_FDS", "1", 1);
		setenv("LISTEN_PID", pid_text, 1);
	}
	int devnull = open("/dev/null", O_WRONLY);
	if (devnull >= 0)
		dup2(devnull, 2);
	if (!cache_dir)
		execl(s->old, s->old, "--model", s->model, "--socket", socket, "--log-level", "warn",
		      (char *)NULL);
	else
		execl(s->bitnetd, s->bitnetd, "--model", s->model, "--socket", socket, "--cache-dir",
		      cache_dir, "--log-level", "warn", (char *)NULL);
	_exit(127);
}

static void stop_daemon(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

/* `bitnet-cli --socket S info` run to its end: 0 when it answered. */
static int cli_info(const struct setup *s, const char *socket)
{
	pid_t pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0) {
			dup2(devnull, 1);
			dup2(devnull, 2);
		}
		execl(s->cli, s->cli, "--socket", socket, "info", (char *)NULL);
		_exit(127);
	}
	int st;
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Something accepts on `socket` (the daemon listens once loaded). */
static int accepts(const char *socket_path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%.107s", socket_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Waits (1 ms polls) until the daemon accepts, then runs `bitnet-cli info`: seconds from
 * t0 to its answer, or < 0 when the daemon died or never answered. */
static double time_to_info(const struct setup *s, const char *socket_path, int64_t t0,
			   pid_t daemon)
{
	while (bench_now_ns() - t0 < READY_TIMEOUT_NS) {
		if (waitpid(daemon, NULL, WNOHANG) == daemon)
			return -1;
		if (accepts(socket_path))
			return cli_info(s, socket_path) == 0 ? (double)(bench_now_ns() - t0) * 1e-9 : -1;
		usleep(1000);
	}
	return -1;
}

/* Resident anonymous and file-backed memory of a process, in bytes. */
static void rss_of(pid_t pid, double *anon, double *file)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	*anon = *file = -1;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long kb;
		if (sscanf(line, "RssAnon: %lu kB", &kb) == 1)
			*anon = (double)kb * 1024;
		else if (sscanf(line, "RssFile: %lu kB", &kb) == 1)
			*file = (double)kb * 1024;
	}
	if (f)
		fclose(f);
}

/* Seconds from t0 until the daemon on socket_path says its weights cache is written (STATS),
 * or < 0 when it does not within the timeout or says it failed. */
static double time_to_cache_written(const char *socket_path, int64_t t0)
{
	static char text[1 << 16];
	struct bn_client *c;
	double secs = -1;
	if (bn_connect(socket_path, 1, &c) < 0)
		return -1;
	while (bench_now_ns() - t0 < READY_TIMEOUT_NS && bn_daemon_stats(c, text, sizeof(text)) >= 0) {
		if (strstr(text, "\nbitnetd_weights_cache{state=\"built\"} 1")) {
			secs = (double)(bench_now_ns() - t0) * 1e-9;
			break;
		}
		if (!strstr(text, "\nbitnetd_weights_cache{state=\"writing\"} 1"))
			break;
		usleep(2000);
	}
	bn_disconnect(c);
	return secs;
}

/* One start: seconds to ready, the daemon's anonymous RSS then (*anon); with written, the
 * seconds until its weights cache is written too (*written). The daemon is stopped unless
 * *keep is set, where its pid goes. */
static double one_start(const struct setup *s, const char *cache_dir, double *anon,
			pid_t *keep, const char *socket_name, double *written)
{
	char socket_path[256];
	snprintf(socket_path, sizeof(socket_path), "%s/%s", s->dir, socket_name);
	unlink(socket_path);
	int64_t t0 = bench_now_ns();
	pid_t pid = start_daemon(s, socket_path, cache_dir, -1);
	double secs = time_to_info(s, socket_path, t0, pid);
	double file;
	rss_of(pid, anon, &file);
	if (written)
		*written = secs < 0 ? -1 : time_to_cache_written(socket_path, t0);
	if (keep)
		*keep = pid;
	else
		stop_daemon(pid);
	return secs;
}

static void rm_cache(const char *dir)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench-start: could not empty %s\n", dir);
}

/* The socket first, a client's request queued in its backlog, then the daemon: the
 * request's first token, from the daemon's start. */
static double socket_activation(const struct setup *s, const char *cache_dir)
{
	char socket_path[256];
	snprintf(socket_path, sizeof(socket_path), "%s/activated.sock", s->dir);
	unlink(socket_path);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%.107s", socket_path);
	int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 16) < 0)
		return -1;
	int64_t t0 = bench_now_ns();
	pid_t pid = start_daemon(s, socket_path, cache_dir, lfd);
	close(lfd);
	struct bn_client *c;
	double secs = -1;
	if (bn_connect(socket_path, 1, &c) == 0) { /* waits in the backlog for the daemon */
		uint32_t prompt[4] = { 1, 100, 200, 300 }, out[1];
		struct bn_request req = { .prompt = prompt, .n_prompt = 4, .max_tokens = 1,
					  .flags = BN_REQ_IGNORE_EOS };
		struct bn_result r;
		if (bn_generate(c, &req, out, 1, &r, READY_TIMEOUT_NS) == 0)
			secs = (double)(bench_now_ns() - t0) * 1e-9;
		bn_disconnect(c);
	}
	stop_daemon(pid);
	return secs;
}

/* ---- floors: what the bytes cost on this machine ------------------------------------------ */

#define HUGE_BYTES ((size_t)2 << 20)
#define FLOOR_ROUNDS 3

struct fill_job {
	uint8_t *p;
	size_t bytes;
	uint32_t n_tasks;
	uint8_t value;
};

static void fill_task(void *ctx, uint32_t task)
{
	const struct fill_job *j = ctx;
	size_t per = (j->bytes / j->n_tasks + 4095) & ~(size_t)4095;
	size_t lo = (size_t)task * per, hi = lo + per < j->bytes ? lo + per : j->bytes;
	if (lo < hi)
		memset(j->p + lo, j->value, hi - lo);
}

/* Fresh anonymous memory, 2 MiB-aligned, advised as asked (MADV_HUGEPAGE or MADV_NOHUGEPAGE):
 * GB/s of its first write on the pool (*rewrite: of the second). */
static double first_touch(struct bn_pool *pool, size_t bytes, int advice, double *rewrite)
{
	uint8_t *area = mmap(NULL, bytes + HUGE_BYTES, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return -1;
	uint8_t *p = (uint8_t *)(((uintptr_t)area + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
	madvise(p, bytes, advice);
	struct fill_job j = { .p = p, .bytes = bytes, .n_tasks = 4 * bn_pool_threads(pool),
			      .value = 1 };
	int64_t t0 = bench_now_ns();
	bn_pool_run(pool, j.n_tasks, fill_task, &j);
	int64_t t1 = bench_now_ns();
	j.value = 2;
	bn_pool_run(pool, j.n_tasks, fill_task, &j);
	int64_t t2 = bench_now_ns();
	munmap(area, bytes + HUGE_BYTES);
	if (rewrite)
		*rewrite = (double)bytes / (double)(t2 - t1);
	return (double)bytes / (double)(t1 - t0);
}

/* GB/s of read(2) of a file that is in the page cache (read once before). */
static double page_cache_read(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t *buf = malloc(HUGE_BYTES);
	double gbs = -1;
	if (fd >= 0 && buf) {
		uint64_t total = 0;
		ssize_t n;
		int64_t t0 = bench_now_ns();
		while ((n = read(fd, buf, HUGE_BYTES)) > 0)
			total += (uint64_t)n;
		gbs = n == 0 ? (double)total / (double)(bench_now_ns() - t0) : -1;
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	return gbs;
}

struct hash_job {
	uint64_t (*hash64)(const void *p, size_t n);
	const uint8_t *p;
	size_t bytes;
	uint64_t sink;
};

static void hash_task(void *ctx, uint32_t task)
{
	struct hash_job *j = ctx;
	size_t at = (size_t)task << 20; /* the cache's chunks are 1 MiB */
	uint64_t h = j->hash64(j->p + at, j->bytes - at < (1u << 20) ? j->bytes - at : 1u << 20);
	__atomic_fetch_xor(&j->sink, h, __ATOMIC_RELAXED);
}

/* GB/s of the kernel variant's XXH3 over memory written before, on one thread (*pooled: on
 * the pool, in 1 MiB chunks as the weights cache checks its data). */
static double hash_rate(struct bn_pool *pool, size_t bytes, double *pooled)
{
	const struct bn_kernels *k = bn_kernels_select(NULL);
	uint8_t *p = malloc(bytes);
	if (!k || !p) {
		free(p);
		return -1;
	}
	for (size_t i = 0; i < bytes; i++)
		p[i] = (uint8_t)(i * 2654435761u >> 24);
	struct hash_job j = { .hash64 = k->hash64, .p = p, .bytes = bytes };
	uint32_t n_tasks = (uint32_t)((bytes + (1u << 20) - 1) >> 20);
	int64_t t0 = bench_now_ns();
	for (uint32_t t = 0; t < n_tasks; t++)
		hash_task(&j, t);
	int64_t t1 = bench_now_ns();
	bn_pool_run(pool, n_tasks, hash_task, &j);
	int64_t t2 = bench_now_ns();
	free(p);
	*pooled = (double)bytes / (double)(t2 - t1);
	return (double)bytes / (double)(t1 - t0);
}

struct floors {
	double touch_4k, touch_huge, rewrite, read, hash, hash_pool;
};

static int measure_floors(const char *model, struct floors *f)
{
	const char *mb = getenv("BENCH_START_TOUCH_MB");
	size_t bytes = (size_t)(mb && atoi(mb) > 0 ? atoi(mb) : 512) << 20;
	struct bn_pool *pool = bn_pool_new(0);
	if (!pool)
		return -1;
	/* Rounds alternate the page sizes: which of them gets memory the host already backs
	 * (freed by the round before) would otherwise decide the comparison. */
	double t4k[FLOOR_ROUNDS], thuge[FLOOR_ROUNDS], rewrite[FLOOR_ROUNDS];
	for (int r = 0; r < FLOOR_ROUNDS; r++) {
		t4k[r] = first_touch(pool, bytes, MADV_NOHUGEPAGE, NULL);
		thuge[r] = first_touch(pool, bytes, MADV_HUGEPAGE, &rewrite[r]);
	}
	f->touch_4k = bench_median(t4k, FLOOR_ROUNDS);
	f->touch_huge = bench_median(thuge, FLOOR_ROUNDS);
	f->rewrite = bench_median(rewrite, FLOOR_ROUNDS);
	f->read = page_cache_read(model);
	f->hash = hash_rate(pool, bytes, &f->hash_pool);
	bn_pool_free(pool);
	return f->touch_4k > 0 && f->touch_huge > 0 && f->read > 0 && f->hash > 0 ? 0 : -1;
}

/* The size of the weights cache file in dir (the one file a start wrote there), or 0. */
static uint64_t cache_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t size = 0;
	while (d && (e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		char path[512];
		struct stat st;
		if (n < 7 || strcmp(e->d_name + n - 7, ".wcache") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) == 0)
			size = (uint64_t)st.st_size;
	}
	if (d)
		closedir(d);
	return size;
}

static int parse(int argc, char **argv, struct setup *s)
{
	s->bitnetd = getenv("BITNETD");
	s->cli = getenv("BITNET_CLI");
	s->runs = 5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc)
			s->model = argv[++i];
		else if (!strcmp(argv[i], "--old") && i + 1 < argc)
			s->old = argv[++i];
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			s->runs = atoi(argv[++i]);
		else
			return -1;
	}
	if (s->runs < 1 || s->runs > MAX_RUNS)
		s->runs = 5;
	return s->model && s->bitnetd && s->cli ? 0 : -1;
}

int main(int argc, char **argv)
{
	struct setup s = { 0 };
	if (parse(argc, argv, &s) < 0) {
		fprintf(stderr, "usage: BITNETD=... BITNET_CLI=... bench-start --model FILE [--runs N] [--old BITNETD]\n");
		return 2;
	}
	snprintf(s.dir, sizeof(s.dir), "/tmp/bitnet-bench-start-%d", (int)getpid());
	if (mkdir(s.dir, 0700) < 0)
		return 1;
	struct stat st;
	if (stat(s.model, &st) < 0)
		return 1;
	char cmd[512], cache[192];
	snprintf(cmd, sizeof(cmd), "cat '%s' > /dev/null", s.model); /* the page cache warm */
	if (system(cmd) != 0)
		return 1;
	struct floors fl = { 0 };
	if (measure_floors(s.model, &fl) < 0) {
		fprintf(stderr, "bench-start: the floors could not be measured\n");
		return 1;
	}
	snprintf(cache, sizeof(cache), "%s/cache", s.dir);
	double none[MAX_RUNS], first[MAX_RUNS], written[MAX_RUNS], cached[MAX_RUNS], old[MAX_RUNS];
	double a, anon_none = 0, anon_cached = 0;
	/* Rounds alternate the kinds of start, so a drift of the machine hits each. */
	for (int i = 0; i < s.runs; i++) {
		old[i] = s.old ? one_start(&s, NULL, &a, NULL, "d.sock", NULL) : 0;
		none[i] = one_start(&s, "none", &a, NULL, "d.sock", NULL);
		anon_none = a;
		rm_cache(cache);
		first[i] = one_start(&s, cache, &a, NULL, "d.sock", &written[i]);
		cached[i] = one_start(&s, cache, &a, NULL, "d.sock", NULL);
		anon_cached = a;
		if (none[i] < 0 || first[i] < 0 || cached[i] < 0 || old[i] < 0 || written[i] < 0) {
			fprintf(stderr, "bench-start: a daemon did not come up or write its cache\n");
			return 1;
		}
	}
	double cache_gb = (double)cache_bytes(cache) / 1e9;
	pid_t one, two;
	double anon_two;
	one_start(&s, cache, &a, &one, "one.sock", NULL);
	one_start(&s, cache, &anon_two, &two, "two.sock", NULL);
	stop_daemon(one);
	stop_daemon(two);
	double ttft = socket_activation(&s, cache);
	double file_mb = (double)st.st_size / 1e6;
	double n_s = bench_median(none, s.runs), f_s = bench_median(first, s.runs), c_s = bench_median(cached, s.runs);
	printf("runs=%d\nfile_mb=%.1f\n", s.runs, file_mb);
	if (s.old)
		printf("ready_s_old=%.3f\n", bench_median(old, s.runs));
	printf("ready_s_nocache=%.3f\nready_s_first=%.3f\ncache_written_s=%.3f\n", n_s, f_s,
	       bench_median(written, s.runs));
	printf("ready_s_cached=%.3f\n", c_s);
	printf("cached_over_nocache=%.3f\n", c_s / n_s);
	printf("rss_anon_over_file_nocache=%.3f\nrss_anon_over_file_cached=%.3f\n",
	       anon_none / (double)st.st_size, anon_cached / (double)st.st_size);
	printf("rss_anon_mb_second_daemon=%.1f\n", anon_two / 1e6);
	printf("socket_activation_ttft_s=%.3f\n", ttft);
	printf("first_touch_gbs_4k=%.2f\nfirst_touch_gbs_huge=%.2f\nrewrite_gbs=%.2f\n"
	       "page_cache_read_gbs=%.2f\nhash_gbs=%.2f\nhash_gbs_pool=%.2f\n", fl.touch_4k,
	       fl.touch_huge, fl.rewrite, fl.read, fl.hash, fl.hash_pool);
	printf("cache_mb=%.1f\nready_s_cached_target=%.3f\nready_s_cached_floor=%.3f\n",
	       cache_gb * 1e3, 0.3 + cache_gb / fl.read, cache_gb / fl.hash_pool);
	printf("ready_s_first_target=%.3f\nready_s_first_floor=%.3f\n", 1.5 * file_mb / 1e3,
	       cache_gb / fl.touch_huge);
	rm_cache(s.dir);
	return 0;
}
