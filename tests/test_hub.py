"""The hub downloader, exercised against a local stand-in for the Hugging Face hub.

No test reaches the internet: a loopback server answers the two calls the
client makes (revision info, then the file at the resolved commit).
"""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.data import hub
from harness.data.synth import generate

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    files: dict[str, bytes] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send_file(self, head: bool):
            data = files.get(self.path.rsplit("/", 1)[-1])
            if data is None:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("ETag", '"%s"' % hashlib.sha256(data).hexdigest())
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def do_HEAD(self):
            seen.append("HEAD " + self.path)
            self._send_file(True)

        def do_GET(self):
            seen.append("GET " + self.path)
            if self.path.startswith("/api/datasets/"):
                body = json.dumps({"id": hub.REPO_ID, "sha": COMMIT}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self._send_file(False)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", files, seen
    srv.shutdown()


def test_download_pins_the_commit_and_records_the_hash(fake_hub, tmp_path):
    url, files, seen = fake_hub
    payload = json.dumps(generate(0, "tiny")).encode()
    files["longmemeval_oracle.json"] = payload
    info = hub.download("oracle", tmp_path / "out", revision="v1", endpoint=url)
    assert info["commit"] == COMMIT and info["revision"] == "v1"
    assert info["sha256"] == hashlib.sha256(payload).hexdigest()
    assert (tmp_path / "out" / "longmemeval_oracle.json").read_bytes() == payload
    assert any("/revision/v1" in s for s in seen)
    assert any(f"/resolve/{COMMIT}/" in s for s in seen), "the file is fetched at the resolved commit"


def test_a_file_that_differs_from_the_published_hash_is_refused_and_removed(fake_hub, tmp_path):
    url, files, _ = fake_hub
    files["longmemeval_s_cleaned.json"] = b"[]"
    with pytest.raises(hub.ChecksumError, match="differs from the published"):
        hub.download("s", tmp_path / "out", endpoint=url)
    assert not (tmp_path / "out" / "longmemeval_s_cleaned.json").exists()
