#!/bin/sh
# tools/arm64-sysroot.sh DIR — the arm64 (aarch64) sysroot of the cross build (Makefile:
# ARM64_SYSROOT): Debian's arm64 packages of the libraries bitnetd links, with their headers and
# the C library, unpacked into DIR. The compiler's --sysroot and pkg-config read it at build
# time, qemu-aarch64 -L at run time (make check-arm64).
# tools/arm64-sysroot.sh --vm DIR — what make check-arm64-vm boots: Debian's arm64 kernel (its
# image and the modules that mount a 9p share), and busybox-static for the VM's first process.
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
vm=0
if [ "${1:-}" = --vm ]; then
	vm=1
	shift
fi
root=${1:?usage: tools/arm64-sysroot.sh [--vm] DIR}
# The libraries of the Makefile's *_LIBS, and check's for the tests: the same -dev packages as
# tools/install-deps.sh installs for the machine itself, plus the C library's development files
# and the C++ runtime (the CUDA host harness's objects are C++). The VM's: the kernel (by its
# versioned name, which the metapackage linux-image-arm64 names) and busybox, without the
# packages they depend on (a kernel's are the tools that make an initramfs, here made by
# tools/arm64-vm.sh).
PKGS="libc6-dev linux-libc-dev libstdc++6 liburing-dev libpcre2-dev libjansson-dev libxxhash-dev \
libcurl4-openssl-dev libssl-dev libmicrohttpd-dev check libsubunit-dev libopenblas-serial-dev"
[ $vm = 1 ] && PKGS="linux-image-arm64 busybox-static"
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
if [ $vm = 1 ]; then
	kernel=$(apt-cache "$@" depends linux-image-arm64 | awk '/Depends: linux-image-/ { print $2; exit }')
	[ -n "$kernel" ] || { echo "arm64-sysroot: linux-image-arm64 names no kernel" >&2; exit 1; }
	(cd "$apt_dir/archives" && apt-get "$@" -qq download "$kernel" busybox-static)
else
	# shellcheck disable=SC2086 # the package list is meant to split into words
	apt-get "$@" -qq -y --download-only install $PKGS >/dev/null
fi
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
# The VM needs the modules of a 9p share over virtio (and modules.dep to order them): the
# kernel's other 400 MB of modules go.
if [ $vm = 1 ]; then
	for mods in "$root"/lib/modules/*/kernel; do
		find "$mods" -name '*.ko' ! -path '*/fs/9p/*' ! -path '*/fs/netfs/*' \
			! -path '*/fs/fscache/*' ! -path '*/net/9p/*' ! -path '*/drivers/virtio/*' -delete
	done
fi
echo "$stamp" > "$root/.bitnetd-sysroot"
echo "arm64-sysroot: ready ($(du -sh "$root" | cut -f1))"
