#!/bin/sh
# Installs the Debian packages bitnetd needs to build and test, only those missing.
# Used by the README's commands and by .ci/run, so CI cannot pass on a hand-installed machine
# while a fresh one fails. python3-rfc3987 gives jsonschema's format checker its uri and iri
# checks (tests/grammar_oracle.py, which checks RFC 3986 itself without it).
set -eu
PKGS="gcc g++ make pkg-config groff-base man-db liburing-dev libpcre2-dev libjansson-dev libmicrohttpd-dev libxxhash-dev libcurl4-openssl-dev libssl-dev curl check libsubunit-dev libopenblas-serial-dev python3 python3-pytest python3-yaml python3-jsonschema python3-rfc3987 systemd"
missing=""
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# Node.js and npm run the gateway's tests with the official OpenAI SDK (tests/gateway); a
# machine with Node.js from elsewhere (NodeSource, whose nodejs carries npm) needs nothing.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # the package list is meant to split into words
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
