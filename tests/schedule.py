"""The suite's schedule under `make test`: which tests share a process, and in what order they are handed out.

WHY, measured on the 2-core machine:
- The tests that load the machine beyond their own process (marked `model`: the real model's llama.cpp
  server; `cluster`: SLURM's jobs) run in one process, one after another: one work unit. Two llama.cpp
  servers at once on two cores took 187 s and 102 s for the two smoke tests that take 46 s and 41 s
  apart, and beside the SLURM jobs a smoke test took 87 s. Only a worker sees markers, so each worker
  writes the node ids of the marked tests it collected to a folder the controller named (`workerinput`),
  and the controller's scheduler reads them. (xdist's `--dist loadgroup` would do this by renaming node ids, which pytest 9
  no longer lets it do.)
- Every other test goes with its file (module fixtures are built once), as `--dist loadfile` does.
- The longest units are handed out first (the LPT rule), so the short files fill the end. xdist's own order,
  by number of tests, handed the one-test files of the model out last, and one process ended the suite alone.
  The seconds per file are measured: tests/durations.json, refreshed from a run's JUnit report with

      python -m tests.schedule .pytest_cache/suite.xml     # `make test` writes that report

  A file not measured yet counts as the median file, so a new file neither waits to the end nor jumps ahead.
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MEASURED = TESTS / "durations.json"
ONE_PROCESS = ("model", "cluster")  # markers of the tests that run in one process, one at a time
GROUP = "@one-at-a-time"  # their work unit's name


def measured(path: Path | None = None) -> dict[str, float]:
    """Seconds per test file (its name under tests/), as last measured."""
    path = MEASURED if path is None else path
    return json.loads(path.read_text()) if path.is_file() else {}


def weights(names, seconds: dict[str, float]) -> dict[str, float]:
    """Each file's weight: its measured seconds, or the median of the measured files when it has none."""
    known = [seconds[n] for n in names if n in seconds]
    typical = statistics.median(known) if known else 0.0
    return {n: seconds.get(n, typical) for n in names}


def unit(item) -> str:
    """The work unit a test is handed out in: GROUP for a test marked with one of ONE_PROCESS, else its file."""
    marked = hasattr(item, "get_closest_marker") and any(item.get_closest_marker(m) for m in ONE_PROCESS)
    return GROUP if marked else item.path.name


def arrange(items, seconds: dict[str, float] | None = None) -> None:
    """Sort pytest items in place: units by weight, heaviest first (the ONE_PROCESS tests, wherever they are, are one
    unit; a file whose tests two units share weighs in each by its tests there); within a unit the collected order
    is kept."""
    from collections import Counter

    seconds = measured() if seconds is None else seconds
    weight = weights({item.path.name for item in items}, seconds)
    per_file = Counter(item.path.name for item in items)
    total: dict[str, float] = {}  # a unit weighs its share of each file's seconds, by the file's tests it holds
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        total[unit(item)] = total.get(unit(item), 0.0) + weight[item.path.name] / per_file[item.path.name]
        first.setdefault(unit(item), i)
    items.sort(key=lambda item: (-total[unit(item)], first[unit(item)]))  # stable within a unit


def share_folder(config, node) -> None:
    """Controller, per worker (pytest_configure_node): the folder it tells the controller its grouped tests in."""
    import tempfile

    if not hasattr(config, "_schedule_folder"):
        config._schedule_folder = tempfile.mkdtemp(prefix="schedule-")
    node.workerinput["schedule_folder"] = config._schedule_folder


def forget_folder(config) -> None:
    """Controller, at the end (pytest_unconfigure): the folder goes with the session."""
    import shutil

    if getattr(config, "_schedule_folder", None):
        shutil.rmtree(config._schedule_folder, ignore_errors=True)


def tell_controller(config, items) -> None:
    """Worker, after arranging its collection: the node ids of its ONE_PROCESS tests, for the controller's scheduler."""
    folder = getattr(config, "workerinput", {}).get("schedule_folder")
    if folder:
        grouped = [item.nodeid for item in items if unit(item) == GROUP]
        path = Path(folder) / f"{config.workerinput['workerid']}.json"
        path.with_suffix(".tmp").write_text(json.dumps(grouped))
        path.with_suffix(".tmp").replace(path)  # whole, or not there


def scheduler(config, log):
    """xdist's file scheduler (`--dist loadfile`), with the ONE_PROCESS tests of every file in one unit."""
    from xdist.scheduler import LoadFileScheduling

    folder = getattr(config, "_schedule_folder", None)

    class FilesAndTheModel(LoadFileScheduling):
        grouped: set | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.grouped is None:  # read once the workers have collected (schedule() asks for every scope then)
                self.grouped = set()
                for f in (sorted(Path(folder).glob("*.json")) if folder else []):
                    self.grouped.update(json.loads(f.read_text()))
            return GROUP if nodeid in self.grouped else nodeid.split("::", 1)[0]

    return FilesAndTheModel(config, log)


def from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit report (a test case's time includes its setup and teardown)."""
    out: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + ".py"  # tests.test_x -> test_x.py
        out[name] = out.get(name, 0.0) + float(case.get("time") or 0)
    return {k: round(v, 1) for k, v in sorted(out.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python -m tests.schedule JUNIT.xml   (make test writes .pytest_cache/suite.xml)", file=sys.stderr)
        return 2
    seconds = from_junit(Path(argv[0]))
    MEASURED.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{MEASURED.relative_to(TESTS.parent)}: {len(seconds)} files, {sum(seconds.values()):.0f} s of tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
