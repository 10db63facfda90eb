"""The bitnetd package against a real daemon (the cpu backend on the built-in tiny model, and
a loopback daemon), with oracles from outside the package: the C library (through bitnet-cli),
the same request run alone, and Python's own UTF-8 decoder.

Run from the repository root after `make all`: python3 -m pytest python/tests
(BITNETD, BITNET_CLI and BITNET_DEFAULT_MODEL override the build's paths).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import bitnetd  # noqa: E402

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
    for _ in range(500):
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


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0


@pytest.fixture(scope="module")
def daemon():
    proc, path = start(["--backend", "cpu", "--model", MODEL, "--threads", "1", "--slots", "8"])
    yield path
    stop(proc)


@pytest.fixture(scope="module")
def loopback():
    proc, path = start(["--backend", "loopback"])
    yield path
    stop(proc)


@pytest.fixture
def client(daemon):
    with bitnetd.Client(daemon, timeout=60) as c:
        yield c


def cli(path, *args, data=None):
    out = subprocess.run([CLI, "--socket", path] + list(args), input=data, timeout=60,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    return out.stdout.decode()


def test_info(client):
    i = client.info()
    assert i["backend"] == "cpu" and i["slots"] == 8
    assert {"text", "score", "logprobs"} <= set(i["features"])


def test_generate_ids_equal_the_c_library(client, daemon):
    g = client.generate([1, 5, 9, 13], max_tokens=12, ignore_eos=True)
    want = [int(x) for x in cli(daemon, "generate", "--ids", "1 5 9 13", "--max-tokens", "12",
                                "--ignore-eos").split()]
    assert g.ids == want and g.status == "length"
    # The text is the ids' bytes decoded with U+FFFD (an independent decoder).
    assert g.text == client.detokenize_bytes(g.ids).decode("utf-8", "replace")


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
    with bitnetd.Client(loopback, timeout=30) as c:
        assert "text" not in c.info()["features"]
        with pytest.raises(bitnetd.UnsupportedError):
            c.generate("text", max_tokens=1)
        with pytest.raises(bitnetd.UnsupportedError):
            c.score([1, 2, 3])
        assert c.generate([1, 2, 3], max_tokens=4).ids == [17499, 28047, 18038, 25851]


def test_async_client_equals_the_sync_one(daemon, client):
    import asyncio

    async def main():
        async with bitnetd.AsyncClient(daemon, timeout=60) as ac:
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
