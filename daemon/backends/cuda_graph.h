/* SPDX-License-Identifier: MIT */
/*
 * cuda_graph.h — a cache of instantiated CUDA graphs by key: the cuda backend's decode steps
 * (cuda_fwd.c) are captured once per key (batch bucket, table stride, the buffers they name)
 * and replayed. A replay is the captured launches with the captured arguments, so a key must
 * name everything a step's launches depend on; the caller clears the cache when buffers a
 * graph names are freed.
 */
#ifndef BITNETD_CUDA_GRAPH_H
#define BITNETD_CUDA_GRAPH_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#define BN_CUDA_GRAPH_KEY_MAX 128

struct bn_cuda_graphs;

/* A cache of at most `capacity` graphs; NULL when out of memory. */
struct bn_cuda_graphs *bn_cuda_graphs_new(uint32_t capacity);
void bn_cuda_graphs_free(struct bn_cuda_graphs *g);
void bn_cuda_graphs_clear(struct bn_cuda_graphs *g);

/* Launches the graph stored under key (key_bytes <= BN_CUDA_GRAPH_KEY_MAX) on stream; without
 * one, captures the work record(ctx) issues on stream into a new graph (the least recently
 * used one goes when the cache is full) and launches that. Returns 0, record's error, or -EIO
 * after logging the CUDA call that failed. */
int bn_cuda_graphs_launch(struct bn_cuda_graphs *g, const void *key, size_t key_bytes,
			  cudaStream_t stream, int (*record)(void *ctx), void *ctx);

/* Graphs captured and replays launched since the cache was made. */
void bn_cuda_graphs_counts(const struct bn_cuda_graphs *g, uint64_t *captured, uint64_t *launched);

#endif /* BITNETD_CUDA_GRAPH_H */
