"""Estimated usage is shown as estimated in every table (issue 33): the tables that show tokens, costs or their
ratios are found in the registries (analysis.tables, analysis.personal), so a new table is covered. Stages whose
every model call had estimated usage (the server's counts missing): each such table counts those calls in a
column and marks its section with ~ and the line under it; the same stages with reported usage mark nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from tests import cli
from tests.analysis_fixtures import Stage, sha256_file

USAGE_COLUMN = re.compile(r"(^|_)(tokens?|cost|usd|cny|paid|prompt|output|hit|miss)(_|$)")
USAGE_WORD = re.compile(r"\b(tokens?|cost|USD)\b")
NOTE = "usage estimated in"


def shows_usage(frame: pd.DataFrame) -> bool:
    """By its columns' names, or a column naming what it measures (a test, a metric) as tokens or costs."""
    if any(USAGE_COLUMN.search(str(c)) for c in frame.columns):
        return True
    return any(frame[c].astype(str).str.contains(USAGE_WORD).any()
               for c in ("metric", "test", "tests", "what") if c in frame)


def estimated_column(frame: pd.DataFrame) -> str | None:
    return next((c for c in frame.columns if "usage_estimated" in str(c)), None)


def agent_stages(tmp: Path, estimated: bool) -> Path:
    from tests.test_analysis import prereg_file

    pre = prereg_file(tmp)
    sha = sha256_file(pre)
    main, scale, org = (Stage(tmp / "runs", s, prereg_sha=sha) for s in ("main", "scale", "org"))
    for i in range(6):
        q = f"q{i}"
        for c in ("session_search", "tool_hybrid", "shell"):
            main.add(c, q, correct=i % 2 == 0, prompt=1000 + 100 * i, output=50, calls=2)
            scale.add(c, q, correct=i % 3 == 0, prompt=1500 + 100 * i, output=50, calls=2)
        main.add("shell", q, repeat=1, correct=True, prompt=1200, output=40, calls=2)
        org.add("shared", q, variant="public", correct=True, prompt=1000, output=100)
        org.add("isolated", q, variant="public", correct=i == 0, prompt=800, output=100)
    for st in (main, scale, org):
        if estimated:
            for rec in st.records:
                for c in rec["calls"]:
                    c["usage_estimated"] = True
            for e in st.ledger:
                if e["event"] == "response":
                    e["usage_estimated"] = True
        st.write()
    return pre


def check_marks(registry, res, estimated: bool, figs=None) -> list[str]:
    """Every table of `registry` that shows tokens or costs counts its estimated calls and marks its section (and,
    with `figs`, its figures' captions) exactly when usage was estimated; the names of the tables checked."""
    checked = []
    for t in registry.tables():
        frame = res.table(t.name)
        if frame.empty or not shows_usage(frame):
            continue
        col = estimated_column(frame)
        assert col is not None, f"{t.name} ({getattr(t, 'module', '')}) shows tokens or costs but counts no estimated usage"
        assert (frame[col].fillna(0).sum() > 0) == estimated, (t.name, col)
        if t.section:
            sec = t.section(res)
            assert ("~" in sec and NOTE in sec) == estimated, (t.name, sec[:2000])
        if figs is not None and t.draw:  # its figures' captions say so too
            caps = t.draw(res, figs)
            assert caps and all((NOTE in c) == estimated for c in caps.values()), (t.name, caps)
        checked.append(t.name)
    return checked


@pytest.mark.parametrize("estimated", [True, False])
def test_every_registered_table_showing_tokens_or_costs_marks_estimated_usage(tmp_path, estimated):
    import analysis.run as A
    from analysis import tables as registry

    pre = agent_stages(tmp_path, estimated)
    (tmp_path / "figs").mkdir()
    res = A.analyse(A.parse_args([f"runs={tmp_path / 'runs'}", f"prereg={pre}"]), progress=False)
    checked = check_marks(registry, res, estimated, figs=tmp_path / "figs")
    # the tables this fixture fills: a table that stops showing its usage here is noticed
    assert {"table1", "table2", "table3", "table3_components", "table5", "table6", "tokens", "scale",
            "table2_whole_history", "comparisons", "table3_exploratory"} <= set(checked), checked


@pytest.mark.parametrize("estimated", [True, False])
def test_every_personal_table_showing_tokens_or_costs_marks_estimated_usage_and_the_latency_table_length_cuts(
        tmp_path, estimated):
    """A tiny personal stage whose server reports no usage (estimated) or does, and cuts kernel_shared's answers at
    their token limit: every personal table showing tokens or costs marks the estimates; the latency table counts
    the cut replies per method."""
    from analysis import personal as registry
    from analysis.load import find_folders
    from analysis.personal.report import analyse
    from harness.studies.personal import run as run_personal
    from bench.fake_upstream import is_preflight
    from tests.fake_model import FakeModel
    from tests.personal_helpers import Script, stage_cfg

    script = Script()

    def cut(req):
        out = script(req)
        if "Everything the user has told you" not in str(req["messages"]) and not req.get("response_format") \
                and not is_preflight(req):
            out = {**out, "finish_reason": "length"}  # the assistant's answer of a memory method
        return out

    with FakeModel(script=cut, usage=(lambda pt: None) if estimated else False) as fake:
        rd = run_personal(stage_cfg(tmp_path, fake.base_url, ["naive_concat", "kernel_shared"], n=2,
                                    extra=["index=exact", "stage.concurrency=1"]))
    st = analyse(find_folders([rd.root]), resamples=50)
    checked = check_marks(registry, st, estimated)
    assert "latency" in checked
    lat = st.table("latency").set_index("condition")
    assert lat.loc["kernel_shared", "calls_cut_length"] == 2 and lat.loc["naive_concat", "calls_cut_length"] == 0
    assert "cut at length" in registry.get("latency").section(st)


@pytest.mark.parametrize("estimated", [True, False])
def test_the_results_page_marks_estimated_tokens_and_costs(tmp_path, estimated):
    from analysis import results_page
    from analysis.load import find_folders, load_folder

    agent_stages(tmp_path, estimated)
    folders = find_folders([str(tmp_path / "runs")])
    for f in folders:
        load_folder(f, None)

    class Logs(dict):
        def __missing__(self, key):
            return "log.eval"

    table = results_page.rows(folders, "http://viewer/", Logs())
    assert all((r["usage_estimated_calls"] > 0) == estimated for r in table)
    page = results_page.render(table, ["x"])
    assert (">~" in page and NOTE in page) == estimated


# ------------------------------------------------------------------------------ the judges' session lines

from tests.test_judge import judge_cmd, judge_script, stage_runs  # noqa: E402,F401  (the answer check's stage)
from tests.test_judge import stage as judged_stage  # noqa: E402,F401
from tests.test_breaker import grade, judge as rubric_judge  # noqa: E402
from tests.test_breaker import rubric_stage  # noqa: E402,F401


@pytest.mark.parametrize("estimated", [True, False])
def test_the_answer_checks_session_line_says_when_its_cost_rests_on_estimated_usage(judged_stage, estimated):

    from tests.fake_model import FakeModel

    with FakeModel(script=lambda req: judge_script(req, None), usage=(lambda pt: None) if estimated else False) as fake:
        res = cli.run(judge_cmd(judged_stage, fake), capture_output=True, text=True, timeout=300)
        asked = len(fake.run_requests)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stderr.splitlines() if "this session:" in ln)
    assert (f"usage of {asked} calls estimated" in line) == estimated, line


@pytest.mark.parametrize("estimated", [True, False])
def test_the_rubric_judges_session_line_says_when_its_cost_rests_on_estimated_usage(rubric_stage, capsys, estimated):
    from tests.fake_model import FakeModel

    tmp, _ = rubric_stage
    with FakeModel(script=grade, usage=(lambda pt: None) if estimated else False) as fake:
        code, err = rubric_judge(tmp, fake, capsys)
    assert code == 0, err
    assert "6 calls, $" in err and ("usage of 6 calls estimated" in err) == estimated, err


def test_the_note_under_table6_counts_each_estimated_call_once(tmp_path):
    """Table 6's rows hold per-party, per-folder and grand totals: its note said 60 estimated calls where 15."""
    import analysis.run as A
    from analysis import tables as registry
    from harness.records.ledger import read_ledger

    pre = agent_stages(tmp_path, True)
    res = A.analyse(A.parse_args([f"runs={tmp_path / 'runs'}", f"prereg={pre}"]), progress=False)
    said = re.search(r"usage estimated in ([\d,]+) model calls", registry.get("table6").section(res))
    lines = [e for p in (tmp_path / "runs").rglob("ledger.jsonl") for e in read_ledger(p)]
    n = sum(bool(e.get("event") == "response" and e.get("status") == 200 and e.get("usage_estimated")) for e in lines)
    assert said and n > 0 and int(said[1].replace(",", "")) == n
