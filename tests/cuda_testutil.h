/* SPDX-License-Identifier: MIT */
/*
 * cuda_testutil.h — what the cuda suites (test_cuda, test_cuda_ops, test_cuda_fast,
 * test_cuda_fast_ops) share, on a GPU and on the CUDA host harness alike: device memory
 * filled and read back under Check's assertions, their random numbers, the cuda daemon, and
 * the probe and runner every one of their mains needs. Only in builds with BN_HAVE_CUDA.
 */
#ifndef BITNET_CUDA_TESTUTIL_H
#define BITNET_CUDA_TESTUTIL_H

#include "testutil.h"
#include "../daemon/common/stats.h"

#include "ckassert.h"
#include <stddef.h>
#include <stdint.h>

struct bn_client;

/* A linear congruential stream over *state: each suite keeps its own state and seed, so its
 * random weights and ids stay what its tolerances were measured on. */
uint32_t ctu_rnd(uint64_t *state);
/* ctu_rnd scaled to [-1, 1). */
float ctu_rndf(uint64_t *state);

/* A device buffer of `bytes` (at least 1) holding src, or poisoned with 0xff bytes when src
 * is NULL, so that a kernel that reads what it was meant to write reads garbage. */
void *ctu_dev_copy(const void *src, size_t bytes);
/* Waits for the device, then copies `bytes` from device src to host dst. */
void ctu_host_copy(void *dst, const void *src, size_t bytes);

/* Deterministic ids in [3, vocab), ids[0] = 1, with runs of a repeated id (the tiny presets'
 * random weights predict the previous token: targets that are their own argmax). */
void ctu_make_ids(uint32_t *ids, uint32_t n, uint32_t seed, uint32_t vocab);
/* bn_stats.weights_cache as this process's backend last set it. */
enum bn_weights_cache ctu_weights_cache(void);
/* `bitnet-cli info`'s weights_cache for the daemon, once it is not "writing" (up to 10 s,
 * scaled: timescale.h). */
const char *ctu_weights_cache_of(const struct tu_daemon *d);
/* A counter or gauge from the daemon's stats, by name (tu_metric's answer). */
long long ctu_daemon_stat(struct bn_client *c, const char *name);

/* The daemon with the cuda backend: $BITNETD_CUDA_HOST on the harness, $BITNETD on a GPU. */
const char *ctu_cuda_daemon(void);
/* 1 when ctu_cuda_daemon() names one; otherwise prints SKIP and which variable is unset, and
 * returns 0 (the test then returns: a build without the daemon has nothing to start). */
int ctu_have_cuda_daemon(void);
/* tu_daemon_start (or, with restart, tu_daemon_restart) of the cuda daemon with args, the
 * environment's BITNETD put back afterwards. 0 or -1. */
int ctu_start_cuda_daemon(struct tu_daemon *d, const char *const *args, int restart);

/* 0 when device 0 is usable (compute capability 9.0 or newer; the harness reports an H100),
 * with its name in name[0 .. cap); otherwise prints SKIP and why, and returns 77. */
int ctu_require_device(char *name, size_t cap);
/* Runs the suite and frees it; EXIT_SUCCESS or EXIT_FAILURE. On the harness each test runs in
 * a child of its own (the harness has no context a fork could lose; a harness failure aborts
 * that test only), with the race check on unless the environment says otherwise (make
 * check's sanitizer passes leave it to the plain pass). On a GPU they run in this process,
 * one after another: the probe initialised CUDA here, and a forked child cannot use a context
 * it inherited (cudaSetDevice: initialization error, every test failing under make check on
 * an H100 while all passed with CK_FORK=no). Check's per-test timeouts then do not apply;
 * make check's own timeout bounds the suite. */
int ctu_run_suite(Suite *s);

#endif
