"""How long the Python and shell tests wait: tests/timescale.h's rule, its factors read from
that file, so both languages keep one rule.

A wait bounds how long a hang takes to fail. It is written as what a plain build on an idle
2-core machine needs, and multiplied by the factor of the daemon under test: the sanitizer it
was built with (found in the binary: AddressSanitizer's or ThreadSanitizer's runtime entry
point), times $BITNET_TEST_TIME_SCALE (a positive number, default 1) for a slow or loaded
machine. Bounds that test the daemon's latency do not scale.

As a program, for the shell tests: python3 tests/timescale.py BITNETD N prints N times the
factor, rounded up to an integer.
"""

import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _factors():
    with open(os.path.join(HERE, "timescale.h")) as f:
        text = f.read()
    return {name: int(re.search(r"#define TU_SCALE_%s (\d+)" % name, text).group(1))
            for name in ("SANITIZED", "TSAN")}


def _sanitizer_factor(binary):
    """The factor for a daemon built with a sanitizer, 1 for a plain one (or none named)."""
    if not binary or not os.path.exists(binary):
        return 1
    with open(binary, "rb") as f:
        image = f.read()
    factors = _factors()
    if b"__tsan_init" in image:
        return factors["TSAN"]
    if b"__asan_init" in image:
        return factors["SANITIZED"]
    return 1


def _machine_factor():
    value = os.environ.get("BITNET_TEST_TIME_SCALE", "")
    if not value:
        return 1.0
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if not (math.isfinite(x) and x > 0):
        sys.exit("BITNET_TEST_TIME_SCALE=%s: not a positive number" % value)
    return x


_cache = {}


def time_scale(binary=None):
    """The factor for waits on the daemon `binary` (default $BITNETD)."""
    binary = binary or os.environ.get("BITNETD")
    if binary not in _cache:
        _cache[binary] = _sanitizer_factor(binary) * _machine_factor()
    return _cache[binary]


def scaled(seconds, binary=None):
    """seconds times the factor."""
    return seconds * time_scale(binary)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 tests/timescale.py BITNETD N")
    print(math.ceil(float(sys.argv[2]) * time_scale(sys.argv[1])))
