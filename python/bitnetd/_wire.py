"""The shared-memory protocol, written from shm/PROTOCOL.md: the handshake (section 2), the
segment and its checks (sections 3-4), the ring (section 5), slots (section 6), and sleeping on
a slot's futex word (section 8.2) the way section 14 describes for a client without atomics:
aligned 32-bit loads and stores through a memoryview, single instructions, which x86-64 keeps
in program order as section 7 needs (acquire loads, release stores; on a weakly ordered CPU
such as arm64 they are not, and Python has no barrier to add); the doorbell rung after every
publication, since the store -> load fence that would let it skip one is not there either.

These are the primitives, with no policy: a Segment fills any slot with any words and queues
any sqe it is given (tests/conformance.py uses that to break the protocol on purpose). The
Client (client.py) is what decides what a well-formed request is.
"""

import array
import collections
import ctypes
import errno
import fcntl
import mmap
import os
import select
import socket
import struct
import time

from . import errors

ABI_VERSION = 1
HELLO_MAGIC = 0x4C484E42       # "BNHL" (section 2.2)
WELCOME_MAGIC = 0x4C574E42     # "BNWL" (section 2.3)
SEG_MAGIC = 0x47534E42         # "BNSG" (section 4.1)
CTL_MAGIC = 0x51434E42         # "BNCQ" (section 10.1)
CTL_REPLY_MAGIC = 0x52434E42   # "BNCR" (section 10.2)
CTL_STATS = 1

HEADER_SIZE, RING_SIZE, SQE_SIZE, SLOT_FIXED = 256, 192, 16, 128
RING_HEAD, RING_TAIL, RING_FLAGS = 0, 64, 128   # from sq_offset (section 4.2)
NEED_WAKEUP = 1
HDR_DAEMON_FLAGS = 28                           # the header's one live word (section 4.1)
DAEMON_SHUTTING_DOWN, DAEMON_CLOSED = 1, 2

FEAT_STREAMING, FEAT_PARAMS, FEAT_LOGPROBS, FEAT_TEXT, FEAT_SCORE, FEAT_CLASSIFY, \
    FEAT_COMPUTE, FEAT_SPECULATE, FEAT_GRAMMAR = 1, 2, 4, 8, 16, 32, 64, 128, 256
FEAT_EMBED, FEAT_EMBEDDING_MODEL = 1024, 2048  # section 6.14
FEATURE_NAMES = (("streaming", FEAT_STREAMING), ("params", FEAT_PARAMS),
                 ("logprobs", FEAT_LOGPROBS), ("text", FEAT_TEXT), ("score", FEAT_SCORE),
                 ("classify", FEAT_CLASSIFY), ("compute", FEAT_COMPUTE),
                 ("speculate", FEAT_SPECULATE), ("grammar", FEAT_GRAMMAR),
                 ("embed", FEAT_EMBED), ("embedding_model", FEAT_EMBEDDING_MODEL))
# The header's lm_head and decode_layout words (feature COMPUTE, section 4.1).
HEAD_NONE, HEAD_FILE, HEAD_SCREENED, HEAD_INT8 = 0, 1, 2, 3
LM_HEADS = {HEAD_NONE: "none", HEAD_FILE: "file", HEAD_SCREENED: "screened", HEAD_INT8: "int8"}
DECODE_LAYOUTS = {0: "none", 1: "2bit", 2: "base3"}
OP_GENERATE, OP_TOKENIZE, OP_DETOKENIZE, OP_SCORE, OP_CLASSIFY = 1, 2, 3, 4, 5
OP_GRAMMAR, OP_GRAMMAR_FREE = 6, 7
OP_EMBED = 8
# An embedding's pooling (section 6.14: the slot's embed_pooling word, low byte) and its bit 8.
POOLINGS = {1: "mean", 2: "cls", 3: "last"}
EMBED_TRAINED = 0x100
# A grammar to compile (section 6.13): the head's kinds and flags.
GRAMMAR_JSON_SCHEMA, GRAMMAR_JSON, GRAMMAR_REGEX, GRAMMAR_GBNF = 1, 2, 3, 4
GRAMMAR_JSON_OBJECT, GRAMMAR_JSON_COMPACT = 1, 2
GRAMMAR_TEXT_MAX = 256 * 1024  # the longest grammar text a daemon compiles (PROTOCOL.md 6.13)

REQ_IGNORE_EOS, REQ_SEED, REQ_LOGPROBS = 1, 2, 4
REQ_TEXT, REQ_CHAT, REQ_PARSE_SPECIAL, REQ_NO_BOS = 8, 16, 32, 64
REQ_TEXT_OUT, REQ_SPECIAL_TEXT, REQ_STRIP_SPACE = 128, 256, 512
REQ_SPECULATE, REQ_GRAMMAR = 1024, 2048

ST_FREE, ST_SUBMITTED, ST_DONE = 0, 1, 2
WAIT_DONE, WAIT_TOKENS = 1, 2

S_NONE, S_LENGTH, S_EOS, S_CANCELLED, S_ERROR, S_SHUTDOWN, S_STOP, S_DEADLINE, S_COMPLETE = \
    range(9)
STATUS_NAMES = {1: "length", 2: "eos", 3: "cancelled", 4: "error", 5: "shutdown", 6: "stop",
                7: "deadline", 8: "complete"}

# Slot fixed part (section 4.4).
SL_STATE, SL_CANCEL, SL_NTOK, SL_STATUS, SL_ERROR, SL_WAITERS, SL_EVENTS = 0, 4, 8, 12, 16, 20, 24
SL_NTEXT, SL_TIMINGS, SL_PROMPT_TOKENS, SL_EMBED_POOLING = 28, 32, 56, 60
SL_NPROMPT, SL_MAXTOK, SL_FLAGS, SL_PARAMS = 64, 68, 72, 76
PARAM_WORDS = 13  # bytes 76..127: temperature .. deadline_ms, grammar_id

HEADER = [("magic", 0, "I"), ("abi_version", 4, "I"), ("features", 8, "I"),
          ("header_size", 12, "I"), ("segment_size", 16, "Q"), ("session_id", 24, "I"),
          ("daemon_flags", 28, "I"),  # at the handshake; daemon_flags() reads it live
          ("sq_offset", 32, "I"), ("sq_entries", 36, "I"), ("sqes_offset", 40, "I"),
          ("slot_offset", 44, "I"), ("slot_count", 48, "I"), ("slot_size", 52, "I"),
          ("slot_prompt_offset", 56, "I"), ("slot_prompt_capacity", 60, "I"),
          ("slot_output_offset", 64, "I"), ("slot_output_capacity", 68, "I"),
          ("vocab_size", 72, "I"), ("context_length", 76, "I"), ("bos_id", 80, "I"),
          ("eos_id", 84, "I"), ("backend", 88, "I"), ("slot_logprob_offset", 160, "I"),
          ("slot_logprob_capacity", 164, "I"), ("slot_text_offset", 168, "I"),
          ("slot_text_capacity", 172, "I"), ("slot_piece_offset", 176, "I"),
          ("lm_head", 180, "I"), ("decode_layout", 184, "I")]
BACKENDS = {1: "loopback", 2: "cpu", 3: "cuda"}
DEFAULT_SOCKET = "/run/bitnetd/bitnetd.sock"

TokenLogprob = collections.namedtuple("TokenLogprob", "token logprob")
TokenLogprob.__doc__ = "A token id and its natural-log probability."

Welcome = collections.namedtuple("Welcome", "magic abi_version error session_id segment_size")

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine, 202)
FUTEX_WAIT = 0     # shared: never FUTEX_WAIT_PRIVATE (128), which would not match the daemon
_POLLRDHUP = getattr(select, "POLLRDHUP", 0x2000)
_F_GET_SEALS = getattr(fcntl, "F_GET_SEALS", 1034)
SLICE_S = 0.05     # section 8.2: sleep in bounded slices, check the socket between them
_ONE = struct.pack("<Q", 1)
_FUTEX_OUTCOMES = {0: "woken", errno.EAGAIN: "eagain", errno.ETIMEDOUT: "timedout",
                   errno.EINTR: "eintr"}


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex_wait(addr, expected, timeout_s, stats=None):
    """FUTEX_WAIT (shared) on the u32 at address addr: 0 or an errno. ``stats``, a
    collections.Counter, counts the calls and their outcomes."""
    timeout_s = max(timeout_s, 0.0)
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(FUTEX_WAIT),
                      ctypes.c_uint32(expected), ctypes.byref(ts), None, ctypes.c_int(0))
    err = ctypes.get_errno() if r < 0 else 0
    if stats is not None:
        stats["calls"] += 1
        stats[_FUTEX_OUTCOMES.get(err, "other")] += 1
    return err


# --- the handshake (section 2)
def hello_bytes(slots=0, weight=0, magic=HELLO_MAGIC, abi=ABI_VERSION, flags=0, reserved=(0, 0, 0)):
    """The 32-byte hello (section 2.2); any field may be given, wrong ones included."""
    return struct.pack("<IIIII3I", magic, abi, flags, slots, weight, *reserved)


def recv_welcome(sock):
    """Section 2.3: (Welcome, or None when fewer than 32 bytes came; the descriptors received;
    whether the control data was truncated; the raw bytes)."""
    msg, anc, mflags, _ = sock.recvmsg(32, socket.CMSG_SPACE(2 * 4), socket.MSG_CMSG_CLOEXEC)
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds.extend(a)
    data = msg
    while msg and len(data) < 32:  # the rest carries no descriptors
        msg = sock.recv(32 - len(data))
        data += msg
    w = None
    if len(data) == 32:
        magic, abi, error, sid, size, _r0, _r1 = struct.unpack("<IIIIQII", data)
        w = Welcome(magic, abi, error, sid, size)
    return w, fds, bool(mflags & socket.MSG_CTRUNC), data


def welcome_error(w, fds, ctrunc):
    """The Error a welcome means (section 2.3), or None for a session."""
    if w is None:
        return errors.DisconnectedError("no welcome from the daemon")
    if w.magic != WELCOME_MAGIC:
        return errors.ProtocolError("welcome magic 0x%08x" % w.magic)
    if w.error:
        return errors.error_for(w.error, "the daemon refused the connection (%d)" % w.error)
    if w.abi_version != ABI_VERSION:
        return errors.VersionError("the daemon speaks ABI %d" % w.abi_version)
    if ctrunc or len(fds) != 2:
        return errors.ProtocolError("the welcome carried %d descriptors" % len(fds))
    if w.segment_size < HEADER_SIZE:  # could not even hold the header (section 3)
        return errors.ProtocolError("segment of %d bytes" % w.segment_size)
    return None


def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        more = sock.recv(n - len(buf))
        if not more:
            raise errors.DisconnectedError("the daemon closed the connection")
        buf += more
    return buf


def header_problems(h, size):
    """Section 3 step 4 on the header fields h, in Python's unbounded integers: what fails,
    as a list (empty: the header may be used)."""
    p = []

    def need(ok, what):
        if not ok:
            p.append(what)

    def region(off, n, limit, what):
        need(off + n <= limit, what + " outside its bounds")

    e = h["sq_entries"]
    need(h["magic"] == SEG_MAGIC, "magic 0x%08x" % h["magic"])
    need(h["abi_version"] == ABI_VERSION, "abi_version %d" % h["abi_version"])
    need(h["header_size"] >= HEADER_SIZE, "header_size %d" % h["header_size"])
    need(h["segment_size"] == size, "segment_size %d, welcome %d" % (h["segment_size"], size))
    need(h["slot_count"] >= 1, "slot_count 0")
    need(e > 0 and e & (e - 1) == 0, "sq_entries %d not a power of two" % e)
    need(e >= h["slot_count"], "sq_entries %d < slot_count %d" % (e, h["slot_count"]))
    region(h["sq_offset"], RING_SIZE, size, "ring")
    region(h["sqes_offset"], SQE_SIZE * e, size, "sqes")
    region(h["slot_offset"], h["slot_size"] * h["slot_count"], size, "slots")
    for f in ("prompt", "output"):
        off = h["slot_%s_offset" % f]
        need(off >= SLOT_FIXED and off % 4 == 0, "slot_%s_offset %d" % (f, off))
        region(off, 4 * h["slot_%s_capacity" % f], h["slot_size"], f + " array")
    for f in ("sq_offset", "sqes_offset", "slot_offset", "slot_size"):
        need(h[f] % 8 == 0, "%s not a multiple of 8" % f)
    if h["features"] & FEAT_LOGPROBS:
        per = 8 * (1 + h["slot_logprob_capacity"])
        off = h["slot_logprob_offset"]
        need(off >= SLOT_FIXED and off % 8 == 0, "slot_logprob_offset %d" % off)
        need(per <= h["slot_size"], "one token's records larger than a slot")
        region(off, per * h["slot_output_capacity"], h["slot_size"], "log-probability records")
    if h["features"] & FEAT_TEXT:
        need(h["slot_text_offset"] >= SLOT_FIXED, "slot_text_offset %d" % h["slot_text_offset"])
        region(h["slot_text_offset"], h["slot_text_capacity"], h["slot_size"], "text region")
        off = h["slot_piece_offset"]
        need(off >= SLOT_FIXED and off % 4 == 0, "slot_piece_offset %d" % off)
        region(off, 4 * h["slot_output_capacity"], h["slot_size"], "piece ends")
    return p


# --- request bodies (sections 6.10, 6.12)
def grammar_head(kind, flags=0, max_ws=0):
    """The 16-byte head of a grammar to compile (section 6.13)."""
    return struct.pack("<IIII", kind, flags, max_ws, 0)


def conversation(messages, template=0):
    """Section 6.10's conversation: bn_chat_head, then per message its lengths, role, content.
    A message is a {"role", "content"} dict or a (role, content) pair."""
    parts = [struct.pack("<II", template, len(messages))]
    for m in messages:
        role, content = (m["role"], m["content"]) if isinstance(m, dict) else m
        r, c = role.encode(), content.encode()
        parts.append(struct.pack("<II", len(r), len(c)) + r + c)
    return b"".join(parts)


def classify_words(prefix, labels):
    """Section 6.12's prompt words: N, P, the label lengths, the prefix, the labels."""
    words = [len(labels), len(prefix)] + [len(label) for label in labels] + list(prefix)
    for label in labels:
        words.extend(label)
    return words


def classify_text(prefix, labels):
    """Section 6.12's text body: bn_classify_head, the prefix, then each label's u32 length and
    bytes (prefix and labels as bytes)."""
    return (struct.pack("<II", len(labels), len(prefix)) + prefix +
            b"".join(struct.pack("<I", len(label)) + label for label in labels))


def connect_hint(path, e):
    """What a failed connect means, with the socket it tried and how to name another."""
    if isinstance(e, PermissionError):
        why = ("permission denied: whoever may use the daemon is in the socket's group "
               "(bitnetd's --socket-mode)")
    elif isinstance(e, FileNotFoundError):
        why = "no such socket (is bitnetd running, and listening there?)"
    else:
        why = "nothing accepts there: the daemon that made the socket is gone"
    return ("cannot connect to bitnetd at %s: %s; choose another socket with socket=... "
            "or $BITNETD_SOCKET" % (path, why))


# --- a session
class Segment:
    """One session: the socket, the mapped segment, the doorbell. Not thread-safe by itself:
    the Client serializes submissions."""

    def __init__(self, path, slots=0, timeout=10.0, weight=0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.mm = None
        self.efd = -1
        self.untaken = 0
        try:
            try:
                self.sock.connect(path)
            except (FileNotFoundError, ConnectionRefusedError, PermissionError) as e:
                raise type(e)(e.errno, connect_hint(path, e)) from e
            self._handshake(slots, weight)
        except BaseException:
            self.close()
            raise

    def _handshake(self, slots, weight):
        try:
            self.sock.sendall(hello_bytes(slots, weight))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused at accept: the welcome still says why (section 2.3)
        w, fds, ctrunc, _ = recv_welcome(self.sock)
        err = welcome_error(w, fds, ctrunc)
        if err is not None:
            for fd in fds:
                os.close(fd)
            raise err
        self.welcome, self.session_id, self.segment_size = w, w.session_id, w.segment_size
        memfd, self.efd = fds
        try:
            self._map(memfd)
        finally:
            os.close(memfd)  # the mapping keeps the memory
        self.h = {n: struct.unpack_from("<" + c, self.mm, o)[0] for n, o, c in HEADER}
        self.model_name = bytes(self.mm[96:160]).split(b"\0", 1)[0].decode("utf-8", "replace")
        problems = header_problems(self.h, self.segment_size)
        if problems:
            raise errors.ProtocolError("the segment's header fails section 3: " +
                                       "; ".join(problems))
        size = self.segment_size
        self.u32 = memoryview(self.mm)[:size - size % 4].cast("I")
        self._anchor = (ctypes.c_char * size).from_buffer(self.mm)
        self.base = ctypes.addressof(self._anchor)
        self.features = self.h["features"]
        self.sq = self.h["sq_offset"]
        self.mask = self.h["sq_entries"] - 1
        self.initial_head = self.u32[(self.sq + RING_HEAD) // 4]
        self.tail = self.u32[(self.sq + RING_TAIL) // 4]  # our private copy (section 5.1)

    def _map(self, memfd):
        """Section 3 step 1, with its optional hardening: a memfd shorter than the segment
        would fault (SIGBUS) where the mapping passes its end."""
        try:
            self.seals = fcntl.fcntl(memfd, _F_GET_SEALS)
        except OSError:
            self.seals = 0
        self.memfd_size = os.fstat(memfd).st_size
        if self.memfd_size < self.segment_size:
            raise errors.ProtocolError("the memfd holds %d bytes of a %d-byte segment" %
                                       (self.memfd_size, self.segment_size))
        self.mm = mmap.mmap(memfd, self.segment_size, mmap.MAP_SHARED,
                            mmap.PROT_READ | mmap.PROT_WRITE)

    # --- addresses (section 4)
    def S(self, i):
        return self.h["slot_offset"] + i * self.h["slot_size"]

    def word(self, i, off):
        return self.u32[(self.S(i) + off) // 4]

    def set_word(self, i, off, value):
        self.u32[(self.S(i) + off) // 4] = value

    def daemon_flags(self):
        return self.u32[HDR_DAEMON_FLAGS // 4]

    # --- a request (section 6.3)
    def prepare(self, i, n_prompt, words=(), text=None, flags=0, max_tokens=0, params=None):
        """Fills slot i and marks it SUBMITTED: ``words`` from prompt entry 0 (ids, then stop
        ids; or a classify request's words), ``text`` (bytes) in the text region when the
        daemon has one, the fixed part's request words as given (``n_prompt`` need not match
        either), the response words reset. Raises TooLongError where words or text would
        pass their region (they would land in other memory)."""
        h, u, S = self.h, self.u32, self.S(i)
        if len(words) > h["slot_prompt_capacity"]:
            raise errors.TooLongError("%d prompt words, room for %d" %
                                      (len(words), h["slot_prompt_capacity"]))
        if text is not None and self.features & FEAT_TEXT:
            if len(text) > h["slot_text_capacity"]:
                raise errors.TooLongError("%d bytes of text, room for %d" %
                                          (len(text), h["slot_text_capacity"]))
            t0 = S + h["slot_text_offset"]
            self.mm[t0:t0 + len(text)] = text
        if words:
            p0 = (S + h["slot_prompt_offset"]) // 4
            try:
                u[p0:p0 + len(words)] = array.array("I", words)
            except (OverflowError, TypeError) as e:
                raise errors.InvalidError("a token id is not a u32: %s" % e) from None
        head = array.array("I", (n_prompt, max_tokens, flags))
        head.extend(params or _ZERO_PARAMS)
        u[(S + SL_NPROMPT) // 4:(S + SL_PARAMS) // 4 + PARAM_WORDS] = head
        u[(S + SL_CANCEL) // 4:(S + SL_EVENTS) // 4] = _ZERO_RESPONSE  # cancel .. waiters
        u[(S + SL_EMBED_POOLING) // 4] = 0
        if self.features & FEAT_TEXT:
            u[(S + SL_NTEXT) // 4] = u[(S + SL_PROMPT_TOKENS) // 4] = 0
        u[S // 4] = ST_SUBMITTED  # last

    def release(self, i):
        """DONE -> FREE (section 6.2)."""
        self.u32[self.S(i) // 4] = ST_FREE

    # --- the ring (section 5.1)
    def push(self, i, op, reserved=(0, 0)):
        """Writes the sqe {op, i, reserved} at our tail and advances it, unpublished; the
        caller holds the client's lock."""
        u = self.u32
        if (self.tail - u[(self.sq + RING_HEAD) // 4]) & 0xFFFFFFFF > self.mask:
            raise errors.ProtocolError("the ring is full (a client bug)")
        e = (self.h["sqes_offset"] + SQE_SIZE * (self.tail & self.mask)) // 4
        u[e:e + 4] = array.array("I", (op, i, reserved[0], reserved[1]))
        self.tail = (self.tail + 1) & 0xFFFFFFFF

    def publish(self):
        """Stores the tail and rings the doorbell: every time, since without a full fence a
        Python client cannot trust NEED_WAKEUP (sections 8.1, 14)."""
        self.u32[(self.sq + RING_TAIL) // 4] = self.tail
        try:
            os.write(self.efd, _ONE)
        except BlockingIOError:
            pass  # the counter is full: a wake-up is pending anyway

    def queue(self, i, op):
        self.push(i, op)
        self.publish()

    # --- waiting (section 8.2)
    def satisfied(self, S, have):
        u = self.u32
        return u[S // 4] == ST_DONE or (have is not None and u[(S + SL_NTOK) // 4] != have)

    def daemon_gone(self):
        """Section 11.2's hang-up check; never blocks (a Python socket with a timeout would
        wait for readability before recv, even with MSG_DONTWAIT: poll first)."""
        p = select.poll()
        p.register(self.sock, select.POLLIN | _POLLRDHUP)
        if not p.poll(0):
            return False
        try:
            return self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError, socket.timeout):
            return False
        except OSError:
            return True

    def wait(self, i, have=None, timeout=None, stats=None):
        """True once slot i is DONE (or, with have, once n_tokens != have); False when
        ``timeout`` seconds pass first (None: no limit). A request the daemon never took
        before it shut down (section 11.3) is marked DONE with status SHUTDOWN here, as
        section 14 does. Raises DisconnectedError when the daemon went away with the slot
        not DONE."""
        S, u = self.S(i), self.u32
        ev, wt = (S + SL_EVENTS) // 4, (S + SL_WAITERS) // 4
        deadline = None if timeout is None else time.monotonic() + timeout
        bit = WAIT_DONE if have is None else WAIT_TOKENS
        while True:
            seen = u[ev]  # events before the condition
            if self.satisfied(S, have):
                return True
            left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
            if left <= 0:
                return False
            u[wt] = bit
            err = futex_wait(self.base + S + SL_EVENTS, seen, left, stats)
            u[wt] = 0
            if err == errno.ETIMEDOUT and self.daemon_gone():
                if self.satisfied(S, have):
                    return True
                if self.daemon_flags() & DAEMON_CLOSED:
                    self._end_untaken(S)
                    return True
                raise errors.DisconnectedError("the daemon went away")

    def _end_untaken(self, S):
        u = self.u32
        u[(S + SL_STATUS) // 4], u[(S + SL_ERROR) // 4], u[(S + SL_NTOK) // 4] = S_SHUTDOWN, 0, 0
        u[S // 4] = ST_DONE
        self.untaken += 1

    # --- a DONE slot (section 6.6)
    def response(self, i):
        """The response words of DONE slot i: state, status, error, n_tokens (as written),
        tokens (the output, up to its capacity), prompt_tokens, embed_pooling, and text
        (feature TEXT; else None)."""
        h, u, S = self.h, self.u32, self.S(i)
        n = u[(S + SL_NTOK) // 4]
        o = (S + h["slot_output_offset"]) // 4
        r = {"state": u[S // 4], "status": u[(S + SL_STATUS) // 4],
             "error": u[(S + SL_ERROR) // 4], "n_tokens": n,
             "tokens": u[o:o + min(n, h["slot_output_capacity"])].tolist(),
             "prompt_tokens": u[(S + SL_PROMPT_TOKENS) // 4],
             "embed_pooling": u[(S + SL_EMBED_POOLING) // 4], "text": None}
        if self.features & FEAT_TEXT:
            nt = min(u[(S + SL_NTEXT) // 4], h["slot_text_capacity"])
            t0 = S + h["slot_text_offset"]
            r["text"] = bytes(self.mm[t0:t0 + nt])
        return r

    def records(self, i, n, alternatives=0):
        """The log-probability records of output entries 0 .. n-1 of slot i (section 4.4): per
        entry [chosen, alternative 1, ..., alternative ``alternatives``]."""
        stride = 1 + self.h["slot_logprob_capacity"]
        base = self.S(i) + self.h["slot_logprob_offset"]
        mm, k = self.mm, 1 + alternatives
        return [[TokenLogprob(*_RECORD.unpack_from(mm, base + (j * stride + a) * 8))
                 for a in range(k)] for j in range(n)]

    # --- control messages (section 10)
    def control_raw(self, op, magic=CTL_MAGIC, reserved=(0, 0)):
        """Sends a ctl_request; returns the reply's (magic, op, error, payload)."""
        self.sock.sendall(struct.pack("<IIII", magic, op, *reserved))
        rmagic, rop, err, length = struct.unpack("<IIII", recv_exact(self.sock, 16))
        return rmagic, rop, err, recv_exact(self.sock, length) if length else b""

    def control(self, op):
        magic, rop, err, payload = self.control_raw(op)
        if magic != CTL_REPLY_MAGIC or rop != op:
            raise errors.ProtocolError("bad control reply")
        if err:
            raise errors.error_for(err)
        return payload

    def close(self):
        if self.mm is not None:
            mv = self.__dict__.pop("u32", None)
            if mv is not None:
                mv.release()
            self.__dict__.pop("_anchor", None)
            self.mm.close()
            self.mm = None
        if self.efd >= 0:
            os.close(self.efd)
            self.efd = -1
        self.sock.close()


_RECORD = struct.Struct("<If")
_ZERO_PARAMS = (0,) * PARAM_WORDS
_ZERO_RESPONSE = array.array("I", (0,) * 5)
