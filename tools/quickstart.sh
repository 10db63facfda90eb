#!/bin/sh
# The README's first command: install what is missing, build (which also makes the built-in
# default model, build/models/tiny.gguf: the model tool's tiny preset), start bitnetd with
# the cpu backend on it on a private socket, show what it serves and a few generations from
# concurrent clients, stop it.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
make -j"$(nproc)" all
sock="${TMPDIR:-/tmp}/bitnetd-quickstart-$$.sock"
build/bitnetd --socket "$sock" --backend cpu --model build/models/tiny.gguf --log-level warn &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
i=0
until build/bitnet-cli --socket "$sock" info >/dev/null 2>&1; do
	i=$((i + 1)); [ $i -lt 100 ] || { echo "bitnetd did not start" >&2; exit 1; }
	sleep 0.05
done
echo "== bitnet-cli info"
build/bitnet-cli --socket "$sock" info
echo "== four clients at once, 8 greedy tokens each (a real forward pass of a random model)"
clients=""
for p in "1 2 3" "10 20 30 40" "7 7 7" "100"; do
	( out=$(build/bitnet-cli --socket "$sock" generate --ids "$p" --max-tokens 8)
	  echo "prompt [$p] -> $out" ) &
	clients="$clients $!"
done
for c in $clients; do wait "$c"; done
echo "== transport benchmark (short run, its own daemon)"
build/bitnet-cli bench --start-daemon build/bitnetd --hot-samples 5000 --idle-samples 100 --rps-ms 300
