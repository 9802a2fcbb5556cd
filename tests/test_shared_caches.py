"""Caches written by several shards at once: the encoder's vector cache and the runtime's
session stores, each written by concurrent processes; and the encoder's device setting (CPU only here)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from harness.memory.encoder import Encoder, VectorCache, from_config

REPO = Path(__file__).resolve().parents[1]

WRITER = textwrap.dedent("""
    import hashlib, sys
    import numpy as np
    from harness.memory.encoder import VectorCache
    path, me = sys.argv[1], int(sys.argv[2])
    cache = VectorCache(__import__("pathlib").Path(path), "test-encoder", 8)
    def vec(k):
        return np.random.default_rng(k).standard_normal(8).astype(np.float32)
    # 60 small transactions; keys 0..299 overlap between writers, 1000*me.. are this writer's own
    for t in range(60):
        keys = [t * 5 + j for j in range(5)] + [1000 * (me + 1) + t]
        items = [(hashlib.sha256(str(k).encode()).digest(), vec(k)) for k in keys]
        cache.put_many(items)
        got = cache.get_many([h for h, _ in items])
        assert all(np.array_equal(got[h], v) for h, v in items)
    cache.close()
    print("done")
""")


OPENER = "import sys, pathlib; from harness.memory.encoder import VectorCache; " \
         "VectorCache(pathlib.Path(sys.argv[1]), 'test-encoder', 8).close()"


def test_shards_opening_one_new_cache_at_once_agree_on_its_encoder(tmp_path):
    """Several shards may create the same cache file at the same moment; none may fail on the
    encoder-id row another wrote first (CI once lost a writer to that race)."""
    for r in range(4):
        path = tmp_path / f"round{r}" / "enc.sqlite"
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(path)], cwd=REPO, stderr=subprocess.PIPE,
                                  text=True) for _ in range(6)]
        errs = [p.communicate(timeout=120)[1] for p in procs]
        assert all(p.returncode == 0 for p in procs), [e[-800:] for e in errs if e]
        stored = sqlite3.connect(path).execute("SELECT v FROM meta WHERE k='encoder_id'").fetchall()
        assert stored == [("test-encoder",)]


def test_vector_cache_survives_concurrent_writer_processes(tmp_path):
    path = tmp_path / "shared" / "enc.sqlite"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(i)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    import hashlib

    cache = VectorCache(path, "test-encoder", 8)
    keys = list(range(300)) + [1000 * (m + 1) + t for m in range(4) for t in range(60)]
    got = cache.get_many([hashlib.sha256(str(k).encode()).digest() for k in keys])
    assert len(got) == len(keys) == len(cache)
    for k in keys:
        assert np.array_equal(got[hashlib.sha256(str(k).encode()).digest()],
                              np.random.default_rng(k).standard_normal(8).astype(np.float32))
    cache.close()
    # rollback journal, never WAL: WAL's shared memory does not work across hosts
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    with pytest.raises(RuntimeError, match="caches vectors of"):
        VectorCache(path, "another-encoder", 8)


STORE_BUILDER = textwrap.dedent("""
    import json, sys
    from harness.data.longmemeval import load
    from harness.runtime.store import build_store
    data, sha, qid, root = sys.argv[1:5]
    q = load(data)[qid]
    info = build_store(q, sha, root=__import__("pathlib").Path(root))
    print(json.dumps({"hit": info.cache_hit, "path": str(info.path), "sessions": len(info.sessions)}))
""")


def test_runtime_store_built_once_by_concurrent_processes(tmp_path):
    from harness.data.longmemeval import load, sha256_file
    from harness.data.synth import write

    data = write(tmp_path, 0, "tiny")
    q = next(iter(load(data).values()))
    args = [str(data), sha256_file(data), q.qid, str(tmp_path / "stores")]
    procs = [subprocess.Popen([sys.executable, "-c", STORE_BUILDER, *args], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    got = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    assert sorted(g["hit"] for g in got) == [False, True, True]  # built once, under the file lock
    assert len({g["path"] for g in got}) == 1 and all(g["sessions"] == len(q.sessions) for g in got)
    store = Path(got[0]["path"])
    assert sqlite3.connect(store).execute("SELECT count(*) FROM sessions").fetchone()[0] == len(q.sessions)
    assert not list(store.parent.glob(".*tmp*"))


# ------------------------------------------------------------------------------ devices

TEXTS = ["User: my beagle is called Biscuit", "User: where did I park? Level 3", "short", "another round of chat",
         "User: I moved to Lisbon in May", "Assistant: noted"]


def test_encoder_device_plumbing_and_a_cpu_process_pool(tmp_path):
    single = from_config({"name": "minilm", "path": None, "batch_size": 32, "device": "cpu",
                          "cache_dir": str(tmp_path / "a")})
    pooled = from_config({"name": "minilm", "path": None, "batch_size": 32, "device": ["cpu", "cpu"],
                          "cache_dir": str(tmp_path / "b")})
    try:
        assert single.device == "cpu" and pooled.device == ["cpu", "cpu"]
        assert single.id == pooled.id  # fp32 on any device: the same vectors, the same id and cache
        assert single.describe()["device"] == "cpu" and pooled.describe()["device"] == "cpu,cpu"
        a = single.embed(TEXTS)
        b = pooled.embed(TEXTS)  # two worker processes, one chunk each
        assert pooled._pool is not None and len(pooled._pool["processes"]) == 2
        assert pooled.stats.embedded == len(TEXTS)
        assert np.all(np.sum(a * b, axis=1) > 0.9999)
    finally:
        pooled.close()
        single.close()
    assert pooled._pool is None


def test_cuda_without_a_gpu_is_refused_with_a_clear_message(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal cannot be observed")
    enc = Encoder("minilm", cache_dir=tmp_path, device="cuda")
    with pytest.raises(RuntimeError, match="sees no CUDA GPU"):
        enc.embed(["a text that is not cached"])
    enc.close()
