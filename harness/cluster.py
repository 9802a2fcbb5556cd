"""A real single-node SLURM cluster, started by the project for its tests (SPEC 11).

WHY: the cluster path (Hydra's submitit launcher, shards as jobs, preemption, requeue) is only
tested when a real scheduler runs the jobs. Debian's packages (slurmctld, slurmd, munge,
slurmdbd, MariaDB) run as one user from files under `.services/slurm` of the checkout
(MEMSPACE_SERVICES_DIR), no systemd, no cgroups:

    munge/      munged's key, socket, PID, seed and log (slurm.conf names the socket)
    mariadb/    MariaDB's data directory, socket, PID and log (the accounting database)
    etc/        slurm.conf and slurmdbd.conf (mode 600: it holds the database password)
    state/ spool/ log/ run/   slurmctld's state, slurmd's spool, the daemons' logs and PIDs

Everything listens on 127.0.0.1 only, on ports env vars can change so two checkouts coexist:
MEMSPACE_SLURMCTLD_PORT (16817), MEMSPACE_SLURMD_PORT (16818), MEMSPACE_SLURMDBD_PORT
(16819), MEMSPACE_MARIADB_PORT (13306). The node offers MEMSPACE_SLURM_CPUS CPUs (default 4,
more than the machine may have: `config_overrides`) and MEMSPACE_SLURM_MEM_MB memory. Two
partitions: `low` (the default; its jobs are preempted and requeued, 5 s grace) and `high`.
Commands reach the cluster through SLURM_CONF=<root>/etc/slurm.conf (`env` prints it).

`up` is idempotent (what already answers is left alone); `down` cancels every job first (a
stopped slurmd leaves running jobs alive), then stops each daemon by its PID, never by name.

    python -m harness.cluster up | down | status | env
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.services import REPO, HOST, ServiceError, _alive, _port_busy, _read_pid, _stop_pid

# Debian package -> a binary it installs (the Makefile's system-deps installs the packages)
PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "slurm-client": "sbatch", "munge": "munged",
            "slurmdbd": "slurmdbd", "mariadb-server-core": "mariadbd", "mariadb-client-core": "mariadb"}
CLUSTER = "memspace"
DB_USER = "slurm"
# (name, PID-file attribute, what its command line contains), in start order; stopped in reverse
DAEMONS = (("munged", "munge_pid", "munged"), ("mariadb", "db_pid", "mariadbd"),
           ("slurmdbd", "dbd_pid", "slurmdbd"), ("slurmctld", "ctld_pid", "slurmctld"),
           ("slurmd", "slurmd_pid", "slurmd"))


@dataclass(frozen=True)
class Cluster:
    root: Path  # .services/slurm
    ctld_port: int
    slurmd_port: int
    dbd_port: int
    db_port: int
    cpus: int
    mem_mb: int

    @classmethod
    def from_env(cls) -> "Cluster":
        e = os.environ.get
        services = Path(e("MEMSPACE_SERVICES_DIR", REPO / ".services")).absolute()
        return cls(root=services / "slurm", ctld_port=int(e("MEMSPACE_SLURMCTLD_PORT", "16817")),
                   slurmd_port=int(e("MEMSPACE_SLURMD_PORT", "16818")),
                   dbd_port=int(e("MEMSPACE_SLURMDBD_PORT", "16819")),
                   db_port=int(e("MEMSPACE_MARIADB_PORT", "13306")), cpus=int(e("MEMSPACE_SLURM_CPUS", "4")),
                   mem_mb=int(e("MEMSPACE_SLURM_MEM_MB", "8000")))

    # -- files -------------------------------------------------------------------------
    def p(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    @property
    def conf(self) -> Path:
        return self.p("etc", "slurm.conf")

    @property
    def munge_socket(self) -> Path:
        return self.p("munge", "munge.socket")

    @property
    def db_socket(self) -> Path:
        return self.p("mariadb", "mariadb.sock")

    munge_pid = property(lambda self: self.p("munge", "munged.pid"))
    db_pid = property(lambda self: self.p("mariadb", "mariadb.pid"))
    dbd_pid = property(lambda self: self.p("run", "slurmdbd.pid"))
    ctld_pid = property(lambda self: self.p("run", "slurmctld.pid"))
    slurmd_pid = property(lambda self: self.p("run", "slurmd.pid"))

    def env(self) -> dict[str, str]:
        """What a command needs to reach this cluster (sbatch, squeue, submitit)."""
        return {"SLURM_CONF": str(self.conf)}


def cluster() -> Cluster:
    return Cluster.from_env()


# ---------------------------------------------------------------------------------------
# installation and configuration


def missing_packages() -> list[str]:
    """The Debian packages whose binaries are not found (empty when the cluster can start)."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [pkg for pkg, binary in PACKAGES.items() if shutil.which(binary, path=path) is None]


def _which(binary: str) -> str:
    found = shutil.which(binary, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if not found:
        raise ServiceError(f"{binary} not found: install {' '.join(PACKAGES)} (make system-deps as root)")
    return found


def _user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def slurm_conf(c: Cluster) -> str:
    me = _user()
    return "\n".join([
        f"ClusterName={CLUSTER}", "SlurmctldHost=localhost", f"SlurmctldPort={c.ctld_port}",
        f"SlurmdPort={c.slurmd_port}", f"SlurmUser={me}", f"SlurmdUser={me}",
        "AuthType=auth/munge", "CredType=cred/munge",
        # cred_expire=5 (the minimum): a requeued job starts again after seconds, not ~135 s
        f"AuthInfo=socket={c.munge_socket},cred_expire=5",
        f"StateSaveLocation={c.p('state')}", f"SlurmdSpoolDir={c.p('spool')}",
        f"SlurmctldPidFile={c.ctld_pid}", f"SlurmdPidFile={c.slurmd_pid}",
        f"SlurmctldLogFile={c.p('log', 'slurmctld.log')}", f"SlurmdLogFile={c.p('log', 'slurmd.log')}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "SchedulerType=sched/backfill",
        # look at the queue every second: a requeued job starts as soon as its begin time passes
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        # a job no node can run is refused at submission; a requeued or cancelled job is killed 5 s after SIGTERM
        "MpiDefault=none", "EnforcePartLimits=ALL", "ReturnToService=2", "InactiveLimit=0", "KillWait=5",
        "MinJobAge=300",
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny", "MailProg=/bin/true",
        "SlurmdParameters=config_overrides",
        "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
        f"AccountingStoragePort={c.dbd_port}", f"AccountingStoragePass={c.munge_socket}",
        "JobCompType=jobcomp/none",
        # a job of the high partition preempts the low partition's: requeued, told first (submitit's USR2)
        "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE", "SlurmctldParameters=preempt_send_user_signal",
        f"NodeName=localhost NodeAddr={HOST} CPUs={c.cpus} RealMemory={c.mem_mb} State=UNKNOWN",
        "PartitionName=low Nodes=localhost Default=YES MaxTime=INFINITE State=UP PriorityTier=1 "
        "PreemptMode=REQUEUE GraceTime=5",
        "PartitionName=high Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF",
        ""])


def _dbd_loopback() -> list[str]:
    """slurmdbd 22.05 listens on every interface, or with NoInAddrAny on the address this machine's host name
    resolves to: asked only where that is a loopback address (slurmctld reaches it at localhost)."""
    try:
        loopback = socket.gethostbyname(socket.gethostname()).startswith("127.")
    except OSError:
        loopback = False
    return ["CommunicationParameters=NoInAddrAny"] if loopback else []


def slurmdbd_conf(c: Cluster, password: str) -> str:
    me = _user()
    return "\n".join([
        "AuthType=auth/munge", f"AuthInfo=socket={c.munge_socket}", "DbdHost=localhost", f"DbdPort={c.dbd_port}",
        *_dbd_loopback(),
        f"SlurmUser={me}", f"PidFile={c.dbd_pid}", f"LogFile={c.p('log', 'slurmdbd.log')}",
        "StorageType=accounting_storage/mysql", f"StorageHost={HOST}", f"StoragePort={c.db_port}",
        f"StorageUser={DB_USER}", f"StoragePass={password}", "StorageLoc=slurm_acct_db", ""])


def _socket_fits(path: Path) -> None:
    if len(str(path)) > 100:  # sun_path holds 108 bytes
        raise ServiceError(f"socket path too long for a unix socket ({len(str(path))} bytes): {path}; "
                           "set MEMSPACE_SERVICES_DIR to a shorter folder")


def _write_files(c: Cluster) -> str:
    """The folders, munge key and configuration files; returns the database password (kept across `up`s)."""
    for sub in ("munge", "mariadb", "etc", "state", "spool", "log", "run"):
        c.p(sub).mkdir(parents=True, exist_ok=True)
    os.chmod(c.root, 0o700)
    os.chmod(c.p("munge"), 0o700)
    _socket_fits(c.munge_socket)
    _socket_fits(c.db_socket)
    key = c.p("munge", "munge.key")
    if not key.exists():
        subprocess.run([_which("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
    os.chmod(key, 0o600)
    pw_file = c.p("etc", "db.password")
    if not pw_file.exists():
        pw_file.write_text(secrets.token_hex(16))
        os.chmod(pw_file, 0o600)
    password = pw_file.read_text().strip()
    c.conf.write_text(slurm_conf(c))
    dbd = c.p("etc", "slurmdbd.conf")
    dbd.write_text(slurmdbd_conf(c, password))
    os.chmod(dbd, 0o600)  # slurmdbd refuses a readable one
    return password


# ---------------------------------------------------------------------------------------
# the daemons


def running(c: Cluster) -> dict[str, int | None]:
    """Each daemon's live PID (from its PID file), or None."""
    out = {}
    for name, attr, cmd in DAEMONS:
        pid = _read_pid(getattr(c, attr))
        out[name] = pid if pid and _alive(pid, cmd) else None
    return out


def _log_tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _wait(what: str, ok, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.05)
    raise ServiceError(f"{what} did not come up within {timeout:.0f} s:\n{_log_tail(log)}")


def _cli(c: Cluster, *cmd: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {**os.environ, **c.env()}
    r = subprocess.run([_which(cmd[0]), *cmd[1:]], env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if check and r.returncode:
        raise ServiceError(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


def _detach(cmd: list[str], log: Path) -> None:
    """Start a daemon that does not fork by itself (mariadbd), in its own session."""
    with open(log, "ab") as out:
        subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                         env={**os.environ, **{"TZ": "UTC"}})


def _munge_up(c: Cluster) -> None:
    subprocess.run([_which("munged"), f"--socket={c.munge_socket}", f"--key-file={c.p('munge', 'munge.key')}",
                    f"--pid-file={c.munge_pid}", f"--seed-file={c.p('munge', 'munged.seed')}",
                    f"--log-file={c.p('munge', 'munged.log')}", "--force"],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    _wait("munged", lambda: running(c)["munged"] and c.munge_socket.exists(), 10, c.p("munge", "munged.log"))


def _db_up(c: Cluster, password: str) -> None:
    data = c.p("mariadb", "data")
    log = c.p("log", "mariadb.log")
    root_opt = ["--user=" + _user()] if os.geteuid() == 0 else []
    if not (data / "mysql").is_dir():
        shutil.rmtree(data, ignore_errors=True)
        r = subprocess.run([_which("mariadb-install-db"), "--no-defaults", f"--datadir={data}", *root_opt,
                            "--auth-root-authentication-method=normal", "--skip-test-db"],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode:
            raise ServiceError(f"mariadb-install-db failed:\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    if _port_busy(c.db_port):
        raise ServiceError(f"port {c.db_port} is taken by a process that is not our MariaDB; set MEMSPACE_MARIADB_PORT")
    _detach([_which("mariadbd"), "--no-defaults", f"--datadir={data}", f"--socket={c.db_socket}",
             f"--port={c.db_port}", f"--bind-address={HOST}", f"--pid-file={c.db_pid}", f"--log-error={log}",
             *root_opt, "--skip-log-bin", "--innodb-buffer-pool-size=64M", "--skip-name-resolve"], log)
    _wait("MariaDB", lambda: running(c)["mariadb"] and c.db_socket.exists(), 30, log)
    sql = (f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{HOST}' IDENTIFIED BY '{password}'; "
           f"ALTER USER '{DB_USER}'@'{HOST}' IDENTIFIED BY '{password}'; "
           f"GRANT ALL ON slurm_acct_db.* TO '{DB_USER}'@'{HOST}'; FLUSH PRIVILEGES;")
    r = subprocess.run([_which("mariadb"), "--no-defaults", f"--socket={c.db_socket}", "-uroot", "-e", sql],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode:
        raise ServiceError(f"could not create the accounting user in MariaDB: {r.stderr.strip()}")


@contextmanager
def _serial(c: Cluster):
    """One `up` or `down` at a time per cluster (two test processes may ask at once)."""
    c.root.mkdir(parents=True, exist_ok=True)
    with open(c.root / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def up(c: Cluster | None = None) -> list[str]:
    """Start what is not running; return the daemons this call started (on failure, stop those again)."""
    c = c or cluster()
    with _serial(c):
        return _up(c)


def _up(c: Cluster) -> list[str]:
    if missing_packages():
        raise ServiceError(f"SLURM is not installed (missing {' '.join(missing_packages())}): "
                           "run `make system-deps` as root, or apt-get install them")
    have = running(c)
    for name, port in (("slurmctld", c.ctld_port), ("slurmd", c.slurmd_port), ("slurmdbd", c.dbd_port)):
        if not have[name] and _port_busy(port):
            raise ServiceError(f"port {port} is taken by a process that is not our {name} "
                               f"(no live PID under {c.p('run')}); set MEMSPACE_{name.upper()}_PORT")
    started: list[str] = []
    env = {**os.environ, **c.env()}
    try:
        password = _write_files(c)
        if not have["munged"]:
            _munge_up(c)
            started.append("munged")
        if not have["mariadb"]:
            _db_up(c, password)
            started.append("mariadb")
        if not have["slurmdbd"]:
            subprocess.run([_which("slurmdbd")], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
            started.append("slurmdbd")
            _wait("slurmdbd", lambda: running(c)["slurmdbd"] and _port_busy(c.dbd_port), 30, c.p("log", "slurmdbd.log"))
        if not have["slurmctld"]:
            subprocess.run([_which("slurmctld"), "-f", str(c.conf)], env=env, check=True, capture_output=True,
                           stdin=subprocess.DEVNULL)
            started.append("slurmctld")
            _wait("slurmctld", lambda: _cli(c, "scontrol", "ping", check=False).returncode == 0
                  and "UP" in _cli(c, "scontrol", "ping", check=False).stdout, 30, c.p("log", "slurmctld.log"))
        if not have["slurmd"]:
            subprocess.run([_which("slurmd"), "-f", str(c.conf), "-N", "localhost"], env=env, check=True,
                           capture_output=True, stdin=subprocess.DEVNULL)
            started.append("slurmd")
        _wait("the node", lambda: _node_ready(c), 30, c.p("log", "slurmd.log"))
    except subprocess.CalledProcessError as exc:
        _down(c, started)
        raise ServiceError(f"{exc.cmd[0]} failed to start ({exc.returncode}): "
                           f"{(exc.stderr or b'').decode(errors='replace').strip()}") from None
    except BaseException:
        _down(c, started)  # leave things as found
        raise
    return started


def _node_ready(c: Cluster) -> bool:
    r = _cli(c, "sinfo", "-h", "-N", "-o", "%t", check=False)
    return r.returncode == 0 and r.stdout.strip().split("\n")[0].rstrip("*") in ("idle", "mix", "alloc")


def cancel_all(c: Cluster, timeout: float = 30) -> int:
    """Cancel every job of the cluster and wait until none runs; returns how many there were."""
    if not running(c)["slurmctld"]:
        return 0
    jobs = _cli(c, "squeue", "-h", "-o", "%A", check=False).stdout.split()
    if not jobs:
        return 0
    _cli(c, "scancel", "--full", *sorted(set(jobs)), check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _cli(c, "squeue", "-h", "-o", "%A", check=False).stdout.strip():
        time.sleep(0.1)
    return len(set(jobs))


def down(c: Cluster | None = None, only: list[str] | None = None) -> list[str]:
    """Cancel the jobs (a stopped slurmd leaves them running), then stop each daemon by its PID."""
    c = c or cluster()
    with _serial(c):
        return _down(c, only)


def _down(c: Cluster, only: list[str] | None) -> list[str]:
    if only is None or "slurmctld" in only:
        cancel_all(c)
    stopped = []
    pids = running(c)
    for name, attr, cmd in reversed(DAEMONS):
        if (only is not None and name not in only) or not pids[name]:
            continue
        _stop_pid(pids[name], cmd, signal.SIGTERM)
        getattr(c, attr).unlink(missing_ok=True)
        stopped.append(name)
    return stopped


def status(c: Cluster | None = None) -> dict:
    c = c or cluster()
    pids = running(c)
    st: dict = {"root": str(c.root), "conf": str(c.conf), "daemons": pids,
                "ports": {"slurmctld": c.ctld_port, "slurmd": c.slurmd_port, "slurmdbd": c.dbd_port,
                          "mariadb": c.db_port}}
    if pids["slurmctld"]:
        st["partitions"] = _cli(c, "sinfo", "-h", "-o", "%P %a %l %D %t %c", check=False).stdout.strip()
        st["jobs"] = _cli(c, "squeue", "-h", check=False).stdout.strip()
    return st


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.cluster")
    ap.add_argument("cmd", choices=["up", "down", "status", "env"])
    args = ap.parse_args(argv)
    c = cluster()
    try:
        if args.cmd == "up":
            t = time.monotonic()
            started = up(c)
            print(f"started: {', '.join(started) if started else 'nothing (already up)'} "
                  f"({time.monotonic() - t:.1f} s); to use it: export SLURM_CONF={c.conf}")
            return 0
        elif args.cmd == "down":
            stopped = down(c)
            print("stopped: " + (", ".join(stopped) if stopped else "nothing (not running)"))
            return 0
        elif args.cmd == "env":
            print(f"export SLURM_CONF={c.conf}")
            return 0
        st = status(c)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, pid in st["daemons"].items():
        print(f"{name:<10} {'up    pid ' + str(pid) if pid else 'down'}")
    print(f"ports {st['ports']}; files under {st['root']}")
    if "partitions" in st:
        print("partitions (name avail timelimit nodes state cpus):\n" + st["partitions"])
        print("jobs:\n" + (st["jobs"] or "(none)"))
    return 0 if all(st["daemons"].values()) else 3


if __name__ == "__main__":
    sys.exit(main())
