"""The shared-memory protocol, written from shm/PROTOCOL.md: the handshake (section 2), the
segment and its checks (sections 3-4), the ring (section 5), slots (section 6), and sleeping on
a slot's futex word (section 8.2) the way section 14 describes for a client without atomics:
aligned 32-bit loads and stores through a memoryview (single instructions on x86-64 and
arm64, where the tail store is then a release), the doorbell rung after every submission.
"""

import array
import ctypes
import errno
import mmap
import os
import select
import socket
import struct
import time

from . import errors

ABI_VERSION = 1
HELLO_MAGIC = 0x4C484E42
WELCOME_MAGIC = 0x4C574E42
SEG_MAGIC = 0x47534E42
CTL_MAGIC = 0x51434E42
CTL_REPLY_MAGIC = 0x52434E42
CTL_STATS = 1

FEAT_STREAMING, FEAT_PARAMS, FEAT_LOGPROBS, FEAT_TEXT, FEAT_SCORE = 1, 2, 4, 8, 16
OP_GENERATE, OP_TOKENIZE, OP_DETOKENIZE, OP_SCORE = 1, 2, 3, 4

REQ_IGNORE_EOS, REQ_SEED, REQ_LOGPROBS = 1, 2, 4
REQ_TEXT, REQ_CHAT, REQ_PARSE_SPECIAL, REQ_NO_BOS = 8, 16, 32, 64
REQ_TEXT_OUT, REQ_SPECIAL_TEXT, REQ_STRIP_SPACE = 128, 256, 512

ST_FREE, ST_SUBMITTED, ST_DONE = 0, 1, 2
WAIT_DONE, WAIT_TOKENS = 1, 2
DAEMON_SHUTTING_DOWN, DAEMON_CLOSED = 1, 2

STATUS_NAMES = {1: "length", 2: "eos", 3: "cancelled", 4: "error", 5: "shutdown", 6: "stop",
                7: "deadline", 8: "complete"}
S_LENGTH, S_EOS, S_CANCELLED, S_ERROR, S_SHUTDOWN, S_STOP, S_DEADLINE, S_COMPLETE = range(1, 9)

# Slot fixed part (section 4.4).
SL_STATE, SL_CANCEL, SL_NTOK, SL_STATUS, SL_ERROR, SL_WAITERS, SL_EVENTS = 0, 4, 8, 12, 16, 20, 24
SL_NTEXT, SL_TIMINGS, SL_PROMPT_TOKENS = 28, 32, 56
SL_NPROMPT, SL_MAXTOK, SL_FLAGS, SL_PARAMS = 64, 68, 72, 76
PARAM_WORDS = 13  # bytes 76..127: temperature .. deadline_ms, reserved2

HEADER = [("magic", 0, "I"), ("abi_version", 4, "I"), ("features", 8, "I"),
          ("header_size", 12, "I"), ("segment_size", 16, "Q"), ("session_id", 24, "I"),
          ("sq_offset", 32, "I"), ("sq_entries", 36, "I"), ("sqes_offset", 40, "I"),
          ("slot_offset", 44, "I"), ("slot_count", 48, "I"), ("slot_size", 52, "I"),
          ("slot_prompt_offset", 56, "I"), ("slot_prompt_capacity", 60, "I"),
          ("slot_output_offset", 64, "I"), ("slot_output_capacity", 68, "I"),
          ("vocab_size", 72, "I"), ("context_length", 76, "I"), ("bos_id", 80, "I"),
          ("eos_id", 84, "I"), ("backend", 88, "I"), ("slot_logprob_offset", 160, "I"),
          ("slot_logprob_capacity", 164, "I"), ("slot_text_offset", 168, "I"),
          ("slot_text_capacity", 172, "I"), ("slot_piece_offset", 176, "I")]
BACKENDS = {1: "loopback", 2: "cpu", 3: "cuda"}
DEFAULT_SOCKET = "/run/bitnetd/bitnetd.sock"

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine, 202)
_POLLRDHUP = getattr(select, "POLLRDHUP", 0x2000)
SLICE_S = 0.05  # section 8.2: sleep in bounded slices, check the socket between them


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex_wait(addr, expected, timeout_s):
    """FUTEX_WAIT (shared) on the u32 at address addr: 0 or an errno."""
    ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(_SYS_FUTEX), ctypes.c_void_p(addr), ctypes.c_int(0),
                      ctypes.c_uint32(expected), ctypes.byref(ts), None, ctypes.c_int(0))
    return ctypes.get_errno() if r < 0 else 0


def _recv_welcome(sock):
    msg, anc, _flags, _ = sock.recvmsg(32, socket.CMSG_SPACE(2 * 4), socket.MSG_CMSG_CLOEXEC)
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            fds.extend(a)
    data = msg
    while msg and len(data) < 32:
        msg = sock.recv(32 - len(data))
        data += msg
    return data, fds


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        more = sock.recv(n - len(buf))
        if not more:
            raise errors.DisconnectedError("the daemon closed the connection")
        buf += more
    return buf


class Segment:
    """One session: the socket, the mapped segment, the doorbell. Not thread-safe by itself:
    the Client serializes submissions."""

    def __init__(self, path, slots=0, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.mm = None
        self.efd = -1
        try:
            self.sock.connect(path)
            self._handshake(slots)
        except BaseException:
            self.close()
            raise

    def _handshake(self, slots):
        try:
            self.sock.sendall(struct.pack("<IIII4I", HELLO_MAGIC, ABI_VERSION, 0, slots, 0, 0, 0, 0))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused at accept: the welcome still says why (section 2.3)
        data, fds = _recv_welcome(self.sock)
        if len(data) != 32:
            for fd in fds:
                os.close(fd)
            raise errors.DisconnectedError("no welcome from the daemon")
        magic, abi, error, self.session_id, size, _r0, _r1 = struct.unpack("<IIIIQII", data)
        if magic != WELCOME_MAGIC or abi != ABI_VERSION or error or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if error:
                raise errors.error_for(error, "the daemon refused the connection (%d)" % error)
            raise errors.VersionError("welcome magic 0x%x, ABI %d" % (magic, abi))
        memfd, self.efd = fds
        try:
            if size < 256:
                raise errors.ProtocolError("segment of %d bytes" % size)
            self.mm = mmap.mmap(memfd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(memfd)
        self.size = size
        self.h = {n: struct.unpack_from("<" + c, self.mm, o)[0] for n, o, c in HEADER}
        self.model_name = bytes(self.mm[96:160]).split(b"\0", 1)[0].decode("utf-8", "replace")
        self._check_header()
        self.u32 = memoryview(self.mm)[:size - size % 4].cast("I")
        self._anchor = (ctypes.c_char * size).from_buffer(self.mm)
        self.base = ctypes.addressof(self._anchor)
        self.sq = self.h["sq_offset"]
        self.mask = self.h["sq_entries"] - 1
        self.tail = self.u32[(self.sq + 64) // 4]

    def _check_header(self):
        """Section 3 step 4, in Python's unbounded integers."""
        h, size = self.h, self.size

        def inside(off, n, limit):
            return off + n <= limit

        e = h["sq_entries"]
        ok = (h["magic"] == SEG_MAGIC and h["abi_version"] == ABI_VERSION and
              h["header_size"] >= 256 and h["segment_size"] == size and h["slot_count"] >= 1 and
              e > 0 and e & (e - 1) == 0 and e >= h["slot_count"] and
              inside(h["sq_offset"], 192, size) and inside(h["sqes_offset"], 16 * e, size) and
              inside(h["slot_offset"], h["slot_size"] * h["slot_count"], size) and
              h["slot_prompt_offset"] >= 128 and h["slot_output_offset"] >= 128 and
              inside(h["slot_prompt_offset"], 4 * h["slot_prompt_capacity"], h["slot_size"]) and
              inside(h["slot_output_offset"], 4 * h["slot_output_capacity"], h["slot_size"]) and
              all(h[f] % 8 == 0 for f in ("sq_offset", "sqes_offset", "slot_offset", "slot_size")))
        if ok and h["features"] & FEAT_LOGPROBS:
            per = 8 * (1 + h["slot_logprob_capacity"])
            ok = (h["slot_logprob_offset"] >= 128 and h["slot_logprob_offset"] % 8 == 0 and
                  inside(h["slot_logprob_offset"], per * h["slot_output_capacity"], h["slot_size"]))
        if ok and h["features"] & FEAT_TEXT:
            ok = (h["slot_text_offset"] >= 128 and h["slot_piece_offset"] >= 128 and
                  h["slot_piece_offset"] % 4 == 0 and
                  inside(h["slot_text_offset"], h["slot_text_capacity"], h["slot_size"]) and
                  inside(h["slot_piece_offset"], 4 * h["slot_output_capacity"], h["slot_size"]))
        if not ok:
            raise errors.ProtocolError("the segment's header fails the checks of section 3")

    # --- addresses
    def S(self, i):
        return self.h["slot_offset"] + i * self.h["slot_size"]

    def word(self, i, off):
        return self.u32[(self.S(i) + off) // 4]

    def set_word(self, i, off, value):
        self.u32[(self.S(i) + off) // 4] = value

    # --- a request (section 6.3)
    def prepare(self, i, ids=(), text=None, flags=0, max_tokens=0, params=None, stops=()):
        S, u = self.S(i), self.u32
        if text is not None:
            t0 = S + self.h["slot_text_offset"]
            self.mm[t0:t0 + len(text)] = text
            n_prompt = len(text)
            first_stop = 0
        else:
            n_prompt = len(ids)
            first_stop = n_prompt
        p0 = (S + self.h["slot_prompt_offset"]) // 4
        if ids and text is None:
            u[p0:p0 + len(ids)] = array.array("I", ids)
        if stops:
            u[p0 + first_stop:p0 + first_stop + len(stops)] = array.array("I", stops)
        u[(S + SL_NPROMPT) // 4] = n_prompt
        u[(S + SL_MAXTOK) // 4] = max_tokens
        u[(S + SL_FLAGS) // 4] = flags
        words = params or [0] * PARAM_WORDS
        w0 = (S + SL_PARAMS) // 4
        u[w0:w0 + PARAM_WORDS] = array.array("I", words)
        for off in (SL_CANCEL, SL_NTOK, SL_STATUS, SL_ERROR, SL_WAITERS):
            u[(S + off) // 4] = 0
        if self.h["features"] & FEAT_TEXT:
            u[(S + SL_NTEXT) // 4] = u[(S + SL_PROMPT_TOKENS) // 4] = 0
        u[(S + SL_STATE) // 4] = ST_SUBMITTED

    def queue(self, i, op):
        """Section 5.1; the caller holds the client's lock. Rings the doorbell every time:
        without a full fence a Python client cannot trust NEED_WAKEUP (section 14)."""
        u = self.u32
        if (self.tail - u[self.sq // 4]) & 0xFFFFFFFF >= self.mask + 1:
            raise errors.ProtocolError("the ring is full (a client bug)")
        e = (self.h["sqes_offset"] + 16 * (self.tail & self.mask)) // 4
        u[e:e + 4] = array.array("I", (op, i, 0, 0))
        self.tail = (self.tail + 1) & 0xFFFFFFFF
        u[(self.sq + 64) // 4] = self.tail
        try:
            os.write(self.efd, struct.pack("<Q", 1))
        except BlockingIOError:
            pass

    # --- waiting (section 8.2)
    def daemon_gone(self):
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

    def wait(self, i, have=None, timeout=None):
        """True once slot i is DONE (or, with have, once n_tokens != have); False on timeout.
        Raises DisconnectedError when the daemon went away with the slot not DONE."""
        S = self.S(i)
        deadline = None if timeout is None else time.monotonic() + timeout
        bit = WAIT_DONE if have is None else WAIT_TOKENS
        while True:
            seen = self.u32[(S + SL_EVENTS) // 4]
            if self.u32[S // 4] == ST_DONE or (have is not None and
                                               self.u32[(S + SL_NTOK) // 4] != have):
                return True
            left = SLICE_S if deadline is None else min(SLICE_S, deadline - time.monotonic())
            if left <= 0:
                return False
            self.u32[(S + SL_WAITERS) // 4] = bit
            err = futex_wait(self.base + S + SL_EVENTS, seen, left)
            self.u32[(S + SL_WAITERS) // 4] = 0
            if err == errno.ETIMEDOUT and self.daemon_gone():
                if self.u32[S // 4] == ST_DONE:
                    return True
                if self.u32[28 // 4] & DAEMON_CLOSED:  # section 11.3: never taken
                    raise errors.ShutdownError("the daemon shut down before taking the request")
                raise errors.DisconnectedError("the daemon went away")

    def control(self, op):
        self.sock.sendall(struct.pack("<IIII", CTL_MAGIC, op, 0, 0))
        magic, rop, err, length = struct.unpack("<IIII", _recv_exact(self.sock, 16))
        payload = _recv_exact(self.sock, length) if length else b""
        if magic != CTL_REPLY_MAGIC or rop != op:
            raise errors.ProtocolError("bad control reply")
        if err:
            raise errors.error_for(err)
        return payload

    def close(self):
        if self.mm is not None:
            for name in ("u32",):
                mv = self.__dict__.pop(name, None)
                if mv is not None:
                    mv.release()
            self.__dict__.pop("_anchor", None)
            self.mm.close()
            self.mm = None
        if self.efd >= 0:
            os.close(self.efd)
            self.efd = -1
        self.sock.close()
