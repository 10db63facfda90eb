/* SPDX-License-Identifier: MIT */
/* cuda_testutil.c — see cuda_testutil.h. */
#define _GNU_SOURCE
#include "cuda_testutil.h"
#include "bitnet_client.h"

#include "cuda_kernels.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint32_t ctu_rnd(uint64_t *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*state >> 33);
}

float ctu_rndf(uint64_t *state)
{
	return (float)ctu_rnd(state) / 2147483648.0f - 1.0f;
}

void *ctu_dev_copy(const void *src, size_t bytes)
{
	void *d = NULL;
	ck_assert_int_eq(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
	if (src)
		ck_assert_int_eq(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	else
		ck_assert_int_eq(cudaMemset(d, 0xff, bytes), cudaSuccess);
	return d;
}

void ctu_host_copy(void *dst, const void *src, size_t bytes)
{
	ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
	ck_assert_int_eq(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

void ctu_make_ids(uint32_t *ids, uint32_t n, uint32_t seed, uint32_t vocab)
{
	ids[0] = 1;
	for (uint32_t i = 1; i < n; i++)
		ids[i] = i % 3 == 2 ? ids[i - 1] : 3 + (seed * 131 + i * 37 + i * i) % (vocab - 3);
}

enum bn_weights_cache ctu_weights_cache(void)
{
	return (enum bn_weights_cache)__atomic_load_n(&bn_stats.weights_cache, __ATOMIC_ACQUIRE);
}

const char *ctu_weights_cache_of(const struct tu_daemon *d)
{
	static char state[32];
	const char *info[] = { "info", NULL };
	for (int i = 0, end = tu_scaled(100); i < end; i++) {
		static struct tu_run r;
		ck_assert_int_eq(tu_run_cli(d, info, NULL, 0, &r), 0);
		const char *s = strstr(r.out, "\nweights_cache=");
		ck_assert_msg(s, "%s", r.out);
		sscanf(s + strlen("\nweights_cache="), "%31s", state);
		if (strcmp(state, "writing") != 0)
			break;
		usleep(100000);
	}
	return state;
}

long long ctu_daemon_stat(struct bn_client *c, const char *name)
{
	static char text[1 << 17];
	ck_assert_int_ge(bn_daemon_stats(c, text, sizeof(text)), 0);
	return tu_metric(text, name);
}

#ifdef BN_CUDA_HOST
#define CUDA_DAEMON_VAR "BITNETD_CUDA_HOST"
#else
#define CUDA_DAEMON_VAR "BITNETD"
#endif

const char *ctu_cuda_daemon(void)
{
	return getenv(CUDA_DAEMON_VAR);
}

int ctu_have_cuda_daemon(void)
{
	const char *bin = ctu_cuda_daemon();
	if (bin && *bin)
		return 1;
	printf("SKIP: no cuda daemon to start (%s is not set)\n", CUDA_DAEMON_VAR);
	return 0;
}

int ctu_start_cuda_daemon(struct tu_daemon *d, const char *const *args, int restart)
{
	if (!ctu_have_cuda_daemon())
		return -1;
	/* tu_daemon_start runs $BITNETD: the cuda daemon stands in for it while it starts */
	char *was = getenv("BITNETD") ? strdup(getenv("BITNETD")) : NULL;
	setenv("BITNETD", ctu_cuda_daemon(), 1);
	int rc = restart ? tu_daemon_restart(d, args) : tu_daemon_start(d, args);
	if (was)
		setenv("BITNETD", was, 1);
	else
		unsetenv("BITNETD");
	free(was);
	return rc;
}

int ctu_require_device(char *name, size_t cap)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		printf("SKIP: no usable CUDA device (%s)\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "none found");
		return 77;
	}
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
	    !bn_cuda_arch_ok(prop.major, prop.minor)) {
		printf("SKIP: device 0 is below compute capability %d.%d, this build's lowest\n",
		       BN_CUDA_MIN_ARCH / 10, BN_CUDA_MIN_ARCH % 10);
		return 77;
	}
	snprintf(name, cap, "%s", prop.name);
	return 0;
}

int ctu_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
#ifdef BN_CUDA_HOST
	setenv("BN_CUDA_HOST_RACECHECK", "1", 0);
#else
	srunner_set_fork_status(sr, CK_NOFORK);
#endif
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
