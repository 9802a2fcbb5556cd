"""The suite's schedule (tests/schedule.py): the real model's tests in one process, the longest units handed out
first, as `make test` runs the suite."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests import schedule
from tests.conftest import ONE_THREAD

REPO = Path(__file__).resolve().parents[1]


def items(layout):
    """pytest-like items: (file name, test name) pairs, each with the `path` the sort reads."""
    return [SimpleNamespace(path=Path("/x") / f, name=t) for f, t in layout]


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 5)), min_size=1, max_size=30),
       st.dictionaries(st.sampled_from("abcde"), st.floats(0, 500), max_size=5))
def test_files_go_heaviest_first_a_files_tests_keep_their_order_and_an_unmeasured_file_counts_as_the_median(layout, secs):
    layout = [(f"test_{f}.py", f"t{i}") for f, i in layout]
    seconds = {f"test_{f}.py": s for f, s in secs.items()}
    got = items(layout)
    schedule.arrange(got, seconds)
    names = [i.path.name for i in got]
    files = list(dict.fromkeys(names))
    assert sorted(names, key=files.index) == names  # each file's tests together
    w = schedule.weights(set(names), seconds)
    assert [w[f] for f in files] == sorted((w[f] for f in files), reverse=True)
    for f in files:  # within a file, the collected order
        assert [i.name for i in got if i.path.name == f] == [t for g, t in layout if g == f]
    known = sorted(seconds[f] for f in set(names) if f in seconds)
    half = len(known) // 2
    for f in set(names) - set(seconds):
        assert w[f] == (known[half] if len(known) % 2 else (known[half - 1] + known[half]) / 2 if known else 0.0)


def test_a_junit_report_gives_each_files_seconds_setup_included(tmp_path):
    report = tmp_path / "suite.xml"
    report.write_text('<testsuites><testsuite name="pytest">'
                      '<testcase classname="tests.test_a" name="x" time="1.25"/>'
                      '<testcase classname="tests.test_a" name="y" time="2.5"/>'
                      '<testcase classname="tests.test_b" name="z" time="0.5"><skipped/></testcase>'
                      '</testsuite></testsuites>')
    assert schedule.from_junit(report) == {"test_a.py": 3.8, "test_b.py": 0.5}


def test_the_measured_files_are_the_suites_own():
    """A file renamed or deleted leaves no stale weight behind (refresh: python -m tests.schedule)."""
    suite = {p.name for p in (REPO / "tests").glob("test_*.py")}
    assert set(schedule.measured()) <= suite, sorted(set(schedule.measured()) - suite)
    assert len(schedule.measured()) >= len(suite) // 2  # measured, not an empty file


def make_test_options(workers: str) -> list[str]:
    """The pytest options `make test` passes (its recipe as `make -n` prints it), with `workers` processes."""
    recipe = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    cmd = shlex.split(next(x for x in recipe.replace("\\\n", " ").splitlines() if " -m pytest " in x))
    opts = [o for o in cmd[cmd.index("pytest") + 1:] if not o.startswith(("--junitxml", "--durations"))]
    opts[opts.index("-n") + 1] = workers
    return opts


def run_suite(tmp_path, opts, files: dict[str, str], seconds: dict[str, float], env: dict | None = None):
    """A suite of `files` under tests/conftest.py's own hooks, the measured `seconds` in place of durations.json;
    each test appends `<file> <xdist worker>` to a log, read back in the order the tests ran."""
    log = tmp_path / "order.log"
    measured = tmp_path / "durations.json"
    measured.write_text(json.dumps(seconds))
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nimport pytest\nfrom tests import schedule\n"
        f"schedule.MEASURED = __import__('pathlib').Path({str(measured)!r})\n"
        "from tests.conftest import (pytest_collection_modifyitems, pytest_configure, pytest_configure_node,\n"
        "                            pytest_unconfigure, pytest_xdist_make_scheduler)\n"
        "@pytest.fixture\ndef cluster():\n    yield None  # this suite's stand-in: the test is where the test runs\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    model: the real model\n    cluster: SLURM\n")
    for name, body in files.items():
        (tmp_path / name).write_text(f"import os, pytest\nLOG = {str(log)!r}\n" + body)
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          *opts, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return [line.split() for line in log.read_text().splitlines()]


def logged(tag: str, n: int, mark: str = "") -> str:
    return "".join(f"{mark}def test_{i}():\n    open(LOG, 'a').write('{tag} ' + os.environ.get('PYTEST_XDIST_WORKER', '-')"
                   " + '\\n')\n" for i in range(n))


def test_make_test_hands_the_longest_file_out_first(tmp_path):
    """One process: the heaviest file's test runs first although the light file has the most tests (xdist's own
    default order, by number of tests, ran it last); an unmeasured file counts as the median (30.5 s)."""
    ran = run_suite(tmp_path, make_test_options("1"),
                    {"test_light.py": logged("light", 6), "test_heavy.py": logged("heavy", 1),
                     "test_new.py": logged("new", 3)}, {"test_heavy.py": 60, "test_light.py": 1})
    assert list(dict.fromkeys(tag for tag, _ in ran)) == ["heavy", "new", "light"], ran


def test_make_test_runs_the_models_and_the_clusters_tests_in_one_process_and_the_rest_by_file(tmp_path):
    """Two processes: the `model` and `cluster` tests of three files run in one of them (two llama.cpp servers on
    two cores slowed each other 3-4 times, SLURM's jobs twice); every other file's tests stay together."""
    ran = run_suite(tmp_path, make_test_options("2"),
                    {"test_a.py": logged("a_model", 2, "@pytest.mark.model\n") + logged("a", 4).replace("test_", "test_o"),
                     "test_b.py": logged("b_model", 1, "@pytest.mark.model\n") + logged("b", 4).replace("test_", "test_o"),
                     "test_c.py": "pytestmark = pytest.mark.cluster\n" + logged("c_cluster", 2),
                     "test_d.py": logged("d", 5), "test_e.py": logged("e", 5)},
                    {"test_a.py": 50, "test_b.py": 40, "test_c.py": 30, "test_d.py": 20, "test_e.py": 10})
    where: dict[str, set] = {}
    for tag, worker in ran:
        where.setdefault(tag, set()).add(worker)
    assert len(ran) == 23 and all(len(w) == 1 for w in where.values()), where
    assert where["a_model"] == where["b_model"] == where["c_cluster"] and where["a_model"] <= {"gw0", "gw1"}, where



POOLS = """
def test_pools():
    import json, subprocess, sys
    import numpy, threadpoolctl
    ask = "import json, numpy, threadpoolctl; print(json.dumps([p['num_threads'] for p in threadpoolctl.threadpool_info()]))"
    child = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, check=True).stdout
    here = [p["num_threads"] for p in threadpoolctl.threadpool_info()]
    told = subprocess.run([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
                          capture_output=True, text=True, check=True).stdout
    open(LOG + ".json", "w").write(json.dumps([here, json.loads(child), json.loads(told)]))
    open(LOG, "a").write("pools " + os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
"""


@pytest.mark.parametrize("workers", ["2", "0"])
def test_under_make_tests_processes_every_thread_pool_has_one_thread_and_alone_its_default(tmp_path, workers):
    """Two processes on two cores: numpy's BLAS pool has one thread, in the test and in a command it starts, and the
    local model is told one thread (the pools spin while another process holds the core: the suite took 990 s of
    CPU with the default pools, 918 s with one thread each). One process (TEST_WORKERS=0): the libraries'
    defaults, as a user's own command has them."""
    opts = make_test_options("2")
    if workers == "0":
        opts = [o for o in opts if o not in ("-n", "2", "--dist", "loadfile", "--no-loadscope-reorder")]
    env = {k: v for k, v in os.environ.items() if k not in ONE_THREAD}  # the suite's own setting is not the point
    run_suite(tmp_path, opts, {"test_pools.py": POOLS}, {}, env=env)
    here, child, told = json.loads((tmp_path / "order.log.json").read_text())
    assert here and child, "numpy loads a BLAS pool"
    if workers == "2":  # numpy's pools counted; the others (llama.cpp, tokenizers, torch's OpenMP) told, in a command
        assert set(here) == set(child) == {1}, (here, child)
        assert {k: told.get(k) for k in ONE_THREAD} == ONE_THREAD, told
    else:
        assert not set(ONE_THREAD) & set(told) and os.cpu_count() in here and os.cpu_count() in child, (here, child)
