"""Model file integrity (on small fake slices) and the llama.cpp child's lifecycle."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.endpoints.local_model import (
    MODEL_SIZE,
    REPO_ROOT,
    LlamaServerProcess,
    LocalModel,
    ModelIntegrityError,
    assemble,
    part_paths,
    sha256_file,
    verify_file,
)


@pytest.fixture
def fake_parts(tmp_path):
    """Three small slices of known content, standing in for the 22 x 50 MB PyPI slices."""
    chunks = [os.urandom(1000), os.urandom(4096), os.urandom(17)]
    paths = []
    for i, c in enumerate(chunks, 1):
        p = tmp_path / "parts" / f"part{i:02d}.bin"
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(c)
        paths.append(p)
    whole = b"".join(chunks)
    return paths, whole, hashlib.sha256(whole).hexdigest()


def _assemble(parts, dest, whole, sha):
    return assemble(dest, parts=parts, size=len(whole), sha256=sha, log=lambda *_: None)


def test_installed_slices_are_complete_and_ordered():
    paths = part_paths()
    assert len(paths) == 22
    assert [p.name for p in paths] == [f"part{i:02d}.bin" for i in range(1, 23)]
    assert sum(p.stat().st_size for p in paths) == MODEL_SIZE


def test_missing_slice_package_is_named():
    with pytest.raises(ModelIntegrityError, match="no_such_slice_1. is not installed"):
        part_paths(n_parts=3, module_fmt="no_such_slice_{}")


def test_assemble_joins_in_order_and_trusts_sidecar_only_for_same_stat(tmp_path, fake_parts):
    parts, whole, sha = fake_parts
    dest = tmp_path / "cache" / "m.gguf"
    assert _assemble(parts, dest, whole, sha) == dest
    assert dest.read_bytes() == whole
    side = json.loads(dest.with_name("m.gguf.verified.json").read_text())
    assert side["sha256"] == sha and side["size"] == len(whole)
    # flip a byte but put size/mtime back: the sidecar fast path trusts it (no re-hash),
    # while a forced full hash catches it
    st = dest.stat()
    data = bytearray(whole)
    data[10] ^= 0xFF
    with open(dest, "r+b") as f:
        f.write(data)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert verify_file(dest, len(whole), sha) == sha
    with pytest.raises(ModelIntegrityError, match="differs from the published"):
        verify_file(dest, len(whole), sha, use_sidecar=False)


def test_corrupted_cache_is_refused_then_rebuilt_from_slices(tmp_path, fake_parts):
    parts, whole, sha = fake_parts
    dest = tmp_path / "m.gguf"
    _assemble(parts, dest, whole, sha)
    time.sleep(0.01)
    with open(dest, "r+b") as f:  # same size, new mtime: the sidecar no longer vouches
        f.seek(100)
        f.write(b"\x00" * 8 if whole[100:108] != b"\x00" * 8 else b"\x01" * 8)
    with pytest.raises(ModelIntegrityError, match="refusing to use it"):
        verify_file(dest, len(whole), sha)
    _assemble(parts, dest, whole, sha)
    assert sha256_file(dest) == sha


def test_wrong_hash_is_refused_and_leaves_nothing(tmp_path, fake_parts):
    parts, whole, _ = fake_parts
    dest = tmp_path / "out" / "m.gguf"
    with pytest.raises(ModelIntegrityError, match="refusing to use it"):
        _assemble(parts, dest, whole, "0" * 64)
    assert sorted(p.name for p in dest.parent.iterdir()) == [".assemble.lock"]


def test_wrong_total_size_is_refused_before_writing(tmp_path, fake_parts):
    parts, whole, sha = fake_parts
    dest = tmp_path / "m.gguf"
    with pytest.raises(ModelIntegrityError, match="add up to 5,113 bytes"):
        assemble(dest, parts=parts, size=len(whole) + 1, sha256=sha)
    assert not dest.exists()


def test_wrong_size_file_is_refused(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"abc")
    with pytest.raises(ModelIntegrityError, match="size 3 bytes, expected 1,117,320,768"):
        verify_file(p)


# --------------------------------------------------------------------------- real llama.cpp child


def _no_other_server():
    """These tests count the process's servers; another one still running is a fixture that outlived its file."""
    assert not LlamaServerProcess.live, "a model server is still running in this test process; never run two at once"


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it (it no longer runs or holds memory)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.model
def test_start_and_stop_are_clean():
    _no_other_server()
    m = LocalModel(ctx_size=512).start()
    pid, adapter_url = m.server.pid, m.base_url
    assert httpx.get(m.server_url[:-3] + "/health", timeout=10).status_code == 200
    assert httpx.get(adapter_url + "/models", timeout=10).json()["data"][0]["id"] == m.model
    info = m.info()
    assert info["gguf"] == str(m.model_path) and m.model_path.stat().st_size == MODEL_SIZE
    assert info["adapter"]["name"] == "json-schema-tool-adapter" and info["ctx_size"] == 512
    m.stop()
    assert _dead(pid) and not LlamaServerProcess.live
    with pytest.raises(httpx.ConnectError):
        httpx.get(adapter_url + "/models", timeout=5)
    m.stop()  # idempotent


@pytest.mark.model
@pytest.mark.parametrize("where", ["main", "thread"])
def test_kill9_of_parent_leaves_no_orphan(where):
    """Each guard alone must kill the child.

    main: a forked sleeper keeps the watchdog pipe open, so only PR_SET_PDEATHSIG can act;
    thread: PDEATHSIG is per-thread and not used, so only the stdin EOF watchdog can act.
    """
    _no_other_server()
    code = f"""
import json, os, sys, threading, time
from harness.endpoints.local_model import LocalModel
m = LocalModel(ctx_size=512)
sleeper = 0
if {where!r} == "thread":
    t = threading.Thread(target=m.start); t.start(); t.join()
else:
    m.start()
    sleeper = os.fork()
    if sleeper == 0:
        time.sleep(60); os._exit(0)
print(json.dumps({{"pid": m.server.pid, "sleeper": sleeper}}), flush=True)
time.sleep(600)
"""
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, cwd=REPO_ROOT,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    sleeper = 0
    try:
        info = json.loads(parent.stdout.readline())
        child, sleeper = info["pid"], info["sleeper"]
        assert not _dead(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not _dead(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _dead(child), f"llama.cpp child {child} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        if sleeper:
            with contextlib.suppress(ProcessLookupError):
                os.kill(sleeper, signal.SIGKILL)
