#!/bin/sh
# Installs the Debian packages bitnetd needs to build and test, only those missing.
# Used by the README's commands and by .ci/run, so CI cannot pass on a hand-installed machine
# while a fresh one fails.
set -eu
PKGS="gcc g++ make pkg-config groff-base man-db liburing-dev libpcre2-dev libjansson-dev libxxhash-dev check libsubunit-dev libopenblas-serial-dev python3 python3-pytest systemd"
missing=""
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086 # the package list is meant to split into words
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
