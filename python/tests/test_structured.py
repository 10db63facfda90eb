"""Structured output from Python (shm/PROTOCOL.md section 6.13) against a real daemon on the
built-in tiny model: outputs checked by Python's own json and re modules and by jsonschema,
the same constrained request through the C library (bitnet-cli), refusals with the daemon's
reasons, the session's grammar cache, and the pipeline.

Run from the repository root after `make all`: python3 -m pytest python/tests
"""

import json
import re

import pytest

from test_client import BITNETD, CLI, MODEL, bitnetd, cli, scaled, start, stop  # noqa: F401
from test_client import pytestmark  # noqa: F401

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "n": {"type": "integer", "minimum": 0, "maximum": 9},
                         "kind": {"enum": ["a", "b"]}},
          "required": ["name", "n", "kind"], "additionalProperties": False}


@pytest.fixture(scope="module")
def daemon():
    # --max-grammars 6: the Client's cache of 16 must make room on its own.
    proc, path = start(["--backend", "cpu", "--model", MODEL, "--threads", "1", "--slots", "8",
                        "--max-grammars", "6"])
    yield path
    stop(proc, path)


@pytest.fixture
def client(daemon):
    with bitnetd.Client(daemon, timeout=scaled(60, BITNETD)) as c:
        yield c


def validate(doc):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, SCHEMA)


def test_feature_is_listed(client):
    assert "grammar" in client.info()["features"]


def test_schema_outputs_validate(client):
    res = client.generate_batch(["Name", "The answer", "x", "{"] * 3, max_tokens=80,
                                json_schema=SCHEMA, temperature=1.0, seed=7)
    for g in res:
        assert g.status == "eos", g
        validate(json.loads(g.text))


def test_json_mode_and_regex_and_gbnf(client):
    g = client.generate("Data:", max_tokens=40, json=True)
    assert g.status == "eos" and isinstance(json.loads(g.text), dict)
    g = client.generate("Call", max_tokens=24, regex=r"\d{3}-\d{4}", temperature=1.0, seed=3)
    assert g.status == "eos" and re.fullmatch(r"\d{3}-\d{4}", g.text)
    g = client.generate("Answer", max_tokens=8, grammar='root ::= ("yes" | "no") "."')
    assert g.text in ("yes.", "no.")


def test_the_same_output_as_the_c_library(client, daemon, tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    g = client.generate("Name", max_tokens=60, json_schema=SCHEMA)
    out = cli(daemon, "generate", "--prompt", "Name", "--max-tokens", "60", "--json-schema",
              str(path), "--print-ids")
    assert out.splitlines()[-1].split() == [str(t) for t in g.ids]


def test_stream_and_logprobs_follow_the_grammar(client):
    pieces = list(client.stream("Go", max_tokens=40, regex="(ab|cd)+!"))
    text = "".join(p.text for p in pieces)
    assert re.fullmatch("(ab|cd)+!", text)
    g = client.generate("Go", max_tokens=40, regex="(ab|cd)+!", logprobs=3)
    assert g.text == text
    for chosen, *alts in g.logprobs:
        assert chosen.logprob <= 0 and alts[0].logprob >= chosen.logprob - 1e-6
        # fewer tokens may be allowed than asked for: those records say none
        for a in alts:
            assert a.token != 0xFFFFFFFF or a.logprob == float("-inf")


def test_refusals_carry_the_daemons_reason(client):
    with pytest.raises(bitnetd.GrammarError, match="unevaluatedItems"):
        client.generate("x", json_schema={"type": "array", "unevaluatedItems": False})
    with pytest.raises(bitnetd.GrammarLimitError, match="limit"):
        client.grammar(regex="a{200000}")
    with pytest.raises(bitnetd.GrammarError, match="backreferences"):
        client.grammar(regex=r"(a)\1")
    with pytest.raises(ValueError):
        client.generate("x", json=True, regex="a")
    with pytest.raises(bitnetd.InvalidError):
        client.generate("x", regex="a", ignore_eos=True)


def test_grammar_objects_and_the_cache(client):
    g = client.grammar(regex="[xy]{3}")
    assert client.generate("a", max_tokens=8, grammar=g).text in \
        {a + b + c for a in "xy" for b in "xy" for c in "xy"}
    g.close()
    with pytest.raises(bitnetd.InvalidError):
        client.generate("a", grammar=g)
    # More grammars by keyword than the daemon lets a session hold (--max-grammars 6): the
    # cache frees what no request uses and tries again.
    for k in range(1, 12):
        assert client.generate("a", max_tokens=12, regex="z{%d}" % k).text == "z" * k


def test_pipeline_takes_a_schema(client):
    gen = bitnetd.pipeline("text-generation", client=client, max_new_tokens=60)
    out = gen.predict("Name", json_schema=SCHEMA, return_full_text=False)
    validate(json.loads(out[0]["generated_text"]))


def test_loopback_has_no_grammars():
    proc, path = start(["--backend", "loopback"])
    try:
        with bitnetd.Client(path, timeout=scaled(10, BITNETD)) as c:
            with pytest.raises(bitnetd.UnsupportedError):
                c.generate([1, 2], json=True)
    finally:
        stop(proc, path)
