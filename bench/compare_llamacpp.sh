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
#   LLAMA_CPP_BUILD  ik_llama.cpp's build directory (bin/llama-quantize)      (required)
#   COMPARE          the compare_llamacpp program (default $BUILD/bench/compare_llamacpp)
#   CASES            default: stories falcon3-test llama3-test bitnet-large bitnet-large-relu2
#                    2b4t embed-0.6b
#   SEQS, LEN        prompts (at most 8) and tokens each (default 8 x 64)
#   MARGIN           the clear-margin threshold in nats (default 1: about twice the largest
#                    difference between the two's log-probabilities of one token measured on
#                    these random-weight files, 0.44-0.55 nats, so that neither the top-1 nor
#                    the top-2 moving by that much can swap them)
#   THREADS          (default 2)   WORK  where files go (default $BUILD/compare-llamacpp)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
LLAMA_CPP_BUILD=${LLAMA_CPP_BUILD:?LLAMA_CPP_BUILD: ik_llama.cpp build directory}
COMPARE=${COMPARE:-$BUILD/bench/compare_llamacpp}
CASES=${CASES:-stories falcon3-test llama3-test bitnet-large bitnet-large-relu2 2b4t embed-0.6b}
SEQS=${SEQS:-8}
LEN=${LEN:-64}
MARGIN=${MARGIN:-1}
THREADS=${THREADS:-2}
WORK=${WORK:-$BUILD/compare-llamacpp}
MODELS=${BITNET_TEST_MODELS:-../shared/models}
QUANTIZE=$LLAMA_CPP_BUILD/bin/llama-quantize
for f in "$COMPARE" "$QUANTIZE" "$BUILD/bitnetd" "$BUILD/bitnet-cli" "$BUILD/bitnet-model"; do
	[ -x "$f" ] || { echo "compare_llamacpp: no $f" >&2; exit 2; }
done
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

# The case's file for bitnetd, written once (bitnet-model write ARGS).
write_model() { # $1: file, then the writer's arguments
	out=$1; shift
	[ -f "$out" ] || "$BUILD/bitnet-model" write "$@" --out "$out" > /dev/null
}

# llama.cpp's twin of a ternary file: IQ2_BN, the embedding and head F16 (see above).
llama_twin() { # $1: bitnetd's file; prints the twin's path
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
	bitnet-large-relu2) ternary_case "$c" --preset bitnet-large --layers 4 --untied --activation relu2 ;;
	2b4t)
		if [ -f "$LLAMA3_TOKENIZER" ]; then
			ternary_case 2b4t --preset 2b4t --type i2_s --untied --vocab-from "$LLAMA3_TOKENIZER" --metadata microsoft
		else ternary_case 2b4t --preset 2b4t --type i2_s --untied; fi ;;
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
