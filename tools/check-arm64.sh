#!/bin/sh
# tools/check-arm64.sh — make check-arm64's emulated part: the aarch64 build's in-process test
# suites under qemu-user, on two CPU models, with the kernel variants forced one by one.
#
#   cortex-a72  ARMv8.0 (Raspberry Pi 4): NEON only. Forcing dotprod or i8mm must skip (exit
#               77); a feature check that let their instructions run would die of SIGILL here.
#   max         every extension QEMU models (dotprod, i8mm, SVE...): the default table is
#               i8mm's; neon and dotprod are forced in turn (i8mm forced is the default, which
#               tu_forced_kernels_runnable skips).
#
# qemu-user has no io_uring, so the test cases that start a daemon are left out
# (CK_EXCLUDE_TAGS=daemon; make check-arm64-vm runs them in a VM). A suite that runs a tool
# (the model writer) runs it through a host script that starts it under the same emulator and
# CPU model. Under the emulator the oracle suites check fewer samples (BITNET_TEST_EMULATED:
# testutil.h's tu_emulated). The two CPU models' runs go side by side, one per core; each
# run's wall time is printed, and the total at the end.
#
# Environment: BUILD (the cross build, build-aarch64), SYSROOT (ARM64_SYSROOT), QEMU
# (qemu-aarch64), ARM64_SUITES and ARM64_VARIANT_SUITES (override the lists below).
set -u
BUILD=${BUILD:-build-aarch64}
QEMU=${QEMU:-qemu-aarch64}
: "${SYSROOT:?SYSROOT must name the arm64 sysroot (Makefile: ARM64_SYSROOT)}"
command -v "$QEMU" >/dev/null 2>&1 || {
	echo "check-arm64: $QEMU is not installed (Debian: qemu-user; tools/install-deps.sh)" >&2
	exit 1
}

# Everything whose code runs in the test process: the kernels and the forward pass, the model
# and its files, sampling, the tokenizers, the grammar engine, the ABI.
SUITES=${ARM64_SUITES:-"test_abi test_kernels test_quant test_gguf test_model test_forward \
test_head_screen test_sample test_tokenizer test_bpe test_grammar test_grammar_walks \
test_structured_oracle test_kvpool test_stats test_wcache test_modeltool"}
# The suites whose code takes the table bn_kernels_select(NULL) gives (the forward pass, the
# head screen): run again with each variant forced. test_kernels runs every variant the CPU
# has in one run (and is forced only to see the forced variants it lacks skip).
VARIANT_SUITES=${ARM64_VARIANT_SUITES:-"test_forward test_head_screen"}

wrappers="$BUILD/qemu"
mkdir -p "$wrappers"
# The tools the suites start, each under the emulator (QEMU_CPU and QEMU_LD_PREFIX come from
# the environment the suite passes on).
for tool in bitnet-model bitnet-cli; do
	printf '#!/bin/sh\nexec %s %s "$@"\n' "$QEMU" "$(realpath "$BUILD/$tool")" > "$wrappers/$tool"
	chmod +x "$wrappers/$tool"
done

# run CPU VARIANT SUITE: one suite on one CPU model, VARIANT forced ("" for the default); its
# line goes to the stream's summary, and a failure to its failed file.
run() {
	cpu=$1 variant=$2 suite=$3
	label="$suite on $cpu${variant:+ (BITNET_KERNELS=$variant)}"
	echo "== $label"
	start=$(date +%s)
	rc=0
	env QEMU_CPU="$cpu" QEMU_LD_PREFIX="$SYSROOT" CK_EXCLUDE_TAGS=daemon \
		CK_TIMEOUT_MULTIPLIER="${CK_TIMEOUT_MULTIPLIER:-20}" BITNET_TEST_EMULATED=1 \
		BITNET_KERNELS="$variant" BITNET_MODEL_TOOL="$wrappers/bitnet-model" \
		BITNET_CLI="$wrappers/bitnet-cli" BITNET_DEFAULT_MODEL="$BUILD/models/tiny.gguf" \
		XDG_CACHE_HOME="/tmp/bitnet-test-cache-arm64-$cpu" CACHE_DIRECTORY= \
		"$QEMU" "$BUILD/tests/$suite" 2>&1 || rc=$?
	secs=$(($(date +%s) - start))
	case $rc in
	0) result=ok ;;
	77) result=SKIP; echo "SKIP: $label" ;;
	*) result="FAILED (exit $rc)"; echo "$label" >> "$wrappers/$cpu.failed" ;;
	esac
	printf '  %-62s %5ss  %s\n' "$label" "$secs" "$result" >> "$wrappers/$cpu.summary"
}

# The Cortex-A72's runs, then max's: two streams side by side, one per core, each into its log.
stream_a72() {
	for suite in $SUITES; do
		run cortex-a72 "" "$suite"
	done
	for variant in dotprod i8mm; do
		for suite in test_kernels $VARIANT_SUITES; do
			run cortex-a72 "$variant" "$suite"
		done
	done
}

stream_max() {
	for suite in $SUITES; do
		run max "" "$suite"
	done
	for variant in neon dotprod i8mm; do
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
echo "== check-arm64: time per run (wall; two runs at a time, this machine's load included)"
cat "$wrappers/cortex-a72.summary" "$wrappers/max.summary"
echo "  total $(($(date +%s) - total_start))s"
if [ -e "$wrappers/cortex-a72.failed" ] || [ -e "$wrappers/max.failed" ]; then
	echo "check-arm64: FAILED:"
	cat "$wrappers"/*.failed
	exit 1
fi
