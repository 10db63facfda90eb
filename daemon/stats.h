/* SPDX-License-Identifier: MIT */
/*
 * stats.h — the daemon's counters, rendered as Prometheus text for the STATS control op.
 * Written by the loop thread only, so plain increments suffice.
 */
#ifndef BITNETD_STATS_H
#define BITNETD_STATS_H

#include <stddef.h>
#include <stdint.h>

#define BN_STATS_STATUSES 6 /* enum bn_status values 0..5 */
#define BN_STATS_ERRORS 16  /* enum bn_error values 1001..1016 */

struct bn_stats {
	uint64_t sessions_opened;
	uint64_t sessions_closed;
	uint64_t sessions_refused;
	uint64_t protocol_violations;
	uint64_t requests_submitted;
	uint64_t requests_finished[BN_STATS_STATUSES]; /* by terminal status */
	uint64_t request_errors[BN_STATS_ERRORS];      /* by error code - 1001 */
	uint64_t tokens_generated;
	uint64_t steps;
	uint64_t batch_rows;         /* sum of rows over steps */
	uint64_t batch_padding;      /* padded cells that held no token */
	uint64_t batch_cells;        /* rows x width, summed */
	uint64_t futex_wakes;        /* FUTEX_WAKE syscalls made */
	uint64_t doorbells;          /* eventfd reads completed (the daemon was rung) */
	uint64_t sleeps;             /* io_uring waits that could block */
	uint64_t uring_submits;      /* io_uring_enter calls that only submitted */
};

extern struct bn_stats bn_stats;

void bn_stats_count_error(uint32_t error);

/* Appends the exposition text to buf (NUL-terminated, truncated at cap). Returns its length. */
size_t bn_stats_render(char *buf, size_t cap, uint32_t sessions_open, uint32_t queued,
		       uint32_t running);

#endif /* BITNETD_STATS_H */
