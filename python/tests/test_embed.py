"""Embeddings, the feature-extraction pipeline and the fill-mask pipeline against a real daemon,
with oracles from outside the package: the C library (bitnet-cli embed prints its floats), the
same input alone, the daemon's own full-sentence scores (Client.score, one request per
sentence) for fill-mask, and Python's arithmetic for truncation and the softmax.

Run from the repository root after `make all`: python3 -m pytest python/tests
"""

import math
import os
import struct
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_client import BITNETD, CLI, MODEL, ROOT, cli, scaled, start, stop  # noqa: E402

import bitnetd  # noqa: E402

MODEL_TOOL = os.environ.get("BITNET_MODEL_TOOL", os.path.join(ROOT, "build", "bitnet-model"))
STORIES = os.path.join(os.environ.get("BITNET_TEST_MODELS", ""), "stories260K.gguf")

pytestmark = pytest.mark.skipif(not (os.access(CLI, os.X_OK) and os.path.exists(MODEL)),
                                reason="build first: make all")


@pytest.fixture(scope="module")
def mean_daemon():
    proc, path = start(["--backend", "cpu", "--model", MODEL, "--threads", "1", "--slots", "16",
                        "--pooling", "mean"])
    yield path
    stop(proc, path)


@pytest.fixture(scope="module")
def embedding_model_daemon():
    """The tiny preset with <arch>.pooling_type = last and tokenizer.ggml.add_eos_token true, as
    BitNet-embedding-0.6B's file: an embedding model whose inputs end with EOS."""
    folder = tempfile.mkdtemp(prefix="bitnetd-py-model-")
    model = os.path.join(folder, "embed.gguf")
    subprocess.run([MODEL_TOOL, "write", "--preset", "tiny", "--pooling", "last", "--add-eos",
                    "true", "--out", model], check=True, stdout=subprocess.DEVNULL)
    proc, path = start(["--backend", "cpu", "--model", model, "--threads", "1"])
    yield path
    stop(proc, path)
    os.remove(model)
    os.rmdir(folder)


@pytest.fixture(scope="module")
def stories_daemon():
    if not os.path.exists(STORIES):
        pytest.skip("BITNET_TEST_MODELS is not set: the fill-mask tests want a trained model")
    proc, path = start(["--backend", "cpu", "--model", STORIES, "--threads", "1", "--slots", "32"])
    yield path
    stop(proc, path)


def cli_vectors(path, *inputs):
    """bitnet-cli embed's vectors (9 digits: each float back exactly), or its error names."""
    args = []
    for x in inputs:
        args += ["--ids", " ".join(map(str, x))] if isinstance(x, list) else ["--text", x]
    proc = subprocess.run([CLI, "--socket", path, "embed"] + args, stdout=subprocess.PIPE,
                          timeout=scaled(60, BITNETD))
    out, lines = [], proc.stdout.decode().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("input="):
            if " error=" in line:
                out.append(line.split(" error=")[1])
            else:
                out.append([struct.unpack("<f", struct.pack("<f", float(x)))[0]
                            for x in lines[i + 1].split()])
    return out


def test_embed_equals_the_c_library(mean_daemon):
    with bitnetd.Client(mean_daemon, timeout=scaled(60, BITNETD)) as c:
        assert "embed" in c.info()["features"]
        inputs = ["Once upon a time", [1, 40, 41, 42, 43, 44]]
        want = cli_vectors(mean_daemon, *inputs)
        for x, v in zip(inputs, want):
            e = c.embed(x)
            assert e.vector == v and e.pooling == "mean" and not e.trained
            assert e.dim == 256 and abs(sum(a * a for a in e.vector) - 1) < 1e-5
        assert c.embed([1, 40, 41, 42, 43, 44]).n_tokens == 6
        assert c.embed("Once upon a time").n_tokens == len(c.tokenize("Once upon a time"))


def test_embed_batch_fails_item_by_item(mean_daemon):
    with bitnetd.Client(mean_daemon, timeout=scaled(60, BITNETD)) as c:
        ctx = c.info()["context_length"]
        inputs = [[1, 5, 9], "", list(range(1, ctx + 2)), "a b c", [1, 10 ** 6], "ab cd " * ctx,
                  [1, 2, 3, 4, 5, 6, 7, 8] * 5, None]
        out = c.embed_batch(inputs)
        assert isinstance(out[1], bitnetd.EmptyError)
        assert isinstance(out[2], bitnetd.TooLongError)
        assert isinstance(out[4], bitnetd.TokenError)
        assert isinstance(out[5], bitnetd.TooLongError)
        assert isinstance(out[7], bitnetd.InvalidError)
        for x, r in zip(inputs, out):
            if not isinstance(r, bitnetd.Error):
                assert r.vector == c.embed(x).vector  # the same bits alone
        with pytest.raises(TypeError):
            c.embed_batch("one text")


def test_dimensions_only_for_a_model_trained_to_embed(mean_daemon, embedding_model_daemon):
    with bitnetd.Client(mean_daemon, timeout=scaled(60, BITNETD)) as c:
        with pytest.raises(bitnetd.InvalidError, match="not trained to embed"):
            c.embed("hello", dimensions=64)
        assert c.embed("hello", dimensions=256).vector == c.embed("hello").vector
        with pytest.raises(bitnetd.InvalidError):
            c.embed("hello", dimensions=0)
    with bitnetd.Client(embedding_model_daemon, timeout=scaled(60, BITNETD)) as c:
        assert {"embed", "embedding_model"} <= set(c.info()["features"])
        assert "score" not in c.info()["features"]
        full = c.embed("hello")
        assert full.trained and full.pooling == "last"
        cut = c.embed("hello", dimensions=64)
        norm = math.sqrt(sum(x * x for x in full.vector[:64]))
        assert cut.vector == [struct.unpack("<f", struct.pack("<f", x / norm))[0]
                              for x in full.vector[:64]]
        with pytest.raises(bitnetd.InvalidError, match="more than"):
            c.embed("hello", dimensions=257)
        with pytest.raises(bitnetd.UnsupportedError, match="embedding model"):
            c.generate("hello", max_tokens=2)


def test_text_ends_with_eos_as_the_file_says(embedding_model_daemon):
    """The file says add_eos_token: the daemon's ids of a text are <s> + its ids + </s> (the tiny
    vocabulary's 1 and 2), and its vector is that of those ids bit for bit, not of them without
    </s>; bos=False adds neither."""
    with bitnetd.Client(embedding_model_daemon, timeout=scaled(60, BITNETD)) as c:
        body = c.tokenize("the cat sat", bos=False)
        assert body and body[0] != 1 and body[-1] != 2
        ids = [1] + body + [2]
        assert c.tokenize("the cat sat") == ids
        e = c.embed("the cat sat")
        assert e.n_tokens == len(ids)
        assert e.vector == c.embed(ids).vector
        assert e.vector != c.embed(ids[:-1]).vector
        assert c.embed("the cat sat", bos=False).vector == c.embed(body).vector


def test_loopback_does_not_embed():
    proc, path = start(["--backend", "loopback", "--pooling", "mean"])
    try:
        with bitnetd.Client(path, timeout=scaled(30, BITNETD)) as c:
            with pytest.raises(bitnetd.UnsupportedError, match="--pooling"):
                c.embed([1, 2, 3])
    finally:
        stop(proc, path)


def test_async_embed_equals_the_sync_one(mean_daemon):
    import asyncio

    async def main():
        async with bitnetd.AsyncClient(mean_daemon, timeout=scaled(60, BITNETD)) as ac:
            return await ac.embed_batch([[1, 2, 3], "abc"])

    got = asyncio.run(main())
    with bitnetd.Client(mean_daemon, timeout=scaled(60, BITNETD)) as c:
        assert [g.vector for g in got] == [c.embed([1, 2, 3]).vector, c.embed("abc").vector]


def test_feature_extraction_pipeline(mean_daemon):
    with bitnetd.Client(mean_daemon, timeout=scaled(60, BITNETD)) as c:
        fe = bitnetd.pipeline("feature-extraction", client=c)
        one = fe("Once upon a time")
        assert one == [[c.embed("Once upon a time").vector]]
        out = fe.predict_batch(["a", "", [1, 2, 3]])
        assert out[0] == [[c.embed("a").vector]] and isinstance(out[1], bitnetd.EmptyError)
        assert out[2] == [[c.embed([1, 2, 3]).vector]]
        with pytest.raises(ValueError):
            bitnetd.pipeline("feature-extraction", client=c, model="bert")


# ---------------------------------------------------------------------------------- fill-mask

def softmax(values):
    top = max(values)
    w = [math.exp(v - top) for v in values]
    return [x / sum(w) for x in w]


def test_fill_mask_is_full_sentence_scores(stories_daemon):
    text = "Once upon a time, there was a little <mask> named Lily."
    with bitnetd.Client(stories_daemon, timeout=scaled(60, BITNETD)) as c:
        fm = bitnetd.pipeline("fill-mask", client=c)
        got = fm.predict_top_k(text, 8)
        assert 1 <= len(got) <= 8
        # The candidates: the model's likeliest word-starting tokens after the left context.
        proposed = c.generate("Once upon a time, there was a little", max_tokens=1, logprobs=8,
                              ignore_eos=True).logprobs[0][1:]
        ids = [a.token for a in proposed if c.detokenize([a.token]).startswith(" ") and
               c.detokenize([a.token]).strip()]
        assert sorted(g["token"] for g in got) == sorted(ids)
        # The score: a softmax of each whole sentence's log-likelihood, scored alone here.
        sums = [c.score(g["sequence"]).sum for g in got]
        for g, p in zip(got, softmax(sums)):
            assert g["sequence"] == text.replace("<mask>", g["token_str"])
            assert g["token_str"] == c.detokenize([g["token"]]).lstrip()
            assert g["score"] == pytest.approx(p, rel=1e-12)
        assert [g["score"] for g in got] == sorted((g["score"] for g in got), reverse=True)
        assert fm.predict(text)[:5] == got[:5] == fm.predict(text, top_k=5)


def test_fill_mask_targets_several_tokens(stories_daemon):
    text = "Lily saw a <mask> in the park."
    targets = ["dog", "big red ball", "xylophone"]
    with bitnetd.Client(stories_daemon, timeout=scaled(60, BITNETD)) as c:
        fm = bitnetd.pipeline("fill-mask", client=c)
        got = fm.predict(text, targets=targets)
        assert sorted(g["token_str"] for g in got) == sorted(targets)
        sums = {t: c.score(text.replace("<mask>", t)).sum for t in targets}
        probs = dict(zip(targets, softmax([sums[t] for t in targets])))
        for g in got:
            assert g["score"] == pytest.approx(probs[g["token_str"]], rel=1e-12)
            left = c.tokenize("Lily saw a")
            want = c.tokenize("Lily saw a " + g["token_str"])[len(left):]
            assert g["token"] == (want[0] if len(want) == 1 else want)
        assert isinstance(next(g for g in got if g["token_str"] == "big red ball")["token"], list)
        # The right context counts: "named Lily" after the mask makes it a girl.
        best = fm.predict("Once upon a time, there was a little <mask> named Lily.",
                          targets=["dog", "car", "girl", "tree"])[0]
        assert best["token_str"] == "girl" and best["score"] > 0.5


def test_fill_mask_batch_fails_item_by_item(stories_daemon):
    with bitnetd.Client(stories_daemon, timeout=scaled(60, BITNETD)) as c:
        fm = bitnetd.pipeline("fill-mask", client=c, top_k=3)
        texts = ["The <mask> was happy.", "no mask here", "two <mask> <mask>",
                 "<mask> upon a time", 42]
        out = fm.predict_top_k_batch(texts, 2)
        assert isinstance(out[1], bitnetd.InvalidError)
        assert isinstance(out[2], bitnetd.InvalidError)
        assert isinstance(out[4], bitnetd.InvalidError)
        assert out[0] == fm.predict_top_k(texts[0], 2) and len(out[0]) <= 2
        assert out[3] == fm.predict_top_k(texts[3], 2)
        with pytest.raises(bitnetd.InvalidError):
            fm("no mask")
        with pytest.raises(ValueError, match="max-logprobs"):
            fm.predict("The <mask>.", candidates=100)
