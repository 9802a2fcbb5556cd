# =====================================================================================
# Memory space and real services (harness/memory, harness/services).
# Tests marked @pytest.mark.services get the `services` fixture automatically: it starts
# Redis and PostgreSQL when they are absent and, at the end of the session, stops only
# what it started (services already running are left as found).
# =====================================================================================
from __future__ import annotations

import itertools
import os
import signal

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker in ("services", "cluster"):
            if item.get_closest_marker(marker) and marker not in item.fixturenames:
                item.fixturenames.append(marker)
    # the model's and the cluster's tests in one process, the longest units first (tests/schedule.py): `make test` hands
    # them out in this order (--no-loadscope-reorder), so the short files fill the end
    from tests import schedule

    schedule.arrange(items)
    schedule.tell_controller(config, items)


# the thread pools of the libraries the tests load (OpenMP: torch, llama.cpp's build; OpenBLAS and MKL: numpy, scipy;
# Rust's rayon: Hugging Face tokenizers, which the encoders' tokenizers use) and the value that gives each one thread
ONE_THREAD = {"MEMSPACE_LOCAL_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def pytest_configure(config):
    """Under two or more test processes on two cores each has at most one core, so every thread pool gets one
    thread, in this process and the commands it starts: the local model's llama.cpp threads
    (harness.endpoints.local_model.default_threads) stall at every layer waiting for the core another process holds
    (the smoke runs: 120 s with two threads beside a busy core, 45 s with one), and the BLAS and OpenMP pools of
    numpy, scipy and torch spin while they wait (the suite without the model's and the cluster's tests: 990 s of
    CPU and 519 s with their default pools, 918 s and 485 s with one thread each). Set before a worker imports
    numpy or torch (conftest is read before the test modules); a variable already set is left as it is."""
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers > 1:
        for name, value in ONE_THREAD.items():
            os.environ.setdefault(name, value)


def pytest_configure_node(node):
    """Controller: where each worker tells it the model's and the cluster's tests it collected (tests/schedule.py)."""
    from tests import schedule

    schedule.share_folder(node.config, node)


def pytest_unconfigure(config):
    from tests import schedule

    schedule.forget_folder(config)


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (make test): each file is a unit, but the model's and the cluster's tests are one."""
    if config.getvalue("dist") == "loadfile":
        from tests import schedule

        return schedule.scheduler(config, log)
    return None


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
    xdist worker runs a stage with that plugin loaded (the paper preset refuses it). What a module changed in
    the tree's modules cannot be forgotten: a test that leaves the texts the model reads changed (the system
    prompt, the cut) fails itself, here, instead of the preset stage a later test of the worker runs."""
    import sys

    from harness.run.lock import model_texts
    from tests import cli

    modules, state = set(sys.modules), cli.plugin_state()
    texts = {**model_texts(set(), False), **model_texts(set(), True)}
    # Ctrl-C's handling ends with the test too: a test that sets SIGINT's handler (the Ctrl-C tests) or a library
    # that leaves it ignored or blocked would make every later Ctrl-C test of the worker wait for nothing
    sigint = signal.getsignal(signal.SIGINT)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    signal.signal(signal.SIGINT, sigint)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    cli._forget_foreign_modules(modules)
    cli.restore_plugins(state)
    after = {**model_texts(set(), False), **model_texts(set(), True)}
    changed = sorted(k for k in texts if texts[k] != after[k])
    assert not changed, f"the test left the texts the model reads changed in this process: {changed}"


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
    Keep them in one file: under `--dist loadfile` one worker owns the cluster for its whole life."""
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
