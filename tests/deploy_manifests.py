#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make check-deploy: deploy/kubernetes/ parses, and says what docs/DEPLOY.md says it does.

Checks: every manifest is YAML with apiVersion/kind/metadata.name; the DaemonSet has the two
containers sharing an emptyDir at the socket's directory, both on the image the doc names; the
daemon's --socket is in that directory and the gateway's too; the GPU is requested through
nvidia.com/gpu; the gateway's port is 8080 named http, its readiness probe GET /health on it;
the Service targets that port and selects the pod's labels; the doc names each of these values.
Exit 0 pass, 1 fail, 77 skip (no PyYAML).
"""
import os
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "deploy", "kubernetes")
DOC = open(os.path.join(ROOT, "docs", "DEPLOY.md"), encoding="utf-8").read()
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def arg(container, name):
    for a in container.get("args", []):
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def load():
    objs = []
    for f in sorted(os.listdir(DIR)):
        if not f.endswith(".yaml"):
            continue
        with open(os.path.join(DIR, f), encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                check(isinstance(doc, dict) and doc.get("apiVersion") and doc.get("kind")
                      and doc.get("metadata", {}).get("name"), f"{f}: a manifest without apiVersion, kind or name")
                objs.append(doc)
    return {(o["kind"], o["metadata"]["name"]): o for o in objs if isinstance(o, dict)}


def mounts(container):
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


def main():
    objs = load()
    ds = objs.get(("DaemonSet", "bitnetd"))
    svc = objs.get(("Service", "bitnet-gateway"))
    check(ds is not None, "no DaemonSet bitnetd")
    check(svc is not None, "no Service bitnet-gateway")
    if not ds or not svc:
        return
    pod = ds["spec"]["template"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    check(set(containers) == {"bitnetd", "bitnet-gateway"}, f"containers {sorted(containers)}")
    daemon, gateway = containers.get("bitnetd", {}), containers.get("bitnet-gateway", {})
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    # the shared socket
    shared = set(mounts(daemon)) & set(mounts(gateway))
    socket_vols = [n for n in shared if "emptyDir" in volumes.get(n, {})]
    check(len(socket_vols) == 1, "no emptyDir mounted in both containers")
    if socket_vols:
        where = mounts(daemon)[socket_vols[0]]
        check(mounts(gateway)[socket_vols[0]] == where, "the socket volume is mounted at two paths")
        for c, name in ((daemon, "bitnetd"), (gateway, "bitnet-gateway")):
            sock = arg(c, "socket") or ""
            check(os.path.dirname(sock) == where, f"{name}'s --socket {sock!r} is not in {where}")
        check(f"`{where}`" in DOC, f"DEPLOY.md does not name the socket directory {where}")
    # images
    for name, c in containers.items():
        check(f"`{c.get('image')}`" in DOC, f"DEPLOY.md does not name {name}'s image {c.get('image')}")
    check(daemon.get("image") == gateway.get("image"), "the containers use different images")
    # the GPU
    limits = daemon.get("resources", {}).get("limits", {})
    check("nvidia.com/gpu" in limits, "bitnetd requests no nvidia.com/gpu")
    check("`nvidia.com/gpu`" in DOC, "DEPLOY.md does not name the GPU resource")
    # the gateway's port and probes
    ports = {p.get("name"): p for p in gateway.get("ports", [])}
    http = ports.get("http", {})
    check(http.get("containerPort") == 8080, f"the gateway's http port is {http.get('containerPort')}")
    listen = arg(gateway, "listen") or ""
    check(listen.endswith(":8080"), f"the gateway listens on {listen!r}, not on its port 8080")
    probe = gateway.get("readinessProbe", {}).get("httpGet", {})
    check(probe.get("path") == "/health" and probe.get("port") == "http",
          f"the gateway's readiness probe is {probe}")
    check("**8080**" in DOC and "`GET /health`" in DOC, "DEPLOY.md does not name the port and the probe")
    check(daemon.get("startupProbe") is not None, "bitnetd has no startup probe")
    # the Service
    sel = svc["spec"].get("selector", {})
    labels = pod["metadata"].get("labels", {})
    check(sel and all(labels.get(k) == v for k, v in sel.items()), "the Service selects other pods")
    targets = [p.get("targetPort") for p in svc["spec"].get("ports", [])]
    check(targets == ["http"], f"the Service targets {targets}")


main()
for f in failures:
    print("FAIL:", f)
print("deploy manifests:", "PASS" if not failures else f"{len(failures)} problem(s)")
sys.exit(1 if failures else 0)
