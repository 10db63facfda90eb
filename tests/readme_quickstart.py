#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""readme_quickstart.py - the README's quickstart commands are the ones tools/quickstart.sh runs.

The README shows, in the fenced block after the comment that names this file, the commands the
quickstart runs with the 2B4T model. Each must be, character for character, a command the
script runs through its `run` or `client` helpers (which print the command, then eval it):
a reader who copies them gets what the quickstart showed. The block must show the pull, the
chat and the curl against the gateway (issue 48).
Exit status: 0 pass, 1 fail.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "tests/readme_quickstart.py"
MUST_SHOW = ["bitnet-model pull ", "bitnetd ", " chat ", "bitnet-gateway ", "curl "]


def readme_commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    at = next((i for i, line in enumerate(lines) if MARKER in line), None)
    if at is None or not lines[at + 1].startswith("```"):
        return None
    block = []
    for line in lines[at + 2:]:
        if line.startswith("```"):
            return block
        block.append(line)
    return None


def script_commands():
    """The arguments of run/client calls: '...' literally, "..." with its escapes undone."""
    with open(os.path.join(ROOT, "tools", "quickstart.sh")) as f:
        text = f.read()
    single = re.findall(r"^\s*(?:if\s+)?(?:run|client)\s+'([^']*)'", text, re.M)
    double = re.findall(r'^\s*(?:if\s+)?(?:run|client)\s+"((?:[^"\\]|\\.)*)"', text, re.M)
    return set(single) | {re.sub(r'\\(.)', r'\1', d) for d in double}


def main():
    shown = readme_commands()
    if shown is None:
        print("FAIL: README.md has no fenced block after a comment naming", MARKER)
        return 1
    ran = script_commands()
    problems = [f"README.md shows a command tools/quickstart.sh does not run: {c}"
                for c in shown if c not in ran]
    problems += [f"README.md's quickstart block shows no '{m.strip()}' command"
                 for m in MUST_SHOW if not any(m in c for c in shown)]
    for p in problems:
        print("FAIL:", p)
    print(f"readme_quickstart: {len(shown)} commands shown, {len(ran)} run by the script, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
