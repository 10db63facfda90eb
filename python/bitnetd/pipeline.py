"""Hugging Face-style pipelines for code ported from ``transformers``: the same task names and
the same output shapes, over a Client.

    import bitnetd
    clf = bitnetd.pipeline("zero-shot-classification")
    clf.predict("The match went to extra time.", ["sports", "politics"])
    # {"sequence": "The match ...", "labels": [the likelier, the other], "scores": [p, 1 - p]}

What they compute is the served causal language model's likelihood of label continuations
(Client.classify), its continuation of a prompt (Client.generate), its pooled hidden state
(Client.embed) or its whole-sentence likelihood of candidates for a masked word (Client.score):
not an NLI model's entailment, not a fine-tuned classifier's head, not a BERT-style masked
language model. See python/README.md for each.
"""

import math
from typing import Any, Dict, List, Optional, Sequence, Union

from . import errors
from .client import Client

__all__ = ["pipeline", "Pipeline", "TextGenerationPipeline", "ZeroShotClassificationPipeline",
           "SentimentAnalysisPipeline", "FeatureExtractionPipeline", "FillMaskPipeline"]

Result = Any


class Pipeline:
    """A task over a Client. ``predict(x, **kw)`` answers one input (raising an Error when it
    fails); ``predict_batch(xs, **kw)`` answers many, with every request in flight together,
    and returns one entry per input: its result, or the Error it failed with. Calling the
    pipeline, as in transformers, is predict for one input and predict_batch for a list,
    raising the first failure. Keywords given to ``pipeline()`` are the defaults of every call.
    """

    task = ""
    _KEYS = frozenset()

    def __init__(self, client: Client, owned: bool, defaults: Dict[str, Any]):
        self._check(defaults)
        self.client, self._owned, self.defaults = client, owned, dict(defaults)

    def _check(self, kw):
        unknown = sorted(set(kw) - self._KEYS)
        if unknown:
            raise TypeError("%s: unexpected keyword %s (model= names one of the daemon's "
                            "models: pipeline(task, model=NAME))"
                            % (self.task, ", ".join(repr(k) for k in unknown)))

    def _kw(self, kw):
        self._check(kw)
        merged = dict(self.defaults)
        merged.update(kw)
        return merged

    def predict(self, x, **kw) -> Result:
        out = self.predict_batch([x], **kw)[0]
        if isinstance(out, errors.Error):
            raise out
        return out

    def predict_batch(self, xs: Sequence[Any], **kw) -> List[Union[Result, errors.Error]]:
        raise NotImplementedError

    def _is_batch(self, x):
        return isinstance(x, (list, tuple))

    def __call__(self, x, **kw):
        if not self._is_batch(x):
            return self.predict(x, **kw)
        out = self.predict_batch(x, **kw)
        for r in out:
            if isinstance(r, errors.Error):
                raise r
        return out

    def close(self) -> None:
        """Closes the Client when the pipeline made it."""
        if self._owned:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _grouped(flat, sizes, make):
    """Splits flat results into consecutive groups of ``sizes``; a group with an Error is that
    Error, else make(group)."""
    out, at = [], 0
    for n in sizes:
        group = flat[at:at + n]
        at += n
        bad = next((r for r in group if isinstance(r, errors.Error)), None)
        out.append(bad if bad is not None else make(group))
    return out


# --------------------------------------------------------------------------- text-generation

class TextGenerationPipeline(Pipeline):
    """``predict(prompt)`` -> ``[{"generated_text": prompt + continuation}]``, one dict per
    returned sequence, as transformers gives. ``prompt`` is text, or a chat (a list of
    {"role", "content"} dicts, rendered by the daemon's template): then ``generated_text``
    is the messages with the assistant's reply appended.

    Keywords: ``max_new_tokens`` (default 50), ``return_full_text`` (default True: the
    prompt, then the continuation; False: the continuation alone), ``num_return_sequences``
    (default 1), ``do_sample`` with ``temperature`` (default 1.0 when sampling), ``top_k``
    (default 50 when sampling), ``top_p``; and Client.generate's own: ``seed`` (sequence k
    gets seed + k), ``min_p``, ``repetition_penalty``, ``presence_penalty``,
    ``frequency_penalty``, ``stop`` (ids), ``ignore_eos``, ``deadline_ms``, ``speculative``,
    ``timeout``, structured output (``json_schema``, ``regex``, ``grammar``, ``json``,
    ``compact``: the continuation follows it),
    and for chats ``chat_template`` (Client.chat's).
    Without ``do_sample`` the decoding is greedy unless ``temperature``, ``top_k`` or
    ``top_p`` is given (transformers would ignore them with a warning).
    """

    task = "text-generation"
    _GENERATE = frozenset(("seed", "min_p", "repetition_penalty", "presence_penalty",
                           "frequency_penalty", "stop", "ignore_eos", "deadline_ms",
                           "speculative", "json_schema", "regex", "grammar", "json", "compact"))
    _KEYS = _GENERATE | {"max_new_tokens", "return_full_text", "num_return_sequences",
                         "do_sample", "temperature", "top_k", "top_p", "timeout",
                         "chat_template"}

    def _is_batch(self, x):
        return isinstance(x, (list, tuple)) and not (x and isinstance(x[0], dict))

    def _sampling(self, kw):
        """Client.generate's keywords for kw (transformers' names)."""
        out = {k: kw[k] for k in self._GENERATE if k in kw}
        do_sample = kw.get("do_sample")
        if do_sample is None:
            do_sample = any(kw.get(k) for k in ("temperature", "top_k", "top_p"))
        if do_sample:
            out["temperature"] = kw.get("temperature") or 1.0
            out["top_k"] = kw.get("top_k", 50) or 0
            out["top_p"] = kw.get("top_p") or 0.0
        return out

    def predict_batch(self, xs, **kw):
        kw = self._kw(kw)
        n, full = kw.get("num_return_sequences", 1), kw.get("return_full_text", True)
        sampling, max_tokens = self._sampling(kw), kw.get("max_new_tokens", 50)
        texts = [k for k, x in enumerate(xs) if isinstance(x, str)]
        chats = [k for k, x in enumerate(xs) if isinstance(x, (list, tuple))]
        seqs = [[errors.InvalidError("a text-generation input is text or a chat")] * n
                for _ in xs]
        for j in range(n):  # sequence j of every input: one batch call per kind of input
            s = dict(sampling)
            if s.get("seed") is not None:
                s["seed"] += j
            for ks, call, extra in (
                    (texts, self.client.generate_batch, {}),
                    (chats, self.client.chat_batch, {"chat_template": kw.get("chat_template", 0)})):
                if not ks:
                    continue
                res = call([xs[k] for k in ks], max_tokens=max_tokens, timeout=kw.get("timeout"),
                           **s, **extra)
                for k, r in zip(ks, res):
                    seqs[k][j] = r if isinstance(r, errors.Error) else self._text(xs[k], r, full)
        return _grouped([r for group in seqs for r in group], [n] * len(xs),
                        lambda group: [{"generated_text": r} for r in group])

    @staticmethod
    def _text(x, g, full):
        if not full:
            return g.text
        if isinstance(x, str):
            return x + g.text
        return [dict(m) if isinstance(m, dict) else {"role": m[0], "content": m[1]}
                for m in x] + [{"role": "assistant", "content": g.text}]


# ------------------------------------------------------------------ zero-shot-classification

def _split_template(template):
    """The hypothesis template around its one "{}": the prefix part with its trailing white
    space removed, and that white space, which goes to the start of each label's continuation
    (a word-initial token carries its space)."""
    if template.count("{}") != 1:
        raise ValueError("hypothesis_template needs exactly one '{}': %r" % template)
    before, after = template.split("{}")
    head = before.rstrip()
    return head, before[len(head):], after


class ZeroShotClassificationPipeline(Pipeline):
    """``predict(sequence, candidate_labels, hypothesis_template="This example is {}.",
    multi_label=False)`` -> ``{"sequence", "labels", "scores"}``, labels sorted by score,
    highest first, as transformers gives. ``candidate_labels`` is a list, or one string of
    comma-separated labels.

    Single-label (the default): one Client.classify of the prefix ``sequence + "\\n" +`` the
    template up to "{}" (its trailing white space moved to the labels) with, per label, the
    continuation: that white space + label + the template after "{}". A score is the label's
    ``prob``: exp of its summed log-probability, normalized over the labels (they sum to 1).

    multi_label=True: each label on its own, as a yes/no question (the way an NLI pipeline
    weighs entailment against contradiction per label): one classify per label of
    ``sequence + "\\nQuestion: " + hypothesis + " Yes or no?\\nAnswer:"`` with the labels
    " Yes" and " No"; the score is " Yes"'s probability normalized over the two. Scores do
    not sum to 1. One candidate label is always multi-label, as in transformers (normalized
    over itself it would score 1). Not exp(mean log-probability): that rates how predictable
    a label's words are after the text, which favours common words over the true label.
    """

    task = "zero-shot-classification"
    _KEYS = frozenset(("candidate_labels", "hypothesis_template", "multi_label", "timeout"))
    QUESTION = "\nQuestion: %s Yes or no?\nAnswer:"
    ANSWERS = (" Yes", " No")

    def predict(self, sequence, candidate_labels=None, **kw) -> Dict[str, Any]:
        if candidate_labels is not None:
            kw["candidate_labels"] = candidate_labels
        return super().predict(sequence, **kw)

    def __call__(self, sequences, candidate_labels=None, **kw):
        if candidate_labels is not None:
            kw["candidate_labels"] = candidate_labels
        return super().__call__(sequences, **kw)

    def predict_batch(self, sequences, candidate_labels=None, **kw):
        if candidate_labels is not None:
            kw["candidate_labels"] = candidate_labels
        kw = self._kw(kw)
        labels = kw.get("candidate_labels")
        if isinstance(labels, str):
            labels = [x.strip() for x in labels.split(",") if x.strip()]
        if not labels:
            raise ValueError("zero-shot-classification needs candidate_labels")
        labels = list(labels)
        template = kw.get("hypothesis_template", "This example is {}.")
        head, space, tail = _split_template(template)
        multi = kw.get("multi_label", False) or len(labels) == 1  # as transformers does
        if multi:
            items = [(seq + self.QUESTION % template.replace("{}", label), list(self.ANSWERS))
                     for seq in sequences for label in labels]
            sizes = [len(labels)] * len(sequences)
        else:
            conts = [space + label + tail for label in labels]
            items = [(seq + "\n" + head, conts) for seq in sequences]
            sizes = [1] * len(sequences)
        flat = self.client.classify_batch(items, timeout=kw.get("timeout"))
        if multi:
            scores = lambda group: [c.labels[0].prob for c in group]  # noqa: E731
        else:
            scores = lambda group: group[0].probs  # noqa: E731
        out = _grouped(flat, sizes, scores)
        return [r if isinstance(r, errors.Error) else _ranked(seq, labels, r)
                for seq, r in zip(sequences, out)]


def _ranked(sequence, labels, scores):
    order = sorted(range(len(labels)), key=lambda j: -scores[j])  # stable: ties keep order
    return {"sequence": sequence, "labels": [labels[j] for j in order],
            "scores": [scores[j] for j in order]}


# ------------------------------------------------------------------------ sentiment-analysis

class SentimentAnalysisPipeline(Pipeline):
    """``predict(text)`` -> ``[{"label": "POSITIVE" or "NEGATIVE", "score": p}]``, as
    transformers gives for one text; ``top_k=None`` gives both labels, highest first.
    ``predict_batch(texts)`` gives one such dict per text (a list of both with top_k=None),
    as transformers gives for a list.

    One Client.classify per text: the prefix is ``template`` with the text in place of its
    "{}" (default: the text, then "\\nQuestion: Is the sentiment of this text positive or
    negative?\\nAnswer:"), the labels " positive" and " negative"; ``p`` is the label's
    probability normalized over the two.
    """

    task = "sentiment-analysis"
    _KEYS = frozenset(("top_k", "template", "timeout"))
    TEMPLATE = "{}\nQuestion: Is the sentiment of this text positive or negative?\nAnswer:"
    LABELS = (("POSITIVE", " positive"), ("NEGATIVE", " negative"))

    def _is_batch(self, x):
        return isinstance(x, (list, tuple))

    def predict(self, text, **kw) -> List[Dict[str, Any]]:
        out = super().predict(text, **kw)
        return [out] if isinstance(out, dict) else out

    def predict_batch(self, texts, **kw):
        kw = self._kw(kw)
        template = kw.get("template", self.TEMPLATE)
        if template.count("{}") != 1:
            raise ValueError("template needs exactly one '{}': %r" % template)
        top_k = kw.get("top_k", 1)
        conts = [c for _, c in self.LABELS]
        items = [(template.replace("{}", t), conts) if isinstance(t, str) else
                 errors.InvalidError("a sentiment-analysis input is text") for t in texts]
        good = [it for it in items if not isinstance(it, errors.Error)]
        res = iter(self.client.classify_batch(good, timeout=kw.get("timeout")))
        out = []
        for it in items:
            r = it if isinstance(it, errors.Error) else next(res)
            if not isinstance(r, errors.Error):
                ranked = sorted(({"label": name, "score": s.prob}
                                 for (name, _), s in zip(self.LABELS, r.labels)),
                                key=lambda d: -d["score"])
                r = ranked[0] if top_k == 1 else ranked[:top_k]
            out.append(r)
        return out


# ------------------------------------------------------------------------ feature-extraction

class FeatureExtractionPipeline(Pipeline):
    """``predict(text)`` -> ``[[vector]]``: the input's embedding (Client.embed: the final
    norm's output pooled as the model says and L2-normalised), shaped [1, 1, dim].

    transformers' pipeline gives every token's hidden state, [1, n_tokens, dim], and leaves
    pooling to the caller; bitnetd's daemon pools (mean, first or last position, as the model
    or bitnetd --pooling says) and normalises, so its one row stands where the tokens' rows
    would: code that averages over that axis gets the vector back. Keywords: ``dimensions``
    (Client.embed's: Matryoshka truncation, for a model trained to embed), ``special``,
    ``bos``, ``timeout``. ``predict_batch(texts)`` gives one such list (or an Error) per
    input, each the same bits as the input alone. Inputs may be text or lists of ids.
    """

    task = "feature-extraction"
    _KEYS = frozenset(("dimensions", "special", "bos", "timeout"))

    def _is_batch(self, x):
        return isinstance(x, (list, tuple)) and not (x and isinstance(x[0], int))

    def predict_batch(self, xs, **kw):
        kw = self._kw(kw)
        out = self.client.embed_batch(list(xs), dimensions=kw.get("dimensions"),
                                      special=kw.get("special", False), bos=kw.get("bos", True),
                                      timeout=kw.get("timeout"))
        return [r if isinstance(r, errors.Error) else [[r.vector]] for r in out]


# --------------------------------------------------------------------------------- fill-mask

def _softmax(values):
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    total = 0.0
    for x in weights:  # in order, as the package's other sums
        total += x
    return [x / total for x in weights]


class _Masked:
    """One fill-mask input: the text around its mask, its candidates (the text each puts in
    place of the mask and its token ids) and their sentences."""

    def __init__(self, left, right):
        self.left, self.right = left, right
        self.fills, self.tokens = [], []

    @property
    def new_word(self):
        """The mask starts a word: nothing, or white space, before it."""
        return not self.left or self.left[-1].isspace()

    def add(self, text, token):
        """A candidate whose text (a token's, with its leading space) fits the mask: one that
        starts a word where the mask does, and only there."""
        if not text.strip() or (self.left and text[0].isspace() != self.new_word):
            return
        fill = text.lstrip() if self.new_word else text
        if fill not in self.fills:
            self.fills.append(fill)
            self.tokens.append(token)

    def sentences(self):
        return [self.left + f + self.right for f in self.fills]


class FillMaskPipeline(Pipeline):
    """``predict(text)`` -> the ``top_k`` (default 5) likeliest fillings of the mask in
    ``text``, best first: ``[{"sequence", "score", "token", "token_str"}, ...]`` as
    transformers gives. ``predict_top_k(text, top_k)`` says how many; ``predict_batch`` and
    ``predict_top_k_batch`` give one such list (or an Error) per input.

    The mask is ``mask_token`` (default "<mask>"), once per input (else that input is an
    InvalidError). With a causal model, in two requests: the candidates are the ``candidates``
    most likely next tokens after the text before the mask (one Client.generate of one token
    with that many log-probability alternatives: at most the daemon's --max-logprobs, default
    8), kept where they fit it (a token that starts a word where the mask follows a space,
    one that does not where it follows a letter); then every candidate's whole sentence, the
    text after the mask included, is scored (Client.score_batch: all candidates of all
    inputs in one batch), and ``score`` is the softmax of those sentences' log-likelihoods
    over the candidates. ``targets`` (a word or a list; several tokens each if need be)
    replaces the first step: those are the candidates. ``token`` is the candidate's id (a
    target's ids, as the text before the mask followed by it encodes them past that text's
    own: a list when there are several), ``token_str`` the text put in place of the mask,
    ``sequence`` the filled text.

    How it differs from a BERT-style answer: a masked language model reads both sides of the
    mask at once and its scores are the mask position's probabilities over the whole
    vocabulary; here the right context only re-ranks what the left context proposed (a word
    the left context makes unlikely is never proposed unless given in ``targets``), and the
    scores sum to 1 over the candidates returned to the ranking, not over the vocabulary. A
    candidate that makes the rest of the sentence likelier rises, as it should; a long
    sentence's likelihood is dominated by its other words, which every candidate shares.
    """

    task = "fill-mask"
    _KEYS = frozenset(("top_k", "targets", "mask_token", "candidates", "timeout"))

    def predict_top_k(self, text, top_k, **kw):
        return self.predict(text, top_k=top_k, **kw)

    def predict_top_k_batch(self, texts, top_k, **kw):
        return self.predict_batch(texts, top_k=top_k, **kw)

    def _split(self, text, mask):
        if not isinstance(text, str):
            return errors.InvalidError("a fill-mask input is text")
        if text.count(mask) != 1:
            return errors.InvalidError("a fill-mask input holds the mask %r once, this one %d "
                                       "times" % (mask, text.count(mask)))
        left, right = text.split(mask)
        return _Masked(left, right)

    def _propose(self, masked, n, timeout):
        """Each input's candidates from the model: its likeliest next tokens after the text
        before the mask (BOS alone before a mask that starts the text)."""
        info = self.client.info()
        if n > info["max_logprobs"]:
            raise ValueError("candidates=%d: the daemon gives at most %d alternatives a token "
                             "(bitnetd --max-logprobs); give targets instead" %
                             (n, info["max_logprobs"]))
        prompts = [m.left.rstrip() or [info["bos_id"]] for m in masked]
        gens = self.client.generate_batch(prompts, max_tokens=1, logprobs=n, ignore_eos=True,
                                          timeout=timeout)
        out = []
        for m, g in zip(masked, gens):
            if isinstance(g, errors.Error):
                out.append(g)
                continue
            for alt in g.logprobs[0][1:]:
                m.add(self.client.detokenize([alt.token]), alt.token)
            out.append(m)
        return out

    def _targets(self, masked, targets):
        """Each input's candidates from the caller: the targets, with the ids each adds to the
        text before the mask (encoded without special tokens: only the ids after the common
        start matter, and a model whose file says add_eos_token would end both with EOS)."""
        for m in masked:
            base = self.client.tokenize(m.left.rstrip(), bos=False)
            for t in targets:
                fill = t.lstrip() if m.new_word else t
                ids = self.client.tokenize(m.left + fill, bos=False)
                k = 0
                while k < min(len(base), len(ids)) and base[k] == ids[k]:
                    k += 1
                m.add((" " if m.left and m.new_word else "") + fill,
                      ids[k] if len(ids) - k == 1 else ids[k:])
        return masked

    def predict_batch(self, texts, **kw):
        kw = self._kw(kw)
        top_k, timeout = kw.get("top_k", 5), kw.get("timeout")
        targets = kw.get("targets")
        if isinstance(targets, str):
            targets = [targets]
        items = [self._split(t, kw.get("mask_token", "<mask>")) for t in texts]
        good = [m for m in items if not isinstance(m, errors.Error)]
        if targets:
            ready = self._targets(good, targets)
        else:
            ready = self._propose(good, max(top_k, kw.get("candidates", 8)), timeout)
        done = iter(ready)
        items = [m if isinstance(m, errors.Error) else next(done) for m in items]
        flat = [s for m in items if not isinstance(m, errors.Error) for s in m.sentences()]
        scores = iter(self.client.score_batch(flat, timeout=timeout))
        out = []
        for m in items:
            if isinstance(m, errors.Error):
                out.append(m)
                continue
            mine = [next(scores) for _ in m.fills]
            bad = next((r for r in mine if isinstance(r, errors.Error)), None)
            if bad is not None or not mine:
                out.append(bad or errors.EmptyError("no candidate fits the mask"))
                continue
            probs = _softmax([r.sum for r in mine])
            order = sorted(range(len(mine)), key=lambda j: -probs[j])[:top_k]
            out.append([{"sequence": m.sentences()[j], "score": probs[j],
                         "token": m.tokens[j], "token_str": m.fills[j]} for j in order])
        return out


# ------------------------------------------------------------------------------- pipeline()

_TASKS = {"text-generation": TextGenerationPipeline,
          "zero-shot-classification": ZeroShotClassificationPipeline,
          "sentiment-analysis": SentimentAnalysisPipeline,
          "text-classification": SentimentAnalysisPipeline,
          "feature-extraction": FeatureExtractionPipeline,
          "fill-mask": FillMaskPipeline}


def pipeline(task: str, client: Optional[Client] = None, model: Optional[str] = None,
             **defaults) -> Pipeline:
    """A transformers-style pipeline for ``task``: "text-generation",
    "zero-shot-classification", "sentiment-analysis" (also "text-classification", its
    transformers alias), "feature-extraction" or "fill-mask". ``client``: the Client to use
    (None: a Client on the default socket, closed by the pipeline's close()). ``model``: the
    name of one of the daemon's models (section 15; None: the client's, or the daemon's
    default); an unknown name raises ModelNotFoundError, and a client bound to another model
    ValueError. ``defaults``: keywords for every predict call, e.g. ``max_new_tokens=32`` or
    ``candidate_labels=[...]``; what the task does not take (``device=``) is a TypeError.
    """
    cls = _TASKS.get(task)
    if cls is None:
        raise KeyError("unknown task %r; bitnetd has %s" % (task, ", ".join(sorted(_TASKS))))
    if client is not None and model and model != client.model:
        raise ValueError("%s: the client is bound to the model %r, not %r: pass model= "
                         "without client= for a session of that model"
                         % (task, client.model, model))
    owned = client is None
    if owned:
        client = Client(model=model)
    try:
        return cls(client, owned, defaults)
    except BaseException:
        if owned:
            client.close()
        raise
