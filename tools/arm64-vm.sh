#!/bin/sh
# tools/arm64-vm.sh — make check-arm64-vm: the aarch64 build's daemon, client, gateway and
# transport suites in an emulated arm64 machine (qemu-system-aarch64 -M virt, QEMU's "max" CPU),
# where io_uring, futexes across processes, memfds and sockets are a real Linux kernel's:
# Debian's arm64 kernel, with busybox as its first process. The machine sees, read-only over
# 9p, the arm64 sysroot (its /lib and /usr: the C library and the libraries the build links),
# this checkout (with the cross build in it, at the same path as here) and the test models;
# /tmp, /run and /dev/shm are its own memory.
#
# Environment: BUILD (the cross build, build-aarch64), SYSROOT (ARM64_SYSROOT), VM_KIT (what
# tools/arm64-sysroot.sh --vm made: the kernel, its 9p modules, busybox), QEMU_SYSTEM
# (qemu-system-aarch64), VM_CPUS (2), VM_MEMORY (3G), VM_SUITES (the list below),
# VM_TIME_SCALE (20: the suites' $BITNET_TEST_TIME_SCALE in the machine, below),
# BITNET_TEST_MODELS (shared with the machine when set). The suites' output comes through the
# machine's console; the exit status is theirs.
set -eu
BUILD=${BUILD:-build-aarch64}
QEMU_SYSTEM=${QEMU_SYSTEM:-qemu-system-aarch64}
: "${SYSROOT:?SYSROOT must name the arm64 sysroot (Makefile: ARM64_SYSROOT)}"
: "${VM_KIT:?VM_KIT must name the kernel and busybox (tools/arm64-sysroot.sh --vm DIR)}"
command -v "$QEMU_SYSTEM" >/dev/null 2>&1 || {
	echo "check-arm64-vm: $QEMU_SYSTEM is not installed (Debian: qemu-system-arm; tools/install-deps.sh)" >&2
	exit 1
}
command -v cpio >/dev/null 2>&1 || { echo "check-arm64-vm: cpio is not installed (Debian: cpio)" >&2; exit 1; }
kernel=$(ls "$VM_KIT"/boot/vmlinuz-* 2>/dev/null | head -1)
[ -n "$kernel" ] || { echo "check-arm64-vm: no kernel in $VM_KIT/boot (tools/arm64-sysroot.sh --vm $VM_KIT)" >&2; exit 1; }

# The suites whose every case needs a daemon, then the daemon cases of the others (TU_TAG_DAEMON).
SUITES=${VM_SUITES:-"test_transport test_serve test_gateway test_text test_hostile \
test_prefix_cache test_score"}
TAGGED=${VM_TAGGED:-"test_forward test_head_screen test_tokenizer test_wcache"}

repo=$(pwd)
vm="$BUILD/vm"
rm -rf "$vm"
mkdir -p "$vm/initramfs/bin" "$vm/initramfs/modules" "$vm/initramfs/etc"
cp "$VM_KIT/bin/busybox" "$vm/initramfs/bin/busybox"

# The 9p modules in an order that loads each after what it depends on (a module's .modinfo
# section names those: depmod's modules.dep is not in the package).
mods=$(dirname "$(find "$VM_KIT/lib/modules" -name 9p.ko | head -1)")/../..
depends_of() { tr '\0' '\n' < "$(find "$mods" -name "$1.ko" | head -1)" | sed -n 's/^depends=//p' | tr ',' ' '; }
order=""
add_module() {
	case " $order " in *" $1 "*) return ;; esac
	for dep in $(depends_of "$1"); do add_module "$dep"; done
	cp "$(find "$mods" -name "$1.ko" | head -1)" "$vm/initramfs/modules/"
	order="$order $1"
}
for m in virtio_pci 9pnet_virtio 9p; do add_module "$m"; done

printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' \
	> "$vm/initramfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$vm/initramfs/etc/group"
models=${BITNET_TEST_MODELS:-}
cat > "$vm/initramfs/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin
mkdir -p /proc /sys /dev /tmp /run /lib /usr /sysroot /root
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
for m in $order; do insmod /modules/\$m.ko || echo "insmod \$m failed"; done
share() { mkdir -p "\$2" && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 "\$1" "\$2"; }
share sysroot /sysroot
mount --bind /sysroot/lib /lib
mount --bind /sysroot/usr /usr
share repo "$repo"
[ -n "$models" ] && share models "$models"
ip link set lo up
cd "$repo"
sh "$vm/run.sh"
echo "BITNETD_VM_RESULT=\$?"
poweroff -f
EOF
chmod +x "$vm/initramfs/init"
(cd "$vm/initramfs" && find . | cpio -o -H newc --quiet) | gzip -1 > "$vm/initramfs.cpio.gz"

# What runs inside: make check's environment for this build, each suite's time, a summary.
cat > "$vm/run.sh" <<EOF
export BITNETD=$BUILD/bitnetd BITNET_GATEWAY=$BUILD/bitnet-gateway BN_HOSTILE=$BUILD/tests/bn-hostile
export BITNET_MODEL_TOOL=$BUILD/bitnet-model BITNET_DEFAULT_MODEL=$BUILD/models/tiny.gguf
export BITNET_CLI=$BUILD/bitnet-cli XDG_CACHE_HOME=/tmp/bitnet-test-cache CACHE_DIRECTORY=
export BITNET_TEST_EMULATED=1 HOME=/root
# Every wait of the suites (tests/timescale.h) and Check's per-case timeouts, which take the
# same factor, scaled as a sanitizer's are: the whole machine is emulated (TCG, the daemon's
# kernels and the kernel's own code alike 10-50 times slower than natively) on a host that
# may be busy with other work.
export BITNET_TEST_TIME_SCALE=${VM_TIME_SCALE:-20}
${CK_TIMEOUT_MULTIPLIER:+export CK_TIMEOUT_MULTIPLIER=$CK_TIMEOUT_MULTIPLIER}
${models:+export BITNET_TEST_MODELS=$models}
failed=0
summary=""
run() { # suite, then a label
	start=\$(date +%s)
	rc=0
	$BUILD/tests/\$1 || rc=\$?
	secs=\$((\$(date +%s) - start))
	case \$rc in 0) r=ok ;; 77) r=SKIP ;; *) r="FAILED (exit \$rc)"; failed=1 ;; esac
	summary="\$summary  \$(printf '%-50s %5ss  %s' "\$2" "\$secs" "\$r")
"
}
for t in $SUITES; do echo "== \$t (arm64 VM)"; run \$t \$t; done
for t in $TAGGED; do echo "== \$t, daemon cases (arm64 VM)"; CK_INCLUDE_TAGS=daemon run \$t "\$t (daemon cases)"; done
echo "== check-arm64-vm: time per suite (wall, in the VM)"
printf '%s' "\$summary"
exit \$failed
EOF

console="$vm/console.log"
start=$(date +%s)
echo "== booting $(basename "$kernel") on $QEMU_SYSTEM -M virt -cpu max,pauth-impdef=on (${VM_CPUS:-2} CPUs, ${VM_MEMORY:-3G})"
# pauth-impdef=on: max's pointer authentication with QEMU's cheap hash instead of QARMA, whose
# emulation costs Debian's kernel (built with pointer authentication) much of its speed; the
# suites do not test the hash.
# shellcheck disable=SC2046 # the models share is one optional group of words
"$QEMU_SYSTEM" -M virt -cpu max,pauth-impdef=on -smp "${VM_CPUS:-2}" -m "${VM_MEMORY:-3G}" -nographic -no-reboot -nic none \
	-kernel "$kernel" -initrd "$vm/initramfs.cpio.gz" \
	-append "console=ttyAMA0 panic=-1 quiet loglevel=3" \
	-fsdev local,id=sysroot,path="$SYSROOT",security_model=none,readonly=on \
	-device virtio-9p-pci,fsdev=sysroot,mount_tag=sysroot \
	-fsdev local,id=repo,path="$repo",security_model=none,readonly=on \
	-device virtio-9p-pci,fsdev=repo,mount_tag=repo \
	$(if [ -n "$models" ]; then echo "-fsdev local,id=models,path=$models,security_model=none,readonly=on -device virtio-9p-pci,fsdev=models,mount_tag=models"; fi) \
	< /dev/null 2>&1 | tee "$console"
echo "check-arm64-vm: $(($(date +%s) - start))s from boot to power-off"
result=$(sed -n 's/^BITNETD_VM_RESULT=\([0-9]*\).*/\1/p' "$console" | tail -1)
[ -n "$result" ] || { echo "check-arm64-vm: the machine stopped before the suites ended ($console)" >&2; exit 1; }
exit "$result"
