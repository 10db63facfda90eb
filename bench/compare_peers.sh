#!/bin/sh
# compare_peers.sh — bitnetd beside llama.cpp and bitnet.cpp on this machine, in one sitting.
#
# Builds nothing from outside: a peer runs only if its binaries are installed and named by an
# environment variable. bitnetd's own kernel variants always run, side by side: every variant
# this CPU can run (BITNET_KERNELS=avx2, avxvnni, avx512vnni on x86-64; neon, dotprod, i8mm on
# aarch64), so the AVX2 path is measured on every machine, AVX-512 ones included, and the NEON
# and sdot paths on an i8mm one.
#
# The figures, each over THREADS threads (default: the online CPUs):
#   decode_b1_tps      batch-1 decode, tokens/s
#   decode_b16_tps     16 sequences decoding together, tokens/s in all
#   prefill_256_tps    one 256-token prompt, tokens/s
# bitnetd: bench-model on MODEL (decode_tps_b1 with the file's F16 head and the default
# screened head, decode_tps_b16, prefill_tps_t256), with the machine's read bandwidth and int8
# peak beside them. Peers:
#   LLAMA_BENCH=path/to/llama-bench LLAMA_MODEL=model-tq2_0.gguf        llama.cpp (TQ2_0)
#   LLAMA_BATCHED=path/to/llama-batched-bench                            its batch 16
#   BITNETCPP_BENCH=path/to/llama-bench BITNETCPP_MODEL=ggml-model-i2_s.gguf   bitnet.cpp
#   BITNETCPP_BATCHED=path/to/llama-batched-bench
# (llama-bench -p 256 -n 64 gives pp256 and tg64; llama-batched-bench -npp 128 -ntg 64
# -npl 16 gives the batch-16 generation rate S_TG.) MODEL defaults to the 2B4T-shape file
# make bench-model makes; `bitnet-model write --preset 2b4t --type tq2_0` writes the same
# shape for llama.cpp. Output: key=value lines, then a table. ROUNDS (default 2) repeats
# everything, alternating the programs, and the table shows each figure's range.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-$BUILD/models/2b4t-i2_s.gguf}
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-2}
OUT=$(mktemp -d /tmp/compare-peers.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
[ -f "$MODEL" ] || { echo "compare_peers: no $MODEL (make bench-model makes it, or set MODEL)" >&2; exit 2; }
[ -x "$BUILD/bench-model" ] || { echo "compare_peers: no $BUILD/bench-model (make $BUILD/bench-model)" >&2; exit 2; }

# key=value lines from stdin, prefixed, appended to $OUT/all
record() { sed -n "s/^\([a-z0-9_]*\)=\([0-9.]*\)$/$1_\1=\2/p" >> "$OUT/all"; }

bitnetd_variant() { # $1: variant name; skipped when this CPU cannot run it
	log="$OUT/bitnetd-$1.log"
	if ! BITNET_KERNELS=$1 "$BUILD/bench-model" --model "$MODEL" --threads "$THREADS" --quick > "$log" 2>&1; then
		if grep -q 'cannot run' "$log"; then echo "SKIP: bitnetd $1: this CPU cannot run it"; return 0; fi
		echo "compare_peers: bench-model with BITNET_KERNELS=$1 failed:" >&2; tail -5 "$log" >&2; exit 1
	fi
	grep -E '^(mem_bw_gbs|int8_peak_gmacs|decode_tps_b1|decode_tps_b16|decode_tps_b1_screened|prefill_tps_t256)=' "$log" |
		sed -e 's/^decode_tps_b1=/decode_b1_tps=/' -e 's/^decode_tps_b1_screened=/decode_b1_screened_tps=/' \
		    -e 's/^decode_tps_b16=/decode_b16_tps=/' -e 's/^prefill_tps_t256=/prefill_256_tps=/' | record "bitnetd_$1"
}

# llama-bench's markdown table: the t/s column of the pp256 and tg64 rows.
peer_bench() { # $1: name, $2: llama-bench, $3: model
	log="$OUT/$1.log"
	"$2" -m "$3" -t "$THREADS" -p 256 -n 64 -r 3 > "$log" 2>&1 || { echo "compare_peers: $1 failed:" >&2; tail -5 "$log" >&2; exit 1; }
	awk -F'|' '/pp256/ { split($(NF-1), a, "±"); gsub(/ /, "", a[1]); print "prefill_256_tps=" a[1] }
		   /tg64/  { split($(NF-1), a, "±"); gsub(/ /, "", a[1]); print "decode_b1_tps=" a[1] }' "$log" | record "$1"
}

peer_batched() { # $1: name, $2: llama-batched-bench, $3: model
	log="$OUT/$1-batched.log"
	"$2" -m "$3" -t "$THREADS" -npp 128 -ntg 64 -npl 16 -c 4096 > "$log" 2>&1 || { echo "compare_peers: $1 batched failed:" >&2; tail -5 "$log" >&2; exit 1; }
	# the row of B = 16: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
	awk -F'|' '$4 + 0 == 16 { gsub(/ /, "", $9); print "decode_b16_tps=" $9 }' "$log" | record "$1"
}

if [ "$(uname -m)" = aarch64 ]; then
	VARIANTS="neon dotprod i8mm"
	echo "machine=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1) threads=$THREADS"
	echo "cpu_flags=$(grep -m1 -o -w -e asimd -e asimddp -e i8mm -e sve -e sve2 /proc/cpuinfo | sort -u | tr '\n' ' ')"
else
	VARIANTS="avx2 avxvnni avx512vnni"
	echo "machine=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') threads=$THREADS"
	echo "cpu_flags=$(grep -m1 -o -w -e avx2 -e avx_vnni -e avx512_vnni -e avx512_vbmi -e amx_int8 /proc/cpuinfo | sort -u | tr '\n' ' ')"
fi
for r in $(seq "$ROUNDS"); do
	for v in $VARIANTS; do bitnetd_variant "$v"; done
	if [ -n "${LLAMA_BENCH:-}" ]; then peer_bench llama_cpp "$LLAMA_BENCH" "${LLAMA_MODEL:?LLAMA_MODEL: the TQ2_0 file}"
	elif [ "$r" = 1 ]; then echo "SKIP: llama.cpp (set LLAMA_BENCH and LLAMA_MODEL)"; fi
	if [ -n "${LLAMA_BATCHED:-}" ]; then peer_batched llama_cpp "$LLAMA_BATCHED" "${LLAMA_MODEL:?}"; fi
	if [ -n "${BITNETCPP_BENCH:-}" ]; then peer_bench bitnet_cpp "$BITNETCPP_BENCH" "${BITNETCPP_MODEL:?BITNETCPP_MODEL: the I2_S file}"
	elif [ "$r" = 1 ]; then echo "SKIP: bitnet.cpp (set BITNETCPP_BENCH and BITNETCPP_MODEL)"; fi
	if [ -n "${BITNETCPP_BATCHED:-}" ]; then peer_batched bitnet_cpp "$BITNETCPP_BATCHED" "${BITNETCPP_MODEL:?}"; fi
done

# key=value: each figure's median over the rounds; then the table with the ranges
python3 - "$OUT/all" <<'PY'
import collections, statistics, sys
vals = collections.defaultdict(list)
for line in open(sys.argv[1]):
    k, v = line.strip().split("=")
    vals[k].append(float(v))
for k in sorted(vals):
    print(f"{k}={statistics.median(vals[k]):.2f}")
figs = [("decode_b1_tps", "decode batch 1, tok/s"), ("decode_b1_screened_tps", "  (bitnetd's default screened head)"),
        ("decode_b16_tps", "decode batch 16, tok/s in all"), ("prefill_256_tps", "prefill 256, tok/s")]
progs = [p for p in ("llama_cpp", "bitnet_cpp", "bitnetd_avx2", "bitnetd_avxvnni", "bitnetd_avx512vnni",
                     "bitnetd_neon", "bitnetd_dotprod", "bitnetd_i8mm")
         if any(k.startswith(p + "_") for k in vals)]
def cell(p, f):
    v = vals.get(f"{p}_{f}")
    if not v: return "-"
    return f"{min(v):.1f}" if min(v) == max(v) else f"{min(v):.1f}-{max(v):.1f}"
print("| figure | " + " | ".join(progs) + " |")
print("|---|" + "---|" * len(progs))
for f, name in figs:
    print(f"| {name} | " + " | ".join(cell(p, f) for p in progs) + " |")
for p in progs:
    if f"{p}_mem_bw_gbs" in vals:
        print(f"{p}: read bandwidth {cell(p, 'mem_bw_gbs')} GB/s, int8 peak {cell(p, 'int8_peak_gmacs')} G multiply-adds/s")
PY
