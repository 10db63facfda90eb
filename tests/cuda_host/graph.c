/* SPDX-License-Identifier: MIT */
/*
 * graph.c — stream capture and CUDA graphs on the host: what a capturing stream is given is
 * recorded, not run; cudaGraphInstantiate copies the record and cudaGraphLaunch replays it,
 * node after node in the order the work was issued, as ordinary launches and copies on the
 * stream it is launched on. A replay is therefore exactly the captured launches in the
 * captured order, each with the arguments it had at capture: code that changes an argument
 * after capturing (a buffer grown and moved, a size) gets the old one replayed, as on a GPU.
 *
 * What CUDA refuses during a capture in its global and thread-local modes is refused here and
 * invalidates the capture (cudaStreamEndCapture then fails): synchronous copies and memsets,
 * allocation and freeing, synchronising the capturing stream, an event or the device, work on
 * the legacy stream. The harness is stricter than CUDA in one way: events are not recorded
 * into graphs (cudaEventRecord on a capturing stream is refused). A kernel node's pointer
 * arguments are checked again at every replay, so a graph that outlived a buffer it names
 * fails the program (the GPU would read freed memory).
 */
#include "cuda_host.h"

#include <stdlib.h>
#include <string.h>

enum node_kind { NODE_KERNEL, NODE_COPY, NODE_MEMSET };

struct node {
	enum node_kind kind;
	struct bn_cuda_host_launch launch; /* NODE_KERNEL: args is its own copy */
	void *dst;
	const void *src;
	size_t n;
	int copy_kind, value;
};

struct node_list {
	struct node *v;
	size_t n, cap;
};

struct CUgraph_st {
	struct node_list nodes;
};

struct CUgraphExec_st {
	struct node_list nodes;
};

#define MAX_CAPTURES 16

/* The streams that are capturing. */
static struct {
	cudaStream_t stream;
	int invalidated;
	struct node_list nodes;
} captures[MAX_CAPTURES];
static unsigned n_captures;

static void free_nodes(struct node_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].kind == NODE_KERNEL)
			l->v[i].launch.free_args((void *)l->v[i].launch.args);
	free(l->v);
	*l = (struct node_list){ 0 };
}

/* Appends a copy of node (its arguments cloned); 0 or -1 when out of memory. */
static int add_node(struct node_list *l, const struct node *node)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct node *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	struct node copy = *node;
	if (copy.kind == NODE_KERNEL) {
		copy.launch.args = node->launch.clone_args(node->launch.args);
		if (!copy.launch.args)
			return -1;
	}
	l->v[l->n++] = copy;
	return 0;
}

/* The capture of a stream, or -1. The caller holds the lock. */
static int capture_of(cudaStream_t stream)
{
	for (unsigned i = 0; i < n_captures; i++)
		if (captures[i].stream == stream)
			return (int)i;
	return -1;
}

int bn_cuda_host_captures(cudaStream_t stream)
{
	bn_cuda_host_lock();
	int on = stream && capture_of(stream) >= 0;
	bn_cuda_host_unlock();
	return on;
}

cudaError_t bn_cuda_host_capture_refuse(cudaStream_t stream, int any_stream)
{
	bn_cuda_host_lock();
	int hit = 0;
	for (unsigned i = 0; i < n_captures; i++)
		if (any_stream || captures[i].stream == stream) {
			captures[i].invalidated = 1;
			hit = 1;
		}
	bn_cuda_host_unlock();
	return hit ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

/* Records node into the stream's capture: 1 when the stream captures, else 0. */
static int record(cudaStream_t stream, const struct node *node)
{
	if (!stream)
		return 0;
	bn_cuda_host_lock();
	int i = capture_of(stream);
	if (i >= 0 && !captures[i].invalidated && add_node(&captures[i].nodes, node) != 0)
		captures[i].invalidated = 1;
	bn_cuda_host_unlock();
	return i >= 0;
}

int bn_cuda_host_capture_launch(const struct bn_cuda_host_launch *l)
{
	struct node node = { .kind = NODE_KERNEL, .launch = *l };
	return record(l->stream, &node);
}

int bn_cuda_host_capture_copy(void *dst, const void *src, size_t n, int kind, int memset_value,
			      cudaStream_t stream)
{
	struct node node = { .kind = memset_value < 0 ? NODE_COPY : NODE_MEMSET, .dst = dst,
			     .src = src, .n = n, .copy_kind = kind, .value = memset_value };
	return record(stream, &node);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	if (mode > cudaStreamCaptureModeRelaxed)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	if (!stream) /* the legacy stream cannot be captured */
		return bn_cuda_host_error(cudaErrorStreamCaptureUnsupported);
	if (!bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	bn_cuda_host_lock();
	cudaError_t e = cudaSuccess;
	if (capture_of(stream) >= 0)
		e = cudaErrorIllegalState;
	else if (n_captures == MAX_CAPTURES)
		e = cudaErrorMemoryAllocation;
	else
		captures[n_captures++] = (typeof(captures[0])){ .stream = stream };
	bn_cuda_host_unlock();
	return bn_cuda_host_error(e);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
	if (!graph)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*graph = NULL;
	bn_cuda_host_lock();
	int i = stream ? capture_of(stream) : -1;
	if (i < 0) {
		bn_cuda_host_unlock();
		return bn_cuda_host_error(cudaErrorIllegalState);
	}
	struct node_list nodes = captures[i].nodes;
	int invalidated = captures[i].invalidated;
	captures[i] = captures[--n_captures];
	bn_cuda_host_unlock();
	if (invalidated) {
		free_nodes(&nodes);
		return bn_cuda_host_error(cudaErrorStreamCaptureInvalidated);
	}
	struct CUgraph_st *g = bn_cuda_host_handle_new(sizeof(*g));
	if (!g) {
		free_nodes(&nodes);
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	}
	g->nodes = nodes;
	*graph = g;
	return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
	if (!status)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	if (!bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	bn_cuda_host_lock();
	int i = stream ? capture_of(stream) : -1;
	*status = i < 0 ? cudaStreamCaptureStatusNone
		: captures[i].invalidated ? cudaStreamCaptureStatusInvalidated
					  : cudaStreamCaptureStatusActive;
	bn_cuda_host_unlock();
	return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
	if (!exec || flags)
		return bn_cuda_host_error(cudaErrorInvalidValue);
	*exec = NULL;
	if (!graph || !bn_cuda_host_handle_live(graph))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	struct CUgraphExec_st *x = bn_cuda_host_handle_new(sizeof(*x));
	if (!x)
		return bn_cuda_host_error(cudaErrorMemoryAllocation);
	for (size_t i = 0; i < graph->nodes.n; i++)
		if (add_node(&x->nodes, &graph->nodes.v[i]) != 0) {
			free_nodes(&x->nodes);
			bn_cuda_host_handle_free(x);
			return bn_cuda_host_error(cudaErrorMemoryAllocation);
		}
	*exec = x;
	return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
	if (!exec || !bn_cuda_host_handle_live(exec) || !bn_cuda_host_stream_ok(stream))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	if (bn_cuda_host_captures(stream)) /* a graph inside a graph: not emulated */
		return bn_cuda_host_error(bn_cuda_host_capture_refuse(stream, 0));
	if (!stream) {
		cudaError_t refused = bn_cuda_host_capture_refuse(NULL, 1);
		if (refused != cudaSuccess)
			return bn_cuda_host_error(refused);
	}
	for (size_t i = 0; i < exec->nodes.n; i++) {
		const struct node *nd = &exec->nodes.v[i];
		cudaError_t e = cudaSuccess;
		if (nd->kind == NODE_KERNEL) {
			struct bn_cuda_host_launch l = nd->launch;
			l.stream = stream;
			l.check_args(l.kernel_name, l.args);
			e = bn_cuda_host_launch_grid(&l);
		} else if (nd->kind == NODE_COPY) {
			e = bn_cuda_host_copy(nd->dst, nd->src, nd->n, nd->copy_kind);
		} else {
			e = bn_cuda_host_memset(nd->dst, nd->value, nd->n);
		}
		if (e != cudaSuccess)
			return bn_cuda_host_error(e);
	}
	return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
	if (!exec || !bn_cuda_host_handle_live(exec))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	free_nodes(&exec->nodes);
	return bn_cuda_host_handle_free(exec);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	if (!graph || !bn_cuda_host_handle_live(graph))
		return bn_cuda_host_error(cudaErrorInvalidResourceHandle);
	free_nodes(&graph->nodes);
	return bn_cuda_host_handle_free(graph);
}
