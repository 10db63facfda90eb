#!/bin/sh
# The README's first command: install what is missing, build, get a model, serve it and show
# what it says: a short chat, four clients at once, an answer over HTTP through bitnet-gateway,
# what the scheduler did, a restart that maps the weights from the packed-weight cache, and a
# short transport benchmark.
#
# The model: microsoft/bitnet-b1.58-2B-4T-gguf from the Hugging Face Hub (1.2 GB, fetched once
# into huggingface_hub's cache, where later runs find it) when the Hub answers; with --offline,
# or when the Hub does not answer and the cache has no copy, the built-in tiny model (random
# weights: proof the machinery works, its text is noise). HF_ENDPOINT points at a mirror.
#
# Every command the README shows is run here as written: `run` prints it ($ ...) and runs it
# (tests/readme_quickstart.py checks that the two agree).
set -eu
cd "$(dirname "$0")/.."

offline=0
for arg in "$@"; do
	case $arg in
	--offline) offline=1 ;;
	-h | --help)
		echo "usage: tools/quickstart.sh [--offline]   (--offline: the built-in tiny model, no download)"
		exit 0 ;;
	*) echo "tools/quickstart.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
	esac
done

tools/install-deps.sh
make -j"$(nproc)" all

REPO=microsoft/bitnet-b1.58-2B-4T-gguf
SOCK=/tmp/bitnetd-quickstart.sock
HUB=${HF_ENDPOINT:-https://huggingface.co}
daemon=""
gateway=""
trap 'kill $gateway $daemon 2>/dev/null; wait $gateway $daemon 2>/dev/null || true' EXIT

# Prints a command as the README shows it, then runs it (in the background when it ends in &).
run() {
	printf '$ %s\n' "$1"
	eval "$1"
}

# A size for a person, as bitnet-model writes it: 1187801280 -> 1.19 GB.
human() {
	awk -v b="$1" 'BEGIN { split("B kB MB GB TB", u, " "); i = 1;
		while (b >= 999.5 && i < 5) { b /= 1000; i++ }
		printf (i == 1 ? "%d %s\n" : b < 9.995 ? "%.2f %s\n" : b < 99.95 ? "%.1f %s\n" : "%.0f %s\n"), b, u[i] }'
}

# Whether the Hub answers, within 5 s; $why says why not.
hub_answers() {
	rc=0
	code=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "$HUB/api/models/$REPO") || rc=$?
	case $rc:$code in
	0:200) return 0 ;;
	6:*) why="cannot resolve the host of $HUB (no network, or no DNS)" ;;
	7:*) why="cannot connect to $HUB (no network?)" ;;
	28:*) why="$HUB did not answer within 5 s" ;;
	0:*) why="$HUB answered HTTP $code" ;;
	*) why="cannot reach $HUB (curl exit status $rc)" ;;
	esac
	return 1
}

# Says which file a pull of $REPO takes, how big it is, and whether it is cached already.
announce() {
	file=$(echo "$plan" | sed -n 's/^file=//p')
	size=$(human "$(echo "$plan" | sed -n 's/^size=//p')")
	if echo "$plan" | grep -q '^cached=yes'; then
		echo "== $REPO: $file ($size) is in the cache already; the Hub is asked what main is"
	else
		echo "== the Hub answers: pulling $REPO: $file, $size (once; later runs find it in the cache)"
	fi
}

# Sets $model to "real" (the 2B4T model, in the cache now) or "tiny", saying why.
choose_model() {
	if [ "$offline" = 1 ]; then
		why="--offline was given"
	elif ! hub_answers; then
		if HF_HUB_OFFLINE=1 build/bitnet-model pull --quiet "$REPO" >/dev/null 2>&1; then
			echo "== $why; the cache has $REPO from an earlier run: using it"
			model=real
			return
		fi
	elif ! plan=$(build/bitnet-model pull --dry-run "$REPO"); then
		why="the Hub did not list $REPO (above)"
	else
		announce
		if run 'build/bitnet-model pull microsoft/bitnet-b1.58-2B-4T-gguf'; then
			model=real
			return
		fi
		why="the pull failed (above)"
	fi
	echo "== no download: $why."
	echo "   Using the built-in tiny model instead: random weights, so the machinery works but"
	echo "   its text is noise (where the Hub answers, without --offline, this shows $REPO)"
	model=tiny
}

# Starts the daemon (the command for the chosen model) and waits until it answers.
start_daemon() {
	t0=$(date +%s.%N)
	if [ "$model" = real ]; then
		run 'build/bitnetd --socket /tmp/bitnetd-quickstart.sock --model hf:microsoft/bitnet-b1.58-2B-4T-gguf --log-level warn &'
	else
		# The tiny model has no chat template of its own: llama2 lets it chat (noise).
		run 'build/bitnetd --socket /tmp/bitnetd-quickstart.sock --model build/models/tiny.gguf --chat-template llama2 --log-level warn &'
	fi
	daemon=$!
	i=0
	until build/bitnet-cli --socket "$SOCK" info >/dev/null 2>&1; do
		i=$((i + 1))
		if ! kill -0 "$daemon" 2>/dev/null || [ $i -ge 3000 ]; then
			echo "bitnetd did not start" >&2
			exit 1
		fi
		sleep 0.02
	done
	t1=$(date +%s.%N)
	awk -v s="$t0" -v e="$t1" 'BEGIN { printf "ready in %.2f s (start to `bitnet-cli info` answering)\n", e - s }'
}

# One client: its command and what it printed, in one piece once it is done.
client() {
	out=$(eval "$1" 2>&1) || out="(failed) $out"
	printf '$ %s\n  -> %s\n' "$1" "$(echo "$out" | tr '\n' ' ')"
}

echo "== the model"
choose_model
echo "== start"
start_daemon
build/bitnet-cli --socket "$SOCK" info | grep -E '^(model|vocab_size|context_length|backend|chat_template)='

echo "== a short chat"
run 'build/bitnet-cli --socket /tmp/bitnetd-quickstart.sock chat --message "What is the capital of France? Answer in one sentence." --max-tokens 48'

echo "== four clients at once, 32 tokens each (greedy, batched into the same steps)"
start=$(date +%s.%N)
client 'build/bitnet-cli --socket /tmp/bitnetd-quickstart.sock generate --prompt "The capital of France is" --max-tokens 32' &
c1=$!
client 'build/bitnet-cli --socket /tmp/bitnetd-quickstart.sock generate --prompt "Water boils at a temperature of" --max-tokens 32' &
c2=$!
client 'build/bitnet-cli --socket /tmp/bitnetd-quickstart.sock generate --prompt "The three primary colors are" --max-tokens 32' &
c3=$!
client 'build/bitnet-cli --socket /tmp/bitnetd-quickstart.sock generate --prompt "A haiku about the sea:" --max-tokens 32' &
c4=$!
wait $c1 $c2 $c3 $c4
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "aggregate: 4 clients x 32 tokens = 128 tokens in %.2f s = %.0f tokens/s\n", e - s, 128 / (e - s) }'

echo "== over HTTP: bitnet-gateway, the OpenAI API, and curl"
run 'build/bitnet-gateway --socket /tmp/bitnetd-quickstart.sock --listen 127.0.0.1:8080 --log-level warn &'
gateway=$!
i=0
until curl -sf localhost:8080/health >/dev/null 2>&1; do
	i=$((i + 1))
	if ! kill -0 "$gateway" 2>/dev/null || [ $i -ge 500 ]; then
		echo "bitnet-gateway did not start (is port 8080 taken?)" >&2
		exit 1
	fi
	sleep 0.02
done
run "curl -s localhost:8080/v1/chat/completions -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Name three colors of the rainbow.\"}], \"max_tokens\": 48}'"
echo
kill "$gateway"
wait "$gateway" 2>/dev/null || true
gateway=""

echo "== what the scheduler did (bitnet-cli stats, excerpt)"
build/bitnet-cli --socket "$SOCK" stats | awk '
	/^bitnetd_batch_rows_sum / { rows = $2 } /^bitnetd_batch_rows_count / { steps = $2 }
	/^bitnetd_tokens_generated_total / { tokens = $2 } /^bitnetd_kv_blocks_total / { kv = $2 }
	/^bitnetd_time_to_first_token_seconds_sum / { ttft = $2 }
	/^bitnetd_time_to_first_token_seconds_count / { n = $2 }
	END { printf "steps=%d mean_batch_rows=%.1f tokens=%d kv_blocks=%d mean_ttft_ms=%.1f\n",
		  steps, steps ? rows / steps : 0, tokens, kv, n ? 1000 * ttft / n : 0 }'

echo "== a restart: the weights come from the packed-weight cache (bitnetd(8) --cache-dir)"
# (written after the first start was ready, or by an earlier run: waited for if need be)
i=0
until build/bitnet-cli --socket "$SOCK" info 2>/dev/null | grep -Eq '^weights_cache=(built|hit)$'; do
	i=$((i + 1)); [ $i -lt 3000 ] || { echo "the weights cache was not written" >&2; exit 1; }
	sleep 0.02
done
kill "$daemon"; wait "$daemon" 2>/dev/null || true
start_daemon
build/bitnet-cli --socket "$SOCK" info | grep -E '^(load_ms|weights_cache)='

echo "== transport benchmark (short run, its own daemon)"
build/bitnet-cli bench --start-daemon build/bitnetd --hot-samples 5000 --idle-samples 100 --rps-ms 300
