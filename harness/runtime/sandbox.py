"""A transient, read-only sandbox that shows one session store and nothing else.

WHY: the shell condition lets the model run its own commands on its store
(Appendix B: "a transient sandbox with a dynamic user, no network, a read-only
file system that shows only the agent's store, 256 MB of memory and a 20-second
limit, and returns at most 8,000 characters"). No Docker here, so the sandbox
is built from Linux namespaces and resource limits with util-linux tools:

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
                             1,900,000,000 + [0, 65536) (flock lease), no groups,
                             no capabilities, no_new_privs; nosuid mounts
  256 MB memory              RLIMIT_AS = 256 MiB per process (`prlimit --as`)
  fork bombs                 RLIMIT_NPROC = 10 for the leased uid (`prlimit --nproc`)
                             + a PID namespace (`unshare --pid --fork --kill-child`):
                             when its init exits or is killed, every process in it dies
  20 s                       wall clock in the caller; on expiry SIGKILL to the process
                             group (the namespace's init is in it, so the namespace dies);
                             inside, `timeout -s KILL` (limit + 2 s) in case the caller
                             died, and RLIMIT_CPU 20 s
  8,000 characters           the caller reads at most 64 KB (then kills the sandbox) and
                             returns at most 8,000 characters
  other                      RLIMIT_NOFILE 256, RLIMIT_FSIZE 16 MiB, RLIMIT_CORE 0,
                             IPC and UTS namespaces, empty environment

Needs: Linux, root (CAP_SYS_ADMIN for the namespaces and mounts), util-linux
(`unshare`, `setpriv`, `prlimit`, `mount`, `umount`, `pivot_root`; all in
Debian's essential util-linux/mount packages) and the sqlite3 CLI (`apt-get
install -y sqlite3`). `check_sandbox()` says which is missing.

Total memory of one sandbox is bounded by RLIMIT_NPROC x RLIMIT_AS (2.5 GB) plus
the 16 MB /tmp, not by 256 MB: a per-sandbox memory cgroup would bound the sum,
but on this machine the harness's memory cgroup belongs to the machinery that
runs it, so we do not create cgroups.
"""

from __future__ import annotations

import errno
import fcntl
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

UID_BASE = 1_900_000_000
UID_SPAN = 65_536
STATE_DIR = Path(tempfile.gettempdir()) / "memspace-sandbox"
LEASE_DIR = STATE_DIR / "uids"
# One host directory serves as every sandbox's root mount point: each sandbox mounts
# its tmpfs there inside its own mount namespace, so nothing is left on the host.
ROOT_MOUNT = STATE_DIR / "root"
STORE_MOUNT = "/memory/state.db"
READY = b"memspace-sandbox: ready\n"
REQUIRED = ("unshare", "setpriv", "prlimit", "mount", "umount", "pivot_root", "timeout", "sqlite3", "env")


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


# The namespace's init (pid 1): builds the root, pivots into it, runs the command
# as a child under the leased uid, and exits with its status. It stays root and
# in the caller's process group, so killing the group tears the namespace down.
_LAUNCHER = r'''
R="$1"; STORE="$2"; U="$3"; MEM="$4"; NPROC="$5"; CPU="$6"; TMPB="$7"; NOFILE="$8"; WALL="$9"; CMD="${10}"
die() { echo "memspace-sandbox: setup failed: $*" >&2; exit 125; }
mount --make-rprivate / || die "make-rprivate"
mount -t tmpfs -o size=1m,nr_inodes=128,mode=0755 sandbox-root "$R" || die "root tmpfs"
mkdir "$R/usr" "$R/memory" "$R/dev" "$R/tmp" "$R/.old" "$R/proc" "$R/etc" "$R/etc/alternatives" || die "mkdir"
ln -s usr/bin "$R/bin" && ln -s usr/lib "$R/lib" && ln -s usr/lib64 "$R/lib64" && ln -s usr/sbin "$R/sbin" || die "symlinks"
mount --bind /usr "$R/usr" && mount -o remount,bind,ro,nosuid,nodev "$R/usr" || die "bind /usr"
mount -t tmpfs -o ro,size=4k,nr_inodes=2,mode=0755 masked "$R/usr/local" || die "mask /usr/local"
if [ -d /etc/alternatives ]; then  # Debian's awk, which, ... are symlinks through /etc/alternatives
  mount --bind /etc/alternatives "$R/etc/alternatives" && mount -o remount,bind,ro,nosuid,nodev "$R/etc/alternatives" || die "bind /etc/alternatives"
fi
touch "$R/memory/state.db" || die "store mountpoint"
mount --bind "$STORE" "$R/memory/state.db" || die "bind store"
mount -o remount,bind,ro,nosuid,nodev,noexec "$R/memory/state.db" || die "store read-only"
for d in null zero full random urandom; do
  touch "$R/dev/$d" && mount --bind "/dev/$d" "$R/dev/$d" || die "/dev/$d"
done
mount -t tmpfs -o size="$TMPB",nr_inodes=256,mode=1777,nosuid,nodev sandbox-tmp "$R/tmp" || die "/tmp"
mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || die "proc"
cd "$R" && pivot_root . .old || die "pivot_root"
umount -l /.old && rmdir /.old || die "detach old root"
umount /proc && rmdir /proc || die "unmount proc"
mount -o remount,bind,ro / || die "root read-only"
cd /memory || die "cd"
echo "memspace-sandbox: ready" >&2
/usr/bin/timeout -s KILL "$WALL" /usr/bin/prlimit --as="$MEM" --nproc="$NPROC" --cpu="$CPU" --nofile="$NOFILE" --fsize="$TMPB" --core=0 -- \
  /usr/bin/setpriv --reuid="$U" --regid="$U" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- \
  /usr/bin/env -i PATH=/usr/bin:/bin HOME=/memory TMPDIR=/tmp LANG=C.UTF-8 /bin/sh -c "$CMD" </dev/null 2>&1
exit $?
'''

_check_lock = threading.Lock()
_checked: bool = False


def check_sandbox() -> None:
    """Raise SandboxUnavailable with a clear reason unless a trivial sandboxed command works."""
    global _checked
    with _check_lock:
        if _checked:
            return
        if os.name != "posix" or not Path("/proc/self/ns/mnt").exists():
            raise SandboxUnavailable("the shell sandbox needs Linux namespaces (Linux only)")
        if os.geteuid() != 0:
            raise SandboxUnavailable(
                "the shell sandbox needs root (CAP_SYS_ADMIN) to create mount/network/pid namespaces "
                "and switch to a dynamic uid; run the harness as root or in a privileged container")
        missing = [b for b in REQUIRED if not _which(b)]
        if missing:
            hint = " (apt-get install -y sqlite3)" if "sqlite3" in missing else " (Debian util-linux/mount)"
            raise SandboxUnavailable(f"the shell sandbox needs {', '.join(missing)} on PATH{hint}")
        probe_dir = Path(tempfile.mkdtemp(prefix="memspace-sbx-check-"))
        store = probe_dir / "probe.db"
        store.write_bytes(b"")
        try:
            res = run_sandboxed("sqlite3 -version && test ! -e /etc/passwd && test ! -e /work && echo ok", store,
                                _skip_check=True)
        finally:
            shutil.rmtree(probe_dir, ignore_errors=True)
        if res.setup_error or res.exit_code != 0 or not res.output.rstrip().endswith("ok"):
            raise SandboxUnavailable(
                "the shell sandbox could not be built here: "
                f"{res.setup_error or res.output.strip()[-500:] or f'exit {res.exit_code}'} "
                "(needs root with CAP_SYS_ADMIN, unprivileged namespaces allowed by the container, util-linux)")
        _checked = True


def _which(name: str) -> str | None:
    return shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


class _UidLease:
    """A uid no other sandbox on this machine uses for the duration of one call.

    The lowest free uid from UID_BASE is taken with a non-blocking flock on a
    lease file (kept, so only as many files exist as sandboxes ever ran at once).
    """

    def __init__(self) -> None:
        LEASE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i in range(UID_SPAN):
            uid = UID_BASE + i
            f = open(LEASE_DIR / f"{uid}.lock", "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                f.close()
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    continue
                raise
            self.uid, self._f = uid, f
            return
        raise RuntimeError("no free sandbox uid")

    def release(self) -> None:
        self._f.close()


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


def run_sandboxed(command: str, store: Path, limits: Limits = LIMITS, *, _skip_check: bool = False) -> SandboxResult:
    """Run `command` with /bin/sh in a fresh sandbox showing `store` read-only at /memory/state.db."""
    if not _skip_check:
        check_sandbox()
    store = Path(store).resolve()
    if not store.is_file():
        raise FileNotFoundError(store)
    lease = _UidLease()
    root = ROOT_MOUNT
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = [
        _which("unshare") or "unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--",
        "/bin/sh", "-c", _LAUNCHER, "memspace-sandbox",
        str(root), str(store), str(lease.uid), str(limits.memory_bytes), str(limits.nproc), str(limits.cpu_s),
        str(limits.tmp_bytes), str(limits.nofile), str(int(limits.wall_s) + 2), command,
    ]
    t0 = time.monotonic()
    out = bytearray()
    err = bytearray()
    timed_out = limited = False
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
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
        code = None
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
        lease.release()
    wall = time.monotonic() - t0
    setup_error = None
    if READY not in err:
        setup_error = err.decode("utf-8", "replace").strip() or f"sandbox exited with {code} before the command ran"
    exit_code = None if (timed_out or limited) else code
    return SandboxResult(out.decode("utf-8", "replace"), exit_code, timed_out, limited, wall, lease.uid, setup_error)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
