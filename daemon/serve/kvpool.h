/* SPDX-License-Identifier: MIT */
/*
 * kvpool.h — accounting of the KV cache: a budget of fixed-size blocks, a block table per
 * sequence. The backend owns the memory (backend.h, kv_init); this module decides which
 * block holds which positions.
 *
 * A request reserves, when it is admitted, every block it can ever need (prompt + max_tokens,
 * within the context); blocks are then taken from that reservation as positions are written,
 * and everything goes back when the sequence ends. So a running sequence can always grow and is
 * never evicted or corrupted for memory; a request that does not fit waits for others to end;
 * one that could never fit is refused at once.
 *
 * Blocks are reference-counted so sequences can share them read-only: a classify request's
 * labels each continue its prefix in their own sequence, whose table starts with the prefix's
 * full blocks (bn_kvpool_share). A block goes back to the free stack when its last holder
 * releases it.
 *
 * With a prefix cache (prefix_cache.h), a full block may also have an identity by content; when
 * its last holder lets go it is parked rather than freed, still counted as available, and taken
 * back either by a request whose prompt starts with its tokens (bn_kvpool_take_cached) or, when
 * no free block is left, by anyone (evicted, oldest first).
 */
#ifndef BITNETD_KVPOOL_H
#define BITNETD_KVPOOL_H

#include "prefix_cache.h"

#include <stdint.h>

struct bn_kv_ledger;

/* Gives the memory of blocks [first, first + n) back (backend.h kv_release): what a pool
 * that lends calls for free blocks when the pools would hold more than the ledger's cap. */
typedef void bn_kv_release_fn(void *ctx, uint32_t first, uint32_t n);

struct bn_kvpool {
	uint32_t n_blocks;
	uint32_t block_tokens;
	uint32_t *free_blocks;   /* stack of unused block ids */
	uint32_t n_free;         /* blocks on the stack (some of them reserved) */
	uint32_t n_reserved;     /* promised to sequences, still on the stack */
	uint32_t *refs;          /* [n_blocks] holders of each block in use */
	struct bn_prefix_cache *cache; /* NULL: blocks have no identity */
	uint64_t evictions;      /* cached blocks taken for other contents */
	/* Several models' pools lending to each other (bn_kv_ledger): NULL when the pool is
	 * its own budget. */
	struct bn_kv_ledger *ledger;
	uint64_t block_bytes;    /* the ledger counts this pool's blocks in bytes */
	uint64_t share_bytes;    /* its guaranteed share, whole blocks (a ledger of shares) */
	int wanting;             /* its oldest waiting request did not fit at its last admission */
	struct bn_kvpool *ledger_next;
	/* NULL, or called with the blocks whose memory the pool gives back (runs of
	 * consecutive ids at once): free blocks past what the ledger's cap lets the pools hold,
	 * and parked blocks evicted to fit it. */
	bn_kv_release_fn *release;
	void *release_ctx;
	/* With a release hook: the free blocks at the top of the stack whose memory is still
	 * held (freed by their sequence, not given back). The next blocks taken are these, so a
	 * pool that lends writes its freed blocks again without faulting their pages in anew
	 * (first touch after a give-back runs at 0.3-2 GB/s on the test VMs, a rewrite at
	 * ~28); the ledger counts those not backing a promise and gives them back first when
	 * the pools hold more than its cap. Below them on the stack: blocks holding no memory. */
	uint32_t n_resident_free;
};

/* One KV budget shared by several pools (the models of one daemon, daemon/README.md "The KV
 * pool lent between models"): each pool's arena may hold more than its share, and the ledger
 * bounds the bytes every pool has committed (blocks held or promised) together. A busy pool
 * borrows what idle ones leave; fairly under load: while another pool below its fair share
 * waits for KV, a pool admits nothing that would take it past its own share. A pool's fair
 * share is the cap divided among the pools in use or wanting, in proportion to their
 * share_bytes (equally where they are all 0). What was lent comes back as the borrower's
 * sequences end (every sequence reserved its blocks when admitted, so none is ever cut
 * short): the one waiting meanwhile waits, and its deadline and cancels hold as in one pool.
 *
 * The cap is either fixed (--kv-memory without --memory) or, with `summed`, the sum of the
 * share_bytes of the pools in it (under --memory, where the registry counts each loaded
 * model's share): a pool that joins brings its share, one that leaves takes it away, and
 * what the others borrowed from it then passes the cap (bn_kv_ledger_overflow) until their
 * sequences end; meanwhile none of them admits anything.
 *
 * Parked cached blocks count as available to their pool, as in one pool, but they hold
 * memory, and so do free blocks whose memory a pool kept (n_resident_free): after every
 * reservation and departure, the kept free blocks (freed longest ago first) are given back,
 * then parked blocks (the reserving pool's first, then the others', oldest first) are
 * evicted and given back, until the blocks committed, parked and kept in all pools fit the
 * cap again. With release hooks, the KV memory the pools hold is thus at most the cap plus
 * the overflow. All on the loop thread. */
struct bn_kv_ledger {
	uint64_t cap;            /* bytes */
	int summed;              /* the cap is the pools' shares added up */
	struct bn_kvpool *pools; /* the pools sized now, linked by ledger_next */
};

/* One sequence's blocks: table[0 .. n_blocks) in position order. */
struct bn_kv_seq {
	uint32_t *table;         /* room for the pool's per-sequence maximum */
	uint32_t n_blocks;
	uint32_t reserved;       /* blocks still promised to this sequence */
};

int bn_kvpool_init(struct bn_kvpool *p, uint32_t n_blocks, uint32_t block_tokens);
void bn_kvpool_free(struct bn_kvpool *p);

/* Blocks that hold `tokens` positions. */
uint32_t bn_kvpool_blocks_for(const struct bn_kvpool *p, uint64_t tokens);

/* Reserves what a sequence of up to `tokens` positions needs. Returns 0, or -EAGAIN when the
 * pool has not that many unpromised blocks now. */
int bn_kvpool_reserve(struct bn_kvpool *p, struct bn_kv_seq *s, uint64_t tokens);
/* The same for a number of blocks. */
int bn_kvpool_reserve_blocks(struct bn_kvpool *p, struct bn_kv_seq *s, uint32_t blocks);
/* Moves n blocks of `from`'s reservation to `to` (n <= from->reserved). */
void bn_kvpool_lend(struct bn_kv_seq *from, struct bn_kv_seq *to, uint32_t n);
/* Starts `to`'s (empty) table with the first n blocks of `from`'s, shared: each gains a
 * holder. */
void bn_kvpool_share(struct bn_kvpool *p, struct bn_kv_seq *to, const struct bn_kv_seq *from,
		     uint32_t n);
/* Makes the table cover positions [0, tokens), taking blocks from the reservation.
 * Returns 0, or -ENOSPC when that exceeds the reservation (a scheduler bug, checked). */
int bn_kvpool_grow(struct bn_kvpool *p, struct bn_kv_seq *s, uint32_t tokens);
/* The table keeps only the blocks that hold positions [0, tokens); those after them, which
 * the sequence holds alone and that have no identity (speculative decoding's rejected
 * drafts), go back to its reservation. */
void bn_kvpool_trim(struct bn_kvpool *p, struct bn_kv_seq *s, uint32_t tokens);
/* Returns the sequence's blocks (those it was the last holder of) and what is left of its
 * reservation. */
void bn_kvpool_release(struct bn_kvpool *p, struct bn_kv_seq *s);
/* Releases s like bn_kvpool_release, but what it had been promised (the blocks it freed and
 * its reservation left) becomes heir's reservation again: what `heir` lent s comes back. */
void bn_kvpool_release_to(struct bn_kvpool *p, struct bn_kv_seq *s, struct bn_kv_seq *heir);

/* Turns the prefix cache on (before any sequence exists). 0 or -ENOMEM. */
int bn_kvpool_enable_cache(struct bn_kvpool *p);
/* Starts s's (empty) table with n cached blocks (bn_prefix_cache_lookup's), each gaining a
 * holder. The caller has checked that bn_kvpool_available covers those of them that are
 * parked (bn_kvpool_parked_among) besides what it reserves. */
void bn_kvpool_take_cached(struct bn_kvpool *p, struct bn_kv_seq *s, const uint32_t *blocks,
			   uint32_t n);
/* How many of the blocks are parked (held by no sequence). */
uint32_t bn_kvpool_parked_among(const struct bn_kvpool *p, const uint32_t *blocks, uint32_t n);

static inline uint32_t bn_kvpool_parked(const struct bn_kvpool *p)
{
	return p->cache ? bn_prefix_cache_parked(p->cache) : 0;
}
/* Blocks held by sequences, and blocks promised but not yet holding any (parked cached
 * blocks are neither: they count as available). */
static inline uint32_t bn_kvpool_used(const struct bn_kvpool *p)
{
	return p->n_blocks - p->n_free - bn_kvpool_parked(p);
}
/* Blocks this pool alone could still promise. */
static inline uint32_t bn_kvpool_own_available(const struct bn_kvpool *p)
{
	return p->n_free + bn_kvpool_parked(p) - p->n_reserved;
}
/* Blocks held or promised: what the ledger counts. */
static inline uint32_t bn_kvpool_committed(const struct bn_kvpool *p)
{
	return p->n_blocks - bn_kvpool_own_available(p);
}
/* Blocks the ledger lets p (in one) commit besides what it has. */
uint32_t bn_kv_ledger_room(const struct bn_kvpool *p);
/* Blocks that can be promised now: the pool's own, within what its ledger allows. */
static inline uint32_t bn_kvpool_available(const struct bn_kvpool *p)
{
	uint32_t own = bn_kvpool_own_available(p);
	if (!p->ledger)
		return own;
	uint32_t room = bn_kv_ledger_room(p);
	return room < own ? room : own;
}
/* p (sized, block_bytes and share_bytes set) joins the ledger, or leaves it (before it is
 * freed; what the others borrowed past the cap is then overflow). */
void bn_kv_ledger_join(struct bn_kv_ledger *l, struct bn_kvpool *p);
void bn_kv_ledger_leave(struct bn_kvpool *p);
/* Bytes the pools hold (committed, parked or kept free) past the cap: what a summed ledger's pools
 * borrowed from one that left, until their sequences end. 0 when they fit. */
uint64_t bn_kv_ledger_overflow(const struct bn_kv_ledger *l);

#endif /* BITNETD_KVPOOL_H */
