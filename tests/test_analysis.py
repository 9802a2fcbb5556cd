"""`make analyze` on run folders written by hand with known answers.

Every expected number below is computed in the test from the inputs it wrote (sums,
counts, a binomial tail from scipy, Holm by hand) -- never pasted from a run of the
analysis. Resamples are few except where the count itself is what is tested.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import binomtest

from analysis import run as A
from tests.analysis_fixtures import JUDGE, OFF_PEAK_TS, ON_PEAK_TS, Stage, run_id, sha256_file

REPO = Path(__file__).resolve().parents[1]
B_SECONDARY, B_PRIMARY = 200, 400
TYPES = ["single-session-user", "multi-session", "temporal-reasoning", "knowledge-update"]


# ------------------------------------------------------------------------------ helpers


def prereg_file(tmp_path: Path, name: str = "hypotheses.yaml", edit=None) -> Path:
    """The project's hypotheses file with few resamples (and an optional edit)."""
    data = yaml.safe_load((REPO / "conf" / "prereg" / "hypotheses.yaml").read_text())
    data["settings"]["resamples"] = B_SECONDARY
    data["settings"]["primary_resamples"] = B_PRIMARY
    if edit:
        edit(data)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def analyse(tmp_path: Path, prereg: Path, *extra: str, out: str = "results") -> Path:
    out_dir = tmp_path / out
    code = A.main([f"runs={tmp_path / 'runs'}", f"out={out_dir}", f"prereg={prereg}", *extra])
    assert code == 0
    return out_dir


def csv(out: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(out / name, keep_default_na=False, na_values=[""])


def row(df: pd.DataFrame, **match) -> pd.Series:
    m = pd.Series(True, index=df.index)
    for k, v in match.items():
        m &= df[k].astype(str) == str(v)
    sel = df[m]
    assert len(sel) == 1, f"{len(sel)} rows match {match}"
    return sel.iloc[0]


def holm_by_hand(ps: dict[str, float]) -> dict[str, float]:
    order = sorted(ps, key=lambda k: ps[k])
    m, out, running = len(ps), {}, 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (m - i) * ps[k]))
        out[k] = running
    return out


# ------------------------------------------------------------------------------ Table 1


def build_table1_stage(tmp_path: Path, sha: str) -> dict:
    """20 questions; tool_hybrid costs exactly half of session search; known discordant pairs."""
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha)
    hybrid_only, ss_only = {f"q{i:02d}" for i in range(1, 7)}, {"q00"}
    truth = {}
    for i in range(20):
        q = f"q{i:02d}"
        qtype = TYPES[i % 4]
        ss_ok, hy_ok = q not in hybrid_only, q not in ss_only
        truth[q] = (qtype, ss_ok, hy_ok)
        st.add("session_search", q, qtype=qtype, correct=ss_ok, prompt=1000 * (i + 1), output=100, calls=3,
               tool_calls=2, wall_s=2.0 + 0.1 * i)
        st.add("tool_hybrid", q, qtype=qtype, correct=hy_ok, prompt=500 * (i + 1), output=50, calls=3, tool_calls=1,
               wall_s=1.0 + 0.05 * i)
        if i < 5:
            st.add("none", q, qtype=qtype, correct=False, prompt=200, output=20, calls=1, wall_s=0.3)
        if i < 10:  # prefetch ran on 10 questions only: paired on those
            st.add("prefetch", q, qtype=qtype, correct=True, prompt=300 + 7 * i, output=20, calls=1, tool_calls=0,
                   wall_s=0.5)
    st.write()
    return truth


def test_table1_ratios_accuracy_and_mcnemar_from_known_runs(tmp_path):
    pre = prereg_file(tmp_path)
    truth = build_table1_stage(tmp_path, sha256_file(pre))
    out = analyse(tmp_path, pre)
    t1 = csv(out, "table1.csv")

    ss = row(t1, condition="session_search")
    hy = row(t1, condition="tool_hybrid")
    assert ss["n_questions"] == 20 and hy["n_questions"] == 20
    assert ss["accuracy_pct"] == pytest.approx(100 * sum(v[1] for v in truth.values()) / 20)  # 70
    assert hy["accuracy_pct"] == pytest.approx(100 * sum(v[2] for v in truth.values()) / 20)  # 95
    assert hy["a"] == "tool_hybrid" and hy["b"] == "session_search"
    # paired accuracy difference and exact McNemar on 6 vs 1 discordant questions
    assert hy["acc_diff_pts"] == pytest.approx(100 * (6 - 1) / 20)
    assert (hy["a_only"], hy["b_only"]) == (6, 1)
    assert hy["mcnemar_p"] == pytest.approx(binomtest(1, 7, 0.5).pvalue)  # 0.125
    # every cost metric of the hybrid tool is exactly half (calls equal): zero-width intervals
    for metric, ratio in (("tokens", 0.5), ("cost", 0.5), ("time", 0.5), ("tool_calls", 0.5), ("model_calls", 1.0)):
        assert hy[f"ratio_{metric}"] == pytest.approx(ratio)
        assert hy[f"ratio_{metric}_lo"] == pytest.approx(ratio) and hy[f"ratio_{metric}_hi"] == pytest.approx(ratio)
    assert hy["median_ratio_tokens"] == pytest.approx(0.5)
    assert hy["share_cheaper_tokens"] == pytest.approx(1.0)
    assert hy["mean_tokens"] == pytest.approx(np.mean([500 * (i + 1) + 50 for i in range(20)]))
    # prefetch: ratio of sums over the 10 questions both ran, not over all 20
    pf = row(t1, condition="prefetch")
    assert pf["n_paired"] == 10
    expected = sum(320 + 7 * i for i in range(10)) / sum(1000 * (i + 1) + 100 for i in range(10))
    assert pf["ratio_tokens"] == pytest.approx(expected, rel=1e-12)  # CSV keeps 15 digits
    assert pf["ratio_tool_calls"] == 0.0
    # what is needed to recompute each row is in it
    for col in ("seed", "n_resamples", "confidence", "n_paired", "n_paired_judged"):
        assert col in t1.columns
    assert int(hy["n_resamples"]) == B_SECONDARY

    types = csv(out, "table1_types.csv")
    for t in TYPES:
        got = row(types, condition="tool_hybrid", qtype=t)
        qs = [v for v in truth.values() if v[0] == t]
        assert got["n"] == len(qs)
        assert got["accuracy_pct"] == pytest.approx(100 * sum(v[2] for v in qs) / len(qs))
    assert row(types, condition="session_search", qtype="all")["n_correct"] == 14

    rep = (out / "report.md").read_text()
    assert "## Table 1" in rep and "0.50 [0.50, 0.50]" in rep and "0.125" in rep


def test_every_header_only_csv_says_why_in_the_report_and_the_summary(tmp_path, capsys):
    """A result file the analysed stages leave empty is named as such, with what the table is (so what
    would fill it), in report.md's Files list and in the command's summary; a file with rows is not."""
    pre = prereg_file(tmp_path)
    build_table1_stage(tmp_path, sha256_file(pre))
    out = analyse(tmp_path, pre)
    said = capsys.readouterr().out
    report = (out / "report.md").read_text()
    files = report[report.index("\n## Files\n"):]
    from analysis import tables as registry

    assert all(p.read_text().strip() for p in out.glob("*.csv"))  # a written CSV has its header at least
    empty = sorted(p.name for p in out.glob("*.csv") if len(p.read_text().splitlines()) == 1)
    full = sorted(p.name for p in out.glob("*.csv") if len(p.read_text().splitlines()) > 1)
    unwritten = sorted(set(registry.csv_files().values()) - {p.name for p in out.glob("*.csv")})
    assert empty and full and unwritten
    for name in empty:
        assert f"[`{name}`]({name}): header only: no row for the analysed stages (" in files, name
        assert name in said
    for name in unwritten:  # neither rows nor columns: no empty file, and the report says why it is not there
        assert f"- `{name}`: not written: no row for the analysed stages (" in files, name
        assert name in said
    for name in full:
        assert f"[`{name}`]({name}): header only" not in files and f"`{name}`: not written" not in files, name
    assert "scale.csv" in empty + unwritten and "no row for the analysed stages (S vs M histories" in files
    assert f"{len(empty)} of {len(empty) + len(full) + len(unwritten)} CSVs hold their header only" in said
    assert f"{len(unwritten)} of {len(empty) + len(full) + len(unwritten)} CSVs not written" in said


def test_failed_runs_count_wrong_and_missing_judgements_are_reported(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i in range(6):
        st.add("session_search", f"q{i}", correct=True)
    st.add("tool_hybrid", "q0", status="failed", correct=True)  # failed: wrong whatever the judge says
    st.add("tool_hybrid", "q1", judged=False)  # no judgement at all
    st.add("tool_hybrid", "q2", judge_status="failed")  # the judge call failed
    st.add("tool_hybrid", "q3", correct=True, judge_status="unparsable")  # official rule applies, reported
    st.add("tool_hybrid", "q4", correct=True)
    st.add("tool_hybrid", "q5", correct=False)
    st.judgements.append({**st.judgements[-1], "run_id": "ghost.lme.q9.r0"})  # a judgement of no record
    st.write()
    out = analyse(tmp_path, pre)

    hy = row(csv(out, "table1.csv"), condition="tool_hybrid")
    assert (hy["n_questions"], hy["n_failed"], hy["n_unjudged"], hy["n_judged"]) == (6, 1, 2, 4)
    assert hy["accuracy_pct"] == pytest.approx(100 * 2 / 4)  # q0 wrong (failed), q3 right, q4 right, q5 wrong
    assert hy["n_paired"] == 6 and hy["n_paired_judged"] == 4
    assert hy["acc_diff_pts"] == pytest.approx(100 * (2 / 4 - 4 / 4))

    runs = csv(out, "runs.csv")
    assert row(runs, run_id=run_id("tool_hybrid", "q0"))["correct_source"] == "failed_run"
    assert math.isnan(row(runs, run_id=run_id("tool_hybrid", "q1"))["correct"])

    probs = csv(out, "judgement_problems.csv")
    assert row(probs, run_id=run_id("tool_hybrid", "q1"))["problem"] == "missing"
    assert row(probs, run_id=run_id("tool_hybrid", "q2"))["problem"] == "judge_failed"
    assert row(probs, run_id=run_id("tool_hybrid", "q3"))["problem"] == "judge_unparsable"
    assert row(probs, run_id="ghost.lme.q9.r0")["problem"] == "judgement of no record"
    rep = (out / "report.md").read_text()
    assert "2 runs without a usable correctness judgement" in rep
    assert "1 unparsable judge replies" in rep


# ------------------------------------------------------------------------------ Table 6: cost


def test_cost_table_sums_the_ledger_at_list_and_off_peak_prices(tmp_path):
    pre = prereg_file(tmp_path)
    jp = {"currency": "USD", "hit": 0.01, "miss": 0.5, "output": 2.0, "usd_per_currency": 1.0, "cny_per_usd": 7.2}
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre), judge_prices=jp)
    st.add("session_search", "q0", prompt=1_000_000, hit=400_000, output=10_000, ts=ON_PEAK_TS)
    st.add("session_search", "q1", prompt=200_000, hit=0, output=50_000, ts=OFF_PEAK_TS)
    st.judge_call(run_id("session_search", "q0"), 1000, 5, ts=ON_PEAK_TS)
    st.judge_call(run_id("session_search", "q1"), 3000, 5, ts=OFF_PEAK_TS)
    # a request cut off by a crash: spent nothing known, reported
    st.ledger.append({"call": "lost", "tag": run_id("session_search", "q1"), "attempt": 1, "role": "agent",
                      "event": "request", "ts": ON_PEAK_TS})
    st.write()
    out = analyse(tmp_path, pre)
    t6 = csv(out, "table6.csv")

    a_list = (400_000 * 0.006 + 600_000 * 0.30 + 10_000 * 1.20) / 1e6
    b_list = (200_000 * 0.30 + 50_000 * 1.20) / 1e6
    agents = row(t6, folder="main/main", party="agents", condition="all")
    assert agents["calls"] == 2 and agents["unanswered_requests"] == 1
    assert agents["cost_list_usd"] == pytest.approx(a_list + b_list)
    assert agents["cost_paid_usd"] == pytest.approx(a_list + 0.5 * b_list)  # q1 ran off-peak
    assert agents["cost_list_cny"] == pytest.approx(7.2 * (a_list + b_list))
    assert agents["hit"] == 400_000 and agents["miss"] == 800_000 and agents["output"] == 60_000

    j0, j1 = (1000 * 0.5 + 5 * 2.0) / 1e6, (3000 * 0.5 + 5 * 2.0) / 1e6
    judge = row(t6, folder="main/main", party="judge", condition="all")
    assert judge["calls"] == 2
    assert judge["cost_list_usd"] == pytest.approx(j0 + j1)
    assert judge["cost_paid_usd"] == pytest.approx(j0 + 0.5 * j1)
    total = row(t6, folder="all", party="all", condition="all")
    assert total["cost_list_usd"] == pytest.approx(a_list + b_list + j0 + j1)
    assert total["cost_paid_cny"] == pytest.approx(7.2 * (a_list + 0.5 * b_list + j0 + 0.5 * j1))
    assert csv(out, "ledger_checks.csv").empty  # records and ledger agree


# ------------------------------------------------------------------------------ pre-registration


def build_hypothesis_stages(tmp_path: Path, sha: str, leak_missing: bool = True) -> None:
    """main: hybrid tokens exactly 0.5x, calls equal, same correctness; org: known discordance."""
    main = Stage(tmp_path / "runs", "main", prereg_sha=sha)
    for i in range(12):
        q = f"q{i:02d}"
        ok = i % 3 != 0
        main.add("session_search", q, correct=ok, prompt=2000 + 100 * i, output=100, calls=2)
        main.add("tool_hybrid", q, correct=ok, prompt=1000 + 50 * i, output=50, calls=2)
    main.write()
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha)
    for i in range(10):
        q = f"p{i:02d}"
        org.add("shared", q, variant="public", correct=True, prompt=1000, output=100, wall_s=1.0)
        org.add("isolated", q, variant="public", correct=(i == 0), prompt=800, output=100)
        org.add("ask_agent", q, variant="public", correct=True, prompt=4000, output=400, wall_s=4.0)
    for i in range(5):
        q = f"p{i:02d}"
        org.add("shared", q, variant="private", correct=True, leak=False)
        org.add("no_view", q, variant="private", correct=False, leak=i < 3)
    if leak_missing:  # shared p04 has its correctness judgement but no leak judgement
        org.judgements = [j for j in org.judgements
                          if not (j["run_id"] == run_id("shared", "p04", "private") and j["kind"] == "leak")]
    org.write()


def test_decision_rules_holm_and_confirmatory_status(tmp_path):
    pre = prereg_file(tmp_path)
    build_hypothesis_stages(tmp_path, sha256_file(pre))
    # the missing leak judgement of shared q4: its correctness judgement is there, the leak one is not
    st_path = tmp_path / "runs" / "org" / "org" / "judgements" / f"{JUDGE}.jsonl"
    lines = [json.loads(x) for x in st_path.read_text().splitlines()]
    assert not any(x["run_id"] == run_id("shared", "p04", "private") and x["kind"] == "leak" for x in lines)
    out = analyse(tmp_path, pre)
    t3 = csv(out, "table3.csv").set_index("id")

    one = 1 / (B_PRIMARY + 1)  # a bootstrap with no draw against the hypothesis
    expected_p = {"H1a": 1.0,  # model calls ratio exactly 1: every draw >= 1
                  "H1b": one,  # tokens ratio exactly 0.5 < 0.7
                  "H1c": one,  # identical correctness: difference 0 > -3 in every draw
                  "H2a": binomtest(0, 9, 0.5).pvalue,  # 9 vs 0 discordant
                  "H2c": one}  # intersection-union of three components with p = one
    for hid, p in expected_p.items():
        assert t3.loc[hid, "p"] == pytest.approx(p, rel=1e-9), hid
    for hid, p in holm_by_hand(expected_p).items():
        assert t3.loc[hid, "p_holm"] == pytest.approx(p, rel=1e-9), hid
    assert t3.loc["H1a", "outcome"] == "not supported"
    for hid in ("H1b", "H1c", "H2a", "H2c"):
        assert t3.loc[hid, "outcome"] == "supported", hid
    assert t3.loc["H1b", "estimate"] == pytest.approx(
        sum(1050 + 50 * i for i in range(12)) / sum(2100 + 100 * i for i in range(12)))
    # H2b: 0 leaks under the view but one leak judgement missing -> undecidable, never assumed
    assert t3.loc["H2b", "outcome"] == "undecided (missing judgements)"
    comps = csv(out, "table3_components.csv")
    c = row(comps, id="H2b", component=1)
    assert c["estimate"] == 3 and c["holds"] in (True, "True")
    probs = csv(out, "judgement_problems.csv")
    assert row(probs, run_id=run_id("shared", "p04", "private"))["kind"] == "leak"
    # everything read stages that recorded this file's sha256: confirmatory
    for hid in ("H1a", "H1b", "H2a", "H2b"):
        assert t3.loc[hid, "status"] == "confirmatory", hid
    # stages/hypotheses without data are "not run", never failed
    for hid in ("H1d", "H1e", "H1f", "H3a", "H3b", "H3c"):
        assert t3.loc[hid, "outcome"] == "not run", hid
    rep = (out / "report.md").read_text()
    assert "*pre-specified*" in rep  # Table 1 of a stage with the right hash


def test_a_changed_file_makes_tests_exploratory(tmp_path):
    pre = prereg_file(tmp_path)
    build_hypothesis_stages(tmp_path, sha256_file(pre), leak_missing=False)
    # the file changes after the stages started (one comment is enough)
    pre.write_text(pre.read_text() + "# an afterthought\n")
    out = analyse(tmp_path, pre)
    t3 = csv(out, "table3.csv").set_index("id")
    for hid in ("H1b", "H2a", "H2b", "H2c"):
        assert t3.loc[hid, "status"] == "exploratory"
        assert "changed after the stage started" in t3.loc[hid, "reason"]
    assert t3.loc["H2b", "outcome"] == "supported"  # the rule is still evaluated and flagged
    rep = (out / "report.md").read_text()
    assert "*pre-specified*" not in rep


def _expected_origins(data: dict) -> dict[str, tuple[str, list[str]]]:
    """From the yaml as written: id -> (hypothesis source, [threshold source per component])."""
    out = {}
    for h in data["hypotheses"]:
        tests = h.get("tests") or [h]
        out[h["id"]] = (h["origin"]["source"],
                        [t["threshold_origin"]["source"] if "threshold_origin" in t else "none" for t in tests])
    return out


def test_every_hypothesis_and_threshold_says_where_it_comes_from(tmp_path):
    pre = prereg_file(tmp_path)
    build_hypothesis_stages(tmp_path, sha256_file(pre))
    out = analyse(tmp_path, pre)
    t3, comps = csv(out, "table3.csv").set_index("id"), csv(out, "table3_components.csv")
    expected = _expected_origins(yaml.safe_load(pre.read_text()))
    assert set(expected) == set(t3.index)
    for hid, (hsource, tsources) in expected.items():
        assert hsource in ("paper", "reconstructed"), hid
        assert t3.loc[hid, "hypothesis_source"] == hsource, hid
        assert t3.loc[hid, "threshold_source"] == " AND ".join(tsources), hid
        for i, src in enumerate(tsources):
            c = row(comps, id=hid, component=i)
            assert c["threshold_source"] == src, (hid, i)
            if src == "paper":
                assert isinstance(c["threshold_quote"], str) and c["threshold_quote"], (hid, i)
            elif src == "reconstructed":
                assert isinstance(c["threshold_why"], str) and c["threshold_why"], (hid, i)
                assert not isinstance(c["threshold_quote"], str), (hid, i)  # no quote: not the paper's
            else:
                assert c["rule"] == "descriptive", (hid, i)  # only a rule without threshold has none
    # the thresholds the paper states (Sections 5.1-5.2) are marked as the paper's, the others as ours
    assert t3.loc["H1b", "threshold_source"] == "paper" and t3.loc["H1f", "threshold_source"] == "paper"
    assert t3.loc["H1a", "threshold_source"] == "reconstructed"
    assert t3.loc["H2c", "threshold_source"] == "reconstructed AND reconstructed AND reconstructed"
    rep = (out / "report.md").read_text()
    table3 = rep[rep.index("## Table 3"):rep.index("## Table 4")]
    assert "| threshold from |" in table3
    assert "Against the pre-registered threshold of 0.7" in table3  # H1b's quote, under the components


PAPER = Path(os.environ.get("MEMSPACE_PAPER", "/work/shared/seeds/memory-as-a-shared-space.txt"))


@pytest.mark.skipif(not PAPER.exists(), reason=f"the paper's text is not at {PAPER} (set MEMSPACE_PAPER)")
def test_every_quote_is_the_papers_own_words():
    from analysis import prereg as P

    paper = " ".join(PAPER.read_text().split())
    pre = P.load()
    quotes = [(h["id"], q) for h in pre.hypotheses for q in h["origin"]["quote"]]
    quotes += [(h["id"], q) for h in pre.hypotheses for t in h["tests"] for q in (t.get("threshold_origin") or {})
               .get("quote", [])]
    assert len(quotes) >= 10
    for hid, q in quotes:
        assert q in paper, (hid, q)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["hypotheses"][0].pop("origin"), "H1a: origin"),
    (lambda d: d["hypotheses"][0].update(threshold_origin={"source": "reconstructed"}), "needs `why`"),
    (lambda d: d["hypotheses"][0].update(threshold_origin={"source": "paper", "why": "x"}), "needs the paper's words"),
    (lambda d: d["hypotheses"][3]["tests"][1].pop("threshold_origin"), "H1d: test 1 (accuracy_above)"),
    (lambda d: d["hypotheses"][0].update(origin={"source": "guess", "why": "x"}), "must be"),
])
def test_a_rule_without_its_origin_is_refused(tmp_path, edit, message):
    from analysis import prereg as P

    with pytest.raises(P.PreregError, match=re.escape(message)):
        P.load(prereg_file(tmp_path, edit=edit))


def test_hash_recorded_after_the_first_call_is_exploratory(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre), created="2026-10-08T11:00:00+00:00")
    for i in range(4):
        st.add("session_search", f"q{i}", ts=ON_PEAK_TS)  # 10:00, before the stage says it was created
        st.add("tool_hybrid", f"q{i}", prompt=500, ts=ON_PEAK_TS)
    st.write()
    t3 = csv(analyse(tmp_path, pre), "table3.csv").set_index("id")
    assert t3.loc["H1b", "status"] == "exploratory"
    assert "after the first model call" in t3.loc["H1b", "reason"]


def test_analyses_not_in_the_file_are_listed_as_exploratory(tmp_path):
    pre = prereg_file(tmp_path)
    build_table1_stage(tmp_path, sha256_file(pre))
    out = analyse(tmp_path, pre)
    ex = csv(out, "table3_exploratory.csv")
    assert set(ex["status"]) == {"exploratory"}
    # pairs a hypothesis compares are Table 3 rows; the others are listed as exploratory
    pairs = {(r.a, r.b) for r in ex.itertuples() if r.analysis == "comparison"}
    assert ("tool_hybrid", "session_search") not in pairs  # H1a-c
    assert ("prefetch", "session_search") not in pairs  # H1e
    assert ("tool_hybrid", "prefetch") not in pairs  # H1e
    assert ("none", "session_search") in pairs  # no hypothesis compares the no-memory condition
    analyses = set(ex.loc[ex["analysis"] != "comparison", "analysis"])
    assert {"token_decomposition", "median_ratio"} <= analyses
    assert "table1" not in analyses and "table5" not in analyses  # pre-specified in the file


def test_holds_unadjusted_only_when_holm_says_no(tmp_path):
    pre = prereg_file(tmp_path)
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha256_file(pre))
    for i in range(6):  # 6 vs 0 discordant: p = 0.03125 <= 0.05 but 5 x 0.03125 > 0.05
        org.add("shared", f"p{i}", variant="public", correct=True)
        org.add("isolated", f"p{i}", variant="public", correct=False)
    org.write()
    t3 = csv(analyse(tmp_path, pre), "table3.csv").set_index("id")
    p = binomtest(0, 6, 0.5).pvalue
    assert t3.loc["H2a", "p"] == pytest.approx(p)
    # the other four members were not run and enter the family with p = 1
    assert t3.loc["H2a", "p_holm"] == pytest.approx(holm_by_hand({"H2a": p, "a": 1, "b": 1, "c": 1, "d": 1})["H2a"])
    assert t3.loc["H2a", "outcome"] == "holds unadjusted only"
    assert "p = 1" in t3.loc["H1b", "note"]


def test_growth_ratio_h1f_and_the_scale_table(tmp_path):
    pre = prereg_file(tmp_path)
    sha = sha256_file(pre)
    main, scale = Stage(tmp_path / "runs", "main", prereg_sha=sha), Stage(tmp_path / "runs", "scale", prereg_sha=sha)
    for i in range(8):
        q = f"q{i}"
        base = 10_000 + 1000 * i
        main.add("session_search", q, prompt=base, output=0, correct=True)
        main.add("tool_hybrid", q, prompt=base // 2, output=0, correct=i != 0)
        scale.add("session_search", q, prompt=int(base * 1.48), output=0, correct=i > 1)
        scale.add("tool_hybrid", q, prompt=int(base // 2 * 1.30), output=0, correct=i > 2)
    main.write()
    scale.write()
    out = analyse(tmp_path, pre)
    t3 = csv(out, "table3.csv").set_index("id")
    assert t3.loc["H1f", "estimate"] == pytest.approx(1.48 / 1.30)
    assert t3.loc["H1f", "outcome"] == "not supported"  # 1.14 < 1.2, as in the paper
    sc = csv(out, "scale.csv")
    ss, hy = row(sc, condition="session_search"), row(sc, condition="tool_hybrid")
    assert ss["tokens_growth"] == pytest.approx(1.48) and hy["tokens_growth"] == pytest.approx(1.30)
    assert ss["accuracy_s_pct"] == 100 and ss["accuracy_m_pct"] == pytest.approx(100 * 6 / 8)
    assert hy["accuracy_change_pts"] == pytest.approx(100 * (5 / 8 - 7 / 8))
    assert (out / "figure5.png").exists()


def test_h1g_compares_the_shell_with_the_design_notes_agentic_interfaces(tmp_path):
    """Compact session search came after the internal review (Appendix A (iv)): not in H1g's set."""
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    prompts = {"shell": [1000, 5000, 1000, 9000, 2000, 500],
               "session_search": [2000, 2500, 3000, 2000, 2600, 2400],
               "tool_bm25": [1000, 1200, 900, 1500, 1100, 1000],
               "tool_dense": [1500, 1400, 1600, 3000, 1500, 1200],
               "tool_hybrid": [1200, 1300, 1000, 2500, 1400, 1100],
               "session_search_compact": [100, 100, 100, 100, 100, 50_000]}  # the most variable of all
    for cond, ps in prompts.items():
        for i, p in enumerate(ps):
            st.add(cond, f"q{i}", prompt=p, output=0, calls=2, correct=True)
    st.write()
    out = analyse(tmp_path, pre)

    def cv(xs):
        x = np.array(xs, float)
        return x.std(ddof=1) / x.mean()

    paper_set = ["session_search", "tool_bm25", "tool_dense", "tool_hybrid"]
    assert cv(prompts["session_search_compact"]) > cv(prompts["shell"]) > max(cv(prompts[c]) for c in paper_set)
    c = row(csv(out, "table3_components.csv"), id="H1g", component=3)
    assert c["estimate"] == pytest.approx(cv(prompts["shell"]))
    assert c["threshold"] == pytest.approx(max(cv(prompts[c]) for c in paper_set))
    assert c["holds"] in (True, "True")  # with the compact variant in the set it would not
    assert "session_search_compact" not in c["note"] and all(x in c["note"] for x in paper_set)
    assert c["threshold_source"] == "paper"


# ------------------------------------------------------------------------------ Tables 5, tokens, evidence


def test_run_to_run_agreement_tokens_and_evidence(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    r0, r1 = [1, 1, 0, 1, 0], [1, 0, 0, 1, 1]
    first = [True, False, None, True, True]
    anyh = [True, True, None, True, False]
    prompts = [1000, 3000, 2000, 8000, 500]
    for i in range(5):
        dec = {"calls": 2, "prefix": 300 + i, "results": 100 * i, "output": 40, "input": prompts[i]}
        st.add("shell", f"q{i}", correct=bool(r0[i]), prompt=prompts[i], output=40, calls=2, decomposition=dec,
               evidence={"first_search": first[i], "any": anyh[i], "evidence_sessions": ["s"]})
        st.add("shell", f"q{i}", repeat=1, correct=bool(r1[i]), prompt=prompts[i] * 2, output=40)
    st.write()
    out = analyse(tmp_path, pre)
    t5 = row(csv(out, "table5.csv"), condition="shell")
    assert (t5["n_judged_both"], t5["identical"], t5["both_correct"], t5["r0_only"], t5["r1_only"]) == (5, 3, 2, 1, 1)
    assert t5["identical_share"] == pytest.approx(0.6)
    po, pe = 0.6, (3 / 5) * (3 / 5) + (2 / 5) * (2 / 5)
    assert t5["kappa"] == pytest.approx((po - pe) / (1 - pe))
    tok = row(csv(out, "tokens.csv"), condition="shell")
    totals = np.array(prompts, float) + 40
    assert tok["cv_tokens"] == pytest.approx(totals.std(ddof=1) / totals.mean())
    assert tok["mean_prefix"] == pytest.approx(302) and tok["mean_results"] == pytest.approx(200)
    ev = row(csv(out, "evidence.csv"), condition="shell")
    assert (ev["n_first_applicable"], ev["first_hits"]) == (4, 3)
    assert (ev["n_any_applicable"], ev["any_hits"]) == (4, 3)
    assert ev["first_rate"] == pytest.approx(0.75)


# ------------------------------------------------------------------------------ backend study (H3)


def test_h3_reads_the_backend_study_outputs(tmp_path):
    pre = prereg_file(tmp_path)
    d = tmp_path / "runs" / "backends" / "backends"
    d.mkdir(parents=True)
    (d / "stage.json").write_text(json.dumps({
        "schema_version": 1, "kind": "backends", "stage": "backends", "label": "backends", "config_hash": "x",
        "seed": 0, "data": {"path": "d.json", "sha256": "d" * 64}, "plan": {}, "versions": {}, "model": None,
        "code": {"commit": None, "dirty": None}, "created": "2026-10-09T00:00:00+00:00",
        "prereg": {"sha256": sha256_file(pre)}}))
    # the column layout bench/backends/measure.py writes
    (d / "recall.csv").write_text("config,case,selectivity,queries,recall_at_10,short_lists,mean_results\n"
                                  "pgvector_off,one,0.0056,180,0.291,163,4.1\n"
                                  "pgvector_relaxed,one,0.0056,180,0.992,0,10\n")
    (d / "fanout.csv").write_text("agents,queries,runtime_stores_p50_ms,redis_tag_list_p50_ms,fts5_owner_in_p50_ms\n"
                                  "1,180,26.6,1.91,27.47\n180,180,215.2,21.67,55.08\n")
    t3 = csv(analyse(tmp_path, pre), "table3.csv").set_index("id")
    assert t3.loc["H3a", "outcome"] == "supported"
    assert t3.loc["H3b", "outcome"] == "not supported"
    assert t3.loc["H3c", "outcome"] == "not run"  # footprint.csv missing: not run, not failed
    comps = csv(analyse(tmp_path, pre, out="r2"), "table3_components.csv")
    assert row(comps, id="H3b", component=0)["estimate"] == pytest.approx(21.67 / 1.91)


def backends_folder(tmp_path: Path, pre: Path, recall_csv: str) -> Path:
    d = tmp_path / "runs" / "backends" / "backends"
    d.mkdir(parents=True)
    (d / "stage.json").write_text(json.dumps({
        "schema_version": 1, "kind": "backends", "stage": "backends", "label": "backends", "config_hash": "x",
        "seed": 0, "data": {"path": "d.json", "sha256": "d" * 64}, "plan": {}, "versions": {}, "model": None,
        "code": {"commit": None, "dirty": None}, "created": "2026-10-09T00:00:00+00:00",
        "prereg": {"sha256": sha256_file(pre)}}))
    (d / "recall.csv").write_text(recall_csv)
    return d


RECALL_HEAD = "config,backend,case,selectivity,queries,builds,recall_at_10,short_lists,p50_ms,p95_ms\n"
EXACT_ROWS = "exact,exact,all,1.0,180,1,1.0,0,17.28,80.5\n"  # exact search is slow and not an approximate index


@pytest.mark.parametrize("worst, holds", [(22.62, True), (51.2, False)])
def test_h3d_p95_of_every_approximate_configuration_below_50_ms(tmp_path, worst, holds):
    pre = prereg_file(tmp_path)
    backends_folder(tmp_path, pre, RECALL_HEAD + EXACT_ROWS
                    + "redis_ef10,redis_qe,one,0.0056,180,3,0.999,0,0.89,1.4\n"
                    + "redis_ef10,redis_qe,unfiltered,1.0,180,3,0.808,0,1.1,2.0\n"
                    + "vset_q8,vectorset,public10,0.1,180,3,0.97,0,2.5,6.1\n"
                    + f"pgvector_relaxed,pgvector,one,0.0056,180,3,0.992,0,6.52,{worst}\n"
                    + "pgvector_off,pgvector,all,1.0,180,3,0.963,0,7.22,12.0\n"
                    # a configuration the paper did not run (raised FILTER-EF): slow, and not in the rule
                    + "vset_fp32_fef,vectorset,one,0.0056,180,3,0.997,0,63.3,90.1\n")
    out = analyse(tmp_path, pre)
    t3, comps = csv(out, "table3.csv").set_index("id"), csv(out, "table3_components.csv")
    c = row(comps, id="H3d", component=0)
    assert c["n"] == 5  # the five rows of the paper's configurations; exact (80.5 ms) and vset_fp32_fef are left out
    assert c["estimate"] == pytest.approx(worst) and c["threshold"] == 50
    assert t3.loc["H3d", "outcome"] == ("supported" if holds else "not supported")
    assert t3.loc["H3d", "status"] == "confirmatory"
    assert t3.loc["H3d", "hypothesis_source"] == "paper" and c["threshold_source"] == "paper"
    assert "below the 50 ms of the design note" in c["threshold_quote"]
    if not holds:
        assert c["note"] == "1 of 5 rows fail: config=pgvector_relaxed, case=one (51.2)"
    assert t3.loc["H3c", "outcome"] == "not run"  # the other backend rules are unaffected


def test_h3d_selects_the_papers_approximate_configurations_and_needs_its_columns(tmp_path):
    from bench.backends.cases import APPROXIMATE

    data = yaml.safe_load((REPO / "conf" / "prereg" / "hypotheses.yaml").read_text())
    h3d = next(h for h in data["hypotheses"] if h["id"] == "H3d")
    stage = yaml.safe_load((REPO / "conf" / "stage" / "backends.yaml").read_text())
    backend_of = {c["id"]: c["backend"] for c in stage["stage"]["configs"]}
    assert set(h3d["select"]["config"]) <= set(backend_of), "every configuration the rule names is run by the stage"
    assert {backend_of[c] for c in h3d["select"]["config"]} == set(APPROXIMATE)
    pre = prereg_file(tmp_path)  # a recall.csv written before the study wrote p95_ms: not evaluable, not failed
    backends_folder(tmp_path, pre, "config,backend,case,p50_ms\nredis_ef10,redis_qe,one,0.89\n")
    t3 = csv(analyse(tmp_path, pre), "table3.csv").set_index("id")
    assert t3.loc["H3d", "outcome"] == "not evaluable"
    assert "no column 'p95_ms'" in t3.loc["H3d", "note"]


# ------------------------------------------------------------------------------ the command


def test_two_runs_write_identical_bytes_and_the_cli_works(tmp_path):
    pre = prereg_file(tmp_path)
    build_table1_stage(tmp_path, sha256_file(pre))
    build_hypothesis_stages(tmp_path, sha256_file(pre))
    args = [sys.executable, "-m", "analysis.run", f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'results'}",
            f"prereg={pre}", f"resamples={B_SECONDARY}"]
    first = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert first.returncode == 0, first.stderr
    files = {p.name: p.read_bytes() for p in sorted((tmp_path / "results").iterdir())}
    assert {"report.md", "table1.csv", "table2.csv", "table3.csv", "table4.csv", "table6.csv",
            "figure3_main_main.png", "figure6_org_org.png"} <= set(files)
    assert "table5.csv" not in files and "- `table5.csv`: not written" in files["report.md"].decode()  # no repeats
    second = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert second.returncode == 0, second.stderr
    again = {p.name: p.read_bytes() for p in sorted((tmp_path / "results").iterdir())}
    assert again.keys() == files.keys()
    for name in files:
        assert again[name] == files[name], f"{name} differs between two runs"
    assert first.stdout == second.stdout
    assert b"matplotlib" not in files["figure3_main_main.png"]  # no version stamp in the PNG
    rep = files["report.md"].decode()
    for name in ("table1.csv", "table3.csv", "table6.csv", "figure3_main_main.png"):
        assert f"]({name})" in rep  # the report links its tables and figures
    assert "cccccccccccccccc" in rep and "dddddddddddddddd" in rep  # config hash and data sha256


def test_default_runs_skip_the_pilot_and_foreign_output_is_kept(tmp_path, monkeypatch):
    pre = prereg_file(tmp_path)
    for stage in ("main", "pilot", "pilot_local"):
        s = Stage(tmp_path / "runs", stage, prereg_sha=sha256_file(pre))
        s.add("session_search", "q0")
        s.write()
    monkeypatch.chdir(tmp_path)
    assert A.main([f"prereg={pre}", "out=res"]) == 0
    assert set(pd.read_csv(tmp_path / "res" / "runs.csv")["stage"]) == {"main"}
    assert A.main([f"prereg={pre}", "out=res2", "runs=runs/pilot/pilot"]) == 0
    assert "pilot: not a result" in (tmp_path / "res2" / "report.md").read_text()
    assert A.main([f"prereg={pre}", "out=res3", "runs=runs/pilot_local/pilot_local"]) == 0
    assert set(pd.read_csv(tmp_path / "res3" / "runs.csv")["stage"]) == {"pilot_local"}
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert A.main([f"prereg={pre}", "out=mine"]) == 2
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_tool_use_table_counts_the_k_the_model_chose_and_overridden_defaults(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    # (arguments, overrode_defaults) of each run's memory_search calls; one run also reads a round
    runs = {"q0": [('{"query": "dog", "k": 1}', {"k": 1}), ('{"query": "dog name"}', {})],
            "q1": [('{"query": "car", "k": 5, "since": "2023-05-30", "until": "2023-05-30"}', {"k": 5})],
            "q2": [('{"query": "trip", "until": "2023-01-01"}', {}), ('{"query": "trip", "k": 1}', {"k": 1}),
                   ("not json", None), ('["a list"]', None)],
            "q3": []}
    # q1's dated search came back empty, q2's did not
    empty = {'{"query": "car", "k": 5, "since": "2023-05-30", "until": "2023-05-30"}'}
    # (gold, answer, qtype) per question: two literal hits out of three where the check applies
    golds = {"q0": ("Jonah Ellery", "It was Jonah Ellery.", "single-session-assistant"),
             "q1": ("3", "You own three.", "multi-session"),
             "q2": ("civil engineering", "I don't know.", "single-session-user"),
             "q3": ("The user would prefer tea", "tea", "single-session-preference")}
    for i, (q, calls) in enumerate(runs.items()):
        tools = [{"arguments": a, "overrode_defaults": o, "empty": a in empty} for a, o in calls]
        if q == "q1":
            tools.append({"name": "memory_read", "arguments": '{"session": "s1", "round": 2, "window": 0}',
                          "overrode_defaults": {"window": 0}})
        gold, answer, qtype = golds[q]
        st.add("tool_hybrid", q, tool_calls=len(tools), tools=tools, correct=i % 2 == 0, gold=gold, answer=answer,
               qtype=qtype)
        st.add("none", q, correct=False, gold=gold, answer="I don't know", qtype=qtype)
    st.write()
    out = analyse(tmp_path, pre)
    t = row(csv(out, "tool_use.csv"), condition="tool_hybrid")
    searches = [c for calls in runs.values() for c in calls]
    ks = [json.loads(a)["k"] for a, _ in searches if a.startswith("{") and "k" in json.loads(a)]
    assert t["n"] == 4 and t["tool_use_rate"] == pytest.approx(3 / 4)
    assert t["tool_calls_mean"] == pytest.approx((len(searches) + 1) / 4)
    assert t["searches"] == len(searches)
    assert t["k_set_share"] == pytest.approx(len(ks) / len(searches))
    assert t["k1_share"] == pytest.approx(ks.count(1) / len(searches))
    assert t["k_mean_when_set"] == pytest.approx(sum(ks) / len(ks))
    overrides = sum(bool(o) for _, o in searches) + 1  # the memory_read call set window
    assert t["override_share"] == pytest.approx(overrides / (len(searches) + 1))
    assert t["accuracy"] == pytest.approx(0.5)
    assert t["dated_share"] == pytest.approx(2 / len(searches)) and t["dated_empty"] == 1
    assert (t["literal_hits"], t["n_literal"]) == (2, 3) and t["literal_rate"] == pytest.approx(2 / 3)
    n = row(csv(out, "tool_use.csv"), condition="none")
    assert n["tool_use_rate"] == 0 and n["searches"] == 0 and math.isnan(n["k1_share"])
    assert (n["literal_hits"], n["n_literal"]) == (0, 3) and math.isnan(n["dated_share"])
    assert "## Tool use and the arguments the model chose" in (out / "report.md").read_text()
