"""Where a stage's data file comes from, and its sha256 for the run metadata.

Generated files are written on first use, except by a dry run: it generates them in memory
(`Unwritten`) and writes nothing; LongMemEval files must be on disk
(given by `data.path`, or fetched with `python -m harness.data download`).
Hashing a 2.7 GB file takes a while, so digests are cached by path, size and
modification time.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from .longmemeval import DataError, sha256_file


@dataclass(frozen=True)
class Unwritten:
    """A generated file a dry run holds in memory: where a real run writes it, and the bytes it would write.
    Read like a Path (`open`, `read_bytes`), so the plan and the forecast read it as they read the file."""
    path: Path
    content: bytes

    def open(self, mode: str = "rb"):
        return io.BytesIO(self.content)

    def read_bytes(self) -> bytes:
        return self.content

    @property
    def sha256(self) -> str:  # the sha256 the written file will have
        return hashlib.sha256(self.content).hexdigest()

    def __str__(self) -> str:
        return str(self.path)


def resolve(data_cfg, write: bool = True) -> Path | Unwritten:
    """The stage's data file; a generated one missing is written (`write`) or held in memory (a dry run)."""
    path = Path(str(data_cfg["path"]))
    if data_cfg["kind"] == "synth":
        if not path.exists():
            from .synth import dumps, write as write_file

            if not write:
                return Unwritten(path, dumps(int(data_cfg["seed"]), str(data_cfg["size"])))
            write_file(path.parent, int(data_cfg["seed"]), str(data_cfg["size"]), path=path)
        return path
    if not path.exists():
        raise DataError(-1, None, "data.path",
                        f"{path} does not exist: pass data.path=/your/copy.json, or with internet run "
                        f"`python -m harness.data download --split {data_cfg.get('split', 's')} --out {path.parent}`")
    return path


def cached_sha256(path: Path | Unwritten, cache_dir: Path) -> str:
    if isinstance(path, Unwritten):
        return path.sha256
    cache = Path(cache_dir) / "sha256.json"
    st = path.stat()
    # the inode and change time too: an in-place edit that keeps the size and puts the modification time
    # back (cp -p, rsync -t, os.utime) must be hashed again, never recognised by its old sha256
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_ctime_ns}"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    if key not in known:
        known[key] = sha256_file(path)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{socket.gethostname()}.{os.getpid()}.tmp")  # unique across shards
        tmp.write_text(json.dumps(known, indent=0))
        tmp.replace(cache)
    return known[key]
