/* SPDX-License-Identifier: MIT */
/*
 * hub.h — models by name: GGUF files from the Hugging Face Hub, in huggingface_hub's cache.
 *
 * The one module `bitnet-model pull` and `bitnetd --model hf:...` share. It speaks the Hub's
 * own HTTP interface with libcurl (the listing at /api/models/REPO/revision/REV?blobs=true,
 * the download at /REPO/resolve/COMMIT/FILE and its redirects to a CDN), and keeps files where
 * huggingface_hub keeps them, so a file either side fetched is found by the other:
 *
 *   CACHE/models--ORG--NAME/blobs/SHA256            the file (a git blob id if not in LFS)
 *   CACHE/models--ORG--NAME/blobs/SHA256.incomplete a download under way, resumed by Range
 *   CACHE/models--ORG--NAME/snapshots/COMMIT/FILE   -> ../../blobs/SHA256 (relative link)
 *   CACHE/models--ORG--NAME/refs/REV                the commit REV named when last asked
 *   CACHE/.locks/models--ORG--NAME/SHA256.lock      flock(2)ed while the blob is written
 *
 * A download is verified (the listing's sha256, or the git blob id) before it is renamed into
 * place. The module knows nothing of the daemon: it reports through the caller's callbacks
 * and returns 0 or a negative errno with a message meant for a person.
 */
#ifndef BITNET_HUB_H
#define BITNET_HUB_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define BN_HUB_DEFAULT_ENDPOINT "https://huggingface.co"
#define BN_HUB_DEFAULT_REVISION "main"

/* One progress report of a download. */
struct bn_hub_progress {
	const char *file;     /* the file's name in the repository */
	uint64_t done;        /* bytes of it on disk */
	uint64_t total;       /* its size */
	uint64_t start;       /* bytes that were on disk when this pull began (a resumed one) */
	double rate;          /* bytes per second over the last few seconds; 0 until known */
	double eta_s;         /* seconds left at that rate; -1 until known */
	double elapsed_s;     /* since this pull began downloading */
	int finished;         /* the last report: every byte is there */
};

/* How the module tells its caller what happens. Either callback may be NULL. */
struct bn_hub_reporter {
	/* A line for a person: what is about to happen, a retry, a fallback to the cache. */
	void (*note)(void *ctx, const char *text);
	/* At most ten times a second while bytes arrive, and once with finished set. */
	void (*progress)(void *ctx, const struct bn_hub_progress *p);
	void *ctx;
};

struct bn_hub_options {
	char endpoint[1024];       /* the Hub: $HF_ENDPOINT, else BN_HUB_DEFAULT_ENDPOINT */
	char cache_dir[PATH_MAX];  /* $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
				    * $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub */
	char token[1024];          /* "" for none: $HF_TOKEN, else the token file */
	char token_source[PATH_MAX + 16]; /* where the token came from, for messages: never the
					   * token itself */
	int offline;               /* never the network ($HF_HUB_OFFLINE): the cache or an error */
	int prefer_cache;          /* a copy in the cache is used without asking the Hub */
	int dry_run;               /* resolve and report; download and write nothing */
	unsigned max_retries;      /* attempts in a row that get no byte before giving up (5) */
	unsigned retry_wait_ms;    /* the first wait between them, doubling up to 8 s (1000) */
	const struct bn_hub_reporter *report;
};

/* What a pull found. */
struct bn_hub_result {
	char path[PATH_MAX];  /* CACHE/models--ORG--NAME/snapshots/COMMIT/FILE */
	char repo[256];
	char file[512];
	char commit[41];
	uint64_t size;
	uint64_t fetched;     /* bytes this pull downloaded */
	int was_cached;       /* the file was in the cache before this pull */
	int hub_asked;        /* the Hub answered the listing (0: resolved from the cache alone) */
};

/* Fills o from the environment as huggingface_hub reads it (the fields' comments say how).
 * The token file ($HF_TOKEN_PATH, else $HF_HOME/token) is read only when $HF_TOKEN is unset;
 * a missing one means no token. Returns 0, or -errno with a message (a token file that
 * cannot be read, a token that cannot go into an HTTP header). */
int bn_hub_options_from_env(struct bn_hub_options *o, char *err, size_t err_cap);

/* Forgets the token (its bytes zeroed). */
void bn_hub_options_clear(struct bn_hub_options *o);

/* 1 when name asks for the Hub ("hf:REPO[:FILE]"), 0 for anything else (a path). */
int bn_hub_is_name(const char *name);

/* Resolves name ("REPO[:FILE]", an "hf:" prefix allowed) at revision (NULL: main) to a file
 * in the cache, downloading it when needed; on success r->path is the file. The file, when
 * not named: the only GGUF file of the repository, else the one the daemon runs best (I2_S,
 * then TQ2_0, then TQ1_0, by name); otherwise an error that lists them. Without the network
 * (or with o->offline) a copy in the cache is used. Returns 0, or a negative errno with a
 * message in err: -EINVAL a bad name, -ENOENT no such repository, revision or file (or not in
 * the cache offline), -EACCES a gated or private repository, or a cache that cannot be
 * written, -ENETUNREACH no network, -ENOSPC a full disk, -EBADMSG a file that is not what the
 * listing says, -EIO a server that failed or kept cutting the connection. */
int bn_hub_pull(const struct bn_hub_options *o, const char *name, const char *revision,
		struct bn_hub_result *r, char *err, size_t err_cap);

/* "1.19 GB", "532 kB", "12 B": decimal units, three digits, as the Hub's pages show sizes.
 * Returns buf. */
const char *bn_hub_size_text(uint64_t bytes, char buf[32]);

#endif /* BITNET_HUB_H */
