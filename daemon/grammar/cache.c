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
 * holds, then is refused (-E2BIG, not kept: it depends on what else is held).
 *
 * A cache may be a member of a budget of several caches (bn_grammar_budget: one per model of a
 * daemon), which bounds what their grammars hold together (the daemon's memory budget less its
 * loaded models) and their entries' bytes together (--grammar-cache). Past either, the
 * entries that may go are dropped least recently used first over every member, by stamps
 * from the budget's one clock: a model's compile pushes out another model's grammars kept
 * for a next time when those were used longer ago than its own. Lock order: the budget's
 * lock, then one member's at a time; a compile checks the budget holding no cache's lock.
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
	uint64_t used;                   /* its budget's clock when last used (0 without one) */
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
	/* NULL, or the budget it is a member of (set before its first compile, kept to the end;
	 * its entries' bytes are counted in the budget's `cached` too) */
	struct bn_grammar_budget *budget;
	bn_grammar_shed_fn *shed;        /* NULL, or bn_grammar_cache_on_shed's */
	void *shed_ctx;
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

static void leave_budget(struct bn_grammar_cache *c);

void bn_grammar_cache_free(struct bn_grammar_cache *c)
{
	if (!c)
		return;
	leave_budget(c);
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

/* Under the lock: e is the most recently used, stamped by the budget's clock so that entries of
 * its members compare (taken under the lock, the stamps grow along each recency list). */
static void make_newest(struct bn_grammar_cache *c, struct entry *e)
{
	e->used = c->budget ? atomic_fetch_add_explicit(&c->budget->clock, 1, memory_order_relaxed) + 1
			    : 0;
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

/* Under the lock: the entries' bytes go from `before` to `now`, in c and in its budget. */
static void count_bytes(struct bn_grammar_cache *c, size_t before, size_t now)
{
	c->bytes = c->bytes - before + now;
	if (!c->budget)
		return;
	if (now >= before)
		atomic_fetch_add_explicit(&c->budget->cached, now - before, memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(&c->budget->cached, before - now, memory_order_relaxed);
}

static void drop(struct bn_grammar_cache *c, struct entry *e)
{
	*slot_of(c, e->key) = e->chain;
	unlink_recency(c, e);
	count_bytes(c, e->bytes, 0);
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

/* ---- budgets of several caches ---------------------------------------------------------- */

static void budget_destroy(struct gr_account *account)
{
	struct bn_grammar_budget *b = (struct bn_grammar_budget *)account; /* its first member */
	pthread_mutex_destroy(&b->lock);
	free(b->members);
	free(b);
}

struct bn_grammar_budget *bn_grammar_budget_new(void)
{
	struct bn_grammar_budget *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	atomic_init(&b->account.refs, 1);
	atomic_init(&b->account.limit, SIZE_MAX);
	atomic_init(&b->cache_cap, SIZE_MAX);
	b->account.destroy = budget_destroy;
	pthread_mutex_init(&b->lock, NULL);
	return b;
}

void bn_grammar_budget_unref(struct bn_grammar_budget *b)
{
	gr_account_unref(b ? &b->account : NULL);
}

void bn_grammar_budget_set_limit(struct bn_grammar_budget *b, size_t limit)
{
	atomic_store_explicit(&b->account.limit, limit, memory_order_relaxed);
}

void bn_grammar_budget_set_cache_cap(struct bn_grammar_budget *b, size_t cap)
{
	atomic_store_explicit(&b->cache_cap, cap, memory_order_relaxed);
}

size_t bn_grammar_budget_bytes(const struct bn_grammar_budget *b)
{
	return atomic_load_explicit(&b->account.bytes, memory_order_relaxed);
}

size_t bn_grammar_budget_cached(const struct bn_grammar_budget *b)
{
	return atomic_load_explicit(&b->cached, memory_order_relaxed);
}

int bn_grammar_cache_count_in(struct bn_grammar_cache *c, struct bn_grammar_budget *b)
{
	pthread_mutex_lock(&b->lock);
	if (b->n_members == b->cap_members) {
		uint32_t cap = b->cap_members ? 2 * b->cap_members : 8;
		struct bn_grammar_cache **m = realloc(b->members, cap * sizeof(*m));
		if (!m) {
			pthread_mutex_unlock(&b->lock);
			return -ENOMEM;
		}
		b->members = m;
		b->cap_members = cap;
	}
	b->members[b->n_members++] = c;
	pthread_mutex_lock(&c->lock);
	atomic_fetch_add_explicit(&b->account.refs, 1, memory_order_relaxed);
	gr_account_unref(c->live->parent);
	c->live->parent = &b->account;
	c->budget = b;
	atomic_fetch_add_explicit(&b->cached, c->bytes, memory_order_relaxed);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

/* The cache leaves its budget's members (it is being freed: no other thread uses it), its
 * entries' bytes with it. */
static void leave_budget(struct bn_grammar_cache *c)
{
	struct bn_grammar_budget *b = c->budget;
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	for (uint32_t i = 0; i < b->n_members; i++)
		if (b->members[i] == c)
			b->members[i] = b->members[--b->n_members];
	atomic_fetch_sub_explicit(&b->cached, c->bytes, memory_order_relaxed);
	c->budget = NULL;
	pthread_mutex_unlock(&b->lock);
}

/* What a budget bounds: what its members' grammars hold, or their entries' bytes. */
enum room_for { ROOM_MEMORY, ROOM_CACHE };

static int budget_over(struct bn_grammar_budget *b, enum room_for r)
{
	if (r == ROOM_CACHE)
		return atomic_load_explicit(&b->cached, memory_order_relaxed) >
		       atomic_load_explicit(&b->cache_cap, memory_order_relaxed);
	return atomic_load_explicit(&b->account.bytes, memory_order_relaxed) >
	       atomic_load_explicit(&b->account.limit, memory_order_relaxed);
}

/* Under c's lock: its least recently used entry that may go for r, never `keep`: for memory a
 * grammar nobody else holds (its memory goes with it), for the entries' bytes any. */
static struct entry *first_to_go(struct bn_grammar_cache *c, enum room_for r,
				 const struct entry *keep)
{
	for (struct entry *e = c->oldest; e; e = e->newer)
		if (e != keep && (r == ROOM_CACHE || (e->bound && atomic_load(&e->bound->refs) == 1)))
			return e;
	return NULL;
}

/* Drops entries that may go for r, least recently used first over every member of b, until b
 * holds r's bound. The caller holds no cache's lock. 1 when it holds. */
static int budget_make_room(struct bn_grammar_budget *b, enum room_for r, const struct entry *keep)
{
	if (!budget_over(b, r)) /* every hit asks: no lock while it holds */
		return 1;
	pthread_mutex_lock(&b->lock);
	while (budget_over(b, r)) {
		struct bn_grammar_cache *victim = NULL;
		uint64_t oldest = UINT64_MAX;
		for (uint32_t i = 0; i < b->n_members; i++) {
			struct bn_grammar_cache *m = b->members[i];
			pthread_mutex_lock(&m->lock);
			const struct entry *e = first_to_go(m, r, keep);
			if (e && e->used < oldest) {
				oldest = e->used;
				victim = m;
			}
			pthread_mutex_unlock(&m->lock);
		}
		if (!victim)
			break;
		pthread_mutex_lock(&victim->lock);
		struct entry *e = first_to_go(victim, r, keep);
		if (e && e->used == oldest) /* else it was used meanwhile: look again */
			drop(victim, e);
		pthread_mutex_unlock(&victim->lock);
	}
	int holds = !budget_over(b, r);
	pthread_mutex_unlock(&b->lock);
	return holds;
}

void bn_grammar_cache_on_shed(struct bn_grammar_cache *c, bn_grammar_shed_fn *fn, void *ctx)
{
	c->shed = fn;
	c->shed_ctx = ctx;
}

/* Every member's holders for filling let go (no lock held while they do). */
static void budget_shed(struct bn_grammar_budget *b)
{
	pthread_mutex_lock(&b->lock);
	uint32_t n = b->n_members;
	struct bn_grammar_cache **m = malloc((n ? n : 1) * sizeof(*m));
	if (m)
		memcpy(m, b->members, n * sizeof(*m));
	pthread_mutex_unlock(&b->lock);
	/* The members outlive this: a cache leaves its budget only when freed, after its
	 * service's workers (the only compiling threads) have stopped. */
	for (uint32_t i = 0; m && i < n; i++)
		if (m[i]->shed)
			m[i]->shed(m[i]->shed_ctx);
	free(m);
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
		size_t was = e->bytes; /* its token sets may have grown since */
		e->bytes = entry_bytes(e);
		count_bytes(c, was, e->bytes);
		int rc = answer(e, out, err);
		evict(c, e);
		pthread_mutex_unlock(&c->lock);
		if (c->budget) /* `e` only compared: another thread may drop it meanwhile */
			(void)budget_make_room(c->budget, ROOM_CACHE, e);
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
	if (made->bound && c->max_live && !make_room(c) && c->shed) {
		pthread_mutex_unlock(&c->lock);
		c->shed(c->shed_ctx); /* grammars held only to be filled ahead go first */
		pthread_mutex_lock(&c->lock);
	}
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
	pthread_mutex_unlock(&c->lock);
	int room = !made->bound || !c->budget || budget_make_room(c->budget, ROOM_MEMORY, NULL);
	if (!room) {
		budget_shed(c->budget); /* grammars held only to be filled ahead go first */
		room = budget_make_room(c->budget, ROOM_MEMORY, NULL);
	}
	if (!room) {
		size_t held = bn_grammar_budget_bytes(c->budget);
		size_t limit = atomic_load_explicit(&c->budget->account.limit, memory_order_relaxed);
		entry_free(made);
		snprintf(err, BN_GRAMMAR_ERR_LEN, "the daemon's grammars would hold %zu bytes with "
			 "this one, over the %zu its memory budget leaves them beside the loaded "
			 "models (bitnetd --memory): free grammars, unload a model or raise it",
			 held, limit);
		return -E2BIG;
	}
	pthread_mutex_lock(&c->lock);
	struct entry **slot = slot_of(c, key);
	if (*slot) { /* another thread compiled it meanwhile */
		entry_free(made);
		made = *slot;
	} else {
		*slot = made;
		make_newest(c, made);
		count_bytes(c, 0, made->bytes);
		c->n++;
		c->refusals += !made->bound;
	}
	int rc = answer(made, out, err);
	evict(c, made);
	pthread_mutex_unlock(&c->lock);
	if (c->budget)
		(void)budget_make_room(c->budget, ROOM_CACHE, made);
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
