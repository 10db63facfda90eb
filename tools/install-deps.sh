#!/bin/sh
# Installs the Debian packages bitnetd needs to build and test, only those missing. With
# --arm64-vm, also what make check-arm64-vm needs (qemu-system-arm, cpio; not part of make
# check).
# Used by the README's commands and by .ci/run, so CI cannot pass on a hand-installed machine
# while a fresh one fails. python3-rfc3987 gives jsonschema's format checker its uri and iri
# checks (tests/grammar_oracle.py, which checks RFC 3986 itself without it).
set -eu
arm64_vm=0
[ "${1:-}" = --arm64-vm ] && arm64_vm=1
PKGS="gcc g++ make pkg-config groff-base man-db liburing-dev libpcre2-dev libjansson-dev libmicrohttpd-dev libxxhash-dev libcurl4-openssl-dev libssl-dev curl check libsubunit-dev libopenblas-serial-dev python3 python3-pytest python3-yaml python3-jsonschema python3-rfc3987 systemd"
missing=""
for p in $PKGS; do
	dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# Node.js and npm run the gateway's tests with the official OpenAI SDK (tests/gateway); a
# machine with Node.js from elsewhere (NodeSource, whose nodejs carries npm) needs nothing.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
# On x86-64, make check-arm64 cross-builds for aarch64 and runs the suites under qemu-user:
# the cross compilers and the emulator (binfmt is not needed: the tests call qemu-aarch64).
if [ "$(dpkg --print-architecture)" = amd64 ]; then
	vm_pkgs=""
	[ $arm64_vm = 1 ] && vm_pkgs="qemu-system-arm cpio"
	for p in gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user $vm_pkgs; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
fi
if [ -n "$missing" ]; then
	SUDO=""
	[ "$(id -u)" = 0 ] || SUDO=sudo
	echo "installing:$missing"
	$SUDO apt-get update -qq
	# shellcheck disable=SC2086 # the package list is meant to split into words
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
# The libraries the aarch64 build links, from Debian's arm64 packages, into the sysroot the
# Makefile's ARM64_SYSROOT names by default (once: a second run finds it made). As the user
# who builds, not root: it is that user's cache.
if [ "$(dpkg --print-architecture)" = amd64 ]; then
	"$(dirname "$0")/arm64-sysroot.sh" "${ARM64_SYSROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/bitnetd/arm64-sysroot}"
fi
