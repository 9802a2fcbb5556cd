"""Download what the study needs from the internet: the cleaned LongMemEval files, the encoder's
weights and the official judge prompts.

* `download(split, ...)`: a cleaned LongMemEval file from the Hugging Face hub (dataset
  xiaowu0162/longmemeval-cleaned). The revision is pinned in `conf/data/*.yaml`; the resolved commit
  and the file's sha256 are returned so they land in the run metadata.
* `download_bge(...)`: BAAI/bge-small-en-v1.5 from the hub at the pinned commit
  (harness.memory.encoder.BGE_REVISION), only the files sentence-transformers reads
  (BGE_FILES), into `<out>/bge-small-en-v1.5/`.
* the official judge prompts (LongMemEval's `src/evaluation/evaluate_qa.py`) are the judge's:
  judge.prompts.download_official, with these helpers (the judge builds on the data, not the reverse).

A file whose sha256 is known (SPEC 1, BGE_FILES, OFFICIAL_SHA256) and differs is deleted and
reported (ChecksumError), never used. Each download writes `<dir>/download.json` beside what it
fetched: per file, what it is, where it came from (URL), the revision asked for, the commit it
resolved to, its sha256 and byte count, and the pinned sha256 (null when nothing pins it: a
revision other than the pinned one is trust-on-first-download, and says so). The endpoints are
overridable (`endpoint=`, HF_ENDPOINT; `base_url=`), which is how the tests serve local files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from .longmemeval import sha256_file

REPO_ID = "xiaowu0162/longmemeval-cleaned"
FILES = {
    "s": "longmemeval_s_cleaned.json",
    "m": "longmemeval_m_cleaned.json",
    "oracle": "longmemeval_oracle.json",
}


def _published() -> dict[str, str]:
    """File name -> published sha256, from the paper's reference (conf/paper.yaml `data`, the one place
    the hashes live; the fidelity manifest recognises files by the same hashes whatever their name)."""
    import yaml

    ref = yaml.safe_load((Path(__file__).resolve().parents[2] / "conf" / "paper.yaml").read_text(encoding="utf-8"))
    return {d["file"]: d["sha256"] for d in ref["data"].values() if d.get("sha256")}


KNOWN_SHA256 = _published()
HF_ENDPOINT = "https://huggingface.co"
GITHUB_RAW = "https://raw.githubusercontent.com"


class ChecksumError(RuntimeError):
    pass


def verify(path: Path, filename: str) -> str:
    digest = sha256_file(path)
    want = KNOWN_SHA256.get(filename)
    if want and digest != want:
        raise ChecksumError(f"{path}: sha256 {digest} differs from the published {want}")
    return digest


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def record(out_dir: Path, entries: dict[str, dict]) -> Path:
    """Merge per-file entries into `<out_dir>/download.json` (one file per directory, any number of downloads)."""
    p = Path(out_dir) / "download.json"
    files = {}
    if p.exists():
        try:
            files = dict(json.loads(p.read_text()).get("files") or {})
        except (ValueError, AttributeError):
            files = {}
    files.update(entries)
    tmp = p.with_name(".download.json.partial")
    tmp.write_text(json.dumps({"files": dict(sorted(files.items()))}, indent=2) + "\n")
    tmp.replace(p)
    return p


def _hf_endpoint(endpoint: str | None) -> str:
    return (endpoint or os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")


def download(split: str, out_dir: str | Path, revision: str = "main", repo_id: str = REPO_ID,
             endpoint: str | None = None) -> dict:
    """Fetch one split into out_dir and return {path, sha256, revision, commit}."""
    from huggingface_hub import HfApi, hf_hub_download

    filename = FILES[split]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    api = HfApi(endpoint=endpoint)
    commit = api.dataset_info(repo_id, revision=revision).sha
    cached = hf_hub_download(repo_id, filename, repo_type="dataset", revision=commit, endpoint=endpoint)
    target = out_dir / filename
    shutil.copyfile(cached, target)
    try:
        digest = verify(target, filename)
    except ChecksumError:
        target.unlink()
        _forget(cached)
        raise
    record(out_dir, {filename: {
        "what": f"LongMemEval cleaned, split {split}", "source": f"hf dataset {repo_id}",
        "url": f"{_hf_endpoint(endpoint)}/datasets/{repo_id}/resolve/{commit}/{filename}",
        "revision": revision, "commit": commit, "sha256": digest, "bytes": target.stat().st_size,
        "pinned_sha256": KNOWN_SHA256.get(filename), "fetched": now()}})
    return {"path": str(target), "sha256": digest, "revision": revision, "commit": commit}


def _forget(cached: str) -> None:
    """Remove a refused file from the hub cache too, so no later call picks it up."""
    for p in {os.path.realpath(cached), cached}:
        try:
            os.unlink(p)
        except OSError:
            pass


def download_bge(out_dir: str | Path = "data/models", revision: str | None = None, endpoint: str | None = None,
                 repo_id: str | None = None) -> dict:
    """Snapshot of BAAI/bge-small-en-v1.5 at the pinned commit into `<out_dir>/bge-small-en-v1.5/`.

    Only the files in BGE_FILES; each is checked against its pinned sha256 when the revision is the
    pinned one (another revision: recorded, trust-on-first-download). Nothing lands in the target
    directory unless every file passed; refused files are deleted (also from the hub cache)."""
    from huggingface_hub import HfApi, hf_hub_download

    from harness.memory.encoder import BGE_DIRNAME, BGE_FILES, BGE_REPO, BGE_REVISION

    repo_id = repo_id or BGE_REPO
    revision = revision or BGE_REVISION
    out_dir = Path(out_dir)
    target = out_dir / BGE_DIRNAME
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision).sha
    pinned = commit == BGE_REVISION and repo_id == BGE_REPO
    staging = out_dir / f".{BGE_DIRNAME}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    entries, refused = {}, []
    try:
        for rel, want in BGE_FILES.items():
            cached = hf_hub_download(repo_id, rel, revision=commit, endpoint=endpoint)
            dst = staging / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, dst)
            digest = sha256_file(dst)
            if pinned and digest != want:
                refused.append(f"{rel}: sha256 {digest} differs from the pinned {want}")
                dst.unlink()
                _forget(cached)
                continue
            entries[rel] = {"what": f"{repo_id} (encoder weights, tokenizer, config)", "source": f"hf model {repo_id}",
                            "url": f"{_hf_endpoint(endpoint)}/{repo_id}/resolve/{commit}/{rel}",
                            "revision": revision, "commit": commit, "sha256": digest, "bytes": dst.stat().st_size,
                            "pinned_sha256": want if pinned else None, "fetched": now()}
        if refused:
            raise ChecksumError(f"{repo_id}@{commit}: refused and deleted, never used: " + "; ".join(refused))
        for rel in BGE_FILES:
            dst = target / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).replace(dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    record(target, entries)
    return {"path": str(target), "repo": repo_id, "revision": revision, "commit": commit, "pinned": pinned,
            "sha256": {rel: e["sha256"] for rel, e in entries.items()}}


def fetch_raw(url: str, target: Path, want: str | None, readable, timeout: float) -> tuple[str, bool]:
    """Stream one raw file to `target` via a partial file; (sha256, readable(partial) succeeded).

    A file whose sha256 differs from `want` is deleted and refused (ChecksumError), never used."""
    tmp = target.with_name(f".{target.name}.partial")
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as f:
            for block in iter(lambda: r.read(1 << 16), b""):
                h.update(block)
                f.write(block)
        digest = h.hexdigest()
        if want and digest != want:
            raise ChecksumError(f"{url}: sha256 {digest} differs from the pinned {want}; deleted, never used")
        ok = readable(tmp)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return digest, ok
