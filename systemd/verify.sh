#!/bin/sh
# verify.sh - check bitnetd's systemd units without installing them.
#
# Substitutes the @BINDIR@/@SYSCONFDIR@ placeholders into a temporary copy
# (with a stand-in executable at the ExecStart= path, which verify checks),
# then runs:
#   systemd-analyze verify           - no errors or warnings about our units
#   systemd-analyze security --offline - exposure at most 2.5 (override with
#                                        BITNETD_MAX_EXPOSURE)
# Exit status: 0 pass, 1 fail, 77 skip (no systemd-analyze, or one older
# than systemd 250, which lacks `security --offline`).
set -eu

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: systemd-analyze is not installed"
	exit 77
fi
if ! systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
	echo "SKIP: systemd-analyze has no 'security --offline' (needs systemd >= 250)"
	exit 77
fi

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
max_exposure=${BITNETD_MAX_EXPOSURE:-2.5}
export SYSTEMD_COLORS=0 SYSTEMD_PAGER=cat SYSTEMD_LOG_COLOR=0

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir "$tmp/bin" "$tmp/units"

# Stand-in for the daemon: verify only checks that ExecStart= is executable.
printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/bitnetd"
chmod 755 "$tmp/bin/bitnetd"
cp "$tmp/bin/bitnetd" "$tmp/bin/bitnet-gateway"

for f in bitnetd.service bitnetd.socket bitnet-gateway.service; do
	sed -e "s|@BINDIR@|$tmp/bin|g" -e "s|@SYSCONFDIR@|/etc|g" \
		"$here/$f" >"$tmp/units/$f"
done

fail=0

# Every placeholder must be one the install step knows about.
if grep -n '@[A-Za-z_]*@' "$tmp/units/bitnetd.service" "$tmp/units/bitnetd.socket" \
	"$tmp/units/bitnet-gateway.service"; then
	echo "FAIL: unsubstituted placeholder(s) above"
	fail=1
fi

# The env file must keep its documented default.
if ! grep -q '^BITNETD_OPTS="--backend loopback"$' "$here/bitnetd.env"; then
	echo "FAIL: bitnetd.env lacks the default BITNETD_OPTS=\"--backend loopback\""
	fail=1
fi

echo "== systemd-analyze verify --man=no --recursive-errors=no bitnetd.socket bitnetd.service bitnet-gateway.service"
rc=0
systemd-analyze verify --man=no --recursive-errors=no \
	"$tmp/units/bitnetd.socket" "$tmp/units/bitnetd.service" \
	"$tmp/units/bitnet-gateway.service" \
	>"$tmp/verify.out" 2>&1 || rc=$?
cat "$tmp/verify.out"
if [ "$rc" -ne 0 ]; then
	echo "FAIL: systemd-analyze verify exited $rc"
	fail=1
fi
# Messages about other units on this host are reported, not failed on.
if grep -e 'bitnetd' -e 'bitnet-gateway' -e "$tmp" "$tmp/verify.out" >/dev/null; then
	echo "FAIL: systemd-analyze verify has something to say about our units"
	fail=1
elif [ -s "$tmp/verify.out" ]; then
	echo "note: the messages above are about other units on this host"
fi

# The exposure of one unit against a ceiling.
security() {
	unit=$1 ceiling=$2
	echo "== systemd-analyze security --offline=true $unit"
	rc=0
	systemd-analyze security --no-pager --offline=true \
		"$tmp/units/$unit" >"$tmp/security.out" 2>&1 || rc=$?
	if [ "$rc" -ne 0 ]; then
		cat "$tmp/security.out"
		echo "FAIL: systemd-analyze security exited $rc"
		exit 1
	fi
	grep -v '^✓' "$tmp/security.out" || true
	if grep "$tmp" "$tmp/security.out" >/dev/null; then
		echo "FAIL: systemd-analyze security has something to say about $unit"
		fail=1
	fi
	exposure=$(sed -n "s/.*Overall exposure level for $unit: *\\([0-9][0-9.]*\\).*/\\1/p" \
		"$tmp/security.out")
	if [ -z "$exposure" ]; then
		echo "FAIL: no exposure level in the security report of $unit"
		exit 1
	fi
	if awk -v e="$exposure" -v m="$ceiling" 'BEGIN { exit !(e + 0 <= m + 0) }'; then
		echo "$unit: exposure $exposure <= $ceiling: ok"
	else
		echo "FAIL: $unit: exposure $exposure > $ceiling"
		fail=1
	fi
}
security bitnetd.service "$max_exposure"
# The gateway listens on IP: it cannot have bitnetd's PrivateNetwork=yes.
security bitnet-gateway.service "${GATEWAY_MAX_EXPOSURE:-1.5}"

if [ "$fail" -ne 0 ]; then
	exit 1
fi
echo "PASS"
