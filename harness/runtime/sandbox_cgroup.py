"""Per-call memory and process limits for the shell sandbox: one cgroup per call.

WHY: RLIMIT_AS and RLIMIT_NPROC bound each process, so one command could hold
10 x 256 MB. A cgroup bounds the sum: memory 256 MiB with no swap and 10 processes
for everything the command starts; past the memory limit the kernel OOM-kills
inside the group only, and the counters say so.

Where the groups go: under the harness's own cgroup (so they stay inside whatever
limit the host puts on the harness), one per controller, named after the call's
leased uid. cgroup v2 is used when the harness's own group can delegate `memory`
and `pids` to children (else the v2 hierarchy's top, if it delegates them);
otherwise the v1 `memory` and `pids` hierarchies (on this machine the controllers
are bound to v1 and the v2 mount has neither, so the v2 path has not run here). A
controller that has no place is reported with the reason, and the sandbox then
falls back to its per-process rlimits for it (`CgroupPlan.bounds()` says which).
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLERS = ("memory", "pids")
GROUP_PREFIX = "memspace-sandbox-"


@dataclass(frozen=True)
class Place:
    """Where one controller's per-call groups are made: `parent/<GROUP_PREFIX><uid>`."""

    version: int  # 1 or 2
    parent: Path


@dataclass(frozen=True)
class CgroupPlan:
    places: dict[str, Place]  # controller -> place; a missing controller has a reason instead
    reasons: dict[str, str] = field(default_factory=dict)

    def kind(self, controller: str) -> str:
        p = self.places.get(controller)
        return f"cgroup{p.version}" if p else "rlimit"

    def bounds(self, memory_bytes: int, nproc: int) -> dict[str, str]:
        """What bounds memory and processes per call, in words (for the run record)."""
        mib = memory_bytes >> 20
        out = {}
        if "memory" in self.places:
            out["memory"] = f"{mib} MiB for the whole command, no swap ({self.kind('memory')} group per call)"
        else:
            out["memory"] = (f"weaker: {mib} MiB per process only (RLIMIT_AS), up to {nproc} x {mib} MiB per call; "
                             f"no memory cgroup: {self.reasons.get('memory', 'unknown')}")
        if "pids" in self.places:
            out["processes"] = f"{nproc} for the whole command ({self.kind('pids')} group per call)"
        else:
            out["processes"] = (f"weaker: {nproc} processes of the call's uid (RLIMIT_NPROC) only; "
                                f"no pids cgroup: {self.reasons.get('pids', 'unknown')}")
        return out

    @property
    def label(self) -> str:
        """Short form for every tool log: e.g. 'memory=cgroup1,pids=cgroup1' or 'memory=rlimit,...'."""
        return ",".join(f"{c}={self.kind(c)}" for c in CONTROLLERS)


def _own_paths() -> tuple[str | None, dict[str, str]]:
    """This process's cgroup path in the v2 hierarchy and per v1 controller (from /proc/self/cgroup)."""
    v2, v1 = None, {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, ctrls, path = line.split(":", 2)
        if hid == "0" and ctrls == "":
            v2 = path
        for c in ctrls.split(","):
            if c:
                v1[c] = path
    return v2, v1


def _cgroup_mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, mount root, super options) of every cgroup/cgroup2 mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((tail[0], Path(fields[4]), fields[3], set(tail[2].split(","))))
    return out


def _under(mount: Path, root: str, path: str) -> Path | None:
    """The directory of cgroup `path` in a mount whose root is `root`, if the mount shows it."""
    if root == "/":
        return mount / path.lstrip("/")
    if path == root or path.startswith(root.rstrip("/") + "/"):
        return mount / path[len(root):].lstrip("/")
    return None


def plan_cgroups(memory_bytes: int, nproc: int) -> CgroupPlan:
    """Find where per-call groups can be made, proving each place by making and removing a probe group."""
    own_v2, own_v1 = _own_paths()
    mounts = _cgroup_mounts()
    places: dict[str, Place] = {}
    reasons: dict[str, str] = {}
    for c in CONTROLLERS:
        why = []
        for fstype, mp, root, opts in sorted(mounts, key=lambda m: m[0] != "cgroup2"):  # v2 first
            if fstype == "cgroup2" and own_v2 is not None:
                d = _under(mp, root, own_v2)
                place, err = (_v2_place(d, c, mp) if d else (None, f"cgroup2 at {mp} does not show {own_v2}"))
            elif fstype == "cgroup" and c in opts and c in own_v1:
                d = _under(mp, root, own_v1[c])
                place, err = (Place(1, d), None) if d and d.is_dir() else (None, f"{mp} does not show {own_v1[c]}")
            else:
                continue
            if place:
                err = _probe(place, c, memory_bytes, nproc)
                if err is None:
                    places[c] = place
                    break
            why.append(err)
        else:
            reasons[c] = "; ".join(w for w in why if w) or f"no cgroup hierarchy offers the {c} controller"
    return CgroupPlan(places, reasons)


def _v2_place(d: Path, c: str, top: Path) -> tuple[Place | None, str | None]:
    """The harness's own v2 group if it offers `c` to children (enabling it there when it may), else the
    hierarchy's top if that already delegates `c` (the top is exempt from the no-internal-processes rule)."""
    try:
        available = (d / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return None, f"cgroup2 {d}: {exc.strerror}"
    if c not in available:
        return None, f"cgroup2 {d} does not offer {c} (controllers: {' '.join(available) or 'none'})"
    if c in (d / "cgroup.subtree_control").read_text().split():
        return Place(2, d), None
    try:  # delegate the controller to our children; refused while this (non-top) group holds processes
        (d / "cgroup.subtree_control").write_text(f"+{c}")
        return Place(2, d), None
    except OSError as exc:
        why = f"cgroup2 {d} cannot delegate {c} to child groups ({exc.strerror})"
    if d != top and c in (top / "cgroup.subtree_control").read_text().split():
        return Place(2, top), None
    return None, why + "; run the harness in a group that can delegate memory and pids"


def _probe(place: Place, c: str, memory_bytes: int, nproc: int) -> str | None:
    g = place.parent / f"{GROUP_PREFIX}probe-{os.getpid()}"
    try:
        g.mkdir(exist_ok=True)
        try:
            _set_limits(g, place.version, (c,), memory_bytes, nproc)
        finally:
            g.rmdir()
    except OSError as exc:
        return f"cannot make a {c} group in {place.parent}: {exc.strerror or exc}"
    return None


def _set_limits(g: Path, version: int, controllers, memory_bytes: int, nproc: int) -> None:
    if "memory" in controllers:
        if version == 2:
            (g / "memory.max").write_text(str(memory_bytes))
            if (g / "memory.swap.max").exists():
                (g / "memory.swap.max").write_text("0")
        else:
            (g / "memory.limit_in_bytes").write_text(str(memory_bytes))
            if (g / "memory.memsw.limit_in_bytes").exists():  # memory + swap = memory: no swap
                (g / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
    if "pids" in controllers:
        (g / "pids.max").write_text(str(nproc))


def _counter(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return None


def _number(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class CallUsage:
    oom_kills: int | None = None  # processes the kernel killed for the group's memory limit
    memory_peak_bytes: int | None = None
    forks_refused: int | None = None  # fork/clone calls refused at pids.max


class CallGroup:
    """The groups of one sandboxed call: made with their limits, joined by the command, read and removed."""

    def __init__(self, plan: CgroupPlan, uid: int, memory_bytes: int, nproc: int):
        self.dirs: dict[Path, tuple[int, list[str]]] = {}
        for c, place in plan.places.items():
            d = place.parent / f"{GROUP_PREFIX}{uid}"
            self.dirs.setdefault(d, (place.version, []))[1].append(c)
        self.fds: list[int] = []
        try:
            for d, (version, ctrls) in self.dirs.items():
                try:
                    d.rmdir()  # left by a harness that died mid-call; its processes are gone (the uid is free)
                except FileNotFoundError:
                    pass
                d.mkdir()
                _set_limits(d, version, ctrls, memory_bytes, nproc)
                # The command joins by writing "0" here (sandbox_exec.py), so only it and its children are counted.
                self.fds.append(os.open(d / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
        except BaseException:
            self.close()
            raise

    def close(self) -> CallUsage:
        """Read the counters and remove the groups (their processes are gone when the sandbox's init has exited)."""
        usage = CallUsage()
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        for d, (version, ctrls) in self.dirs.items():
            if not d.exists():
                continue
            if "memory" in ctrls:
                if version == 2:
                    usage.oom_kills = _counter(d / "memory.events", "oom_kill")
                    usage.memory_peak_bytes = _number(d / "memory.peak")
                else:
                    usage.oom_kills = _counter(d / "memory.oom_control", "oom_kill")
                    usage.memory_peak_bytes = _number(d / "memory.max_usage_in_bytes")
            if "pids" in ctrls:
                usage.forks_refused = _counter(d / "pids.events", "max")
            _remove(d)
        return usage


def leftover_groups(plan: CgroupPlan) -> dict[int, list[Path]]:
    """Per-call groups that exist now, by uid; a harness killed mid-call leaves its (empty) groups behind."""
    found: dict[int, list[Path]] = {}
    for place in plan.places.values():
        try:
            entries = list(os.scandir(place.parent))
        except OSError:
            continue
        for e in entries:
            tail = e.name[len(GROUP_PREFIX):]
            if e.name.startswith(GROUP_PREFIX) and tail.isdigit() and e.is_dir(follow_symlinks=False):
                found.setdefault(int(tail), []).append(Path(e.path))
    return found


def _remove(d: Path, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:  # EBUSY while an exiting process is still being reaped
            if exc.errno != errno.EBUSY or time.monotonic() > end:
                raise
            time.sleep(0.01)
