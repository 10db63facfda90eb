#!/bin/sh
# tools/check-arm64.sh — make check-arm64's emulated part: the aarch64 build's in-process test
# suites under qemu-user, on two CPU models, with the kernel variants forced one by one.
#
#   cortex-a72  ARMv8.0 (Raspberry Pi 4): NEON only. Forcing dotprod or i8mm must skip (exit
#               77); a feature check that let their instructions run would die of SIGILL here.
#   max         every extension QEMU models (dotprod, i8mm, SVE...): the default table is
#               i8mm's; dotprod is forced (i8mm forced is the default, which
#               tu_forced_kernels_runnable skips; neon end to end is the Cortex-A72's run).
#
# qemu-user has no io_uring, so the test cases that start a daemon are left out
# (CK_EXCLUDE_TAGS=daemon; make check-arm64-vm runs them in a VM). A suite that runs a tool
# (the model writer) runs it through a host script that starts it under the same emulator and
# CPU model. Under the emulator the oracle suites check fewer samples (BITNET_TEST_EMULATED:
# testutil.h's tu_emulated). The two CPU models' runs go side by side, one per core; each
# run's wall and CPU seconds are printed (CPU seconds, from `times`, are what a quiet machine
# would take), and the total at the end.
#
# Environment: BUILD (the cross build, build-aarch64), SYSROOT (ARM64_SYSROOT), QEMU
# (qemu-aarch64), ARM64_CPU_SUITES, ARM64_A72_SUITES, ARM64_MAX_SUITES, ARM64_VARIANT_SUITES
# (override the lists below).
set -u
BUILD=${BUILD:-build-aarch64}
QEMU=${QEMU:-qemu-aarch64}
: "${SYSROOT:?SYSROOT must name the arm64 sysroot (Makefile: ARM64_SYSROOT)}"
command -v "$QEMU" >/dev/null 2>&1 || {
	echo "check-arm64: $QEMU is not installed (Debian: qemu-user; tools/install-deps.sh)" >&2
	exit 1
}

# The suites whose code depends on the CPU's features (the kernels, the forward pass, the head
# screen) run on both CPU models, each with its default table; the others, whose code is the
# same C on every aarch64 CPU (the model and its files, sampling, the tokenizers, the grammar
# engine, the ABI), run once, split between the two streams.
CPU_SUITES=${ARM64_CPU_SUITES:-"test_kernels test_forward test_head_screen"}
# (Split so that the streams take about the same CPU time: max's has the forced runs.)
A72_SUITES=${ARM64_A72_SUITES:-"test_abi test_quant test_gguf test_model test_wcache test_modeltool \
test_sample test_grammar"}
MAX_SUITES=${ARM64_MAX_SUITES:-"test_tokenizer test_bpe test_structured_oracle test_kvpool test_stats \
test_grammar_walks"}
# With a variant forced: on the Cortex-A72 dotprod and i8mm must skip (test_kernels would die of
# SIGILL had the feature check let them run); on max dotprod runs the forward pass and the head
# screen end to end, the one table no CPU model here takes by default (neon is the
# Cortex-A72's, i8mm max's; test_kernels runs every variant the CPU has in one run).
VARIANT_SUITES=${ARM64_VARIANT_SUITES:-"test_forward test_head_screen"}

wrappers="$BUILD/qemu"
mkdir -p "$wrappers"
# The tools the suites start, each under the emulator (QEMU_CPU and QEMU_LD_PREFIX come from
# the environment the suite passes on).
for tool in bitnet-model bitnet-cli; do
	printf '#!/bin/sh\nexec %s %s "$@"\n' "$QEMU" "$(realpath "$BUILD/$tool")" > "$wrappers/$tool"
	chmod +x "$wrappers/$tool"
done

# CPU seconds (user + system) of this shell's finished children so far: `times` run by the
# shell itself (in a command substitution it would report the subshell's), then read back.
child_cpu() {
	awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.1f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$1"
}

# run CPU VARIANT SUITE: one suite on one CPU model, VARIANT forced ("" for the default); its
# line (wall and CPU seconds) goes to the stream's summary, and a failure to its failed file.
run() {
	cpu=$1 variant=$2 suite=$3
	label="$suite on $cpu${variant:+ (BITNET_KERNELS=$variant)}"
	echo "== $label"
	start=$(date +%s)
	times > "$wrappers/$cpu.times"
	cpu0=$(child_cpu "$wrappers/$cpu.times")
	rc=0
	env QEMU_CPU="$cpu" QEMU_LD_PREFIX="$SYSROOT" CK_EXCLUDE_TAGS=daemon \
		CK_TIMEOUT_MULTIPLIER="${CK_TIMEOUT_MULTIPLIER:-20}" BITNET_TEST_EMULATED=1 \
		BITNET_KERNELS="$variant" BITNET_MODEL_TOOL="$wrappers/bitnet-model" \
		BITNET_CLI="$wrappers/bitnet-cli" BITNET_DEFAULT_MODEL="$BUILD/models/tiny.gguf" \
		XDG_CACHE_HOME="/tmp/bitnet-test-cache-arm64-$cpu" CACHE_DIRECTORY= \
		"$QEMU" "$BUILD/tests/$suite" 2>&1 || rc=$?
	secs=$(($(date +%s) - start))
	times > "$wrappers/$cpu.times"
	cpu_secs=$(awk -v a="$cpu0" -v b="$(child_cpu "$wrappers/$cpu.times")" 'BEGIN { printf "%.0f", b - a }')
	case $rc in
	0) result=ok ;;
	77) result=SKIP; echo "SKIP: $label" ;;
	*) result="FAILED (exit $rc)"; echo "$label" >> "$wrappers/$cpu.failed" ;;
	esac
	printf '  %-60s %5ss %5ss  %s\n' "$label" "$secs" "$cpu_secs" "$result" >> "$wrappers/$cpu.summary"
}

# The Cortex-A72's runs, then max's: two streams side by side, one per core, each into its log.
stream_a72() {
	for suite in $CPU_SUITES $A72_SUITES; do
		run cortex-a72 "" "$suite"
	done
	for variant in dotprod i8mm; do
		for suite in test_kernels $VARIANT_SUITES; do
			run cortex-a72 "$variant" "$suite"
		done
	done
}

stream_max() {
	for suite in $CPU_SUITES $MAX_SUITES; do
		run max "" "$suite"
	done
	for variant in dotprod i8mm; do
		for suite in $VARIANT_SUITES; do
			run max "$variant" "$suite"
		done
	done
}

total_start=$(date +%s)
rm -f "$wrappers"/*.summary "$wrappers"/*.failed "$wrappers"/*.log
stream_a72 > "$wrappers/cortex-a72.log" 2>&1 &
a72=$!
stream_max > "$wrappers/max.log" 2>&1 &
max=$!
wait $a72 $max
for cpu in cortex-a72 max; do
	cat "$wrappers/$cpu.log"
done
echo "== check-arm64: time per run: wall seconds (two runs at a time, this machine's load included), CPU seconds"
cat "$wrappers/cortex-a72.summary" "$wrappers/max.summary"
echo "  total $(($(date +%s) - total_start))s"
if [ -e "$wrappers/cortex-a72.failed" ] || [ -e "$wrappers/max.failed" ]; then
	echo "check-arm64: FAILED:"
	cat "$wrappers"/*.failed
	exit 1
fi
