"""Conclusions a reader can trust (issue 24): each conclusion under each judge, gold errata,
power before paying, the judge probe and retrieval recall joined to answers.

Every expected number is computed here from what the test wrote (closed forms, statsmodels),
never pasted from a run of the analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analysis import run as A
from tests.analysis_fixtures import JUDGE, Stage, run_id, sha256_file
from tests.test_analysis import csv, prereg_file, row

TYPES = ["single-session-user", "multi-session", "temporal-reasoning", "knowledge-update"]


def analyse(tmp_path: Path, prereg: Path, *extra: str, out: str = "results") -> Path:
    out_dir = tmp_path / out
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={out_dir}", f"prereg={prereg}", "replay=none", *extra]) == 0
    return out_dir


def main_stage(tmp_path: Path, sha: str) -> Stage:
    """20 questions, both conditions right on every one under the main judge (H1c: difference 0)."""
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha)
    for i in range(20):
        q = f"q{i:02d}"
        st.add("session_search", q, qtype=TYPES[i % 4], correct=True, prompt=1000, output=100, calls=3)
        st.add("tool_hybrid", q, qtype=TYPES[i % 4], correct=True, prompt=500, output=50, calls=3)
    return st


def second_judge(st: Stage, name: str, wrong: set[str], prompt_source: str = "builtin") -> None:
    """Another judge's file: the main judge's lines with `wrong` runs labelled no."""
    lines = []
    for j in st.judgements:
        j = {**j, "judge": {**j["judge"], "name": name, "identity": f"t:{name}"}, "prompt_source": prompt_source}
        if j["run_id"] in wrong:
            j.update(label=False, reply="no")
        lines.append(j)
    path = st.path / "judgements" / f"{name}.jsonl"
    path.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))


# ------------------------------------------------------------------------------ 1. each conclusion under each judge


def test_a_conclusion_flips_exactly_under_the_judge_built_to_flip_it(tmp_path):
    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.write()
    flipped = {run_id("tool_hybrid", f"q{i:02d}") for i in range(5)}  # 5 of 20 hybrid answers wrong
    second_judge(st, "strict", flipped)
    second_judge(st, "lenient", set())  # agrees with the main judge
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    main = [lab for lab in t["labels"].unique() if lab.startswith("main")]
    assert len(main) == 1 and "lenient" not in set(t["labels"])  # identical labels: the main judge itself
    h1c = t[t["conclusion"] == "H1c"]
    assert row(h1c, labels=main[0])["verdict"] == "supported"
    s = row(h1c, labels="strict")
    assert s["estimate"] == pytest.approx(-100 * 5 / 20) and s["n"] == 20
    assert s["verdict"] == "not supported" and s["robust"] == "flips under strict"
    pair = t[(t["kind"] == "comparison") & (t["labels"] == "strict")]
    assert len(pair) == 1 and pair["estimate"].iloc[0] == pytest.approx(-25.0)
    assert pair["verdict"].iloc[0] == "a < b" and pair["hi"].iloc[0] < 0
    assert not any(t["conclusion"] == "H1b")  # a token ratio does not read judgements: not repeated
    rep = (out / "report.md").read_text()
    head = rep[:rep.index("## Conclusions under each judge")]
    assert "Conclusions that flip under another judge" in head and "H1c: flips under strict" in head


def test_two_prompt_sources_in_one_file_are_two_judges_and_a_sample_counts_only_its_runs(tmp_path):
    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.write()
    # the main judge's file gets a later pass with another prompt file on four runs, all hybrid wrong:
    # the latest line wins for the main analysis, and the older source is a judge of its own
    path = st.path / "judgements" / f"{JUDGE}.jsonl"
    later = []
    for i in range(2):
        for cond, label in (("tool_hybrid", False), ("session_search", True)):
            j = next(x for x in st.judgements if x["run_id"] == run_id(cond, f"q{i:02d}"))
            later.append({**j, "prompt_source": "file:/x/evaluate_qa.py", "label": label, "reply": "no"})
    with open(path, "a") as f:
        f.write("".join(json.dumps(x, sort_keys=True) + "\n" for x in later))
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_robustness.csv")
    labels = set(t["labels"])
    assert f"{JUDGE} [prompts evaluate_qa.py]" in labels and f"{JUDGE} [prompts builtin]" in labels
    only = row(t[t["kind"] == "comparison"], labels=f"{JUDGE} [prompts evaluate_qa.py]")
    assert only["n"] == 2 and only["estimate"] == pytest.approx(-100.0)  # its sample: 2 paired questions
