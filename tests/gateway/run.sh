#!/bin/sh
# SPDX-License-Identifier: MIT
# make check-gateway-sdk: a cpu daemon on a tiny model with the LLaMA-3 vocabulary (so chat has
# its template), bitnet-gateway in front of it with an API key, and the official OpenAI SDK
# (tests/gateway/sdk.mjs) as the client. Needs $BITNET_TEST_MODELS (the tokenizer); skips
# with a message without it.
set -eu
BUILD=${BUILD:-build}
if [ -z "${BITNET_TEST_MODELS:-}" ]; then
	echo "SKIP: gateway SDK tests (BITNET_TEST_MODELS is not set; .ci/run sets it to ../shared/models)"
	exit 0
fi
dir=$(mktemp -d /tmp/bn-gw-sdk-XXXXXX)
daemon=""; gateway=""
cleanup() {
	[ -n "$gateway" ] && kill "$gateway" 2>/dev/null && wait "$gateway" 2>/dev/null || true
	[ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
# the waits below scale with the daemon's build and $BITNET_TEST_TIME_SCALE (tests/timescale.h)
scaled() { python3 "$(dirname "$0")/../timescale.py" "$BUILD/bitnetd" "$1"; }
daemon_tries=$(scaled 1000) gateway_tries=$(scaled 500) # 50 s and 10 s
"$BUILD/bitnet-model" write --preset tiny --vocab-from "$BITNET_TEST_MODELS/llama3/tokenizer.json" \
	--metadata llama.cpp --out "$dir/model.gguf" >/dev/null
# --pooling mean: the generative test model embeds too (/v1/embeddings), and still generates.
"$BUILD/bitnetd" --backend cpu --model "$dir/model.gguf" --socket "$dir/d.sock" --cache-dir none \
	--pooling mean --log-level warn &
daemon=$!
i=0
until "$BUILD/bitnet-cli" --socket "$dir/d.sock" info >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt "$daemon_tries" ] || { echo "the daemon did not start" >&2; exit 1; }
	sleep 0.05
done
echo "sk-sdk-test weight=2" > "$dir/keys"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BUILD/bitnet-gateway" --socket "$dir/d.sock" --listen "127.0.0.1:$port" \
	--api-key-file "$dir/keys" --log-level warn &
gateway=$!
i=0
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; do
	i=$((i + 1)); [ $i -lt "$gateway_tries" ] || { echo "the gateway did not listen" >&2; exit 1; }
	sleep 0.02
done
prompt="Ternary weights are minus one, zero or one."
embed_second="A second text to embed."
GATEWAY_URL="http://127.0.0.1:$port/v1" \
API_KEY=sk-sdk-test \
MODEL_ID=$("$BUILD/bitnet-cli" --socket "$dir/d.sock" info | sed -n 's/^model=//p') \
SCORE_PROMPT="$prompt" \
TIMEOUT_MS=$(scaled 60000) \
SCORE_LOGPROBS=$("$BUILD/bitnet-cli" --socket "$dir/d.sock" score --text "$prompt" | awk '$1 ~ /^[0-9]+$/ && NF == 3 { print $3 }') \
EMBED_SECOND="$embed_second" \
EMBED_VECTORS=$("$BUILD/bitnet-cli" --socket "$dir/d.sock" embed --text "$prompt" --text "$embed_second" | grep -v '^input=') \
	node "$(dirname "$0")/sdk.mjs"
