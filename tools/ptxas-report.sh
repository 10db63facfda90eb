#!/bin/sh
# SPDX-License-Identifier: MIT
#
# ptxas-report.sh SOURCE LOG HOT_KERNEL... — what `nvcc -Xptxas -v` said about SOURCE's
# kernels, one line each: registers, static shared memory, stack frame and spills. Exits 1
# when a hot kernel (named as in the source, without namespace or arguments) spills a register:
# a spill there costs local-memory traffic on every step. The log's other lines (nvcc's
# warnings) are printed as they are. The Makefile runs it after compiling each .cu file.
set -eu
src=$1
log=$2
shift 2
hot=" $* "

# What is not ptxas's own report goes to the user unchanged.
grep -v -e '^ptxas info' -e 'bytes stack frame' "$log" >&2 || true

# One record per entry function: regs smem stack spill_stores spill_loads arch mangled-name,
# then demangled, then shortened to the function's own name. A build for several compute
# capabilities (CUDA_ARCHS) reports each kernel once per capability.
awk '
	/Compiling entry function/ {
		name = $0; sub(/.*entry function \047/, "", name); sub(/\047.*/, "", name)
		arch = "sm_90"; if (match($0, /for \047sm_[0-9a-z]+\047/)) arch = substr($0, RSTART + 5, RLENGTH - 6)
	}
	/bytes stack frame/ { stack = $1; st = $5; ld = $9 }
	/ptxas info *: Used [0-9]+ registers/ {
		regs = $5; smem = 0
		if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ .*/, "", smem) }
		if (name != "") print regs, smem, stack, st, ld, arch, name
		name = ""
	}' "$log" | c++filt | awk -v src="$src" -v hot="$hot" '
	# The function name: text before the argument list, without return type, template
	# arguments or namespaces.
	function short(s,    i, c, depth, out) {
		gsub(/\(anonymous namespace\)::/, "", s)
		depth = 0; out = ""
		for (i = 1; i <= length(s); i++) {
			c = substr(s, i, 1)
			if (c == "<") depth++
			else if (c == ">") depth--
			else if (c == "(" && depth == 0) break
			else if (depth == 0) out = out c
		}
		sub(/^.* /, "", out)
		sub(/^.*::/, "", out)
		return out
	}
	BEGIN { bad = 0 }
	{
		full = $0; for (f = 1; f <= 6; f++) sub(/^[^ ]+ /, "", full)
		k = short(full); is_hot = index(hot, " " k " ") > 0
		if ($6 != shown) {
			shown = $6
			printf "  ptxas %s (%s):\n", src, $6
			printf "    %-32s %5s %7s %6s %9s %9s\n", "kernel", "regs", "smem_B", "stack", "spill_st", "spill_ld"
		}
		printf "    %-32s %5d %7d %6d %9d %9d%s\n", k, $1, $2, $3, $4, $5, is_hot ? "  hot" : ""
		if (is_hot && ($4 > 0 || $5 > 0)) {
			printf "ptxas-report: %s: hot kernel %s spills registers on %s (%d bytes stored, %d loaded)\n", src, k, $6, $4, $5 > "/dev/stderr"
			bad = 1
		}
	}
	END { exit bad }'
