#!/bin/sh
# installed_client.sh - the C library as a user installs it (issue 24).
#
# `make install` into a temporary prefix, then, with nothing from the source tree:
#   - the README's C example (the first ```c block under "## Using it from C", read from
#     README.md itself so the test fails when the README drifts) is built with
#     `pkg-config --cflags --libs bitnet-client` alone, and the headers and library it used
#     must be the installed ones;
#   - it runs against the installed bitnetd (loopback backend, private socket, found through
#     $BITNETD_SOCKET as the example's comment says) and must print on one line the ids the
#     installed bitnet-cli gets for the same request: the loopback backend's tokens are a
#     function of the prompt alone, sampling or not (shm/PROTOCOL.md §13);
#   - the same with `pkg-config --static` and -static (the whole libbitnet-client.a linked),
#     where libpcre2-8.a, libc.a and libm.a exist;
#   - man finds every installed page, the .so redirects included;
#   - `make uninstall` removes what install put there (the config file in etc/ stays).
# Run by `make check-install` (MAKE set to the make that runs it), or alone from anywhere.
# Exit status: 0 pass, 1 fail, 77 skip (no pkg-config).
set -eu

root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
make_cmd=${MAKE:-make}
cc_cmd=${CC:-cc}
# Only what pkg-config says may find the headers and the library.
unset CPATH C_INCLUDE_PATH LIBRARY_PATH LD_LIBRARY_PATH PKG_CONFIG_SYSROOT_DIR || true

if ! command -v pkg-config >/dev/null 2>&1; then
	echo "SKIP: pkg-config is not installed"
	exit 77
fi

tmp=$(mktemp -d)
prefix=$tmp/prefix
sock=$tmp/bitnetd.sock
daemon_pid=
cleanup() {
	if [ -n "$daemon_pid" ]; then
		kill "$daemon_pid" 2>/dev/null || true
		wait "$daemon_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
	echo "FAIL: $*"
	exit 1
}
ok() {
	echo "ok: $*"
}

# Every directory under the prefix, so nothing is written outside it (SYSCONFDIR defaults to
# /etc) and no variable given to an outer make leaks in through MAKEFLAGS.
dirs="DESTDIR= PREFIX=$prefix BINDIR=$prefix/bin LIBDIR=$prefix/lib INCDIR=$prefix/include
	MANDIR=$prefix/share/man UNITDIR=$prefix/lib/systemd/system SYSCONFDIR=$prefix/etc"

# ------------------------------------------------------------------------------------ install
# shellcheck disable=SC2086 # $dirs is a list of words
if ! $make_cmd -C "$root" --no-print-directory install $dirs >"$tmp/install.log" 2>&1; then
	cat "$tmp/install.log"
	fail "make install PREFIX=$prefix"
fi
ok "make install PREFIX=<tmp>/prefix"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pc_cflags=$(pkg-config --cflags bitnet-client) || fail "pkg-config --cflags bitnet-client"
pc_libs=$(pkg-config --libs bitnet-client) || fail "pkg-config --libs bitnet-client"
pc_libdir=$(pkg-config --variable=libdir bitnet-client)
[ "$pc_libdir" = "$prefix/lib" ] || fail "the installed .pc says libdir=$pc_libdir, not $prefix/lib"
ok "pkg-config --cflags --libs bitnet-client: $pc_cflags $pc_libs" | sed "s|$tmp|<tmp>|g"

# ------------------------------------------------------------------------ the README example
example=$tmp/hello.c
awk '/^## Using it from C/ { under = 1; next }
     under && /^## / { exit }
     under && !inside && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$root/README.md" >"$example"
[ -s "$example" ] || fail "README.md has no \`\`\`c block under \"## Using it from C\""
# The oracle below asks for the same request: a changed example must change it too.
if ! grep -q 'prompt\[\] = { 1, 450, 4996 }' "$example" ||
	! grep -q '\.max_tokens = 64' "$example"; then
	fail "the README example's prompt or max_tokens changed: update the bitnet-cli request in $0"
fi

build() { # output, extra flags...
	out=$1
	shift
	if ! $cc_cmd -std=gnu11 -Wall -Wextra -Werror "$example" -o "$out" "$@" >"$tmp/cc.log" 2>&1; then
		cat "$tmp/cc.log"
		fail "cc hello.c $*"
	fi
}
# shellcheck disable=SC2086 # pkg-config's flags are words
build "$tmp/hello" $pc_cflags $pc_libs -Wl,-rpath,"$pc_libdir"
ok "README example built with pkg-config's flags alone"

# The headers it read and the library it loads must be the installed ones, not a copy in a
# directory the compiler or the loader searches anyway (/usr/local after an earlier install).
# shellcheck disable=SC2086
$cc_cmd -std=gnu11 -M "$example" $pc_cflags >"$tmp/deps" || fail "cc -M hello.c"
for h in bitnet_client.h bitnet_shm.h; do
	grep -q "$prefix/include/bitnet/$h" "$tmp/deps" ||
		fail "hello.c did not include $prefix/include/bitnet/$h: $(tr -s ' \\\n' ' ' <"$tmp/deps")"
done
if command -v ldd >/dev/null 2>&1; then
	ldd "$tmp/hello" | grep -q "libbitnet-client.so.1 => $prefix/lib/" ||
		fail "hello loads libbitnet-client from elsewhere: $(ldd "$tmp/hello" | grep bitnet)"
fi
ok "it read include/bitnet/{bitnet_client,bitnet_shm}.h and loads lib/libbitnet-client.so.1 of the prefix"

# The header says extern "C": a C++ program must be able to include it too.
if command -v c++ >/dev/null 2>&1; then
	printf '#include <bitnet/bitnet_client.h>\nint main() { return 0; }\n' >"$tmp/hello.cc"
	# shellcheck disable=SC2086
	c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only "$tmp/hello.cc" $pc_cflags \
		>"$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; fail "c++ cannot include the header"; }
	ok "a C++ program includes <bitnet/bitnet_client.h>"
fi

# --------------------------------------------------------------------------- against a daemon
"$prefix/bin/bitnetd" --socket "$sock" --backend loopback --log-level warn \
	>"$tmp/bitnetd.log" 2>&1 &
daemon_pid=$!
tries=0
start_tries=$(python3 "$root/tests/timescale.py" "$prefix/bin/bitnetd" 200) # 10 s, scaled
until "$prefix/bin/bitnet-cli" --socket "$sock" info >/dev/null 2>&1; do
	tries=$((tries + 1))
	if [ $tries -gt "$start_tries" ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
		cat "$tmp/bitnetd.log"
		fail "bitnetd --backend loopback did not answer on $sock"
	fi
	sleep 0.05
done

"$prefix/bin/bitnet-cli" --socket "$sock" generate --ids "1 450 4996" --max-tokens 64 \
	--temperature 0.8 --top-p 0.95 --seed 42 >"$tmp/want" 2>"$tmp/want.err" ||
	fail "bitnet-cli generate: $(cat "$tmp/want.err")"
want=$(tr -s ' \n' '  ' <"$tmp/want" | sed 's/^ //; s/ $//')
[ -n "$want" ] || fail "bitnet-cli generate printed no ids"

run_example() { # program, label
	rc=0
	BITNETD_SOCKET=$sock "$1" >"$tmp/got" 2>"$tmp/got.err" || rc=$?
	[ $rc = 0 ] || fail "$2 exited $rc: $(cat "$tmp/got.err")"
	[ "$(wc -l <"$tmp/got")" -eq 1 ] || fail "$2 printed $(wc -l <"$tmp/got") lines, not one"
	got=$(tr -s ' \n' '  ' <"$tmp/got" | sed 's/^ //; s/ $//')
	[ "$got" = "$want" ] || fail "$2 printed
  $got
bitnet-cli generate printed
  $want"
	ok "$2 printed the $(echo "$got" | wc -w) ids bitnet-cli gets for the same request"
}
run_example "$tmp/hello" "README example"

# ------------------------------------------------------------------------------------- static
static_libs=$(pkg-config --static --libs bitnet-client) || fail "pkg-config --static --libs"
missing=
for a in libpcre2-8.a libc.a libm.a; do
	case $($cc_cmd -print-file-name=$a) in
	/*) ;;
	*) missing="$missing $a" ;;
	esac
done
if [ -n "$missing" ]; then
	echo "note: no$missing on this machine: the static link is not tried"
else
	# The whole archive is linked, so a library the .pc forgets fails here even when only a
	# call the example does not make needs it (libm: bn_classify).
	# shellcheck disable=SC2086
	build "$tmp/hello-static" -static $pc_cflags \
		-Wl,--whole-archive "$pc_libdir/libbitnet-client.a" -Wl,--no-whole-archive $static_libs
	run_example "$tmp/hello-static" "README example (-static, pkg-config --static)"
fi

kill "$daemon_pid"
wait "$daemon_pid" || fail "bitnetd exited $? on SIGTERM: $(cat "$tmp/bitnetd.log")"
daemon_pid=

# ---------------------------------------------------------------------------------- man pages
[ -d "$root/man/man3" ] || fail "no man/man3 in the source tree"
(cd "$root/man/man3" && ls) >"$tmp/man.src"
(cd "$prefix/share/man/man3" && ls) >"$tmp/man.inst" || fail "no share/man/man3 installed"
cmp -s "$tmp/man.src" "$tmp/man.inst" ||
	fail "installed man3 pages differ from man/man3: $(diff "$tmp/man.src" "$tmp/man.inst" | tr '\n' ' ')"
if command -v man >/dev/null 2>&1; then
	sed 's/\.3$//' "$tmp/man.src" | while read -r page; do
		MANPATH=$prefix/share/man MANWIDTH=80 man -P cat 3 "$page" >"$tmp/page" 2>&1 ||
			fail "man 3 $page (MANPATH=<prefix>/share/man): $(head -3 "$tmp/page")"
		grep -q "$page" "$tmp/page" || fail "man 3 $page shows a page without its name"
	done || exit 1 # the loop's fail ended only its subshell
	ok "man 3 finds each of the $(wc -l <"$tmp/man.src") installed pages"
else
	echo "note: man is not installed: the installed pages are not opened"
fi

# ---------------------------------------------------------------------------------- uninstall
# shellcheck disable=SC2086
if ! $make_cmd -C "$root" --no-print-directory uninstall $dirs >"$tmp/uninstall.log" 2>&1; then
	cat "$tmp/uninstall.log"
	fail "make uninstall PREFIX=$prefix"
fi
# The configuration files are the administrator's: uninstall leaves them.
left=$(cd "$prefix" && find . ! -type d ! -path ./etc/default/bitnetd \
	! -path ./etc/default/bitnet-gateway | sort)
[ -z "$left" ] || fail "make uninstall left: $(echo "$left" | tr '\n' ' ')"
ok "make uninstall removed every installed file (etc/default/bitnetd and bitnet-gateway stay)"

echo "PASS"
