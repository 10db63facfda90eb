#!/bin/sh
# compare_llamacpp.sh — bitnetd's next-token choices and embeddings beside llama.cpp's on the
# same files (issues 57 and 61). `make compare-llamacpp LLAMA_CPP_DIR=... LLAMA_CPP_BUILD=...`
# builds bench/compare_llamacpp.c against that llama.cpp and runs this; never part of make check.
#
# llama.cpp here is ik_llama.cpp (the fork that reads bitnet.cpp's I2_S, ggml type 36; upstream
# llama.cpp reuses 36 for another type, and its TQ2_0 is not in ik_llama.cpp). It cannot multiply
# I2_S directly: it dequantises it in llama-quantize, so each ternary file is converted once,
# losslessly, to its own ternary type IQ2_BN (one float scale a row: the tensor's one I2_S scale
# in every row), with the F16 embedding and head kept F16:
#   llama-quantize --allow-requantize --token-embedding-type f16 --output-tensor-type f16 \
#       FILE.gguf FILE-iq2_bn.gguf IQ2_BN
# Float files (stories260K) run as they are.
#
# Each case: the file is written with build/bitnet-model, a cpu daemon serves it, the prompts
# below are tokenized by bitnetd (BOS as the model wants it) and cut to LEN tokens, bitnetd
# scores each line (bitnet-cli score --top 2) and compare_llamacpp decodes the same ids with
# libllama and counts where llama.cpp's argmax is bitnetd's top-1: on every position and on the
# clear-margin ones (bitnetd's top-1 log-probability minus its top-2 >= MARGIN nats). The
# embedding case (the BitNet-embedding-0.6B shape as a plain qwen3 file: bitnet-model write
# --no-input-norms, since llama.cpp does not know its per-projection input norms) compares
# last-token-pooled vectors by cosine similarity.
#
# UPSTREAM=1, for upstream llama.cpp (which multiplies TQ2_0 but not I2_S, and reads type 36
# as another type): every ternary file is written as TQ2_0 (bitnet-model write --type tq2_0)
# and both run that one file, nothing converted; files go to $BUILD/compare-llamacpp-upstream.
# The default cases are then those an upstream of early 2025 runs (stories falcon3-test
# llama3-test: it has no bitnet-b1.58 or qwen3 graph), and DRIFT is not available.
#
#   LLAMA_CPP_BUILD  llama.cpp's build directory (bin/llama-quantize)         (required)
#   COMPARE          the compare_llamacpp program (default $BUILD/bench/compare_llamacpp)
#   CASES            default: stories falcon3-test llama3-test bitnet-large bitnet-large-relu2
#                    2b4t embed-0.6b
#   SEQS, LEN        prompts (at most 8) and tokens each (default 8 x 64)
#   MARGIN           the clear-margin threshold in nats (default 1: about twice the largest
#                    difference between the two's log-probabilities of one token measured on
#                    these random-weight files, 0.44-0.55 nats, so that neither the top-1 nor
#                    the top-2 moving by that much can swap them)
#   THREADS          (default 2)   WORK  where files go (default $BUILD/compare-llamacpp)
#
# Cases 2b4t-lN (N = 1, 4, 8, 15, ...): the 2B4T shape with its first N layers (the writer
# seeds each tensor by its name, so they are the 30-layer file's first N), for how the two
# drift apart with depth on ReLU² files.
#
# DRIFT=1 (the bitnet-b1.58 ReLU² cases: bitnet-large-relu2, 2b4t, 2b4t-lN): why the two
# disagree there. Each file also gets an F16 twin (llama-quantize --allow-requantize FILE
# TWIN F16: the same ternary weights as floats, so llama.cpp multiplies near-float
# activations), and bench/ref_bitnet.c (REF, default $BUILD/bench/ref_bitnet), an independent
# double-precision reference of the graph reading that twin, computes the logits three ways:
# BitLinear's activations (one absmax scale a token, bitnetd's definition), ik_llama.cpp's
# (Q8_K64, with its F16 KV cache) and none (float activations, F16 KV cache: the F16 twin as
# llama.cpp runs it), and BitLinear's once more with every projection's input first rounded to
# float (ref-bitlinear-f32: what rounding alone moves). Every pair is compared as the main table is: the first
# one's argmax against the second one's top-1 on the second one's clear-margin positions
# (CASE.drift lists them; the drift table prints each as agreement % / mean / max |log-prob
# difference|). REF_LINES (default 8) of the prompts go to the reference: about 2.4 G
# multiply-adds in double a token on the 30-layer shape, a minute or two a line on 2 threads.
# The F16 twin (5.5 GB at 30 layers) is deleted after its case unless KEEP_F16=1.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LLAMA_CPP_BUILD=${LLAMA_CPP_BUILD:?LLAMA_CPP_BUILD: ik_llama.cpp build directory}
COMPARE=${COMPARE:-$BUILD/bench/compare_llamacpp}
UPSTREAM=${UPSTREAM:-0}
if [ "$UPSTREAM" = 1 ]; then
	CASES=${CASES:-stories falcon3-test llama3-test}
	WORK=${WORK:-$BUILD/compare-llamacpp-upstream}
else
	CASES=${CASES:-stories falcon3-test llama3-test bitnet-large bitnet-large-relu2 2b4t embed-0.6b}
fi
SEQS=${SEQS:-8}
LEN=${LEN:-64}
MARGIN=${MARGIN:-1}
THREADS=${THREADS:-2}
WORK=${WORK:-$BUILD/compare-llamacpp}
DRIFT=${DRIFT:-0}
REF=${REF:-$BUILD/bench/ref_bitnet}
REF_LINES=${REF_LINES:-8}
KEEP_F16=${KEEP_F16:-0}
MODELS=${BITNET_TEST_MODELS:-../shared/models}
QUANTIZE=$LLAMA_CPP_BUILD/bin/llama-quantize
for f in "$COMPARE" "$QUANTIZE" "$BUILD/bitnetd" "$BUILD/bitnet-cli" "$BUILD/bitnet-model"; do
	[ -x "$f" ] || { echo "compare_llamacpp: no $f" >&2; exit 2; }
done
[ "$DRIFT" = 0 ] || [ "$UPSTREAM" = 0 ] || { echo "compare_llamacpp: DRIFT=1 needs ik_llama.cpp (UPSTREAM=0)" >&2; exit 2; }
[ "$DRIFT" = 0 ] || [ -x "$REF" ] || { echo "compare_llamacpp: DRIFT=1 needs $REF (make $REF)" >&2; exit 2; }
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
SOCK=$WORK/bitnetd.sock
DAEMON=
trap '[ -z "$DAEMON" ] || kill "$DAEMON" 2>/dev/null || true' EXIT

prompts() {
	cat <<'EOF'
Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she saw a big red ball in the park. She ran to the ball and kicked it very hard. The ball flew over the fence and into the garden of an old man.
Tom had a dog named Max. Max liked to run and jump in the grass. Every morning Tom and Max went for a walk by the river. One day Max saw a duck and barked loudly. The duck was scared and flew away, and Tom laughed and threw a stick for Max.
The little bird sat on the branch and sang a happy song. The sun was warm and the sky was blue. A small boy named Ben heard the song and looked up at the tree. He smiled and waved at the bird, and the bird sang even louder for him.
Sara wanted to bake a cake for her mom. She got the flour, the eggs and the sugar from the kitchen. She mixed everything in a big bowl with a spoon. When the cake was ready, it smelled so good that her mom came to see what she made.
In a big forest there lived a kind bear who liked honey. Every day he looked for bees in the tall trees. One day he found a hive full of sweet honey, but the bees were angry. The bear said sorry and shared his berries with them instead.
Once there was a red car that could talk. The car liked to drive fast on the long road near the sea. One day it rained and the road was wet. The car went slowly and helped a little cat get home safe, and the cat said thank you.
Anna and her brother built a big castle out of sand at the beach. They put shells on the walls and dug a moat around it. When the waves came, the water filled the moat. They clapped their hands and shouted that their castle was the best one.
The moon was round and bright in the night sky. A sleepy owl opened its big eyes and looked around the quiet farm. It saw a mouse near the barn and a cow in the field. The owl hooted softly and flew over the hills until the sun came up.
EOF
}

# The case's file for bitnetd, written once (bitnet-model write ARGS; TQ2_0 for upstream).
write_model() { # $1: file, then the writer's arguments
	out=$1; shift
	[ "$UPSTREAM" = 0 ] || set -- "$@" --type tq2_0
	[ -f "$out" ] || "$BUILD/bitnet-model" write "$@" --out "$out" > /dev/null
}

# llama.cpp's twin of a ternary file: IQ2_BN, the embedding and head F16 (see above); for
# upstream the file itself.
llama_twin() { # $1: bitnetd's file; prints the twin's path
	[ "$UPSTREAM" = 0 ] || { echo "$1"; return 0; }
	twin=${1%.gguf}-iq2_bn.gguf
	[ -f "$twin" ] || "$QUANTIZE" --allow-requantize --token-embedding-type f16 \
		--output-tensor-type f16 "$1" "$twin" IQ2_BN "$THREADS" > "$twin.log" 2>&1 ||
		{ echo "compare_llamacpp: llama-quantize failed on $1:" >&2; tail -5 "$twin.log" >&2; exit 1; }
	echo "$twin"
}

start_daemon() { # $1: model file
	rm -f "$SOCK"
	"$BUILD/bitnetd" --backend cpu --model "$1" --socket "$SOCK" --threads "$THREADS" \
		--log-level warn &
	DAEMON=$!
	for _ in $(seq 3000); do # a 2B4T-shape repack takes a minute on 2 cores
		"$BUILD/bitnet-cli" --socket "$SOCK" info > /dev/null 2>&1 && return 0
		kill -0 "$DAEMON" 2>/dev/null || { echo "compare_llamacpp: bitnetd did not start on $1" >&2; exit 1; }
		sleep 0.1
	done
	echo "compare_llamacpp: bitnetd not ready on $1" >&2; exit 1
}

stop_daemon() {
	kill "$DAEMON"; wait "$DAEMON" 2>/dev/null || true; DAEMON=
}

# The prompts as bitnetd tokenizes them, LEN tokens each at most, one line each.
token_lines() { # $1: output file
	prompts | head -n "$SEQS" | while IFS= read -r text; do
		"$BUILD/bitnet-cli" --socket "$SOCK" tokenize "$text" | tr ' ' '\n' | grep . |
			head -n "$LEN" | tr '\n' ' ' | sed 's/ $//'
		echo
	done > "$1"
}

logits_case() { # $1: case name, $2: bitnetd's file, $3: llama.cpp's file
	ids=$WORK/$1.ids scores=$WORK/$1.scores
	start_daemon "$2"
	token_lines "$ids"
	: > "$scores"
	while IFS= read -r line; do
		"$BUILD/bitnet-cli" --socket "$SOCK" score --ids "$line" --top 2 >> "$scores"
	done < "$ids"
	stop_daemon
	"$COMPARE" logits --model "$3" --ids "$ids" --bitnetd "$scores" --margin "$MARGIN" \
		--threads "$THREADS" | tee "$WORK/$1.result"
}

embed_case() { # $1: case name, $2: bitnetd's file, $3: llama.cpp's file
	ids=$WORK/$1.ids vectors=$WORK/$1.vectors theirs=$3
	start_daemon "$2"
	token_lines "$ids"
	set --; while IFS= read -r line; do set -- "$@" --ids "$line"; done < "$ids"
	"$BUILD/bitnet-cli" --socket "$SOCK" embed "$@" > "$vectors"
	stop_daemon
	"$COMPARE" embed --model "$theirs" --ids "$ids" --bitnetd "$vectors" --pooling last \
		--threads "$THREADS" | tee "$WORK/embed.result"
}

ternary_case() { # $1: case name, then the writer's arguments
	name=$1; shift
	write_model "$WORK/$name.gguf" "$@"
	twin=$(llama_twin "$WORK/$name.gguf")
	logits_case "$name" "$WORK/$name.gguf" "$twin"
}

# One pair for the drift table: $1 its label, then the command printing agreement keys.
drift_pair() {
	label=$1; shift
	"$@" > "$WORK/$name.pair" || { echo "compare_llamacpp: $label failed" >&2; exit 1; }
	grep '^# clear-margin' "$WORK/$name.pair" | head -3 || true
	awk -F= -v l="$label" '{ v[$1] = $2 } END { printf "%s=%.1f %% (%s of %s) / %.3f / %.2f\n",
		l, 100 * v["agree_clear"], v["agree_clear_count"], v["clear_positions"],
		v["lp_delta_mean"], v["lp_delta_max"] }' "$WORK/$name.pair" | tee -a "$WORK/$name.drift"
}

# DRIFT=1 (see the header), after ternary_case: the F16 twin, llama.cpp on both twins, and the
# reference's three ways, each pair compared.
drift_case() { # $1: case name (its file, twin, ids and bitnetd's scores are in WORK)
	name=$1 file=$WORK/$1.gguf iq2=$WORK/$1-iq2_bn.gguf f16=$WORK/$1-f16.gguf
	ids=$WORK/$1.ids refids=$WORK/$1.ref.ids
	[ -f "$f16" ] || "$QUANTIZE" --allow-requantize "$file" "$f16" F16 "$THREADS" \
		> "$f16.log" 2>&1 || { echo "compare_llamacpp: F16 twin of $file failed:" >&2; tail -5 "$f16.log" >&2; exit 1; }
	head -n "$REF_LINES" "$ids" > "$refids"
	: > "$WORK/$name.drift"
	"$COMPARE" score --model "$f16" --ids "$ids" --threads "$THREADS" > "$WORK/$name.f16.scores"
	drift_pair "fork-F16|bitnetd" "$COMPARE" logits --model "$f16" --ids "$ids" \
		--bitnetd "$WORK/$name.scores" --margin "$MARGIN" --threads "$THREADS"
	drift_pair "fork-IQ2_BN|fork-F16" "$COMPARE" logits --model "$iq2" --ids "$ids" \
		--bitnetd "$WORK/$name.f16.scores" --margin "$MARGIN" --threads "$THREADS"
	drift_pair "ref-bitlinear|bitnetd" "$REF" --model "$f16" --ids "$refids" --act bitlinear \
		--out "$WORK/$name.ref-bitlinear.scores" --against "$WORK/$name.scores" \
		--margin "$MARGIN" --threads "$THREADS"
	drift_pair "ref-bitlinear-f32|ref-bitlinear" "$REF" --model "$f16" --ids "$refids" \
		--act bitlinear --f32-in --against "$WORK/$name.ref-bitlinear.scores" \
		--margin "$MARGIN" --threads "$THREADS"
	drift_pair "ref-q8k64|ref-bitlinear" "$REF" --model "$f16" --ids "$refids" --act q8k64 \
		--f16-kv --out "$WORK/$name.ref-q8k64.scores" \
		--against "$WORK/$name.ref-bitlinear.scores" --margin "$MARGIN" --threads "$THREADS"
	drift_pair "fork-IQ2_BN|ref-q8k64" "$COMPARE" logits --model "$iq2" --ids "$refids" \
		--bitnetd "$WORK/$name.ref-q8k64.scores" --margin "$MARGIN" --threads "$THREADS"
	drift_pair "ref-float|ref-bitlinear" "$REF" --model "$f16" --ids "$refids" --act float \
		--f16-kv --out "$WORK/$name.ref-float.scores" \
		--against "$WORK/$name.ref-bitlinear.scores" --margin "$MARGIN" --threads "$THREADS"
	drift_pair "fork-F16|ref-float" "$COMPARE" logits --model "$f16" --ids "$refids" \
		--bitnetd "$WORK/$name.ref-float.scores" --margin "$MARGIN" --threads "$THREADS"
	[ "$KEEP_F16" = 1 ] || rm -f "$f16"
}

LLAMA3_TOKENIZER=$MODELS/llama3/tokenizer.json
for c in $CASES; do
	echo "== $c"
	case $c in
	stories)
		if [ -f "$MODELS/stories260K.gguf" ]; then
			logits_case stories "$MODELS/stories260K.gguf" "$MODELS/stories260K.gguf"
		else echo "SKIP: no $MODELS/stories260K.gguf (set BITNET_TEST_MODELS)"; fi ;;
	falcon3-test|llama3-test) ternary_case "$c" --preset "$c" ;;
	# 1bitLLM's bitnet_b1_58-large at its real width (1536) with 4 of its 24 layers: its -test
	# shape (256 wide) stops ik_llama.cpp, whose IQ2_BN activation rows must be >= 512 wide
	# (GGML_ASSERT(k >= 8*QK_IQ1BN) in quantize_row_q8_K64_ref). SiLU as the model was trained,
	# which ik_llama.cpp's bitnet-b1.58 graph ignores (always ReLU²); then its ReLU² twin.
	# --untied here and for 2b4t: with random weights a tied head mostly predicts the input
	# token again with a margin of ~100 nats, which any graph agrees on; a head of its own
	# makes every position depend on the layers.
	bitnet-large) ternary_case "$c" --preset bitnet-large --layers 4 --untied ;;
	bitnet-large-relu2)
		ternary_case "$c" --preset bitnet-large --layers 4 --untied --activation relu2
		[ "$DRIFT" = 0 ] || drift_case "$c" ;;
	2b4t|2b4t-l[0-9]*)
		layers=; [ "$c" = 2b4t ] || layers="--layers ${c#2b4t-l}"
		# shellcheck disable=SC2086 # $layers: no option or one with its value
		if [ -f "$LLAMA3_TOKENIZER" ]; then
			ternary_case "$c" --preset 2b4t --type i2_s --untied $layers --vocab-from "$LLAMA3_TOKENIZER" --metadata microsoft
		else ternary_case "$c" --preset 2b4t --type i2_s --untied $layers; fi
		[ "$DRIFT" = 0 ] || drift_case "$c" ;;
	embed-0.6b)
		write_model "$WORK/embed-0.6b.gguf" --preset bitnet-embedding-0.6b --no-input-norms
		twin=$(llama_twin "$WORK/embed-0.6b.gguf")
		embed_case embed-0.6b "$WORK/embed-0.6b.gguf" "$twin" ;;
	*) echo "compare_llamacpp: unknown case $c" >&2; exit 2 ;;
	esac
done

echo
echo "| case | positions | clear (>= $MARGIN nats) | top-1 agreement, clear | top-1 agreement, all | mean abs log-prob difference |"
echo "|---|---|---|---|---|---|"
for c in $CASES; do
	r=$WORK/$c.result
	[ -f "$r" ] || continue
	awk -F= -v c="$c" '{ v[$1] = $2 } END { printf "| %s | %s | %s | %s (%s) | %s (%s) | %s |\n", c,
		v["positions"], v["clear_positions"], v["agree_clear"], v["agree_clear_count"],
		v["agree_all"], v["agree_all_count"], v["lp_delta_mean"] }' "$r"
done
case " $CASES " in *" embed-0.6b "*) grep -E '^cosine_(min|mean)=' "$WORK/embed.result" ;; esac
[ "$DRIFT" = 0 ] && exit 0
echo
echo "Drift (DRIFT=1): A|B = A's argmax against B's top-1 on B's clear-margin (>= $MARGIN nats) positions: agreement (count of clear) / mean / max |log-prob difference| in nats"
for c in $CASES; do
	[ -f "$WORK/$c.drift" ] || continue
	echo "== $c"
	cat "$WORK/$c.drift"
done
