"""Where a stage's data file comes from, and its sha256 for the run metadata.

Generated files are written on first use; LongMemEval files must be on disk
(given by `data.path`, or fetched with `python -m harness.data download`).
Hashing a 2.7 GB file takes a while, so digests are cached by path, size and
modification time.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from .longmemeval import DataError, sha256_file


def resolve(data_cfg) -> Path:
    path = Path(str(data_cfg["path"]))
    if data_cfg["kind"] == "synth":
        if not path.exists():
            from .synth import write

            write(path.parent, int(data_cfg["seed"]), str(data_cfg["size"]), path=path)
        return path
    if not path.exists():
        raise DataError(-1, None, "data.path",
                        f"{path} does not exist: pass data.path=/your/copy.json, or with internet run "
                        f"`python -m harness.data download --split {data_cfg.get('split', 's')} --out {path.parent}`")
    return path


def cached_sha256(path: Path, cache_dir: Path) -> str:
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
