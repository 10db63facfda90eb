#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The daemon's rooms, checked (DESIGN.md "Rooms of the daemon", daemon/README.md).

Three rules, on the sources and on the objects of a build:
  1. Arrows run one way. daemon/ is in rooms, top to bottom: daemon/ itself (the loop, sessions,
     text requests, config), serve/, backends/, model/, grammar/, common/. A file may include a
     header of its own room or a lower one, and call (or read) what its own room or a lower one
     defines, never a higher one. Outside daemon/, nothing but tests, benches and tools includes it;
     kernels/, shm/ and libclient/ never do.
  2. No circle: no two product files include each other, or call each other, directly or
     through others (the include graph of all headers and sources, and the graph of which
     object uses a symbol another defines, have no cycle).
  3. No product .c file is over MAX_LINES lines: a longer one is two jobs.

Usage: rooms.py BUILD_DIR   (the objects are read with nm). Exit 0 pass, 1 fail, 77 skip.
"""
import os
import re
import subprocess
import sys

ROOMS = ["common", "grammar", "model", "backends", "serve", ""]  # bottom to top; "" is daemon/ itself
MAX_LINES = 950  # "~900": a file a little over is not two jobs yet
PRODUCT_DIRS = ["daemon", "libclient", "kernels", "shm", "tools", "gateway", "hub"]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SEARCH_DIRS = ["shm", "libclient", "kernels", "kernels/cpu", "kernels/cuda", "tools", "daemon", "hub"]


def room_of(path):
    """The rank of a daemon file's room, or None outside daemon/."""
    parts = path.split("/")
    if parts[0] != "daemon":
        return None
    room = parts[1] if len(parts) > 2 else ""
    return ROOMS.index(room) if room in ROOMS else None


def room_name(rank):
    return "daemon/" + (ROOMS[rank] + "/" if ROOMS[rank] else "")


def product_sources(root):
    out = []
    for top in PRODUCT_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


def resolve(root, including, name):
    """The file an #include "name" in `including` names, as the compiler finds it."""
    for base in [os.path.dirname(including)] + SEARCH_DIRS:
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def include_graph(root, files):
    graph = {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            text = fh.read()
        graph[f] = sorted({t for t in (resolve(root, f, n) for n in INCLUDE_RE.findall(text)) if t})
    return graph


def nm_symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind == "U":
            used.add(name)
        elif kind in "TDRBC":  # global text, data, read-only, bss, common
            defined.add(name)
    return defined, used


def call_graph(root, build):
    """Which product source uses a global symbol that another defines, from the build's
    objects (one per source, at BUILD/<source path>.o)."""
    objs = {}
    for dirpath, _, files in os.walk(build):
        for f in files:
            if not f.endswith(".o"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), build)
            if rel.startswith("pic/"):
                continue
            stem = rel[: -len(".o")]
            for ext in (".c", ".cu"):
                if os.path.isfile(os.path.join(root, stem + ext)) and \
                   stem.split("/")[0] in PRODUCT_DIRS:
                    objs[stem + ext] = os.path.join(dirpath, f)
    owner, uses = {}, {}
    for src, obj in objs.items():
        defined, used = nm_symbols(obj)
        for name in defined:
            owner.setdefault(name, src)
        uses[src] = used
    graph = {src: sorted({owner[n] for n in used if n in owner and owner[n] != src})
             for src, used in uses.items()}
    return graph, len(objs)


def find_cycle(graph):
    """One cycle of the graph as a list of nodes, or None (iterative depth-first search)."""
    state = {}
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(graph.get(start, [])))]
        path = [start]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(graph.get(nxt, []))))
    return None


def upward(graph, what):
    """Edges from a lower room to a higher one, and into daemon/ from outside it."""
    bad = []
    for src, targets in graph.items():
        for t in targets:
            rs, rt = room_of(src), room_of(t)
            if rt is None:
                continue
            if rs is None:
                if not src.startswith(("tests/", "bench/", "tools/")):
                    bad.append(f"{src} {what} {t}: only daemon/, tests, benches and tools may")
            elif rt > rs:
                bad.append(f"{src} ({room_name(rs)}) {what} {t} ({room_name(rt)}), a higher room")
    return bad


def main():
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    build = sys.argv[1]
    files = product_sources(root)
    problems = []

    inc = include_graph(root, files)
    problems += upward(inc, "includes")
    cycle = find_cycle(inc)
    if cycle:
        problems.append("include cycle: " + " -> ".join(cycle))

    calls, n_objs = call_graph(root, build)
    if n_objs == 0:
        print(f"SKIP: no objects under {build} (build first)")
        return 77
    problems += upward(calls, "calls into")
    cycle = find_cycle(calls)
    if cycle:
        problems.append("call cycle: " + " -> ".join(cycle))

    for f in files:
        if f.endswith(".c"):
            with open(os.path.join(root, f), encoding="utf-8") as fh:
                n = sum(1 for _ in fh)
            if n > MAX_LINES:
                problems.append(f"{f}: {n} lines, over {MAX_LINES}: split it by responsibility")

    for p in problems:
        print("FAIL:", p)
    print(f"rooms: {len(files)} product files, {n_objs} objects, "
          f"{sum(len(v) for v in inc.values())} include edges, "
          f"{sum(len(v) for v in calls.values())} call edges, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
