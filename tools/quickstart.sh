#!/bin/sh
# The README's first command: install what is missing, build (which also makes the built-in
# default model, build/models/tiny.gguf: the model tool's tiny preset), start bitnetd with
# the cpu backend on it on a private socket, show what it serves, what eight concurrent clients
# get and their aggregate throughput, stop it.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
make -j"$(nproc)" all
sock="${TMPDIR:-/tmp}/bitnetd-quickstart-$$.sock"
# A cache directory of its own, so the first start here is a first start (bitnetd(8)
# --cache-dir; without the flag it is ~/.cache/bitnetd, or /var/cache/bitnetd under systemd).
cache=$(mktemp -d "${TMPDIR:-/tmp}/bitnetd-quickstart-cache.XXXXXX")
daemon=""
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true; rm -rf "$cache"' EXIT
# Starts the daemon and waits until `bitnet-cli info` answers; prints how long that took.
start_daemon() {
	t0=$(date +%s.%N)
	build/bitnetd --socket "$sock" --backend cpu --model build/models/tiny.gguf \
		--cache-dir "$cache" --log-level warn &
	daemon=$!
	i=0
	until build/bitnet-cli --socket "$sock" info >/dev/null 2>&1; do
		i=$((i + 1)); [ $i -lt 200 ] || { echo "bitnetd did not start" >&2; exit 1; }
		sleep 0.02
	done
	t1=$(date +%s.%N)
	awk -v s="$t0" -v e="$t1" 'BEGIN { printf "ready in %.2f s (start to `bitnet-cli info` answering)\n", e - s }'
}
echo "== start"
start_daemon
echo "== bitnet-cli info"
build/bitnet-cli --socket "$sock" info
echo "== eight clients at once, 32 tokens each: four greedy, four sampled with seeds"
echo "   (a real forward pass of the tiny random model: its text is noise, its ids are exact)"
start=$(date +%s.%N)
clients=""
for i in 1 2 3 4 5 6 7 8; do
	if [ $((i % 2)) -eq 0 ]; then
		sampling="--temperature 0.8 --top-p 0.9 --seed $i"
	else
		sampling=""
	fi
	# shellcheck disable=SC2086 # $sampling is a list of options
	( out=$(build/bitnet-cli --socket "$sock" generate --ids "1 $((i * 7)) $((i * 11))" \
		--max-tokens 32 --ignore-eos $sampling 2>/dev/null)
	  echo "client $i [${sampling:-greedy}] -> $out" ) &
	clients="$clients $!"
done
for c in $clients; do wait "$c"; done
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN { printf "aggregate: 8 clients x 32 tokens = 256 tokens in %.2f s = %.0f tokens/s\n", e - s, 256 / (e - s) }'
echo "== what the scheduler did (bitnet-cli stats, excerpt)"
build/bitnet-cli --socket "$sock" stats | awk '
	/^bitnetd_batch_rows_sum / { rows = $2 } /^bitnetd_batch_rows_count / { steps = $2 }
	/^bitnetd_tokens_generated_total / { tokens = $2 } /^bitnetd_kv_blocks_total / { kv = $2 }
	/^bitnetd_time_to_first_token_seconds_sum / { ttft = $2 }
	/^bitnetd_time_to_first_token_seconds_count / { n = $2 }
	END { printf "steps=%d mean_batch_rows=%.1f tokens=%d kv_blocks=%d mean_ttft_ms=%.1f\n",
		  steps, steps ? rows / steps : 0, tokens, kv, n ? 1000 * ttft / n : 0 }'
echo "== a restart: the weights come from the packed-weight cache the first start wrote"
# (written after the first start was ready: waited for, should the clients have been quicker)
i=0
until build/bitnet-cli --socket "$sock" info 2>/dev/null | grep -q '^weights_cache=built$'; do
	i=$((i + 1)); [ $i -lt 500 ] || { echo "the weights cache was not written" >&2; exit 1; }
	sleep 0.02
done
kill "$daemon"; wait "$daemon" 2>/dev/null || true
start_daemon
build/bitnet-cli --socket "$sock" info | grep -E '^(load_ms|weights_cache)='
echo "== transport benchmark (short run, its own daemon)"
build/bitnet-cli bench --start-daemon build/bitnetd --hot-samples 5000 --idle-samples 100 --rps-ms 300
