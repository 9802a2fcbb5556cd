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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("services") and "services" not in item.fixturenames:
            item.fixturenames.append("services")


@pytest.fixture(scope="session")
def services():
    from harness import services as svc

    s = svc.settings()
    started = svc.up(s)
    yield s
    svc.down(s, only=started)


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
