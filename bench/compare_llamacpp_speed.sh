#!/bin/sh
# compare_llamacpp_speed.sh — bitnetd's speed beside llama.cpp's (ik_llama.cpp) on the same model
# shapes and weights, for PERFORMANCE.md (issues 57 and 61). For a quiet machine: it prepares
# every file first, then runs ROUNDS rounds alternating ours and theirs, and prints medians.
#
# Decode and prefill, per bench-model preset shape (PRESETS): ours is
#   build/bench-model --model build/models/P.gguf --threads T --quick
# (decode_tps_b1: batch-1 decode with the file's F16 head, exact like llama.cpp's;
#  decode_tps_b1_screened: the daemon's default screened head; prefill_tps_t256: one
#  256-token prompt), theirs
#   llama-bench -m build/models/P-iq2_bn.gguf -t T -p 256 -n 64 -r 3 $LLAMA_BENCH_ARGS
# (tg64 and pp256), on the same weights converted losslessly to ik_llama.cpp's IQ2_BN (it
# cannot multiply bitnet.cpp's I2_S; bench/compare_llamacpp.sh says how and checks they agree).
#
# Embeddings, on the BitNet-embedding-0.6B shape as a plain qwen3 file (bitnet-model write
# --preset bitnet-embedding-0.6b --no-input-norms: llama.cpp does not know its input norms),
# last-token pooling, 1, 16 and 256 inputs of 128 tokens: ours
#   build/bench/bench_embed --model FILE --pooling last --threads T
# (bn_embed_batch through a cpu daemon, client wall time), theirs
#   llama-embedding -m FILE-iq2_bn.gguf -t T --pooling last -c 2048 -b 2048 -ub 2048 -f LINES
# with LINES of 127 digits (Qwen's pre-tokenizer splits digits one by one: 127 tokens, and the
# EOS the file asks for: 128; checked with --verbose-prompt before timing), inputs per second
# from its "prompt eval time" (the decodes alone: no load, no tokenizing).
#
# With UPSTREAM=1, for upstream llama.cpp (which multiplies TQ2_0 but not bitnet.cpp's I2_S,
# and reads type 36 as another type): both run the same file, written by bitnet-model with
# --type tq2_0 (build/models/P-tq2_0.gguf), nothing converted. A llama.cpp older than a
# preset's architecture (bitnet-b1.58 for 2b4t, qwen3 for the embeddings) stops with
# llama-bench's or llama-embedding's error: choose PRESETS and EMBED=0 for it.
#
#   LLAMA_CPP_BUILD   llama.cpp's build directory (bin/llama-bench, llama-embedding,
#                     llama-quantize)                                           (required)
#   UPSTREAM          0 (default: ik_llama.cpp, converted twins) or 1 (one TQ2_0 file)
#   PRESETS           default: 2b4t falcon3-1b falcon3-7b
#   ROUNDS            default 3       THREADS  default 2
#   LLAMA_BENCH_ARGS  more llama-bench flags (e.g. "-rtr 1" for its run-time repacking)
#   EMBED=0           skip the embeddings
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LLAMA_CPP_BUILD=${LLAMA_CPP_BUILD:?LLAMA_CPP_BUILD: ik_llama.cpp build directory}
PRESETS=${PRESETS:-2b4t falcon3-1b falcon3-7b}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
LLAMA_BENCH_ARGS=${LLAMA_BENCH_ARGS:-}
EMBED=${EMBED:-1}
UPSTREAM=${UPSTREAM:-0}
BIN=$LLAMA_CPP_BUILD/bin
OUT=$(mktemp -d /tmp/compare-llamacpp-speed.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
LLAMA3_TOKENIZER=${BITNET_TEST_MODELS:-../shared/models}/llama3/tokenizer.json

model_file() { # $1: preset; bench-model's file name (the Makefile's BENCH_MODEL_FILE)
	if [ "$UPSTREAM" = 1 ]; then echo "$BUILD/models/$1-tq2_0.gguf"
	elif [ "$1" = 2b4t ]; then echo "$BUILD/models/2b4t-i2_s.gguf"; else echo "$BUILD/models/$1.gguf"; fi
}

# llama.cpp's file for ours: the IQ2_BN twin, or the same TQ2_0 file.
twin() { if [ "$UPSTREAM" = 1 ]; then echo "$1"; else echo "${1%.gguf}-iq2_bn.gguf"; fi; }

# ------------------------------------------------------------------------------------------
# Preparing: the files, each written and converted once
# ------------------------------------------------------------------------------------------

prepare() { # $1: bitnetd's file, then the writer's arguments
	f=$1; shift
	mkdir -p "$(dirname "$f")"
	if [ "$UPSTREAM" = 1 ]; then
		[ -f "$f" ] || "$BUILD/bitnet-model" write "$@" --type tq2_0 --out "$f"
		return
	fi
	[ -f "$f" ] || "$BUILD/bitnet-model" write "$@" --out "$f"
	[ -f "$(twin "$f")" ] || "$BIN/llama-quantize" --allow-requantize --token-embedding-type f16 \
		--output-tensor-type f16 "$f" "$(twin "$f")" IQ2_BN "$THREADS" > "$OUT/quantize.log" 2>&1 ||
		{ echo "llama-quantize failed on $f:" >&2; tail -5 "$OUT/quantize.log" >&2; exit 1; }
}

for p in $PRESETS; do
	if [ "$p" = 2b4t ] && [ -f "$LLAMA3_TOKENIZER" ]; then
		prepare "$(model_file 2b4t)" --preset 2b4t --type i2_s --vocab-from "$LLAMA3_TOKENIZER" --metadata microsoft
	elif [ "$p" = 2b4t ]; then prepare "$(model_file 2b4t)" --preset 2b4t --type i2_s
	else prepare "$(model_file "$p")" --preset "$p"; fi
done
EMBED_FILE=$BUILD/models/bitnet-embedding-0.6b-plain$(if [ "$UPSTREAM" = 1 ]; then echo -tq2_0; fi).gguf
if [ "$EMBED" = 1 ]; then
	prepare "$EMBED_FILE" --preset bitnet-embedding-0.6b --no-input-norms
	digits=$(seq 0 126 | awk '{ printf "%d", $1 % 10 }')
	for n in 1 16 256; do
		seq "$n" | while read -r _; do echo "$digits"; done > "$OUT/lines_$n.txt"
	done
	"$BIN/llama-embedding" -m "$(twin "$EMBED_FILE")" -t "$THREADS" --pooling last -c 2048 \
		-b 2048 -ub 2048 -f "$OUT/lines_1.txt" --verbose-prompt > "$OUT/check.log" 2>&1 ||
		{ echo "llama-embedding failed:" >&2; tail -5 "$OUT/check.log" >&2; exit 1; }
	got=$(sed -n 's/.*number of tokens in prompt = \([0-9]*\).*/\1/p' "$OUT/check.log" | head -1)
	[ "$got" = 128 ] || { echo "llama-embedding's line is $got tokens, not 128" >&2; exit 1; }
fi

# ------------------------------------------------------------------------------------------
# Measuring: key=value lines appended to $OUT/all as NAME_KEY=VALUE
# ------------------------------------------------------------------------------------------

ours_model() { # $1: preset
	"$BUILD/bench-model" --model "$(model_file "$1")" --threads "$THREADS" --quick > "$OUT/ours.log" 2>&1 ||
		{ echo "bench-model failed on $1:" >&2; tail -5 "$OUT/ours.log" >&2; exit 1; }
	grep -E '^(decode_tps_b1|decode_tps_b1_screened|prefill_tps_t256)=' "$OUT/ours.log" |
		sed "s/^/bitnetd_$1_/" >> "$OUT/all"
}

theirs_model() { # $1: preset; llama-bench's markdown table, the t/s column of pp256 and tg64
	# shellcheck disable=SC2086
	"$BIN/llama-bench" -m "$(twin "$(model_file "$1")")" -t "$THREADS" -p 256 -n 64 -r 3 \
		$LLAMA_BENCH_ARGS > "$OUT/theirs.log" 2>&1 ||
		{ echo "llama-bench failed on $1:" >&2; tail -5 "$OUT/theirs.log" >&2; exit 1; }
	awk -F'|' -v p="llama_$1_" '
		/pp256/ { split($(NF-1), a, "±"); gsub(/ /, "", a[1]); print p "prefill_tps_t256=" a[1] }
		/tg64/  { split($(NF-1), a, "±"); gsub(/ /, "", a[1]); print p "decode_tps_b1=" a[1] }' \
		"$OUT/theirs.log" >> "$OUT/all"
}

ours_embed() {
	"$BUILD/bench/bench_embed" --model "$EMBED_FILE" --pooling last --threads "$THREADS" \
		--rounds 1 > "$OUT/ours-embed.log" 2>&1 ||
		{ echo "bench_embed failed:" >&2; tail -5 "$OUT/ours-embed.log" >&2; exit 1; }
	grep -E '^embed_per_s_b(1|16|256)=' "$OUT/ours-embed.log" | sed 's/^/bitnetd_/' >> "$OUT/all"
}

theirs_embed() {
	for n in 1 16 256; do
		"$BIN/llama-embedding" -m "$(twin "$EMBED_FILE")" -t "$THREADS" --pooling last -c 2048 \
			-b 2048 -ub 2048 -f "$OUT/lines_$n.txt" > "$OUT/theirs-embed.log" 2>&1 ||
			{ echo "llama-embedding failed:" >&2; tail -5 "$OUT/theirs-embed.log" >&2; exit 1; }
		sed -n 's/.*prompt eval time = *\([0-9.]*\) ms.*/\1/p' "$OUT/theirs-embed.log" |
			awk -v n="$n" '{ printf "llama_embed_per_s_b%d=%.2f\n", n, n * 1000 / $1 }' >> "$OUT/all"
	done
}

echo "machine=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') threads=$THREADS rounds=$ROUNDS"
for r in $(seq "$ROUNDS"); do
	echo "round $r"
	for p in $PRESETS; do ours_model "$p"; theirs_model "$p"; done
	if [ "$EMBED" = 1 ]; then ours_embed; theirs_embed; fi
done

# ------------------------------------------------------------------------------------------
# Medians
# ------------------------------------------------------------------------------------------

median() { # $1: key; the median of its values (the lower middle one of an even count)
	sed -n "s/^$1=//p" "$OUT/all" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'
}

echo
echo "| shape | bitnetd decode b1, F16 head (t/s) | bitnetd decode b1, default head | llama.cpp tg64 | bitnetd prefill 256 | llama.cpp pp256 |"
echo "|---|---|---|---|---|---|"
for p in $PRESETS; do
	echo "| $p | $(median "bitnetd_${p}_decode_tps_b1") | $(median "bitnetd_${p}_decode_tps_b1_screened") | $(median "llama_${p}_decode_tps_b1") | $(median "bitnetd_${p}_prefill_tps_t256") | $(median "llama_${p}_prefill_tps_t256") |"
done
if [ "$EMBED" = 1 ]; then
	echo
	echo "| inputs of 128 tokens | bitnetd embeddings/s | llama-embedding embeddings/s |"
	echo "|---|---|---|"
	for n in 1 16 256; do
		echo "| $n | $(median "bitnetd_embed_per_s_b$n") | $(median "llama_embed_per_s_b$n") |"
	done
fi
echo
echo "raw values:"
sort "$OUT/all"
