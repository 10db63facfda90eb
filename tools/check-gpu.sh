#!/usr/bin/env bash
# check-gpu.sh — the GPU run in one command, sized for one short GPU lease (under 6 minutes on
# an H100): the CUDA suites (the kernels and the backend, tests/test_cuda.c; every request kind,
# tests/test_cuda_ops.c), a cuda daemon's greedy ids against a cpu daemon's, bench_cuda on the
# 2B4T-shape model and the serving benchmark against a cuda daemon, each part under its own
# time limit, everything written to one log.
#
# Usage, from the project's root, after a build with nvcc (`make check-gpu` builds and runs it);
# or on a GPU machine without the build's dependencies, after packing here with
# `GPU_PACK_TARGETS="build/bench/bench_cuda build/bench/bench_serve" ../shared/tools/gpu-pack.sh`
# and sourcing `. .gpu/env.sh` there:
#   tools/check-gpu.sh [LOG]            (default LOG: gpu-check.log; `make check-gpu` runs it)
# Environment: BUILD (default build), BITNET_TEST_MODELS (stories260K.gguf; default
# ../shared/models), CHECK_GPU_BACKEND (default cuda; cpu runs the daemon parts on the cpu
# backend, which is how this script is tried on a machine without a GPU), CHECK_GPU_MODEL (the
# 2B4T-shape file; made with bitnet-model when missing).
# Exit: 0 when every part passed, 77 when there is no usable GPU (nothing else is run), else 1.
set -u
log=${1:-gpu-check.log}
build=${BUILD:-build}
models=${BITNET_TEST_MODELS:-../shared/models}
backend=${CHECK_GPU_BACKEND:-cuda}
model=${CHECK_GPU_MODEL:-$build/models/2b4t-i2_s.gguf}
work=$(mktemp -d /tmp/check-gpu-XXXXXX)
failed=0
exec > >(tee "$log") 2>&1

cleanup() {
	pkill -f -- "--socket $work/" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

# part NAME LIMIT_S COMMAND...: runs it (a program or one of the functions below) under its
# limit, logs its time and status.
part() {
	local name=$1 limit=$2 t0 rc
	shift 2
	echo "== $name (limit ${limit} s)"
	t0=$(date +%s%N)
	timeout -k 5 "$limit" bash -c '"$@"' part "$@"
	rc=$?
	echo "== $name: rc=$rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
	[ "$rc" = 0 ] || failed=1
	return "$rc"
}

# daemon NAME BACKEND MODEL: a daemon on $work/NAME.sock; waits until it answers.
daemon() {
	"$build/bitnetd" --backend "$2" --model "$3" --socket "$work/$1.sock" --log-level warn \
		--cache-dir none &
	for _ in $(seq 1 300); do
		"$build/bitnet-cli" --socket "$work/$1.sock" info >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "the $2 daemon on $3 did not answer"
	return 1
}

# The same greedy request (200 tokens from BOS) on a cpu daemon and a $backend daemon.
greedy_ids() {
	local stories=$models/stories260K.gguf cpu gpu
	[ -f "$stories" ] || { echo "no $stories (set BITNET_TEST_MODELS)"; return 1; }
	daemon ref cpu "$stories" && daemon dut "$backend" "$stories" || return 1
	cpu=$("$build/bitnet-cli" --socket "$work/ref.sock" generate --ids 1 --max-tokens 200 --ignore-eos 2>/dev/null)
	gpu=$("$build/bitnet-cli" --socket "$work/dut.sock" generate --ids 1 --max-tokens 200 --ignore-eos 2>/dev/null)
	"$build/bitnet-cli" --socket "$work/dut.sock" info | grep -E '^(backend|lm_head|speculative)='
	[ -n "$cpu" ] && [ "$cpu" = "$gpu" ] && { echo "200 greedy ids equal ($backend vs cpu)"; return 0; }
	printf 'greedy ids differ\ncpu: %s\n%s: %s\n' "$cpu" "$backend" "$gpu"
	return 1
}

bench_model_file() {
	[ -f "$model" ] && return 0
	mkdir -p "$(dirname "$model")"
	"$build/bitnet-model" write --preset 2b4t --type i2_s --out "$model"
}

export build models backend model work BITNETD=$build/bitnetd
export -f daemon greedy_ids bench_model_file
echo "check-gpu: $(date -u +%FT%TZ) backend=$backend build=$build log=$log"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [ "$backend" = cuda ]; then
	echo "== GPU suite (limit 150 s)"
	BITNET_TEST_MODELS=$models timeout -k 5 150 "$build/tests/test_cuda"
	rc=$?
	echo "== GPU suite: rc=$rc"
	if [ "$rc" = 77 ]; then
		echo "check-gpu: SKIP: no usable GPU; nothing else run"
		exit 77
	fi
	[ "$rc" = 0 ] || failed=1
	part "request kinds on the GPU (test_cuda_ops)" 150 env BITNET_TEST_MODELS="$models" \
		BITNET_MODEL_TOOL="$build/bitnet-model" BITNET_CLI="$build/bitnet-cli" \
		BITNET_DEFAULT_MODEL="$build/models/tiny.gguf" "$build/tests/test_cuda_ops"
	part "model file" 90 bench_model_file
	part "bench_cuda" 120 "$build/bench/bench_cuda" --model "$model"
else
	part "model file" 90 bench_model_file
fi
part "greedy ids, $backend vs cpu" 60 greedy_ids
part "bench-serve --backend $backend --quick --only sweep" 90 \
	"$build/bench/bench_serve" --backend "$backend" --model "$model" --quick --only sweep
echo "check-gpu: $([ $failed = 0 ] && echo PASS || echo FAIL); log in $log"
exit $failed
