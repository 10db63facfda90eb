/* SPDX-License-Identifier: MIT */
#include "kvpool.h"

#include <errno.h>
#include <stdlib.h>

int bn_kvpool_init(struct bn_kvpool *p, uint32_t n_blocks, uint32_t block_tokens)
{
	*p = (struct bn_kvpool){ .n_blocks = n_blocks, .block_tokens = block_tokens };
	p->free_blocks = malloc((size_t)(n_blocks ? n_blocks : 1) * sizeof(uint32_t));
	p->refs = calloc(n_blocks ? n_blocks : 1, sizeof(uint32_t));
	if (!p->free_blocks || !p->refs || block_tokens == 0)
		return -ENOMEM;
	/* Low ids on top, so a lightly used pool touches the start of the backend's arena. */
	for (uint32_t i = 0; i < n_blocks; i++)
		p->free_blocks[i] = n_blocks - 1 - i;
	p->n_free = n_blocks;
	return 0;
}

int bn_kvpool_enable_cache(struct bn_kvpool *p)
{
	p->cache = bn_prefix_cache_new(p->n_blocks, p->block_tokens);
	return p->cache ? 0 : -ENOMEM;
}

void bn_kvpool_free(struct bn_kvpool *p)
{
	bn_prefix_cache_free(p->cache);
	p->cache = NULL;
	free(p->free_blocks);
	free(p->refs);
	p->free_blocks = NULL;
	p->refs = NULL;
}

uint32_t bn_kvpool_blocks_for(const struct bn_kvpool *p, uint64_t tokens)
{
	uint64_t n = (tokens + p->block_tokens - 1) / p->block_tokens;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static void ledger_fit(struct bn_kv_ledger *l, struct bn_kvpool *first);

int bn_kvpool_reserve_blocks(struct bn_kvpool *p, struct bn_kv_seq *s, uint32_t need)
{
	uint32_t have = s->n_blocks + s->reserved;
	if (need <= have)
		return 0;
	if (need - have > bn_kvpool_available(p))
		return -EAGAIN;
	p->n_reserved += need - have;
	s->reserved += need - have;
	if (p->ledger)
		ledger_fit(p->ledger, p); /* parked blocks make way for the promise */
	return 0;
}

int bn_kvpool_reserve(struct bn_kvpool *p, struct bn_kv_seq *s, uint64_t tokens)
{
	return bn_kvpool_reserve_blocks(p, s, bn_kvpool_blocks_for(p, tokens));
}

void bn_kvpool_lend(struct bn_kv_seq *from, struct bn_kv_seq *to, uint32_t n)
{
	from->reserved -= n;
	to->reserved += n;
}

void bn_kvpool_share(struct bn_kvpool *p, struct bn_kv_seq *to, const struct bn_kv_seq *from,
		     uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		to->table[i] = from->table[i];
		p->refs[to->table[i]]++;
	}
	to->n_blocks = n;
}

uint32_t bn_kvpool_parked_among(const struct bn_kvpool *p, const uint32_t *blocks, uint32_t n)
{
	uint32_t parked = 0;
	for (uint32_t i = 0; i < n; i++)
		parked += p->refs[blocks[i]] == 0;
	return parked;
}

void bn_kvpool_take_cached(struct bn_kvpool *p, struct bn_kv_seq *s, const uint32_t *blocks,
			   uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (p->refs[blocks[i]]++ == 0)
			bn_prefix_cache_unpark(p->cache, blocks[i]);
		s->table[i] = blocks[i];
	}
	s->n_blocks = n;
}

/* Runs of consecutive block ids whose memory goes back at once (a sequence's blocks mostly
 * are consecutive: the stack hands them out in order). */
struct freeing {
	struct bn_kvpool *p;
	uint32_t first, n;
};

static void freeing_flush(struct freeing *f)
{
	if (f->n && f->p->release)
		f->p->release(f->p->release_ctx, f->first, f->n);
	f->n = 0;
}

static void freeing_add(struct freeing *f, uint32_t block)
{
	if (f->n && block + 1 == f->first) {
		f->first = block;
		f->n++;
		return;
	}
	if (f->n && block == f->first + f->n) {
		f->n++;
		return;
	}
	freeing_flush(f);
	f->first = block;
	f->n = 1;
}

/* A block its sequence freed goes on top of the stack with its memory (kept, where the
 * pool could give it back: counted in n_resident_free). */
static void free_kept(struct bn_kvpool *p, uint32_t block)
{
	p->free_blocks[p->n_free++] = block;
	p->n_resident_free += p->release != NULL;
}

/* A block whose memory goes back (an evicted parked block) goes below the kept ones, which
 * are taken first; the block that was there moves to the top. */
static void free_given_back(struct freeing *f, uint32_t block)
{
	struct bn_kvpool *p = f->p;
	uint32_t below_kept = p->n_free - p->n_resident_free;
	p->free_blocks[p->n_free++] = p->free_blocks[below_kept];
	p->free_blocks[below_kept] = block;
	freeing_add(f, block);
}

/* A block to write: a free one (one whose memory was kept first), else the cached block
 * parked longest ago. */
static uint32_t take_block(struct bn_kvpool *p)
{
	if (p->n_free) {
		p->n_resident_free -= p->n_resident_free > 0;
		return p->free_blocks[--p->n_free];
	}
	p->evictions++;
	return bn_prefix_cache_evict(p->cache);
}

int bn_kvpool_grow(struct bn_kvpool *p, struct bn_kv_seq *s, uint32_t tokens)
{
	uint32_t need = bn_kvpool_blocks_for(p, tokens);
	if (need <= s->n_blocks)
		return 0;
	if (need - s->n_blocks > s->reserved)
		return -ENOSPC;
	while (s->n_blocks < need) {
		uint32_t block = take_block(p);
		p->refs[block] = 1;
		s->table[s->n_blocks++] = block;
		s->reserved--;
		p->n_reserved--;
	}
	return 0;
}

void bn_kvpool_trim(struct bn_kvpool *p, struct bn_kv_seq *s, uint32_t tokens)
{
	uint32_t keep = bn_kvpool_blocks_for(p, tokens);
	while (s->n_blocks > keep) {
		uint32_t block = s->table[--s->n_blocks];
		p->refs[block] = 0;
		free_kept(p, block);
		s->reserved++;
		p->n_reserved++;
	}
}

/* Drops s's hold on its blocks; returns how many became available (freed, or parked with
 * their identity). */
static uint32_t drop_blocks(struct bn_kvpool *p, struct bn_kv_seq *s)
{
	uint32_t freed = 0;
	while (s->n_blocks) {
		uint32_t block = s->table[--s->n_blocks];
		if (--p->refs[block] != 0)
			continue;
		if (p->cache && bn_prefix_cache_holds(p->cache, block))
			bn_prefix_cache_park(p->cache, block);
		else
			free_kept(p, block);
		freed++;
	}
	return freed;
}

static void give_back_past_cap(struct bn_kvpool *p);

void bn_kvpool_release(struct bn_kvpool *p, struct bn_kv_seq *s)
{
	drop_blocks(p, s);
	p->n_reserved -= s->reserved;
	s->reserved = 0;
	give_back_past_cap(p);
}

void bn_kvpool_release_to(struct bn_kvpool *p, struct bn_kv_seq *s, struct bn_kv_seq *heir)
{
	uint32_t freed = drop_blocks(p, s);
	p->n_reserved += freed;
	heir->reserved += freed + s->reserved;
	s->reserved = 0;
	give_back_past_cap(p);
}

/* ------------------------------------------------------------------------------------------ */
/* A budget several pools share                                                               */
/* ------------------------------------------------------------------------------------------ */

void bn_kv_ledger_join(struct bn_kv_ledger *l, struct bn_kvpool *p)
{
	p->ledger = l;
	p->wanting = 0;
	p->ledger_next = l->pools;
	l->pools = p;
	if (l->summed)
		l->cap += p->share_bytes;
}

void bn_kv_ledger_leave(struct bn_kvpool *p)
{
	struct bn_kv_ledger *l = p->ledger;
	if (!l)
		return;
	for (struct bn_kvpool **at = &l->pools; *at; at = &(*at)->ledger_next)
		if (*at == p) {
			*at = p->ledger_next;
			break;
		}
	if (l->summed)
		l->cap -= p->share_bytes;
	p->ledger = NULL;
	p->ledger_next = NULL;
	ledger_fit(l, NULL); /* a smaller cap: the others' parked blocks go first */
}

static uint64_t committed_bytes(const struct bn_kvpool *q)
{
	return (uint64_t)bn_kvpool_committed(q) * q->block_bytes;
}

/* q's free blocks whose memory is kept and that no promise will take: the kept blocks are
 * the top of the stack, taken first, so the n_reserved promised ones come out of them. */
static uint32_t spare_kept(const struct bn_kvpool *q)
{
	return q->n_resident_free > q->n_reserved ? q->n_resident_free - q->n_reserved : 0;
}

/* Bytes committed, parked or kept free in every pool: the memory they hold (the other free
 * blocks hold none). */
static uint64_t held_bytes(const struct bn_kv_ledger *l)
{
	uint64_t sum = 0;
	for (const struct bn_kvpool *q = l->pools; q; q = q->ledger_next)
		sum += committed_bytes(q) +
		       ((uint64_t)bn_kvpool_parked(q) + spare_kept(q)) * q->block_bytes;
	return sum;
}

uint64_t bn_kv_ledger_overflow(const struct bn_kv_ledger *l)
{
	uint64_t held = held_bytes(l);
	return held > l->cap ? held - l->cap : 0;
}

/* Evicts q's parked block parked longest ago to the free stack (its memory released). */
static void evict_parked(struct bn_kvpool *q)
{
	struct freeing f = { .p = q };
	q->evictions++;
	free_given_back(&f, bn_prefix_cache_evict(q->cache));
	freeing_flush(&f);
}

/* q's kept free blocks freed longest ago (the bottom of the kept ones) give their memory
 * back while the pools hold more than the cap; the bytes held after. */
static uint64_t give_back_while_over(struct bn_kvpool *q, uint64_t held, uint64_t cap)
{
	struct freeing f = { .p = q };
	while (held > cap && spare_kept(q)) {
		freeing_add(&f, q->free_blocks[q->n_free - q->n_resident_free]);
		q->n_resident_free--;
		held -= q->block_bytes;
	}
	freeing_flush(&f);
	return held;
}

/* q's parked blocks go while the pools hold more than the cap; the bytes held after. */
static uint64_t evict_while_over(struct bn_kvpool *q, uint64_t held, uint64_t cap)
{
	while (held > cap && bn_kvpool_parked(q)) {
		evict_parked(q);
		held -= q->block_bytes;
	}
	return held;
}

/* What p's sequences freed while the pools hold more than the cap (borrowed from a pool
 * that left: the overflow) gives its memory back at once, so that the overflow falls as
 * their sequences end. */
static void give_back_past_cap(struct bn_kvpool *p)
{
	if (p->ledger)
		give_back_while_over(p, held_bytes(p->ledger), p->ledger->cap);
}

/* Kept free blocks give their memory back, then parked blocks go, `first`'s before the
 * others', until what the pools hold fits the cap (or nothing is left to give: what is
 * committed alone then passes it, an overflow). */
static void ledger_fit(struct bn_kv_ledger *l, struct bn_kvpool *first)
{
	uint64_t held = held_bytes(l);
	for (struct bn_kvpool *q = l->pools; q && held > l->cap; q = q->ledger_next)
		held = give_back_while_over(q, held, l->cap);
	if (first)
		held = evict_while_over(first, held, l->cap);
	for (struct bn_kvpool *q = l->pools; q && held > l->cap; q = q->ledger_next)
		held = evict_while_over(q, held, l->cap);
}

/* A pool's weight in the fair shares: its guaranteed share, or 1 (shares equal). */
static uint64_t weight_of(const struct bn_kvpool *q)
{
	return q->share_bytes ? q->share_bytes : 1;
}

/* q's fair share of the cap among pools in use weighing `in_use` together. */
static uint64_t fair_share(const struct bn_kv_ledger *l, const struct bn_kvpool *q,
			   uint64_t in_use)
{
	return (uint64_t)((unsigned __int128)l->cap * weight_of(q) / (in_use ? in_use : 1));
}

uint32_t bn_kv_ledger_room(const struct bn_kvpool *p)
{
	const struct bn_kv_ledger *l = p->ledger;
	uint64_t used = 0, in_use = 0;
	int other_starved = 0;
	for (const struct bn_kvpool *q = l->pools; q; q = q->ledger_next) {
		used += committed_bytes(q);
		if (q == p || q->wanting || bn_kvpool_committed(q) > 0)
			in_use += weight_of(q);
	}
	for (const struct bn_kvpool *q = l->pools; q; q = q->ledger_next)
		other_starved |= q != p && q->wanting && committed_bytes(q) < fair_share(l, q, in_use);
	uint64_t room = l->cap > used ? l->cap - used : 0;
	if (other_starved) {
		/* Lent no further: p keeps to its share until the starved pool has had its own. */
		uint64_t share = fair_share(l, p, in_use), own = committed_bytes(p);
		uint64_t to_share = share > own ? share - own : 0;
		room = to_share < room ? to_share : room;
	}
	uint64_t blocks = room / (p->block_bytes ? p->block_bytes : 1);
	return blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks;
}
