#!/usr/bin/env python3
"""bench-python: the bitnetd package (python/) against the C client, in one run. Prints
key=value lines; every figure comes from this run, so ratios between them are meaningful.

    python3 bench/bench_python.py [--bitnetd build/bitnetd] [--cli build/bitnet-cli]
                                  [--model build/models/tiny.gguf] [--quick] [--profile]

Transport, on a loopback daemon started as bench-ipc starts its own (--slots 1024
--max-batch 1024), with bench-ipc's request (a 16-token prompt, 1 generated token):

  c_rtt_hot_p50_us, c_rtt_hot_p99_us   the C client's round trips (bitnet-cli bench against
                                       the same daemon, just before the Python figures)
  c_rps_1t, c_rps_4t                   the C client's requests/s, 1 and 4 threads, each
                                       keeping 64 requests in flight
  py_rtt_p50_us, py_rtt_p99_us         Client.generate round trips, back to back (target
                                       p50 <= 30)
  py_wire_rtt_p50_us                   the same request through the package's protocol
                                       primitives alone (bitnetd._wire: fill, queue, wait,
                                       read): what the Client adds is the difference
  py_rps_1t, py_rps_4t                 requests/s, threads sharing one Client, each calling
                                       generate in a loop (one request in flight per thread)
  py_rps_4t_batch64                    4 threads, each calling generate_batch of 64 prompts
  py_over_c_rtt_p50, c_over_py_rps_4t  the ratios

Batching, generate_batch of 64 short prompts (16 new tokens each, ignore_eos) against 64
sequential generate calls, alternating which goes first, PAIRS pairs; once on the loopback
daemon (transport only: bench-ipc's 16-id prompts) and once on a cpu daemon on --model
(--threads 1: the other core is the client's; one-line text prompts, cpu_prompt_tokens
tokens each):

  lb_batch64_ms, lb_seq64_ms, lb_seq64_over_batch64        loopback (medians; the ratio is
                                                          the median of the pairs' ratios)
  cpu_batch64_ms, cpu_seq64_ms, cpu_seq64_over_batch64     cpu backend
"""

import argparse
import cProfile
import io
import os
import pstats
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import bitnetd  # noqa: E402
from bitnetd import _wire  # noqa: E402

PROMPT_TOKENS, PAIRS, BATCH = 16, 5, 64


def prompt(seed):
    """bench-ipc's prompts (tools/bench_ipc.c fill_prompt)."""
    return [(seed * 31 + i * 7 + 3) % 30000 for i in range(PROMPT_TOKENS)]


def start(exe, folder, name, args):
    path = os.path.join(folder, name + ".sock")
    proc = subprocess.Popen([exe, "--socket", path, "--log-level", "warn"] + args,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1000):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return proc, path
        except OSError:
            time.sleep(0.01)
        finally:
            s.close()
    proc.kill()
    raise RuntimeError("%s did not start" % exe)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def out(key, value):
    print("%s=%s" % (key, ("%.2f" % value) if isinstance(value, float) else value), flush=True)


def percentile(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1) + 0.5)]


# --------------------------------------------------------------------------- transport

def c_figures(cli, path, hot, rps_ms):
    """bitnet-cli bench against our daemon: its key=value lines as a dict."""
    r = subprocess.run([cli, "--socket", path, "bench", "--hot-samples", str(hot),
                        "--idle-samples", "30", "--rps-ms", str(rps_ms)],
                       stdout=subprocess.PIPE, check=True, timeout=600)
    return dict(line.split("=", 1) for line in r.stdout.decode().split())


def rtt(call, samples):
    """ns of each of samples calls, after a tenth more to warm up."""
    v = []
    for i in range(samples + samples // 10):
        p = prompt(i)
        t0 = time.perf_counter_ns()
        call(p)
        v.append(time.perf_counter_ns() - t0)
    return v[samples // 10:]


def wire_call(seg):
    """One request through the protocol primitives alone, on slot 0."""
    def call(p):
        seg.prepare(0, len(p), p, None, _wire.REQ_IGNORE_EOS, 1)
        seg.queue(0, _wire.OP_GENERATE)
        seg.wait(0)
        seg.response(0)
        seg.release(0)
    return call


def rps(client, threads, ms, batch=0):
    """Requests/s of threads sharing client, each generating in a loop (batch: each call a
    generate_batch of that many prompts) until ms have passed."""
    done, errors = [0] * threads, []
    until = time.monotonic() + ms / 1000

    def work(k):
        seed = k * 1000003
        try:
            while time.monotonic() < until:
                if batch:
                    res = client.generate_batch([prompt(seed + j) for j in range(batch)],
                                                max_tokens=1, ignore_eos=True)
                    bad = [r for r in res if isinstance(r, bitnetd.Error)]
                    if bad:
                        raise bad[0]
                    done[k] += batch
                else:
                    client.generate(prompt(seed), max_tokens=1, ignore_eos=True)
                    done[k] += 1
                seed += max(batch, 1)
        except Exception as e:  # noqa: BLE001 (reported, then the run fails)
            errors.append(e)

    t0 = time.monotonic()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return sum(done) / (time.monotonic() - t0)


def transport(args, path):
    hot = 2000 if args.quick else 20000
    rps_ms = 200 if args.quick else 1000
    c = c_figures(args.cli, path, hot, rps_ms)
    c_p50 = int(c["rtt_hot_p50_ns"]) / 1000
    out("c_rtt_hot_p50_us", c_p50)
    out("c_rtt_hot_p99_us", int(c["rtt_hot_p99_ns"]) / 1000)
    out("c_rps_1t", c["rps_1t"])
    out("c_rps_4t", c["rps_4t"])
    with bitnetd.Client(path, timeout=30, slots=256) as client:
        v = rtt(lambda p: client.generate(p, max_tokens=1, ignore_eos=True), hot)
        p50 = percentile(v, 0.5) / 1000
        out("py_rtt_p50_us", p50)
        out("py_rtt_p99_us", percentile(v, 0.99) / 1000)
        out("py_wire_rtt_p50_us", percentile(rtt(wire_call(client._seg), hot), 0.5) / 1000)
        r1 = rps(client, 1, rps_ms)
        r4 = rps(client, 4, rps_ms)
        out("py_rps_1t", "%.0f" % r1)
        out("py_rps_4t", "%.0f" % r4)
        out("py_rps_4t_batch64", "%.0f" % rps(client, 4, rps_ms, BATCH))
        out("py_over_c_rtt_p50", p50 / c_p50)
        out("c_over_py_rps_4t", float(c["rps_4t"]) / r4)
        if args.profile:
            profile(client, hot)


def profile(client, samples):
    """Where a Client.generate round trip's time goes (cProfile, to stderr)."""
    prof = cProfile.Profile()
    prof.enable()
    for i in range(samples):
        client.generate(prompt(i), max_tokens=1, ignore_eos=True)
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    sys.stderr.write(s.getvalue())


# ----------------------------------------------------------------------------- batching

def batch_vs_sequential(path, prefix, texts):
    """generate_batch of the texts against one generate per text, alternating, PAIRS times."""
    kw = dict(max_tokens=16, ignore_eos=True)
    batch, seq, ratios = [], [], []
    with bitnetd.Client(path, timeout=600, slots=BATCH) as client:
        want = [g.ids for g in client.generate_batch(texts, **kw)]  # warm, and the oracle
        for k in range(PAIRS):
            times = {}
            for which in (("batch", "seq") if k % 2 == 0 else ("seq", "batch")):
                t0 = time.perf_counter()
                if which == "batch":
                    got = [g.ids for g in client.generate_batch(texts, **kw)]
                else:
                    got = [client.generate(t, **kw).ids for t in texts]
                times[which] = time.perf_counter() - t0
                if got != want:
                    raise RuntimeError("%s: %s gave other tokens" % (prefix, which))
            batch.append(times["batch"] * 1000)
            seq.append(times["seq"] * 1000)
            ratios.append(times["seq"] / times["batch"])
    out(prefix + "_batch64_ms", statistics.median(batch))
    out(prefix + "_seq64_ms", statistics.median(seq))
    out(prefix + "_seq64_over_batch64", statistics.median(ratios))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bitnetd", default=os.environ.get("BITNETD", "build/bitnetd"))
    ap.add_argument("--cli", default=os.environ.get("BITNET_CLI", "build/bitnet-cli"))
    ap.add_argument("--model", default="build/models/tiny.gguf")
    ap.add_argument("--quick", action="store_true", help="fewer samples: a smoke run")
    ap.add_argument("--profile", action="store_true", help="cProfile of the round trip, stderr")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-python-")
    texts = ["Request %d: once upon a time, in a land far away, there lived" % k
             for k in range(BATCH)]
    out("python", "%d.%d.%d" % sys.version_info[:3])
    proc, path = start(args.bitnetd, folder, "loopback",
                       ["--backend", "loopback", "--slots", "1024", "--max-batch", "1024"])
    try:
        transport(args, path)
        # The loopback backend has no tokenizer: the same prompts as ids.
        batch_vs_sequential(path, "lb", [prompt(k) for k in range(BATCH)])
    finally:
        stop(proc)
    proc, path = start(args.bitnetd, folder, "cpu",
                       ["--backend", "cpu", "--model", args.model, "--threads", "1",
                        "--slots", str(BATCH)])
    try:
        with bitnetd.Client(path) as c:
            out("cpu_prompt_tokens", len(c.tokenize(texts[0])))
        batch_vs_sequential(path, "cpu", texts)
    finally:
        stop(proc)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
