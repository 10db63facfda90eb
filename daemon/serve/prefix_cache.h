/* SPDX-License-Identifier: MIT */
/*
 * prefix_cache.h — full KV blocks found by their content, so a request whose prompt starts
 * with the tokens of an earlier sequence takes that sequence's blocks instead of computing
 * them again (issue 20; shm/PROTOCOL.md §6.9, docs/bitnetd.8 --prefix-cache).
 *
 * A block's identity is its scope (who may share it: a uid, a session, or everyone), its
 * tokens and its parent (the block before it in the sequence, by id and generation): a block
 * holds the keys and values of its positions, which depend on every token before them, so the
 * chain of parents is part of what it holds. The hash of that identity only finds candidates;
 * a hit compares scope, parent and tokens exactly, so a hash collision can cost a lookup but
 * never give a wrong block. A block's generation changes whenever it gets a new identity, so a
 * child cached under an evicted parent can never be found through the parent's new contents.
 *
 * Blocks in use are counted by the KV pool (kvpool.h); a cached block no sequence holds waits
 * in least-recently-used order and is the pool's to take when it runs out of free blocks: the
 * cache never makes a request wait or fail for memory.
 */
#ifndef BITNETD_PREFIX_CACHE_H
#define BITNETD_PREFIX_CACHE_H

#include <stdint.h>

#define BN_NO_BLOCK UINT32_MAX

/* Who may share a cached block (bitnetd --prefix-cache): a shared cache is a timing side
 * channel, so by default only sessions of one Unix user share. */
enum bn_prefix_sharing {
	BN_SHARE_OFF = 0,
	BN_SHARE_ALL = 1,
	BN_SHARE_UID = 2,
	BN_SHARE_SESSION = 3,
};

struct bn_prefix_cache;

struct bn_prefix_cache *bn_prefix_cache_new(uint32_t n_blocks, uint32_t block_tokens);
void bn_prefix_cache_free(struct bn_prefix_cache *c);

/* The longest run of cached blocks that starts the sequence tokens[0 .. max_blocks x
 * block_tokens) in scope: writes their ids to out and returns how many. */
uint32_t bn_prefix_cache_lookup(const struct bn_prefix_cache *c, uint64_t scope,
				const uint32_t *tokens, uint32_t max_blocks, uint32_t *out);

/* Gives `block` (holding tokens[0 .. block_tokens) after `parent`, BN_NO_BLOCK for a
 * sequence's first) its identity. Returns 1 when cached, 0 when the block already has one or
 * an equal block is cached already (the first stays; this one is freed as usual). */
int bn_prefix_cache_insert(struct bn_prefix_cache *c, uint32_t block, uint32_t parent,
			   uint64_t scope, const uint32_t *tokens);

/* The block has an identity. */
int bn_prefix_cache_holds(const struct bn_prefix_cache *c, uint32_t block);

/* No sequence holds the cached block any more: it joins the eviction order, newest last. */
void bn_prefix_cache_park(struct bn_prefix_cache *c, uint32_t block);
/* A parked block is held again (a hit): it leaves the eviction order. */
void bn_prefix_cache_unpark(struct bn_prefix_cache *c, uint32_t block);
/* Parked blocks, and the least recently parked one, which loses its identity and is
 * returned for reuse (BN_NO_BLOCK when none is parked). */
uint32_t bn_prefix_cache_parked(const struct bn_prefix_cache *c);
uint32_t bn_prefix_cache_evict(struct bn_prefix_cache *c);

/* Blocks with an identity (held or parked). */
uint32_t bn_prefix_cache_blocks(const struct bn_prefix_cache *c);

#endif /* BITNETD_PREFIX_CACHE_H */
