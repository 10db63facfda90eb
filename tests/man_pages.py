#!/usr/bin/env python3
"""man_pages.py - the library's man pages against its header.

Checks, from the source tree:
  - every public function of libclient/bitnet_client.h (a bn_* declaration at file scope) has
    man/man3/<name>.3, a page or a `.so man3/<page>.3` redirect to one;
  - every man/man3/bn_*.3 is a function of the header (a page for a call that does not exist
    is an error: the header and the pages move together);
  - the page a function lands on names it under NAME and shows its prototype, exactly as the
    header declares it (whitespace aside), under SYNOPSIS;
  - bitnet_client(3), the overview, lists every function as name(3);
  - every page renders with groff -man -ww without a warning, and every page its text refers
    to as name(3) exists.
Exit status: 0 pass, 1 fail, 77 skip (groff is not installed).
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "libclient", "bitnet_client.h")
MANDIR = os.path.join(ROOT, "man")
MAN3 = os.path.join(MANDIR, "man3")


def normalize(s):
    """One space between words, none inside parentheses' edges or before commas."""
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\( ", "(", s)
    s = re.sub(r" ([,)])", r"\1", s)
    return s


def header_prototypes(path):
    """{name: prototype} of the functions declared at file scope of the header."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # Preprocessor lines, continuations included (the #defines of flags are no functions).
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    text = re.sub(r'extern\s+"C"\s*\{', " ", text)
    # File-scope statements: struct bodies (depth > 0) are left out, so a struct's function
    # pointer member is not taken for a function.
    protos, depth, stmt = {}, 0, []
    for ch in text:
        if ch in "{}":
            depth = max(depth + (1 if ch == "{" else -1), 0)
        elif depth == 0 and ch == ";":
            decl = normalize("".join(stmt))
            stmt = []
            # Type words and stars, then the name and its parameter list.
            m = re.match(r"(?:[A-Za-z_]\w*[\s*]+)+(bn_[a-z0-9_]+)\s*\(", decl)
            if m and not decl.startswith("typedef"):
                protos[m.group(1)] = decl + ";"
        elif depth == 0:
            stmt.append(ch)
    return protos


def so_target(path):
    """The page a `.so man3/x.3` file redirects to, or None for a page of its own."""
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if l.strip() and not l.startswith('.\\"')]
    if len(lines) == 1 and lines[0].startswith(".so "):
        return lines[0].split(None, 1)[1].strip()
    return None


def names(path):
    """The names a page's NAME section lists before its \\- (from the source: rendered text
    may hyphenate a long name at a line's end)."""
    with open(path) as f:
        src = f.read()
    m = re.search(r"^\.SH NAME\n(.*?)^\.SH", src, flags=re.S | re.M)
    head = (m.group(1) if m else "").split("\\-")[0]
    return {n.strip() for n in head.replace("\n", " ").split(",") if n.strip()}


def render(rel):
    """(text, warnings) of a page, rendered from man/ so .so lines resolve."""
    p = subprocess.run(["groff", "-s", "-man", "-ww", "-Tascii", "-P-cbou", rel], cwd=MANDIR,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    # A name hyphenated at a line's end is joined again.
    text = re.sub(r"(\w)-\n\s*", r"\1", p.stdout)
    return text, p.stderr.strip() + ("" if p.returncode == 0 else " (exit %d)" % p.returncode)


def section(text, name):
    """The lines of one top-level section of rendered text."""
    out, inside = [], False
    for line in text.splitlines():
        if line and not line[0].isspace():
            inside = line.strip() == name
            continue
        if inside:
            out.append(line)
    return "\n".join(out)


def main():
    if not shutil.which("groff"):
        print("SKIP: groff is not installed")
        return 77
    errors = []
    protos = header_prototypes(HEADER)
    if len(protos) < 40:
        print("FAIL: only %d functions found in %s: the parser needs a look" % (len(protos), HEADER))
        return 1
    files = sorted(f for f in os.listdir(MAN3) if f.endswith(".3"))
    pages = {f[:-2] for f in files}

    missing = sorted(set(protos) - pages)
    for name in missing:
        errors.append("%s has no page man/man3/%s.3" % (name, name))
    extra = sorted(p for p in pages if p.startswith("bn_") and p not in protos)
    for name in extra:
        errors.append("man/man3/%s.3 documents no function of libclient/bitnet_client.h" % name)

    rendered = {}
    for f in files:
        target = so_target(os.path.join(MAN3, f))
        if target and not os.path.isfile(os.path.join(MANDIR, target)):
            errors.append("man/man3/%s: .so to %s, which does not exist" % (f, target))
            continue
        if target and so_target(os.path.join(MANDIR, target)):
            errors.append("man/man3/%s: .so to %s, itself a redirect" % (f, target))
            continue
        real = target or "man3/" + f
        if real not in rendered:
            text, warn = render(real)
            if warn:
                errors.append("%s: groff: %s" % (real, warn))
            rendered[real] = text
        name = f[:-2]
        text = rendered[real]
        if name not in names(os.path.join(MANDIR, real)):
            errors.append("man/man3/%s: %s is not named under NAME of %s" % (f, name, real))
        if name in protos and protos[name] not in normalize(section(text, "SYNOPSIS")):
            errors.append("%s: SYNOPSIS lacks the header's prototype\n    %s" % (real, protos[name]))

    overview = rendered.get("man3/bitnet_client.3", "")
    if not overview:
        errors.append("man/man3/bitnet_client.3, the overview, is missing")
    for name in sorted(protos):
        if overview and "%s(3)" % name not in overview:
            errors.append("bitnet_client(3) does not list %s(3)" % name)

    for real, text in sorted(rendered.items()):
        for ref, sec in set(re.findall(r"\b([a-z][a-z0-9_]*)\((\d)\)", text)):
            if sec == "3" and ref not in pages and (ref.startswith("bn_") or ref == "bitnet_client"):
                errors.append("%s refers to %s(3), which has no page" % (real, ref))

    for e in errors:
        print("FAIL: " + e)
    n_real = len(rendered)
    print("%d functions in the header, %d pages in man/man3 (%d of their own, %d redirects)"
          % (len(protos), len(files), n_real, len(files) - n_real))
    if errors:
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
