/* SPDX-License-Identifier: MIT */
#include "cuda_graph.h"
#include "cuda_mem.h"


#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct entry {
	unsigned char key[BN_CUDA_GRAPH_KEY_MAX];
	size_t key_bytes;
	cudaGraphExec_t exec;
	uint64_t used;           /* the last launch's number, for eviction */
};

struct bn_cuda_graphs {
	struct entry *e;
	uint32_t n, cap;
	uint64_t clock, captured, launched;
};

struct bn_cuda_graphs *bn_cuda_graphs_new(uint32_t capacity)
{
	struct bn_cuda_graphs *g = calloc(1, sizeof(*g));
	if (g && !(g->e = calloc(capacity, sizeof(*g->e)))) {
		free(g);
		return NULL;
	}
	if (g)
		g->cap = capacity;
	return g;
}

void bn_cuda_graphs_clear(struct bn_cuda_graphs *g)
{
	for (uint32_t i = 0; g && i < g->n; i++)
		cudaGraphExecDestroy(g->e[i].exec);
	if (g)
		g->n = 0;
}

void bn_cuda_graphs_free(struct bn_cuda_graphs *g)
{
	bn_cuda_graphs_clear(g);
	if (g)
		free(g->e);
	free(g);
}

void bn_cuda_graphs_counts(const struct bn_cuda_graphs *g, uint64_t *captured, uint64_t *launched)
{
	*captured = g ? g->captured : 0;
	*launched = g ? g->launched : 0;
}

/* The slot for a new graph: a free one, else the least recently used, emptied. */
static struct entry *make_room(struct bn_cuda_graphs *g)
{
	if (g->n < g->cap)
		return &g->e[g->n++];
	struct entry *old = &g->e[0];
	for (uint32_t i = 1; i < g->n; i++)
		if (g->e[i].used < old->used)
			old = &g->e[i];
	cudaGraphExecDestroy(old->exec);
	return old;
}

/* Captures record(ctx) into an instantiated graph. An error inside the capture still ends it,
 * so the stream is never left capturing. */
static int capture(cudaStream_t stream, int (*record)(void *ctx), void *ctx, cudaGraphExec_t *exec)
{
	cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
	if (e != cudaSuccess)
		return bn_cuda_failed("cudaStreamBeginCapture", e);
	int rc = record(ctx);
	cudaGraph_t graph = NULL;
	e = cudaStreamEndCapture(stream, &graph);
	if (rc == 0 && e != cudaSuccess)
		rc = bn_cuda_failed("cudaStreamEndCapture", e);
	if (rc == 0 && (e = cudaGraphInstantiate(exec, graph, 0)) != cudaSuccess)
		rc = bn_cuda_failed("cudaGraphInstantiate", e);
	if (graph)
		cudaGraphDestroy(graph);
	return rc;
}

int bn_cuda_graphs_launch(struct bn_cuda_graphs *g, const void *key, size_t key_bytes,
			  cudaStream_t stream, int (*record)(void *ctx), void *ctx)
{
	if (key_bytes > BN_CUDA_GRAPH_KEY_MAX)
		return -EINVAL;
	struct entry *hit = NULL;
	for (uint32_t i = 0; i < g->n && !hit; i++)
		if (g->e[i].key_bytes == key_bytes && memcmp(g->e[i].key, key, key_bytes) == 0)
			hit = &g->e[i];
	if (!hit) {
		cudaGraphExec_t exec;
		int rc = capture(stream, record, ctx, &exec);
		if (rc)
			return rc;
		hit = make_room(g);
		memcpy(hit->key, key, key_bytes);
		hit->key_bytes = key_bytes;
		hit->exec = exec;
		g->captured++;
	}
	hit->used = ++g->clock;
	cudaError_t e = cudaGraphLaunch(hit->exec, stream);
	if (e != cudaSuccess)
		return bn_cuda_failed("cudaGraphLaunch", e);
	g->launched++;
	return 0;
}
