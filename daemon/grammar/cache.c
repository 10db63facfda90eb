/* SPDX-License-Identifier: MIT */
/*
 * cache.c — compiled grammars bound to one vocabulary, kept by content (grammar.h): the key is
 * XXH3-128 of the kind, the options and the text; least recently used entries go first once
 * the cache holds more than its budget (a bound grammar's size is counted as its token sets
 * grow). A refusal is kept like a success, so the same hostile grammar sent again costs a
 * look-up, not another compile up to the time budget. Compiles run outside the lock: two
 * threads missing on the same text both compile, and the second keeps the first's entry.
 *
 * Every bound grammar made here is counted while it lives (the cache's or a session's), as its
 * token sets fill too; past the memory limit a new one first pushes out entries nobody else
 * holds, then is refused (-E2BIG, not kept: it depends on what else is held). The same holds
 * for the budget of several caches the cache may count in (bn_grammar_budget: the daemon's
 * memory budget less its loaded models), with this cache's entries the ones pushed out.
 */
#include "tokens.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct entry {
	XXH128_hash_t key;
	struct bn_grammar_bound *bound;  /* NULL for a refusal */
	int rc;
	char err[BN_GRAMMAR_ERR_LEN];
	size_t bytes;
	struct entry *chain;             /* same hash bucket */
	struct entry *newer, *older;     /* recency list */
};

struct bn_grammar_cache {
	pthread_mutex_t lock;
	struct bn_grammar_vocab *v;
	size_t max_bytes, bytes;
	struct gr_account *live;         /* every bound grammar made here, in use or kept */
	size_t max_live;                 /* 0: no limit */
	struct entry **buckets;
	uint32_t mask, n;
	struct entry *newest, *oldest;
	uint64_t hits, misses, refusals;
};

int bn_grammar_cache_new(struct bn_grammar_vocab *v, size_t max_bytes,
			 struct bn_grammar_cache **out)
{
	*out = NULL;
	struct bn_grammar_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->mask = 255;
	c->buckets = calloc(c->mask + 1, sizeof(*c->buckets));
	if (!c->buckets) {
		free(c);
		return -ENOMEM;
	}
	c->live = calloc(1, sizeof(*c->live));
	if (!c->live) {
		free(c->buckets);
		free(c);
		return -ENOMEM;
	}
	atomic_init(&c->live->refs, 1);
	pthread_mutex_init(&c->lock, NULL);
	bn_grammar_vocab_ref(v);
	c->v = v;
	c->max_bytes = max_bytes;
	*out = c;
	return 0;
}

static void entry_free(struct entry *e)
{
	bn_grammar_bound_unref(e->bound);
	free(e);
}

void bn_grammar_cache_free(struct bn_grammar_cache *c)
{
	if (!c)
		return;
	for (struct entry *e = c->newest, *next; e; e = next) {
		next = e->older;
		entry_free(e);
	}
	pthread_mutex_destroy(&c->lock);
	free(c->buckets);
	bn_grammar_vocab_unref(c->v);
	gr_account_unref(c->live);
	free(c);
}

void bn_grammar_cache_limit_memory(struct bn_grammar_cache *c, size_t max_live_bytes)
{
	pthread_mutex_lock(&c->lock);
	c->max_live = max_live_bytes;
	pthread_mutex_unlock(&c->lock);
}

static XXH128_hash_t key_of(const void *text, size_t len, const struct bn_grammar_options *o)
{
	const struct bn_grammar_limits *l = &o->limits;
	uint32_t fields[] = { o->kind, o->json_top, o->flags, o->max_ws, l->max_text_bytes,
			      l->max_depth, l->max_rules, l->max_states, l->max_repeat,
			      l->compile_ms };
	return XXH3_128bits_withSeed(text, len, XXH3_64bits(fields, sizeof(fields)));
}

static size_t entry_bytes(const struct entry *e)
{
	return sizeof(*e) + (e->bound ? bn_grammar_bound_bytes(e->bound) : 0);
}

static void unlink_recency(struct bn_grammar_cache *c, struct entry *e)
{
	if (e->newer)
		e->newer->older = e->older;
	else
		c->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		c->oldest = e->newer;
	e->newer = e->older = NULL;
}

static void make_newest(struct bn_grammar_cache *c, struct entry *e)
{
	e->older = c->newest;
	e->newer = NULL;
	if (c->newest)
		c->newest->newer = e;
	c->newest = e;
	if (!c->oldest)
		c->oldest = e;
}

static struct entry **slot_of(struct bn_grammar_cache *c, XXH128_hash_t key)
{
	struct entry **at = &c->buckets[key.low64 & c->mask];
	while (*at && !XXH128_isEqual((*at)->key, key))
		at = &(*at)->chain;
	return at;
}

static void drop(struct bn_grammar_cache *c, struct entry *e)
{
	*slot_of(c, e->key) = e->chain;
	unlink_recency(c, e);
	c->bytes -= e->bytes;
	c->n--;
	entry_free(e);
}

/* Under the lock: drops the oldest entries (never `keep`) until the budget holds. */
static void evict(struct bn_grammar_cache *c, const struct entry *keep)
{
	while (c->bytes > c->max_bytes && c->oldest && c->oldest != keep)
		drop(c, c->oldest);
}

static size_t live_bytes(const struct bn_grammar_cache *c)
{
	return atomic_load_explicit(&c->live->bytes, memory_order_relaxed);
}

/* Under the lock: past `limit`, the oldest entries nobody else holds (their memory goes with
 * them) are dropped until it holds. 1 when it holds. */
static int make_room_below(struct bn_grammar_cache *c, size_t limit)
{
	for (struct entry *e = c->oldest, *newer; e && live_bytes(c) > limit; e = newer) {
		newer = e->newer;
		if (!e->bound || atomic_load(&e->bound->refs) == 1)
			drop(c, e);
	}
	return live_bytes(c) <= limit;
}

static int make_room(struct bn_grammar_cache *c)
{
	return make_room_below(c, c->max_live);
}

void bn_grammar_cache_count_in(struct bn_grammar_cache *c, struct bn_grammar_budget *b)
{
	pthread_mutex_lock(&c->lock);
	atomic_fetch_add_explicit(&b->account.refs, 1, memory_order_relaxed);
	gr_account_unref(c->live->parent);
	c->live->parent = &b->account;
	pthread_mutex_unlock(&c->lock);
}

/* Under the lock: the budget c counts in holds (c's own entries nobody else holds dropped
 * first, as far as that helps). 1 when it holds, or c counts in none. */
static int make_budget_room(struct bn_grammar_cache *c, size_t *held, size_t *limit)
{
	struct gr_account *b = c->live->parent;
	if (!b)
		return 1;
	*limit = atomic_load_explicit(&b->limit, memory_order_relaxed);
	*held = atomic_load_explicit(&b->bytes, memory_order_relaxed);
	if (*held <= *limit)
		return 1;
	size_t excess = *held - *limit, mine = live_bytes(c);
	(void)make_room_below(c, mine > excess ? mine - excess : 0);
	*held = atomic_load_explicit(&b->bytes, memory_order_relaxed);
	return *held <= *limit;
}

void bn_grammar_cache_trim(struct bn_grammar_cache *c)
{
	pthread_mutex_lock(&c->lock);
	(void)make_room_below(c, 0);
	pthread_mutex_unlock(&c->lock);
}

/* The answer an entry gives: a new reference, or its refusal. */
static int answer(const struct entry *e, struct bn_grammar_bound **out, char *err)
{
	if (!e->bound) {
		memcpy(err, e->err, BN_GRAMMAR_ERR_LEN);
		return e->rc;
	}
	bn_grammar_bound_ref(e->bound);
	*out = e->bound;
	err[0] = 0;
	return 0;
}

/* A compile's result made an entry: the bound grammar, or a refusal worth keeping. NULL when
 * memory ran out (the caller answers without caching). */
static struct entry *compile_entry(struct bn_grammar_cache *c, XXH128_hash_t key,
				   const void *text, size_t len, const struct bn_grammar_options *o)
{
	struct entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->key = key;
	struct bn_grammar *g;
	e->rc = bn_grammar_compile(text, len, o, &g, e->err);
	if (e->rc == 0) {
		e->rc = bn_grammar_bind(g, c->v, &e->bound);
		bn_grammar_unref(g);
	}
	if (e->rc == -ENOMEM) {
		free(e);
		return NULL;
	}
	e->bytes = entry_bytes(e);
	return e;
}

int bn_grammar_cache_get(struct bn_grammar_cache *c, const void *text, size_t len,
			 const struct bn_grammar_options *o, struct bn_grammar_bound **out,
			 char err[BN_GRAMMAR_ERR_LEN])
{
	*out = NULL;
	XXH128_hash_t key = key_of(text, len, o);
	pthread_mutex_lock(&c->lock);
	struct entry *e = *slot_of(c, key);
	if (e) {
		c->hits++;
		unlink_recency(c, e);
		make_newest(c, e);
		c->bytes -= e->bytes; /* its token sets may have grown since */
		e->bytes = entry_bytes(e);
		c->bytes += e->bytes;
		int rc = answer(e, out, err);
		evict(c, e);
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	c->misses++;
	pthread_mutex_unlock(&c->lock);

	struct entry *made = compile_entry(c, key, text, len, o);
	if (!made) {
		snprintf(err, BN_GRAMMAR_ERR_LEN, "out of memory compiling the grammar");
		return -ENOMEM;
	}
	if (made->bound)
		gr_bound_count_in(made->bound, c->live);
	pthread_mutex_lock(&c->lock);
	if (made->bound && c->max_live && !make_room(c)) {
		/* Not kept: the refusal depends on what else is held now. */
		size_t held = live_bytes(c), limit = c->max_live;
		pthread_mutex_unlock(&c->lock);
		entry_free(made);
		snprintf(err, BN_GRAMMAR_ERR_LEN, "the daemon's grammars would hold %zu bytes with "
			 "this one, over its grammar memory limit of %zu (bitnetd --grammar-memory): "
			 "free grammars or raise it", held, limit);
		return -E2BIG;
	}
	size_t held, limit;
	if (made->bound && !make_budget_room(c, &held, &limit)) {
		pthread_mutex_unlock(&c->lock);
		entry_free(made);
		snprintf(err, BN_GRAMMAR_ERR_LEN, "the daemon's grammars would hold %zu bytes with "
			 "this one, over the %zu its memory budget leaves them beside the loaded "
			 "models (bitnetd --memory): free grammars, unload a model or raise it",
			 held, limit);
		return -E2BIG;
	}
	struct entry **slot = slot_of(c, key);
	if (*slot) { /* another thread compiled it meanwhile */
		entry_free(made);
		made = *slot;
	} else {
		*slot = made;
		make_newest(c, made);
		c->bytes += made->bytes;
		c->n++;
		c->refusals += !made->bound;
	}
	int rc = answer(made, out, err);
	evict(c, made);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void bn_grammar_cache_get_info(struct bn_grammar_cache *c, struct bn_grammar_cache_info *info)
{
	pthread_mutex_lock(&c->lock);
	*info = (struct bn_grammar_cache_info){ .hits = c->hits, .misses = c->misses,
						.refusals_cached = c->refusals, .entries = c->n,
						.bytes = c->bytes, .live_bytes = live_bytes(c) };
	pthread_mutex_unlock(&c->lock);
}
