/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "backends/backend.h"
#include "backends/cuda_variant.h"
#include "bitnet_client.h"
#include "bitnet_shm.h"
#include "grammars.h"
#include "model/embed.h"
#include "model/model.h"
#include "model/vocab.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BITNETD_VERSION "0.1.0"

static const char usage_text[] =
	"Usage: bitnetd [OPTION]...\n"
	"Serve a BitNet model to local clients over shared memory.\n"
	"\n"
	"  --socket PATH          listening socket (default $BITNETD_SOCKET, else\n"
	"                         " BN_DEFAULT_SOCKET_PATH "); ignored when systemd\n"
	"                         passes a listening socket (socket activation)\n"
	"  --socket-mode OCTAL    permissions of a socket bitnetd creates (default 0660);\n"
	"                         whoever may open it may use the daemon\n"
	"  --backend NAME         loopback (no model; tokens are a documented function of\n"
	"                         the prompt), cpu, or cuda where built (default: loopback\n"
	"                         without --model, else what --device picks)\n"
	"  --model [NAME=]FILE    a GGUF model file for the cpu and cuda backends, served\n"
	"                         as NAME (default: the file's name without .gguf); or\n"
	"                         hf:REPO[:FILE], a file of the Hugging Face Hub (named\n"
	"                         REPO): taken from huggingface_hub's cache ($HF_HUB_CACHE,\n"
	"                         else ~/.cache/huggingface/hub) without asking the Hub,\n"
	"                         pulled into it first when not there ($HF_ENDPOINT,\n"
	"                         $HF_TOKEN; none with $HF_HUB_OFFLINE set); the file as\n"
	"                         `bitnet-model pull` picks it. Repeat it to serve several\n"
	"                         models; the first is the default model (clients that name\n"
	"                         none get it)\n"
	"  --models-config FILE   more models, with options of their own, from a JSON file:\n"
	"                         {\"models\": [{\"name\", \"path\", \"context\", \"kv_memory\",\n"
	"                         \"pinned\", \"keep_alive\", \"speculative\", \"draft_tokens\",\n"
	"                         \"pre_tokenizer\", \"chat_template\"}, ...]} (bitnetd(8))\n"
	"  --models DIR           every *.gguf file of DIR as a model, named by its file\n"
	"  --memory SIZE          bytes all loaded models may hold together, weights, KV and\n"
	"                         compiled grammars (a compile past it is refused)\n"
	"                         (default: on a GPU its free memory less the headroom, on\n"
	"                         the CPU no limit); a model that does not fit waits for idle\n"
	"                         ones to be unloaded, least recently used first\n"
	"  --keep-alive TIME      how long an idle model stays loaded: 30s, 10m, 2h, 0 or\n"
	"                         never (default never)\n"
	"  --device DEV           where the model runs: auto (default: the first GPU when\n"
	"                         this build has CUDA and one is usable, else the CPU),\n"
	"                         cpu, or cuda:N (fails when that GPU cannot be used)\n"
	"  --threads N            cpu: compute threads, the loop's own included\n"
	"                         (default 0: one per online CPU)\n"
	"  --lm-head MODE         cpu: how the LM head is read: screened (default: for a\n"
	"                         greedy token an int8 copy picks the tokens that can win,\n"
	"                         the float head decides among them; the same token, half\n"
	"                         the head's bytes, an int8 copy of the head in memory),\n"
	"                         full (every logit from the float head), or int8 (every\n"
	"                         logit from the int8 copy: faster in batches, but not the\n"
	"                         file's logits; agreement figures in docs/PERFORMANCE.md)\n"
	"  --decode-layout L      cpu: 2bit (default) or base3: a second copy of the ternary\n"
	"                         weights at 1.6 bits each, read by one-row decode steps\n"
	"                         (the same logits, ~1.1x faster there; needs AVX-512 VBMI,\n"
	"                         or dotprod on aarch64, where it pays only if memory is\n"
	"                         scarce per core: docs/PERFORMANCE.md;\n"
	"                         adds 0.8x the 2-bit planes' memory)\n"
	"  --activation NAME      cpu, cuda: the FFN activation, silu, relu2 or gelu (cpu\n"
	"                         only), instead of the file's (default: its\n"
	"                         <arch>.hidden_activation;\n"
	"                         without it llama, bitnet and qwen3 use silu, gemma3 gelu,\n"
	"                         bitnet-25 relu2, and\n"
	"                         bitnet-b1.58 silu for a SentencePiece vocabulary of\n"
	"                         32000-32002 tokens (1bitLLM's models), else relu2;\n"
	"                         bitnet-cli info says which and why)\n"
	"  --pooling NAME         embeddings (op EMBED, /v1/embeddings): how a sequence's\n"
	"                         final hidden states become one vector: mean, cls (the\n"
	"                         first position) or last (the last position; its prompt's\n"
	"                         shared start comes from the prefix cache), then L2-\n"
	"                         normalised (default: the file's <arch>.pooling_type, an\n"
	"                         embedding model's; a generative model without it does not\n"
	"                         embed). An embedding model refuses generation\n"
	"  --cuda-kernels NAME    cuda: the kernel paths: fast (default: graph,fused,gemv,mma;\n"
	"                         the same bits as base, fewer launches and bytes), base (the\n"
	"                         first kernels), all (fast and split, whose attention over\n"
	"                         contexts longer than split=N positions sums in another\n"
	"                         order), or features joined by commas: graph, fused,\n"
	"                         gemv, mma, split[=N] (bitnetd(8) says what each does)\n"
	"  --cache-dir DIR        cpu: where the packed-weight cache lives (default\n"
	"                         $CACHE_DIRECTORY, else $XDG_CACHE_HOME/bitnetd, else\n"
	"                         ~/.cache/bitnetd); none: no cache. The first start writes\n"
	"                         the repacked weights there; later ones map them (a restart\n"
	"                         in a fraction of a second, one copy shared by every daemon\n"
	"                         on the model)\n"
	"  --max-batch N          sequences in one forward step (default 64)\n"
	"  --token-budget N       work one step may do, in tokens at context start (default\n"
	"                         32; a token deep in its context counts for more, by its\n"
	"                         attention): every decoding sequence's token first, then\n"
	"                         prompt chunks (least-served session first, then\n"
	"                         oldest); smaller keeps inter-token\n"
	"                         latency steady while prompts arrive, larger reads prompts\n"
	"                         in fewer steps. Prompts always get a quarter of it\n"
	"  --kv-memory SIZE       KV cache budget in bytes, suffix K, M or G, of all models\n"
	"                         together: lent between the models (fairly under load;\n"
	"                         on a GPU where its driver maps memory in granules)\n"
	"                         (default: every sequence at full context, at most a\n"
	"                         quarter of RAM or, on a GPU, its\n"
	"                         free memory past a tenth of it; with several models,\n"
	"                         at most their share of --memory); a request is admitted\n"
	"                         when all the KV it can need is free\n"
	"  --kv-block-tokens N    positions per KV cache block (default 16)\n"
	"  --prefix-cache MODE    reuse the KV blocks of earlier prompts with the same start:\n"
	"                         uid (default: among sessions of one Unix user), session,\n"
	"                         all (every client; its timing tells one tenant another's\n"
	"                         prompts) or off; outputs are the same bits either way\n"
	"  --speculative MODE     speculative decoding, exact (the same tokens, log-probs and\n"
	"                         seeded samples): drafts from each request's own prompt and\n"
	"                         output, verified in one step. request (default: requests\n"
	"                         that set BN_REQ_SPECULATE), ngram (every generate request)\n"
	"                         or off\n"
	"  --draft-tokens N       drafts a request verifies in one step at most (default 4,\n"
	"                         max 16)\n"
	"  --max-running-per-session N  running sequences of one session (default 0: the\n"
	"                         max batch)\n"
	"  --max-running-per-user N  running sequences of one peer uid over all its\n"
	"                         sessions, of every model (default 0: the max batch)\n"
	"  --max-weight N         cap on the admission weight a session asks for in its\n"
	"                         hello (default 8)\n"
	"  --max-logprobs N       log-probability alternatives a request may ask for per\n"
	"                         token (default 8, max 64)\n"
	"  --batch-window-us N    how long an idle daemon waits for a fuller first batch\n"
	"                         once a request arrives (default 0: start at once)\n"
	"  --slots N              request slots per client session, i.e. requests one\n"
	"                         client may have in flight (default 64, max 4096)\n"
	"  --max-sessions N       client sessions at once, further connections are\n"
	"                         refused with BN_E_BUSY (default 64)\n"
	"  --max-sessions-per-user N  sessions (handshakes included) of one peer uid; its\n"
	"                         further connections get BN_E_BUSY, so one user cannot\n"
	"                         fill the table (default: half of --max-sessions)\n"
	"  --max-handshakes-per-user N  connections of one peer uid that wait for their\n"
	"                         hello; one more pushes out the oldest (default 16)\n"
	"  --handshake-timeout-ms N  a connection that has not sent its whole hello this\n"
	"                         long after it was accepted is closed (default 1000)\n"
	"  --idle-spin-us N       how long the loop keeps polling the rings after the last\n"
	"                         work before it sleeps (default 50); 0 sleeps at once\n"
	"  --pre-tokenizer NAME   how a gpt2 (byte-level BPE) vocabulary splits text:\n"
	"                         " BN_PRE_TOKENIZER_NAMES "\n"
	"                         (default: the file's tokenizer.ggml.pre,\n"
	"                         else llama-bpe for the LLaMA-3 vocabulary, recognised by\n"
	"                         its tokens and merges; other vocabularies without the key\n"
	"                         are served without text until this is given)\n"
	"  --chat-template NAME   " BN_CHAT_TEMPLATE_NAMES "\n"
	"                         (default: recognised from the file's\n"
	"                         tokenizer.chat_template; the BitNet 2B4T converter's\n"
	"                         placeholder becomes bitnet)\n"
	"  --max-grammars N       grammars one session may hold compiled for structured\n"
	"                         output, compiles in progress included (default 64)\n"
	"  --grammar-threads N    threads that compile grammars, beside the loop (default 2)\n"
	"  --grammar-compile-ms N a grammar's compile budget in milliseconds of CPU time on its\n"
	"                         compile thread, whatever the load; one that needs longer is\n"
	"                         refused (default 1000)\n"
	"  --grammar-cache SIZE   compiled grammars kept by content, every model's together,\n"
	"                         least recently used out first; suffix K, M or G (default 64M)\n"
	"  --grammar-memory SIZE  what all compiled grammars may hold together, kept or in use\n"
	"                         by sessions (each model an equal share); a compile past it is\n"
	"                         refused (default 1G)\n"
	"  --log-level LEVEL      error, warn, info or debug (default info)\n"
	"  --vocab-size N         loopback: vocabulary size (default 32000)\n"
	"  --step-delay-us N      loopback: busy time per step, to mimic compute (default 0)\n"
	"  --drain-timeout-ms N   on SIGTERM, how long running requests may finish before\n"
	"                         they end with SHUTDOWN (default 5000)\n"
	"  --help                 this text\n"
	"  --version              version and ABI version\n"
	"\n"
	"Exit status: 0 clean shutdown, 2 bad command line, 3 backend or model failed to\n"
	"load (or a model name found no file), 4 cannot listen on the socket, 5 system\n"
	"resources (io_uring, signalfd, memory) could not be set up.\n"
	"Environment: BITNETD_SOCKET (default socket path); BITNETD_RING_START (first\n"
	"value of every ring counter, for tests of the 2^32 wrap; default 0);\n"
	"HF_HUB_CACHE, HF_HOME, HF_ENDPOINT, HF_TOKEN, HF_TOKEN_PATH, HF_HUB_OFFLINE\n"
	"(--model hf:..., as huggingface_hub reads them).\n"
	"Signals: TERM and INT drain and exit 0; HUP reloads every model whose file\n"
	"changed.\n";

enum long_only {
	OPT_SOCKET = 256, OPT_SOCKET_MODE, OPT_BACKEND, OPT_MODEL, OPT_MAX_BATCH, OPT_WINDOW,
	OPT_SLOTS, OPT_MAX_SESSIONS, OPT_IDLE_SPIN, OPT_LOG_LEVEL, OPT_VOCAB, OPT_STEP_DELAY,
	OPT_DRAIN, OPT_THREADS, OPT_TOKEN_BUDGET, OPT_KV_MEMORY, OPT_KV_BLOCK, OPT_PER_SESSION,
	OPT_PER_USER, OPT_MAX_WEIGHT, OPT_MAX_LOGPROBS, OPT_DEVICE, OPT_SESSIONS_PER_USER,
	OPT_HANDSHAKES_PER_USER, OPT_HANDSHAKE_TIMEOUT, OPT_PRE_TOKENIZER, OPT_CHAT_TEMPLATE,
	OPT_PREFIX_CACHE, OPT_SPECULATIVE, OPT_DRAFT_TOKENS, OPT_LM_HEAD, OPT_DECODE_LAYOUT, OPT_CUDA_KERNELS,
	OPT_CACHE_DIR, OPT_MAX_GRAMMARS, OPT_GRAMMAR_THREADS, OPT_GRAMMAR_COMPILE_MS, OPT_GRAMMAR_CACHE,
	OPT_GRAMMAR_MEMORY, OPT_HELP, OPT_VERSION, OPT_ACTIVATION, OPT_POOLING, OPT_MODELS_CONFIG,
	OPT_MODELS_DIR, OPT_MEMORY, OPT_KEEP_ALIVE,
};

static const struct option long_options[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "socket-mode", required_argument, NULL, OPT_SOCKET_MODE },
	{ "backend", required_argument, NULL, OPT_BACKEND },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "models-config", required_argument, NULL, OPT_MODELS_CONFIG },
	{ "models", required_argument, NULL, OPT_MODELS_DIR },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "keep-alive", required_argument, NULL, OPT_KEEP_ALIVE },
	{ "device", required_argument, NULL, OPT_DEVICE },
	{ "max-batch", required_argument, NULL, OPT_MAX_BATCH },
	{ "batch-window-us", required_argument, NULL, OPT_WINDOW },
	{ "slots", required_argument, NULL, OPT_SLOTS },
	{ "max-sessions", required_argument, NULL, OPT_MAX_SESSIONS },
	{ "max-sessions-per-user", required_argument, NULL, OPT_SESSIONS_PER_USER },
	{ "max-handshakes-per-user", required_argument, NULL, OPT_HANDSHAKES_PER_USER },
	{ "handshake-timeout-ms", required_argument, NULL, OPT_HANDSHAKE_TIMEOUT },
	{ "idle-spin-us", required_argument, NULL, OPT_IDLE_SPIN },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "vocab-size", required_argument, NULL, OPT_VOCAB },
	{ "step-delay-us", required_argument, NULL, OPT_STEP_DELAY },
	{ "drain-timeout-ms", required_argument, NULL, OPT_DRAIN },
	{ "threads", required_argument, NULL, OPT_THREADS },
	{ "token-budget", required_argument, NULL, OPT_TOKEN_BUDGET },
	{ "kv-memory", required_argument, NULL, OPT_KV_MEMORY },
	{ "kv-block-tokens", required_argument, NULL, OPT_KV_BLOCK },
	{ "prefix-cache", required_argument, NULL, OPT_PREFIX_CACHE },
	{ "speculative", required_argument, NULL, OPT_SPECULATIVE },
	{ "draft-tokens", required_argument, NULL, OPT_DRAFT_TOKENS },
	{ "lm-head", required_argument, NULL, OPT_LM_HEAD },
	{ "decode-layout", required_argument, NULL, OPT_DECODE_LAYOUT },
	{ "cuda-kernels", required_argument, NULL, OPT_CUDA_KERNELS },
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "max-running-per-session", required_argument, NULL, OPT_PER_SESSION },
	{ "max-running-per-user", required_argument, NULL, OPT_PER_USER },
	{ "max-weight", required_argument, NULL, OPT_MAX_WEIGHT },
	{ "max-logprobs", required_argument, NULL, OPT_MAX_LOGPROBS },
	{ "pre-tokenizer", required_argument, NULL, OPT_PRE_TOKENIZER },
	{ "chat-template", required_argument, NULL, OPT_CHAT_TEMPLATE },
	{ "activation", required_argument, NULL, OPT_ACTIVATION },
	{ "pooling", required_argument, NULL, OPT_POOLING },
	{ "max-grammars", required_argument, NULL, OPT_MAX_GRAMMARS },
	{ "grammar-threads", required_argument, NULL, OPT_GRAMMAR_THREADS },
	{ "grammar-compile-ms", required_argument, NULL, OPT_GRAMMAR_COMPILE_MS },
	{ "grammar-cache", required_argument, NULL, OPT_GRAMMAR_CACHE },
	{ "grammar-memory", required_argument, NULL, OPT_GRAMMAR_MEMORY },
	{ "help", no_argument, NULL, OPT_HELP },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

/* Parses an unsigned number in [lo, hi] in the given base; prints the error itself. */
static int parse_u32(const char *flag, const char *text, uint32_t lo, uint32_t hi, int base,
		     uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(text, &end, base);
	if (errno || end == text || *end || text[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "bitnetd: --%s: '%s' is not a number in [%u, %u]\n", flag, text, lo,
			hi);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* auto, cpu, cuda (= cuda:0) or cuda:N. */
static int parse_prefix_cache(const char *text, struct bn_config *cfg)
{
	static const char *const names[] = { [BN_SHARE_OFF] = "off", [BN_SHARE_ALL] = "all",
					     [BN_SHARE_UID] = "uid", [BN_SHARE_SESSION] = "session" };
	for (uint32_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(text, names[i]) == 0) {
			cfg->prefix_cache = i;
			return 0;
		}
	fprintf(stderr, "bitnetd: --prefix-cache: '%s' is not one of uid, session, all, off\n", text);
	return -1;
}

static int parse_speculative(const char *text, struct bn_config *cfg)
{
	for (uint32_t i = 0; i < BN_SPECULATIVE_MODES; i++)
		if (strcmp(text, bn_speculative_names[i]) == 0) {
			cfg->speculative = i;
			return 0;
		}
	fprintf(stderr, "bitnetd: --speculative: '%s' is not one of request, ngram, off\n", text);
	return -1;
}

static int parse_decode_layout(const char *text, struct bn_config *cfg)
{
	if (strcmp(text, "2bit") == 0 || strcmp(text, "base3") == 0) {
		cfg->base3_decode = text[0] == 'b';
		return 0;
	}
	fprintf(stderr, "bitnetd: --decode-layout: '%s' is not one of 2bit, base3\n", text);
	return -1;
}

static int parse_cuda_kernels(const char *text, struct bn_config *cfg)
{
	struct bn_cuda_kernels k;
	if (bn_cuda_kernels_parse(text, &k) == 0) {
		cfg->cuda_kernels = text;
		return 0;
	}
	fprintf(stderr, "bitnetd: --cuda-kernels: '%s' is not base, fast, all, or graph, fused, gemv, mma, split[=N] (N a power of two, 16 to 65536) joined by commas\n",
		text);
	return -1;
}

static int parse_lm_head(const char *text, struct bn_config *cfg)
{
	static const struct {
		const char *name;
		enum bn_lm_head_mode mode;
	} modes[] = { { "screened", BN_LM_HEAD_MODE_SCREENED }, { "full", BN_LM_HEAD_MODE_FULL },
		      { "int8", BN_LM_HEAD_MODE_INT8 } };
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (strcmp(text, modes[i].name) == 0) {
			cfg->lm_head_mode = modes[i].mode;
			return 0;
		}
	fprintf(stderr, "bitnetd: --lm-head: '%s' is not one of screened, full, int8\n", text);
	return -1;
}

static int parse_device(const char *text, struct bn_config *cfg)
{
	cfg->device_set = 1;
	cfg->device_index = 0;
	if (strcmp(text, "auto") == 0) {
		cfg->device = BN_DEVICE_AUTO;
		return 0;
	}
	if (strcmp(text, "cpu") == 0) {
		cfg->device = BN_DEVICE_CPU;
		return 0;
	}
	cfg->device = BN_DEVICE_CUDA;
	if (strcmp(text, "cuda") == 0)
		return 0;
	uint32_t n;
	if (strncmp(text, "cuda:", 5) == 0 && parse_u32("device", text + 5, 0, 1023, 10, &n) == 0) {
		cfg->device_index = (int)n;
		return 0;
	}
	fprintf(stderr, "bitnetd: --device: '%s' is not auto, cpu or cuda:N\n", text);
	return -1;
}

/* --backend and --device together: the backend to open ("auto" lets main try the GPU). */
static int resolve_backend(struct bn_config *cfg)
{
	static const char *const by_device[] = { "auto", "cpu", "cuda" };
	if (!cfg->backend) {
		cfg->backend = cfg->model_path || cfg->device_set ? by_device[cfg->device] : "loopback";
		return 0;
	}
	if (!cfg->device_set)
		return 0; /* --backend alone: cuda means cuda:0 */
	if (cfg->device != BN_DEVICE_AUTO && strcmp(cfg->backend, by_device[cfg->device]) == 0)
		return 0;
	fprintf(stderr, "bitnetd: --backend %s contradicts --device (give one of them)\n", cfg->backend);
	return -1;
}

static void set_defaults(struct bn_config *cfg)
{
	const char *env = getenv(BN_SOCKET_ENV);
	const char *ring_start = getenv("BITNETD_RING_START");
	*cfg = (struct bn_config){
		.socket_path = env && *env ? env : BN_DEFAULT_SOCKET_PATH,
		.backend = NULL, /* resolve_backend */
		.device = BN_DEVICE_AUTO,
		.max_batch = 64,
		.token_budget = 32,
		.kv_block_tokens = 16,
		.prefix_cache = BN_SHARE_UID,
		.speculative = BN_SPECULATIVE_REQUEST,
		.draft_tokens = 4,
		.max_weight = 8,
		.max_logprobs = 8,
		.slots = 64,
		.max_sessions = 64,
		.max_handshakes_per_user = 16,
		.handshake_timeout_ms = 1000,
		.idle_spin_us = 50,
		.vocab_size = 32000,
		.drain_timeout_ms = 5000,
		.max_grammars = 64,
		.grammar_threads = 2,
		.grammar_compile_ms = 1000,
		.grammar_cache = 64ull << 20,
		.grammar_memory = 1ull << 30,
		.socket_mode = 0660,
		.keep_alive_ms = -1,
		.log_level = BN_LOG_INFO,
		.ring_start = ring_start ? (uint32_t)strtoul(ring_start, NULL, 0) : 0,
	};
}

static int apply_option(struct bn_config *cfg, int opt, const char *arg)
{
	switch (opt) {
	case OPT_SOCKET: cfg->socket_path = arg; return 0;
	case OPT_SOCKET_MODE: return parse_u32("socket-mode", arg, 0, 0777, 8, &cfg->socket_mode);
	case OPT_BACKEND: cfg->backend = arg; return 0;
	case OPT_MODEL: {
		const char **args = realloc(cfg->model_args, (cfg->n_model_args + 1) * sizeof(*args));
		if (!args)
			return -1;
		cfg->model_args = args;
		args[cfg->n_model_args++] = arg;
		return 0;
	}
	case OPT_MODELS_CONFIG: cfg->models_config = arg; return 0;
	case OPT_MODELS_DIR: cfg->models_dir = arg; return 0;
	case OPT_MEMORY: return bn_parse_size("--memory", arg, &cfg->memory);
	case OPT_KEEP_ALIVE: return bn_parse_duration_ms("--keep-alive", arg, &cfg->keep_alive_ms);
	case OPT_CACHE_DIR:
		if (!*arg) {
			fprintf(stderr, "bitnetd: --cache-dir: give a directory, or none\n");
			return -1;
		}
		cfg->cache_dir = arg;
		return 0;
	case OPT_DEVICE: return parse_device(arg, cfg);
	case OPT_THREADS: return parse_u32("threads", arg, 0, 1024, 10, &cfg->threads);
	case OPT_MAX_BATCH: return parse_u32("max-batch", arg, 1, 65536, 10, &cfg->max_batch);
	case OPT_TOKEN_BUDGET:
		return parse_u32("token-budget", arg, 1, 1u << 20, 10, &cfg->token_budget);
	case OPT_KV_MEMORY: return bn_parse_size("--kv-memory", arg, &cfg->kv_memory);
	case OPT_KV_BLOCK: return parse_u32("kv-block-tokens", arg, 1, 4096, 10, &cfg->kv_block_tokens);
	case OPT_PREFIX_CACHE: return parse_prefix_cache(arg, cfg);
	case OPT_SPECULATIVE: return parse_speculative(arg, cfg);
	case OPT_DRAFT_TOKENS:
		return parse_u32("draft-tokens", arg, 1, BN_DRAFT_MAX_TOKENS, 10, &cfg->draft_tokens);
	case OPT_LM_HEAD: return parse_lm_head(arg, cfg);
	case OPT_DECODE_LAYOUT: return parse_decode_layout(arg, cfg);
	case OPT_CUDA_KERNELS: return parse_cuda_kernels(arg, cfg);
	case OPT_PER_SESSION:
		return parse_u32("max-running-per-session", arg, 0, 65536, 10,
				 &cfg->max_running_per_session);
	case OPT_PER_USER:
		return parse_u32("max-running-per-user", arg, 0, 65536, 10, &cfg->max_running_per_user);
	case OPT_MAX_WEIGHT: return parse_u32("max-weight", arg, 1, 1024, 10, &cfg->max_weight);
	case OPT_MAX_LOGPROBS: return parse_u32("max-logprobs", arg, 0, 64, 10, &cfg->max_logprobs);
	case OPT_WINDOW:
		return parse_u32("batch-window-us", arg, 0, 10000000, 10, &cfg->batch_window_us);
	case OPT_SLOTS: return parse_u32("slots", arg, 1, 4096, 10, &cfg->slots);
	case OPT_MAX_SESSIONS: return parse_u32("max-sessions", arg, 1, 65536, 10, &cfg->max_sessions);
	case OPT_SESSIONS_PER_USER:
		return parse_u32("max-sessions-per-user", arg, 1, 65536, 10,
				 &cfg->max_sessions_per_user);
	case OPT_HANDSHAKES_PER_USER:
		return parse_u32("max-handshakes-per-user", arg, 1, 65536, 10,
				 &cfg->max_handshakes_per_user);
	case OPT_HANDSHAKE_TIMEOUT:
		return parse_u32("handshake-timeout-ms", arg, 10, 60000, 10,
				 &cfg->handshake_timeout_ms);
	case OPT_IDLE_SPIN: return parse_u32("idle-spin-us", arg, 0, 10000000, 10, &cfg->idle_spin_us);
	case OPT_VOCAB: return parse_u32("vocab-size", arg, 3, 1u << 24, 10, &cfg->vocab_size);
	case OPT_STEP_DELAY: return parse_u32("step-delay-us", arg, 0, 10000000, 10, &cfg->step_delay_us);
	case OPT_DRAIN: return parse_u32("drain-timeout-ms", arg, 0, 3600000, 10, &cfg->drain_timeout_ms);
	case OPT_MAX_GRAMMARS: return parse_u32("max-grammars", arg, 1, 65536, 10, &cfg->max_grammars);
	case OPT_GRAMMAR_THREADS:
		return parse_u32("grammar-threads", arg, 1, BN_GRAMMAR_MAX_THREADS, 10,
				 &cfg->grammar_threads);
	case OPT_GRAMMAR_COMPILE_MS:
		return parse_u32("grammar-compile-ms", arg, 10, 600000, 10, &cfg->grammar_compile_ms);
	case OPT_GRAMMAR_CACHE: return bn_parse_size("--grammar-cache", arg, &cfg->grammar_cache);
	case OPT_GRAMMAR_MEMORY: return bn_parse_size("--grammar-memory", arg, &cfg->grammar_memory);
	case OPT_PRE_TOKENIZER:
		cfg->pre_tokenizer = arg;
		if (bn_pre_tokenizer_from_name(arg) > 0)
			return 0;
		fprintf(stderr, "bitnetd: --pre-tokenizer: '%s' is not one of " BN_PRE_TOKENIZER_NAMES
				"\n", arg);
		return -1;
	case OPT_CHAT_TEMPLATE:
		cfg->chat_template = arg;
		if (bn_chat_template_from_name(arg) > 0)
			return 0;
		fprintf(stderr, "bitnetd: --chat-template: '%s' is not one of " BN_CHAT_TEMPLATE_NAMES
				"\n", arg);
		return -1;
	case OPT_ACTIVATION: {
		enum bn_activation a;
		if (bn_activation_from_name(arg, &a) == 0 && strcmp(arg, "relu_squared") != 0) {
			cfg->activation = a == BN_ACT_RELU2   ? BN_ACTIVATION_RELU2
					  : a == BN_ACT_GELU ? BN_ACTIVATION_GELU
							     : BN_ACTIVATION_SILU;
			return 0;
		}
		fprintf(stderr, "bitnetd: --activation: '%s' is not silu, relu2 or gelu\n", arg);
		return -1;
	}
	case OPT_POOLING: {
		int p = bn_pooling_from_name(arg);
		if (p > 0) {
			cfg->pooling = (uint32_t)p;
			return 0;
		}
		fprintf(stderr, "bitnetd: --pooling: '%s' is not mean, cls or last\n", arg);
		return -1;
	}
	case OPT_LOG_LEVEL:
		if (bn_log_parse_level(arg, &cfg->log_level) == 0)
			return 0;
		fprintf(stderr, "bitnetd: --log-level: '%s' is not error, warn, info or debug\n", arg);
		return -1;
	default:
		return -1;
	}
}

int bn_config_parse(struct bn_config *cfg, int argc, char **argv)
{
	set_defaults(cfg);
	optind = 1;
	int opt;
	while ((opt = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
		if (opt == OPT_HELP) {
			fputs(usage_text, stdout);
			bn_config_free(cfg);
			return 1;
		}
		if (opt == OPT_VERSION) {
			printf("bitnetd %s (ABI %u)\n", BITNETD_VERSION, BN_ABI_VERSION);
			bn_config_free(cfg);
			return 1;
		}
		if (opt == '?' || apply_option(cfg, opt, optarg) < 0) {
			fprintf(stderr, "Try 'bitnetd --help'.\n");
			bn_config_free(cfg);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "bitnetd: unexpected argument '%s'\nTry 'bitnetd --help'.\n",
			argv[optind]);
		bn_config_free(cfg);
		return -1;
	}
	if (bn_models_config_build(cfg) < 0) {
		fprintf(stderr, "Try 'bitnetd --help'.\n");
		bn_config_free(cfg);
		return -1;
	}
	/* A fair share by default: one user never holds more than half the table, so another
	 * always finds room. */
	if (!cfg->max_sessions_per_user)
		cfg->max_sessions_per_user = cfg->max_sessions > 1 ? cfg->max_sessions / 2 : 1;
	if (resolve_backend(cfg) < 0) {
		fprintf(stderr, "Try 'bitnetd --help'.\n");
		bn_config_free(cfg);
		return -1;
	}
	return 0;
}
