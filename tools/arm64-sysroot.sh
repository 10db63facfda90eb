#!/bin/sh
# tools/arm64-sysroot.sh DIR — the arm64 (aarch64) sysroot of the cross build (Makefile:
# ARM64_SYSROOT): Debian's arm64 packages of the libraries bitnetd links, with their headers and
# the C library, unpacked into DIR. The compiler's --sysroot and pkg-config read it at build
# time, qemu-aarch64 -L at run time (make check-arm64).
#
# apt resolves and downloads the packages with a state of its own under DIR.apt (arm64 as its
# only architecture, nothing installed): the machine's dpkg, its architectures and its apt
# lists are left alone, so it runs on a Debian machine that may not add a foreign architecture,
# and without root. dpkg-deb -x unpacks each package; nothing is configured or run.
#
# Done once: DIR/.bitnetd-sysroot records the suite and the package list, and a second run with
# the same ones changes nothing. BITNET_DEBIAN_MIRROR overrides the mirror (default
# http://deb.debian.org/debian; the security archive is deb.debian.org/debian-security).
set -eu
root=${1:?usage: tools/arm64-sysroot.sh DIR}
# The libraries of the Makefile's *_LIBS, and check's for the tests: the same -dev packages as
# tools/install-deps.sh installs for the machine itself, plus the C library's development files
# and the C++ runtime (the CUDA host harness's objects are C++).
PKGS="libc6-dev linux-libc-dev libstdc++6 liburing-dev libpcre2-dev libjansson-dev libxxhash-dev \
libcurl4-openssl-dev libssl-dev libmicrohttpd-dev check libsubunit-dev libopenblas-serial-dev"
suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
suite=${suite:-bookworm}
mirror=${BITNET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
stamp="suite=$suite packages=$PKGS"
if [ -f "$root/.bitnetd-sysroot" ] && [ "$(cat "$root/.bitnetd-sysroot")" = "$stamp" ]; then
	exit 0
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { echo "arm64-sysroot: $keyring is missing (Debian: debian-archive-keyring)" >&2; exit 1; }

apt_dir="$root.apt"
rm -rf "$root" "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/etc/preferences.d" \
	"$apt_dir/etc/apt.conf.d"
: > "$apt_dir/status"
cat > "$apt_dir/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $suite main
deb [signed-by=$keyring] $mirror $suite-updates main
deb [signed-by=$keyring] ${mirror%/debian}/debian-security $suite-security main
EOF
# Every path apt writes or reads its configuration from is under apt_dir; the sandbox user
# is whoever runs this (apt drops to _apt only as root, and then cannot write here).
set -- -o Dir::Etc::SourceList="$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
	-o Dir::Etc::Parts="$apt_dir/etc/apt.conf.d" -o Dir::Etc::PreferencesParts="$apt_dir/etc/preferences.d" \
	-o Dir::State="$apt_dir" -o Dir::State::Lists="$apt_dir/lists" \
	-o Dir::State::status="$apt_dir/status" -o Dir::Cache="$apt_dir" \
	-o Dir::Cache::Archives="$apt_dir/archives" -o Debug::NoLocking=1 \
	-o APT::Sandbox::User="$(id -un)" -o APT::Architecture=arm64 -o APT::Architectures::=arm64 \
	-o APT::Install-Recommends=0 -o Acquire::Languages=none
echo "arm64-sysroot: resolving and downloading $PKGS (arm64, $suite) into $root"
apt-get "$@" -qq update
# shellcheck disable=SC2086 # the package list is meant to split into words
apt-get "$@" -qq -y --download-only install $PKGS >/dev/null
mkdir -p "$root"
for deb in "$apt_dir"/archives/*.deb; do
	dpkg-deb -x "$deb" "$root"
done
# Links to absolute paths (libm.so -> /lib/aarch64-linux-gnu/libm.so.6) would name the build
# machine's files: made relative, they point inside the sysroot wherever it lies.
find "$root" -type l -lname '/*' | while read -r link; do
	target=$(readlink "$link")
	ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$root$target")" "$link"
done
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale" "$apt_dir"
echo "$stamp" > "$root/.bitnetd-sysroot"
echo "arm64-sysroot: ready ($(du -sh "$root" | cut -f1))"
