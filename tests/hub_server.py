"""A loopback stand-in for the Hugging Face Hub's upload API, as huggingface_hub's own client calls it.

Serves repository info (GET /api/datasets/<id>: 404 RepoNotFound for an unknown repository, else its
visibility), repository creation, the card's YAML check, preupload and commit. `repos` holds the
repositories it knows ({"me/x": {"private": False}}: an existing public one); `fail_commit` (an HTTP
status) makes the commit answer with it (nothing committed); `html_for` answers one request with an HTML page;
every request and every committed file is recorded.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml


@dataclass
class Hub:
    url: str = ""
    repos: dict[str, dict] = field(default_factory=dict)
    created: list[dict] = field(default_factory=list)
    commits: list[list[dict]] = field(default_factory=list)  # per commit: its operations
    seen: list[str] = field(default_factory=list)
    fail_commit: int = 0
    html_for: str = ""  # "info" or "commit": that request is answered 200 with an HTML page (a proxy's, a portal's)

    def files(self, repo: str) -> list[str]:
        return sorted(op["value"]["path"] for c in self.repos.get(repo, {}).get("commits", []) for op in c
                      if op["key"] == "file")


def serve(hub: Hub) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _reply(self, obj, code=200, headers=()):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def _html(self):
            body = b"<html><body>Please sign in to the network</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            hub.seen.append("GET " + self.path)
            path = self.path.split("?")[0]
            if path.startswith("/api/datasets/") and hub.html_for == "info":
                return self._html()
            if path.startswith("/api/datasets/"):
                repo = "/".join(path.split("/")[3:5])
                if repo not in hub.repos:
                    return self._reply({"error": "Repository not found"}, 404, [("X-Error-Code", "RepoNotFound")])
                return self._reply({"id": repo, "private": hub.repos[repo]["private"], "sha": "b" * 40,
                                    "siblings": [{"rfilename": f} for f in hub.files(repo)]})
            self._reply({"error": f"not served: {self.path}"}, 404)

        def do_POST(self):
            hub.seen.append("POST " + self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path == "/api/repos/create":
                req = json.loads(body)
                hub.created.append(req)
                repo = f"{req['organization']}/{req['name']}"
                hub.repos.setdefault(repo, {"private": req.get("visibility") != "public" if "visibility" in req
                                            else bool(req.get("private")), "commits": []})
                return self._reply({"url": f"{hub.url}/datasets/{repo}", "name": repo})
            if self.path == "/api/validate-yaml":
                head = json.loads(body)["content"].split("---\n")[1]
                ok = all("data_files" in c for c in (yaml.safe_load(head) or {}).get("configs") or [None])
                return self._reply({"errors": [] if ok else [{"message": "configs"}], "warnings": []},
                                   200 if ok else 400)
            parts = self.path.split("/")
            repo = "/".join(parts[3:5]) if len(parts) > 5 else ""
            if self.path.endswith("/preupload/main"):
                files = json.loads(body)["files"]
                return self._reply({"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                              for f in files]})
            if self.path.endswith("/commit/main"):
                if hub.html_for == "commit":
                    return self._html()
                if hub.fail_commit:
                    return self._reply({"error": "Your push was rejected: the repository is locked"},
                                       hub.fail_commit)
                ops = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
                hub.commits.append(ops)
                hub.repos.setdefault(repo, {"private": True, "commits": []}).setdefault("commits", []).append(ops)
                return self._reply({"commitUrl": f"{hub.url}/datasets/{repo}/commit/{'a' * 40}",
                                    "commitOid": "a" * 40, "pullRequestUrl": None})
            self._reply({"error": f"not served: {self.path}"}, 404)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    hub.url = f"http://127.0.0.1:{srv.server_address[1]}"
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
