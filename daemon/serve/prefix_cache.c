/* SPDX-License-Identifier: MIT */
#include "prefix_cache.h"

#include <stdlib.h>
#include <string.h>

struct entry {
	uint64_t hash;
	uint64_t scope;
	uint32_t parent, parent_gen; /* the block before it, as it was when this was cached */
	uint32_t gen;                /* bumped when the block loses its identity */
	uint32_t next;               /* next block in the same hash bucket */
	uint32_t lru_prev, lru_next; /* parked blocks, oldest first */
	uint8_t cached, parked;
};

struct bn_prefix_cache {
	uint32_t n_blocks, block_tokens;
	struct entry *e;             /* [n_blocks] */
	uint32_t *tokens;            /* [n_blocks][block_tokens] */
	uint32_t *bucket;            /* [bucket_mask + 1] first block of each chain */
	uint32_t bucket_mask;
	uint32_t lru_head, lru_tail;
	uint32_t n_cached, n_parked;
};

struct bn_prefix_cache *bn_prefix_cache_new(uint32_t n_blocks, uint32_t block_tokens)
{
	struct bn_prefix_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	uint32_t buckets = 1;
	while (buckets < n_blocks && buckets < (1u << 30))
		buckets <<= 1;
	*c = (struct bn_prefix_cache){ .n_blocks = n_blocks, .block_tokens = block_tokens,
				       .bucket_mask = buckets - 1, .lru_head = BN_NO_BLOCK,
				       .lru_tail = BN_NO_BLOCK };
	c->e = calloc(n_blocks ? n_blocks : 1, sizeof(*c->e));
	c->tokens = malloc((size_t)(n_blocks ? n_blocks : 1) * block_tokens * sizeof(uint32_t));
	c->bucket = malloc((size_t)buckets * sizeof(uint32_t));
	if (!c->e || !c->tokens || !c->bucket) {
		bn_prefix_cache_free(c);
		return NULL;
	}
	memset(c->bucket, 0xff, (size_t)buckets * sizeof(uint32_t)); /* BN_NO_BLOCK */
	return c;
}

void bn_prefix_cache_free(struct bn_prefix_cache *c)
{
	if (!c)
		return;
	free(c->e);
	free(c->tokens);
	free(c->bucket);
	free(c);
}

/* A 64-bit mix of the identity (splitmix64's finalizer over FNV-style steps): only to find
 * candidates, which are then compared exactly. */
static uint64_t mix(uint64_t h)
{
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	return h ^ (h >> 31);
}

static uint64_t identity_hash(const struct bn_prefix_cache *c, uint64_t scope, uint32_t parent,
			      uint32_t parent_gen, const uint32_t *tokens)
{
	uint64_t h = mix(scope ^ ((uint64_t)parent << 32 | parent_gen));
	for (uint32_t i = 0; i < c->block_tokens; i++)
		h = (h ^ tokens[i]) * 0x100000001b3ull;
	return mix(h);
}

static uint32_t parent_gen_of(const struct bn_prefix_cache *c, uint32_t parent)
{
	return parent == BN_NO_BLOCK ? 0 : c->e[parent].gen;
}

/* The cached block with exactly this identity, or BN_NO_BLOCK. */
static uint32_t find(const struct bn_prefix_cache *c, uint64_t hash, uint64_t scope,
		     uint32_t parent, const uint32_t *tokens)
{
	uint32_t pgen = parent_gen_of(c, parent);
	for (uint32_t b = c->bucket[hash & c->bucket_mask]; b != BN_NO_BLOCK; b = c->e[b].next) {
		const struct entry *e = &c->e[b];
		if (e->hash == hash && e->scope == scope && e->parent == parent &&
		    e->parent_gen == pgen &&
		    memcmp(c->tokens + (size_t)b * c->block_tokens, tokens,
			   c->block_tokens * sizeof(uint32_t)) == 0)
			return b;
	}
	return BN_NO_BLOCK;
}

uint32_t bn_prefix_cache_lookup(const struct bn_prefix_cache *c, uint64_t scope,
				const uint32_t *tokens, uint32_t max_blocks, uint32_t *out)
{
	uint32_t parent = BN_NO_BLOCK, n = 0;
	for (; n < max_blocks; n++) {
		const uint32_t *t = tokens + (size_t)n * c->block_tokens;
		uint64_t h = identity_hash(c, scope, parent, parent_gen_of(c, parent), t);
		uint32_t b = find(c, h, scope, parent, t);
		if (b == BN_NO_BLOCK)
			break;
		out[n] = parent = b;
	}
	return n;
}

int bn_prefix_cache_insert(struct bn_prefix_cache *c, uint32_t block, uint32_t parent,
			   uint64_t scope, const uint32_t *tokens)
{
	struct entry *e = &c->e[block];
	/* A child of a block without an identity could never be found: its chain is broken. */
	if (e->cached || (parent != BN_NO_BLOCK && !c->e[parent].cached))
		return 0;
	uint64_t h = identity_hash(c, scope, parent, parent_gen_of(c, parent), tokens);
	if (find(c, h, scope, parent, tokens) != BN_NO_BLOCK)
		return 0;
	e->hash = h;
	e->scope = scope;
	e->parent = parent;
	e->parent_gen = parent_gen_of(c, parent);
	e->cached = 1;
	e->next = c->bucket[h & c->bucket_mask];
	c->bucket[h & c->bucket_mask] = block;
	memcpy(c->tokens + (size_t)block * c->block_tokens, tokens,
	       c->block_tokens * sizeof(uint32_t));
	c->n_cached++;
	return 1;
}

int bn_prefix_cache_holds(const struct bn_prefix_cache *c, uint32_t block)
{
	return c->e[block].cached;
}

void bn_prefix_cache_park(struct bn_prefix_cache *c, uint32_t block)
{
	struct entry *e = &c->e[block];
	e->parked = 1;
	e->lru_prev = c->lru_tail;
	e->lru_next = BN_NO_BLOCK;
	if (c->lru_tail != BN_NO_BLOCK)
		c->e[c->lru_tail].lru_next = block;
	else
		c->lru_head = block;
	c->lru_tail = block;
	c->n_parked++;
}

void bn_prefix_cache_unpark(struct bn_prefix_cache *c, uint32_t block)
{
	struct entry *e = &c->e[block];
	if (e->lru_prev != BN_NO_BLOCK)
		c->e[e->lru_prev].lru_next = e->lru_next;
	else
		c->lru_head = e->lru_next;
	if (e->lru_next != BN_NO_BLOCK)
		c->e[e->lru_next].lru_prev = e->lru_prev;
	else
		c->lru_tail = e->lru_prev;
	e->parked = 0;
	c->n_parked--;
}

uint32_t bn_prefix_cache_parked(const struct bn_prefix_cache *c)
{
	return c->n_parked;
}

/* Takes the block out of its hash chain and gives it a new generation. */
static void forget(struct bn_prefix_cache *c, uint32_t block)
{
	struct entry *e = &c->e[block];
	uint32_t *link = &c->bucket[e->hash & c->bucket_mask];
	while (*link != block)
		link = &c->e[*link].next;
	*link = e->next;
	e->cached = 0;
	e->gen++;
	c->n_cached--;
}

uint32_t bn_prefix_cache_evict(struct bn_prefix_cache *c)
{
	uint32_t block = c->lru_head;
	if (block == BN_NO_BLOCK)
		return BN_NO_BLOCK;
	bn_prefix_cache_unpark(c, block);
	forget(c, block);
	return block;
}

uint32_t bn_prefix_cache_blocks(const struct bn_prefix_cache *c)
{
	return c->n_cached;
}
