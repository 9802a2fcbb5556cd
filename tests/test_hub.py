"""The downloaders, exercised against local stand-ins for the Hugging Face hub and GitHub's raw files.

No test reaches the internet: a loopback server answers the calls the hub client makes
(revision info, then each file at the resolved commit), and another serves raw files by path.
The files served are made here (a synthetic evaluate_qa.py-shaped file, small fake weights),
with the pins patched to their hashes; never the real artefacts.
"""

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.data import hub
from harness.data.synth import generate
from harness.memory import encoder as E
from judge import prompts as P

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants as hc

    # the client reads HF_HOME and HF_HUB_OFFLINE once, at import (an encoder loaded earlier in the session sets
    # HF_HUB_OFFLINE=1 for its local directory): point its cache at this test's folder and let it go online
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", False)
    files: dict[str, bytes] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send_file(self, head: bool):
            m = re.search(r"/resolve/[^/]+/(.+)$", self.path)
            data = files.get(m.group(1)) if m else None
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
            if self.path.startswith(("/api/datasets/", "/api/models/")):
                # a full commit id resolves to itself, anything else (a branch) to COMMIT
                rev = self.path.split("?")[0].rsplit("/revision/", 1)[-1]
                sha = rev if re.fullmatch(r"[0-9a-f]{40}", rev) else COMMIT
                body = json.dumps({"id": "x", "sha": sha}).encode()
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


# ------------------------------------------------------------------------------ bge weights

FAKE_MODEL = {"model.safetensors": b"fake weights " * 1000, "config.json": b'{"hidden_size": 384}',
              "tokenizer.json": b"{}", "1_Pooling/config.json": b'{"pooling_mode_cls_token": true}'}


@pytest.fixture
def fake_pins(monkeypatch):
    """The bge pins replaced by the hashes of FAKE_MODEL (the real files are never served here)."""
    pins = {rel: hashlib.sha256(data).hexdigest() for rel, data in FAKE_MODEL.items()}
    monkeypatch.setattr(E, "BGE_FILES", pins)
    monkeypatch.setitem(E.PINNED_FILES, "bge", pins)
    return pins


def test_bge_download_takes_the_pinned_revision_and_records_every_hash(fake_hub, fake_pins, tmp_path):
    url, files, seen = fake_hub
    files.update(FAKE_MODEL)
    info = hub.download_bge(tmp_path / "models", endpoint=url)
    target = tmp_path / "models" / "bge-small-en-v1.5"
    assert info["path"] == str(target) and info["commit"] == E.BGE_REVISION and info["pinned"] is True
    for rel, data in FAKE_MODEL.items():
        assert (target / rel).read_bytes() == data
    assert any(s.startswith(f"GET /api/models/{E.BGE_REPO}/revision/{E.BGE_REVISION}") for s in seen)
    fetched = {s.split(f"/resolve/{E.BGE_REVISION}/", 1)[1] for s in seen if "/resolve/" in s}
    assert fetched == set(FAKE_MODEL), "only the pinned files, each at the pinned commit"
    rec = json.loads((target / "download.json").read_text())["files"]
    assert set(rec) == set(FAKE_MODEL)
    for rel, e in rec.items():
        assert e["commit"] == E.BGE_REVISION and e["revision"] == E.BGE_REVISION
        assert e["sha256"] == e["pinned_sha256"] == fake_pins[rel] and e["bytes"] == len(FAKE_MODEL[rel])
        assert e["url"] == f"{url}/{E.BGE_REPO}/resolve/{E.BGE_REVISION}/{rel}"
    assert not any(p.name.endswith(".partial") for p in (tmp_path / "models").iterdir())
    st = E.weights_status("bge", str(target))
    assert st["present"] is True and st["matches_pin"] is True
    assert st["pinned_sha256"] == fake_pins["model.safetensors"] and st["weights_sha256"] == E.weights_hash(target)


def test_bge_file_that_differs_from_its_pin_is_deleted_and_reported(fake_hub, fake_pins, tmp_path):
    url, files, _ = fake_hub
    files.update(FAKE_MODEL)
    files["model.safetensors"] = b"tampered weights"
    with pytest.raises(hub.ChecksumError, match=r"model\.safetensors: sha256 [0-9a-f]{64} differs from the pinned"):
        hub.download_bge(tmp_path / "models", endpoint=url)
    # nothing was installed, no partial copy is left, and the hub cache forgot the refused file
    assert not (tmp_path / "models" / "bge-small-en-v1.5").exists()
    assert list((tmp_path / "models").iterdir()) == []
    cached = [p for p in (tmp_path / "hf").rglob("model.safetensors")]
    assert cached == []


def test_bge_at_another_revision_is_recorded_as_trust_on_first_download(fake_hub, fake_pins, tmp_path):
    url, files, _ = fake_hub
    files.update(FAKE_MODEL)
    files["model.safetensors"] = b"other weights"
    info = hub.download_bge(tmp_path / "models", revision="main", endpoint=url)
    assert info["commit"] == COMMIT and info["pinned"] is False
    rec = json.loads((Path(info["path"]) / "download.json").read_text())["files"]
    assert rec["model.safetensors"]["pinned_sha256"] is None and rec["model.safetensors"]["revision"] == "main"
    assert E.weights_status("bge", info["path"])["matches_pin"] is False  # not the pinned weights


def test_split_download_writes_download_json(fake_hub, tmp_path):
    url, files, _ = fake_hub
    files["longmemeval_oracle.json"] = b"[]"
    hub.download("oracle", tmp_path / "out", revision="v1", endpoint=url)
    e = json.loads((tmp_path / "out" / "download.json").read_text())["files"]["longmemeval_oracle.json"]
    assert e["commit"] == COMMIT and e["revision"] == "v1" and e["sha256"] == hashlib.sha256(b"[]").hexdigest()
    assert e["pinned_sha256"] is None


# ------------------------------------------------------------------------------ the official prompt file

@pytest.fixture
def fake_raw(tmp_path):
    """A stand-in for raw.githubusercontent.com: /<owner>/<repo>/<commit>/<path> -> bytes."""
    files: dict[str, bytes] = {}
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append(self.path)
            data = files.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", files, seen
    srv.shutdown()


def synthetic_official(tmp_path) -> bytes:
    from tests.test_judge import write_synthetic

    return write_synthetic(tmp_path).read_bytes()


def raw_path(commit: str) -> str:
    return f"/{P.OFFICIAL_REPO}/{commit}/{P.OFFICIAL_FILE}"


def test_evaluate_qa_download_takes_the_pinned_commit_and_checks_the_hash(fake_raw, tmp_path, monkeypatch):
    base, files, seen = fake_raw
    data = synthetic_official(tmp_path)
    monkeypatch.setattr(P, "OFFICIAL_SHA256", hashlib.sha256(data).hexdigest())
    files[raw_path(P.OFFICIAL_COMMIT)] = data
    out = tmp_path / "data" / "longmemeval"
    info = P.download_official(out, base_url=base)
    assert seen == [raw_path(P.OFFICIAL_COMMIT)]
    assert (out / "evaluate_qa.py").read_bytes() == data and info["pinned"] is True and info["parses"] is True
    e = json.loads((out / "download.json").read_text())["files"]["evaluate_qa.py"]
    assert e["url"] == base + raw_path(P.OFFICIAL_COMMIT) and e["commit"] == P.OFFICIAL_COMMIT
    assert e["sha256"] == e["pinned_sha256"] == P.OFFICIAL_SHA256 and e["parses"] is True
    st = P.official_status(out / "evaluate_qa.py")
    assert st["matches_pin"] is True and st["parses"] is True


def test_evaluate_qa_that_differs_from_the_pin_is_deleted_and_reported(fake_raw, tmp_path, monkeypatch, capsys):
    from harness.data.__main__ import main

    base, files, _ = fake_raw
    data = synthetic_official(tmp_path)
    monkeypatch.setattr(P, "OFFICIAL_SHA256", hashlib.sha256(data).hexdigest())
    files[raw_path(P.OFFICIAL_COMMIT)] = data.replace(b"SYN-BASE", b"EDITED")
    out = tmp_path / "lme"
    with pytest.raises(hub.ChecksumError, match="differs from the pinned"):
        P.download_official(out, base_url=base)
    assert list(out.iterdir()) == []  # neither the file nor a partial copy nor a record
    # the command line reports it and fails; with the right bytes it succeeds
    assert main(["download", "--what", "evaluate_qa", "--out", str(out), "--base-url", base]) == 1
    assert "REFUSED" in capsys.readouterr().err and not (out / "evaluate_qa.py").exists()
    files[raw_path(P.OFFICIAL_COMMIT)] = data
    assert main(["download", "--what", "evaluate_qa", "--out", str(out), "--base-url", base]) == 0
    assert "sha256 matches" in capsys.readouterr().out


@pytest.mark.parametrize("what", [["--split", "s", "--endpoint"], ["--what", "bge", "--endpoint"],
                                  ["--what", "evaluate_qa", "--base-url"]])
def test_a_download_whose_host_does_not_answer_says_so_exits_3_and_leaves_no_folder(tmp_path, what):
    """Offline (here: a port nothing listens on), each of the README's download commands is an environment failure
    it names, exit 3, with no traceback and none of the folders it would have made."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port free now: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "data" / "place"
    res = subprocess.run([sys.executable, "-m", "harness.data", "download", *what, f"http://127.0.0.1:{port}",
                          "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert "failed" in res.stderr and "it reads the internet" in res.stderr and str(out) in res.stderr
    assert list(tmp_path.iterdir()) == []
