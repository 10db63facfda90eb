"""Several models in one daemon from Python (shm/PROTOCOL.md section 15): a session per model
by name, outputs equal to each model served alone, the models' list and the commands, and the
errors of an unknown name. Oracles: the same request on a daemon of that model alone, and the
C library (bitnet-cli models)."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_client import BITNETD, CLI, MODEL, ROOT, start, stop  # noqa: E402

import bitnetd  # noqa: E402

TOOL = os.environ.get("BITNET_MODEL_TOOL", os.path.join(ROOT, "build", "bitnet-model"))

pytestmark = pytest.mark.skipif(not (os.access(BITNETD, os.X_OK) and os.access(TOOL, os.X_OK)),
                                reason="build first: make all")


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    """A model of another shape and vocabulary than the default."""
    path = str(tmp_path_factory.mktemp("models") / "l3.gguf")
    subprocess.run([TOOL, "write", "--preset", "llama3-test", "--out", path], check=True,
                   stdout=subprocess.DEVNULL)
    return path


def generations(path, model=None):
    with bitnetd.Client(path, timeout=60, model=model) as c:
        greedy = c.generate([1, 2, 3, 4], max_tokens=10, ignore_eos=True)
        seeded = c.generate([5, 6, 7], max_tokens=10, ignore_eos=True, temperature=0.8, seed=7,
                            logprobs=2)
        return (c.model, greedy.ids, seeded.ids,
                [[(t.token, t.logprob) for t in pos] for pos in seeded.logprobs])


def test_two_models_equal_alone_and_listed(second):
    alone = {}
    for name, path in (("tiny", MODEL), ("l3", second)):
        proc, sock = start(["--backend", "cpu", "--threads", "1", "--model",
                            "%s=%s" % (name, path)])
        try:
            alone[name] = generations(sock)[1:]
        finally:
            stop(proc, sock)
    proc, sock = start(["--backend", "cpu", "--threads", "1", "--model", "tiny=" + MODEL,
                        "--model", "l3=" + second])
    try:
        got = generations(sock, "l3")
        assert got[0] == "l3" and got[1:] == alone["l3"]
        got = generations(sock)  # no name: the default
        assert got[0] == "tiny" and got[1:] == alone["tiny"]
        with bitnetd.Client(sock, timeout=60) as c:
            models = c.models()
            assert [(m.name, m.default) for m in models] == [("tiny", True), ("l3", False)]
            assert all(m.state == "loaded" and m.loads == 1 for m in models)
            assert models[1].vocab_size == 1024 and models[1].bytes > models[1].weight_bytes > 0
            cli = subprocess.run([CLI, "--socket", sock, "models"], check=True,
                                 stdout=subprocess.PIPE, universal_newlines=True).stdout
            assert [line.split()[:2] for line in cli.splitlines()[1:]] == \
                [["tiny", "loaded"], ["l3", "loaded"]]
            status = c.unload_model("l3")
            assert (status.name, status.state) == ("l3", "unloaded")
            assert c.load_model("l3").state == "loaded"
            assert [m.name for m in c.reload_models()] == ["tiny", "l3"]  # unchanged files
            with pytest.raises(bitnetd.ModelNotFoundError):
                c.load_model("nope")
        with pytest.raises(bitnetd.ModelNotFoundError):
            bitnetd.Client(sock, model="nope")
    finally:
        stop(proc, sock)


def test_pipeline_by_model_name(second, monkeypatch):
    proc, sock = start(["--backend", "cpu", "--threads", "1", "--model", "tiny=" + MODEL,
                        "--model", "l3=" + second])
    try:
        monkeypatch.setenv("BITNETD_SOCKET", sock)
        with bitnetd.Client(sock, timeout=60, model="l3") as c:
            want = "Hi" + c.generate("Hi", max_tokens=6, ignore_eos=True).text
            gen = bitnetd.pipeline("text-generation", model="l3", max_new_tokens=6,
                                   ignore_eos=True)
            try:
                assert gen.client.model == "l3"
                assert gen("Hi") == [{"generated_text": want}]
            finally:
                gen.close()
            same = bitnetd.pipeline("text-generation", client=c, model="l3")
            assert same.client is c
            with pytest.raises(ValueError):
                bitnetd.pipeline("text-generation", client=c, model="tiny")
        default = bitnetd.pipeline("text-generation")
        try:
            assert default.client.model == "tiny"
        finally:
            default.close()
        with pytest.raises(bitnetd.ModelNotFoundError):
            bitnetd.pipeline("text-generation", model="nope")
    finally:
        stop(proc, sock)
