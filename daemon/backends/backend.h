/* SPDX-License-Identifier: MIT */
/*
 * backend.h — the seam between the scheduler and whatever computes tokens.
 *
 * A backend is a small table of functions. The scheduler hands it one padded batch per step and
 * gets back one next-token id per row; sampling happens inside the backend so a GPU backend can
 * keep logits on the device (only token ids cross back). A backend owns per-sequence state (the
 * KV cache) indexed by a sequence id in [0, max_seqs); the scheduler opens an id when a request
 * starts and closes it when the request ends, whatever the reason.
 *
 * The batch (model/batch.h) is a [n_rows x width] token matrix with each row's length,
 * positions, sequence, KV blocks, and what it wants: a token, log-probabilities of given
 * tokens, or nothing. A prompt arrives as one or more rows in consecutive steps (chunked
 * prefill); a decode step is a row of length 1.
 *
 * KV cache: the scheduler owns the accounting (kvpool.h), the backend owns the memory. After
 * open, the scheduler calls kv_init once with the number of blocks it budgeted from
 * desc->kv_bytes_per_token; row r's positions [0, pos[r] + lens[r]) live in the blocks
 * blocks[r][0], blocks[r][1], ... (block_tokens positions each), all allocated before the step.
 *
 * Sampling: out[r] receives the token of a row whose sample[r] is set and, when asked, its
 * log-probabilities. Only backends whose desc says can_score get score rows.
 *
 * Speculative decoding: a backend with seq_rewind takes verify rows (batch.h), whose every
 * position is sampled; the scheduler then rewinds the sequence past the drafted tokens that
 * were not accepted, so the next row continues from the last accepted one.
 *
 * Forks: seq_fork (optional) starts a sequence whose first positions are already in the KV
 * cache: the blocks its rows will name hold them, shared read-only with the sequence that
 * wrote them, except a last partial block, which the backend copies. A classify request's
 * labels each continue its prefix this way (sched.c).
 */
#ifndef BITNETD_BACKEND_H
#define BITNETD_BACKEND_H

#include "bitnet_shm.h"
#include "model/batch.h"
#include "model/sample.h"

#include <stdint.h>

struct bn_model_config;

struct bn_model_desc {
	char name[64];
	uint32_t vocab_size;
	uint32_t context_length;
	uint32_t bos_id;
	uint32_t eos_id;
	uint32_t kind; /* enum bn_backend_kind from shm/bitnet_shm.h */
	/* Memory the loaded weights hold (host memory for cpu, device memory for cuda; mapped
	 * cache pages included): what the daemon's --memory budget counts besides the KV. */
	uint64_t weight_bytes;
	uint64_t kv_bytes_per_token; /* KV memory one position of one sequence takes; 0: none */
	/* A backend whose KV cache is device memory (cuda) sets kv_on_device, and what the
	 * device had free once the weights were loaded; of that, device_headroom stays free of
	 * KV for the steps' scratch. The default pool takes at most the rest, and with none
	 * left the daemon does not start (saying so); --kv-memory overrides both. Without
	 * kv_on_device the pool is host memory, capped by the machine's. */
	int kv_on_device;
	uint64_t device_free, device_headroom;
	/* Earlier positions whose attention costs about as much as one token's weight matrices:
	 * the scheduler counts a token at position p as 1 + p / attn_positions_per_token tokens
	 * against a step's token budget, so steps along a long prompt stay about as long as its
	 * first. 0: attention is not counted (every token costs 1). */
	uint32_t attn_positions_per_token;
	/* Positions of one sequence whose KV fills whole pages in each of the backend's arrays
	 * (kv_release gives a block's memory back exactly when its block_tokens are a multiple
	 * of it); 0: the backend cannot give KV memory back. */
	uint32_t kv_release_tokens;
	/* With kv_on_device and kv_init_elastic: the device maps KV memory in granules of
	 * kv_map_granule bytes, in each of the kv_arrays arrays a block's rows lie in (keys and
	 * values of every layer), so an elastic arena may hold up to bn_model_kv_slack's bytes
	 * besides its blocks'. 0: KV on the device is not elastic. */
	uint64_t kv_map_granule;
	uint32_t kv_arrays;
	uint32_t can_score;      /* 1: batches may carry score rows (bn_batch.score) */
	uint32_t can_classify;   /* 1: can_score and seq_fork, which classify requests need */
	uint32_t can_mask;       /* 1: sample contexts may carry masks (structured output,
				  * model/sample.h); the scheduler also needs seq_rewind for them */
	uint32_t can_embed;      /* 1: batches may carry hidden rows (model/batch.h) */
	uint32_t embed_dim;      /* the hidden state's width (n_embd); 0: no model */
	uint32_t file_pooling;   /* the file's <arch>.pooling_type (enum bn_pooling): an embedding
				  * model when not 0 */
	uint32_t pooling;        /* what embeddings pool by (bn_model_describe_embedding): the
				  * file's or --pooling; 0: the model does not embed */
	char embed_off[160];     /* pooling 0 or !can_embed: why there are no embeddings */
	enum bn_lm_head_kind lm_head;             /* what the header tells clients */
	enum bn_decode_layout_kind decode_layout; /* (shm/bitnet_shm.h, feature COMPUTE) */
	char kernels[64];        /* cuda: the --cuda-kernels variant it runs; "" elsewhere */
	/* The graph the weights run (bn_model_describe_graph): the FFN activation and what
	 * chose it (the key, the rule or --activation), and the float layer matrices of a
	 * bitnet* file by role (q, k, v, output, gate, up, down): how many there are and how
	 * many were packed to the ternary kernels; the names of those kept float. */
	char activation[8];
	char activation_why[256];
	uint32_t float_candidates[7], ternary_from_float[7];
	char kept_float[512];    /* comma-separated, "...and N more" when they do not fit */
};

/* --activation: the file's FFN activation, or one the operator chose (model.h). */
enum bn_activation_opt { BN_ACTIVATION_FILE, BN_ACTIVATION_SILU, BN_ACTIVATION_RELU2,
			 BN_ACTIVATION_GELU };

/* Options every backend may read; a backend ignores what does not apply to it. */
/* How the cpu backend computes the LM head (--lm-head). */
enum bn_lm_head_mode {
	BN_LM_HEAD_MODE_SCREENED, /* a row that wants only the argmax: an int8 screen, then the float
			      * head for the tokens that can win: the same token, the head's bytes
			      * about halved (head_screen.h); every other row: the float head */
	BN_LM_HEAD_MODE_FULL,     /* the float head for every token; no int8 copy in memory */
	BN_LM_HEAD_MODE_INT8,     /* every row from the int8 copy with int8 activations: faster in
			      * batches, not the file's logits (opt-in; forward.h) */
};

struct bn_pool;
struct bn_load_report;

struct bn_backend_options {
	const char *model_path;  /* NULL for backends without a model file */
	/* cpu: the daemon's one thread pool, which the steps of every model run on (its caller
	 * is the loop thread), or NULL: the backend makes its own of n_threads. With one, the
	 * load repacks on a pool of load_threads made for it, on the thread that opens. */
	struct bn_pool *pool;
	uint32_t load_threads;
	/* cpu, cuda: where the load's seconds and the packed-weight cache's state go, also
	 * later from the cache writer's thread (common/stats.h); NULL: the daemon-wide one. */
	struct bn_load_report *report;
	const char *cache_dir;   /* cpu, cuda: the weights cache's directory, "none", or NULL:
				  * the default (model/wcache.h: bn_wcache_dir) */
	uint32_t max_seqs;       /* sequences open at once (the scheduler's max batch) */
	uint32_t vocab_size;     /* loopback: size of its vocabulary */
	uint32_t step_delay_us;  /* loopback: busy time per step, to mimic compute */
	uint32_t n_threads;      /* cpu: compute threads including the caller; 0 = all CPUs */
	enum bn_lm_head_mode lm_head_mode; /* cpu */
	uint32_t base3_decode;   /* cpu: a T3 copy of the ternary weights for decode steps */
	int device_index;        /* cuda: the N of --device cuda:N */
	const char *cuda_kernels; /* cuda: --cuda-kernels (cuda_variant.h); NULL: the default */
	int probing;             /* --device auto: a missing GPU is not an error (log it as info) */
	uint32_t activation;     /* cpu, cuda: --activation, enum bn_activation_opt (0: the file's) */
};

struct bn_backend_ops {
	const char *name;
	/* Load and prepare; fill *desc. Returns 0 or -errno / -BN_E_*; logs the reason itself. */
	int (*open)(const struct bn_backend_options *opt, struct bn_model_desc *desc, void **self);
	void (*close)(void *self);
	/* Allocates KV storage: n_blocks blocks of block_tokens positions. Called once after
	 * open, before any step. Returns 0 or -ENOMEM. */
	int (*kv_init)(void *self, uint32_t n_blocks, uint32_t block_tokens);
	/* Optional (NULL: kv_init's arena serves every pool): the arena of a pool that lends and
	 * borrows (serve/kvpool.h's ledger) on a backend whose KV memory is not taken lazily by
	 * the system: n_blocks blocks' addresses, memory under a block from the first step that
	 * writes it until kv_release gives it back (desc kv_map_granule). Instead of kv_init;
	 * 0, -ENOMEM or -EIO. */
	int (*kv_init_elastic)(void *self, uint32_t n_blocks, uint32_t block_tokens);
	/* Optional (NULL: the KV memory stays until close). Blocks [first, first + n) hold
	 * nothing anyone reads before it is written again: their memory may go back to the
	 * system. n = 0 says blocks will be given back from now on (the cpu backend stops
	 * transparent huge pages on its arena, which would keep memory around a freed block).
	 * 0, or -EOPNOTSUPP where this arena's blocks do not cover whole pages. */
	int (*kv_release)(void *self, uint32_t first, uint32_t n);
	/* A new sequence starts in id `seq` (previous contents of `seq` are discarded). */
	int (*seq_open)(void *self, uint32_t seq);
	void (*seq_close)(void *self, uint32_t seq);
	/* Optional (NULL: no forks). A new sequence starts in `seq` holding positions
	 * [0, start): its rows' blocks hold them, and n_copy of them (< block_tokens, 0: none)
	 * must first be copied from positions [0, n_copy) of block src_block to the same
	 * positions of block dst_block. Returns 0 or a negative code. */
	int (*seq_fork)(void *self, uint32_t seq, uint32_t start, uint32_t dst_block,
			uint32_t src_block, uint32_t n_copy);
	/* Optional (NULL: no speculative decoding). Sequence `seq` keeps only its positions
	 * [0, length) (length <= what it holds): the next row of it starts at `length`, and
	 * batches may carry verify rows (batch.h). Returns 0 or a negative code. */
	int (*seq_rewind)(void *self, uint32_t seq, uint32_t length);
	/* One forward pass and sampling step: out[r] for every row with sample[r] != NULL but
	 * no verify[r] (whose answers go to verify[r][0 ..]).
	 * Returns 0, or a negative code that fails every request in the batch. */
	int (*step)(void *self, const struct bn_batch *batch, struct bn_sample_out *out);
	/* 1: a step of one instance may run on another thread while a step of another instance
	 * (of a backend that also says 1) runs: the instances share nothing a step writes, and
	 * running them at once gains time. The daemon then runs several models' due steps at
	 * once (daemon/models.c). cuda: each instance has its stream, and a small batch leaves
	 * most of the GPU idle. cpu: 0, its models share one thread pool that one step fills. */
	int concurrent_steps;
};

/* What a model backend reports at open for a model kept in F32 KV: name, vocabulary,
 * context, BOS/EOS, kind (enum bn_backend_kind), KV bytes per position, and the attention
 * positions that cost one token's weight matrices, given what one attention multiply-add costs
 * the backend relative to one weight multiply-add (`attn_mac_cost`, measured per backend).
 * Other fields zero. */
void bn_model_describe(const struct bn_model_config *c, uint32_t kind, double attn_mac_cost,
		       struct bn_model_desc *desc);

/* The activation and the ternary packing of a loaded model into desc (after
 * bn_model_describe), logged in one line. */
struct bn_model;
void bn_model_describe_graph(const struct bn_model *m, struct bn_model_desc *desc);
/* The --activation a backend hands the loader (model.h). */
struct bn_activation_choice;
void bn_backend_activation(const struct bn_backend_options *opt, struct bn_activation_choice *out);

/* What embeddings pool by (desc->pooling): --pooling (`flag`, an enum bn_pooling, 0: not
 * given) over the file's <arch>.pooling_type, else the file's; none for a generative model
 * without --pooling, or a backend that cannot give hidden states (desc->embed_off says why).
 * Logged in one line. */
void bn_model_describe_embedding(struct bn_model_desc *desc, uint32_t flag);

/* The KV memory a device-memory backend's default pool may take: its free memory past the
 * headroom, 0 when there is none (or less than block_bytes, one KV block). */
/* The bytes an elastic arena (kv_init_elastic) of blocks of block_tokens may hold besides
 * its blocks' own: one partly used group of mapping granules in each of its arrays (the
 * least common multiple of the granule and a block's rows in one array, in every array). */
uint64_t bn_model_kv_slack(const struct bn_model_desc *desc, uint32_t block_tokens);
uint64_t bn_model_device_kv_room(const struct bn_model_desc *desc, uint64_t block_bytes);

/* The backends this build has. Returns NULL for an unknown or absent name. */
const struct bn_backend_ops *bn_backend_find(const char *name);

extern const struct bn_backend_ops bn_backend_loopback;
extern const struct bn_backend_ops bn_backend_cpu;
#ifdef BN_HAVE_CUDA
extern const struct bn_backend_ops bn_backend_cuda; /* built when nvcc was found */
#endif

#endif /* BITNETD_BACKEND_H */
