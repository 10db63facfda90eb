/* SPDX-License-Identifier: MIT */
/*
 * cuda_host.h — the CUDA host harness's own interface: what its device-language headers
 * (cuda_host_device.h, cuda_host_launch.h, mma.h) call in its runtime (block.c, grid.c,
 * runtime.c). C, so the runtime is C like the rest of the project; the headers that device
 * code sees wrap it in CUDA's C++ names.
 *
 * None of this is thread-local: device code reaches it from a shared object (the kernels'
 * module) whose thread-local block must hold nothing but __shared__ variables, and one launch
 * runs at a time in the process (grid.c serialises them).
 */
#ifndef BN_CUDA_HOST_H
#define BN_CUDA_HOST_H

#include "cuda_runtime_api.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BN_CUDA_HOST_WARP 32
#define BN_CUDA_HOST_FULL_MASK 0xffffffffu

/* What device code reads about the GPU thread that is running. */
struct bn_cuda_host_thread {
	uint3 idx;               /* threadIdx */
	uint32_t lane, warp;     /* position in the block's linear order, by warps of 32 */
};

extern struct bn_cuda_host_thread *bn_cuda_host_self;
extern uint3 bn_cuda_host_block_idx;
extern dim3 bn_cuda_host_block_dim, bn_cuda_host_grid_dim;

/* __syncthreads: returns when every thread of the block has arrived or exited. */
void bn_cuda_host_syncthreads(void);

/* Warp collectives: every lane of the warp must arrive at the same operation (same kind and
 * operand size; wmma calls also the same pointer, leading dimension and layout) under the full
 * mask; anything else fails the program with a message naming what differed. */
enum bn_cuda_host_op {
	BN_CUDA_HOST_SHFL_IDX,
	BN_CUDA_HOST_SHFL_UP,
	BN_CUDA_HOST_SHFL_DOWN,
	BN_CUDA_HOST_SHFL_XOR,
	BN_CUDA_HOST_BALLOT,
	BN_CUDA_HOST_SYNCWARP,
	BN_CUDA_HOST_WMMA, /* fill, load, store, mma: a check that the warp calls together */
	BN_CUDA_HOST_MMA_M16N8K32, /* PTX mma.sync.aligned.m16n8k32.row.col.s32.{u8,s8}.s8.s32 */
};

/* The operands of PTX's mma.sync m16n8k32 with 8-bit inputs, as one lane holds them: four
 * A registers, two B registers, four accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k32"). */
#define BN_CUDA_HOST_MMA_WORDS 10

struct bn_cuda_host_collective {
	const char *name;        /* the call, for messages: "__shfl_xor_sync" */
	enum bn_cuda_host_op op;
	uint32_t mask;
	uint64_t value;          /* shuffled bits, ballot predicate, fill value */
	uint32_t size;           /* bytes of value (shuffles), element bytes (wmma) */
	int32_t arg;             /* source lane, delta or lane mask */
	uint32_t width;          /* shuffle segment width */
	const void *ptr;         /* wmma: the matrix in memory */
	uint32_t ldm, layout;    /* wmma; mma: 1 when A is unsigned (u8), 0 for s8 */
	uint32_t in[BN_CUDA_HOST_MMA_WORDS]; /* mma: a[4], b[2], c[4] */
	uint32_t *out;           /* mma: where this lane's d[4] goes once the warp has computed */
};

/* This lane's result: the bits it receives, or the ballot. */
uint64_t bn_cuda_host_warp_collective(const struct bn_cuda_host_collective *c);

/* Ends the program with the message, naming the kernel, block and thread that ran. */
void bn_cuda_host_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* One kernel launch, as <<<grid, block, shared_bytes, stream>>>(args) describes it. */
struct bn_cuda_host_launch {
	const char *kernel_name;
	const void *kernel;      /* its code address: names the module its __shared__ lives in */
	dim3 grid, block;
	size_t shared_bytes;     /* dynamic shared memory (not emulated: must be 0) */
	cudaStream_t stream;
	/* runs one GPU thread: the kernel on its own copy of the arguments */
	void (*run_thread)(const void *args);
	const void *args;        /* the arguments in the kernel's parameter types */
	size_t args_size;
	/* A graph keeps its launches (graph.c): a copy of the arguments that outlives the launch
	 * call, its release, and the check of their pointers when the graph replays it. */
	void *(*clone_args)(const void *args);
	void (*free_args)(void *args);
	void (*check_args)(const char *kernel_name, const void *args);
};

/* Runs the grid at once; a bad configuration or stream is recorded as the last error, as a
 * launch does, and returned. On a capturing stream the launch is recorded instead (graph.c). */
cudaError_t bn_cuda_host_launch_grid(const struct bn_cuda_host_launch *l);

/* Stream capture (graph.c), for the rest of the runtime. bn_cuda_host_captures says whether
 * the stream records its work (and records l, returning 1, when it does and l is given);
 * bn_cuda_host_capture_refuse makes a call that may not run during a capture fail: it
 * returns cudaSuccess when no capture is active, else invalidates the capture concerned
 * (stream NULL: every active one) and returns the error to give. */
int bn_cuda_host_captures(cudaStream_t stream);
int bn_cuda_host_capture_launch(const struct bn_cuda_host_launch *l);
/* A copy (memset_value < 0) or a memset of memset_value: recorded when the stream captures. */
int bn_cuda_host_capture_copy(void *dst, const void *src, size_t n, int kind, int memset_value,
			      cudaStream_t stream);
cudaError_t bn_cuda_host_capture_refuse(cudaStream_t stream, int any_stream);

/* Fails unless p is NULL or lies in (or just past) device or pinned host memory: a kernel
 * argument of pointer type that points anywhere else would fault on the GPU. */
void bn_cuda_host_check_pointer(const char *kernel_name, unsigned arg, const void *p);

/* The allocation holding the byte at p (NULL if none): its base and size; pinned tells host
 * memory. The caller holds the lock. */
struct bn_cuda_host_alloc {
	char *base;
	size_t size;
	int pinned;
	int sparse;   /* a reserved range (vmm.c): only its mapped parts may be touched */
};
const struct bn_cuda_host_alloc *bn_cuda_host_find_alloc(const void *p);
/* As bn_cuda_host_find_alloc, for a pointer that may also point just past an allocation. */
const struct bn_cuda_host_alloc *bn_cuda_host_find_pointer(const void *p);
/* Records err as the thread's last error and returns it. */
cudaError_t bn_cuda_host_error(cudaError_t err);
/* 1 when the stream handle is 0 or a live stream. */
int bn_cuda_host_stream_ok(cudaStream_t s);
/* Handles of streams, events and graphs: a new one (zeroed, `bytes`, registered; NULL when out
 * of memory), whether one is live, and its release (an error for one that is not). */
void *bn_cuda_host_handle_new(size_t bytes);
int bn_cuda_host_handle_live(const void *h);
cudaError_t bn_cuda_host_handle_free(void *h);
/* A copy (kind: enum cudaMemcpyKind) and a memset of device memory, checked as cudaMemcpy and
 * cudaMemset check them, run at once. */
cudaError_t bn_cuda_host_copy(void *dst, const void *src, size_t n, int kind);
cudaError_t bn_cuda_host_memset(void *dev_ptr, int value, size_t n);
/* For vmm.c, the caller holding the lock: a reserved address range registered as device
 * memory (pointer and copy checks accept it; what is not mapped in it faults when touched),
 * and its removal (0, or -1: no such range); device bytes taken (0, or -1: more than the
 * device has free) and given back, as cudaMemGetInfo counts them. */
int bn_cuda_host_add_range(void *base, size_t size);
/* The parts of [base, base + size) with memory mapped under them, adjacent mappings merged,
 * in address order, at most cap of them into out; how many there are. The caller holds the
 * lock. */
struct bn_cuda_host_range {
	char *base;
	size_t size;
};
unsigned bn_cuda_host_vmm_mapped(const char *base, size_t size, struct bn_cuda_host_range *out,
				 unsigned cap);
int bn_cuda_host_remove_range(void *base);
int bn_cuda_host_device_take(size_t bytes);
void bn_cuda_host_device_give(size_t bytes);
/* The runtime's lock, held by every call that reads or changes its tables, and by a launch. */
void bn_cuda_host_lock(void);
void bn_cuda_host_unlock(void);

#ifdef __cplusplus
}
#endif

#endif /* BN_CUDA_HOST_H */
