/* SPDX-License-Identifier: MIT */
/*
 * Models by name (hub/, bitnet-model pull, bitnetd --model hf:) against a stand-in for the
 * Hugging Face Hub (tests/hub_server.py) on loopback: the Hub's listing with LFS sha256, a
 * redirect to a "CDN" on another host, Range requests, a server that cuts the connection, a
 * wrong sha256, gated and private repositories, 404s, several GGUF files, huggingface_hub's
 * cache layout both ways, huggingface_hub's lock, offline use, two pulls at once. The server
 * counts what it serves, so "fetches nothing" and "fetches only the rest" are byte counts.
 */
#define _GNU_SOURCE
#include "hub.h"

#include "testutil.h"

#include "ckassert.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOKEN "hf_standin_secret_token"
#define ONE_SIZE ((1u << 20) + 123u)   /* an odd size: no boundary falls on a power of two */
#define SMALL_SIZE 4096u
#define DROP_AT 400000u

static char work[] = "/tmp/bn-pull-XXXXXX";

/* The repositories of the ternary models bitnetd runs or will run, as their publishers name
 * them (README.md's table): each holds one GGUF file, ggml-model-i2_s.gguf. */
static const char *const published[] = {
	"microsoft/bitnet-b1.58-2B-4T-gguf",
	"tiiuae/Falcon3-1B-Instruct-1.58bit-GGUF",
	"tiiuae/Falcon3-3B-Instruct-1.58bit-GGUF",
	"tiiuae/Falcon3-7B-Instruct-1.58bit-GGUF",
	"tiiuae/Falcon3-10B-Instruct-1.58bit-GGUF",
	"tiiuae/Falcon-E-1B-Instruct-GGUF",
	"tiiuae/Falcon-E-3B-Instruct-GGUF",
};
#define N_PUBLISHED (sizeof(published) / sizeof(published[0]))
static char endpoint[64];
static pid_t server_pid;

/* ------------------------------------------------------------------------------------------ */
/* The stand-in Hub: its repositories, started once for the whole suite                       */
/* ------------------------------------------------------------------------------------------ */

/* A commit id of its own for repository number i. */
static const char *commit_of(unsigned i)
{
	static char ids[32][41];
	snprintf(ids[i], sizeof(ids[i]), "%08x%08x%08x%08x%08x", 0xc0ffee00u + i, i, i, i, i);
	return ids[i];
}

static void data_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/data/%s", work, name);
}

/* n pseudo-random bytes (seeded by name) in data/NAME. */
static void make_data(const char *name, size_t n)
{
	char path[256];
	data_path(path, sizeof(path), name);
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(EXIT_FAILURE);
	}
	tu_rng_seed(n * 31 + strlen(name) * 7 + (unsigned char)name[0]);
	for (size_t i = 0; i < n; i++)
		fputc((int)(tu_rng_next() >> 24), f);
	fclose(f);
}

/* {"name": name, "path": data/DATA} plus the extra fields, "k", json, ... NULL. */
static json_t *file_entry(const char *name, const char *data, ...)
{
	char path[256];
	data_path(path, sizeof(path), data);
	json_t *f = json_pack("{s:s, s:s}", "name", name, "path", path);
	va_list ap;
	va_start(ap, data);
	for (const char *k; (k = va_arg(ap, const char *));)
		json_object_set_new(f, k, va_arg(ap, json_t *));
	va_end(ap);
	return f;
}

static void add_repo(json_t *repos, const char *repo, unsigned i, json_t *extra, json_t *files)
{
	json_t *r = json_pack("{s:s, s:o}", "commit", commit_of(i), "files", files);
	if (extra)
		json_object_update(r, extra);
	json_decref(extra);
	json_object_set_new(repos, repo, r);
}

static void write_config(const char *path)
{
	char model[256];
	make_data("one.bin", ONE_SIZE);
	make_data("small.bin", SMALL_SIZE);
	make_data("readme.bin", 300);
	data_path(model, sizeof(model), "tiny.gguf");
	tu_write_tiny_model(model, (const char *[]){ NULL });
	json_t *repos = json_object();
	add_repo(repos, "t/one", 0, NULL, json_pack("[o, o]", file_entry("model.gguf", "one.bin", NULL),
		 file_entry("README.md", "readme.bin", "lfs", json_false(), NULL)));
	add_repo(repos, "t/drop", 1, NULL, json_pack("[o]", file_entry("model.gguf", "one.bin",
		 "drop_at", json_integer(DROP_AT), NULL)));
	add_repo(repos, "t/slow", 2, NULL, json_pack("[o]", file_entry("model.gguf", "one.bin",
		 "rate", json_integer(2000000), NULL)));
	add_repo(repos, "t/together", 3, NULL, json_pack("[o]", file_entry("model.gguf", "one.bin",
		 "rate", json_integer(4000000), NULL)));
	add_repo(repos, "t/badsha", 4, NULL, json_pack("[o]", file_entry("model.gguf", "small.bin",
		 "sha256", json_string("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
		 NULL)));
	add_repo(repos, "t/gated", 5, json_pack("{s:b}", "gated", 1), json_pack("[o, o]",
		 file_entry("model.gguf", "small.bin", NULL),
		 file_entry("plain.gguf", "readme.bin", "lfs", json_false(), NULL)));
	add_repo(repos, "t/private", 6, json_pack("{s:b}", "private", 1),
		 json_pack("[o]", file_entry("model.gguf", "small.bin", NULL)));
	add_repo(repos, "t/multi", 7, NULL, json_pack("[o, o, o, o, o]",
		 file_entry("m-F16.gguf", "small.bin", NULL), file_entry("m-TQ1_0.gguf", "small.bin", NULL),
		 file_entry("m-TQ2_0.gguf", "small.bin", NULL), file_entry("m-i2_s.gguf", "small.bin", NULL),
		 file_entry("README.md", "readme.bin", "lfs", json_false(), NULL)));
	add_repo(repos, "t/ternary", 8, NULL, json_pack("[o, o, o]",
		 file_entry("m-TQ1_0.gguf", "small.bin", NULL), file_entry("m-TQ2_0.gguf", "small.bin", NULL),
		 file_entry("m-f16.gguf", "small.bin", NULL)));
	add_repo(repos, "t/floats", 9, NULL, json_pack("[o, o]",
		 file_entry("m-f16.gguf", "small.bin", NULL), file_entry("m-q4_k.gguf", "small.bin", NULL)));
	add_repo(repos, "t/python", 10, NULL, json_pack("[o]", file_entry("model.gguf", "one.bin", NULL)));
	add_repo(repos, "t/norange", 11, NULL, json_pack("[o]", file_entry("model.gguf", "one.bin",
		 "no_range", json_true(), "drop_at", json_integer(300000), NULL)));
	add_repo(repos, "t/cuts", 12, NULL, json_pack("[o]", file_entry("model.gguf", "small.bin",
		 "drop_at", json_integer(0), "drops", json_integer(-1), NULL)));
	add_repo(repos, "t/huge", 13, NULL, json_pack("[o]", file_entry("model.gguf", "small.bin",
		 "size", json_integer(1000000000000000LL), NULL)));
	add_repo(repos, "t/model", 14, NULL, json_pack("[o]", file_entry("ggml-model-i2_s.gguf",
		 "tiny.gguf", NULL)));
	add_repo(repos, "t/locked", 15, NULL, json_pack("[o]", file_entry("model.gguf", "small.bin", NULL)));
	add_repo(repos, "t/plain", 16, NULL, json_pack("[o]", file_entry("model.gguf", "small.bin",
		 "lfs", json_false(), NULL)));
	/* The published repositories' names and layouts (README.md and .gitattributes in git,
	 * the GGUF file in LFS), with the tiny model as their GGUF file. */
	for (unsigned i = 0; i < N_PUBLISHED; i++)
		add_repo(repos, published[i], 17 + i, NULL, json_pack("[o, o, o]",
			 file_entry(".gitattributes", "readme.bin", "lfs", json_false(), NULL),
			 file_entry("README.md", "readme.bin", "lfs", json_false(), NULL),
			 file_entry("ggml-model-i2_s.gguf", "tiny.gguf", NULL)));
	/* bitnet.cpp's conversions as its setup_env.py names them: F16, TL1 and TL2. */
	add_repo(repos, "t/tiled", 17 + N_PUBLISHED, NULL, json_pack("[o, o, o]",
		 file_entry("ggml-model-f16.gguf", "small.bin", NULL),
		 file_entry("ggml-model-tl1.gguf", "small.bin", NULL),
		 file_entry("ggml-model-tl2.gguf", "small.bin", NULL)));
	add_repo(repos, "t/tiledonly", 18 + N_PUBLISHED, NULL, json_pack("[o, o]",
		 file_entry("ggml-model-tl2.gguf", "small.bin", NULL),
		 file_entry("README.md", "readme.bin", "lfs", json_false(), NULL)));
	add_repo(repos, "t/revs", 17, json_pack("{s:{s:s, s:s}}", "revisions", "main", commit_of(17),
		 "refs/pr/1", commit_of(18)), json_pack("[o]", file_entry("model.gguf", "small.bin", NULL)));
	json_t *config = json_pack("{s:s, s:o}", "token", TOKEN, "repos", repos);
	if (json_dump_file(config, path, JSON_INDENT(1)) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(EXIT_FAILURE);
	}
	json_decref(config);
}

/* Starts tests/hub_server.py and reads its ports; exits the test program when it cannot. */
static void start_server(void)
{
	char config[256], dir[256];
	snprintf(dir, sizeof(dir), "%s/data", work);
	mkdir(dir, 0755);
	snprintf(config, sizeof(config), "%s/hub.json", work);
	write_config(config);
	const char *script = getenv("BITNET_HUB_SERVER");
	script = script && *script ? script : "tests/hub_server.py";
	int fds[2];
	if (pipe(fds) < 0 || (server_pid = fork()) < 0) {
		perror("test_pull: starting the stand-in Hub");
		exit(EXIT_FAILURE);
	}
	if (server_pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		execlp("python3", "python3", script, "--config", config, (char *)NULL);
		fprintf(stderr, "cannot run python3 %s: %s\n", script, strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	char line[128] = "";
	FILE *f = fdopen(fds[0], "r");
	unsigned hub_port = 0;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "%u", &hub_port) != 1) {
		fprintf(stderr, "test_pull: the stand-in Hub (%s) did not start\n", script);
		kill(server_pid, SIGKILL);
		exit(EXIT_FAILURE);
	}
	fclose(f);
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%u", hub_port);
}

static void stop_server(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGTERM);
		waitpid(server_pid, NULL, 0);
	}
}

/* ------------------------------------------------------------------------------------------ */
/* What the server served                                                                      */
/* ------------------------------------------------------------------------------------------ */

static size_t collect(char *data, size_t size, size_t n, void *ctx)
{
	json_t **out = ctx;
	json_error_t e;
	json_decref(*out);
	*out = json_loadb(data, size * n, 0, &e);
	return size * n;
}

/* {"bytes": N, "requests": [{"host", "path", "range_start", "bytes", "auth"}, ...]} of repo. */
static json_t *served(const char *repo)
{
	char url[256];
	json_t *stats = NULL;
	snprintf(url, sizeof(url), "%s/_stats?repo=%s", endpoint, repo);
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &stats);
	ck_assert_int_eq(curl_easy_perform(c), CURLE_OK);
	curl_easy_cleanup(c);
	ck_assert_ptr_nonnull(stats);
	return stats;
}

static long long served_bytes(const char *repo)
{
	json_t *s = served(repo);
	long long n = json_integer_value(json_object_get(s, "bytes"));
	json_decref(s);
	return n;
}

/* How many requests of a kind ("listing", "resolve", "download"; NULL: any) repo had. */
static size_t served_requests(const char *repo, const char *kind)
{
	json_t *s = served(repo), *q;
	size_t i, n = 0;
	json_array_foreach(json_object_get(s, "requests"), i, q)
		n += !kind || !strcmp(json_string_value(json_object_get(q, "kind")), kind);
	json_decref(s);
	return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Pulling                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* What the reporter heard. */
static char notes[16384];
static unsigned n_progress;
static struct bn_hub_progress last_progress;

static void on_note(void *ctx, const char *text)
{
	(void)ctx;
	size_t len = strlen(notes);
	snprintf(notes + len, sizeof(notes) - len, "%s\n", text);
}

static void on_progress(void *ctx, const struct bn_hub_progress *p)
{
	(void)ctx;
	n_progress++;
	last_progress = *p;
}

static const struct bn_hub_reporter recorder = { on_note, on_progress, NULL };

/* A fresh cache directory under the work directory. */
static void new_cache(char *out, size_t cap)
{
	snprintf(out, cap, "%s/cache-XXXXXX", work);
	ck_assert_ptr_nonnull(mkdtemp(out));
}

static struct bn_hub_options options(const char *cache)
{
	struct bn_hub_options o;
	memset(&o, 0, sizeof(o));
	snprintf(o.endpoint, sizeof(o.endpoint), "%s", endpoint);
	snprintf(o.cache_dir, sizeof(o.cache_dir), "%s", cache);
	o.max_retries = 5;
	o.retry_wait_ms = 1; /* the waits' lengths are not under test: their count is */
	o.report = &recorder;
	notes[0] = '\0';
	n_progress = 0;
	return o;
}

static int pull(const struct bn_hub_options *o, const char *name, struct bn_hub_result *r,
		char *err, size_t cap)
{
	err[0] = '\0';
	return bn_hub_pull(o, name, NULL, r, err, cap);
}

/* 1 when the file at a (links followed) holds exactly data/DATA's bytes. */
static int same_file(const char *a, const char *data)
{
	char path[256], x[65536], y[65536];
	data_path(path, sizeof(path), data);
	FILE *f = fopen(a, "rb"), *g = fopen(path, "rb");
	int same = f && g;
	for (size_t n, m; same;) {
		n = fread(x, 1, sizeof(x), f);
		m = fread(y, 1, sizeof(y), g);
		same = n == m && memcmp(x, y, n) == 0;
		if (n == 0)
			break;
	}
	if (f)
		fclose(f);
	if (g)
		fclose(g);
	return same;
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* The sha256 of data/NAME in hex, as the Hub lists it. */
static void sha256_of(const char *name, char hex[65])
{
	char path[256];
	unsigned char md[32], buf[65536];
	unsigned len;
	data_path(path, sizeof(path), name);
	FILE *f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;)
		EVP_DigestUpdate(ctx, buf, n);
	EVP_DigestFinal_ex(ctx, md, &len);
	EVP_MD_CTX_free(ctx);
	fclose(f);
	for (unsigned i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Counts the files under dir whose name ends with suffix (find). */
static int count_files(const char *dir, const char *suffix)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "find '%s' -name '*%s' | wc -l", dir, suffix);
	FILE *p = popen(cmd, "r");
	int n = -1;
	ck_assert_int_eq(fscanf(p, "%d", &n), 1);
	pclose(p);
	return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Tests                                                                                       */
/* ------------------------------------------------------------------------------------------ */

START_TEST(a_pull_lands_in_the_huggingface_hub_layout)
{
	char cache[256], path[512], link[512], sha[65], ref[64] = "";
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	char err[2048];
	long long before = served_bytes("t/one");
	ck_assert_msg(pull(&o, "t/one", &r, err, sizeof(err)) == 0, "%s", err);
	/* The only GGUF file (README.md is not one), byte for byte, fetched once. */
	ck_assert_str_eq(r.file, "model.gguf");
	ck_assert_str_eq(r.commit, commit_of(0));
	ck_assert(same_file(r.path, "one.bin"));
	ck_assert_int_eq(served_bytes("t/one") - before, ONE_SIZE);
	ck_assert_int_eq(r.fetched, ONE_SIZE);
	ck_assert(!r.was_cached && r.hub_asked);
	/* snapshots/COMMIT/FILE -> ../../blobs/SHA256, refs/main = COMMIT without a newline. */
	sha256_of("one.bin", sha);
	snprintf(path, sizeof(path), "%s/models--t--one/snapshots/%s/model.gguf", cache, commit_of(0));
	ck_assert_str_eq(r.path, path);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	ck_assert_int_gt(n, 0);
	link[n] = '\0';
	ck_assert_str_eq(link, (snprintf(path, sizeof(path), "../../blobs/%s", sha), path));
	snprintf(path, sizeof(path), "%s/models--t--one/refs/main", cache);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fread(ref, 1, sizeof(ref) - 1, f), 40);
	fclose(f);
	ck_assert_str_eq(ref, commit_of(0));
	/* huggingface_hub's lock file, no partial file left, and the cache tagged for backups. */
	snprintf(path, sizeof(path), "%s/.locks/models--t--one/%s.lock", cache, sha);
	ck_assert(exists(path));
	ck_assert_int_eq(count_files(cache, ".incomplete"), 0);
	snprintf(path, sizeof(path), "%s/CACHEDIR.TAG", cache);
	ck_assert(exists(path));
	/* Progress ended with every byte. */
	ck_assert_uint_ge(n_progress, 1);
	ck_assert(last_progress.finished && last_progress.done == ONE_SIZE);
	ck_assert_ptr_nonnull(strstr(notes, "downloading t/one:model.gguf (1.05 MB)"));
}
END_TEST

START_TEST(a_second_pull_fetches_nothing)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r, again;
	ck_assert_msg(pull(&o, "t/one", &r, err, sizeof(err)) == 0, "%s", err);
	long long before = served_bytes("t/one");
	size_t listings = served_requests("t/one", "listing"), others = served_requests("t/one", NULL);
	ck_assert_msg(pull(&o, "t/one", &again, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(served_bytes("t/one"), before);
	/* The Hub was asked what main is now, and nothing else: not even a resolve. */
	ck_assert_uint_eq(served_requests("t/one", "listing"), listings + 1);
	ck_assert_uint_eq(served_requests("t/one", NULL), others + 1);
	ck_assert_str_eq(again.path, r.path);
	ck_assert(again.was_cached && again.fetched == 0);
}
END_TEST

START_TEST(a_cut_connection_is_resumed_with_only_the_rest)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	long long before = served_bytes("t/drop");
	ck_assert_msg(pull(&o, "t/drop", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "one.bin"));
	/* Cut at DROP_AT, resumed from there: the file's size served in all, not more. */
	ck_assert_int_eq(served_bytes("t/drop") - before, ONE_SIZE);
	json_t *s = served("t/drop");
	json_t *reqs = json_object_get(s, "requests");
	json_t *last = json_array_get(reqs, json_array_size(reqs) - 1);
	ck_assert_str_eq(json_string_value(json_object_get(last, "host")), "cdn");
	ck_assert_int_eq(json_integer_value(json_object_get(last, "range_start")), DROP_AT);
	ck_assert_int_eq(json_integer_value(json_object_get(last, "bytes")), ONE_SIZE - DROP_AT);
	json_decref(s);
	ck_assert_ptr_nonnull(strstr(notes, "cut the connection"));
}
END_TEST

/* bitnet-model pull, killed mid-way; the next pull asks for the rest with a Range. */
START_TEST(a_killed_pull_is_resumed_by_the_next)
{
	char cache[256], incomplete[512], sha[65], err[2048];
	new_cache(cache, sizeof(cache));
	sha256_of("one.bin", sha);
	snprintf(incomplete, sizeof(incomplete), "%s/models--t--slow/blobs/%s.incomplete", cache, sha);
	setenv("HF_ENDPOINT", endpoint, 1);
	setenv("HF_HUB_CACHE", cache, 1);
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		execl(getenv("BITNET_MODEL_TOOL"), "bitnet-model", "pull", "t/slow", (char *)NULL);
		_exit(127);
	}
	struct stat st = { 0 };
	for (int i = 0, end = tu_scaled(500); /* 5 s, scaled */
	     i < end && (stat(incomplete, &st) < 0 || st.st_size < 200000); i++)
		usleep(10000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	usleep(tu_scaled(300) * 1000); /* the server notices the dead connection and stops counting */
	ck_assert_int_eq(stat(incomplete, &st), 0);
	long long partial = st.st_size;
	ck_assert(partial > 0 && partial < ONE_SIZE);
	long long before = served_bytes("t/slow");
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	ck_assert_msg(pull(&o, "t/slow", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "one.bin"));
	ck_assert_int_eq(r.fetched, ONE_SIZE - partial);
	ck_assert_int_eq(served_bytes("t/slow") - before, ONE_SIZE - partial);
	ck_assert_ptr_nonnull(strstr(notes, "resuming model.gguf at"));
	ck_assert(!exists(incomplete));
}
END_TEST

START_TEST(two_pulls_at_once_fetch_one_file)
{
	char cache[256];
	new_cache(cache, sizeof(cache));
	setenv("HF_ENDPOINT", endpoint, 1);
	setenv("HF_HUB_CACHE", cache, 1);
	long long before = served_bytes("t/together");
	struct tu_run runs[2];
	pid_t pids[2];
	const char *argv[] = { getenv("BITNET_MODEL_TOOL"), "pull", "t/together", NULL };
	for (int i = 0; i < 2; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(tu_run(argv, NULL, 0, &runs[i]) == 0 && runs[i].status == 0 ? 0 : 1);
	}
	for (int i = 0; i < 2; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pull %d failed", i);
	}
	/* One download (the other waited on the lock, then found the blob), one correct file. */
	ck_assert_int_eq(served_bytes("t/together") - before, ONE_SIZE);
	char path[512];
	snprintf(path, sizeof(path), "%s/models--t--together/snapshots/%s/model.gguf", cache,
		 commit_of(3));
	ck_assert(same_file(path, "one.bin"));
	ck_assert_int_eq(count_files(cache, ".incomplete"), 0);
	ck_assert_int_eq(count_files(cache, ".tmp"), 0);
}
END_TEST

/* Python's huggingface_hub holds the blob's lock (filelock: flock on the same file): a pull
 * waits, and finds the blob Python put there. */
START_TEST(a_pull_waits_for_huggingface_hubs_lock)
{
	char cache[256], dir[512], lock[600], sha[65], blob[600], cmd[1400], err[2048];
	new_cache(cache, sizeof(cache));
	sha256_of("small.bin", sha);
	snprintf(dir, sizeof(dir), "%s/.locks/models--t--locked", cache);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s' '%s/models--t--locked/blobs'", dir, cache);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(lock, sizeof(lock), "%s/%s.lock", dir, sha);
	int fd = open(lock, O_RDWR | O_CREAT, 0664);
	ck_assert_int_eq(flock(fd, LOCK_EX), 0);
	long long before = served_bytes("t/locked");
	pid_t pid = fork();
	if (pid == 0) {
		struct bn_hub_options o = options(cache);
		struct bn_hub_result r;
		int rc = pull(&o, "t/locked", &r, err, sizeof(err));
		_exit(rc == 0 && r.fetched == 0 && strstr(notes, "waiting for another download") ? 0 : 1);
	}
	usleep(300000);
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0); /* still waiting */
	snprintf(blob, sizeof(blob), "%s/models--t--locked/blobs/%s", cache, sha);
	data_path(dir, sizeof(dir), "small.bin");
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", dir, blob);
	ck_assert_int_eq(system(cmd), 0);
	flock(fd, LOCK_UN);
	close(fd);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_int_eq(served_bytes("t/locked"), before);
}
END_TEST

START_TEST(a_wrong_sha256_is_an_error_and_leaves_nothing)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	ck_assert_int_eq(pull(&o, "t/badsha", &r, err, sizeof(err)), -EBADMSG);
	ck_assert_msg(strstr(err, "is not the file the Hub lists: its sha256 is"), "%s", err);
	ck_assert_msg(strstr(err, "0123456789abcdef0123456789abcdef"), "%s", err);
	ck_assert_int_eq(count_files(cache, ".incomplete"), 0);
	ck_assert_int_eq(count_files(cache, "model.gguf"), 0); /* no snapshot link */
	char blobs[512];
	snprintf(blobs, sizeof(blobs), "%s/models--t--badsha/blobs", cache);
	ck_assert_int_eq(count_files(blobs, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), 0);
}
END_TEST

START_TEST(a_gated_repository_needs_a_token_that_never_leaves_the_hub)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	/* No token: 401, and the message says how to give one. */
	ck_assert_int_eq(pull(&o, "t/gated:model.gguf", &r, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "t/gated is gated") && strstr(err, "HF_TOKEN"), "%s", err);
	ck_assert_msg(strstr(err, "/t/gated with your account"), "%s", err);
	/* A token the repository does not grant: 403, and which token it was, not its value. */
	snprintf(o.token, sizeof(o.token), "hf_someone_else");
	snprintf(o.token_source, sizeof(o.token_source), "HF_TOKEN");
	ck_assert_int_eq(pull(&o, "t/gated:model.gguf", &r, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "the token from HF_TOKEN"), "%s", err);
	ck_assert_ptr_null(strstr(err, "hf_someone_else"));
	/* The right one: the Hub sees it, the CDN (another host) never does. */
	snprintf(o.token, sizeof(o.token), TOKEN);
	size_t first = served_requests("t/gated", NULL);
	ck_assert_msg(pull(&o, "t/gated:model.gguf", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "small.bin"));
	ck_assert_msg(pull(&o, "t/gated:plain.gguf", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "readme.bin"));
	json_t *s = served("t/gated");
	json_t *reqs = json_object_get(s, "requests");
	unsigned hub = 0, cdn = 0;
	for (size_t i = first; i < json_array_size(reqs); i++) {
		json_t *q = json_array_get(reqs, i);
		int auth = json_is_true(json_object_get(q, "auth"));
		if (!strcmp(json_string_value(json_object_get(q, "kind")), "listing"))
			continue; /* the listing of a gated repository is public */
		if (!strcmp(json_string_value(json_object_get(q, "host")), "cdn")) {
			ck_assert_msg(!auth, "the token went to the CDN");
			cdn++;
		} else {
			/* The resolve, and the file outside LFS behind a relative (same-origin)
			 * redirect: both the Hub's, both with the token. */
			ck_assert_msg(auth, "no token for %s",
				      json_string_value(json_object_get(q, "path")));
			hub++;
		}
	}
	json_decref(s);
	ck_assert_uint_eq(cdn, 1);
	ck_assert_uint_eq(hub, 3);
	ck_assert_ptr_null(strstr(notes, TOKEN));
}
END_TEST

START_TEST(missing_things_are_named)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	ck_assert_int_eq(pull(&o, "t/nothing", &r, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "no repository t/nothing at http://127.0.0.1:"), "%s", err);
	ck_assert_int_eq(pull(&o, "t/private", &r, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "or it is private and no token was given"), "%s", err);
	err[0] = '\0';
	ck_assert_int_eq(bn_hub_pull(&o, "t/one", "v9", &r, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "t/one has no revision 'v9'"), "%s", err);
	ck_assert_int_eq(pull(&o, "t/one:other.gguf", &r, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "t/one has no file 'other.gguf' at revision main (its GGUF "
				  "file is model.gguf)"), "%s", err);
	/* A revision that is a path of its own, sent as one URL segment; its ref a path too. */
	ck_assert_msg(bn_hub_pull(&o, "t/revs", "refs/pr/1", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(r.commit, commit_of(18));
	char ref[512];
	snprintf(ref, sizeof(ref), "%s/models--t--revs/refs/refs/pr/1", cache);
	ck_assert(exists(ref));
	ck_assert_int_eq(pull(&o, "t/none/x", &r, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(pull(&o, "t/one:../../etc/passwd", &r, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(bn_hub_pull(&o, "t/one", "../x", &r, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(the_file_is_the_one_the_daemon_runs_best)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	o.dry_run = 1;
	ck_assert_msg(pull(&o, "t/multi", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(r.file, "m-i2_s.gguf");
	ck_assert_msg(pull(&o, "t/ternary", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(r.file, "m-TQ2_0.gguf");
	ck_assert_int_eq(pull(&o, "t/floats", &r, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "t/floats has 2 GGUF files") &&
		      strstr(err, "m-f16.gguf, m-q4_k.gguf") && strstr(err, "t/floats:FILE"),
		      "%s", err);
	ck_assert_msg(pull(&o, "hf:t/floats:m-q4_k.gguf", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(r.file, "m-q4_k.gguf");
	/* A dry run writes nothing. */
	ck_assert_int_eq(count_files(cache, ""), 1);
}
END_TEST

START_TEST(a_cached_file_is_found_without_the_network)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r, off;
	ck_assert_msg(pull(&o, "t/one", &r, err, sizeof(err)) == 0, "%s", err);
	size_t requests = served_requests("t/one", NULL);
	/* HF_HUB_OFFLINE: refs/main -> the snapshot, nothing asked of anyone. */
	o.offline = 1;
	ck_assert_msg(pull(&o, "t/one", &off, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(off.path, r.path);
	ck_assert(off.was_cached && !off.hub_asked);
	ck_assert_uint_eq(served_requests("t/one", NULL), requests);
	ck_assert_int_eq(pull(&o, "t/drop", &off, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "HF_HUB_OFFLINE is set") &&
		      strstr(err, "bitnet-model pull t/drop`"), "%s", err);
	/* No server there at all: the cache's copy, and a note that says why. */
	o.offline = 0;
	snprintf(o.endpoint, sizeof(o.endpoint), "http://127.0.0.1:1");
	ck_assert_msg(pull(&o, "t/one", &off, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(off.path, r.path);
	ck_assert_msg(strstr(notes, "cannot ask http://127.0.0.1:1 (cannot connect"), "%s", notes);
	ck_assert_int_eq(pull(&o, "t/drop", &off, err, sizeof(err)), -ENETUNREACH);
	ck_assert_msg(strstr(err, "cannot connect to 127.0.0.1") &&
		      strstr(err, "the cache") && strstr(err, "has no copy of it"), "%s", err);
}
END_TEST

/* The cache as huggingface_hub writes it (no lock, no tag): found, with and without the Hub. */
START_TEST(a_file_placed_by_huggingface_hub_is_found)
{
	char cache[256], sha[65], cmd[2048], src[256], err[2048];
	new_cache(cache, sizeof(cache));
	sha256_of("one.bin", sha);
	data_path(src, sizeof(src), "one.bin");
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && mkdir -p models--t--python/blobs models--t--python/refs "
		 "models--t--python/snapshots/%s && cp '%s' models--t--python/blobs/%s && "
		 "ln -s ../../blobs/%s models--t--python/snapshots/%s/model.gguf && "
		 "printf %s > models--t--python/refs/main", cache, commit_of(10), src, sha, sha,
		 commit_of(10), commit_of(10));
	ck_assert_int_eq(system(cmd), 0);
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	long long before = served_bytes("t/python");
	ck_assert_msg(pull(&o, "t/python", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(r.was_cached && r.hub_asked && r.fetched == 0);
	ck_assert_int_eq(served_bytes("t/python"), before);
	ck_assert(same_file(r.path, "one.bin"));
	o.offline = 1;
	ck_assert_msg(pull(&o, "t/python:model.gguf", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "one.bin"));
}
END_TEST

START_TEST(a_server_that_ignores_ranges_starts_over)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	long long before = served_bytes("t/norange");
	ck_assert_msg(pull(&o, "t/norange", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "one.bin"));
	ck_assert_int_eq(served_bytes("t/norange") - before, 300000 + ONE_SIZE);
	ck_assert_ptr_nonnull(strstr(notes, "does not resume downloads: starting model.gguf over"));
}
END_TEST

START_TEST(a_server_that_keeps_cutting_is_given_up_on)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	o.max_retries = 2;
	ck_assert_int_eq(pull(&o, "t/cuts", &r, err, sizeof(err)), -ECONNRESET);
	ck_assert_msg(strstr(err, "cut the connection") && strstr(err, "gave up after 3 attempts") &&
		      strstr(err, "run again to resume"), "%s", err);
	ck_assert_ptr_nonnull(strstr(notes, "trying again in 0.0 s (1 of 2)"));
}
END_TEST

START_TEST(a_full_disk_is_said_before_and_during_a_download)
{
	char cache[256], err[2048], sha[65], cmd[1024];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	long long before = served_bytes("t/huge");
	ck_assert_int_eq(pull(&o, "t/huge", &r, err, sizeof(err)), -ENOSPC);
	ck_assert_msg(strstr(err, "disk full:") && strstr(err, "model.gguf needs 1.00 PB more"),
		      "%s", err);
	ck_assert_int_eq(served_bytes("t/huge"), before);
	ck_assert_int_eq(count_files(cache, ".incomplete"), 0);
	/* Writes that fail with ENOSPC: the partial file is the device that always is full. */
	sha256_of("small.bin", sha);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s/models--t--locked/blobs' && ln -s /dev/full "
		 "'%s/models--t--locked/blobs/%s.incomplete'", cache, cache, sha);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(pull(&o, "t/locked", &r, err, sizeof(err)), -ENOSPC);
	ck_assert_msg(strstr(err, "disk full writing") && strstr(err, "run again to resume"),
		      "%s", err);
}
END_TEST

START_TEST(a_cache_that_cannot_be_written_is_said)
{
	char parent[256], cache[512], err[2048];
	new_cache(parent, sizeof(parent));
	snprintf(cache, sizeof(cache), "%s/hub", parent);
	/* As root, permissions bind nobody: the pull runs as another user, in a child. */
	chmod(parent, 0755);
	pid_t pid = fork();
	if (pid == 0) {
		if (geteuid() == 0 ? tu_become_other_user() < 0 : chmod(parent, 0555) < 0)
			_exit(2);
		struct bn_hub_options o = options(cache);
		struct bn_hub_result r;
		int rc = pull(&o, "t/one", &r, err, sizeof(err));
		_exit(rc == -EACCES && strstr(err, "cannot write the cache directory") &&
		      strstr(err, "HF_HUB_CACHE") ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	chmod(parent, 0755);
	ck_assert(WIFEXITED(st));
	ck_assert_msg(WEXITSTATUS(st) == 0, "exit %d", WEXITSTATUS(st));
}
END_TEST

START_TEST(a_file_outside_lfs_is_checked_by_its_git_blob_id)
{
	char cache[256], err[2048], path[512];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	ck_assert_msg(pull(&o, "t/plain", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert(same_file(r.path, "small.bin"));
	ssize_t n = readlink(r.path, path, sizeof(path) - 1);
	ck_assert_int_eq(n, (ssize_t)strlen("../../blobs/") + 40);
}
END_TEST

START_TEST(the_environment_is_read_as_huggingface_hub_reads_it)
{
	char dir[256], file[512], err[1024];
	new_cache(dir, sizeof(dir));
	struct bn_hub_options o;
	const char *vars[] = { "HF_ENDPOINT", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME",
			       "XDG_CACHE_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH",
			       "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("HOME", dir, 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.endpoint, "https://huggingface.co");
	snprintf(file, sizeof(file), "%s/.cache/huggingface/hub", dir);
	ck_assert_str_eq(o.cache_dir, file);
	ck_assert(!o.offline && !o.token[0]);
	setenv("XDG_CACHE_HOME", "/x", 1);
	setenv("HF_ENDPOINT", "http://mirror.example/", 1);
	setenv("HF_HUB_OFFLINE", "yes", 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.cache_dir, "/x/huggingface/hub");
	ck_assert_str_eq(o.endpoint, "http://mirror.example");
	ck_assert(o.offline);
	setenv("HF_HOME", dir, 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	snprintf(file, sizeof(file), "%s/hub", dir);
	ck_assert_str_eq(o.cache_dir, file);
	setenv("HF_HUB_CACHE", "/y", 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.cache_dir, "/y");
	/* The token: $HF_HOME/token (as `huggingface-cli login` saves it), then HF_TOKEN_PATH,
	 * then HF_TOKEN over both. */
	snprintf(file, sizeof(file), "%s/token", dir);
	FILE *f = fopen(file, "w");
	fputs("hf_from_file\n", f);
	fclose(f);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.token, "hf_from_file");
	ck_assert_str_eq(o.token_source, file);
	setenv("HF_TOKEN_PATH", "/nonexistent/token", 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.token, "");
	setenv("HF_TOKEN", "hf_from_env", 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), 0);
	ck_assert_str_eq(o.token, "hf_from_env");
	ck_assert_str_eq(o.token_source, "HF_TOKEN");
	bn_hub_options_clear(&o);
	ck_assert_str_eq(o.token, "");
	setenv("HF_TOKEN", "hf_bad\r\nX-Injected: 1", 1);
	ck_assert_int_eq(bn_hub_options_from_env(&o, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_null(strstr(err, "hf_bad"));
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* The programs: bitnet-model pull and bitnetd --model hf:                                    */
/* ------------------------------------------------------------------------------------------ */

/* A published repository's name alone means its GGUF file (README.md and .gitattributes
 * beside it), with or without hf:. */
START_TEST(published_names_mean_their_gguf_file)
{
	char cache[256], err[2048], name[128];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	o.dry_run = 1;
	for (unsigned i = 0; i < N_PUBLISHED; i++) {
		ck_assert_msg(pull(&o, published[i], &r, err, sizeof(err)) == 0, "%s", err);
		ck_assert_str_eq(r.file, "ggml-model-i2_s.gguf");
		snprintf(name, sizeof(name), "hf:%s", published[i]);
		ck_assert_msg(pull(&o, name, &r, err, sizeof(err)) == 0, "%s", err);
		ck_assert_str_eq(r.file, "ggml-model-i2_s.gguf");
	}
}
END_TEST

/* bitnet.cpp's TL1/TL2 files are never chosen (no program but the build that wrote one reads
 * it): beside them the F16 file is the one; alone, the error says what to do. A TL file named
 * explicitly is still fetched (the daemon then says why it cannot serve it). */
START_TEST(tiled_files_are_not_chosen)
{
	char cache[256], err[2048];
	new_cache(cache, sizeof(cache));
	struct bn_hub_options o = options(cache);
	struct bn_hub_result r;
	o.dry_run = 1;
	ck_assert_msg(pull(&o, "t/tiled", &r, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(r.file, "ggml-model-f16.gguf");
	ck_assert_int_eq(pull(&o, "t/tiledonly", &r, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "t/tiledonly has only bitnet.cpp TL1/TL2 GGUF files") &&
		      strstr(err, "(ggml-model-tl2.gguf)") &&
		      strstr(err, "convert-hf-to-gguf-bitnet.py MODEL_DIR --outtype i2_s"), "%s", err);
	ck_assert_msg(pull(&o, "t/tiledonly:ggml-model-tl2.gguf", &r, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_str_eq(r.file, "ggml-model-tl2.gguf");
}
END_TEST

START_TEST(bitnet_model_pull_prints_the_path_last)
{
	char cache[256];
	new_cache(cache, sizeof(cache));
	setenv("HF_ENDPOINT", endpoint, 1);
	setenv("HF_HUB_CACHE", cache, 1);
	unsetenv("HF_HUB_OFFLINE");
	const char *tool = getenv("BITNET_MODEL_TOOL");
	struct tu_run r;
	ck_assert_int_eq(tu_run((const char *[]){ tool, "pull", "t/one", NULL }, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0, "%s", r.err);
	char want[512];
	snprintf(want, sizeof(want), "%s/models--t--one/snapshots/%s/model.gguf\n", cache, commit_of(0));
	ck_assert_str_eq(r.out, want); /* stdout is the path alone */
	ck_assert_ptr_nonnull(strstr(r.err, "bitnet-model: downloading t/one:model.gguf (1.05 MB)"));
	ck_assert_ptr_nonnull(strstr(r.err, "bitnet-model: model.gguf: 1.05 MB in"));
	ck_assert_int_eq(tu_run((const char *[]){ tool, "pull", "t/one", "--dry-run", NULL }, NULL,
				0, &r), 0);
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "file=model.gguf\nsize=1048699\ncached=yes\npath="));
	ck_assert_int_eq(tu_run((const char *[]){ tool, "pull", "t/nothing", NULL }, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.err, "bitnet-model pull: no repository t/nothing"));
	ck_assert_str_eq(r.out, "");
	ck_assert_int_eq(tu_run((const char *[]){ tool, "pull", NULL }, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 2);
	ck_assert_int_eq(tu_run((const char *[]){ tool, "pull", "t/one", "--bogus", NULL }, NULL, 0,
				&r), 0);
	ck_assert_int_eq(r.status, 2);
}
END_TEST

START_TEST(bitnetd_serves_a_model_by_name)
{
	char cache[256];
	new_cache(cache, sizeof(cache));
	setenv("HF_ENDPOINT", endpoint, 1);
	setenv("HF_HUB_CACHE", cache, 1);
	unsetenv("HF_HUB_OFFLINE");
	struct tu_daemon d;
	ck_assert_int_eq(tu_daemon_start_cpu(&d, "hf:t/model", NULL), 0);
	struct tu_run r;
	ck_assert_int_eq(tu_run_cli(&d, (const char *[]){ "info", NULL }, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0 && strstr(r.out, "model=bitnet-tiny\n"), "%s%s", r.out, r.err);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	/* A published repository by its name: the Falcon3 7B repository's layout. */
	ck_assert_int_eq(tu_daemon_start_cpu(&d, "hf:tiiuae/Falcon3-7B-Instruct-1.58bit-GGUF", NULL), 0);
	ck_assert_int_eq(tu_run_cli(&d, (const char *[]){ "info", NULL }, NULL, 0, &r), 0);
	ck_assert_msg(r.status == 0 && strstr(r.out, "model=bitnet-tiny\n"), "%s%s", r.out, r.err);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	/* A restart takes the cache's copy without asking the Hub anything. */
	size_t requests = served_requests("t/model", NULL);
	ck_assert_int_eq(tu_daemon_start_cpu(&d, "hf:t/model", NULL), 0);
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	ck_assert_uint_eq(served_requests("t/model", NULL), requests);
	/* Offline with a name the cache lacks: exit 3 and the command that pulls it. */
	setenv("HF_HUB_OFFLINE", "1", 1);
	const char *bitnetd = getenv("BITNETD");
	ck_assert_int_eq(tu_run((const char *[]){ bitnetd, "--socket", d.socket_path, "--model",
						  "hf:t/one", NULL }, NULL, 0, &r), 0);
	ck_assert_int_eq(r.status, 3);
	ck_assert_msg(strstr(r.err, "level=error msg=\"--model hf:t/one: the cache") &&
		      strstr(r.err, "bitnet-model pull t/one"), "%s", r.err);
}
END_TEST

int main(void)
{
	if (!mkdtemp(work)) {
		perror("test_pull: mkdtemp");
		return EXIT_FAILURE;
	}
	if (!getenv("BITNET_MODEL_TOOL") || !getenv("BITNETD")) {
		fprintf(stderr, "test_pull: BITNET_MODEL_TOOL and BITNETD must be set (make check "
				"sets them)\n");
		return EXIT_FAILURE;
	}
	chmod(work, 0755); /* another user may pass through (a_cache_that_cannot_be_written) */
	start_server();
	/* Nothing of the user's environment reaches the library calls: each test sets what it
	 * needs (the programs a test runs inherit its own). */
	unsetenv("HF_TOKEN");
	unsetenv("HF_HUB_OFFLINE");
	Suite *s = suite_create("pull");
	TCase *tc = tcase_create("standin");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, a_pull_lands_in_the_huggingface_hub_layout);
	tcase_add_test(tc, a_second_pull_fetches_nothing);
	tcase_add_test(tc, a_cut_connection_is_resumed_with_only_the_rest);
	tcase_add_test(tc, a_killed_pull_is_resumed_by_the_next);
	tcase_add_test(tc, two_pulls_at_once_fetch_one_file);
	tcase_add_test(tc, a_pull_waits_for_huggingface_hubs_lock);
	tcase_add_test(tc, a_wrong_sha256_is_an_error_and_leaves_nothing);
	tcase_add_test(tc, a_gated_repository_needs_a_token_that_never_leaves_the_hub);
	tcase_add_test(tc, missing_things_are_named);
	tcase_add_test(tc, the_file_is_the_one_the_daemon_runs_best);
	tcase_add_test(tc, published_names_mean_their_gguf_file);
	tcase_add_test(tc, tiled_files_are_not_chosen);
	tcase_add_test(tc, a_cached_file_is_found_without_the_network);
	tcase_add_test(tc, a_file_placed_by_huggingface_hub_is_found);
	tcase_add_test(tc, a_server_that_ignores_ranges_starts_over);
	tcase_add_test(tc, a_server_that_keeps_cutting_is_given_up_on);
	tcase_add_test(tc, a_full_disk_is_said_before_and_during_a_download);
	tcase_add_test(tc, a_cache_that_cannot_be_written_is_said);
	tcase_add_test(tc, a_file_outside_lfs_is_checked_by_its_git_blob_id);
	tcase_add_test(tc, the_environment_is_read_as_huggingface_hub_reads_it);
	tcase_add_test(tc, bitnet_model_pull_prints_the_path_last);
	tcase_add_test(tc, bitnetd_serves_a_model_by_name);
	suite_add_tcase(s, tc);
	int rc = tu_run_suite(s);
	stop_server();
	tu_remove_dir(work);
	return rc;
}
