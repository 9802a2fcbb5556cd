# =====================================================================================
# Memory space and real services (harness/memory, harness/services).
# Tests marked @pytest.mark.services get the `services` fixture automatically: it starts
# Redis and PostgreSQL when they are absent and, at the end of the session, stops only
# what it started (services already running are left as found).
# =====================================================================================
from __future__ import annotations

import itertools
import os

import pytest


def pytest_configure(config):
    """xdist hands work out in the order pytest_collection_modifyitems leaves (below), not re-sorted by how
    many tests a unit has (its default): that sort put the single-test model files, minutes each, last."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _unit(item) -> str | None:
    """The xdist group a test must share a worker with (`make test` runs `--dist loadgroup`), or None: then
    it is handed out alone, so no long file ends the suite on one worker while the other idles. Grouped:
    the cluster tests (one worker owns the SLURM cluster) and a file with a fixture of its own scoped
    wider than a test (set up once, on one worker, as under `--dist loadfile`)."""
    if item.get_closest_marker("cluster") or "cluster" in item.fixturenames:
        return "cluster"
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if any(d.scope != "function" and d.baseid == module for d in defs):
            return module
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the xdist_group marks into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker in ("services", "cluster"):
            if item.get_closest_marker(marker) and marker not in item.fixturenames:
                item.fixturenames.append(marker)
        unit = _unit(item)
        if unit:
            item.add_marker(pytest.mark.xdist_group(unit))
    # longest first: the real-model tests (minutes each), then the grouped files, then the single tests,
    # so the suite ends on short tests on both workers (stable: the order within each file is kept)
    items.sort(key=lambda item: (not item.get_closest_marker("model"), _unit(item) is None))


def _xdist_controller(config) -> bool:
    return getattr(config.option, "numprocesses", None) not in (None, 0) and not hasattr(config, "workerinput")


def pytest_sessionstart(session):
    """Under pytest-xdist the controller starts the services once, before any worker, so two workers
    never race to initialise the same data directory; each worker's fixture then finds them running."""
    if _xdist_controller(session.config):
        from harness import services as svc

        session.config._memspace_started = svc.up(svc.settings())


def pytest_sessionfinish(session, exitstatus):
    started = getattr(session.config, "_memspace_started", None)
    if started:
        from harness import services as svc

        svc.down(svc.settings(), only=started)


@pytest.fixture(autouse=True)
def plugins_end_with_the_test():
    """A plugin a test loads in this process ($MEMSPACE_PLUGINS under monkeypatch) is forgotten after it,
    module and registry entries alike, as a process would forget it: otherwise a later test of the same
    xdist worker runs a stage with that plugin loaded (the paper preset refuses it)."""
    import sys

    from tests import cli

    modules, state = set(sys.modules), cli.plugin_state()
    yield
    cli._forget_foreign_modules(modules)
    cli.restore_plugins(state)


@pytest.fixture(scope="session")
def services():
    from harness import services as svc

    s = svc.settings()
    started = svc.up(s)
    yield s
    svc.down(s, only=started)


@pytest.fixture(scope="session")
def cluster():
    """The single-node SLURM cluster (harness.cluster), started when absent and stopped at the end if this
    session started it; SLURM_CONF points every command of the tests at it. Tests marked `cluster` get it.
    They share one xdist group (_unit above): one worker owns the cluster for its whole life."""
    from harness import cluster as slurm

    c = slurm.cluster()
    missing = slurm.missing_packages()
    if missing and os.geteuid() != 0:
        pytest.skip(f"SLURM is not installed ({' '.join(missing)}); `make system-deps` as root installs it")
    assert not missing, f"make system-deps should have installed {' '.join(missing)}"
    started = slurm.up(c)
    old = os.environ.get("SLURM_CONF")
    os.environ.update(c.env())
    yield c
    slurm.cancel_all(c)  # whatever a failed test left running
    slurm.down(c, only=started)
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old


_names = itertools.count()


@pytest.fixture
def unique_name():
    """A fresh index/table name per call, so tests never see each other's data."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}_{os.getpid()}_{next(_names)}"

    return make


@pytest.fixture(scope="session")
def minilm_encoder():
    """The embedded encoder with the project's embedding cache (reruns embed nothing)."""
    from harness.memory.encoder import load_encoder

    return load_encoder("minilm")
# ============================ end of memory / services section =======================
