"""The Client: bitnetd from Python, standard library only.

One Client is one session with the daemon (shm/PROTOCOL.md section 1): a shared-memory
segment with ``slots`` request slots. Any number of threads may share a Client; each call
takes a free slot for its request (waiting for one when all are busy) and gives it back.
"""

import collections
import os
import struct
import threading
import time

from . import _wire as w
from . import errors

__all__ = ["AsyncClient", "Client", "Generation", "Piece", "Score", "TokenLogprob"]

TokenLogprob = collections.namedtuple("TokenLogprob", "token logprob")
TokenLogprob.__doc__ = "A token id and its natural-log probability."


class Piece(collections.namedtuple("Piece", "text token")):
    """One streamed token and the text it completed (possibly empty: its bytes may wait for
    the rest of a character)."""


class Generation:
    """A finished generation: ``text`` (valid UTF-8 decoded, None when the daemon has no
    tokenizer), ``ids``, ``status`` ("length", "eos" or "stop"), ``prompt_tokens``, and with
    ``logprobs=N`` one list per token: [chosen, alternative 1, ..., alternative N]."""

    def __init__(self, text, ids, status, prompt_tokens, logprobs):
        self.text, self.ids, self.status = text, ids, status
        self.prompt_tokens, self.logprobs = prompt_tokens, logprobs

    def __repr__(self):
        return "Generation(status=%r, ids=%r, text=%r)" % (self.status, self.ids, self.text)


class Score:
    """A scored text: ``tokens[i]`` is the text's token i + 1, ``logprobs[i]`` its
    log-probability given the tokens before it, ``top[i]`` the most likely tokens there;
    ``sum`` their total, ``n_tokens`` the text's length in tokens."""

    def __init__(self, tokens, logprobs, top):
        self.tokens, self.logprobs, self.top = tokens, logprobs, top
        self.n_tokens = len(tokens) + 1
        self.sum = float(sum(logprobs))

    def __repr__(self):
        return "Score(n_tokens=%d, sum=%r)" % (self.n_tokens, self.sum)


def _f32(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def _params(temperature=0.0, top_k=0, top_p=0.0, min_p=0.0, repetition_penalty=0.0,
            presence_penalty=0.0, frequency_penalty=0.0, seed=None, n_stop=0, logprobs=0,
            deadline_ms=0):
    """The 13 words at slot bytes 76..127 (section 4.4)."""
    seed = seed or 0
    return [_f32(temperature), top_k, _f32(top_p), _f32(min_p), _f32(repetition_penalty),
            _f32(presence_penalty), _f32(frequency_penalty), seed & 0xFFFFFFFF,
            (seed >> 32) & 0xFFFFFFFF, n_stop, logprobs, deadline_ms, 0]


class _Request:
    """What one call asks: an op, a prompt (ids or bytes), flags and parameter words."""

    def __init__(self, op, ids=(), text=None, flags=0, max_tokens=0, params=None, stops=()):
        self.op, self.ids, self.text, self.flags = op, list(ids), text, flags
        self.max_tokens, self.params, self.stops = max_tokens, params, list(stops)


class Client:
    """A session with bitnetd.

    ``socket``: the daemon's socket path (default ``$BITNETD_SOCKET``, else
    /run/bitnetd/bitnetd.sock). ``timeout``: seconds any call may wait (None: no limit).
    ``slots``: requests in flight at once (0: the daemon's default). Use as a context manager
    or call ``close()``.
    """

    def __init__(self, socket=None, timeout=None, slots=0):
        path = socket or os.environ.get("BITNETD_SOCKET") or w.DEFAULT_SOCKET
        self.timeout = timeout
        self._seg = w.Segment(path, slots)
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._free = list(range(self._seg.h["slot_count"] - 1, -1, -1))

    def close(self):
        """Ends the session (the daemon ends what is still in flight)."""
        self._seg.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the model
    def info(self):
        """The model and this session, as a dict (the header, section 4.1)."""
        h = self._seg.h
        feats = [n for n, b in (("streaming", w.FEAT_STREAMING), ("params", w.FEAT_PARAMS),
                                ("logprobs", w.FEAT_LOGPROBS), ("text", w.FEAT_TEXT),
                                ("score", w.FEAT_SCORE)) if h["features"] & b]
        return dict(model=self._seg.model_name, backend=w.BACKENDS.get(h["backend"], "?"),
                    vocab_size=h["vocab_size"], context_length=h["context_length"],
                    bos_id=h["bos_id"], eos_id=h["eos_id"], slots=h["slot_count"],
                    max_prompt_tokens=h["slot_prompt_capacity"],
                    max_output_tokens=h["slot_output_capacity"],
                    max_logprobs=h["slot_logprob_capacity"], features=feats)

    def _has(self, feature):
        return bool(self._seg.h["features"] & feature)

    # --- slots
    def _take_slot(self, deadline):
        with self._freed:
            while not self._free:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise errors.TimeoutError("no free slot before the timeout")
                self._freed.wait(left)
            return self._free.pop()

    def _give_slot(self, slot):
        with self._freed:
            self._free.append(slot)
            self._freed.notify()

    def _deadline(self, timeout):
        t = self.timeout if timeout is None else timeout
        return None if t is None else time.monotonic() + t

    def _submit(self, req, deadline):
        slot = self._take_slot(deadline)
        try:
            self._seg.prepare(slot, req.ids, req.text, req.flags, req.max_tokens, req.params,
                              req.stops)
            with self._lock:
                self._seg.queue(slot, req.op)
        except BaseException:
            self._give_slot(slot)
            raise
        return slot

    def _wait(self, slot, deadline, have=None):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._seg.wait(slot, have, left):
            self._seg.set_word(slot, w.SL_CANCEL, 1)  # section 6.7; it ends on its own
            self._seg.wait(slot)
            raise errors.TimeoutError("the request did not finish in time (cancelled)")

    def _result(self, slot, req):
        """The DONE slot's response, or the Error it ended with."""
        seg = self._seg
        status, error = seg.word(slot, w.SL_STATUS), seg.word(slot, w.SL_ERROR)
        n = min(seg.word(slot, w.SL_NTOK), seg.h["slot_output_capacity"])
        o = (seg.S(slot) + seg.h["slot_output_offset"]) // 4
        res = dict(status=status, ids=seg.u32[o:o + n].tolist(), n=n,
                   prompt_tokens=seg.word(slot, w.SL_PROMPT_TOKENS) if self._has(w.FEAT_TEXT) else 0)
        if self._has(w.FEAT_TEXT):
            nt = min(seg.word(slot, w.SL_NTEXT), seg.h["slot_text_capacity"])
            t0 = seg.S(slot) + seg.h["slot_text_offset"]
            res["text"] = bytes(seg.mm[t0:t0 + nt])
        if req.flags & w.REQ_LOGPROBS:
            res["records"] = self._records(slot, n, req.params[10])
        if status == w.S_ERROR:
            return errors.error_for(error)
        if status == w.S_CANCELLED:
            return errors.CancelledError()
        if status == w.S_SHUTDOWN:
            return errors.ShutdownError()
        if status == w.S_DEADLINE:
            return errors.DeadlineError("the request's deadline passed after %d tokens" % n)
        return res

    def _records(self, slot, n, alternatives):
        seg = self._seg
        stride = 1 + seg.h["slot_logprob_capacity"]
        base = seg.S(slot) + seg.h["slot_logprob_offset"]
        return [[TokenLogprob(*struct.unpack_from("<If", seg.mm, base + (i * stride + k) * 8))
                 for k in range(1 + alternatives)] for i in range(n)]

    def _finish(self, slot, req, deadline):
        try:
            self._wait(slot, deadline)
            return self._result(slot, req)
        finally:
            self._seg.set_word(slot, w.SL_STATE, w.ST_FREE)
            self._give_slot(slot)

    def _run(self, req, timeout=None):
        deadline = self._deadline(timeout)
        res = self._finish(self._submit(req, deadline), req, deadline)
        if isinstance(res, errors.Error):
            raise res
        return res

    def _run_batch(self, reqs, timeout=None):
        """Every request, as many in flight as the slots allow; a result or an Error each."""
        deadline = self._deadline(timeout)
        out, flight, nxt = [None] * len(reqs), collections.deque(), 0
        while nxt < len(reqs) or flight:
            while nxt < len(reqs) and (not flight or self._free):
                if isinstance(reqs[nxt], errors.Error):
                    out[nxt] = reqs[nxt]
                else:
                    try:
                        flight.append((nxt, self._submit(reqs[nxt], deadline)))
                    except errors.Error as e:
                        out[nxt] = e
                nxt += 1
            if flight:
                k, slot = flight.popleft()
                try:
                    out[k] = self._finish(slot, reqs[k], deadline)
                except errors.Error as e:
                    out[k] = e
        return out

    # --- generation
    def _generate_request(self, prompt, max_tokens=16, temperature=0.0, top_k=0, top_p=0.0,
                          min_p=0.0, repetition_penalty=0.0, presence_penalty=0.0,
                          frequency_penalty=0.0, seed=None, stop=None, logprobs=0,
                          ignore_eos=False, deadline_ms=0, chat=None, chat_template=0):
        stops = list(stop or [])
        flags = (w.REQ_IGNORE_EOS if ignore_eos else 0) | (w.REQ_SEED if seed is not None else 0)
        flags |= w.REQ_LOGPROBS if logprobs else 0
        text = None
        if self._has(w.FEAT_TEXT):
            flags |= w.REQ_TEXT_OUT
        if chat is not None:
            flags |= w.REQ_CHAT
            text = _conversation(chat, chat_template)
        elif isinstance(prompt, (str, bytes)):
            flags |= w.REQ_TEXT
            text = prompt.encode() if isinstance(prompt, str) else prompt
        if text is not None and not self._has(w.FEAT_TEXT):
            return errors.UnsupportedError("the daemon has no tokenizer: send token ids")
        params = _params(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                         frequency_penalty, seed, len(stops), logprobs, deadline_ms)
        return _Request(w.OP_GENERATE, () if text is not None else prompt, text, flags,
                        max_tokens, params, stops)

    def _generation(self, res):
        text = res.get("text")
        return Generation(text.decode("utf-8", "replace") if text is not None else None,
                          res["ids"], w.STATUS_NAMES[res["status"]], res["prompt_tokens"],
                          res.get("records"))

    def generate(self, prompt, max_tokens=16, timeout=None, **sampling):
        """Generates from ``prompt`` (text, or a list of token ids used as given) and returns a
        Generation. Sampling: temperature, top_k, top_p, min_p, repetition_penalty,
        presence_penalty, frequency_penalty, seed, stop (ids), logprobs (alternatives per
        token), ignore_eos, deadline_ms; all off by default (greedy)."""
        req = self._generate_request(prompt, max_tokens, **sampling)
        if isinstance(req, errors.Error):
            raise req
        return self._generation(self._run(req, timeout))

    def generate_batch(self, prompts, max_tokens=16, timeout=None, **sampling):
        """generate() for each prompt; a Generation or an Error in each one's place."""
        reqs = [self._generate_request(p, max_tokens, **sampling) for p in prompts]
        return [r if isinstance(r, errors.Error) else self._generation(r)
                for r in self._run_batch(reqs, timeout)]

    def stream(self, prompt, max_tokens=16, timeout=None, **sampling):
        """Yields a Piece per token as it arrives (text as the daemon decoded it; a piece's
        text may be empty while a character waits for its end). Closing the iterator early
        cancels the request."""
        req = self._generate_request(prompt, max_tokens, **sampling)
        if isinstance(req, errors.Error):
            raise req
        deadline = self._deadline(timeout)
        slot = self._submit(req, deadline)
        seg, done, have, text_at = self._seg, False, 0, 0
        try:
            while True:
                self._wait(slot, deadline, have)
                finished = seg.word(slot, w.SL_STATE) == w.ST_DONE
                n = min(seg.word(slot, w.SL_NTOK), seg.h["slot_output_capacity"])
                for i in range(have, n):
                    token = seg.u32[(seg.S(slot) + seg.h["slot_output_offset"]) // 4 + i]
                    text = None
                    if req.flags & w.REQ_TEXT_OUT:
                        end = seg.u32[(seg.S(slot) + seg.h["slot_piece_offset"]) // 4 + i]
                        t0 = seg.S(slot) + seg.h["slot_text_offset"]
                        text = bytes(seg.mm[t0 + text_at:t0 + end]).decode("utf-8", "replace")
                        text_at = end
                    yield Piece(text, token)
                have = n
                if finished:
                    break
            done = True
            res = self._result(slot, req)
            if isinstance(res, errors.Error):
                raise res
            tail = res.get("text", b"")[text_at:]
            if tail:  # a character that never ended: U+FFFD (section 6.10)
                yield Piece(tail.decode("utf-8", "replace"), None)
        finally:
            if not done:
                seg.set_word(slot, w.SL_CANCEL, 1)
                seg.wait(slot)
            seg.set_word(slot, w.SL_STATE, w.ST_FREE)
            self._give_slot(slot)

    # --- chat
    def chat(self, messages, max_tokens=256, chat_template=0, timeout=None, **sampling):
        """Answers a conversation: ``messages`` is a list of {"role", "content"} dicts (or
        (role, content) pairs), rendered by the model's template (or ``chat_template``: 2
        bitnet, 3 llama3, 4 chatml, 5 llama2) in the daemon, message text never special.
        Returns a Generation whose text is the reply."""
        req = self._generate_request(None, max_tokens, chat=messages,
                                     chat_template=chat_template, **sampling)
        if isinstance(req, errors.Error):
            raise req
        return self._generation(self._run(req, timeout))

    def chat_batch(self, conversations, max_tokens=256, chat_template=0, timeout=None,
                   **sampling):
        """chat() for each conversation; a Generation or an Error in each one's place."""
        reqs = [self._generate_request(None, max_tokens, chat=c, chat_template=chat_template,
                                       **sampling) for c in conversations]
        return [r if isinstance(r, errors.Error) else self._generation(r)
                for r in self._run_batch(reqs, timeout)]

    # --- text
    def tokenize(self, text, special=False, bos=True, timeout=None):
        """The ids the daemon makes of ``text`` (str or bytes): BOS first when the model wants
        it (``bos=False``: never); special tokens' texts are those tokens only with
        ``special``."""
        data = text.encode() if isinstance(text, str) else text
        flags = w.REQ_TEXT | (w.REQ_PARSE_SPECIAL if special else 0) | (0 if bos else w.REQ_NO_BOS)
        return self._run(_Request(w.OP_TOKENIZE, text=data, flags=flags), timeout)["ids"]

    def detokenize_bytes(self, ids, special=False, timeout=None):
        """The tokens' bytes exactly (not necessarily valid UTF-8)."""
        flags = w.REQ_SPECIAL_TEXT if special else 0
        return self._run(_Request(w.OP_DETOKENIZE, ids=ids, flags=flags), timeout)["text"]

    def detokenize(self, ids, special=False, timeout=None):
        """The tokens' text (bytes that are not UTF-8 become U+FFFD)."""
        return self.detokenize_bytes(ids, special, timeout).decode("utf-8", "replace")

    # --- scoring
    def _score_request(self, item, top):
        flags = w.REQ_LOGPROBS
        if isinstance(item, (str, bytes)):
            if not self._has(w.FEAT_TEXT):
                return errors.UnsupportedError("the daemon has no tokenizer: send token ids")
            data = item.encode() if isinstance(item, str) else item
            return _Request(w.OP_SCORE, text=data, flags=flags | w.REQ_TEXT,
                            params=_params(logprobs=top))
        return _Request(w.OP_SCORE, ids=item, flags=flags, params=_params(logprobs=top))

    def _score(self, res):
        records = res.get("records", [])
        return Score([r[0].token for r in records], [r[0].logprob for r in records],
                     [r[1:] for r in records])

    def score(self, text, top=0, timeout=None):
        """The log-probability of every token of ``text`` (str, or a list of ids) given those
        before it, with ``top`` alternatives per position: a Score."""
        req = self._score_request(text, top)
        if isinstance(req, errors.Error):
            raise req
        return self._score(self._run(req, timeout))

    def score_batch(self, texts, top=0, timeout=None):
        """score() for each text; a Score or an Error in each one's place."""
        reqs = [self._score_request(t, top) for t in texts]
        return [r if isinstance(r, errors.Error) else self._score(r)
                for r in self._run_batch(reqs, timeout)]

    # --- daemon
    def stats(self):
        """The daemon's metrics, Prometheus text (section 10.2)."""
        with self._lock:
            return self._seg.control(w.CTL_STATS).decode()


def _conversation(messages, template):
    """Section 6.10's conversation: bn_chat_head, then per message its lengths, role, content."""
    parts = [struct.pack("<II", template, len(messages))]
    for m in messages:
        role, content = (m["role"], m["content"]) if isinstance(m, dict) else m
        r, c = role.encode(), content.encode()
        parts.append(struct.pack("<II", len(r), len(c)) + r + c)
    return b"".join(parts)


class AsyncClient:
    """The Client's methods for asyncio: each call runs the blocking one on a thread pool of
    at most ``slots`` threads (the session's slots bound what can be in flight anyway), so the
    event loop never blocks on a futex. Same arguments and results as Client; ``stream``
    is an async iterator. Use ``async with`` or ``await close()``.
    """

    def __init__(self, socket=None, timeout=None, slots=0):
        import concurrent.futures

        self._client = Client(socket, timeout, slots)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._client.info()["slots"], thread_name_prefix="bitnetd")

    async def _call(self, fn, *args, **kwargs):
        import asyncio
        import functools

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def close(self):
        self._pool.shutdown(wait=True)
        self._client.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def info(self):
        return self._client.info()

    async def generate(self, prompt, **kwargs):
        return await self._call(self._client.generate, prompt, **kwargs)

    async def generate_batch(self, prompts, **kwargs):
        return await self._call(self._client.generate_batch, prompts, **kwargs)

    async def chat(self, messages, **kwargs):
        return await self._call(self._client.chat, messages, **kwargs)

    async def chat_batch(self, conversations, **kwargs):
        return await self._call(self._client.chat_batch, conversations, **kwargs)

    async def score(self, text, **kwargs):
        return await self._call(self._client.score, text, **kwargs)

    async def score_batch(self, texts, **kwargs):
        return await self._call(self._client.score_batch, texts, **kwargs)

    async def tokenize(self, text, **kwargs):
        return await self._call(self._client.tokenize, text, **kwargs)

    async def detokenize(self, ids, **kwargs):
        return await self._call(self._client.detokenize, ids, **kwargs)

    async def stream(self, prompt, **kwargs):
        """Yields Pieces as they arrive. Closing the iterator cancels the request: leave a loop
        early inside ``contextlib.aclosing(...)`` to cancel at once (otherwise it is closed
        when asyncio finalizes it)."""
        it = self._client.stream(prompt, **kwargs)
        done = object()
        try:
            while True:
                piece = await self._call(next, it, done)
                if piece is done:
                    return
                yield piece
        finally:
            await self._call(it.close)
