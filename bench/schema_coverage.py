#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""schema_coverage — JSON Schema coverage and compliance on the public corpus (issue 58).

Runs a sample of JSONSchemaBench (github:guidance-ai/jsonschemabench, its data/<dataset>/*.json)
through bitnet-gateway's response_format json_schema, one request per schema, and checks every
answer with two validators that share nothing with daemon/grammar/: python3-jsonschema (Debian's;
numbers read exactly, as decimals) and ajv with ajv-formats (npm, bench/schema_coverage/, installed
by `npm ci` there). Prints key=value lines per dataset: schemas sampled, accepted (the daemon
compiled it: coverage), answers whole (ended, not cut by max_tokens), valid under each validator
(compliance: valid / whole), and refusals by keyword. Not part of `make check`: a benchmark, run by
hand. Each schema's text goes into the request as it is in the corpus (numbers and all).

    bench/schema_coverage.py --bench /path/to/jsonschemabench [--per-dataset N] [--seed S]
        [--max-tokens N] [--start [--model FILE] [--jobs N]] [--gateway http://127.0.0.1:8080]
        [--out results.jsonl]

--bench is the corpus: a checkout, or a bare git directory (read with git show). --start runs
its own bitnetd and bitnet-gateway ($BITNETD, $BITNET_GATEWAY, else build/) on --model (default
build/models/tiny-llama3.gguf if there, else build/models/tiny.gguf: random weights, fine for
compliance and coverage); otherwise --gateway names a running one. --jobs N runs N such pairs
and spreads the sample over them: each request still runs alone on its daemon with its own seed,
so the results are those of --jobs 1 (a seeded answer does not depend on which daemon gave it),
only sooner on a machine with cores to spare.
"""
import argparse
import collections
import decimal
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATASETS = ["Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "Github_hard",
            "Github_ultra", "Kubernetes", "Snowplow", "WashingtonPost", "JsonSchemaStore"]


# ---- the corpus ------------------------------------------------------------------------------

class Corpus:
    """data/<dataset>/*.json from a checkout or a bare git directory."""

    def __init__(self, path):
        self.path = path
        self.git = not os.path.isdir(os.path.join(path, "data"))

    def names(self, dataset):
        if not self.git:
            d = os.path.join(self.path, "data", dataset)
            return sorted(f for f in os.listdir(d) if f.endswith(".json")) if os.path.isdir(d) else []
        out = subprocess.run(["git", "--git-dir", self.path, "ls-tree", "--name-only", "HEAD",
                              "data/%s/" % dataset], capture_output=True, text=True, check=True)
        return sorted(os.path.basename(n) for n in out.stdout.split() if n.endswith(".json"))

    def text(self, dataset, name):
        """The schema's bytes, or None when the snapshot lacks them (its largest files)."""
        if not self.git:
            with open(os.path.join(self.path, "data", dataset, name), "rb") as f:
                return f.read()
        r = subprocess.run(["git", "--git-dir", self.path, "show", "HEAD:data/%s/%s" % (dataset, name)],
                           capture_output=True)
        return r.stdout if r.returncode == 0 else None


# ---- a daemon and a gateway of our own ----------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Servers:
    def __init__(self, model):
        self.dir = tempfile.mkdtemp(prefix="bn-coverage-")
        sock = os.path.join(self.dir, "bitnetd.sock")
        bitnetd = os.environ.get("BITNETD", os.path.join(ROOT, "build", "bitnetd"))
        gateway = os.environ.get("BITNET_GATEWAY", os.path.join(ROOT, "build", "bitnet-gateway"))
        self.port = free_port()
        log = open(os.path.join(self.dir, "bitnetd.log"), "w")
        self.daemon = subprocess.Popen([bitnetd, "--model", model, "--socket", sock,
                                        "--cache-dir", "none", "--log-level", "warn"],
                                       stdout=log, stderr=log)
        for _ in range(600):
            if os.path.exists(sock):
                break
            if self.daemon.poll() is not None:
                sys.exit("bitnetd exited %d (log: %s)" % (self.daemon.returncode, log.name))
            time.sleep(0.1)
        glog = open(os.path.join(self.dir, "gateway.log"), "w")
        self.gateway = subprocess.Popen([gateway, "--socket", sock, "--listen",
                                         "127.0.0.1:%d" % self.port, "--log-level", "warn"],
                                        stdout=glog, stderr=glog)
        self.url = "http://127.0.0.1:%d" % self.port
        for _ in range(300):
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        sys.exit("bitnet-gateway did not answer /health")

    def stop(self):
        for p in (self.gateway, self.daemon):
            p.send_signal(signal.SIGTERM)
        for p in (self.gateway, self.daemon):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


# ---- one schema --------------------------------------------------------------------------------

KEYWORD = [re.compile(r'"([^"]+)" is not supported'), re.compile(r'keyword "([^"]+)"'),
           re.compile(r'"([^"]+)" (?:is|are) refused'), re.compile(r'"([^"]+)"')]


LIMITS = [("did not compile within", "limit: compile budget (CPU time)"),
          ("automaton states", "limit: automaton states"),
          ("rules (the limit)", "limit: rules"),
          ("bytes without whitespace", "limit: 256 KiB of schema text"),
          ("matches no output", "no output matches"),
          ("patternProperties in one object", "patternProperties: over 16 in one object")]


def refusal_key(message):
    """What a refusal names: a limit, the keyword where it says one (a format with its name;
    not's operand), else its first words."""
    for words, key in LIMITS:
        if words in message:
            return key
    m = re.search(r'"format": "([^"]+)"', message)
    if m:
        return "format=" + m.group(1)
    m = re.search(r'"not" \(or if/then/else\) of "([^"]+)"', message)
    if m:
        return "not of " + m.group(1)
    for rx in KEYWORD:
        m = rx.search(message)
        if m:
            return m.group(1)
    return " ".join(message.split()[:6])


def ask(url, schema_text, max_tokens, seed, timeout):
    """The gateway's answer: ("accepted", text, finish_reason) or ("refused", message) or
    ("error", message). The body is built as text so the schema goes in byte for byte."""
    body = (b'{"prompt":"Answer with a JSON document.","max_tokens":%d,"temperature":1,'
            b'"seed":%d,"response_format":{"type":"json_schema","json_schema":{"name":"s",'
            b'"schema":' % (max_tokens, seed)) + schema_text + b'}}}'
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            c = json.load(r)["choices"][0]
            return ("accepted", c["text"], c["finish_reason"])
    except urllib.error.HTTPError as e:
        try:
            err = json.load(e)["error"]
        except ValueError:
            return ("error", "HTTP %d" % e.code)
        if e.code == 400 and err.get("param") == "response_format":
            return ("refused", err.get("message", ""))
        return ("error", "HTTP %d: %s" % (e.code, err.get("message", "")[:120]))
    except (urllib.error.URLError, OSError) as e:
        return ("error", str(e)[:120])


def python_valid(schema_text, instance):
    """(True, "") or (False, why) under python3-jsonschema, numbers as exact decimals."""
    import jsonschema
    schema = json.loads(schema_text, parse_float=decimal.Decimal)
    try:
        doc = json.loads(instance, parse_float=decimal.Decimal)
    except ValueError as e:
        return False, "not JSON: " + str(e)[:150]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls(schema, format_checker=cls.FORMAT_CHECKER).validate(doc)
        return True, ""
    except jsonschema.ValidationError as e:
        return False, e.message[:200]
    except jsonschema.SchemaError as e:
        return None, "python3-jsonschema cannot read the schema: " + e.message[:150]
    except (RecursionError, jsonschema.exceptions.RefResolutionError) as e:
        return None, "python3-jsonschema cannot follow the schema: " + str(e)[:150]


def ajv_results(pairs):
    """ajv's verdicts for (schema_text, instance) pairs, in order."""
    if not pairs:
        return []
    node_modules = os.path.join(HERE, "schema_coverage", "node_modules")
    if not os.path.isdir(node_modules):
        sys.exit("ajv is not installed: cd bench/schema_coverage && npm ci")
    lines = "".join(json.dumps({"schema": s.decode("utf-8", "replace"), "instance": i}) + "\n"
                    for s, i in pairs)
    r = subprocess.run(["node", os.path.join(HERE, "schema_coverage", "validate.mjs")],
                       input=lines, capture_output=True, text=True, check=True)
    return [json.loads(x) for x in r.stdout.splitlines()]


# ---- the run ----------------------------------------------------------------------------------

def run_one(corpus, url, item, a):
    """One schema's result: asked, and its whole answer checked by python3-jsonschema."""
    ds, name, seed = item
    text = corpus.text(ds, name)
    res = {"dataset": ds, "schema": name}
    if text is None:
        res["outcome"] = "absent"  # the snapshot lacks this large file
        return res
    out = ask(url, text, a.max_tokens, seed, a.timeout)
    res["outcome"] = out[0]
    if out[0] == "accepted":
        res["text"], res["finish"] = out[1], out[2]
        if out[2] == "stop":
            res["python"], res["python_error"] = python_valid(text, out[1])
    else:
        res["message"] = out[1]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="JSONSchemaBench: a checkout or a bare git dir")
    ap.add_argument("--per-dataset", type=int, default=20, help="schemas sampled per dataset")
    ap.add_argument("--seed", type=int, default=58)
    ap.add_argument("--max-tokens", type=int, default=600)
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--gateway", help="a running bitnet-gateway's URL")
    ap.add_argument("--start", action="store_true", help="run a bitnetd and gateway of its own")
    ap.add_argument("--model", help="--start's model file")
    ap.add_argument("--jobs", type=int, default=1,
                    help="--start: daemon and gateway pairs run side by side (same results)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", help="every schema's result as JSON lines")
    a = ap.parse_args()
    if not a.start and not a.gateway:
        ap.error("give --gateway URL or --start")
    if a.jobs < 1 or (a.jobs > 1 and not a.start):
        ap.error("--jobs N (N >= 1) needs --start")
    corpus = Corpus(a.bench)
    # The sample first, in the datasets' order, so that it is the same whatever --jobs says.
    rng = random.Random(a.seed)
    work = []
    for ds in a.datasets.split(","):
        names = corpus.names(ds)
        for k, name in enumerate(sorted(rng.sample(names, min(a.per_dataset, len(names))))):
            work.append((ds, name, a.seed + k))
    servers, urls = [], [a.gateway]
    results = [None] * len(work)
    try:
        if a.start:
            model = a.model or next((m for m in (os.path.join(ROOT, "build/models/tiny-llama3.gguf"),
                                                 os.path.join(ROOT, "build/models/tiny.gguf"))
                                     if os.path.exists(m)), None)
            if not model:
                sys.exit("no model: give --model (make builds build/models/tiny.gguf)")
            for _ in range(a.jobs):
                servers.append(Servers(model))
            urls = [s.url for s in servers]
        partial = open(a.out + ".partial", "w") if a.out else None
        next_item = iter(range(len(work)))
        lock = threading.Lock()

        def worker(url):
            while True:
                with lock:
                    i = next(next_item, None)
                if i is None:
                    return
                results[i] = run_one(corpus, url, work[i], a)
                with lock:
                    print("%s/%s: %s" % (work[i][0], work[i][1], results[i]["outcome"]),
                          file=sys.stderr)
                    if partial:  # each result as it comes: a long run stopped keeps its part
                        partial.write(json.dumps(results[i]) + "\n")
                        partial.flush()

        threads = [threading.Thread(target=worker, args=(u,), daemon=True) for u in urls]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in servers:
            s.stop()
    whole = [(i, corpus.text(r["dataset"], r["schema"]), r["text"]) for i, r in enumerate(results)
             if r["outcome"] == "accepted" and r["finish"] == "stop"]
    write_results(a.out, results)  # kept should the second validator fail to run
    for (i, _, _), v in zip(whole, ajv_results([(s, t) for _, s, t in whole])):
        results[i]["ajv"] = v.get("ok") if v.get("compiled", True) else None
        results[i]["ajv_error"] = v.get("error", "")
    write_results(a.out, results)
    report(results, a)


def write_results(path, results):
    if path:
        with open(path, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")


def report(results, a):
    print("per_dataset=%d\nseed=%d\nmax_tokens=%d" % (a.per_dataset, a.seed, a.max_tokens))
    total = collections.Counter()
    keywords = collections.Counter()
    for ds in a.datasets.split(","):
        rs = [r for r in results if r["dataset"] == ds and r["outcome"] != "absent"]
        c = collections.Counter()
        for r in rs:
            c["sampled"] += 1
            c[r["outcome"]] += 1
            if r["outcome"] == "accepted":
                c["whole" if r["finish"] == "stop" else "cut"] += 1
                for v in ("python", "ajv"):
                    if r["finish"] == "stop":
                        c[v + ("_valid" if r.get(v) else "_invalid" if r.get(v) is False
                               else "_unreadable")] += 1
            elif r["outcome"] == "refused":
                keywords[refusal_key(r["message"])] += 1
        total.update(c)
        line(ds, c)
    line("all", total)
    for k, n in keywords.most_common(25):
        print("refused_by{keyword=%s}=%d" % (json.dumps(k), n))
    bad = [r for r in results if r.get("python") is False or r.get("ajv") is False]
    for r in bad:
        print("invalid: %s/%s python=%s ajv=%s %s %s" % (r["dataset"], r["schema"], r.get("python"),
              r.get("ajv"), r.get("python_error", "")[:120], r.get("ajv_error", "")[:120]))


def line(ds, c):
    n, acc, whole = c["sampled"], c["accepted"], c["whole"]
    print("%s_sampled=%d %s_accepted=%d %s_coverage=%.2f %s_refused=%d %s_errors=%d %s_whole=%d "
          "%s_cut=%d %s_python_valid=%d %s_ajv_valid=%d %s_ajv_unreadable=%d "
          "%s_compliance_python=%s %s_compliance_ajv=%s" % (
              ds, n, ds, acc, ds, acc / n if n else 0, ds, c["refused"], ds, c["error"], ds, whole,
              ds, c["cut"], ds, c["python_valid"], ds, c["ajv_valid"], ds, c["ajv_unreadable"],
              ds, "%.3f" % (c["python_valid"] / whole) if whole else "-",
              ds, "%.3f" % (c["ajv_valid"] / (whole - c["ajv_unreadable"]))
              if whole - c["ajv_unreadable"] > 0 else "-"))


if __name__ == "__main__":
    main()
