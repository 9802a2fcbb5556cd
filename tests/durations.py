"""The suite's schedule: the test files with the longest measured time are handed out first.

WHY: `make test` runs two processes that take a file at a time (pytest-xdist, `--dist loadfile`). Handed
out by their number of tests (xdist's default order), the files of one long test (a real local model's
stage, up to a minute) came last, and one process ended the suite alone while the other core idled.
Longest first (the LPT rule) leaves the short files to fill the end. The seconds per file are measured:
`tests/durations.json`, refreshed from a run's JUnit report with

    python -m tests.durations .pytest_cache/suite.xml     # `make test` writes that report

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


def measured(path: Path = MEASURED) -> dict[str, float]:
    """Seconds per test file (its name under tests/), as last measured."""
    return json.loads(path.read_text()) if path.is_file() else {}


def weights(names, seconds: dict[str, float]) -> dict[str, float]:
    """Each file's weight: its measured seconds, or the median of the measured files when it has none."""
    known = [seconds[n] for n in names if n in seconds]
    typical = statistics.median(known) if known else 0.0
    return {n: seconds.get(n, typical) for n in names}


def longest_first(items, seconds: dict[str, float] | None = None) -> None:
    """Sort pytest items in place: files by weight, heaviest first; within a file the order is kept."""
    seconds = measured() if seconds is None else seconds
    weight = weights({item.path.name for item in items}, seconds)
    first = {}
    for i, item in enumerate(items):
        first.setdefault(item.path.name, i)
    items.sort(key=lambda item: (-weight[item.path.name], first[item.path.name]))  # stable within a file


def from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit report (a test case's time includes its setup and teardown)."""
    out: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        name = case.get("classname", "").split(".")[-1] + ".py"  # tests.test_x -> test_x.py
        out[name] = out.get(name, 0.0) + float(case.get("time") or 0)
    return {k: round(v, 1) for k, v in sorted(out.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print("usage: python -m tests.durations JUNIT.xml   (make test writes .pytest_cache/suite.xml)", file=sys.stderr)
        return 2
    seconds = from_junit(Path(argv[0]))
    MEASURED.write_text(json.dumps(seconds, indent=1) + "\n")
    print(f"{MEASURED.relative_to(TESTS.parent)}: {len(seconds)} files, {sum(seconds.values()):.0f} s of tests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
