/* SPDX-License-Identifier: MIT */
/*
 * ABI layout and ring arithmetic. The expected offsets are the numbers printed in
 * shm/PROTOCOL.md, so the header and its prose twin cannot drift apart silently.
 */
#include "bitnet_ring.h"
#include "bitnet_shm.h"

#include "testutil.h"

#include "ckassert.h"
#include <stddef.h>
#include <stdlib.h>

START_TEST(handshake_layout)
{
	ck_assert_uint_eq(sizeof(struct bn_hello), 32);
	ck_assert_uint_eq(offsetof(struct bn_hello, abi_version), 4);
	ck_assert_uint_eq(offsetof(struct bn_hello, flags), 8);
	ck_assert_uint_eq(offsetof(struct bn_hello, requested_slots), 12);
	ck_assert_uint_eq(offsetof(struct bn_hello, weight), 16);
	ck_assert_uint_eq(offsetof(struct bn_hello, reserved), 20);
	ck_assert_uint_eq(sizeof(struct bn_welcome), 32);
	ck_assert_uint_eq(offsetof(struct bn_welcome, error), 8);
	ck_assert_uint_eq(offsetof(struct bn_welcome, session_id), 12);
	ck_assert_uint_eq(offsetof(struct bn_welcome, segment_size), 16);
	ck_assert_uint_eq(sizeof(struct bn_ctl_request), 16);
	ck_assert_uint_eq(sizeof(struct bn_ctl_reply), 16);
	/* Magics are ASCII in memory order. */
	const unsigned char *m = (const unsigned char *)&(uint32_t){ BN_HELLO_MAGIC };
	ck_assert(m[0] == 'B' && m[1] == 'N' && m[2] == 'H' && m[3] == 'L');
}
END_TEST

START_TEST(segment_layout)
{
	ck_assert_uint_eq(sizeof(struct bn_shm_header), 256);
	ck_assert_uint_eq(offsetof(struct bn_shm_header, features), 8);
	ck_assert_uint_eq(offsetof(struct bn_shm_header, header_size), 12);
	ck_assert_uint_eq(offsetof(struct bn_shm_header, vocab_size), 72);
	ck_assert_uint_eq(offsetof(struct bn_shm_header, backend), 88);
	ck_assert_uint_eq(offsetof(struct bn_shm_header, model_name), 96);
	ck_assert_uint_eq(sizeof(struct bn_sq_ring), 192);
	ck_assert_uint_eq(offsetof(struct bn_sq_ring, head), 0);
	ck_assert_uint_eq(offsetof(struct bn_sq_ring, tail), 64);
	ck_assert_uint_eq(offsetof(struct bn_sq_ring, flags), 128);
	ck_assert_uint_eq(sizeof(struct bn_sqe), 16);
	ck_assert_uint_eq(offsetof(struct bn_sqe, slot), 4);
}
END_TEST

START_TEST(slot_layout)
{
	ck_assert_uint_eq(sizeof(struct bn_slot), 128);
	ck_assert_uint_eq(offsetof(struct bn_slot, state), 0);
	ck_assert_uint_eq(offsetof(struct bn_slot, cancel), 4);
	ck_assert_uint_eq(offsetof(struct bn_slot, n_tokens), 8);
	ck_assert_uint_eq(offsetof(struct bn_slot, status), 12);
	ck_assert_uint_eq(offsetof(struct bn_slot, error), 16);
	ck_assert_uint_eq(offsetof(struct bn_slot, waiters), 20);
	ck_assert_uint_eq(offsetof(struct bn_slot, events), 24);
	ck_assert_uint_eq(offsetof(struct bn_slot, queue_ns), 32);
	ck_assert_uint_eq(offsetof(struct bn_slot, total_ns), 48);
	ck_assert_uint_eq(offsetof(struct bn_slot, n_prompt), 64);
	ck_assert_uint_eq(offsetof(struct bn_slot, max_tokens), 68);
	ck_assert_uint_eq(offsetof(struct bn_slot, flags), 72);
	ck_assert_uint_eq(offsetof(struct bn_slot, temperature), 76);
	ck_assert_uint_eq(offsetof(struct bn_slot, seed_lo), 104);
	ck_assert_uint_eq(offsetof(struct bn_slot, deadline_ms), 120);
	ck_assert_uint_eq(offsetof(struct bn_slot, grammar_id), 124);
	ck_assert_uint_eq(offsetof(struct bn_shm_header, slot_logprob_offset), 160);
	ck_assert_uint_eq(sizeof(struct bn_logprob), 8);
	/* The state and status values are wire constants. */
	ck_assert_int_eq(BN_SLOT_DONE, 2);
	ck_assert_int_eq(BN_STATUS_SHUTDOWN, 5);
	ck_assert_int_eq(BN_E_EMPTY, 1014);
}
END_TEST

START_TEST(ring_empty_and_full)
{
	ck_assert_uint_eq(bn_ring_count(7, 7), 0);
	ck_assert(!bn_ring_full(7, 7, 8));
	ck_assert(bn_ring_full(7, 15, 8));
	ck_assert(!bn_ring_full(7, 14, 8));
	ck_assert(bn_ring_sane(7, 15, 8));
	ck_assert(!bn_ring_sane(7, 16, 8));
	/* A tail behind head is a huge count, never "sane". */
	ck_assert(!bn_ring_sane(7, 6, 8));
}
END_TEST

START_TEST(ring_wraps_at_2_32)
{
	uint32_t head = 0xfffffffcu, tail = head;
	for (int i = 0; i < 8; i++)
		tail++;
	ck_assert_uint_eq(tail, 4);
	ck_assert_uint_eq(bn_ring_count(head, tail), 8);
	ck_assert(bn_ring_full(head, tail, 8));
	ck_assert(bn_ring_sane(head, tail, 8));
	/* Entries keep their positions across the wrap: counter & mask. */
	ck_assert_uint_eq(bn_ring_index(0xffffffffu, 8), 7);
	ck_assert_uint_eq(bn_ring_index(0x0u, 8), 0);
	ck_assert_uint_eq(bn_ring_index(head + 5, 8), 1);
	head += 8;
	ck_assert_uint_eq(head, tail);
	ck_assert_uint_eq(bn_ring_count(head, tail), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("abi");
	TCase *tc = tcase_create("layout");
	tcase_add_test(tc, handshake_layout);
	tcase_add_test(tc, segment_layout);
	tcase_add_test(tc, slot_layout);
	tcase_add_test(tc, ring_empty_and_full);
	tcase_add_test(tc, ring_wraps_at_2_32);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
