#!/usr/bin/env python3
"""Conformance client for bitnetd's shared-memory protocol (ABI 1).

The protocol side is the bitnetd package's (python/bitnetd/_wire.py, written from
shm/PROTOCOL.md with the Python standard library only, following the document's section 14
for clients without atomics): the handshake and the header checks, the segment's layout, the
ring, slot filling, the section 8.2 futex wait, control messages. This file adds what a
client library must not offer and a test needs: requests built field by field (wrong ones
included), raw hellos, violations, the loopback backend's oracle (section 13), and the
checks themselves, which compare the daemon's answers with the document's.

Run from the repository root:
    BITNETD=build/bitnetd python3 tests/conformance.py [-v]

It starts two loopback daemons of its own (a fast one and one with
--step-delay-us 2000 for streaming, cancel and real futex sleeps), runs the
checks, stops them with SIGTERM and prints "N passed, M failed".
Exit status 0 only if nothing failed.
"""

import collections
import errno
import fcntl
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from bitnetd import _wire as wire  # noqa: E402
from bitnetd._wire import (  # noqa: E402
    ABI_VERSION, CTL_MAGIC, CTL_REPLY_MAGIC, CTL_STATS, DAEMON_CLOSED, DAEMON_SHUTTING_DOWN,
    FEAT_CLASSIFY, FEAT_EMBED, FEAT_EMBEDDING_MODEL, FEAT_SCORE, FEAT_STREAMING, FEAT_TEXT,
    OP_CLASSIFY, OP_DETOKENIZE, OP_EMBED, OP_GENERATE, OP_GRAMMAR, OP_GRAMMAR_FREE, OP_SCORE,
    OP_TOKENIZE, REQ_CHAT, REQ_GRAMMAR,
    REQ_IGNORE_EOS, REQ_LOGPROBS, REQ_NO_BOS,
    REQ_PARSE_SPECIAL, REQ_SPECIAL_TEXT, REQ_SPECULATE, REQ_STRIP_SPACE, REQ_TEXT, REQ_TEXT_OUT,
    S_COMPLETE, S_CANCELLED, S_EOS, S_ERROR, S_LENGTH, S_SHUTDOWN, SL_CANCEL, SL_NTOK,
    SL_STATE, SL_TIMINGS, SQE_SIZE, ST_DONE, WELCOME_MAGIC, hello_bytes, recv_exact,
    recv_welcome)
from bitnetd.errors import (  # noqa: E402
    DisconnectedError, E_BUSY, E_EMPTY, E_GRAMMAR, E_GRAMMAR_LIMIT, E_INVALID, E_PROTOCOL,
    E_TOKEN, E_TOO_LONG, E_UNSUPPORTED, E_VERSION)
from timescale import scaled  # noqa: E402 (this folder: the waits' rule, tests/timescale.h)

VERBOSE = "-v" in sys.argv[1:]

# ---------------------------------------------------------------- checks


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            if VERBOSE:
                print("ok   %s" % name)
        else:
            self.failed += 1
            print("FAIL %s%s" % (name, (": " + detail) if detail else ""))
            sys.stdout.flush()
        return ok

    def eq(self, name, got, want):
        return self.check(name, got == want, "got %r, want %r" % (got, want))


C = Checks()

# ---------------------------------------------------------------- oracle (section 13)


def fmix32(x):
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    x ^= x >> 16
    return x


def loopback(prompt, max_tokens, vocab_size=32000, eos_id=2, ignore_eos=False):
    """(tokens, status) the loopback backend must produce."""
    h = 2166136261
    for t in prompt:
        h = ((h ^ t) * 16777619) & 0xFFFFFFFF
    out = []
    for _ in range(max_tokens):
        tok = fmix32(h) % vocab_size
        if tok == eos_id and not ignore_eos:
            return out, S_EOS
        out.append(tok)
        h = ((h ^ tok) * 16777619) & 0xFFFFFFFF
    return out, S_LENGTH

# ---------------------------------------------------------------- helpers


FUTEX_STATS = collections.Counter()   # FUTEX_WAIT calls and outcomes (wire.futex_wait)


def read_prometheus(text):
    """{metric name: summed value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name = line[:line.index("{")]
            rest = line[line.rindex("}") + 1:].split()
        else:
            parts = line.split()
            name, rest = parts[0], parts[1:]
        out[name] = out.get(name, 0.0) + float(rest[0])
    return out

# ---------------------------------------------------------------- daemon


class Daemon:
    def __init__(self, exe, tmpdir, name, extra=(), env=None, backend=("--backend", "loopback")):
        self.exe = exe
        self.name = name
        self.path = os.path.join(tmpdir, name + ".sock")
        self.logpath = os.path.join(tmpdir, name + ".log")
        self.args = [exe, "--socket", self.path] + list(backend) + \
            ["--log-level", "warn"] + list(extra)
        self.env = dict(os.environ)
        self.env.pop("BITNETD_RING_START", None)
        self.env.update(env or {})
        self.proc = None
        self.rc = None

    def start(self, timeout=10.0):
        self.log = open(self.logpath, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)
        deadline = time.monotonic() + scaled(timeout)
        while True:                          # wait for the socket to accept
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited early with %d:\n%s" %
                                   (self.name, self.proc.returncode, self.logtail()))
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
                return
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise RuntimeError("%s: socket never accepted" % self.name)
                time.sleep(0.01)
            finally:
                s.close()

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(scaled(10))
        s.connect(self.path)
        return s

    def stop(self):
        """SIGTERM and wait; returns the exit status (idempotent)."""
        if self.proc is None:
            return None
        if self.rc is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.rc = self.proc.wait(scaled(15))
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.rc = "timeout (killed)"
            self.log.close()
        return self.rc

    def logtail(self, n=2000):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except OSError:
            return ""


# ---------------------------------------------------------------- session


class Session(wire.Segment):
    """One connection = one segment = one ring (section 1): the package's Segment, plus
    requests given as spec dicts whose every field is sent as given, and bookkeeping."""

    def __init__(self, daemon, requested_slots=0, label="session"):
        self.label = label
        super().__init__(daemon.path, requested_slots)
        h = self.h
        self.nslots, self.vocab, self.eos = h["slot_count"], h["vocab_size"], h["eos_id"]
        self.pcap, self.ocap = h["slot_prompt_capacity"], h["slot_output_capacity"]
        self.ctx = h["context_length"]
        self.submitted = 0
        self.inflight = set()

    def out_index(self, i):
        return (self.S(i) + self.h["slot_output_offset"]) // 4

    # --- submitting (sections 5.1, 6.3, 8.1, 14)
    def submit(self, reqs):
        """reqs: list of (slot, spec dict). Queues all, one doorbell. A spec's fields: op,
        prompt (the prompt words), text, n_prompt (default: the text's or the prompt's
        length), max_tokens, flags, reserved2 (the 13 words at slot bytes 76..127)."""
        for slot, spec in reqs:
            assert slot not in self.inflight
            prompt, text = spec.get("prompt", []), spec.get("text")
            n_prompt = spec.get("n_prompt")
            if n_prompt is None:
                n_prompt = len(text) if text is not None else len(prompt)
            self.prepare(slot, n_prompt, prompt, text, spec.get("flags", 0),
                         spec.get("max_tokens", 0), spec.get("reserved2"))
            self.push(slot, spec.get("op", OP_GENERATE))
            self.inflight.add(slot)
            self.submitted += 1
        self.publish()

    def wait(self, i, have=None, timeout=None, stats=FUTEX_STATS):
        """True once DONE (or, with have, once n_tokens != have); False after timeout seconds
        (default 10, scaled: tests/timescale.py)."""
        return super().wait(i, have, scaled(10.0) if timeout is None else timeout, stats)

    def result(self, i):
        """A DONE slot's response (section 6.6), with its timings and piece ends."""
        r = self.response(i)
        S = self.S(i)
        r["queue_ns"], r["first_token_ns"], r["total_ns"] = \
            struct.unpack_from("<QQQ", self.mm, S + SL_TIMINGS)
        if self.features & FEAT_TEXT:       # section 6.10
            p0 = (S + self.h["slot_piece_offset"]) // 4
            r["piece_ends"] = self.u32[p0:p0 + len(r["tokens"])].tolist()
        return r

    def release(self, i):
        super().release(i)
        self.inflight.discard(i)

    def run_one(self, spec, slot=0, timeout=None):
        timeout = scaled(10.0) if timeout is None else timeout
        self.submit([(slot, spec)])
        if not self.wait(slot, timeout=timeout):
            raise TimeoutError("%s: slot %d not DONE after %.1fs" % (self.label, slot, timeout))
        r = self.result(slot)
        self.release(slot)
        return r

    # --- control messages (section 10)
    def control(self, op, magic=CTL_MAGIC, reserved=(0, 0)):
        rmagic, rop, rerr, payload = self.control_raw(op, magic, reserved)
        return dict(magic=rmagic, op=rop, error=rerr, length=len(payload), payload=payload)


def raw_handshake(daemon, hello):
    """Send an arbitrary hello; return (welcome, fds, eof_after)."""
    s = daemon.connect()
    try:
        try:
            s.sendall(hello)
        except (BrokenPipeError, ConnectionResetError):
            pass            # refused at accept: the welcome still waits (section 2.3)
        w, fds, _, _ = recv_welcome(s)
        for fd in fds:
            os.close(fd)
        s.settimeout(scaled(3))
        try:
            eof = s.recv(1) == b""
        except ConnectionResetError:
            eof = True      # closed with our hello unread: a reset is a hang-up too
        except (socket.timeout, OSError):
            eof = False
        return w, fds, eof
    finally:
        s.close()

def run_requests(sess, specs, rng, timeout=20.0):
    """Run specs with several in flight across all slots; results in order.

    Returns (results, peak in flight, set of slots used)."""
    free = collections.deque(range(sess.nslots))
    pending = collections.deque(enumerate(specs))
    order = collections.deque()            # slots in submission order
    owner = {}
    results = [None] * len(specs)
    peak, used = 0, set()
    deadline = time.monotonic() + scaled(timeout)
    while pending or order:
        if pending and free:
            k = rng.randint(1, min(len(free), len(pending)))
            batch = []
            for _ in range(k):
                idx, spec = pending.popleft()
                slot = free.popleft()
                owner[slot] = idx
                batch.append((slot, spec))
                order.append(slot)
                used.add(slot)
            sess.submit(batch)
            peak = max(peak, len(order))
        oldest = order[0]
        if not sess.wait(oldest, timeout=max(0.01, deadline - time.monotonic())):
            raise TimeoutError("%s: slot %d never completed" % (sess.label, oldest))
        for slot in list(order):           # harvest everything that is DONE
            if sess.u32[sess.S(slot) // 4] == ST_DONE:
                results[owner.pop(slot)] = sess.result(slot)
                sess.release(slot)
                order.remove(slot)
                free.append(slot)
    return results, peak, used


def check_against_oracle(name, sess, spec, r):
    want, wstatus = loopback(spec["prompt"], spec["max_tokens"], sess.vocab, sess.eos,
                             bool(spec.get("flags", 0) & REQ_IGNORE_EOS))
    got = (r["state"], r["status"], r["error"], r["n_tokens"], r["tokens"])
    exp = (ST_DONE, wstatus, 0, len(want), want)
    if got == exp:
        return C.check(name, True)
    diff = []
    for label, g, e in zip(("state", "status", "error", "n_tokens"), got, exp):
        if g != e:
            diff.append("%s %r want %r" % (label, g, e))
    if r["tokens"] != want:
        k = next((j for j, (a, b) in enumerate(zip(r["tokens"], want)) if a != b),
                 min(len(r["tokens"]), len(want)))
        diff.append("tokens differ at %d (got %r, want %r)" %
                    (k, r["tokens"][k:k + 3], want[k:k + 3]))
    return C.check(name, False, "prompt len %d max %d flags %d: %s" %
                   (len(spec["prompt"]), spec["max_tokens"], spec.get("flags", 0), "; ".join(diff)))

# ---------------------------------------------------------------- tests: fast daemon


def test_oracle_self():
    C.eq("oracle: section 13 example 1", loopback([1, 2, 3], 4), ([17499, 28047, 18038, 25851], S_LENGTH))
    C.eq("oracle: section 13 example 2 (EOS)", loopback([7951], 3), ([], S_EOS))
    C.eq("oracle: section 13 example 2 (IGNORE_EOS)", loopback([7951], 3, ignore_eos=True),
         ([2, 27555, 14219], S_LENGTH))
    toks, st = loopback([163], 60)
    C.eq("oracle: prompt [163] ends EOS after 55", (len(toks), st), (55, S_EOS))
    C.eq("hello bytes match section 2.2 example",
         hello_bytes(0), bytes.fromhex("424e484c01000000") + bytes(24))


def test_header(sess, ring_start, want_slots):
    h = sess.h
    C.eq("welcome session_id == header session_id", h["session_id"], sess.welcome.session_id)
    C.eq("slot_count granted (min(requested, --slots))", h["slot_count"], want_slots)
    C.eq("loopback backend id", h["backend"], 1)
    C.eq("loopback model_name", sess.model_name, "loopback")
    C.eq("loopback vocab/bos/eos/context", (h["vocab_size"], h["bos_id"], h["eos_id"], h["context_length"]),
         (32000, 1, 2, 4096))
    C.check("STREAMING feature bit", h["features"] & FEAT_STREAMING, "features 0x%x" % h["features"])
    C.check("COMPUTE feature bit", h["features"] & wire.FEAT_COMPUTE, "features 0x%x" % h["features"])
    C.check("SPECULATE feature bit", h["features"] & wire.FEAT_SPECULATE, "features 0x%x" % h["features"])
    C.eq("loopback lm_head / decode_layout: none / none", (h["lm_head"], h["decode_layout"]), (0, 0))
    C.check("MODELS feature bit", h["features"] & wire.FEAT_MODELS, "features 0x%x" % h["features"])
    C.eq("served_name: the default model's (section 15.1)", sess.served_name, "default")
    C.check("memfd sealed (F_SEAL_SHRINK|GROW|SEAL)",
            sess.seals & (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL) ==
            (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL), "seals 0x%x" % sess.seals)
    C.check("memfd size >= segment_size", sess.memfd_size >= sess.segment_size,
            "%d < %d" % (sess.memfd_size, sess.segment_size))
    C.eq("ring head == tail == BITNETD_RING_START", (sess.initial_head, sess.tail), (ring_start, ring_start))
    C.eq("daemon_flags clear", sess.daemon_flags(), 0)
    # Fresh segment: every sqe and every slot byte is zero (section 4).
    nz = []
    sq0, sqn = sess.h["sqes_offset"], SQE_SIZE * sess.h["sq_entries"]
    if any(sess.mm[sq0:sq0 + sqn]):
        nz.append("sqe array")
    for i in range(sess.nslots):
        if any(sess.mm[sess.S(i):sess.S(i) + sess.h["slot_size"]]):
            nz.append("slot %d" % i)
    C.check("fresh segment: sqes and slots all zero", not nz, ", ".join(nz[:5]))


def test_worked_examples(sess):
    r = sess.run_one(dict(prompt=[1, 2, 3], max_tokens=4), slot=1)
    C.eq("example 1: [1,2,3] max 4 in slot 1",
         (r["state"], r["status"], r["error"], r["n_tokens"], r["tokens"]),
         (ST_DONE, S_LENGTH, 0, 4, [17499, 28047, 18038, 25851]))
    C.check("example 1: timings queue <= first_token <= total, total > 0",
            0 < r["total_ns"] and r["queue_ns"] <= r["first_token_ns"] <= r["total_ns"],
            "queue %d first %d total %d" % (r["queue_ns"], r["first_token_ns"], r["total_ns"]))
    r = sess.run_one(dict(prompt=[7951], max_tokens=3), slot=2)
    C.eq("example 2: [7951] max 3 -> EOS, no tokens",
         (r["state"], r["status"], r["error"], r["n_tokens"]), (ST_DONE, S_EOS, 0, 0))
    r = sess.run_one(dict(prompt=[7951], max_tokens=3, flags=REQ_IGNORE_EOS), slot=2)
    C.eq("example 2: [7951] max 3 IGNORE_EOS",
         (r["state"], r["status"], r["error"], r["n_tokens"], r["tokens"]),
         (ST_DONE, S_LENGTH, 0, 3, [2, 27555, 14219]))
    spec = dict(prompt=[163], max_tokens=60)
    check_against_oracle("example: [163] max 60 -> EOS after 55", sess, spec, sess.run_one(spec, slot=0))
    # SPECULATE (§6.9) changes no output: the same tokens, here with a prompt that repeats.
    spec = dict(prompt=[5, 9, 5, 9, 5, 9, 5], max_tokens=200, flags=REQ_SPECULATE | REQ_IGNORE_EOS)
    check_against_oracle("SPECULATE: the same tokens as without", sess, spec, sess.run_one(spec, slot=0))


def test_request_errors(sess, rng):
    v, pc, oc, ctx = sess.vocab, sess.pcap, sess.ocap, sess.ctx
    cases = [
        ("token == vocab -> TOKEN", dict(prompt=[1, v], max_tokens=4), E_TOKEN),
        ("token 0xffffffff -> TOKEN", dict(prompt=[0xFFFFFFFF], max_tokens=1), E_TOKEN),
        ("n_prompt 0 -> EMPTY", dict(prompt=[], max_tokens=4), E_EMPTY),
        ("max_tokens 0 -> INVALID", dict(prompt=[1, 2, 3], max_tokens=0), E_INVALID),
        ("n_prompt 0 and max_tokens 0 -> INVALID", dict(prompt=[], max_tokens=0), E_INVALID),
        ("flags bit 12 (unknown) -> INVALID", dict(prompt=[1], max_tokens=1, flags=1 << 12), E_INVALID),
        ("GRAMMAR without the GRAMMAR feature -> UNSUPPORTED",
         dict(prompt=[1], max_tokens=1, flags=REQ_GRAMMAR, reserved2=[0] * 12 + [1]), E_UNSUPPORTED),
        ("op GRAMMAR without the GRAMMAR feature -> UNSUPPORTED",
         dict(op=OP_GRAMMAR, prompt=[], n_prompt=16), E_UNSUPPORTED),
        ("TEXT without the TEXT feature -> UNSUPPORTED",
         dict(prompt=[], text=b"hi", max_tokens=1, flags=REQ_TEXT), E_UNSUPPORTED),
        ("TEXT_OUT without the TEXT feature -> UNSUPPORTED",
         dict(prompt=[1], max_tokens=1, flags=REQ_TEXT_OUT), E_UNSUPPORTED),
        ("op TOKENIZE without the TEXT feature -> UNSUPPORTED",
         dict(op=OP_TOKENIZE, flags=REQ_TEXT, n_prompt=0), E_UNSUPPORTED),
        ("op 9 (unknown) -> UNSUPPORTED, not a violation", dict(op=9, prompt=[1], max_tokens=1),
         E_UNSUPPORTED),
        ("op SCORE on a backend that does not score -> UNSUPPORTED",
         dict(op=OP_SCORE, prompt=[1, 2]), E_UNSUPPORTED),
        ("temperature NaN -> INVALID",
         dict(prompt=[1], max_tokens=1, reserved2=[0x7fc00000] + [0] * 12), E_INVALID),
        ("seed without the seed flag -> INVALID",
         dict(prompt=[1], max_tokens=1, reserved2=[0] * 7 + [5] + [0] * 5), E_INVALID),
        ("reserved2 word non-zero -> INVALID",
         dict(prompt=[1], max_tokens=1, reserved2=[0] * 12 + [1]), E_INVALID),
        ("n_prompt > prompt capacity -> TOO_LONG",
         dict(prompt=[], n_prompt=pc + 1, max_tokens=1), E_TOO_LONG),
        ("max_tokens > output capacity -> TOO_LONG", dict(prompt=[5], max_tokens=oc + 1), E_TOO_LONG),
        ("too long and bad token -> TOO_LONG", dict(prompt=[v + 7], max_tokens=oc + 1), E_TOO_LONG),
        ("n_prompt 0 and bad token -> EMPTY",
         dict(prompt=[v], n_prompt=0, max_tokens=1), E_EMPTY),
    ]
    if pc + oc > ctx:
        n = min(pc, ctx)
        cases.append(("n_prompt + max_tokens > context_length -> TOO_LONG",
                      dict(prompt=[3] * n, max_tokens=ctx - n + 1), E_TOO_LONG))
    specs = [c[1] for c in cases]
    res, _, _ = run_requests(sess, specs, rng)
    for (name, spec, code), r in zip(cases, res):
        C.eq("request error: " + name, (r["state"], r["status"], r["error"], r["n_tokens"]),
             (ST_DONE, S_ERROR, code, 0))
    # the edge values themselves are accepted
    edge = [dict(prompt=[v - 1, 0, 1], max_tokens=2),
            dict(prompt=[9], max_tokens=oc if oc + 1 <= ctx else ctx - 1)]
    if pc + 1 <= ctx:
        edge.append(dict(prompt=[rng.randrange(v) for _ in range(pc)], max_tokens=min(oc, ctx - pc)))
    res, _, _ = run_requests(sess, edge, rng)
    for k, (spec, r) in enumerate(zip(edge, res)):
        check_against_oracle("request at a limit accepted (#%d)" % k, sess, spec, r)


def make_bulk_specs(sess, rng, count):
    v, pc, oc, ctx, eos = sess.vocab, sess.pcap, sess.ocap, sess.ctx, sess.eos
    specs = []
    for i in range(count):
        r = rng.random()
        if r < 0.04:
            n = rng.randint(max(1, pc - 64), pc)
        elif r < 0.25:
            n = rng.randint(65, 700)
        else:
            n = rng.randint(1, 64)
        n = min(n, pc, ctx - 1)
        r = rng.random()
        if r < 0.05:
            m = rng.randint(300, 1200)
        elif r < 0.3:
            m = rng.randint(33, 200)
        else:
            m = rng.randint(1, 32)
        m = max(1, min(m, oc, ctx - n))
        prompt = [rng.randrange(v) for _ in range(n)]
        if rng.random() < 0.2:                     # sprinkle special ids
            prompt[rng.randrange(n)] = rng.choice([0, 1, eos, v - 1])
        flags = REQ_IGNORE_EOS if rng.random() < 0.2 else 0
        specs.append(dict(prompt=prompt, max_tokens=m, flags=flags))
    # known EOS cases in the mix
    specs[count // 3] = dict(prompt=[7951], max_tokens=5)
    specs[count // 2] = dict(prompt=[163], max_tokens=200)
    specs[2 * count // 3] = dict(prompt=[163], max_tokens=200, flags=REQ_IGNORE_EOS)
    return specs


def test_bulk(sess, rng, count=300):
    specs = make_bulk_specs(sess, rng, count)
    t0 = time.monotonic()
    res, peak, used = run_requests(sess, specs, rng, timeout=30)
    dt = time.monotonic() - t0
    for k, (spec, r) in enumerate(zip(specs, res)):
        check_against_oracle("bulk request %d" % k, sess, spec, r)
    C.check("bulk: several requests in flight at once", peak > 1, "peak %d" % peak)
    C.check("bulk: more than one slot used", len(used) > 1, "slots %r" % sorted(used))
    if VERBOSE:
        print("     bulk: %d requests in %.2fs, peak in flight %d, %d slots used" %
              (count, dt, peak, len(used)))


def test_violation_slot_range(daemon, sess_a, rng):
    b = Session(daemon, requested_slots=4, label="violator")
    try:
        b.push(b.nslots, OP_GENERATE)        # slot index out of range (section 6.8)
        b.publish()
        b.sock.settimeout(scaled(5))
        t0 = time.monotonic()
        try:
            got = b.sock.recv(16)
        except socket.timeout:
            got = "timeout"
        except OSError as e:
            got = "error %s" % e
        C.eq("violation (sqe.slot >= slot_count): daemon closes the session", got, b"")
        C.check("violation: close within a few seconds", time.monotonic() - t0 < scaled(5),
                "%.2fs" % (time.monotonic() - t0))
    finally:
        b.close()
    # the first session keeps working
    specs = [dict(prompt=[rng.randrange(sess_a.vocab) for _ in range(rng.randint(1, 40))],
                  max_tokens=rng.randint(1, 40)) for _ in range(20)]
    res, _, _ = run_requests(sess_a, specs, rng)
    for k, (spec, r) in enumerate(zip(specs, res)):
        check_against_oracle("other session still works after violation (#%d)" % k, sess_a, spec, r)


def test_handshake_errors(daemon):
    cases = [
        ("bad magic -> PROTOCOL", hello_bytes(magic=0x12345678), E_PROTOCOL),
        ("abi_version 2 -> VERSION", hello_bytes(abi=2), E_VERSION),
        ("bad magic and version -> PROTOCOL (magic first)", hello_bytes(magic=0, abi=7), E_PROTOCOL),
        ("a flag no version defines -> PROTOCOL", hello_bytes(flags=2), E_PROTOCOL),
        ("non-zero reserved -> PROTOCOL", hello_bytes(reserved=(0, 0, 1)), E_PROTOCOL),
        ("version 2 and flags -> VERSION (version before flags)", hello_bytes(abi=2, flags=4), E_VERSION),
        # section 15.1: the name record after a hello with flag MODEL
        ("MODEL, a name no model has -> MODEL_NOT_FOUND",
         hello_bytes(flags=1) + wire.model_name_record("no-such-model"), 1020),
        ("MODEL, a byte after the name's NUL -> PROTOCOL",
         hello_bytes(flags=1) + b"default\0x" + bytes(55), E_PROTOCOL),
        ("MODEL and reserved -> PROTOCOL (reserved before the name)",
         hello_bytes(flags=1, reserved=(1, 0, 0)) + wire.model_name_record("zz"), E_PROTOCOL),
    ]
    for name, hello, code in cases:
        w, fds, eof = raw_handshake(daemon, hello)
        got = None if w is None else (w.magic, w.abi_version, w.error, len(fds), eof)
        C.eq("handshake: " + name, got, (WELCOME_MAGIC, ABI_VERSION, code, 0, True))


def test_header_checks(sess):
    """Section 3 step 4, rule by rule: the daemon's header passes, and each broken field alone
    is refused (the package's checks, which every session here went through)."""
    size = sess.segment_size
    C.eq("header checks: the daemon's header passes", wire.header_problems(sess.h, size), [])
    # The optional regions' rules too: TEXT's region and piece ends at the prompt array's
    # place (overlap is not a section 3 rule), LOGPROBS's records where the daemon put them.
    h = dict(sess.h, features=sess.h["features"] | wire.FEAT_LOGPROBS | FEAT_TEXT,
             slot_text_offset=wire.SLOT_FIXED, slot_text_capacity=64,
             slot_piece_offset=sess.h["slot_prompt_offset"])
    C.eq("header checks: ... with every region", wire.header_problems(h, size), [])
    slot, per = h["slot_size"], 8 * (1 + h["slot_logprob_capacity"])
    broken = [  # (what, the change, what the refusal names)
        ("magic", dict(magic=0), "magic"), ("abi_version 2", dict(abi_version=2), "abi_version"),
        ("header_size < 256", dict(header_size=255), "header_size"),
        ("segment_size != the welcome's", dict(segment_size=size + 64), "segment_size"),
        ("slot_count 0", dict(slot_count=0), "slot_count 0"),
        ("sq_entries 3", dict(sq_entries=3), "power of two"),
        ("sq_entries < slot_count", dict(slot_count=h["sq_entries"] * 2), "< slot_count"),
        ("ring past the end", dict(sq_offset=size - 128), "ring outside"),
        ("sqes past the end", dict(sqes_offset=size - 8), "sqes outside"),
        ("slots past the end", dict(slot_offset=size - 64), "slots outside"),
        ("prompt array inside the fixed part", dict(slot_prompt_offset=64), "slot_prompt_offset"),
        ("output array past the slot", dict(slot_output_capacity=slot), "output array outside"),
        ("sq_offset not a multiple of 8", dict(sq_offset=h["sq_offset"] + 4), "sq_offset not"),
        ("slot_output_offset not a multiple of 4", dict(slot_output_offset=130),
         "slot_output_offset"),
        ("records past the slot", dict(slot_logprob_offset=slot - per + 8), "records outside"),
        ("records capacity 0xffffffff (1 + it wraps in 32 bits)",
         dict(slot_logprob_capacity=0xFFFFFFFF), "one token's records"),
        ("slot_logprob_offset not a multiple of 8", dict(slot_logprob_offset=132),
         "slot_logprob_offset"),
        ("text region past the slot", dict(slot_text_capacity=slot), "text region outside"),
        ("slot_piece_offset not a multiple of 4", dict(slot_piece_offset=130),
         "slot_piece_offset"),
    ]
    for name, change, named in broken:
        got = wire.header_problems(dict(h, **change), size)
        C.check("header checks: refused for " + name, any(named in p for p in got), repr(got))


def test_client_api(daemon, rng):
    """The package's Client (the user API over the same primitives): generate_batch with bad
    items in the middle equals the oracle item by item; a stream's tokens are the oracle's."""
    import bitnetd

    with bitnetd.Client(daemon.path, timeout=scaled(20), slots=4) as c:
        prompts = [[rng.randrange(3, 32000) for _ in range(rng.randint(1, 30))] for _ in range(12)]
        prompts[5], prompts[8] = [1, 32000], []
        out = c.generate_batch(prompts, max_tokens=9, ignore_eos=True)
        C.eq("client: bad items fail in place (TOKEN, EMPTY)",
             (type(out[5]).__name__, type(out[8]).__name__), ("TokenError", "EmptyError"))
        bad = [k for k, (p, g) in enumerate(zip(prompts, out)) if k not in (5, 8) and
               (g.ids, g.status) != (loopback(p, 9, ignore_eos=True)[0], "length")]
        C.check("client: generate_batch == the oracle item by item", not bad, repr(bad))
        pieces = [p.token for p in c.stream([3, 1, 4, 1, 5], max_tokens=40)]
        C.eq("client: stream == the oracle", pieces, loopback([3, 1, 4, 1, 5], 40)[0])


def test_control(daemon, sess):
    d = Session(daemon, requested_slots=1, label="ctl")
    try:
        r = d.control(99)
        C.eq("control: unknown op -> error 1001, length 0",
             (r["magic"], r["op"], r["error"], r["length"]), (CTL_REPLY_MAGIC, 99, E_INVALID, 0))
        # several requests before reading, answered in order
        d.sock.sendall(struct.pack("<IIII", CTL_MAGIC, 98, 0, 0) + struct.pack("<IIII", CTL_MAGIC, 1, 0, 0))
        r1 = struct.unpack("<IIII", recv_exact(d.sock, 16))
        r2 = struct.unpack("<IIII", recv_exact(d.sock, 16))
        recv_exact(d.sock, r2[3])
        C.eq("control: pipelined requests answered in order", (r1[1], r1[2], r2[1], r2[2]),
             (98, E_INVALID, CTL_STATS, 0))
        spec = dict(prompt=[4, 5, 6], max_tokens=7)
        check_against_oracle("control: session still serves after unknown op", d, spec, d.run_one(spec))
        min_submitted = sess.submitted + d.submitted    # requests queued on this daemon
    finally:
        d.close()
    r = sess.control(CTL_STATS)
    C.eq("STATS reply header", (r["magic"], r["op"], r["error"]), (CTL_REPLY_MAGIC, CTL_STATS, 0))
    C.eq("STATS payload length == length field", len(r["payload"]), r["length"])
    try:
        text = r["payload"].decode("utf-8")
        metrics = read_prometheus(text)
        parse_err = ""
    except (UnicodeDecodeError, ValueError, IndexError) as e:
        metrics, parse_err = {}, repr(e)
    C.check("STATS payload parses as Prometheus text", metrics and not parse_err, parse_err or "no samples")
    badnames = [n for n in metrics if not n.startswith("bitnetd_")]
    C.check("STATS: every metric name starts with bitnetd_", not badnames, ", ".join(badnames[:5]))
    sub = metrics.get("bitnetd_requests_submitted_total")
    C.check("STATS: bitnetd_requests_submitted_total >= requests sent",
            sub is not None and sub >= min_submitted, "got %r, sent %d" % (sub, min_submitted))

# ---------------------------------------------------------------- tests: slow daemon


def test_futex_completion(sess):
    spec = dict(prompt=[5, 6, 7], max_tokens=60)
    local = collections.Counter()
    sess.submit([(0, spec)])
    done = sess.wait(0, timeout=scaled(10), stats=local)
    FUTEX_STATS.update(local)
    C.check("futex: completion wait returns", done)
    r = sess.result(0)
    sess.release(0)
    check_against_oracle("futex: slow request result", sess, spec, r)
    C.check("futex: completion waiter slept (FUTEX_WAIT called)", local["calls"] > 0, repr(dict(local)))
    # A completion waiter alone is not woken by tokens (section 8.2): at most the
    # DONE wake, plus one late wake of the slot's previous request.
    C.check("futex: completion waiter not woken per token (<= 2 wakes for 60 tokens)",
            local["woken"] <= 2, repr(dict(local)))
    return local


def test_streaming(sess):
    spec = dict(prompt=[9, 8, 7, 6], max_tokens=150)
    want, wstatus = loopback(spec["prompt"], spec["max_tokens"], sess.vocab, sess.eos)
    slot = 3
    u, S, o = sess.u32, sess.S(slot), sess.out_index(slot)
    sess.submit([(slot, spec)])
    have, got, counts, decreasing = 0, [], [], False
    deadline = time.monotonic() + scaled(15)
    while time.monotonic() < deadline:
        if not sess.wait(slot, have=have, timeout=deadline - time.monotonic()):
            break
        state = u[(S + SL_STATE) // 4]           # state first: then n is final if DONE
        n = u[(S + SL_NTOK) // 4]
        if n < have:
            decreasing = True
        if state != ST_DONE:
            counts.append(n)
        got += u[o + have:o + n].tolist()
        have = n
        if state == ST_DONE:
            break
    r = sess.result(slot)
    sess.release(slot)
    mids = sorted(set(c for c in counts if 0 < c < spec["max_tokens"]))
    C.check("streaming: n_tokens grows while the request runs (>= 3 distinct counts)",
            len(mids) >= 3, "saw %r" % mids[:10])
    C.check("streaming: n_tokens never decreases", not decreasing)
    C.eq("streaming: tokens read while streaming == oracle", got, want)
    C.eq("streaming: final result", (r["state"], r["status"], r["n_tokens"], r["tokens"]),
         (ST_DONE, wstatus, len(want), want))


def test_cancel(sess):
    m = min(1000, sess.ocap, sess.ctx - 2)
    spec = dict(prompt=[21, 22], max_tokens=m)
    want, _ = loopback(spec["prompt"], m, sess.vocab, sess.eos, True)
    spec["flags"] = REQ_IGNORE_EOS
    slot = 5
    S = sess.S(slot)
    sess.submit([(slot, spec)])
    have = 0
    deadline = time.monotonic() + scaled(10)
    while have < 10 and time.monotonic() < deadline:
        sess.wait(slot, have=have, timeout=1)
        have = sess.u32[(S + SL_NTOK) // 4]
    sess.u32[(S + SL_CANCEL) // 4] = 1
    C.check("cancel: request completes after cancel", sess.wait(slot, timeout=scaled(10)))
    r = sess.result(slot)
    sess.release(slot)
    C.eq("cancel: status CANCELLED", (r["state"], r["status"], r["error"]), (ST_DONE, S_CANCELLED, 0))
    C.check("cancel: stopped early, kept tokens produced before the cancel",
            have <= r["n_tokens"] < m, "n_tokens %d (had %d, max %d)" % (r["n_tokens"], have, m))
    C.eq("cancel: tokens are a prefix of the oracle", r["tokens"], want[:r["n_tokens"]])
    # a cancel after DONE has no effect on the next request in that slot (prepare resets it)
    spec2 = dict(prompt=[21, 22], max_tokens=3)
    check_against_oracle("cancel: slot reusable after cancel", sess, spec2, sess.run_one(spec2, slot=slot))


def test_violation_inflight(daemon, sess_e):
    f = Session(daemon, requested_slots=2, label="violator2")
    try:
        spec = dict(prompt=[11, 12], max_tokens=min(500, f.ocap))
        want, _ = loopback(spec["prompt"], spec["max_tokens"], f.vocab, f.eos)
        f.submit([(0, spec)])
        f.wait(0, have=0, timeout=scaled(5))           # running now
        f.push(1, OP_GENERATE, (1, 0))                 # sqe.reserved != 0 (section 6.8)
        f.publish()
        f.sock.settimeout(scaled(5))
        try:
            got = f.sock.recv(16)
        except socket.timeout:
            got = "timeout"
        except OSError as e:
            got = "error %s" % e
        S = f.S(0)
        state = f.u32[(S + SL_STATE) // 4]
        C.eq("violation (sqe.reserved): daemon closes the session", got, b"")
        C.eq("violation: in-flight slot DONE before the hang-up", state, ST_DONE)
        r = f.result(0)
        C.eq("violation: in-flight request ends ERROR/PROTOCOL", (r["status"], r["error"]),
             (S_ERROR, E_PROTOCOL))
        C.eq("violation: tokens kept are a prefix of the oracle", r["tokens"], want[:r["n_tokens"]])
    finally:
        f.close()
    spec = dict(prompt=[31, 32, 33], max_tokens=5)
    check_against_oracle("slow daemon: other session works after violation", sess_e, spec,
                         sess_e.run_one(spec, slot=7))


def test_shutdown(daemon, sess):
    rc = daemon.stop()
    C.eq("shutdown: daemon exit status", rc, 0)
    C.check("shutdown: SHUTTING_DOWN set in daemon_flags", sess.daemon_flags() & DAEMON_SHUTTING_DOWN,
            "daemon_flags 0x%x" % sess.daemon_flags())
    sess.sock.settimeout(scaled(3))
    try:
        got = sess.sock.recv(1)
    except (socket.timeout, OSError) as e:
        got = repr(e)
    C.eq("shutdown: session socket hung up", got, b"")

def test_shutdown_race(exe, tmpdir, rounds=12):
    """Section 11.3 on an idle daemon: a request queued after SHUTTING_DOWN shows still ends
    with SHUTDOWN (in the slot, or by the CLOSED rule after the hang-up), never lost."""
    statuses, by_daemon, lost = collections.Counter(), 0, []
    for k in range(rounds):
        d = Daemon(exe, tmpdir, "race%d" % k)
        d.start()
        sess = Session(d, requested_slots=2, label="race%d" % k)
        try:
            d.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + scaled(5)
            while not sess.daemon_flags() & DAEMON_SHUTTING_DOWN and time.monotonic() < deadline:
                pass
            sess.submit([(0, dict(prompt=[3, 4], max_tokens=2))])
            try:
                if sess.wait(0, timeout=scaled(10)):
                    statuses[sess.result(0)["status"]] += 1
            except DisconnectedError as e:
                lost.append(str(e))
            by_daemon += not sess.untaken
        finally:
            sess.close()
            rc = d.stop()
        C.eq("shutdown race %d: daemon exit status" % k, rc, 0)
    C.eq("shutdown race: every late request ends with SHUTDOWN, none lost",
         (dict(statuses), lost), ({S_SHUTDOWN: rounds}, []))
    if VERBOSE:
        print("     shutdown race: %d of %d answered in the slot, the rest by the CLOSED rule"
              % (by_daemon, rounds))


def test_connect_during_drain(exe, tmpdir):
    """Section 11.3 step 1: a connection made during the drain gets welcome error 1005, and
    one made after the daemon stopped listening is refused by connect() itself."""
    d = Daemon(exe, tmpdir, "drain", extra=["--step-delay-us", "2000", "--drain-timeout-ms", "3000"])
    d.start()
    sess = Session(d, requested_slots=1, label="drain")
    try:
        spec = dict(prompt=[5, 6], max_tokens=min(1000, sess.ocap), flags=REQ_IGNORE_EOS)
        sess.submit([(0, spec)])
        sess.wait(0, have=0, timeout=scaled(5))      # running: the drain will take a while
        d.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + scaled(5)
        while not sess.daemon_flags() & DAEMON_SHUTTING_DOWN and time.monotonic() < deadline:
            time.sleep(0.001)
        w, fds, eof = raw_handshake(d, hello_bytes())
        got = None if w is None else (w.error, len(fds), eof)
        C.eq("drain: a new connection gets welcome 1005 SHUTDOWN and is closed", got,
             (1005, 0, True))
        C.check("drain: the running request ends", sess.wait(0, timeout=scaled(10)))
        r = sess.result(0)
        C.check("drain: ... with LENGTH or SHUTDOWN", r["status"] in (S_LENGTH, S_SHUTDOWN), repr(r))
        # CLOSED comes after the last request's DONE and before the hang-up (section 11.3):
        # look once the socket has hung up, not at once after DONE.
        deadline = time.monotonic() + scaled(10)
        while not sess.daemon_gone() and time.monotonic() < deadline:
            time.sleep(0.005)
        C.check("drain: ring marked CLOSED before the hang-up", sess.daemon_flags() & DAEMON_CLOSED,
                "daemon_flags 0x%x" % sess.daemon_flags())
    finally:
        sess.close()
        rc = d.stop()
    C.eq("drain: daemon exit status", rc, 0)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(d.path)
        after = "connected"
    except OSError as e:
        after = errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()
    C.eq("drain: connect() after the daemon stopped listening", after, "ECONNREFUSED")

# ---------------------------------------------------------------- tests: text (section 6.10)

GGML_SEP = b"\n__ggml_vocab_test__\n"


def tokenize(sess, data, flags=REQ_TEXT | REQ_NO_BOS, slot=0):
    r = sess.run_one(dict(op=OP_TOKENIZE, text=data, flags=flags), slot=slot)
    if (r["status"], r["error"]) != (S_COMPLETE, 0):
        raise RuntimeError("tokenize %r: status %d error %d" % (data[:40], r["status"], r["error"]))
    return r["tokens"]


def detokenize(sess, ids, flags=0, slot=0):
    r = sess.run_one(dict(op=OP_DETOKENIZE, prompt=ids, flags=flags), slot=slot)
    if (r["status"], r["error"]) != (S_COMPLETE, 0):
        raise RuntimeError("detokenize: status %d error %d" % (r["status"], r["error"]))
    return r["text"]


def cli_ids(daemon, args, stdin=None):
    """The C library's answer (bitnet-cli encodes locally with the fetched vocabulary)."""
    cli = os.path.join(os.path.dirname(daemon.exe), "bitnet-cli")
    out = subprocess.run([cli, "--socket", daemon.path] + args, input=stdin,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=scaled(60),
                         check=True)
    return [int(x) for x in out.stdout.split()]


def random_text(rng):
    pools = ["abc xyz", "Hello, world! ", "  \t\n", "0123456789", "éàü ß", "日本語の文",
             "Привет мир", "🙂🚀👍🏽", "<s></s>", "'s 're ll", "\u00a0\u2009"]
    return "".join(rng.choice(pools)[rng.randrange(3):] for _ in range(rng.randint(1, 6)))


def test_text_spm(daemon, sess, rng):
    h = sess.h
    C.check("text daemon: TEXT feature bit", h["features"] & FEAT_TEXT, "features 0x%x" % h["features"])
    C.check("text region holds 4 bytes a token at least",
            h["slot_text_capacity"] >= 4 * max(sess.pcap, sess.ocap), "capacity %d" % h["slot_text_capacity"])
    # The daemon's ids are the C library's, text by text (BOS as the model says).
    texts = [random_text(rng) for _ in range(24)] + ["", " ", "a", "Hello world"]
    bad = []
    for t in texts:
        got = tokenize(sess, t.encode(), REQ_TEXT)
        want = cli_ids(daemon, ["tokenize", "-"], t.encode())
        if got != want:
            bad.append("%r: %r != %r" % (t, got[:8], want[:8]))
    C.check("tokenize op == the C library's ids (%d texts)" % len(texts), not bad, "; ".join(bad[:3]))
    # The daemon's text is the C library's, and it is the text encoded (for texts without
    # white space: this synthetic vocabulary has no U+2581 piece, so a space comes back as
    # the mark's bytes, as llama.cpp decodes byte tokens).
    bad = []
    for t in texts:
        ids = tokenize(sess, t.encode(), REQ_TEXT)
        got = detokenize(sess, ids, REQ_STRIP_SPACE)
        want = subprocess.run([os.path.join(os.path.dirname(daemon.exe), "bitnet-cli"), "--socket",
                               daemon.path, "detokenize", "--ids", " ".join(map(str, ids))],
                              stdout=subprocess.PIPE, check=True).stdout[:-1]
        if got != (want[1:] if want[:1] == b" " else want):
            bad.append("%r: %r != %r" % (t, got, want))
    C.check("detokenize op == the C library's text (%d texts)" % len(texts), not bad, "; ".join(bad[:3]))
    plain = [t.replace(" ", "").replace("\t", "").replace("\n", "").replace("\u00a0", "").replace("\u2009", "")
             for t in texts]
    plain = [t for t in plain if t]
    mark = "\u2581".encode()           # the word-start mark SentencePiece puts first
    bad = [t for t in plain if detokenize(sess, tokenize(sess, t.encode(), REQ_TEXT),
                                          REQ_STRIP_SPACE) != mark + t.encode()]
    C.check("detokenize(tokenize(s)) == U+2581 s (%d texts)" % len(plain), not bad, repr(bad[:3]))
    # A text prompt is the prompt of its ids; the output's text is the output's bytes decoded.
    # (random_text may draw no characters at all: an empty text prompt is EMPTY, tested below)
    for k, t in enumerate(["Once upon a time", "日本 🙂 x", random_text(rng) or "x"]):
        ids = tokenize(sess, t.encode(), REQ_TEXT)
        a = sess.run_one(dict(text=t.encode(), max_tokens=24,
                              flags=REQ_TEXT | REQ_TEXT_OUT | REQ_IGNORE_EOS))
        b = sess.run_one(dict(prompt=ids, max_tokens=24, flags=REQ_IGNORE_EOS))
        C.eq("text prompt #%d: status, prompt_tokens, tokens == the ids' request" % k,
             (a["status"], a["prompt_tokens"], a["tokens"]), (S_LENGTH, len(ids), b["tokens"]))
        raw = detokenize(sess, a["tokens"])
        want = raw.decode("utf-8", "replace").encode()
        C.eq("text out #%d == its bytes decoded with U+FFFD (Python's decoder)" % k, a["text"], want)
        ends = a["piece_ends"]
        C.check("text out #%d: piece ends grow and stay within n_text" % k,
                all(x <= y for x, y in zip([0] + ends, ends + [len(a["text"])])), repr(ends))
    cap = h["slot_text_capacity"]
    errors = [
        ("text longer than slot_text_capacity -> TOO_LONG",
         dict(text=b"", n_prompt=cap + 1, max_tokens=1, flags=REQ_TEXT), E_TOO_LONG),
        ("TEXT and CHAT together -> INVALID", dict(text=b"x", max_tokens=1, flags=REQ_TEXT | REQ_CHAT), E_INVALID),
        ("PARSE_SPECIAL without TEXT -> INVALID", dict(prompt=[5], max_tokens=1, flags=REQ_PARSE_SPECIAL), E_INVALID),
        ("SPECIAL_TEXT without TEXT_OUT -> INVALID", dict(prompt=[5], max_tokens=1, flags=REQ_SPECIAL_TEXT), E_INVALID),
        ("text prompt of 0 bytes -> EMPTY", dict(text=b"", max_tokens=1, flags=REQ_TEXT), E_EMPTY),
        ("text prompt + max_tokens > context -> TOO_LONG",
         dict(text=b"hi", max_tokens=sess.ctx, flags=REQ_TEXT), E_TOO_LONG),
        ("text prompt with a stop id >= vocab -> TOKEN",
         dict(text=b"hi", prompt=[sess.vocab], reserved2=[0] * 9 + [1, 0, 0, 0], max_tokens=1,
              flags=REQ_TEXT), E_TOKEN),
        ("tokenize with max_tokens -> INVALID", dict(op=OP_TOKENIZE, text=b"x", max_tokens=1, flags=REQ_TEXT), E_INVALID),
        ("tokenize without TEXT or CHAT -> INVALID", dict(op=OP_TOKENIZE, text=b"x"), E_INVALID),
        ("tokenize with TEXT_OUT -> INVALID", dict(op=OP_TOKENIZE, text=b"x", flags=REQ_TEXT | REQ_TEXT_OUT), E_INVALID),
        ("detokenize of an id >= vocab -> TOKEN", dict(op=OP_DETOKENIZE, prompt=[1, sess.vocab]), E_TOKEN),
        ("detokenize with TEXT -> INVALID", dict(op=OP_DETOKENIZE, prompt=[1], flags=REQ_TEXT), E_INVALID),
        ("detokenize of more than prompt capacity -> TOO_LONG",
         dict(op=OP_DETOKENIZE, prompt=[], n_prompt=sess.pcap + 1), E_TOO_LONG),
        ("chat: lengths that do not add up -> INVALID",
         dict(text=wire.conversation([("user", "hi")]) + b"x", max_tokens=1, flags=REQ_CHAT), E_INVALID),
        ("chat: no messages -> INVALID", dict(text=wire.conversation([]), max_tokens=1, flags=REQ_CHAT), E_INVALID),
        ("chat: a bad role -> INVALID", dict(text=wire.conversation([("us er", "hi")], 4), max_tokens=1,
                                                flags=REQ_CHAT), E_INVALID),
        ("chat: a NUL in a message -> INVALID", dict(text=wire.conversation([("user", "a\0b")], 4), max_tokens=1,
                                                     flags=REQ_CHAT), E_INVALID),
    ]
    res, _, _ = run_requests(sess, [c[1] for c in errors], rng)
    for (name, _, code), r in zip(errors, res):
        C.eq("text error: " + name, (r["state"], r["status"], r["error"], r["n_tokens"]),
             (ST_DONE, S_ERROR, code, 0))
    r = sess.run_one(dict(op=OP_TOKENIZE, text=b"x" * sess.ocap * 2, flags=REQ_TEXT | REQ_NO_BOS))
    C.check("tokenize: more ids than output capacity -> TOO_LONG with prompt_tokens the count",
            (r["status"], r["error"]) == (S_ERROR, E_TOO_LONG) and r["prompt_tokens"] > sess.ocap,
            repr((r["status"], r["error"], r["prompt_tokens"])))


def compile_grammar(sess, kind, text, flags=0, max_ws=0, reserved=0, slot=0):
    """A GRAMMAR op (section 6.13): the head, then the text, in the text region."""
    body = struct.pack("<IIII", kind, flags, max_ws, reserved) + text
    return sess.run_one(dict(op=OP_GRAMMAR, text=body), slot=slot)


def with_grammar(gid, words=None):
    """The 13 words at bytes 76..127 with grammar_id, the last, set."""
    words = list(words or [0] * 13)
    words[12] = gid
    return words


def test_grammar(sess, rng):
    """Section 6.13 on the cpu daemon, field by field."""
    C.check("GRAMMAR feature bit", sess.h["features"] & wire.FEAT_GRAMMAR,
            "features 0x%x" % sess.h["features"])
    r = compile_grammar(sess, wire.GRAMMAR_REGEX, b"(ab|cd){2}x")
    C.check("GRAMMAR op: COMPLETE, its id in output[0], n_tokens 1",
            (r["status"], r["n_tokens"]) == (S_COMPLETE, 1) and r["tokens"][0] >= 1, repr(r))
    gid = r["tokens"][0]
    out = sess.run_one(dict(prompt=[1, 5, 9], max_tokens=16, flags=REQ_GRAMMAR,
                            reserved2=with_grammar(gid)))
    text = detokenize(sess, out["tokens"], 0)
    C.check("a constrained output ends with EOS and matches its regex (Python's re)",
            out["status"] == S_EOS and __import__("re").fullmatch(rb"\s*(ab|cd){2}x", text),
            repr((out["status"], text)))
    r2 = compile_grammar(sess, wire.GRAMMAR_REGEX, b"(ab|cd){2}x")
    C.check("the same grammar again: a new id", r2["status"] == S_COMPLETE and
            r2["tokens"][0] not in (0, gid), repr(r2["tokens"]))
    bad_schema = b'{"type":"array","unevaluatedItems":false}'
    r = compile_grammar(sess, wire.GRAMMAR_JSON_SCHEMA, bad_schema)
    C.check("an unsupported keyword -> GRAMMAR, its name in the text region",
            (r["status"], r["error"]) == (S_ERROR, E_GRAMMAR) and b"unevaluatedItems" in r["text"],
            repr((r["error"], r["text"])))
    r = compile_grammar(sess, wire.GRAMMAR_REGEX, b"a{200000}")
    C.check("a repetition over its limit -> GRAMMAR_LIMIT, named",
            (r["status"], r["error"]) == (S_ERROR, E_GRAMMAR_LIMIT) and b"limit" in r["text"],
            repr((r["error"], r["text"])))
    heads = [("kind 0", dict(kind=0)), ("kind 5", dict(kind=5)), ("unknown flag", dict(flags=4)),
             ("JSON_OBJECT on a regex", dict(flags=wire.GRAMMAR_JSON_OBJECT)),
             ("max_ws on a regex", dict(max_ws=3)), ("reserved word", dict(reserved=1))]
    for name, f in heads:
        r = compile_grammar(sess, f.get("kind", wire.GRAMMAR_REGEX), b"a", f.get("flags", 0),
                            f.get("max_ws", 0), f.get("reserved", 0))
        C.check("grammar head: %s -> INVALID with a reason" % name,
                (r["status"], r["error"], r["n_tokens"]) == (S_ERROR, E_INVALID, 0) and r["text"],
                repr((r["status"], r["error"], r["text"])))
    cap = sess.h["slot_text_capacity"]
    cases = [
        ("GRAMMAR op shorter than its head -> INVALID", dict(op=OP_GRAMMAR, text=b"\3\0\0"), E_INVALID),
        ("GRAMMAR op over the text region -> TOO_LONG",
         dict(op=OP_GRAMMAR, text=b"", n_prompt=cap + 1), E_TOO_LONG),
        ("GRAMMAR op with flags -> INVALID",
         dict(op=OP_GRAMMAR, text=struct.pack("<IIII", 3, 0, 0, 0) + b"a", flags=REQ_TEXT), E_INVALID),
        ("GRAMMAR op with max_tokens -> INVALID",
         dict(op=OP_GRAMMAR, text=struct.pack("<IIII", 3, 0, 0, 0) + b"a", max_tokens=1), E_INVALID),
        ("grammar_id without the GRAMMAR flag -> INVALID",
         dict(prompt=[1], max_tokens=1, reserved2=with_grammar(gid)), E_INVALID),
        ("GRAMMAR with an id the session never had -> INVALID",
         dict(prompt=[1], max_tokens=1, flags=REQ_GRAMMAR, reserved2=with_grammar(gid + 1000)), E_INVALID),
        ("GRAMMAR with id 0 -> INVALID", dict(prompt=[1], max_tokens=1, flags=REQ_GRAMMAR), E_INVALID),
        ("GRAMMAR with IGNORE_EOS -> INVALID",
         dict(prompt=[1], max_tokens=1, flags=REQ_GRAMMAR | REQ_IGNORE_EOS,
              reserved2=with_grammar(gid)), E_INVALID),
        ("GRAMMAR on a score request -> INVALID",
         dict(op=OP_SCORE, prompt=[1, 2], flags=REQ_GRAMMAR, reserved2=with_grammar(gid)), E_INVALID),
        ("GRAMMAR_FREE of an unknown id -> INVALID", dict(op=OP_GRAMMAR_FREE, prompt=[gid + 1000]), E_INVALID),
        ("GRAMMAR_FREE of two ids -> INVALID", dict(op=OP_GRAMMAR_FREE, prompt=[gid, gid]), E_INVALID),
    ]
    res, _, _ = run_requests(sess, [c[1] for c in cases], rng)
    for (name, _, code), r in zip(cases, res):
        C.eq("grammar error: " + name, (r["state"], r["status"], r["error"], r["n_tokens"]),
             (ST_DONE, S_ERROR, code, 0))
    r = sess.run_one(dict(prompt=[1], max_tokens=1, flags=REQ_GRAMMAR, reserved2=with_grammar(gid + 1000)))
    C.check("an unknown id's refusal says so in the text region", b"not one of this session" in r["text"],
            repr(r["text"]))
    r = sess.run_one(dict(op=OP_GRAMMAR_FREE, prompt=[gid]))
    C.eq("GRAMMAR_FREE: COMPLETE, no tokens", (r["status"], r["error"], r["n_tokens"]), (S_COMPLETE, 0, 0))
    r = sess.run_one(dict(prompt=[1], max_tokens=1, flags=REQ_GRAMMAR, reserved2=with_grammar(gid)))
    C.eq("a freed id -> INVALID", (r["status"], r["error"]), (S_ERROR, E_INVALID))
    held = [compile_grammar(sess, wire.GRAMMAR_REGEX, b"q{%d}" % k)["tokens"][0] for k in range(1, 64)]
    r = compile_grammar(sess, wire.GRAMMAR_REGEX, b"z")
    C.check("past --max-grammars (64 held) -> BUSY, named", (r["status"], r["error"]) == (S_ERROR, E_BUSY)
            and b"--max-grammars 64" in r["text"], repr((r["error"], r["text"])))
    for k in held + [r2["tokens"][0]]:
        sess.run_one(dict(op=OP_GRAMMAR_FREE, prompt=[k]))


def test_score(sess, rng):
    """Section 6.11 on the cpu daemon: a score equals the generation's own log-probabilities."""
    C.check("SCORE feature bit", sess.h["features"] & FEAT_SCORE, "features 0x%x" % sess.h["features"])
    prompt, n_top = [1, 5, 9, 13], 3
    params = [0] * 10 + [n_top, 0, 0]              # n_logprobs at byte 116
    g = sess.run_one(dict(prompt=prompt, max_tokens=10, flags=REQ_IGNORE_EOS | REQ_LOGPROBS,
                          reserved2=params), slot=0)
    gen = sess.records(0, g["n_tokens"], n_top)
    seq = prompt + g["tokens"]
    r = sess.run_one(dict(op=OP_SCORE, prompt=seq, flags=REQ_LOGPROBS, reserved2=params), slot=1)
    C.eq("score: COMPLETE with n - 1 positions", (r["status"], r["error"], r["n_tokens"]),
         (S_COMPLETE, 0, len(seq) - 1))
    C.eq("score: output entry i-1 is token i", r["tokens"], seq[1:])
    got = sess.records(1, r["n_tokens"], n_top)
    C.eq("score of prompt + generated == the generation's records (bit for bit)",
         got[len(prompt) - 1:], gen)
    t = sess.run_one(dict(op=OP_SCORE, text=b"Once upon a time", flags=REQ_TEXT), slot=2)
    ids = tokenize(sess, b"Once upon a time", REQ_TEXT)
    i = sess.run_one(dict(op=OP_SCORE, prompt=ids), slot=3)
    C.eq("score of a text == score of its ids", (t["status"], t["prompt_tokens"], t["tokens"]),
         (S_COMPLETE, len(ids), i["tokens"]))
    C.eq("... records too", sess.records(2, t["n_tokens"], 0), sess.records(3, i["n_tokens"], 0))
    errors = [
        ("score with max_tokens -> INVALID", dict(op=OP_SCORE, prompt=[1, 2], max_tokens=1), E_INVALID),
        ("score with a temperature -> INVALID",
         dict(op=OP_SCORE, prompt=[1, 2], reserved2=[0x3f800000] + [0] * 12), E_INVALID),
        ("score with TEXT_OUT -> INVALID", dict(op=OP_SCORE, prompt=[1, 2], flags=REQ_TEXT_OUT), E_INVALID),
        ("score of nothing -> EMPTY", dict(op=OP_SCORE, prompt=[]), E_EMPTY),
        ("score longer than the context -> TOO_LONG",
         dict(op=OP_SCORE, prompt=[], n_prompt=sess.ctx + 1), E_TOO_LONG),
        ("score of an id >= vocab -> TOKEN", dict(op=OP_SCORE, prompt=[1, sess.vocab]), E_TOKEN),
    ]
    res, _, _ = run_requests(sess, [c[1] for c in errors], rng)
    for (name, _, code), r in zip(errors, res):
        C.eq("score error: " + name, (r["state"], r["status"], r["error"], r["n_tokens"]),
             (ST_DONE, S_ERROR, code, 0))
    one = sess.run_one(dict(op=OP_SCORE, prompt=[7]))
    C.eq("score of one token: COMPLETE, nothing scored", (one["status"], one["n_tokens"]), (S_COMPLETE, 0))


def test_embed(exe, tmpdir, model, text_sess, rng, sessions, daemons):
    """Section 6.14: a daemon that embeds (--pooling mean on a generative model), its vectors of
    unit length, text == its ids, the request words' errors; one that does not, and says why."""
    r = text_sess.run_one(dict(op=OP_EMBED, prompt=[1, 5, 9]))
    C.check("no --pooling: no EMBED feature, EMBED -> UNSUPPORTED with the reason",
            not (text_sess.h["features"] & FEAT_EMBED) and (r["status"], r["error"]) ==
            (S_ERROR, E_UNSUPPORTED) and b"--pooling" in (r["text"] or b""), repr(r["text"]))
    d = Daemon(exe, tmpdir, "embed", backend=("--backend", "cpu", "--model", model, "--threads",
                                              "1", "--pooling", "mean"))
    daemons.append(d)
    d.start()
    e = Session(d, requested_slots=8, label="M")
    sessions.append(e)
    C.check("EMBED feature bit, not an embedding model",
            e.h["features"] & FEAT_EMBED and not e.h["features"] & FEAT_EMBEDDING_MODEL,
            "features 0x%x" % e.h["features"])
    ids = tokenize(e, b"Once upon a time", REQ_TEXT)
    a = e.run_one(dict(op=OP_EMBED, prompt=ids), slot=1)
    b = e.run_one(dict(op=OP_EMBED, text=b"Once upon a time", flags=REQ_TEXT), slot=2)
    v = struct.unpack("<%df" % len(a["tokens"]), struct.pack("<%dI" % len(a["tokens"]), *a["tokens"]))
    C.eq("embed: COMPLETE, pooling mean, its token count", (a["status"], a["embed_pooling"],
         a["prompt_tokens"], a["n_tokens"] <= e.ocap), (S_COMPLETE, 1, len(ids), True))
    C.check("embed: a unit vector", abs(sum(x * x for x in v) - 1) < 1e-5, repr(v[:4]))
    C.eq("embed of a text == embed of its ids (bit for bit)",
         (b["status"], b["prompt_tokens"], b["tokens"]), (S_COMPLETE, len(ids), a["tokens"]))
    errors = [
        ("embed with max_tokens -> INVALID", dict(op=OP_EMBED, prompt=[1, 2], max_tokens=1), E_INVALID),
        ("embed with LOGPROBS -> INVALID", dict(op=OP_EMBED, prompt=[1, 2], flags=REQ_LOGPROBS), E_INVALID),
        ("embed of nothing -> EMPTY", dict(op=OP_EMBED, prompt=[]), E_EMPTY),
        ("embed longer than the context -> TOO_LONG",
         dict(op=OP_EMBED, prompt=[], n_prompt=e.ctx + 1), E_TOO_LONG),
        ("embed of an id >= vocab -> TOKEN", dict(op=OP_EMBED, prompt=[1, e.vocab]), E_TOKEN),
    ]
    res, _, _ = run_requests(e, [c[1] for c in errors], rng)
    for (name, _, code), r in zip(errors, res):
        C.eq("embed error: " + name, (r["state"], r["status"], r["error"], r["n_tokens"],
                                      r["embed_pooling"]), (ST_DONE, S_ERROR, code, 0, 0))
    e.close()
    sessions.remove(e)
    C.eq("embed daemon: exit status 0 after SIGTERM", d.stop(), 0)


def label_sums(recs, lengths):
    """Each label's records added in order, as section 6.12 says."""
    sums, at = [], 0
    for n in lengths:
        sums.append(sum(r[0][1] for r in recs[at:at + n]))
        at += n
    return sums


def test_classify(sess, rng):
    """Section 6.12 on the cpu daemon: each label's records are the score of prefix + label."""
    C.check("CLASSIFY feature bit", sess.h["features"] & FEAT_CLASSIFY,
            "features 0x%x" % sess.h["features"])
    prefix = [1] + [rng.randrange(3, sess.vocab) for _ in range(20)]
    labels = [[rng.randrange(3, sess.vocab) for _ in range(n)] for n in (1, 4, 18)]
    r = sess.run_one(dict(op=OP_CLASSIFY, prompt=wire.classify_words(prefix, labels)), slot=0)
    total = sum(len(l) for l in labels)
    C.eq("classify: COMPLETE with every label token", (r["status"], r["error"], r["n_tokens"]),
         (S_COMPLETE, 0, total))
    C.eq("classify: the output holds the label tokens in order", r["tokens"], sum(labels, []))
    got = sess.records(0, r["n_tokens"], 0)
    at = 0
    for j, label in enumerate(labels):
        s = sess.run_one(dict(op=OP_SCORE, prompt=prefix + label), slot=1)
        alone = sess.records(1, s["n_tokens"], 0)[len(prefix) - 1:]
        C.eq("classify label %d == score of prefix + label (bit for bit)" % j,
             got[at:at + len(label)], alone)
        at += len(label)
    text, words = b"Once upon a time, there was a little", [b" girl", b" boy"]
    t = sess.run_one(dict(op=OP_CLASSIFY, text=wire.classify_text(text, words), flags=REQ_TEXT), slot=2)
    counts = list(struct.unpack("<%dI" % len(words), t["text"]))
    n_prefix = len(tokenize(sess, text, REQ_TEXT))
    C.eq("classify text: COMPLETE, prompt_tokens the prefix's, n_text 4 N",
         (t["status"], t["prompt_tokens"], len(t["text"])), (S_COMPLETE, n_prefix, 4 * len(words)))
    sums = label_sums(sess.records(2, t["n_tokens"], 0), counts)
    for j, w in enumerate(words):
        s = sess.run_one(dict(op=OP_SCORE, text=text + w, flags=REQ_TEXT), slot=3)
        alone = sess.records(3, s["n_tokens"], 0)[n_prefix - 1:]
        C.eq("classify text label %d: the tokens text + label gets past the prefix" % j,
             (counts[j], sum(x[0][1] for x in alone)), (len(alone), sums[j]))
    p = [1, 5, 9]
    errors = [
        ("classify with LOGPROBS -> INVALID",
         dict(op=OP_CLASSIFY, prompt=wire.classify_words(p, [[4]]), flags=REQ_LOGPROBS), E_INVALID),
        ("classify with max_tokens -> INVALID",
         dict(op=OP_CLASSIFY, prompt=wire.classify_words(p, [[4]]), max_tokens=1), E_INVALID),
        ("classify whose counts do not add up -> INVALID",
         dict(op=OP_CLASSIFY, prompt=wire.classify_words(p, [[4]]) + [7]), E_INVALID),
        ("classify of nothing -> EMPTY", dict(op=OP_CLASSIFY, prompt=[]), E_EMPTY),
        ("classify without labels -> EMPTY", dict(op=OP_CLASSIFY, prompt=wire.classify_words(p, [])), E_EMPTY),
        ("classify with an empty label -> EMPTY",
         dict(op=OP_CLASSIFY, prompt=wire.classify_words(p, [[4], []])), E_EMPTY),
        ("classify without a prefix -> EMPTY", dict(op=OP_CLASSIFY, prompt=wire.classify_words([], [[4]])), E_EMPTY),
        ("classify with an id >= vocab -> TOKEN",
         dict(op=OP_CLASSIFY, prompt=wire.classify_words(p, [[4, sess.vocab]])), E_TOKEN),
        ("classify larger than the prompt array -> TOO_LONG",
         dict(op=OP_CLASSIFY, prompt=[], n_prompt=sess.pcap + 1), E_TOO_LONG),
        ("classify text whose lengths overrun -> INVALID",
         dict(op=OP_CLASSIFY, text=wire.classify_text(b"ab", [b"c"])[:-1], flags=REQ_TEXT), E_INVALID),
        ("classify text with no label -> EMPTY",
         dict(op=OP_CLASSIFY, text=wire.classify_text(b"ab", []), flags=REQ_TEXT), E_EMPTY),
    ]
    res, _, _ = run_requests(sess, [c[1] for c in errors], rng)
    for (name, _, code), r in zip(errors, res):
        C.eq("classify error: " + name, (r["state"], r["status"], r["error"], r["n_tokens"]),
             (ST_DONE, S_ERROR, code, 0))


def load_vectors(folder):
    inp = open(os.path.join(folder, "llama-bpe.inp"), "rb").read()
    out = open(os.path.join(folder, "llama-bpe.out"), "rb").read().decode().split("\n")
    texts = inp.split(GGML_SEP)[:-1]
    return [(t, [int(x) for x in out[i].split()]) for i, t in enumerate(texts)]


def test_text_llama3(daemon, sess, vectors, label):
    bad = [k for k, (t, ids) in enumerate(vectors) if tokenize(sess, t) != ids]
    C.check("%s: llama.cpp's %d vectors through the tokenize op" % (label, len(vectors)), not bad,
            "vectors %r differ" % bad[:5])
    bad = []
    for k, (t, ids) in enumerate(vectors):
        if not ids:
            continue
        a = sess.run_one(dict(text=t, max_tokens=1, flags=REQ_TEXT | REQ_NO_BOS | REQ_IGNORE_EOS))
        b = sess.run_one(dict(prompt=ids, max_tokens=1, flags=REQ_IGNORE_EOS))
        if (a["prompt_tokens"], a["tokens"]) != (len(ids), b["tokens"]):
            bad.append(k)
    C.check("%s: the vectors as text prompts == as id prompts" % label, not bad, "vectors %r" % bad[:5])
    eot = b"<|eot_id|>"
    C.eq("%s: PARSE_SPECIAL makes <|eot_id|> 128009" % label,
         tokenize(sess, eot, REQ_TEXT | REQ_NO_BOS | REQ_PARSE_SPECIAL), [128009])
    plain = tokenize(sess, eot)
    C.check("%s: without PARSE_SPECIAL <|eot_id|> is plain text" % label,
            128009 not in plain and len(plain) > 1, repr(plain))
    C.eq("%s: BOS first as the model says" % label, tokenize(sess, b"Hi", REQ_TEXT)[:1], [128000])
    # Chat: the C library's render ids; a message's own <|eot_id|> stays text.
    msgs = [("system", " Be brief. "), ("user", "Hi <|eot_id|> there"), ("assistant", "Hello."),
            ("user", "Bye")]
    ids = tokenize(sess, wire.conversation(msgs), REQ_CHAT)
    path = os.path.join(os.path.dirname(daemon.path), label + "-messages.json")
    with open(path, "w") as f:
        f.write("[" + ",".join('{"role": "%s", "content": "%s"}' % m for m in msgs) + "]")
    want = cli_ids(daemon, ["chat", "--messages", path, "--render-ids"])
    C.eq("%s: chat tokenize op == bitnet-cli chat --render-ids" % label, ids, want)
    C.eq("%s: chat ids: one BOS, one <|eot_id|> per message" % label,
         (ids.count(128000), ids.count(128009)), (1, len(msgs)))
    a = sess.run_one(dict(text=wire.conversation(msgs), max_tokens=2, flags=REQ_CHAT | REQ_IGNORE_EOS | REQ_TEXT_OUT))
    b = sess.run_one(dict(prompt=ids, max_tokens=2, flags=REQ_IGNORE_EOS))
    C.eq("%s: chat prompt == its ids as prompt" % label, (a["prompt_tokens"], a["tokens"]),
         (len(ids), b["tokens"]))


def run_text_tests(exe, tmpdir, rng, sessions, daemons):
    model = os.environ.get("BITNET_CONF_MODEL", "build/models/tiny.gguf")
    if not os.path.exists(model):
        print("SKIP text tests: no %s (make all builds it)" % model)
        return
    d = Daemon(exe, tmpdir, "text", backend=("--backend", "cpu", "--model", model, "--threads", "1"))
    daemons.append(d)
    d.start()
    t = Session(d, requested_slots=8, label="T")
    sessions.append(t)
    C.eq("cpu daemon's defaults: lm_head SCREENED (2), decode_layout 2-bit (1)",
         (t.h["lm_head"], t.h["decode_layout"]), (wire.HEAD_SCREENED, 1))
    test_text_spm(d, t, rng)
    test_grammar(t, rng)
    test_score(t, rng)
    test_classify(t, rng)
    test_embed(exe, tmpdir, model, t, rng, sessions, daemons)
    t.close()
    sessions.remove(t)
    C.eq("text daemon: exit status 0 after SIGTERM", d.stop(), 0)
    models = os.environ.get("BITNET_TEST_MODELS")
    if not models:
        print("SKIP LLaMA-3 text tests: BITNET_TEST_MODELS is not set")
        return
    folder = os.path.join(models, "llama3")
    vectors = load_vectors(folder)
    C.eq("llama.cpp's vector count", len(vectors), 46)
    tool = os.path.join(os.path.dirname(exe), "bitnet-model")
    for meta in ("microsoft", "llama.cpp"):
        path = os.path.join(tmpdir, meta + ".gguf")
        subprocess.run([tool, "write", "--preset", "tiny", "--vocab-from",
                        os.path.join(folder, "tokenizer.json"), "--metadata", meta, "--out", path],
                       check=True, stdout=subprocess.DEVNULL)
        d = Daemon(exe, tmpdir, "llama3-" + meta,
                   backend=("--backend", "cpu", "--model", path, "--threads", "1"))
        daemons.append(d)
        d.start()
        t = Session(d, requested_slots=4, label=meta)
        sessions.append(t)
        test_text_llama3(d, t, vectors, meta)
        t.close()
        sessions.remove(t)
        C.eq("%s daemon: exit status 0 after SIGTERM" % meta, d.stop(), 0)

# ---------------------------------------------------------------- main


def main():
    exe = os.environ.get("BITNETD", "build/bitnetd")
    if not os.access(exe, os.X_OK):
        print("conformance: %s is not an executable (build it with make build/bitnetd)" % exe)
        print("0 passed, 1 failed")
        return 1
    rng = random.Random(20240521)
    tmpdir = tempfile.mkdtemp(prefix="bitnetd-conf-")
    ring_start = 0xFFFFFFF0              # counters wrap 2^32 early in the run (section 4.2)
    fast = Daemon(exe, tmpdir, "fast", env={"BITNETD_RING_START": str(ring_start)})
    slow = Daemon(exe, tmpdir, "slow", extra=["--step-delay-us", "2000"])
    t0 = time.monotonic()
    sessions = []
    extra_daemons = []
    try:
        test_oracle_self()

        # ---- fast daemon
        fast.start()
        a = Session(fast, requested_slots=8, label="A")
        sessions.append(a)
        C.check("handshake + header validation (section 3)", True)
        test_header(a, ring_start, 8)
        test_worked_examples(a)
        test_request_errors(a, rng)
        test_bulk(a, rng, 300)
        C.check("ring counters wrapped 2^32", a.tail < ring_start, "tail 0x%08x" % a.tail)
        test_violation_slot_range(fast, a, rng)
        test_handshake_errors(fast)
        test_control(fast, a)
        test_header_checks(a)
        test_client_api(fast, rng)
        a.close()
        sessions.remove(a)
        C.eq("fast daemon: exit status 0 after SIGTERM", fast.stop(), 0)

        # ---- slow daemon (--step-delay-us 2000)
        slow.start()
        e = Session(slow, label="E")
        sessions.append(e)
        C.eq("slow daemon: default slot_count (--slots default 64)", e.nslots, 64)
        C.eq("slow daemon: ring starts at 0", (e.initial_head, e.tail), (0, 0))
        FUTEX_STATS.clear()
        test_futex_completion(e)
        test_streaming(e)
        test_cancel(e)
        test_violation_inflight(slow, e)
        C.check("futex: at least one FUTEX_WAIT returned 0 (a real wake)", FUTEX_STATS["woken"] >= 1,
                repr(dict(FUTEX_STATS)))
        if VERBOSE:
            print("     futex on slow daemon: %r" % dict(FUTEX_STATS))
        test_shutdown(slow, e)
        test_shutdown_race(exe, tmpdir)
        test_connect_during_drain(exe, tmpdir)
        run_text_tests(exe, tmpdir, rng, sessions, extra_daemons)
    except Exception:
        C.check("no unexpected exception", False, traceback.format_exc().rstrip().replace("\n", "\n     "))
    finally:
        for s in sessions:
            try:
                s.close()
            except Exception:
                pass
        for d in [fast, slow] + extra_daemons:
            if d.proc is not None:
                first = d.rc is None
                rc = d.stop()
                if first:
                    C.eq("%s daemon: exit status 0 after SIGTERM" % d.name, rc, 0)
                if rc != 0:
                    print("---- %s daemon log tail:\n%s" % (d.name, d.logtail()))
        shutil.rmtree(tmpdir, ignore_errors=True)
    if VERBOSE:
        print("     runtime %.2fs" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (C.passed, C.failed))
    return 0 if C.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
