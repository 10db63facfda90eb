/* SPDX-License-Identifier: MIT */
/*
 * The KV block accounting (daemon/serve/kvpool.h): reservations are all-or-nothing, growth takes
 * only reserved blocks, release returns everything, no block is ever held twice, and blocks
 * shared between sequences stay until their last holder lets go; pools that share one budget
 * (several models' KV) lend to each other, fairly under load, and never pass it together.
 */
#include "testutil.h"

#include "../daemon/serve/kvpool.h"

#include <check.h>
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

static uint32_t ptables[2][20];

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
	suite_add_tcase(s, t);
	return tu_run_suite(s);
}
