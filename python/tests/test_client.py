"""The bitnetd package against a real daemon (the cpu backend on the built-in tiny model, and
a loopback daemon), with oracles from outside the package: the C library (through bitnet-cli),
the same request run alone, and Python's own UTF-8 decoder.

Run from the repository root after `make all`: python3 -m pytest python/tests
(BITNETD, BITNET_CLI and BITNET_DEFAULT_MODEL override the build's paths).
"""

import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import bitnetd  # noqa: E402
from timescale import scaled  # noqa: E402 (the tests' waits: tests/timescale.h's rule)

BITNETD = os.environ.get("BITNETD", os.path.join(ROOT, "build", "bitnetd"))
CLI = os.environ.get("BITNET_CLI", os.path.join(ROOT, "build", "bitnet-cli"))
MODEL = os.environ.get("BITNET_DEFAULT_MODEL", os.path.join(ROOT, "build", "models", "tiny.gguf"))

pytestmark = pytest.mark.skipif(not (os.access(BITNETD, os.X_OK) and os.path.exists(MODEL)),
                                reason="build first: make all")


def start(args):
    folder = tempfile.mkdtemp(prefix="bitnetd-py-")
    path = os.path.join(folder, "d.sock")
    proc = subprocess.Popen([BITNETD, "--socket", path, "--log-level", "warn"] + args,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + scaled(5, BITNETD)
    while time.monotonic() < deadline:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return proc, path
        except OSError:
            time.sleep(0.01)
        finally:
            s.close()
    proc.kill()
    raise RuntimeError("bitnetd did not start")


def stop(proc, path):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(scaled(20, BITNETD)) == 0
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.fixture(scope="module")
def daemon():
    proc, path = start(["--backend", "cpu", "--model", MODEL, "--threads", "1", "--slots", "8"])
    yield path
    stop(proc, path)


@pytest.fixture(scope="module")
def loopback():
    proc, path = start(["--backend", "loopback"])
    yield path
    stop(proc, path)


@pytest.fixture
def client(daemon):
    with bitnetd.Client(daemon, timeout=scaled(60, BITNETD)) as c:
        yield c


def cli(path, *args, data=None):
    out = subprocess.run([CLI, "--socket", path] + list(args), input=data,
                         timeout=scaled(60, BITNETD), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, check=True)
    return out.stdout.decode()


def test_info(client):
    i = client.info()
    assert i["backend"] == "cpu" and i["slots"] == 8
    assert {"text", "score", "logprobs", "compute", "speculate"} <= set(i["features"])
    # the daemon's defaults on the tiny preset: the screened head, the 2-bit planes
    assert (i["lm_head"], i["decode_layout"]) == ("screened", "2bit")


def test_generate_ids_equal_the_c_library(client, daemon):
    g = client.generate([1, 5, 9, 13], max_tokens=12, ignore_eos=True)
    want = [int(x) for x in cli(daemon, "generate", "--ids", "1 5 9 13", "--max-tokens", "12",
                                "--ignore-eos").split()]
    assert g.ids == want and g.status == "length"
    # The text is the ids' bytes decoded with U+FFFD (an independent decoder).
    assert g.text == client.detokenize_bytes(g.ids).decode("utf-8", "replace")


def test_speculative_is_the_same_generation(client, daemon):
    prompt = [1, 5, 9, 13, 5, 9, 13, 5, 9]
    for kw in ({}, {"temperature": 0.9, "seed": 3, "logprobs": 2}):
        plain = client.generate(prompt, max_tokens=40, ignore_eos=True, **kw)
        spec = client.generate(prompt, max_tokens=40, ignore_eos=True, speculative=True, **kw)
        assert (spec.ids, spec.text, spec.status, spec.logprobs) == \
            (plain.ids, plain.text, plain.status, plain.logprobs)
        if not kw:
            greedy = plain.ids
    out = cli(daemon, "generate", "--ids", " ".join(map(str, prompt)), "--max-tokens", "40",
              "--ignore-eos", "--speculative")
    assert [int(x) for x in out.split()] == greedy
    assert "speculative=request\n" in cli(daemon, "info")


def test_text_prompt_is_its_ids(client):
    ids = client.tokenize("Once upon a time")
    a = client.generate("Once upon a time", max_tokens=8, ignore_eos=True)
    b = client.generate(ids, max_tokens=8, ignore_eos=True)
    assert a.ids == b.ids and a.prompt_tokens == len(ids)


def test_tokenize_equals_the_c_library(client, daemon):
    for text in ["Hello world", "  two  spaces", "caf\u00e9 \U0001f642", ""]:
        want = [int(x) for x in cli(daemon, "tokenize", "-", data=text.encode()).split()]
        assert client.tokenize(text) == want


def test_stream_pieces_join_to_the_generation(client):
    g = client.generate([1, 7, 11], max_tokens=20, ignore_eos=True)
    pieces = list(client.stream([1, 7, 11], max_tokens=20, ignore_eos=True))
    assert [p.token for p in pieces if p.token is not None] == g.ids
    assert "".join(p.text for p in pieces) == g.text


def test_closing_a_stream_cancels_and_frees_its_slot(client):
    for _ in range(3 * client.info()["slots"]):
        s = client.stream([1, 2, 3], max_tokens=500, ignore_eos=True)
        next(s)
        s.close()
    assert client.generate([1, 2, 3], max_tokens=2, ignore_eos=True).status == "length"


def test_logprobs_and_score_agree(client):
    g = client.generate([1, 5, 9, 13], max_tokens=6, ignore_eos=True, logprobs=2)
    sc = client.score([1, 5, 9, 13] + g.ids, top=2)
    assert sc.tokens == [5, 9, 13] + g.ids
    for j, rec in enumerate(g.logprobs):  # the same bits: prefill == stepwise
        assert (sc.tokens[3 + j], sc.logprobs[3 + j]) == tuple(rec[0])
        assert sc.top[3 + j] == rec[1:]


def test_score_equals_the_cli(client, daemon):
    sc = client.score([1, 50, 60, 70, 80])
    lines = cli(daemon, "score", "--ids", "1 50 60 70 80").splitlines()
    for i, line in enumerate(lines[:-1]):
        pos, tok, lp = line.split()[:3]
        assert (int(pos), int(tok)) == (i + 1, sc.tokens[i])
        assert float(lp) == pytest.approx(sc.logprobs[i], rel=1e-8)
    assert lines[-1].startswith("sum=")


def test_batches_fail_item_by_item(client):
    prompts = [[1, 5, 9], [1, 10 ** 6], "Once", [], [1, 2, 3, 4]]
    out = client.generate_batch(prompts, max_tokens=5, ignore_eos=True)
    assert isinstance(out[1], bitnetd.TokenError) and isinstance(out[3], bitnetd.EmptyError)
    for p, r in zip(prompts, out):
        if not isinstance(r, bitnetd.Error):
            assert r.ids == client.generate(p, max_tokens=5, ignore_eos=True).ids
    scores = client.score_batch([[1, 2, 3], [1, 10 ** 6], "a b c"], top=1)
    assert isinstance(scores[1], bitnetd.TokenError)
    assert scores[0].logprobs == client.score([1, 2, 3], top=1).logprobs


def test_chat_batch_bad_item_is_its_error(client):
    good = [{"role": "user", "content": "Hi"}]
    out = client.chat_batch([good, [{"role": "", "content": "x"}], good], max_tokens=4,
                            chat_template=4, ignore_eos=True)
    assert isinstance(out[1], bitnetd.InvalidError)
    assert out[0].ids == out[2].ids == client.chat(good, max_tokens=4, chat_template=4,
                                                  ignore_eos=True).ids


def test_loopback_refuses_text_and_score(loopback):
    with bitnetd.Client(loopback, timeout=scaled(30, BITNETD)) as c:
        assert "text" not in c.info()["features"]
        with pytest.raises(bitnetd.UnsupportedError):
            c.generate("text", max_tokens=1)
        with pytest.raises(bitnetd.UnsupportedError):
            c.score([1, 2, 3])
        assert c.generate([1, 2, 3], max_tokens=4).ids == [17499, 28047, 18038, 25851]


def test_async_client_equals_the_sync_one(daemon, client):
    import asyncio

    async def main():
        async with bitnetd.AsyncClient(daemon, timeout=scaled(60, BITNETD)) as ac:
            gens = await asyncio.gather(*(ac.generate([1, k, 9], max_tokens=6, ignore_eos=True)
                                          for k in range(2, 10)))
            pieces = [p async for p in ac.stream([1, 7, 11], max_tokens=8, ignore_eos=True)]
            # Leaving a stream early cancels it; the slot comes back.
            async for _ in ac.stream([1, 2, 3], max_tokens=500, ignore_eos=True):
                break
            score = await ac.score([1, 2, 3, 4])
            return gens, pieces, score

    gens, pieces, score = asyncio.run(main())
    for k, g in zip(range(2, 10), gens):
        assert g.ids == client.generate([1, k, 9], max_tokens=6, ignore_eos=True).ids
    assert [p.token for p in pieces if p.token is not None] == \
        client.generate([1, 7, 11], max_tokens=8, ignore_eos=True).ids
    assert score.logprobs == client.score([1, 2, 3, 4]).logprobs


def test_score_sum_equals_the_cli(client, daemon):
    sc = client.score([1, 50, 60, 70, 80])
    last = cli(daemon, "score", "--ids", "1 50 60 70 80").splitlines()[-1]
    assert float(last.split()[0][len("sum="):]) == sc.sum  # %.17g: every bit


# --- classify (shm/PROTOCOL.md section 6.12)

def in_order(values):
    total = 0.0
    for v in values:
        total += v
    return total


def check_shares(c):
    """mean and prob from the sums, computed here as bn_classify does."""
    sums = [s.logprob for s in c.labels]
    top = max(sums)
    assert c.best == sums.index(top)
    norm = in_order(math.exp(s - top) for s in sums)
    for s in c.labels:
        assert s.mean == s.logprob / s.n_tokens
        assert s.prob == math.exp(s.logprob - top) / norm


def test_classify_ids_is_score_of_prefix_and_label(client):
    prefix = [1, 40, 41, 42, 43, 44, 45]
    labels = [[7], [100, 101, 102], [300, 3, 301, 4]]
    c = client.classify(prefix, labels)
    assert c.prompt_tokens == len(prefix) and [s.label for s in c.labels] == labels
    for s, label in zip(c.labels, labels):
        sc = client.score(prefix + label)
        assert s.tokens == label == sc.tokens[len(prefix) - 1:]
        assert s.logprobs == sc.logprobs[len(prefix) - 1:]  # bit for bit
        assert s.logprob == in_order(sc.logprobs[len(prefix) - 1:]) and s.n_tokens == len(label)
    check_shares(c)


def test_classify_text_is_score_of_text_and_label(client):
    text, labels = "Once upon a time, there was a little", [" girl", " boy", " dragon named Bo"]
    c = client.classify(text, labels)
    n_prefix = len(client.tokenize(text))
    assert c.prompt_tokens == n_prefix
    for s, label in zip(c.labels, labels):
        sc = client.score(text + label)
        # The label's tokens: those text + label gets past the text's own ids.
        assert s.tokens == client.tokenize(text + label)[n_prefix:] == sc.tokens[n_prefix - 1:]
        assert s.logprobs == sc.logprobs[n_prefix - 1:]
        assert s.logprob == in_order(sc.logprobs[n_prefix - 1:])
    check_shares(c)
    assert c.label == labels[c.best]


def test_classify_equals_the_cli(client, daemon):
    text = "The weather today is"
    for args, labels in ((["--labels", "sunny,rainy,cold"], [" sunny", " rainy", " cold"]),
                         (["--labels", "good,bad", "--no-space"], ["good", "bad"])):
        out = cli(daemon, "classify", "--text", text, *args).splitlines()
        c = client.classify(text, labels)
        for line, s in zip(out, c.labels):
            fields = dict(f.split("=", 1) for f in line.split()[1:4])
            assert int(fields["tokens"]) == s.n_tokens
            assert fields["logprob"] == "%.9g" % s.logprob
            assert fields["mean"] == "%.9g" % s.mean
            assert line.split()[4] == "prob=%.6f" % s.prob
        assert out[-1].startswith("best=%d " % c.best)


def test_classify_batch_fails_item_by_item(client):
    items = [("Once upon a time", [" there", " a"]),
             ("Once upon a time", []),                       # no label: 1014
             ([1, 5, 9], [[4], [10 ** 6]]),                  # an id >= vocab: 1002
             ([1, 5, 9], [[4, 5], [6]]),
             {"text": "Hello", "labels": [" world", " there"]},
             ([1, 5, 9], [" text label"]),                   # ids with a text label
             ("text", [[4]])]                                # text with an id label
    out = client.classify_batch(items)
    assert isinstance(out[1], bitnetd.EmptyError) and out[1].code == 1014
    assert isinstance(out[2], bitnetd.TokenError) and out[2].code == 1002
    assert isinstance(out[5], bitnetd.InvalidError) and isinstance(out[6], bitnetd.InvalidError)
    for k in (0, 3, 4):
        item = items[k]
        text, labels = item if isinstance(item, tuple) else (item["text"], item["labels"])
        alone = client.classify(text, labels)
        assert [(s.tokens, s.logprobs, s.logprob, s.prob) for s in out[k].labels] == \
            [(s.tokens, s.logprobs, s.logprob, s.prob) for s in alone.labels]
    with pytest.raises(bitnetd.EmptyError):
        client.classify([1, 2], [[3], []])


def test_async_classify_equals_the_sync_one(daemon, client):
    import asyncio

    async def main():
        async with bitnetd.AsyncClient(daemon, timeout=scaled(60, BITNETD)) as ac:
            return await asyncio.gather(ac.classify("A cat", [" sat", " ran"]),
                                        ac.classify_batch([([1, 2], [[3], [4, 5]])]))

    one, batch = asyncio.run(main())
    assert [s.logprob for s in one.labels] == \
        [s.logprob for s in client.classify("A cat", [" sat", " ran"]).labels]
    assert [s.logprob for s in batch[0].labels] == \
        [s.logprob for s in client.classify([1, 2], [[3], [4, 5]]).labels]


def test_loopback_has_no_classify(loopback):
    with bitnetd.Client(loopback, timeout=scaled(30, BITNETD)) as c:
        with pytest.raises(bitnetd.UnsupportedError):
            c.classify([1, 2], [[3]])


# --- pipelines: transformers' shapes, the numbers of the calls underneath

def test_text_generation_pipeline(client):
    gen = bitnetd.pipeline("text-generation", client=client, max_new_tokens=6, ignore_eos=True)
    out = gen.predict("Once upon a time")
    g = client.generate("Once upon a time", max_tokens=6, ignore_eos=True)
    assert out == [{"generated_text": "Once upon a time" + g.text}]
    assert gen("Once upon a time", return_full_text=False) == [{"generated_text": g.text}]
    batch = gen.predict_batch(["Once upon a time", 42, "Hello"], max_new_tokens=4)
    assert isinstance(batch[1], bitnetd.InvalidError)
    assert batch[2] == [{"generated_text": "Hello" +
                         client.generate("Hello", max_tokens=4, ignore_eos=True).text}]
    sampled = gen.predict("Hi", do_sample=True, temperature=0.7, seed=5, num_return_sequences=2)
    want = [client.generate("Hi", max_tokens=6, ignore_eos=True, temperature=0.7, top_k=50,
                            seed=5 + k).text for k in range(2)]
    assert sampled == [{"generated_text": "Hi" + t} for t in want]
    chat = [{"role": "user", "content": "Hi"}]
    reply = client.chat(chat, max_tokens=6, chat_template=4, ignore_eos=True).text
    assert gen(chat, chat_template=4) == \
        [{"generated_text": chat + [{"role": "assistant", "content": reply}]}]
    with pytest.raises(ValueError):  # a model this client's session is not bound to
        bitnetd.pipeline("text-generation", client=client, model="gpt2")
    with pytest.raises(TypeError):
        bitnetd.pipeline("text-generation", client=client, device="cuda")


def test_zero_shot_pipeline(client):
    zs = bitnetd.pipeline("zero-shot-classification", client=client)
    seq, labels = "The match went to extra time.", ["sports", "politics", "cooking"]
    out = zs.predict(seq, labels)
    c = client.classify(seq + "\nThis example is", [" sports.", " politics.", " cooking."])
    want = sorted(zip(c.probs, labels), key=lambda p: -p[0])
    assert out == {"sequence": seq, "labels": [x for _, x in want], "scores": [p for p, _ in want]}
    assert abs(sum(out["scores"]) - 1) < 1e-12
    # A template's white space before "{}" goes to the labels; comma-separated labels.
    out = zs(seq, "sports, cooking", hypothesis_template="Topic:  {}!")
    c = client.classify(seq + "\nTopic:", ["  sports!", "  cooking!"])
    assert sorted(out["scores"], reverse=True) == out["scores"] == sorted(c.probs, reverse=True)
    multi = zs.predict(seq, labels[:2], multi_label=True)
    for label, score in zip(multi["labels"], multi["scores"]):
        q = client.classify(seq + "\nQuestion: This example is %s. Yes or no?\nAnswer:" % label,
                            [" Yes", " No"])
        assert score == q.labels[0].prob
    batch = zs.predict_batch([seq, "Parliament voted today."], candidate_labels=labels)
    assert batch[0] == zs.predict(seq, labels) and batch[1]["sequence"] == "Parliament voted today."


def test_sentiment_pipeline(client):
    sa = bitnetd.pipeline("sentiment-analysis", client=client)
    text = "I loved every minute of it."
    out = sa.predict(text)
    c = client.classify(text + "\nQuestion: Is the sentiment of this text positive or negative?"
                        "\nAnswer:", [" positive", " negative"])
    names = ["POSITIVE", "NEGATIVE"]
    assert out == [{"label": names[c.best], "score": c.labels[c.best].prob}]
    both = sa.predict(text, top_k=None)
    assert sorted(d["label"] for d in both) == ["NEGATIVE", "POSITIVE"]
    assert both[0]["score"] >= both[1]["score"]
    assert abs(both[0]["score"] + both[1]["score"] - 1) < 1e-12
    batch = sa.predict_batch([text, None, "Dreadful."])
    assert batch[0] == out[0] and isinstance(batch[2], dict)
    assert isinstance(batch[1], bitnetd.InvalidError)
    assert sa([text, "Dreadful."]) == [batch[0], batch[2]]


def test_connect_error_names_the_socket_and_the_way_out(tmp_path):
    missing = str(tmp_path / "absent.sock")
    with pytest.raises(FileNotFoundError) as e:
        bitnetd.Client(missing)
    assert missing in str(e.value) and "BITNETD_SOCKET" in str(e.value)
    assert "no such socket" in str(e.value)
    dead = str(tmp_path / "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(dead)  # a socket file nothing listens on
    s.close()
    with pytest.raises(ConnectionRefusedError) as e:
        bitnetd.Client(dead)
    assert dead in str(e.value) and "nothing accepts" in str(e.value)
