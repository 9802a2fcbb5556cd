"""The suite's schedule (tests/durations.py): the longest test files are handed out first, as `make test` runs."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from tests import durations

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
    durations.longest_first(got, seconds)
    names = [i.path.name for i in got]
    files = list(dict.fromkeys(names))
    assert sorted(names, key=files.index) == names  # each file's tests together
    w = durations.weights(set(names), seconds)
    assert [w[f] for f in files] == sorted((w[f] for f in files), reverse=True)
    for f in files:  # within a file, the collected order
        assert [i.name for i in got if i.path.name == f] == [t for g, t in layout if g == f]
    known = [seconds[f] for f in set(names) if f in seconds]
    for f in set(names) - set(seconds):
        assert w[f] == (sorted(known)[len(known) // 2] if len(known) % 2 else
                        (sum(sorted(known)[len(known) // 2 - 1:len(known) // 2 + 1]) / 2 if known else 0.0))


def test_a_junit_report_gives_each_files_seconds_setup_included(tmp_path):
    report = tmp_path / "suite.xml"
    report.write_text('<testsuites><testsuite name="pytest">'
                      '<testcase classname="tests.test_a" name="x" time="1.25"/>'
                      '<testcase classname="tests.test_a" name="y" time="2.5"/>'
                      '<testcase classname="tests.test_b" name="z" time="0.5"><skipped/></testcase>'
                      '</testsuite></testsuites>')
    assert durations.from_junit(report) == {"test_a.py": 3.8, "test_b.py": 0.5}


def test_the_measured_files_are_the_suites_own():
    """A file renamed or deleted leaves no stale weight behind (refresh: python -m tests.durations)."""
    suite = {p.name for p in (REPO / "tests").glob("test_*.py")}
    assert set(durations.measured()) <= suite, sorted(set(durations.measured()) - suite)
    assert len(durations.measured()) >= len(suite) // 2  # measured, not an empty file


def test_make_test_hands_the_files_out_longest_first(tmp_path):
    """The Makefile's own pytest options, run on three files: the heaviest file's test runs first although the
    light file has the most tests (xdist's own default order, by number of tests, ran it last)."""
    recipe = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    cmd = shlex.split(next(x for x in recipe.replace("\\\n", " ").splitlines() if " -m pytest " in x))
    opts = [o for o in cmd[cmd.index("pytest") + 1:] if not o.startswith(("--junitxml", "--durations"))]
    opts[opts.index("-n") + 1] = "1"  # one worker: the order it gets the files in is the order they run
    log = tmp_path / "order.log"
    (tmp_path / "conftest.py").write_text(
        "import json, sys\nsys.path.insert(0, %r)\nfrom tests.durations import longest_first\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    longest_first(items, json.loads(%r))\n" % (str(REPO), json.dumps({"test_heavy.py": 60, "test_light.py": 1})))
    (tmp_path / "test_light.py").write_text("".join(f"def test_{i}():\n    open({str(log)!r}, 'a').write('light\\n')\n"
                                                    for i in range(6)))
    (tmp_path / "test_heavy.py").write_text(f"def test_h():\n    open({str(log)!r}, 'a').write('heavy\\n')\n")
    (tmp_path / "test_new.py").write_text("".join(f"def test_{i}():\n    open({str(log)!r}, 'a').write('new\\n')\n"
                                                  for i in range(3)))
    res = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          *opts, str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    ran = log.read_text().split()
    assert list(dict.fromkeys(ran)) == ["heavy", "new", "light"], ran  # the unmeasured file: the median (30.5 s)
