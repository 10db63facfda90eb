"""The Client: bitnetd from Python, standard library only.

One Client is one session with the daemon (shm/PROTOCOL.md section 1): a shared-memory
segment with ``slots`` request slots. Any number of threads may share a Client; each call
takes a free slot for its request (waiting for one when all are busy) and gives it back.
"""

import collections
import json as _json
import math
import os
import struct
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _wire as w
from . import embed as _embed
from . import errors
from . import models as _models
from .models import ModelStatus
from ._wire import TokenLogprob
from .embed import Embedding

__all__ = ["Classification", "Client", "Embedding", "Generation", "Grammar", "LabelScore",
           "ModelStatus", "Piece", "Score", "TokenLogprob"]

Prompt = Union[str, bytes, Sequence[int]]
Label = Union[str, bytes, Sequence[int]]
Message = Union[Dict[str, str], Tuple[str, str]]


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


def _sum_in_order(values):
    """Adds in binary64, first to last, as the C library does (Python 3.12's sum() of floats
    compensates, which is more exact but not the same bits)."""
    total = 0.0
    for v in values:
        total += v
    return total


class Score:
    """A scored text: ``tokens[i]`` is the text's token i + 1, ``logprobs[i]`` its
    log-probability given the tokens before it, ``top[i]`` the most likely tokens there;
    ``sum`` their total (added in order in binary64, as ``bitnet-cli score`` prints it),
    ``n_tokens`` the text's length in tokens."""

    def __init__(self, tokens, logprobs, top):
        self.tokens, self.logprobs, self.top = tokens, logprobs, top
        self.n_tokens = len(tokens) + 1
        self.sum = _sum_in_order(logprobs)

    def __repr__(self):
        return "Score(n_tokens=%d, sum=%r)" % (self.n_tokens, self.sum)


class LabelScore:
    """One label's result: ``label`` as given; ``logprob``, the sum of its tokens'
    log-probabilities after the prefix (added in order in binary64, as the C library does);
    ``mean``, that over ``n_tokens``; ``prob``, its share of the probability over the item's
    labels (exp(logprob) normalized: a softmax of the sums, taken from the largest); the
    label's ``tokens`` and each one's ``logprobs``."""

    __slots__ = ("label", "logprob", "mean", "prob", "n_tokens", "tokens", "logprobs")

    def __init__(self, label, logprob, mean, prob, tokens, logprobs):
        self.label, self.logprob, self.mean, self.prob = label, logprob, mean, prob
        self.n_tokens, self.tokens, self.logprobs = len(tokens), tokens, logprobs

    def __repr__(self):
        return "LabelScore(label=%r, logprob=%r, prob=%.6f, n_tokens=%d)" % (
            self.label, self.logprob, self.prob, self.n_tokens)


class Classification:
    """A classified prefix: ``labels``, a LabelScore per label in the order given; ``best``,
    the index of the label with the highest logprob (the first on a tie); ``label``, that
    label; ``prompt_tokens``, the prefix's length in tokens."""

    def __init__(self, labels, best, prompt_tokens):
        self.labels, self.best, self.prompt_tokens = labels, best, prompt_tokens

    @property
    def label(self):
        return self.labels[self.best].label

    @property
    def probs(self) -> List[float]:
        return [s.prob for s in self.labels]

    def __repr__(self):
        return "Classification(best=%d, labels=%r)" % (self.best, self.labels)


def _classification(labels, counts, records, prompt_tokens):
    """Section 6.12's result: the records split by label and each label summed in order;
    best and prob as bn_classify computes them."""
    if sum(counts) != len(records):
        return errors.ProtocolError("label counts %r for %d records" % (list(counts), len(records)))
    out, at = [], 0
    for label, n in zip(labels, counts):
        mine = records[at:at + n]
        at += n
        lps = [r[0].logprob for r in mine]
        s = _sum_in_order(lps)
        out.append(LabelScore(label, s, s / n if n else 0.0, 0.0, [r[0].token for r in mine], lps))
    best = 0
    for j, sc in enumerate(out):
        if sc.logprob > out[best].logprob:
            best = j
    top = out[best].logprob if out else 0.0
    norm = _sum_in_order(math.exp(sc.logprob - top) for sc in out)
    for sc in out:
        sc.prob = math.exp(sc.logprob - top) / norm
    return Classification(out, best, prompt_tokens)


def _f32(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def _params(temperature=0.0, top_k=0, top_p=0.0, min_p=0.0, repetition_penalty=0.0,
            presence_penalty=0.0, frequency_penalty=0.0, seed=None, n_stop=0, logprobs=0,
            deadline_ms=0):
    """The 13 words at slot bytes 76..127 (section 4.4); None when all are 0."""
    seed = seed or 0
    if not (temperature or top_k or top_p or min_p or repetition_penalty or presence_penalty or
            frequency_penalty or seed or n_stop or logprobs or deadline_ms):
        return None
    return [_f32(temperature), top_k, _f32(top_p), _f32(min_p), _f32(repetition_penalty),
            _f32(presence_penalty), _f32(frequency_penalty), seed & 0xFFFFFFFF,
            (seed >> 32) & 0xFFFFFFFF, n_stop, logprobs, deadline_ms, 0]


def _bytes(text):
    return text.encode() if isinstance(text, str) else bytes(text)


def _is_text(x):
    return isinstance(x, (str, bytes))


class _Request:
    """What one call asks: an op, its prompt words or text, flags and parameter words; how
    many alternatives to read per record (None: no records); and ``convert``, which makes
    the caller's result (or an Error) of the response. ``grammar``: the Grammar it is
    constrained by (a cached one stays pinned until the request is queued); ``reason``: a
    refusal's reason is in the text region (section 6.13)."""

    __slots__ = ("op", "n_prompt", "words", "text", "flags", "max_tokens", "params",
                 "alternatives", "convert", "grammar", "reason")

    def __init__(self, op, convert, n_prompt, words=(), text=None, flags=0, max_tokens=0,
                 params=None, alternatives=None, grammar=None, reason=False):
        self.op, self.convert, self.n_prompt, self.words, self.text = op, convert, n_prompt, \
            words, text
        self.flags, self.max_tokens, self.params = flags, max_tokens, params
        self.alternatives, self.grammar, self.reason = alternatives, grammar, reason


class Grammar:
    """A grammar compiled in the daemon for one Client's session (``Client.grammar``): pass
    it as ``grammar=`` to generate, stream, chat and their batches. ``close()`` frees it in
    the daemon (requests already submitted keep it); the session's end frees them all."""

    def __init__(self, client, gid, kind):
        self._client, self.id, self.kind = client, gid, kind
        self._pins = 0  # requests filled with it and not queued yet (cached grammars)
        self._closed = False

    def close(self) -> None:
        self._client._free_grammar(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Grammar(id=%d, kind=%d)" % (self.id, self.kind)


def _grammar_spec(json_schema=None, regex=None, grammar=None, json=False, compact=False):
    """(kind, flags, text bytes) of the one grammar keyword given, or None for none."""
    given = [k for k, v in (("json_schema", json_schema), ("regex", regex),
                            ("grammar", grammar), ("json", json)) if v not in (None, False)]
    if len(given) > 1:
        raise ValueError("give one of json_schema, regex, grammar and json, not %s" %
                         " and ".join(given))
    if not given:
        return None
    flags = w.GRAMMAR_JSON_COMPACT if compact else 0
    if json_schema is not None:
        text = json_schema if _is_text(json_schema) else _json.dumps(json_schema)
        return w.GRAMMAR_JSON_SCHEMA, flags, _bytes(text)
    if regex is not None:
        return w.GRAMMAR_REGEX, 0, _bytes(regex)
    if grammar is not None:
        return w.GRAMMAR_GBNF, 0, _bytes(grammar)
    return w.GRAMMAR_JSON, flags | w.GRAMMAR_JSON_OBJECT, b""


class Client:
    """A session with bitnetd.

    ``socket``: the daemon's socket path (default ``$BITNETD_SOCKET``, else
    /run/bitnetd/bitnetd.sock). ``timeout``: seconds any call may wait (None: no limit).
    ``slots``: requests in flight at once (0: the daemon's default). ``model``: the name of
    the model the session uses, of those the daemon serves (None: its default model;
    ``models()`` lists them; an unknown name raises ModelNotFoundError). Use as a context
    manager or call ``close()``.
    """

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None,
                 slots: int = 0, model: Optional[str] = None):
        path = socket or os.environ.get("BITNETD_SOCKET") or w.DEFAULT_SOCKET
        self.timeout = timeout
        self._seg = w.Segment(path, slots, model=model)
        self._lock = threading.Lock()
        self._freed = threading.Condition(self._lock)
        self._free = list(range(self._seg.h["slot_count"] - 1, -1, -1))
        self._grammars = collections.OrderedDict()  # the keywords' grammars, by content

    def close(self) -> None:
        """Ends the session (the daemon ends what is still in flight)."""
        self._seg.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- the model
    def info(self) -> Dict[str, Any]:
        """The model and this session, as a dict (the header, section 4.1). lm_head says
        where logits come from: "file" and "screened" give the file's logits, "int8" an
        approximation (bitnetd --lm-head int8); None when the daemon does not say."""
        h = self._seg.h
        told = bool(h["features"] & w.FEAT_COMPUTE)
        return dict(model=self._seg.model_name, backend=w.BACKENDS.get(h["backend"], "?"),
                    lm_head=w.LM_HEADS.get(h["lm_head"], "unknown") if told else None,
                    decode_layout=(w.DECODE_LAYOUTS.get(h["decode_layout"], "unknown")
                                   if told else None),
                    vocab_size=h["vocab_size"], context_length=h["context_length"],
                    bos_id=h["bos_id"], eos_id=h["eos_id"], slots=h["slot_count"],
                    max_prompt_tokens=h["slot_prompt_capacity"],
                    max_output_tokens=h["slot_output_capacity"],
                    max_logprobs=h["slot_logprob_capacity"],
                    features=[n for n, b in w.FEATURE_NAMES if h["features"] & b])

    def _has(self, feature):
        return bool(self._seg.features & feature)

    # --- slots
    def _take_slot(self, deadline, block=True):
        with self._freed:
            while not self._free:
                if not block:
                    return None
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

    def _fill(self, req, deadline, block=True):
        """A slot holding req, not queued yet (None: none free and block is False)."""
        slot = self._take_slot(deadline, block)
        if slot is None:
            return None
        try:
            self._seg.prepare(slot, req.n_prompt, req.words, req.text, req.flags,
                              req.max_tokens, req.params)
        except BaseException:
            self._give_slot(slot)
            raise
        return slot

    def _submit(self, req, deadline):
        try:
            slot = self._fill(req, deadline)
            try:
                with self._lock:
                    self._seg.queue(slot, req.op)
            except BaseException:
                self._give_slot(slot)
                raise
        finally:
            self._unpin(req)
        return slot

    def _unpin(self, req):
        """Once queued (or failed), a request no longer keeps its cached grammar from being
        freed: the daemon took its own reference when it took the request, which is before
        any later free of the same id in the ring."""
        g = req.grammar
        if g is not None and g._pins:
            with self._lock:
                g._pins -= 1
            req.grammar = None

    def _wait(self, slot, deadline, have=None):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._seg.wait(slot, have, left):
            self._seg.set_word(slot, w.SL_CANCEL, 1)  # section 6.7; it ends on its own
            self._seg.wait(slot)
            raise errors.TimeoutError("the request did not finish in time (cancelled)")

    def _response(self, slot, req):
        """The DONE slot's response words (with its records when req asks), or the Error it
        ended with."""
        seg = self._seg
        res = seg.response(slot)
        status, n = res["status"], len(res["tokens"])
        if status == w.S_ERROR:
            return errors.error_for(res["error"], self._reason(req, res))
        if status == w.S_CANCELLED:
            return errors.CancelledError()
        if status == w.S_SHUTDOWN:
            return errors.ShutdownError()
        if status == w.S_DEADLINE:
            return errors.DeadlineError("the request's deadline passed after %d tokens" % n)
        if req.alternatives is not None:
            res["records"] = seg.records(slot, n, req.alternatives)
        return res

    @staticmethod
    def _reason(req, res):
        """A grammar op's, or a constrained request's refusal's, reason (section 6.13)."""
        if not req.reason or not res["text"] or res["n_tokens"]:
            return None
        if req.op in (w.OP_GENERATE, w.OP_EMBED) and res["error"] not in (errors.E_INVALID,
                                                                            errors.E_UNSUPPORTED):
            return None
        return res["text"].decode("utf-8", "replace")

    def _finish(self, slot, req, deadline):
        try:
            self._wait(slot, deadline)
            res = self._response(slot, req)
        finally:
            self._seg.release(slot)
            self._give_slot(slot)
        return res if isinstance(res, errors.Error) else req.convert(res)

    def _run(self, req, timeout=None):
        if isinstance(req, errors.Error):
            raise req
        deadline = self._deadline(timeout)
        res = self._finish(self._submit(req, deadline), req, deadline)
        if isinstance(res, errors.Error):
            raise res
        return res

    def _run_batch(self, reqs, timeout=None):
        """Every request, as many in flight as the slots allow, those filled together queued
        with one doorbell; a result or an Error each."""
        deadline = self._deadline(timeout)
        out, flight, nxt = [None] * len(reqs), collections.deque(), 0
        while nxt < len(reqs) or flight:
            filled = []
            while nxt < len(reqs):
                req = reqs[nxt]
                if isinstance(req, errors.Error):
                    out[nxt] = req
                else:
                    try:
                        # Block for a slot only with nothing of ours in flight or unqueued.
                        slot = self._fill(req, deadline, block=not (flight or filled))
                    except errors.Error as e:
                        slot, out[nxt] = -1, e
                        self._unpin(req)
                    if slot is None:
                        break
                    if slot >= 0:
                        filled.append((nxt, slot))
                nxt += 1
            if filled:
                with self._lock:
                    for k, slot in filled:
                        self._seg.push(slot, reqs[k].op)
                    self._seg.publish()
                for k, _ in filled:
                    self._unpin(reqs[k])
                flight.extend(filled)
            if flight:
                k, slot = flight.popleft()
                try:
                    out[k] = self._finish(slot, reqs[k], deadline)
                except errors.Error as e:
                    out[k] = e
        return out

    # --- structured output
    _CACHED_GRAMMARS = 16

    def grammar(self, json_schema: Any = None, regex: Optional[str] = None,
                grammar: Optional[str] = None, json: bool = False, compact: bool = False,
                max_ws: int = 0, timeout: Optional[float] = None) -> Grammar:
        """Compiles one grammar in the daemon and returns it, to pass as ``grammar=``: a JSON
        Schema (a dict, or its JSON text), a regular expression the whole output matches,
        GBNF (llama.cpp's format, from ``root``), or ``json=True`` for any JSON object
        (OpenAI's json_object). ``compact``: no whitespace between JSON tokens; ``max_ws``:
        the longest whitespace run (default 20). Raises GrammarError or GrammarLimitError
        with the daemon's reason (it names the keyword or limit and where), BusyError when the
        session holds the daemon's --max-grammars, UnsupportedError without structured output
        (the loopback backend, no text vocabulary)."""
        spec = _grammar_spec(json_schema, regex, grammar, json, compact)
        if spec is None:
            raise ValueError("give one of json_schema, regex, grammar and json")
        return self._compile(spec[0], spec[1], max_ws, spec[2], timeout)

    def _compile(self, kind, flags, max_ws, body, timeout=None):
        if not self._has(w.FEAT_GRAMMAR):
            raise errors.UnsupportedError("the daemon offers no structured output (no feature "
                                          "GRAMMAR: the loopback backend, a model without a "
                                          "text vocabulary, or a backend without masks)")
        if len(body) > w.GRAMMAR_TEXT_MAX:
            raise errors.GrammarLimitError("the grammar is %d bytes, over the limit of %d bytes "
                                           "of grammar text" % (len(body), w.GRAMMAR_TEXT_MAX))
        text = w.grammar_head(kind, flags, max_ws) + body
        req = _Request(w.OP_GRAMMAR, lambda res: Grammar(self, res["tokens"][0], kind),
                       len(text), text=text, reason=True)
        return self._run(req, timeout)

    def _free_grammar(self, g):
        with self._lock:
            if g._closed:
                return
            g._closed = True
        if self._seg.mm is None:
            return  # the session ended: so did its grammars
        try:
            self._run(_Request(w.OP_GRAMMAR_FREE, lambda res: None, 1, words=[g.id]))
        except (errors.DisconnectedError, errors.ShutdownError):
            pass

    def _cached_grammar(self, kind, flags, max_ws, body):
        """The grammar for these keywords, compiled once per session and pinned for the
        caller's request; the least recently used unpinned ones beyond _CACHED_GRAMMARS are
        freed."""
        key = (kind, flags, max_ws, body)
        with self._lock:
            g = self._grammars.get(key)
            if g is not None:
                self._grammars.move_to_end(key)
                g._pins += 1
                return g
        try:
            g = self._compile(kind, flags, max_ws, body)
        except errors.BusyError:
            self._evict(0)  # the session's cap: free what the cache holds, once
            g = self._compile(kind, flags, max_ws, body)
        with self._lock:
            if key in self._grammars:  # another thread compiled it meanwhile
                spare, g = g, self._grammars[key]
            else:
                spare = None
                self._grammars[key] = g
            g._pins += 1
        if spare is not None:
            self._free_grammar(spare)
        self._evict(self._CACHED_GRAMMARS)
        return g

    def _evict(self, keep):
        with self._lock:
            idle = [k for k, g in self._grammars.items() if not g._pins]
            gone = [self._grammars.pop(k) for k in idle[:max(0, len(self._grammars) - keep)]]
        for g in gone:
            self._free_grammar(g)

    def _request_grammar(self, grammar, json_schema, regex, json, compact):
        """The Grammar a generate call's keywords name (None: unconstrained)."""
        if isinstance(grammar, Grammar):
            if json_schema is not None or regex is not None or json:
                raise ValueError("give one of json_schema, regex, grammar and json")
            if grammar._client is not self or grammar._closed:
                raise errors.InvalidError("the grammar is another Client's, or closed")
            with self._lock:
                grammar._pins += 1  # released once queued, like a cached one's
            return grammar
        spec = _grammar_spec(json_schema, regex, grammar, json, compact)
        return None if spec is None else self._cached_grammar(spec[0], spec[1], 0, spec[2])

    # --- generation
    def _generate_request(self, prompt, max_tokens=16, temperature=0.0, top_k=0, top_p=0.0,
                          min_p=0.0, repetition_penalty=0.0, presence_penalty=0.0,
                          frequency_penalty=0.0, seed=None, stop=None, logprobs=0,
                          ignore_eos=False, deadline_ms=0, chat=None, chat_template=0,
                          speculative=False, json_schema=None, regex=None, grammar=None,
                          json=False, compact=False):
        if ignore_eos and (json_schema is not None or regex is not None or grammar is not None
                           or json):
            return errors.InvalidError("ignore_eos means nothing with a grammar: its end is "
                                       "the output's end")
        try:
            g = self._request_grammar(grammar, json_schema, regex, json, compact)
        except errors.Error as e:
            return e
        stops = list(stop or [])
        flags = (w.REQ_IGNORE_EOS if ignore_eos else 0) | (w.REQ_SEED if seed is not None else 0)
        # Drafting changes no output: a daemon that predates it gets the request without it.
        flags |= w.REQ_SPECULATE if speculative and self._has(w.FEAT_SPECULATE) else 0
        flags |= w.REQ_LOGPROBS if logprobs else 0
        text = None
        if self._has(w.FEAT_TEXT):
            flags |= w.REQ_TEXT_OUT
        if chat is not None:
            flags |= w.REQ_CHAT
            text = w.conversation(chat, chat_template)
        elif _is_text(prompt):
            flags |= w.REQ_TEXT
            text = _bytes(prompt)
        if text is not None and not self._has(w.FEAT_TEXT):
            return errors.UnsupportedError("the daemon has no tokenizer: send token ids")
        params = _params(temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty,
                         frequency_penalty, seed, len(stops), logprobs, deadline_ms)
        if g is not None:
            flags |= w.REQ_GRAMMAR
            params = params or [0] * w.PARAM_WORDS
            params[w.PARAM_WORDS - 1] = g.id  # grammar_id, the last word (section 4.4)
        # A refusal's reason is in the text region (a grammar's, an embedding model's).
        if text is not None:
            return _Request(w.OP_GENERATE, self._generation, len(text), stops, text, flags,
                            max_tokens, params, logprobs if logprobs else None, g, True)
        ids = list(prompt)
        return _Request(w.OP_GENERATE, self._generation, len(ids), ids + stops, None, flags,
                        max_tokens, params, logprobs if logprobs else None, g, True)

    def _generation(self, res):
        text = res["text"]
        return Generation(text.decode("utf-8", "replace") if text is not None else None,
                          res["tokens"], w.STATUS_NAMES[res["status"]], res["prompt_tokens"],
                          res.get("records"))

    def generate(self, prompt: Prompt, max_tokens: int = 16, timeout: Optional[float] = None,
                 **sampling) -> Generation:
        """Generates from ``prompt`` (text, or a list of token ids used as given) and returns a
        Generation. Sampling: temperature, top_k, top_p, min_p, repetition_penalty,
        presence_penalty, frequency_penalty, seed, stop (ids), logprobs (alternatives per
        token), ignore_eos, deadline_ms; all off by default (greedy). ``speculative=True``
        drafts tokens from the prompt and output so far and verifies them in one step (faster
        when the output repeats its input; the same tokens either way).

        Structured output, one of: ``json_schema`` (a dict or its JSON text), ``regex`` (the
        whole output matches), ``grammar`` (GBNF text, or a Grammar from ``grammar()``),
        ``json=True`` (any JSON object); ``compact=True``: no whitespace between JSON tokens.
        The output then stays inside the grammar and ends ("eos") only where it is whole; near
        max_tokens it is closed in time where the grammar allows, else it ends "length".
        Log-probabilities are those of the allowed tokens. Grammars given as text are compiled
        once per Client and kept (the least recently used beyond 16 are freed)."""
        return self._run(self._generate_request(prompt, max_tokens, **sampling), timeout)

    def generate_batch(self, prompts: Sequence[Prompt], max_tokens: int = 16,
                       timeout: Optional[float] = None,
                       **sampling) -> List[Union[Generation, errors.Error]]:
        """generate() for each prompt; a Generation or an Error in each one's place."""
        return self._run_batch([self._generate_request(p, max_tokens, **sampling)
                                for p in prompts], timeout)

    def stream(self, prompt: Prompt, max_tokens: int = 16, timeout: Optional[float] = None,
               **sampling) -> Iterator[Piece]:
        """Yields a Piece per token as it arrives (text as the daemon decoded it; a piece's
        text may be empty while a character waits for its end). Closing the iterator early
        cancels the request."""
        req = self._generate_request(prompt, max_tokens, **sampling)
        if isinstance(req, errors.Error):
            raise req
        deadline = self._deadline(timeout)
        slot = self._submit(req, deadline)
        seg, done, have, text_at = self._seg, False, 0, 0
        S, h = seg.S(slot), seg.h
        out0, piece0, t0 = ((S + h["slot_output_offset"]) // 4, (S + h["slot_piece_offset"]) // 4,
                            S + h["slot_text_offset"])
        try:
            while True:
                self._wait(slot, deadline, have)
                finished = seg.word(slot, w.SL_STATE) == w.ST_DONE
                n = min(seg.word(slot, w.SL_NTOK), h["slot_output_capacity"])
                for i in range(have, n):
                    text = None
                    if req.flags & w.REQ_TEXT_OUT:
                        end = seg.u32[piece0 + i]
                        text = bytes(seg.mm[t0 + text_at:t0 + end]).decode("utf-8", "replace")
                        text_at = end
                    yield Piece(text, seg.u32[out0 + i])
                have = n
                if finished:
                    break
            done = True
            res = self._response(slot, req)
            if isinstance(res, errors.Error):
                raise res
            tail = (res["text"] or b"")[text_at:]
            if tail:  # a character that never ended: U+FFFD (section 6.10)
                yield Piece(tail.decode("utf-8", "replace"), None)
        finally:
            if not done:
                seg.set_word(slot, w.SL_CANCEL, 1)
                seg.wait(slot)
            seg.release(slot)
            self._give_slot(slot)

    # --- chat
    def chat(self, messages: Sequence[Message], max_tokens: int = 256, chat_template: int = 0,
             timeout: Optional[float] = None, **sampling) -> Generation:
        """Answers a conversation: ``messages`` is a list of {"role", "content"} dicts (or
        (role, content) pairs), rendered by the model's template (or ``chat_template``: 2
        bitnet, 3 llama3, 4 chatml, 5 llama2, 6 falcon3, 7 gemma) in the daemon, message text never
        special.
        Returns a Generation whose text is the reply."""
        return self._run(self._generate_request(None, max_tokens, chat=messages,
                                                chat_template=chat_template, **sampling),
                         timeout)

    def chat_batch(self, conversations: Sequence[Sequence[Message]], max_tokens: int = 256,
                   chat_template: int = 0, timeout: Optional[float] = None,
                   **sampling) -> List[Union[Generation, errors.Error]]:
        """chat() for each conversation; a Generation or an Error in each one's place."""
        return self._run_batch([self._generate_request(None, max_tokens, chat=c,
                                                       chat_template=chat_template, **sampling)
                                for c in conversations], timeout)

    # --- text
    def tokenize(self, text: Union[str, bytes], special: bool = False, bos: bool = True,
                 timeout: Optional[float] = None) -> List[int]:
        """The ids the daemon makes of ``text`` (str or bytes): BOS first and EOS last when the
        model wants them (its file's add_bos_token and add_eos_token: the ids ``embed`` reads
        for the same text; ``bos=False``: neither); special tokens' texts are those tokens
        only with ``special``."""
        data = _bytes(text)
        flags = w.REQ_TEXT | (w.REQ_PARSE_SPECIAL if special else 0) | (0 if bos else w.REQ_NO_BOS)
        return self._run(_Request(w.OP_TOKENIZE, lambda r: r["tokens"], len(data), text=data,
                                  flags=flags), timeout)

    def detokenize_bytes(self, ids: Sequence[int], special: bool = False,
                         timeout: Optional[float] = None) -> bytes:
        """The tokens' bytes exactly (not necessarily valid UTF-8)."""
        ids = list(ids)
        flags = w.REQ_SPECIAL_TEXT if special else 0
        return self._run(_Request(w.OP_DETOKENIZE, lambda r: r["text"], len(ids), ids,
                                  flags=flags), timeout)

    def detokenize(self, ids: Sequence[int], special: bool = False,
                   timeout: Optional[float] = None) -> str:
        """The tokens' text (bytes that are not UTF-8 become U+FFFD)."""
        return self.detokenize_bytes(ids, special, timeout).decode("utf-8", "replace")

    # --- scoring
    def _score_request(self, item, top):
        params = _params(logprobs=top)
        if _is_text(item):
            if not self._has(w.FEAT_TEXT):
                return errors.UnsupportedError("the daemon has no tokenizer: send token ids")
            data = _bytes(item)
            return _Request(w.OP_SCORE, _score, len(data), text=data,
                            flags=w.REQ_LOGPROBS | w.REQ_TEXT, params=params, alternatives=top)
        ids = list(item)
        return _Request(w.OP_SCORE, _score, len(ids), ids, flags=w.REQ_LOGPROBS, params=params,
                        alternatives=top)

    def score(self, text: Prompt, top: int = 0, timeout: Optional[float] = None) -> Score:
        """The log-probability of every token of ``text`` (str, or a list of ids) given those
        before it, with ``top`` alternatives per position: a Score."""
        return self._run(self._score_request(text, top), timeout)

    def score_batch(self, texts: Sequence[Prompt], top: int = 0,
                    timeout: Optional[float] = None) -> List[Union[Score, errors.Error]]:
        """score() for each text; a Score or an Error in each one's place."""
        return self._run_batch([self._score_request(t, top) for t in texts], timeout)

    # --- classification
    def _classify_request(self, prefix, labels, deadline_ms=0):
        if _is_text(labels):
            return errors.InvalidError("labels is a list of labels, not one text")
        labels = list(labels)
        if not self._has(w.FEAT_CLASSIFY):
            return errors.UnsupportedError("the daemon does not classify (feature CLASSIFY)")
        params = _params(deadline_ms=deadline_ms)
        if _is_text(prefix):
            if not all(_is_text(label) for label in labels):
                return errors.InvalidError("a text prefix takes text labels")
            if not self._has(w.FEAT_TEXT):
                return errors.UnsupportedError("the daemon has no tokenizer: send token ids")
            body = w.classify_text(_bytes(prefix), [_bytes(label) for label in labels])

            def convert(res):
                return _text_classification(labels, res)
            return _Request(w.OP_CLASSIFY, convert, len(body), text=body, flags=w.REQ_TEXT,
                            params=params, alternatives=0)
        if any(_is_text(label) for label in labels):
            return errors.InvalidError("an id prefix takes id labels")
        prefix, ids = list(prefix), [list(label) for label in labels]
        words = w.classify_words(prefix, ids)

        def convert(res):
            return _classification(labels, [len(x) for x in ids], res["records"], len(prefix))
        return _Request(w.OP_CLASSIFY, convert, len(words), words, params=params,
                        alternatives=0)

    def classify(self, text: Prompt, labels: Sequence[Label], timeout: Optional[float] = None,
                 deadline_ms: int = 0) -> Classification:
        """Which of ``labels`` the model finds likeliest after ``text`` (shm/PROTOCOL.md
        section 6.12, bn_classify): the daemon reads the prefix once and continues it with
        every label. Give a text prefix with text labels (str or bytes: the daemon encodes
        them; a label's tokens are those text + label gets past the text's own, so a label
        that follows a word wants its leading space: " positive"), or an id prefix (BOS first
        if wanted: nothing is added) with id labels (lists of ids). Each label's log-probs are
        those score() gives for the prefix followed by the label, bit for bit. Returns a
        Classification; EmptyError for no label or an empty one."""
        return self._run(self._classify_request(text, labels, deadline_ms), timeout)

    def classify_batch(self, items: Sequence[Any], timeout: Optional[float] = None,
                       deadline_ms: int = 0) -> List[Union[Classification, errors.Error]]:
        """classify() for each item, a (text, labels) pair or a {"text", "labels"} dict; a
        Classification or an Error in each one's place, each equal to the item alone."""
        reqs = []
        for item in items:
            if isinstance(item, dict) and "text" in item and "labels" in item:
                item = (item["text"], item["labels"])
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                reqs.append(errors.InvalidError("an item is (text, labels) or a dict of them"))
                continue
            reqs.append(self._classify_request(item[0], item[1], deadline_ms))
        return self._run_batch(reqs, timeout)

    # --- embeddings
    def _embed_request(self, item, dimensions=None, special=False, bos=True):
        bad = _embed.check_dimensions(dimensions)
        if bad is not None:
            return bad
        if not self._has(w.FEAT_EMBED):
            return errors.UnsupportedError(
                "the daemon does not embed: a generative model embeds only when bitnetd runs "
                "with --pooling mean, cls or last (the loopback backend never does)")

        def convert(res):
            return _embed.embedding(res, dimensions)
        if _is_text(item):
            if not self._has(w.FEAT_TEXT):
                return errors.UnsupportedError("the daemon has no tokenizer: send token ids")
            data = _bytes(item)
            flags = w.REQ_TEXT | (w.REQ_PARSE_SPECIAL if special else 0) | \
                (0 if bos else w.REQ_NO_BOS)
            return _Request(w.OP_EMBED, convert, len(data), text=data, flags=flags, reason=True)
        try:
            ids = list(item)
        except TypeError:
            return errors.InvalidError("an input is text or a list of token ids, not %r" %
                                       type(item).__name__)
        return _Request(w.OP_EMBED, convert, len(ids), ids, reason=True)

    def embed(self, input: Prompt, dimensions: Optional[int] = None, special: bool = False,
              bos: bool = True, timeout: Optional[float] = None) -> Embedding:
        """The embedding of ``input`` (text the daemon encodes, BOS first and EOS last as the
        model says, e.g. the <|endoftext|> a Qwen3-Embedding-style model was trained to end
        with, unless ``bos=False``; special tokens' texts those tokens only with ``special``;
        or a list of ids used as given): an Embedding whose vector is the final norm's output pooled as the
        model says and divided by its L2 norm (shm/PROTOCOL.md section 6.14). ``dimensions``:
        its first that many numbers, normalised again (Matryoshka truncation, as OpenAI's
        ``dimensions``), for a model trained to embed; a generative model pooled by bitnetd
        --pooling raises InvalidError for it. UnsupportedError from a daemon that does not
        embed; TooLongError past the context, EmptyError for no tokens."""
        return self._run(self._embed_request(input, dimensions, special, bos), timeout)

    def embed_batch(self, inputs: Sequence[Prompt], dimensions: Optional[int] = None,
                    special: bool = False, bos: bool = True,
                    timeout: Optional[float] = None) -> List[Union[Embedding, errors.Error]]:
        """embed() for each input, all in flight together (batched in the daemon); an
        Embedding or an Error in each one's place, each the same bits as the input alone."""
        if _is_text(inputs):
            raise TypeError("embed_batch takes a list of inputs; embed() takes one text")
        return self._run_batch([self._embed_request(x, dimensions, special, bos)
                                for x in inputs], timeout)

    # --- daemon
    def stats(self) -> str:
        """The daemon's metrics, Prometheus text (section 10.2)."""
        with self._lock:
            return self._seg.control(w.CTL_STATS).decode()

    # --- models (section 15)
    @property
    def model(self) -> str:
        """The name the session's model is served under ("" from a daemon without names)."""
        return self._seg.served_name

    def models(self) -> List[ModelStatus]:
        """The daemon's models and their state, the default first."""
        with self._lock:
            return _models.models(self._seg)

    def load_model(self, name: str) -> ModelStatus:
        """Loads the model and returns once it is (root or the daemon's user only)."""
        with self._lock:
            return _models.command(self._seg, w.CTL_MODEL_LOAD, name)[0]

    def unload_model(self, name: str) -> ModelStatus:
        """Unloads the model once its running requests end (within the drain timeout)."""
        with self._lock:
            return _models.command(self._seg, w.CTL_MODEL_UNLOAD, name)[0]

    def reload_models(self, name: Optional[str] = None) -> List[ModelStatus]:
        """Reads the model's file again if it changed (None: every model's)."""
        with self._lock:
            return _models.command(self._seg, w.CTL_MODEL_RELOAD, name)


def _score(res):
    records = res.get("records", [])
    return Score([r[0].token for r in records], [r[0].logprob for r in records],
                 [r[1:] for r in records])


def _text_classification(labels, res):
    """The daemon's label token counts lead the text region (section 6.12)."""
    text, n = res["text"] or b"", len(labels)
    if len(text) < 4 * n:
        return errors.ProtocolError("%d bytes of label counts for %d labels" % (len(text), n))
    counts = struct.unpack_from("<%dI" % n, text)
    return _classification(labels, counts, res["records"], res["prompt_tokens"])
