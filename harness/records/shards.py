"""Shards of one stage: `shard=I/N` makes a driver own a fixed part of the plan's runs.

WHY: a stage too big for one machine runs as N drivers that share the run folder on a
network filesystem. The plan stays the whole stage (stage.json, the config hash and the
run ids are the same for every shard and for an unsharded driver); a shard only decides
which runs this driver does. Position i of the plan's seeded interleaved order belongs to
shard i mod N, so the shards are balanced over conditions and questions, and the
partition is recomputed from stage.json alone (the analysis does so).

Layout of a run folder (stage.json, config.yaml and records/ stay shared; a record is
still one atomic file per run):

    shards/<I>of<N>/ledger.jsonl     the shard's metering ledger
    shards/<I>of<N>/attempts.jsonl   the shard's attempt log
    shards/<I>of<N>/lock             host, pid and start of the driver that holds the shard
    driver.lock                      the same for an unsharded driver (whose ledger.jsonl and
                                     attempts.jsonl stay at the top, as always)

Locks: a driver holds an exclusive flock on its lock file for its whole life. The kernel
drops it when the process dies, however it dies (kill -9 included), so the file survives a
crash and the next driver takes the shard over at once; the file's text only says who held
it last. Drivers of different layouts (say 0/2 and 0/4, or an unsharded one) own
overlapping runs, so a driver also refuses to start while a lock of another layout is held.

ASSUMPTION on a network filesystem: this is exactly as safe as the filesystem's flock.
Linux NFS (v4, or v3 with lockd) turns flock into byte-range locks kept by the server:
released when the holding process exits, and when its host dies once the lease runs out
(about 90 s on NFSv4). A mount without working locks (NFS with `nolock`, some FUSE
filesystems) gives no protection: run one driver per stage there.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence, TypeVar

T = TypeVar("T")
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_DIR = re.compile(r"^(\d+)of(\d+)$")


class ShardError(ValueError):
    """A malformed `shard=` value."""

    exit_code = 2  # harness.failures.BAD_INPUT


class ShardBusy(RuntimeError):
    """Another live driver holds this shard, or a shard of another layout of the same stage."""

    exit_code = 3  # harness.failures.STOPPED


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @classmethod
    def parse(cls, value) -> "Shard | None":
        """`"I/N"` -> Shard(I, N); None or "" -> None (the driver owns every run)."""
        if value is None or str(value).strip() in ("", "null", "None"):
            return None
        m = _SHARD.match(str(value))
        if not m:
            raise ShardError(f"shard must look like I/N (e.g. shard=0/4), got {value!r}")
        i, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 0 <= i < n:
            raise ShardError(f"shard {value!r}: need 0 <= I < N")
        return cls(i, n)

    @property
    def name(self) -> str:
        return f"{self.index}of{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, runs: Sequence[T]) -> list[T]:
        """The runs this shard owns: every N-th of the plan's seeded order, starting at I."""
        return [r for k, r in enumerate(runs) if k % self.count == self.index]


def shard_dir(root: Path, shard: Shard) -> Path:
    return Path(root) / "shards" / shard.name


def lock_path(root: Path, shard: Shard | None) -> Path:
    return shard_dir(root, shard) / "lock" if shard else Path(root) / "driver.lock"


def layouts(root: Path) -> list[Shard | None]:
    """Every layout that ever ran in this folder: shards found under shards/, None for unsharded."""
    out: list[Shard | None] = []
    if (Path(root) / "driver.lock").exists() or (Path(root) / "attempts.jsonl").exists():
        out.append(None)
    sdir = Path(root) / "shards"
    for d in sorted(sdir.iterdir()) if sdir.is_dir() else []:
        m = _DIR.match(d.name)
        if m and d.is_dir():
            out.append(Shard(int(m.group(1)), int(m.group(2))))
    return out


def holder(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def is_held(path: Path) -> bool:
    """True when a live process holds the flock on `path` (tested by trying to take it)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return True
        raise
    finally:
        os.close(fd)  # closing drops the lock we may have taken
    return False


def _describe(path: Path) -> str:
    h = holder(path)
    return f"host {h.get('host', '?')} pid {h.get('pid', '?')} since {h.get('since', '?')}" if h else "a driver"


class DriverLock:
    """The lock of one shard (or of the unsharded driver) of a stage folder; see the module doc."""

    def __init__(self, root: Path, shard: Shard | None):
        self.root, self.shard = Path(root), shard
        self.path = lock_path(self.root, shard)
        self._fd: int | None = None

    def acquire(self) -> "DriverLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                what = f"shard {self.shard}" if self.shard else "this stage"
                raise ShardBusy(f"{self.root}: {what} is being run by {_describe(self.path)}; "
                                f"wait for it, or stop that driver first") from None
            raise
        previous = holder(self.path)
        self._fd = fd
        try:
            for other in layouts(self.root):
                if other == self.shard or (other and self.shard and other.count == self.shard.count):
                    continue
                p = lock_path(self.root, other)
                if is_held(p):
                    raise ShardBusy(
                        f"{self.root}: {'shard ' + str(other) if other else 'an unsharded driver'} is running "
                        f"({_describe(p)}); its runs overlap those of "
                        f"{'shard ' + str(self.shard) if self.shard else 'an unsharded driver'}: "
                        f"use the same N for every shard of a stage, or wait")
        except BaseException:
            self.release()
            raise
        text = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                           "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "shard": str(self.shard) if self.shard else None,
                           "previous": {k: previous.get(k) for k in ("host", "pid", "since")} if previous else None})
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode() + b"\n", 0)
        os.fsync(fd)
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the text stays: who held the shard last
            self._fd = None

    def __enter__(self) -> "DriverLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
