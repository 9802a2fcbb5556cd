"""A transient, read-only sandbox that shows one session store and nothing else.

WHY: the shell condition lets the model run its own commands on its store
(Appendix B: "a transient sandbox with a dynamic user, no network, a read-only
file system that shows only the agent's store, 256 MB of memory and a 20-second
limit, and returns at most 8,000 characters"). No Docker here, so the sandbox
is built from Linux namespaces, cgroups, seccomp and resource limits:

  limit                      enforced by
  -------------------------  ------------------------------------------------------
  only the store, read-only  private mount namespace (`unshare --mount`); a fresh
                             tmpfs root (`pivot_root`, old root detached) holding
                             /memory/state.db (read-only bind of the store's sandbox
                             copy), /usr (read-only bind; /usr/local masked),
                             /etc/alternatives only (Debian's awk/which symlinks), /dev/
                             {null,zero,full,random,urandom}, a 16 MB /tmp; the root
                             is remounted read-only; no /proc, /sys, /home, /work, /etc/*
  no network                 new network namespace (`unshare --net`): only a downed lo
  dynamic user               `setpriv --reuid/--regid` to a uid leased per call from
                             1,900,000,000 + [0, 65536) (flock lease; a uid any host
                             process uses is skipped), no groups, no capabilities,
                             no_new_privs; nosuid mounts
  256 MB memory              a memory cgroup per call (256 MiB, no swap) holding the
                             command and every process it starts (sandbox_cgroup.py);
                             plus RLIMIT_AS = 256 MiB per process (`prlimit --as`)
  fork bombs                 a pids cgroup per call (10) + RLIMIT_NPROC = 10 for the
                             leased uid + a PID namespace (`unshare --pid --fork
                             --kill-child`): when its init exits, every process dies
  kernel surface             seccomp filter (libseccomp, sandbox_exec.py): no new
                             namespaces, mounts, ptrace, keyrings, bpf, perf, io_uring
  20 s                       wall clock in the caller; on expiry SIGKILL to the process
                             group (the namespace's init is in it, so the namespace dies);
                             inside, `timeout -s KILL` (limit + 2 s) in case the caller
                             died, and RLIMIT_CPU 20 s
  8,000 characters           the caller reads at most 64 KB (then kills the sandbox) and
                             returns at most 8,000 characters
  other                      RLIMIT_NOFILE 256, RLIMIT_FSIZE 16 MiB, RLIMIT_CORE 0,
                             IPC and UTS namespaces, empty environment; the command
                             arrives on standard input, at most 64 KiB

Where no cgroup can be made, memory and processes fall back to the per-process
rlimits (at most 10 x 256 MiB per call) and `describe()` (logged with every call
as `bounds`) says which weaker bound applies and why.

Needs: Linux, root (CAP_SYS_ADMIN for the namespaces, mounts and cgroups),
util-linux (`unshare`, `setpriv`, `prlimit`, `mount`, `umount`, `pivot_root`),
the sqlite3 CLI and libseccomp's Python bindings for the system Python
(`apt-get install -y sqlite3 python3-seccomp`). `check_sandbox()` says which is
missing.

State (uid leases, the root mount point) lives in /run/memspace-sandbox (or the
temp dir without /run), opened without following links and refused unless it is
a directory owned by root with mode 0700.
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .sandbox_cgroup import CallGroup, CgroupPlan, leftover_groups, plan_cgroups

UID_BASE = 1_900_000_000
UID_SPAN = 65_536
STATE_DIR = Path("/run" if Path("/run").is_dir() else tempfile.gettempdir()) / "memspace-sandbox"
STORE_MOUNT = "/memory/state.db"
READY = b"memspace-sandbox: ready\n"
REQUIRED = ("unshare", "setpriv", "prlimit", "mount", "umount", "pivot_root", "timeout", "sqlite3", "env")
SYSTEM_PYTHON = "/usr/bin/python3"  # the sandbox shows /usr only; sandbox_exec.py runs with it
_EXEC_SOURCE = (Path(__file__).with_name("sandbox_exec.py")).read_text()


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 256 * 1024 * 1024
    nproc: int = 10
    wall_s: float = 20.0
    cpu_s: int = 20
    output_chars: int = 8000
    capture_bytes: int = 64 * 1024
    tmp_bytes: int = 16 * 1024 * 1024
    nofile: int = 256
    command_bytes: int = 64 * 1024  # UTF-8 bytes; execve caps one argument at 128 KiB


LIMITS = Limits()


class SandboxUnavailable(RuntimeError):
    """This machine cannot build the sandbox; the message says what is missing."""


@dataclass(frozen=True)
class SandboxResult:
    output: str  # stdout+stderr of the command, decoded, at most limits.capture_bytes
    exit_code: int | None  # None when killed by the harness
    timed_out: bool
    output_limited: bool  # killed because it printed more than capture_bytes
    wall_s: float
    uid: int
    setup_error: str | None = None
    oom_kills: int | None = None  # processes killed for the call's memory limit (None: no memory cgroup)
    memory_peak_bytes: int | None = None
    forks_refused: int | None = None  # forks refused at the call's process limit (None: no pids cgroup)


def command_bytes(command: str, limits: Limits = LIMITS) -> bytes:
    """The command as the sandbox gets it; ValueError (a message for the model) if it cannot be run."""
    if "\0" in command:
        raise ValueError(f"the command contains a NUL character (at position {command.index(chr(0))}); "
                         "a shell command cannot hold one")
    try:
        data = command.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"the command is not valid Unicode text (unpaired surrogate at position {exc.start})"
                         ) from None
    if len(data) > limits.command_bytes:
        raise ValueError(f"the command is {len(data):,} bytes long; the limit is {limits.command_bytes:,}")
    return data


# The namespace's init (pid 1): builds the root, pivots into it, runs the command
# as a child under the leased uid, and exits with its status. It stays root, in the
# caller's process group and outside the call's cgroups, so killing the group tears
# the namespace down and an OOM kill never hits it. Its standard input (the command)
# is read by sandbox_exec.py, the last step before the command.
_LAUNCHER = r"""
R="$1"; STORE="$2"; U="$3"; MEM="$4"; NPROC="$5"; CPU="$6"; TMPB="$7"; NOFILE="$8"; WALL="$9"; FDS="${10}"; EXEC="${11}"
die() { echo "memspace-sandbox: setup failed: $*" >&2; exit 125; }
mount --make-rprivate / || die "make-rprivate"
mount -t tmpfs -o size=1m,nr_inodes=128,mode=0755 sandbox-root "$R" || die "root tmpfs"
mkdir "$R/usr" "$R/memory" "$R/dev" "$R/tmp" "$R/.old" "$R/proc" "$R/etc" "$R/etc/alternatives" || die "mkdir"
ln -s usr/bin usr/lib usr/lib64 usr/sbin "$R" || die "symlinks"
: > "$R/memory/state.db" && : > "$R/dev/null" && : > "$R/dev/zero" && : > "$R/dev/full" && : > "$R/dev/random" \
  && : > "$R/dev/urandom" || die "mount points"
mount --bind -o ro,nosuid,nodev /usr "$R/usr" || die "bind /usr"
mount -t tmpfs -o ro,size=4k,nr_inodes=2,mode=0755 masked "$R/usr/local" || die "mask /usr/local"
if [ -d /etc/alternatives ]; then  # Debian's awk, which, ... are symlinks through /etc/alternatives
  mount --bind -o ro,nosuid,nodev /etc/alternatives "$R/etc/alternatives" || die "bind /etc/alternatives"
fi
mount --bind -o ro,nosuid,nodev,noexec "$STORE" "$R/memory/state.db" || die "bind store read-only"
for d in null zero full random urandom; do
  mount --bind "/dev/$d" "$R/dev/$d" || die "/dev/$d"
done
mount -t tmpfs -o size="$TMPB",nr_inodes=256,mode=1777,nosuid,nodev sandbox-tmp "$R/tmp" || die "/tmp"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || die "proc"
cd "$R" && pivot_root . .old || die "pivot_root"
umount -l /.old /proc && rmdir /.old /proc || die "detach old root"
mount -o remount,bind,ro / || die "root read-only"
cd /memory || die "cd"
exec /usr/bin/timeout -s KILL "$WALL" \
  /usr/bin/setpriv --reuid="$U" --regid="$U" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- \
  /usr/bin/python3 -I -c "$EXEC" "$FDS" "$MEM" "$NPROC" "$CPU" "$TMPB" "$NOFILE"
"""

_lock = threading.Lock()
_cgroups: CgroupPlan | None = None


def check_sandbox() -> None:
    """Raise SandboxUnavailable with a clear reason unless a trivial sandboxed command works."""
    global _cgroups
    with _lock:
        if _cgroups is not None:
            return
        if os.name != "posix" or not Path("/proc/self/ns/mnt").exists():
            raise SandboxUnavailable("the shell sandbox needs Linux namespaces (Linux only)")
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "the shell sandbox needs root (CAP_SYS_ADMIN) to create mount/network/pid namespaces "
                "and switch to a dynamic uid; run the harness as root or in a privileged container")
        missing = [b for b in REQUIRED if not _which(b)] + ([] if os.access(SYSTEM_PYTHON, os.X_OK) else ["python3"])
        if missing:
            raise SandboxUnavailable(f"the shell sandbox needs {', '.join(missing)} on PATH "
                                     "(apt-get install -y sqlite3 python3-seccomp; util-linux, mount)")
        _state()
        plan = plan_cgroups(LIMITS.memory_bytes, LIMITS.nproc)
        probe_dir = Path(tempfile.mkdtemp(prefix="memspace-sbx-check-"))
        store = probe_dir / "probe.db"
        store.write_bytes(b"")
        try:
            res = _run(plan, "sqlite3 -version && test ! -e /etc/passwd && test ! -e /work && echo ok", store, LIMITS)
        finally:
            shutil.rmtree(probe_dir, ignore_errors=True)
        if res.setup_error or res.exit_code != 0 or not res.output.rstrip().endswith("ok"):
            err = res.setup_error or res.output.strip()[-500:] or f"exit {res.exit_code}"
            hint = (" (the system Python needs libseccomp's bindings: apt-get install -y python3-seccomp)"
                    if "seccomp" in err else "")
            raise SandboxUnavailable(
                f"the shell sandbox could not be built here: {err}{hint} "
                "(needs root with CAP_SYS_ADMIN, unprivileged namespaces allowed by the container, util-linux)")
        _cgroups = plan


def describe(limits: Limits = LIMITS) -> dict[str, str]:
    """What bounds each call on this machine, in words (for the stage's record); the shell tool's
    log carries the short form, `cgroups`, as `bounds` with every call."""
    check_sandbox()
    assert _cgroups is not None
    return {
        "cgroups": _cgroups.label,
        **_cgroups.bounds(limits.memory_bytes, limits.nproc),
        "per_process": f"RLIMIT_AS {limits.memory_bytes >> 20} MiB, RLIMIT_NPROC {limits.nproc} for the call's uid",
        "syscalls": "seccomp (libseccomp): no new namespaces, mounts, ptrace, keyrings, bpf, perf, io_uring",
    }


def _which(name: str) -> str | None:
    return shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def open_private_dir(name: str | os.PathLike, dir_fd: int | None = None) -> int:
    """Make (if absent) and open a directory without following links; refuse it unless ours and mode 0700.

    A local user who creates the path first (or puts a link there) gets a clear
    SandboxUnavailable, never a root-owned file where the link points.
    """
    try:
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SandboxUnavailable(f"refusing the sandbox state directory {name}: it is a link or not a "
                                     "directory (created by someone else?); remove it") from None
        raise
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o700:
        os.close(fd)
        raise SandboxUnavailable(
            f"refusing the sandbox state directory {name}: owned by uid {st.st_uid} with mode "
            f"{stat.S_IMODE(st.st_mode):o}, not by uid {os.geteuid()} with mode 700 (created by someone else?); "
            "remove it")
    return fd


_state_fds: tuple[int, int] | None = None


def _state() -> tuple[int, int]:
    """(state dir, lease dir) descriptors, checked once per process."""
    global _state_fds
    if _state_fds is None:
        top = open_private_dir(STATE_DIR)
        leases = open_private_dir("uids", dir_fd=top)
        root = open_private_dir("root", dir_fd=top)  # every sandbox's root mount point (in its own namespace)
        os.close(root)
        _state_fds = top, leases
    return _state_fds


def uids_in_use() -> set[int]:
    """Every real, effective, saved and filesystem uid of a live process (host view)."""
    uids: set[int] = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            uids.update(int(u) for u in line.split()[1:])
                            break
            except (OSError, ValueError):
                continue
    return uids


class _UidLease:
    """A uid no other sandbox and no host process uses for the duration of one call.

    The lowest uid from UID_BASE that no live process has is taken with a
    non-blocking flock on a lease file (kept, so only as many files exist as
    sandboxes ever ran at once). A uid in use on the host is skipped, never waited on.
    """

    def __init__(self) -> None:
        leases = _state()[1]
        busy = uids_in_use()
        for i in range(UID_SPAN):
            uid = UID_BASE + i
            if uid in busy:
                continue
            fd = os.open(f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=leases)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    continue
                raise
            self.uid, self._fd = uid, fd
            return
        raise RuntimeError("no free sandbox uid")

    def release(self) -> None:
        os.close(self._fd)


def _remove_leftover_groups(plan: CgroupPlan) -> None:
    """Remove the groups of calls whose harness died (their uid's lease is free), so none outlive the harness."""
    leases = _state()[1]
    for uid, dirs in leftover_groups(plan).items():
        fd = os.open(f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=leases)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live call holds it
        try:
            for d in dirs:
                try:
                    d.rmdir()
                except OSError:
                    pass  # its processes are still dying (the inner clock kills them); removed next time
        finally:
            os.close(fd)


def processes_of(uid: int) -> list[int]:
    """Pids of live processes whose real uid is `uid` (host view)."""
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry.name))
                        break
        except OSError:
            continue
    return pids


def _wait_gone(uid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while processes_of(uid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def run_sandboxed(command: str, store: Path, limits: Limits = LIMITS) -> SandboxResult:
    """Run `command` with /bin/sh in a fresh sandbox showing `store` read-only at /memory/state.db.

    ValueError (see `command_bytes`) for a command the sandbox cannot take.
    """
    check_sandbox()
    assert _cgroups is not None
    return _run(_cgroups, command, store, limits)


def _run(plan: CgroupPlan, command: str, store: Path, limits: Limits) -> SandboxResult:
    data = command_bytes(command, limits)
    store = Path(store).resolve()
    if not store.is_file():
        raise FileNotFoundError(store)
    _remove_leftover_groups(plan)
    lease = _UidLease()
    group = None
    t0 = time.monotonic()
    out = bytearray()
    err = bytearray()
    timed_out = limited = False
    code = None
    try:
        group = CallGroup(plan, lease.uid, limits.memory_bytes, limits.nproc)
        argv = [
            _which("unshare") or "unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
            "--", "/bin/sh", "-c", _LAUNCHER, "memspace-sandbox",
            str(STATE_DIR / "root"), str(store), str(lease.uid), str(limits.memory_bytes), str(limits.nproc),
            str(limits.cpu_s), str(limits.tmp_bytes), str(limits.nofile), str(int(limits.wall_s) + 2),
            ",".join(map(str, group.fds)), _EXEC_SOURCE,
        ]
        with tempfile.TemporaryFile() as stdin:  # sandbox_exec.py reads the command from here
            stdin.write(data)
            stdin.seek(0)
            proc = subprocess.Popen(
                argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=group.fds,
                start_new_session=True, close_fds=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
            )
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        deadline = t0 + limits.wall_s
        open_streams = 2
        while open_streams:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                buf = key.data
                room = limits.capture_bytes - len(buf)
                buf += chunk[:max(room, 0)]
                if buf is out and len(chunk) > room:
                    limited = True
            if limited:
                break
        if not (timed_out or limited):
            try:  # output closed; the command may still run (e.g. `exec >&-; sleep 60`)
                code = proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out or limited:
            _kill_group(proc.pid)
            proc.wait()
            _wait_gone(lease.uid)  # the namespace's processes are SIGKILLed; make sure before the uid is reused
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    finally:
        usage = group.close() if group else None
        lease.release()
    wall = time.monotonic() - t0
    setup_error = None
    if READY not in err:
        setup_error = err.decode("utf-8", "replace").strip() or f"sandbox exited with {code} before the command ran"
    exit_code = None if (timed_out or limited) else code
    return SandboxResult(out.decode("utf-8", "replace"), exit_code, timed_out, limited, wall, lease.uid, setup_error,
                         usage.oom_kills, usage.memory_peak_bytes, usage.forks_refused)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
