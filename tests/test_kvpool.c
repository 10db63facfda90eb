/* SPDX-License-Identifier: MIT */
/*
 * The KV block accounting (daemon/serve/kvpool.h): reservations are all-or-nothing, growth takes
 * only reserved blocks, release returns everything, no block is ever held twice, and blocks
 * shared between sequences stay until their last holder lets go; pools that share one budget
 * (several models' KV) lend to each other, fairly under load, and never pass it together;
 * with a cap of the pools' shares (--memory), what was borrowed from a pool that leaves is
 * overflow until it comes back, and the memory the pools hold (blocks held, promised or
 * parked; free ones given back) never passes the cap plus that overflow.
 */
#include "testutil.h"

#include "../daemon/serve/kvpool.h"

#include "ckassert.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 10
#define BT 4

static uint32_t tables[3][BLOCKS];

static void assert_idle(const struct bn_kvpool *p)
{
	ck_assert_uint_eq(p->n_free, BLOCKS);
	ck_assert_uint_eq(p->n_reserved, 0);
	ck_assert_uint_eq(bn_kvpool_used(p), 0);
	ck_assert_uint_eq(bn_kvpool_available(p), BLOCKS);
}

START_TEST(reserve_grow_release)
{
	struct bn_kvpool p;
	ck_assert_int_eq(bn_kvpool_init(&p, BLOCKS, BT), 0);
	assert_idle(&p);
	struct bn_kv_seq a = { .table = tables[0] }, b = { .table = tables[1] };
	ck_assert_uint_eq(bn_kvpool_blocks_for(&p, 0), 0);
	ck_assert_uint_eq(bn_kvpool_blocks_for(&p, 1), 1);
	ck_assert_uint_eq(bn_kvpool_blocks_for(&p, 4), 1);
	ck_assert_uint_eq(bn_kvpool_blocks_for(&p, 5), 2);
	ck_assert_int_eq(bn_kvpool_reserve(&p, &a, 4 * BT + 1), 0); /* 5 blocks */
	ck_assert_uint_eq(bn_kvpool_available(&p), 5);
	ck_assert_uint_eq(bn_kvpool_used(&p), 0);
	/* 6 blocks do not fit in the 5 left: nothing is taken. */
	ck_assert_int_eq(bn_kvpool_reserve(&p, &b, 6 * BT), -EAGAIN);
	ck_assert_uint_eq(b.reserved, 0);
	ck_assert_uint_eq(bn_kvpool_available(&p), 5);
	ck_assert_int_eq(bn_kvpool_reserve(&p, &b, 5 * BT), 0);
	ck_assert_uint_eq(bn_kvpool_available(&p), 0);
	/* Growth takes reserved blocks only, one per BT positions. */
	ck_assert_int_eq(bn_kvpool_grow(&p, &a, 1), 0);
	ck_assert_uint_eq(a.n_blocks, 1);
	ck_assert_int_eq(bn_kvpool_grow(&p, &a, BT), 0);
	ck_assert_uint_eq(a.n_blocks, 1);
	ck_assert_int_eq(bn_kvpool_grow(&p, &a, 4 * BT + 1), 0);
	ck_assert_uint_eq(a.n_blocks, 5);
	ck_assert_uint_eq(a.reserved, 0);
	ck_assert_int_eq(bn_kvpool_grow(&p, &a, 5 * BT + 1), -ENOSPC);
	ck_assert_uint_eq(a.n_blocks, 5);
	ck_assert_int_eq(bn_kvpool_grow(&p, &b, 2 * BT), 0);
	ck_assert_uint_eq(bn_kvpool_used(&p), 7);
	/* No block is in two tables, and all are in range. */
	uint8_t seen[BLOCKS] = { 0 };
	for (uint32_t i = 0; i < a.n_blocks; i++)
		ck_assert_uint_eq(seen[a.table[i]]++, 0);
	for (uint32_t i = 0; i < b.n_blocks; i++)
		ck_assert_uint_eq(seen[b.table[i]]++, 0);
	/* Release returns the blocks and what was still promised. */
	bn_kvpool_release(&p, &b);
	ck_assert_uint_eq(b.n_blocks + b.reserved, 0);
	ck_assert_uint_eq(bn_kvpool_available(&p), 5);
	bn_kvpool_release(&p, &a);
	assert_idle(&p);
	bn_kvpool_free(&p);
}
END_TEST

/* A fork shares its parent's first blocks, borrows from its reservation, and gives it back:
 * shared blocks stay while a holder is left; the parent's promise is whole again after. */
START_TEST(share_lend_release_to)
{
	struct bn_kvpool p;
	ck_assert_int_eq(bn_kvpool_init(&p, BLOCKS, BT), 0);
	struct bn_kv_seq parent = { .table = tables[0] }, fork = { .table = tables[1] };
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &parent, 6), 0);
	ck_assert_int_eq(bn_kvpool_grow(&p, &parent, 2 * BT + 1), 0); /* 3 blocks, 3 promised */
	ck_assert_uint_eq(bn_kvpool_available(&p), 4);
	bn_kvpool_share(&p, &fork, &parent, 2);
	ck_assert_mem_eq(fork.table, parent.table, 2 * sizeof(uint32_t));
	bn_kvpool_lend(&parent, &fork, 2);
	ck_assert_uint_eq(parent.reserved, 1);
	ck_assert_int_eq(bn_kvpool_grow(&p, &fork, 4 * BT), 0); /* its own two blocks */
	ck_assert_uint_eq(bn_kvpool_used(&p), 5);
	ck_assert_int_eq(bn_kvpool_grow(&p, &fork, 4 * BT + 1), -ENOSPC);
	bn_kvpool_release_to(&p, &fork, &parent);
	ck_assert_uint_eq(fork.n_blocks + fork.reserved, 0);
	ck_assert_uint_eq(parent.reserved, 3);           /* the two it lent are back */
	ck_assert_uint_eq(bn_kvpool_used(&p), 3);         /* the shared two are still held */
	ck_assert_uint_eq(bn_kvpool_available(&p), 4);    /* nobody else gained or lost */
	/* The parent first, a fork last: the shared blocks go when the fork lets go. */
	bn_kvpool_share(&p, &fork, &parent, 2);
	bn_kvpool_release(&p, &parent);
	ck_assert_uint_eq(bn_kvpool_used(&p), 2);
	ck_assert_uint_eq(bn_kvpool_available(&p), BLOCKS - 2);
	bn_kvpool_release(&p, &fork);
	assert_idle(&p);
	bn_kvpool_free(&p);
}
END_TEST

/* The cache finds whole chains only: a block whose parent was evicted and reused for other
 * tokens can never be found under the parent's new contents, though its own tokens match. */
START_TEST(cache_chains_survive_reuse)
{
	struct bn_prefix_cache *c = bn_prefix_cache_new(BLOCKS, BT);
	ck_assert_ptr_nonnull(c);
	static const uint32_t a[2 * BT] = { 1, 2, 3, 4, 5, 6, 7, 8 }, b[2 * BT] = { 9, 9, 9, 9, 5, 6, 7, 8 };
	uint32_t found[2];
	ck_assert_int_eq(bn_prefix_cache_insert(c, 0, BN_NO_BLOCK, 7, a), 1);
	ck_assert_int_eq(bn_prefix_cache_insert(c, 1, 0, 7, a + BT), 1);
	ck_assert_int_eq(bn_prefix_cache_insert(c, 2, 0, 7, a + BT), 0);   /* equal: first stays */
	ck_assert_uint_eq(bn_prefix_cache_lookup(c, 7, a, 2, found), 2);
	ck_assert_uint_eq(found[0], 0);
	ck_assert_uint_eq(found[1], 1);
	ck_assert_uint_eq(bn_prefix_cache_lookup(c, 8, a, 2, found), 0); /* another scope */
	/* Block 0 is parked, evicted and given b's first tokens; block 1 still holds a's. */
	bn_prefix_cache_park(c, 0);
	ck_assert_uint_eq(bn_prefix_cache_evict(c), 0);
	ck_assert_uint_eq(bn_prefix_cache_evict(c), BN_NO_BLOCK);
	ck_assert_int_eq(bn_prefix_cache_insert(c, 0, BN_NO_BLOCK, 7, b), 1);
	ck_assert_uint_eq(bn_prefix_cache_lookup(c, 7, b, 2, found), 1);
	ck_assert_uint_eq(bn_prefix_cache_lookup(c, 7, a, 2, found), 0);
	ck_assert_uint_eq(bn_prefix_cache_blocks(c), 2);
	bn_prefix_cache_free(c);
}
END_TEST

/* Random reserve/grow/release against a model of the counts: the pool never loses or
 * duplicates a block. */
START_TEST(random_churn_keeps_accounts)
{
	struct bn_kvpool p;
	ck_assert_int_eq(bn_kvpool_init(&p, BLOCKS, BT), 0);
	struct bn_kv_seq s[3];
	uint32_t want[3] = { 0 }, len[3] = { 0 };
	for (int i = 0; i < 3; i++)
		s[i] = (struct bn_kv_seq){ .table = tables[i] };
	srand(7);
	for (int step = 0; step < 20000; step++) {
		int i = rand() % 3;
		if (want[i] == 0) {
			uint32_t tokens = 1 + (uint32_t)rand() % (BLOCKS * BT);
			if (bn_kvpool_reserve(&p, &s[i], tokens) == 0) {
				want[i] = tokens;
				len[i] = 0;
			}
		} else if (len[i] < want[i] && rand() % 4) {
			len[i] += 1 + (uint32_t)rand() % (want[i] - len[i]);
			ck_assert_int_eq(bn_kvpool_grow(&p, &s[i], len[i]), 0);
		} else {
			bn_kvpool_release(&p, &s[i]);
			want[i] = len[i] = 0;
		}
		uint32_t held = 0, promised = 0;
		uint8_t seen[BLOCKS] = { 0 };
		for (int k = 0; k < 3; k++) {
			held += s[k].n_blocks;
			promised += s[k].reserved;
			ck_assert_uint_eq(s[k].n_blocks, bn_kvpool_blocks_for(&p, len[k]));
			for (uint32_t b = 0; b < s[k].n_blocks; b++)
				ck_assert_uint_eq(seen[s[k].table[b]]++, 0);
		}
		ck_assert_uint_eq(held, bn_kvpool_used(&p));
		ck_assert_uint_eq(promised, p.n_reserved);
		ck_assert_uint_le(held + promised, BLOCKS);
	}
	for (int i = 0; i < 3; i++)
		bn_kvpool_release(&p, &s[i]);
	assert_idle(&p);
	bn_kvpool_free(&p);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* A budget two pools share (bn_kv_ledger)                                                     */
/* ------------------------------------------------------------------------------------------ */

#define CAP 1000 /* bytes: p's blocks weigh 100, q's 50, so each arena holds the whole cap */

static uint32_t ptables[3][20];

static void ledger_pools(struct bn_kv_ledger *l, struct bn_kvpool *p, struct bn_kvpool *q)
{
	*l = (struct bn_kv_ledger){ .cap = CAP };
	ck_assert_int_eq(bn_kvpool_init(p, 10, BT), 0);
	ck_assert_int_eq(bn_kvpool_init(q, 20, BT), 0);
	p->block_bytes = 100;
	q->block_bytes = 50;
	bn_kv_ledger_join(l, p);
	bn_kv_ledger_join(l, q);
}

/* A busy pool borrows what an idle one leaves; while the other waits below its fair share
 * (half the cap: two in use, a third pool idle), the borrower gets nothing more; what it
 * gives back goes to the one waiting; a pool that leaves the ledger counts no more. */
START_TEST(ledger_lends_and_shares_fairly)
{
	struct bn_kv_ledger l;
	struct bn_kvpool p, q, idle;
	ledger_pools(&l, &p, &q);
	ck_assert_int_eq(bn_kvpool_init(&idle, 10, BT), 0);
	idle.block_bytes = 100;
	bn_kv_ledger_join(&l, &idle);
	struct bn_kv_seq a = { .table = ptables[0] }, b = { .table = ptables[1] };
	ck_assert_uint_eq(bn_kvpool_available(&p), 10); /* the whole cap while q idles */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &a, 8), 0); /* 800: past its share, lent */
	ck_assert_uint_eq(bn_kvpool_available(&q), 4);              /* the 200 bytes left */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&q, &b, 6), -EAGAIN);
	q.wanting = 1; /* what the scheduler marks when its oldest request does not fit */
	ck_assert_uint_eq(bn_kvpool_available(&p), 0); /* past its share: lends no further */
	ck_assert_uint_eq(bn_kvpool_available(&q), 4);
	ck_assert_int_eq(bn_kvpool_grow(&p, &a, 8 * BT), 0); /* what it holds still grows */
	bn_kvpool_release(&p, &a);                          /* given back */
	ck_assert_uint_eq(bn_kvpool_available(&q), 20);     /* p idle again: all of the cap */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&q, &b, 6), 0);
	q.wanting = 0;
	ck_assert_uint_eq(bn_kvpool_available(&q), 14); /* alone in use: the rest of the cap */
	p.wanting = 1;                                  /* now p waits, below its share */
	ck_assert_uint_eq(bn_kvpool_available(&q), 4);  /* q up to its share of 500 only */
	ck_assert_uint_eq(bn_kvpool_available(&p), 7);  /* p the 700 left */
	bn_kv_ledger_leave(&p);
	ck_assert_uint_eq(bn_kvpool_available(&q), 14);
	bn_kvpool_release(&q, &b);
	bn_kv_ledger_leave(&q);
	bn_kv_ledger_leave(&idle);
	ck_assert_ptr_null(l.pools);
	bn_kvpool_free(&p);
	bn_kvpool_free(&q);
	bn_kvpool_free(&idle);
}
END_TEST

/* Random reserves, growth and releases in both pools, each wanting or not at random: the
 * bytes they commit together never pass the cap, and a pool alone in use gets all of it. */
START_TEST(ledger_churn_keeps_the_cap)
{
	struct bn_kv_ledger l;
	struct bn_kvpool pools[2];
	ledger_pools(&l, &pools[0], &pools[1]);
	struct bn_kv_seq s[2][2];
	uint32_t want[2][2] = { { 0 } };
	static uint32_t tab[2][2][20];
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			s[i][k] = (struct bn_kv_seq){ .table = tab[i][k] };
	srand(11);
	for (int step = 0; step < 20000; step++) {
		int i = rand() % 2, k = rand() % 2;
		struct bn_kvpool *p = &pools[i];
		if (want[i][k] == 0) {
			uint32_t blocks = 1 + (uint32_t)rand() % p->n_blocks;
			int rc = bn_kvpool_reserve_blocks(p, &s[i][k], blocks);
			want[i][k] = rc == 0 ? blocks : 0;
			p->wanting = rc != 0 && rand() % 2;
		} else if (s[i][k].n_blocks < want[i][k] && rand() % 3) {
			ck_assert_int_eq(bn_kvpool_grow(p, &s[i][k], want[i][k] * BT), 0);
		} else {
			bn_kvpool_release(p, &s[i][k]);
			want[i][k] = 0;
		}
		uint64_t bytes = 0;
		for (int j = 0; j < 2; j++)
			bytes += (uint64_t)bn_kvpool_committed(&pools[j]) * pools[j].block_bytes;
		ck_assert_uint_le(bytes, CAP);
	}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			bn_kvpool_release(&pools[i], &s[i][k]);
	pools[1].wanting = 0;
	ck_assert_uint_eq(bn_kvpool_available(&pools[0]), 10);
	for (int i = 0; i < 2; i++) {
		bn_kv_ledger_leave(&pools[i]);
		bn_kvpool_free(&pools[i]);
	}
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* A budget of the pools' shares (--memory): what they hold in memory                          */
/* ------------------------------------------------------------------------------------------ */

/* The memory a pool holds, as its backend would: a block is resident once a sequence wrote
 * it (it entered a table) until the pool gives it back (the release hook). */
struct resident {
	struct bn_kvpool *p;
	uint8_t in[20];
	uint32_t released;       /* blocks given back */
};

static void track_release(void *ctx, uint32_t first, uint32_t n)
{
	struct resident *r = ctx;
	ck_assert_uint_le(first + n, r->p->n_blocks);
	for (uint32_t b = first; b < first + n; b++) {
		ck_assert_msg(r->p->refs[b] == 0, "block %u given back while held", b);
		r->in[b] = 0;
	}
	r->released += n;
}

static void track(struct resident *r, struct bn_kvpool *p)
{
	*r = (struct resident){ .p = p };
	p->release = track_release;
	p->release_ctx = r;
}

static void wrote(struct resident *r, const struct bn_kv_seq *s)
{
	for (uint32_t i = 0; i < s->n_blocks; i++)
		r->in[s->table[i]] = 1;
}

static uint64_t resident_bytes(const struct resident *r)
{
	uint64_t n = 0;
	for (uint32_t b = 0; b < r->p->n_blocks; b++)
		n += r->in[b];
	return n * r->p->block_bytes;
}

/* p (blocks of 100 bytes, share 300) and q (50, share 500): a cap of 800 while both are in. */
static void summed_pools(struct bn_kv_ledger *l, struct bn_kvpool *p, struct bn_kvpool *q)
{
	*l = (struct bn_kv_ledger){ .summed = 1 };
	ck_assert_int_eq(bn_kvpool_init(p, 10, BT), 0);
	ck_assert_int_eq(bn_kvpool_init(q, 20, BT), 0);
	p->block_bytes = 100;
	q->block_bytes = 50;
	p->share_bytes = 300;
	q->share_bytes = 500;
	bn_kv_ledger_join(l, p);
	bn_kv_ledger_join(l, q);
	ck_assert_uint_eq(l->cap, 800);
}

/* summed_pools with q's prefix cache on and both pools' memory tracked. */
static void tracked_summed_pools(struct bn_kv_ledger *l, struct bn_kvpool *p, struct bn_kvpool *q,
				 struct resident *rp, struct resident *rq)
{
	summed_pools(l, p, q);
	ck_assert_int_eq(bn_kvpool_enable_cache(q), 0);
	track(rp, p);
	track(rq, q);
}

static void free_pools(struct bn_kvpool *p, struct bn_kvpool *q)
{
	bn_kv_ledger_leave(p);
	bn_kv_ledger_leave(q);
	bn_kvpool_free(p);
	bn_kvpool_free(q);
}

/* q's sequence s writes n blocks that get an identity (a prefix cache entry each), then
 * ends: they stay parked, resident. */
static void park_blocks(struct bn_kvpool *q, struct resident *rq, struct bn_kv_seq *s,
			uint32_t n, uint32_t salt)
{
	ck_assert_int_eq(bn_kvpool_reserve_blocks(q, s, n), 0);
	ck_assert_int_eq(bn_kvpool_grow(q, s, n * BT), 0);
	wrote(rq, s);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t tokens[BT] = { salt, i, 7, 7 };
		ck_assert_int_eq(bn_prefix_cache_insert(q->cache, s->table[i], BN_NO_BLOCK, 1, tokens), 1);
	}
	bn_kvpool_release(q, s);
	ck_assert_uint_eq(bn_kvpool_parked(q), n);
}

/* A busy pool borrows the idle one's share, and no further once the other wants its own
 * (weighted: q's fair share is 500 of 800); when the lender leaves, the cap shrinks to p's
 * share, what p borrowed is overflow and p admits nothing until its sequence ends, when
 * what passes the cap gives its memory back and p keeps the rest. Parked blocks hold memory:
 * a promise that would take the pools past the cap evicts them (the other pool's too) and
 * gives their memory back. */
START_TEST(summed_ledger_lends_and_takes_back)
{
	struct bn_kv_ledger l;
	struct bn_kvpool p, q;
	struct resident rp, rq;
	tracked_summed_pools(&l, &p, &q, &rp, &rq);
	struct bn_kv_seq a = { .table = ptables[0] }, b = { .table = ptables[1] };
	ck_assert_uint_eq(bn_kvpool_available(&p), 8); /* all of the cap while q idles */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &a, 6), 0); /* 600: 300 borrowed */
	ck_assert_int_eq(bn_kvpool_grow(&p, &a, 6 * BT), 0);
	wrote(&rp, &a);
	ck_assert_uint_eq(bn_kvpool_available(&q), 4); /* the 200 left */
	q.wanting = 1;
	ck_assert_uint_eq(bn_kvpool_available(&p), 0); /* past its share of 300 */
	q.wanting = 0;
	ck_assert_uint_eq(bn_kv_ledger_overflow(&l), 0);
	bn_kv_ledger_leave(&q); /* q unloads: its 500 go */
	ck_assert_uint_eq(l.cap, 300);
	ck_assert_uint_eq(bn_kv_ledger_overflow(&l), 300);
	ck_assert_uint_eq(bn_kvpool_available(&p), 0);
	bn_kvpool_release(&p, &a);
	ck_assert_uint_eq(rp.released, 3);                 /* what passed the cap went back, */
	ck_assert_uint_eq(resident_bytes(&rp), 300);       /* its share's worth was kept */
	ck_assert_uint_eq(bn_kv_ledger_overflow(&l), 0);
	ck_assert_uint_eq(bn_kvpool_available(&p), 3);
	bn_kv_ledger_join(&l, &q); /* loaded again */
	/* q parks 4 blocks (200 bytes); p then commits 700 of the 800: 100 too many. */
	park_blocks(&q, &rq, &b, 4, 1);
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &a, 7), 0);
	ck_assert_uint_eq(bn_kvpool_parked(&q), 2);       /* two evicted, */
	ck_assert_uint_eq(rq.released, 2);                 /* their memory given back */
	ck_assert_uint_eq(q.evictions, 2);
	ck_assert_uint_le(resident_bytes(&rp) + resident_bytes(&rq), l.cap);
	bn_kvpool_release(&p, &a);
	free_pools(&p, &q);
}
END_TEST

/* Grows s to `blocks` and marks them written; fails when a block had to be faulted in
 * (held no memory) while the pool still had a free block whose memory it kept. */
static void grow_without_needless_faults(struct resident *r, struct bn_kvpool *p,
					 struct bn_kv_seq *s, uint32_t blocks)
{
	uint32_t kept = 0, before = s->n_blocks;
	for (uint32_t i = 0; i < p->n_free; i++)
		kept += r->in[p->free_blocks[i]];
	uint8_t was_in[20];
	memcpy(was_in, r->in, sizeof(was_in));
	ck_assert_int_eq(bn_kvpool_grow(p, s, blocks * BT), 0);
	uint32_t taken = s->n_blocks - before, faulted = 0;
	for (uint32_t i = before; i < s->n_blocks; i++)
		faulted += !was_in[s->table[i]];
	ck_assert_msg(faulted <= (taken > kept ? taken - kept : 0),
		      "%u of %u blocks faulted in with %u kept free blocks", faulted, taken, kept);
	wrote(r, s);
}

/* A pool that lends keeps its freed blocks' memory while the pools fit the cap, and its next
 * sequences write them again (no page faulted in anew); a promise of the other pool that
 * would pass the cap gives back the kept blocks freed longest ago before it evicts any
 * parked block. */
START_TEST(summed_ledger_keeps_freed_memory)
{
	struct bn_kv_ledger l;
	struct bn_kvpool p, q;
	struct resident rp, rq;
	tracked_summed_pools(&l, &p, &q, &rp, &rq);
	struct bn_kv_seq a = { .table = ptables[0] }, b = { .table = ptables[1] },
			 c = { .table = ptables[2] };
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &a, 2), 0);
	grow_without_needless_faults(&rp, &p, &a, 2);
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &b, 2), 0);
	grow_without_needless_faults(&rp, &p, &b, 2);
	bn_kvpool_release(&p, &a);
	bn_kvpool_release(&p, &b);
	ck_assert_uint_eq(rp.released, 0);                 /* 400 held, cap 800: all kept */
	ck_assert_uint_eq(resident_bytes(&rp), 400);
	ck_assert_uint_eq(bn_kv_ledger_overflow(&l), 0);
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &a, 5), 0);
	grow_without_needless_faults(&rp, &p, &a, 5);      /* the four kept blocks, one new */
	ck_assert_uint_eq(resident_bytes(&rp), 500);
	uint32_t deepest = a.table[4];                     /* the first on the stack again */
	bn_kvpool_release(&p, &a);                         /* 5 blocks kept: 500 */
	ck_assert_uint_eq(rp.released, 0);
	park_blocks(&q, &rq, &c, 2, 3);                    /* q parks 100 */
	/* q promises 300 more: 500 + 100 + 300 passes 800 by 100: one kept block goes, the
	 * deepest on p's stack, and no parked block. */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&q, &b, 6), 0);
	ck_assert_uint_eq(rp.released, 1);
	ck_assert_uint_eq(rp.in[deepest], 0);
	ck_assert_uint_eq(resident_bytes(&rp), 400);
	ck_assert_uint_eq(bn_kvpool_parked(&q), 2);
	ck_assert_uint_eq(rq.released, 0);
	ck_assert_uint_le(resident_bytes(&rp) + resident_bytes(&rq) + 300, l.cap);
	bn_kvpool_release(&q, &b);
	free_pools(&p, &q);
}
END_TEST

/* A promise of q's own that passes the cap evicts q's parked blocks while q keeps freed
 * blocks that back that promise: the evicted block, holding no memory, goes below the kept
 * ones, which the promise's first block then takes. */
START_TEST(evicted_blocks_go_below_kept_ones)
{
	struct bn_kv_ledger l;
	struct bn_kvpool p, q;
	struct resident rp, rq;
	tracked_summed_pools(&l, &p, &q, &rp, &rq);
	struct bn_kv_seq a = { .table = ptables[0] }, b = { .table = ptables[1] },
			 c = { .table = ptables[2] };
	park_blocks(&q, &rq, &c, 2, 5);                    /* 100 parked */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&p, &a, 6), 0); /* 600 */
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&q, &b, 2), 0);
	grow_without_needless_faults(&rq, &q, &b, 2);
	bn_kvpool_release(&q, &b);                         /* two kept: 800 held */
	ck_assert_uint_eq(rq.released, 0);
	ck_assert_int_eq(bn_kvpool_reserve_blocks(&q, &b, 3), 0); /* 850: a parked block goes */
	ck_assert_uint_eq(bn_kvpool_parked(&q), 1);
	ck_assert_uint_eq(rq.released, 1);
	grow_without_needless_faults(&rq, &q, &b, 1);      /* a kept block, not the evicted one */
	grow_without_needless_faults(&rq, &q, &b, 3);
	ck_assert_uint_le(resident_bytes(&rp) + resident_bytes(&rq), l.cap);
	bn_kvpool_release(&q, &b);
	bn_kvpool_release(&p, &a);
	free_pools(&p, &q);
}
END_TEST

/* q unloads (idle): its pool leaves the ledger and goes, and a new one waits for its next
 * load, tracked again. */
static void reload_q(struct bn_kvpool *q, struct resident *rq)
{
	bn_kv_ledger_leave(q);
	bn_kvpool_free(q);
	ck_assert_int_eq(bn_kvpool_init(q, 20, BT), 0);
	ck_assert_int_eq(bn_kvpool_enable_cache(q), 0);
	q->block_bytes = 50;
	q->share_bytes = 500;
	track(rq, q);
}

/* Random work in both pools of a summed ledger, q with a prefix cache whose blocks park, each
 * wanting at random, q unloading and loading again at random: while q is in, the memory they
 * hold (blocks written and not given back) never passes the cap and there is no overflow;
 * while q is out, what p borrowed from it is overflow, which only falls, and p is promised
 * nothing while there is some. */
START_TEST(summed_ledger_churn_keeps_memory)
{
	struct bn_kv_ledger l;
	struct bn_kvpool pools[2];
	summed_pools(&l, &pools[0], &pools[1]);
	ck_assert_int_eq(bn_kvpool_enable_cache(&pools[1]), 0);
	struct resident res[2];
	track(&res[0], &pools[0]);
	track(&res[1], &pools[1]);
	struct bn_kv_seq s[2][2];
	uint32_t want[2][2] = { { 0 } }, salt = 0;
	static uint32_t tab[2][2][20];
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			s[i][k] = (struct bn_kv_seq){ .table = tab[i][k] };
	int q_in = 1;
	uint64_t last_over = 0;
	srand(13);
	for (int step = 0; step < 20000; step++) {
		int i = rand() % 2, k = rand() % 2, was_out = !q_in;
		struct bn_kvpool *p = &pools[i];
		int q_idle = want[1][0] + want[1][1] == 0;
		if (i == 1 && !q_in) {
			if (rand() % 4 == 0) {
				bn_kv_ledger_join(&l, p); /* loaded again */
				q_in = 1;
			}
		} else if (i == 1 && q_idle && rand() % 64 == 0) {
			reload_q(p, &res[1]);
			q_in = 0;
		} else if (want[i][k] == 0) {
			uint32_t blocks = 1 + (uint32_t)rand() % p->n_blocks;
			uint64_t over = bn_kv_ledger_overflow(&l);
			int rc = bn_kvpool_reserve_blocks(p, &s[i][k], blocks);
			ck_assert_msg(rc != 0 || over == 0, "step %d: promised blocks past the cap", step);
			want[i][k] = rc == 0 ? blocks : 0;
			p->wanting = rc != 0 && rand() % 2;
		} else if (s[i][k].n_blocks < want[i][k] && rand() % 3) {
			grow_without_needless_faults(&res[i], p, &s[i][k], want[i][k]);
			for (uint32_t b = 0; i == 1 && b < s[i][k].n_blocks; b++) {
				uint32_t tokens[BT] = { ++salt, 1, 2, 3 };
				(void)bn_prefix_cache_insert(p->cache, s[i][k].table[b], BN_NO_BLOCK, 1,
							     tokens);
			}
		} else {
			bn_kvpool_release(p, &s[i][k]);
			want[i][k] = 0;
		}
		uint64_t over = bn_kv_ledger_overflow(&l);
		uint64_t held = resident_bytes(&res[0]) + (q_in ? resident_bytes(&res[1]) : 0);
		if (q_in) {
			ck_assert_msg(over == 0, "step %d: %llu bytes past the cap of two shares", step,
				      (unsigned long long)over);
			ck_assert_msg(held <= l.cap, "step %d: %llu bytes resident, cap %llu", step,
				      (unsigned long long)held, (unsigned long long)l.cap);
		} else {
			ck_assert_msg(!was_out || over <= last_over,
				      "step %d: the overflow grew while the lender was out", step);
			ck_assert_msg(held <= l.cap + over, "step %d: %llu bytes resident, cap %llu + %llu",
				      step, (unsigned long long)held, (unsigned long long)l.cap,
				      (unsigned long long)over);
		}
		last_over = over;
	}
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			bn_kvpool_release(&pools[i], &s[i][k]);
	for (int i = 0; i < 2; i++) {
		bn_kv_ledger_leave(&pools[i]);
		bn_kvpool_free(&pools[i]);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kvpool");
	TCase *t = tcase_create("accounting");
	tcase_add_test(t, reserve_grow_release);
	tcase_add_test(t, share_lend_release_to);
	tcase_add_test(t, cache_chains_survive_reuse);
	tcase_add_test(t, random_churn_keeps_accounts);
	tcase_add_test(t, ledger_lends_and_shares_fairly);
	tcase_add_test(t, ledger_churn_keeps_the_cap);
	tcase_add_test(t, summed_ledger_lends_and_takes_back);
	tcase_add_test(t, summed_ledger_keeps_freed_memory);
	tcase_add_test(t, evicted_blocks_go_below_kept_ones);
	tcase_add_test(t, summed_ledger_churn_keeps_memory);
	suite_add_tcase(s, t);
	return tu_run_suite(s);
}
