/* SPDX-License-Identifier: MIT */
/*
 * bitnet_client.h — libbitnet-client, the C API to bitnetd.
 *
 * Every call returns 0 (or a count, where it says so) or a negative error code: -BN_E_* from
 * <bitnet/bitnet_shm.h>, or -errno for a failed system call. bn_strerror() names any of them.
 * errno is left alone.
 *
 * Threads: one struct bn_client may be shared by any number of threads. A handle belongs to
 * whoever submitted it: one thread at a time may wait on, read or release a given handle.
 *
 * Timeouts are in nanoseconds: < 0 waits without limit, 0 only checks. Whatever the timeout,
 * a call that waits on the daemon returns -BN_E_DISCONNECTED within about 50 ms of the daemon
 * dying; nothing waits forever on a daemon that is gone.
 */
#ifndef BITNET_CLIENT_H
#define BITNET_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "bitnet_shm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bn_client;
struct bn_handle; /* one submitted request and its slot */

struct bn_model_info {
	char name[65];            /* NUL-terminated */
	char backend[16];         /* "loopback", "cpu", "cuda" */
	uint32_t vocab_size;
	uint32_t context_length;
	uint32_t bos_id;
	uint32_t eos_id;
	uint32_t max_prompt_tokens; /* per request, this session */
	uint32_t max_output_tokens; /* per request, this session */
	uint32_t slots;           /* requests this connection may have in flight */
};

struct bn_request {
	const uint32_t *prompt;   /* token ids, used as given (the caller decides about BOS) */
	uint32_t n_prompt;
	uint32_t max_tokens;
	uint32_t flags;           /* BN_REQ_* from bitnet_shm.h */
};

struct bn_result {
	uint32_t status;          /* enum bn_status: terminal status */
	int32_t error;            /* 0, or -BN_E_* when status is BN_STATUS_ERROR */
	uint32_t n_tokens;        /* tokens produced */
	uint64_t queue_ns;        /* daemon: waiting before the first step */
	uint64_t first_token_ns;  /* daemon: until the first token */
	uint64_t total_ns;        /* daemon: until the terminal status */
};

/* Counters of this connection's system calls, for benchmarks and tuning. */
struct bn_client_stats {
	uint64_t submits;         /* requests queued */
	uint64_t doorbells;       /* eventfd writes (the daemon was asleep) */
	uint64_t futex_waits;     /* FUTEX_WAIT calls */
};

/* Connects to the daemon: socket_path, else $BITNETD_SOCKET, else the default path.
 * slots: requests this connection may have in flight (0: the daemon's default). */
int bn_connect(const char *socket_path, uint32_t slots, struct bn_client **out);
/* Ends the session; requests still in flight are abandoned (the daemon drops them).
 * Handles of this client become invalid. Returns 0. */
int bn_disconnect(struct bn_client *c);

int bn_model_info(struct bn_client *c, struct bn_model_info *out);

/* How long a wait spins before it sleeps (default 20000 ns). Returns 0. */
int bn_client_set_spin_ns(struct bn_client *c, uint32_t spin_ns);

/* Queues a request. -BN_E_AGAIN: every slot is in flight, try again after a wait or release.
 * Prompt length and max_tokens beyond this session's capacities fail here with
 * -BN_E_TOO_LONG; everything else is checked by the daemon and reported in the result. */
int bn_submit(struct bn_client *c, const struct bn_request *req, struct bn_handle **out);
/* Waits until the request has its terminal status: 0, -BN_E_TIMEOUT, -BN_E_DISCONNECTED. */
int bn_wait(struct bn_handle *h, int64_t timeout_ns);
/* Waits until more than `have` tokens exist or the request ended: 0 or as bn_wait. */
int bn_wait_tokens(struct bn_handle *h, uint32_t have, int64_t timeout_ns);
/* Copies tokens [from, n) that exist now into out (at most cap); returns how many, >= 0. */
int bn_read_tokens(struct bn_handle *h, uint32_t from, uint32_t *out, uint32_t cap);
/* Asks the daemon to stop the request; it ends with BN_STATUS_CANCELLED unless it ended
 * first. Returns 0. */
int bn_cancel(struct bn_handle *h);
/* The terminal result: 0, or -BN_E_NOT_DONE. */
int bn_result(struct bn_handle *h, struct bn_result *out);
/* Gives the slot back. A request still running is cancelled and its slot reclaimed once the
 * daemon has ended it. The handle is invalid afterwards. Returns 0. */
int bn_release(struct bn_handle *h);

/* Submits, waits, copies the tokens (at most cap) and releases. Waits for a free slot when
 * all are busy. Returns 0 when the request ended with LENGTH or EOS, else its error:
 * -BN_E_CANCELLED, -BN_E_SHUTDOWN, the request's -BN_E_* error, -BN_E_TIMEOUT (the request is
 * then cancelled), -BN_E_DISCONNECTED. result may be NULL. */
int bn_generate(struct bn_client *c, const struct bn_request *req, uint32_t *out, uint32_t cap,
		struct bn_result *result, int64_t timeout_ns);

/* One item of a batch call: the request, where its tokens go, and what became of it. */
struct bn_batch_item {
	struct bn_request req;
	uint32_t *out;
	uint32_t out_cap;
	int32_t error;            /* as bn_generate's return value for this item */
	struct bn_result result;
};

struct bn_batch_result {
	uint32_t n_ok;
	uint32_t n_failed;
};

/* Runs every item, keeping as many in flight as the slots allow. Each item fails or succeeds
 * alone (item->error). Returns 0 when the batch ran (even if items failed), or a batch-level
 * error: -BN_E_INVALID for bad arguments, -BN_E_DISCONNECTED when the daemon went away (items
 * not finished then carry -BN_E_DISCONNECTED). The timeout covers the whole batch. */
int bn_generate_batch(struct bn_client *c, struct bn_batch_item *items, size_t n,
		      struct bn_batch_result *result, int64_t timeout_ns);

/* Daemon metrics in Prometheus text format into buf (NUL-terminated, truncated to cap).
 * Returns the full length of the text, which may exceed cap - 1. */
int bn_daemon_stats(struct bn_client *c, char *buf, size_t cap);

int bn_client_stats(struct bn_client *c, struct bn_client_stats *out);

/* Names of error codes (negative or positive) and statuses. Never NULL. */
const char *bn_strerror(int code);
const char *bn_status_name(uint32_t status);

#ifdef __cplusplus
}
#endif

#endif /* BITNET_CLIENT_H */
