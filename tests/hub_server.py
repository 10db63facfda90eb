#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""hub_server.py - a stand-in for the Hugging Face Hub, for tests without the internet.

It answers what bitnet-model pull asks the real Hub, the way the Hub answers it:
  GET /api/models/REPO/revision/REV?blobs=true   the listing: "sha" (the commit) and
        "siblings" with rfilename, size, blobId and, for LFS files, lfs {sha256, size}
        (GET /api/models/REPO: main's)
  GET /REPO/resolve/REV/FILE    302 to the "CDN" (another host: 127.0.0.2, its own port) for
        an LFS file, 307 to a relative /api/resolve-cache/... for one outside LFS
  errors as the Hub sends them: 401/404 with X-Error-Code RepoNotFound, 404 RevisionNotFound
        or EntryNotFound, 401/403 GatedRepo (X-Error-Message says more)
and, for the tests:
  GET /_stats?repo=REPO   what was served for REPO: body bytes, and each request (host,
        kind: listing, resolve or download; path, range start, bytes sent, whether it
        carried an Authorization header)

The repositories come from a JSON file (--config):
  {"token": "hf_...",                      the token gated and private repositories accept
   "repos": {"ORG/NAME": {"commit": "<40 hex>", "revisions": {"main": "<40 hex>"},
                          "gated": false, "private": false,
                          "files": [{"name": "x.gguf", "path": "/abs/file", "lfs": true,
                                     "sha256": "<listed instead of the real one>",
                                     "size": <listed instead of the real one>,
                                     "drop_at": <cut the connection at this byte>,
                                     "drops": <how many times; -1 always; default 1>,
                                     "rate": <bytes per second>, "no_range": false}]}}}

Prints "HUB_PORT CDN_PORT CDN_HOST" on one line once both listen, then serves until killed.
"""
import argparse
import hashlib
import http.server
import json
import socket
import sys
import threading
import time
import urllib.parse

CHUNK = 64 * 1024


class Hub:
    """The repositories, the files' hashes and what was served, shared by both servers."""

    def __init__(self, config):
        self.token = config.get("token", "")
        self.repos = config["repos"]
        self.lock = threading.Lock()
        self.stats = {}
        self.drops_left = {}
        self.by_hash = {}
        for repo, r in self.repos.items():
            r.setdefault("revisions", {"main": r["commit"]})
            for f in r["files"]:
                with open(f["path"], "rb") as fh:
                    data = fh.read()
                f["real_size"] = len(data)
                f["real_sha256"] = hashlib.sha256(data).hexdigest()
                f["git_sha1"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                f["blob"] = f["real_sha256"] if f.get("lfs", True) else f["git_sha1"]
                self.by_hash[(repo, f["blob"])] = f
                self.drops_left[(repo, f["name"])] = f.get("drops", 1)

    def record(self, repo, entry):
        with self.lock:
            s = self.stats.setdefault(repo, {"bytes": 0, "requests": []})
            s["requests"].append(entry)

    def add_bytes(self, repo, entry, n):
        with self.lock:
            self.stats[repo]["bytes"] += n
            entry["bytes"] += n

    def take_drop(self, repo, f):
        """Whether this response is to be cut at f's drop_at (and one drop fewer is left)."""
        with self.lock:
            left = self.drops_left[(repo, f["name"])]
            if left == 0:
                return False
            if left > 0:
                self.drops_left[(repo, f["name"])] = left - 1
            return True

    def commit_of(self, repo, rev):
        """The commit rev names: a revision's, or a commit one of them names."""
        r = self.repos[repo]
        known = set(r["revisions"].values()) | {r["commit"]}
        return rev if rev in known else r["revisions"].get(rev)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server
    hub = None
    role = "hub"
    cdn_base = ""

    def log_message(self, format, *args):  # quiet: the test's output is the test's
        pass

    # ------------------------------------------------------------------ answers --
    def answer(self, status, body=b"", headers=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def hub_error(self, status, code, message):
        self.answer(status, {"error": message},
                    [("X-Error-Code", code), ("X-Error-Message", message),
                     ("Content-Type", "application/json")])

    def authorized(self):
        return self.headers.get("Authorization") == "Bearer " + self.hub.token

    def repo_access(self, repo, download):
        """None when the request may go on, else after the Hub's refusal was sent."""
        r = self.hub.repos.get(repo)
        if r is None or (r.get("private") and not self.authorized()):
            if self.headers.get("Authorization") and r is None:
                self.hub_error(404, "RepoNotFound", "Repository not found")
            else:
                self.hub_error(401, "RepoNotFound", "Repository not found")
            return False
        if download and r.get("gated") and not self.authorized():
            if self.headers.get("Authorization"):
                self.hub_error(403, "GatedRepo", "Access to model %s is restricted and you "
                               "are not in the authorized list." % repo)
            else:
                self.hub_error(401, "GatedRepo", "Access to model %s is restricted. You must "
                               "have access to it and be authenticated to access it." % repo)
            return False
        return True

    # ------------------------------------------------------------------- routes --
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        if self.role == "cdn":
            return self.cdn(path)
        if path == "/_stats":
            repo = urllib.parse.parse_qs(url.query).get("repo", [""])[0]
            with self.hub.lock:
                stats = self.hub.stats.get(repo, {"bytes": 0, "requests": []})
                return self.answer(200, json.loads(json.dumps(stats)))
        if path.startswith("/api/models/") and "/revision/" in path:
            repo, rev = path[len("/api/models/"):].split("/revision/", 1)
            return self.listing(repo, rev)
        if path.startswith("/api/models/"):  # the model's page: main's listing
            return self.listing(path[len("/api/models/"):], "main")
        if path.startswith("/api/resolve-cache/models/"):
            return self.resolve_cache(path[len("/api/resolve-cache/models/"):])
        if "/resolve/" in path:
            repo, rest = path[1:].split("/resolve/", 1)
            rev, _, name = rest.partition("/")
            return self.resolve(repo, rev, name)
        self.answer(404, b"no such route")

    def listing(self, repo, rev):
        if not self.repo_access(repo, download=False):
            return
        self.hub.record(repo, {"host": "hub", "kind": "listing", "path": self.path,
                               "auth": bool(self.headers.get("Authorization")), "bytes": 0,
                               "range_start": None})
        r = self.hub.repos[repo]
        commit = self.hub.commit_of(repo, rev)
        if commit is None:
            return self.hub_error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        siblings = []
        for f in r["files"]:
            size = f.get("size", f["real_size"])
            s = {"rfilename": f["name"], "size": size, "blobId": f["git_sha1"]}
            if f.get("lfs", True):
                s["lfs"] = {"sha256": f.get("sha256", f["real_sha256"]), "size": size,
                            "pointerSize": 134}
            siblings.append(s)
        self.answer(200, {"_id": "0" * 24, "id": repo, "modelId": repo, "sha": commit,
                          "private": bool(r.get("private")),
                          "gated": "manual" if r.get("gated") else False,
                          "siblings": siblings}, [("Content-Type", "application/json")])

    def find(self, repo, rev, name):
        commit = self.hub.commit_of(repo, rev)
        if commit is None:
            self.hub_error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
            return None, None
        for f in self.hub.repos[repo]["files"]:
            if f["name"] == name:
                return commit, f
        self.hub_error(404, "EntryNotFound", "%s does not exist on \"%s\"" % (name, rev))
        return None, None

    def resolve(self, repo, rev, name):
        if not self.repo_access(repo, download=True):
            return
        self.hub.record(repo, {"host": "hub", "kind": "resolve", "path": self.path, "auth":
                               bool(self.headers.get("Authorization")), "bytes": 0,
                               "range_start": None})
        commit, f = self.find(repo, rev, name)
        if f is None:
            return
        meta = [("X-Repo-Commit", commit), ("X-Linked-Size", str(f["real_size"])),
                ("ETag", '"%s"' % f["git_sha1"])]
        if f.get("lfs", True):
            location = "%s/cdn/%s/%s?expires=%d&signature=stand-in" % (
                self.cdn_base, repo, f["real_sha256"], int(time.time()) + 3600)
            return self.answer(302, b"", meta + [("X-Linked-Etag", '"%s"' % f["real_sha256"]),
                                                 ("Location", location)])
        location = "/api/resolve-cache/models/%s/%s/%s" % (repo, commit, urllib.parse.quote(name))
        self.answer(307, b"", meta + [("Location", location)])

    def resolve_cache(self, rest):
        for repo in self.hub.repos:
            if rest.startswith(repo + "/"):
                commit, _, name = rest[len(repo) + 1:].partition("/")
                if not self.repo_access(repo, download=True):
                    return
                commit, f = self.find(repo, commit, name)
                if f is not None:
                    self.serve(repo, f)
                return
        self.answer(404, b"no such repository")

    def cdn(self, path):
        """/cdn/REPO/SHA256: the repository is in the path so that each counts its own."""
        repo, _, blob = path[len("/cdn/"):].rpartition("/")
        f = self.hub.by_hash.get((repo, blob)) if path.startswith("/cdn/") else None
        if f is None:
            return self.answer(404, b"NoSuchKey")
        self.serve(repo, f)

    # -------------------------------------------------------------------- bytes --
    def range_start(self, f, size):
        """The first byte asked for, 0 without a Range (or when the file ignores ranges)."""
        value = self.headers.get("Range", "")
        if f.get("no_range") or not value.startswith("bytes="):
            return 0, False
        first = value[len("bytes="):].split("-", 1)[0]
        return int(first), True

    def serve(self, repo, f):
        with open(f["path"], "rb") as fh:
            data = fh.read()
        size = len(data)
        start, ranged = self.range_start(f, size)
        entry = {"host": self.role, "kind": "download", "path": self.path,
                 "range_start": start if ranged else None,
                 "auth": bool(self.headers.get("Authorization")), "bytes": 0}
        self.hub.record(repo, entry)
        if ranged and start >= size and size > 0:
            return self.answer(416, b"", [("Content-Range", "bytes */%d" % size)])
        self.send_response(206 if ranged else 200)
        if ranged:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
        self.send_header("Content-Length", str(size - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        end = size
        cut = start <= f.get("drop_at", -1) and self.hub.take_drop(repo, f)
        if cut:
            end = f["drop_at"]
        self.stream(repo, entry, data, start, end, f.get("rate"))
        if cut:
            # The connection dies mid-body: the client has the headers' Content-Length and
            # fewer bytes, as when a real server or a middlebox drops it.
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    def stream(self, repo, entry, data, start, end, rate):
        chunk = CHUNK if not rate else max(1024, min(CHUNK, int(rate) // 20))
        t0, sent = time.monotonic(), 0
        at = start
        while at < end:
            n = min(chunk, end - at)
            try:
                self.wfile.write(data[at:at + n])
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            self.hub.add_bytes(repo, entry, n)
            at += n
            sent += n
            if rate:
                ahead = sent / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(host, role, hub):
    handler = type("%sHandler" % role.capitalize(), (Handler,), {"hub": hub, "role": role})
    return Server((host, 0), handler)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    with open(args.config) as fh:
        hub = Hub(json.load(fh))
    hub_server = make_server("127.0.0.1", "hub", hub)
    # The CDN is another host: 127.0.0.2 (Linux routes all of 127/8 to lo), else "localhost",
    # another name for this one; either way not the Hub's origin, so no token may go there.
    try:
        cdn_server, cdn_host = make_server("127.0.0.2", "cdn", hub), "127.0.0.2"
    except OSError:
        cdn_server, cdn_host = make_server("127.0.0.1", "cdn", hub), "localhost"
    hub_server.RequestHandlerClass.cdn_base = "http://%s:%d" % (cdn_host, cdn_server.server_port)
    for s in (hub_server, cdn_server):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print(hub_server.server_port, cdn_server.server_port, cdn_host, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
