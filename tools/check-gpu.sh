#!/usr/bin/env bash
# check-gpu.sh — the GPU run in one command, sized for one short GPU lease: the CUDA suites
# (the kernels and the backend, tests/test_cuda.c; the --cuda-kernels variants against the
# first kernels, tests/test_cuda_fast.c, and through every request kind,
# tests/test_cuda_fast_ops.c; every request kind on base, tests/test_cuda_ops.c), cuda daemons'
# greedy ids (the default kernels and CHECK_GPU_KERNELS) against a cpu daemon's, bench_cuda on
# the 2B4T-shape model (base, fast and all side by side in one process: issue 49's figures),
# the serving benchmark against a cuda daemon, two models on one device (test_models' cuda
# case with the real daemon: their steps at once, each model's tokens as alone, their KV lent
# through elastic arenas) and
# bench_models (one daemon of two 2B4T-shape models against two daemons: issue 60's figure),
# each part under its own time limit, everything
# written to one log. The limits are also cut to what is left of one budget (CHECK_GPU_BUDGET,
# default 560 s), so that the whole script fits a 10-minute command however the parts go.
#
# Usage, from the project's root, after a build with nvcc (`make check-gpu` builds and runs it);
# or on a GPU machine without the build's dependencies, after packing here with
# `GPU_PACK_TARGETS="build/bench/bench_cuda build/bench/bench_serve build/bench/bench_models" ../shared/tools/gpu-pack.sh`
# and sourcing `. .gpu/env.sh` there:
#   tools/check-gpu.sh [LOG]            (default LOG: gpu-check.log; `make check-gpu` runs it)
# Environment: BUILD (default build), BITNET_TEST_MODELS (stories260K.gguf; default
# ../shared/models), CHECK_GPU_BACKEND (default cuda; cpu runs the daemon parts on the cpu
# backend, which is how this script is tried on a machine without a GPU), CHECK_GPU_MODEL (the
# 2B4T-shape file; made with bitnet-model when missing), CHECK_GPU_KERNELS (default base: the
# --cuda-kernels variant whose greedy ids are compared beside the default's, fast), CHECK_GPU_VARIANTS (bench_cuda's,
# default base:fast:all), CHECK_GPU_BUDGET (seconds for the whole run, default 560).
# Exit: 0 when every part passed, 77 when there is no usable GPU (nothing else is run), else 1.
set -u
log=${1:-gpu-check.log}
build=${BUILD:-build}
models=${BITNET_TEST_MODELS:-../shared/models}
backend=${CHECK_GPU_BACKEND:-cuda}
model=${CHECK_GPU_MODEL:-$build/models/2b4t-i2_s.gguf}
kernels=${CHECK_GPU_KERNELS:-base}
variants=${CHECK_GPU_VARIANTS:-base:fast:all}
budget=${CHECK_GPU_BUDGET:-560}
work=$(mktemp -d /tmp/check-gpu-XXXXXX)
failed=0
exec > >(tee "$log") 2>&1

cleanup() {
	pkill -f -- "--socket $work/" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# part NAME LIMIT_S COMMAND...: runs it (a program or one of the functions below) under its
# limit, or under what is left of the budget when that is less (the 5 s after timeout's TERM
# counted too), logs its time and status. A part with under 10 s left is not run: it fails.
part() {
	local name=$1 limit=$2 left=$((budget - SECONDS - 5)) t0 rc
	shift 2
	if [ "$left" -lt 10 ]; then
		echo "== $name: not run, the ${budget} s budget is spent"
		failed=1
		return 1
	fi
	[ "$limit" -gt "$left" ] && limit=$left
	echo "== $name (limit ${limit} s)"
	t0=$(date +%s%N)
	timeout -k 5 "$limit" bash -c '"$@"' part "$@"
	rc=$?
	echo "== $name: rc=$rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
	[ "$rc" = 0 ] || failed=1
	return "$rc"
}

# daemon NAME BACKEND MODEL [OPTION...]: a daemon on $work/NAME.sock; waits until it answers.
daemon() {
	local name=$1 be=$2 file=$3
	shift 3
	"$build/bitnetd" --backend "$be" --model "$file" --socket "$work/$name.sock" --log-level warn \
		--cache-dir none "$@" &
	for _ in $(seq 1 300); do
		"$build/bitnet-cli" --socket "$work/$name.sock" info >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "the $be daemon on $file did not answer"
	return 1
}

# The same greedy request (200 tokens from BOS) on a cpu daemon and $backend daemons (the
# default kernels, and with cuda --cuda-kernels $kernels too).
greedy_ids() {
	local stories=$models/stories260K.gguf cpu gpu dut failed=0
	[ -f "$stories" ] || { echo "no $stories (set BITNET_TEST_MODELS)"; return 1; }
	daemon ref cpu "$stories" && daemon dut "$backend" "$stories" || return 1
	if [ "$backend" = cuda ]; then
		daemon dut2 cuda "$stories" --cuda-kernels "$kernels" || return 1
	fi
	cpu=$("$build/bitnet-cli" --socket "$work/ref.sock" generate --ids 1 --max-tokens 200 --ignore-eos 2>/dev/null)
	for dut in dut dut2; do
		[ -S "$work/$dut.sock" ] || continue
		gpu=$("$build/bitnet-cli" --socket "$work/$dut.sock" generate --ids 1 --max-tokens 200 --ignore-eos 2>/dev/null)
		"$build/bitnet-cli" --socket "$work/$dut.sock" info | grep -E '^(backend|lm_head|speculative|cuda_kernels)='
		if [ -n "$cpu" ] && [ "$cpu" = "$gpu" ]; then
			echo "200 greedy ids equal ($backend $dut vs cpu)"
		else
			printf 'greedy ids differ\ncpu: %s\n%s %s: %s\n' "$cpu" "$backend" "$dut" "$gpu"
			failed=1
		fi
	done
	return $failed
}

bench_model_file() {
	[ -f "$model" ] && return 0
	mkdir -p "$(dirname "$model")"
	"$build/bitnet-model" write --preset 2b4t --type i2_s --out "$model"
}

# bench_models: the bench file and one of other weights (--seed 2), one round.
bench_two_models() {
	local b=$work/2b4t-b-i2_s.gguf
	"$build/bitnet-model" write --preset 2b4t --type i2_s --seed 2 --out "$b" >/dev/null || return 1
	"$build/bench/bench_models" --model-a "$model" --model-b "$b" --rounds 1
}

export build models backend model kernels work BITNETD=$build/bitnetd
export -f daemon greedy_ids bench_model_file bench_two_models
echo "check-gpu: $(date -u +%FT%TZ) backend=$backend build=$build log=$log"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "$backend" = cuda ]; then
	# the tests' daemons: $BITNETD (exported below) on the tiny preset of this build
	tests_env=(env BITNET_TEST_MODELS="$models" BITNET_DEFAULT_MODEL="$build/models/tiny.gguf"
		BITNET_MODEL_TOOL="$build/bitnet-model" BITNET_CLI="$build/bitnet-cli")
	part "GPU suite" 120 "${tests_env[@]}" "$build/tests/test_cuda"
	if [ $? = 77 ]; then
		echo "check-gpu: SKIP: no usable GPU; nothing else run"
		exit 77
	fi
	part "GPU suite, --cuda-kernels variants" 90 "${tests_env[@]}" "$build/tests/test_cuda_fast"
	part "GPU suite, the variants' request kinds" 60 "${tests_env[@]}" "$build/tests/test_cuda_fast_ops"
	part "request kinds on the GPU (test_cuda_ops)" 150 "${tests_env[@]}" "$build/tests/test_cuda_ops"
	part "model file" 90 bench_model_file
	part "bench_cuda, variants $variants side by side" 150 "$build/bench/bench_cuda" --model "$model" \
		--variants "$variants"
else
	part "model file" 90 bench_model_file
fi
part "greedy ids, $backend vs cpu" 45 greedy_ids
part "bench-serve --backend $backend --quick --only sweep" 90 \
	"$build/bench/bench_serve" --backend "$backend" --model "$model" --quick --only sweep
if [ "$backend" = cuda ]; then
	# BN_CUDA_HOST_VMM_GRANULARITY: the H100's and H200's mapping granule, from which the
	# lending case counts what an elastic KV arena may hold past its blocks
	part "two models on one device: steps at once, KV lent (test_models' cuda case, the real daemon)" 90 \
		"${tests_env[@]}" BITNETD="$build/bitnetd" BITNETD_CUDA_HOST="$build/bitnetd" \
		BN_CUDA_HOST_VMM_GRANULARITY=2097152 CK_RUN_CASE=cuda_host "$build/tests/test_models"
	part "bench_models: one daemon of two models vs two daemons, one round" 90 bench_two_models
fi
echo "check-gpu: $([ $failed = 0 ] && echo PASS || echo FAIL); log in $log"
exit $failed
