"""Download the cleaned LongMemEval files from the Hugging Face hub (needs internet).

The revision is pinned in `conf/data/*.yaml`; the resolved commit and each file's
sha256 are returned so they land in the run metadata. A file whose sha256 is
known (SPEC 1) and differs is deleted and reported, never used.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .longmemeval import sha256_file

REPO_ID = "xiaowu0162/longmemeval-cleaned"
FILES = {
    "s": "longmemeval_s_cleaned.json",
    "m": "longmemeval_m_cleaned.json",
    "oracle": "longmemeval_oracle.json",
}
KNOWN_SHA256 = {
    "longmemeval_s_cleaned.json": "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442",
}


class ChecksumError(RuntimeError):
    pass


def verify(path: Path, filename: str) -> str:
    digest = sha256_file(path)
    want = KNOWN_SHA256.get(filename)
    if want and digest != want:
        raise ChecksumError(f"{path}: sha256 {digest} differs from the published {want}")
    return digest


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
        raise
    return {"path": str(target), "sha256": digest, "revision": revision, "commit": commit}
