"""How `make test` hands its tests to the two workers (tests/conftest.py; docs/measurements.md, the suite's budget).

One test at a time unless it must share a worker: the SLURM cluster's tests, and a file's tests that share a
fixture of that file scoped wider than a test. The real-model tests first, then the groups, then the rest;
xdist's own sort by tests per unit is off (it had put the single-test model files last).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
from tests.conftest import _unit, pytest_collection_modifyitems, pytest_configure  # noqa: F401

@pytest.fixture(scope="session")
def cluster():
    yield "the cluster"
"""

TESTS = {
    "test_a_plain": """
def test_one(): pass
def test_two(): pass
""",
    "test_b_shared": """
import pytest

@pytest.fixture(scope="module")
def stage():
    return 1

def test_reads_the_stage(stage): pass
def test_reads_it_too(stage): pass
def test_alone(): pass
""",
    "test_c_cluster": """
import pytest

@pytest.mark.cluster
def test_marked(): pass
def test_asks_for_it(cluster): pass
""",
    "test_d_model": """
import pytest

@pytest.mark.model
def test_slow(): pass
""",
}


def _collected(pytester) -> list:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**TESTS)
    pytester.makeini("[pytest]\nmarkers =\n    model: m\n    cluster: c\n")
    rec = pytester.inline_run("--collect-only")
    return rec.getcalls("pytest_collection_finish")[0].session.items  # in the order they are handed out


def _group(item) -> str | None:
    names = [m.args[0] for m in item.iter_markers("xdist_group")]
    assert len(names) <= 1, names
    return names[0] if names else None


def test_only_what_must_share_a_worker_is_grouped(pytester):
    groups = {item.name: _group(item) for item in _collected(pytester)}
    assert groups["test_marked"] == groups["test_asks_for_it"] == "cluster"
    assert groups["test_reads_the_stage"] == groups["test_reads_it_too"] == "test_b_shared.py"
    assert groups["test_alone"] is None and groups["test_one"] is None and groups["test_two"] is None
    assert groups["test_slow"] is None


def test_the_model_tests_go_first_then_the_groups_then_the_rest(pytester):
    order = [item.name for item in _collected(pytester)]
    assert order[0] == "test_slow"
    grouped = {"test_reads_the_stage", "test_reads_it_too", "test_marked", "test_asks_for_it"}
    assert set(order[1:5]) == grouped, order
    assert order.index("test_reads_the_stage") + 1 == order.index("test_reads_it_too")  # a file's order is kept


def test_xdist_keeps_that_order(pytester):
    pytester.makeconftest(CONFTEST)
    config = pytester.parseconfigure()
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist installed: its sort by unit size is off
        assert config.option.loadscopereorder is False


def test_make_test_groups_and_prints_its_slowest_tests():
    line = next(ln for ln in (REPO / "Makefile").read_text().splitlines() if "-m pytest" in ln and "durations" in ln)
    assert re.search(r"--durations=\d+", line) and "--dist loadgroup" in line, line
