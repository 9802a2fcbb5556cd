"""Conclusions a reader can trust (issue 24): each conclusion under each judge, gold errata,
power before paying, the judge probe and retrieval recall joined to answers.

Every expected number is computed here from what the test wrote (closed forms, statsmodels),
never pasted from a run of the analysis."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

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


# ------------------------------------------------------------------------------ 4. power before paying


def test_power_and_sample_size_match_statsmodels():
    from statsmodels.stats.power import NormalIndPower

    from analysis import power as W

    sm = NormalIndPower()
    for distance, sd, n in ((0.013, 0.55, 180), (0.3, 1.0, 40), (0.05, 0.4, 500)):
        es = distance / sd
        assert W.power(distance, sd, n, 0.025) == pytest.approx(
            sm.power(effect_size=es, nobs1=n, alpha=0.025, ratio=0, alternative="larger"), rel=1e-9)
        n80 = sm.solve_power(effect_size=es, alpha=0.025, power=0.8, ratio=0, alternative="larger")
        assert W.n_for(distance, sd, 0.025) == math.ceil(n80)
    assert W.n_for(-0.01, 0.5, 0.025) == math.inf  # an effect on the wrong side of the threshold: never


def test_power_from_a_pilot_of_known_variance_and_its_cost(tmp_path):
    """A pilot with 10 paired questions: 4 discordant (3 for the hybrid tool), tokens chosen by hand."""
    from analysis import power as W
    from analysis import prereg as P
    from analysis.power import pilot_runs

    st = Stage(tmp_path / "runs", "pilot", label="p")
    tok_ss = [1000, 1200, 800, 1500, 900, 1100, 1000, 1300, 700, 1000]
    tok_hy = [500, 700, 300, 900, 600, 400, 500, 800, 300, 500]
    hy_only, ss_only = {"q0", "q1", "q2"}, {"q3"}
    for i in range(10):
        q = f"q{i}"
        st.add("session_search", q, correct=q not in hy_only, prompt=tok_ss[i] - 100, output=100)
        st.add("tool_hybrid", q, correct=q not in ss_only, prompt=tok_hy[i] - 50, output=50)
    st.write()
    pilot = pilot_runs(tmp_path / "runs", "test-model")
    assert pilot and len(pilot["runs"]) == 20
    pre = P.load()
    costs = {"session_search": 0.01, "tool_hybrid": 0.004}
    rows = {(c.hypothesis, c.rule): c for c in W.comparisons(
        pre, "main", {("", "tool_hybrid", "session_search"): 180}, costs, pilot)}
    # H1c: non-inferiority at 3 points, powered at the pre-registered -1.7 points; psi = 4/10 from the pilot
    h1c = rows[("H1c", "noninferiority")]
    assert h1c.effect == -1.7 and h1c.effect_from.startswith("pre-registered") and h1c.spread == pytest.approx(0.4)
    delta = -0.017
    sd = math.sqrt(0.4 - delta ** 2)
    z = 1.959963984540054
    assert h1c.power == pytest.approx(float(norm.cdf((delta + 0.03) * math.sqrt(180) / sd - z)), rel=1e-9)
    assert h1c.n80 == math.ceil(((z + 0.8416212335729143) * sd / (delta + 0.03)) ** 2)
    # H1b: tokens ratio < 0.7 at the pre-registered 0.51, the log-ratio sd from the pilot (delta method)
    h1b = rows[("H1b", "ratio_upper_below")]
    a, b = np.array(tok_hy, float), np.array(tok_ss, float)
    sd_log = np.std(a / a.mean() - b / b.mean(), ddof=1)
    assert h1b.spread == pytest.approx(sd_log, rel=1e-12)
    assert h1b.power == pytest.approx(float(norm.cdf(math.log(0.7 / 0.51) * math.sqrt(180) / sd_log - z)), rel=1e-9)
    assert h1b.cost_per_question == pytest.approx(0.014)
    text = W.render(rows.values())
    line = next(x for x in text.splitlines() if x.startswith("H1b"))
    # n for 80% and its cost: the simulated rule's n (analysis.power.simulated_n), not the normal formula's
    assert f"{h1b.n80_rule:,.0f}" in line and f"${0.014 * h1b.n80_rule:.4f}" in line and f"{h1b.power:.2f}" in line
    # without a pilot: the stated assumption, and it says so
    h1c0 = next(c for c in W.comparisons(pre, "main", {("", "tool_hybrid", "session_search"): 180}, costs, None)
                if c.hypothesis == "H1c")
    assert h1c0.spread == W.ASSUMPTIONS["discordant"] and h1c0.spread_from.startswith("assumed")


def test_power_at_must_be_a_number(tmp_path):
    from analysis import prereg as P

    bad = prereg_file(tmp_path, edit=lambda d: d["hypotheses"][0].update(power_at="big"))
    with pytest.raises(P.PreregError, match="power_at must be a number"):
        P.load(bad)


def test_dollars_per_correct_answer_in_tables_1_2_and_6(tmp_path):
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i in range(10):
        st.add("session_search", f"q{i}", correct=i < 6, prompt=1000, output=100)
        st.add("tool_hybrid", f"q{i}", correct=i < 9, prompt=500, output=50)
    st.judge_call(run_id("tool_hybrid", "q0"), prompt=2000, output=10)
    st.write()
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha256_file(pre))
    for i in range(4):
        org.add("shared", f"p{i}", variant="public", correct=i < 3, prompt=2000, output=0)
        org.add("isolated", f"p{i}", variant="public", correct=False, prompt=100, output=0)
    org.write()
    out = analyse(tmp_path, pre)
    per_run = {"session_search": (1000 * 0.30 + 100 * 1.20) / 1e6, "tool_hybrid": (500 * 0.30 + 50 * 1.20) / 1e6}
    t1 = csv(out, "table1.csv")
    assert row(t1, condition="session_search")["usd_per_correct"] == pytest.approx(10 * per_run["session_search"] / 6)
    assert row(t1, condition="tool_hybrid")["usd_per_correct"] == pytest.approx(10 * per_run["tool_hybrid"] / 9)
    t2 = csv(out, "table2.csv")
    assert row(t2, condition="shared")["usd_per_correct"] == pytest.approx(4 * 2000 * 0.30 / 1e6 / 3)
    assert pd.isna(row(t2, condition="isolated")["usd_per_correct"])  # no correct answer: undefined, not 0
    t6 = csv(out, "table6.csv")
    agents = row(t6, folder="main/main", party="agents", condition="tool_hybrid")
    assert agents["correct_answers"] == 9 and agents["usd_per_correct"] == pytest.approx(10 * per_run["tool_hybrid"] / 9)
    judge = row(t6, folder="main/main", party="judge", condition="all")
    assert judge["correct_answers"] == 15 and judge["usd_per_correct"] == pytest.approx((2000 * 0.30 + 10 * 1.20) / 1e6 / 15)
    assert "USD per correct" in (out / "report.md").read_text()


# ------------------------------------------------------------------------------ 3. gold errata

ERRATA = """errata_format: 1
name: test-errata
version: "1"
applies_to: [{file: data.json, sha256: dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd}]
entries:
  - {qid: q00, action: answer, answer: "forty-two", source: "https://example.org/report/1", reasoning: "the gold is 41 by mistake"}
  - {qid: q01, action: exclude, source: "https://example.org/report/2", reasoning: "no answer is supported"}
  - {qid: q02, action: evidence, evidence: null, source: "https://example.org/report/3", reasoning: "wrong session"}
notes:
  - {source: "https://example.org/report/4", reasoning: "which file a table used"}
"""


def test_an_errata_file_that_changes_one_questions_gold_flips_exactly_that_conclusion(tmp_path):
    from harness.data import errata as E

    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.add("tool_hybrid", "q20", correct=True, prompt=500, output=50, calls=3,
           evidence={"any": True, "first_search": True, "evidence_sessions": ["s"]})
    st.write()
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    er = E.load(path)
    # judgements against the corrected gold of q00: the hybrid tool's answer is now wrong, session search's right
    lines = [{**j, "judge": {**j["judge"], "name": f"{JUDGE}.{er.tag}"}} for j in st.judgements
             if j["qid"] == "q00"]
    for j in lines:
        if j["condition"] == "tool_hybrid":
            j.update(label=False, reply="no")
    (st.path / "judgements" / f"{er.judgements_name(JUDGE)}.jsonl").write_text(
        "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    out = analyse(tmp_path, pre, f"errata={path}", f"errata_sha256={er.sha256}")
    aff = csv(out, "errata.csv").set_index("qid")
    assert set(aff.index) == {"q00", "q01", "q02"}
    assert aff.loc["q00", "changed_labels"] == 1 and aff.loc["q00", "corrected_correct"] == 1
    assert aff.loc["q01", "action"] == "exclude"
    t1o, t1c = csv(out, "table1.csv"), csv(out / "corrected", "table1.csv")
    assert row(t1o, condition="tool_hybrid")["n_questions"] == 21
    hy = row(t1c, condition="tool_hybrid")
    assert hy["n_questions"] == 20 and hy["accuracy_pct"] == pytest.approx(100 * 19 / 20)  # q01 out, q00 wrong
    assert row(t1c, condition="tool_hybrid")["acc_diff_pts"] == pytest.approx(-100 / 19)  # 19 paired questions
    c = csv(out, "errata_conclusions.csv")
    assert row(c, conclusion="H1c", labels="corrected gold")["estimate"] == pytest.approx(-100 / 19)
    assert row(c, conclusion="H1c", labels="corrected gold")["robust"] == "flips under corrected gold"
    assert row(c, conclusion="H1b", labels="corrected gold")["robust"] == "holds under all"
    rep = (out / "report.md").read_text()
    assert er.sha256 in rep and "https://example.org/report/4" in rep
    assert "Conclusions that change under the corrected gold" in rep[:rep.index("## Table 1")]
    assert "Gold: corrected: test-errata" in (out / "corrected" / "report.md").read_text()
    # pinned by hash: a changed file is refused with exit 2
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'r2'}", f"prereg={pre}", f"errata={path}",
                   "errata_sha256=" + "0" * 64]) == 2


def test_make_judge_with_errata_judges_the_corrected_questions_against_the_corrected_gold(tmp_path):
    """In process, the judge on the scripted upstream: only q00's runs are judged again, with the new gold in
    the prompt, metered under their own tag and cached."""
    from hydra import compose, initialize_config_dir

    from harness.records import RunDir
    from judge.answer_check import judge_command, load_judgements
    from tests.analysis_fixtures import answered_record
    from tests.fake_model import FakeModel

    rec_dir = tmp_path / "runs" / "smoke" / "smoke" / "records"
    rec_dir.mkdir(parents=True)
    for qid, answer in (("q00", "It is forty-two."), ("q05", "It is seven.")):
        rid = f"none.lme.{qid}.r0"
        rec = answered_record(rid, qid, "single-session-user", "", f"What is {qid}?", "41" if qid == "q00" else "seven",
                              answer)
        rec["data_path"] = "/somewhere/data.json"  # a file the errata applies to
        (rec_dir / f"{rid}.json").write_text(json.dumps(rec))
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    prompts = []

    def grader(req):
        p = req["messages"][0]["content"]
        prompts.append(p)
        yes = ("forty-two" in p and "Correct answer: forty-two" in p) or "Correct answer: seven" in p
        return {"role": "assistant", "content": "yes" if yes else "no"}

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with FakeModel(script=grader) as fake:
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "stage=smoke", "judge=vllm", f"judge.base_url={fake.base_url}", "judge.backoff_s=0.01",
                f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache", f"+errata={path}"])
        rd = RunDir.for_stage(cfg)
        assert judge_command(cfg, rd) == 0
        n_first = len(fake.run_requests)
        assert judge_command(cfg, rd) == 0  # again: every judgement cached or done, nothing sent
        assert len(fake.run_requests) == n_first
    from harness.data import errata as E

    er = E.load(path)
    main = load_judgements(rd.root, "vllm")
    corr = load_judgements(rd.root, er.judgements_name("vllm"))
    assert main[("none.lme.q00.r0", "correct")]["label"] is False  # against the official 41
    assert set(corr) == {("none.lme.q00.r0", "correct")} and corr[("none.lme.q00.r0", "correct")]["label"] is True
    assert "forty-two" in corr[("none.lme.q00.r0", "correct")]["prompt"]
    from harness.records.ledger import read_ledger

    tags = {e["tag"] for e in read_ledger(rd.ledger_path) if e.get("role") == "judge"}
    assert f"judge-{er.tag}:none.lme.q00.r0" in tags  # metered apart, in the stage's ledger (and its budget)


def test_the_shipped_longmemeval_errata_load_and_name_their_public_sources(tmp_path):
    from harness.data import errata as E

    er = E.load(Path(__file__).resolve().parents[1] / "data" / "errata" / "longmemeval.yaml")
    issues = {s.rsplit("/", 1)[-1] for e in er.entries.values() for s in (e.source, *e.sources)}
    issues |= {n["source"].rsplit("/", 1)[-1] for n in er.notes}
    assert {"19", "37", "50", "27"} <= issues
    assert all(e.source.startswith("https://github.com/xiaowu0162/LongMemEval/issues/") for e in er.entries.values())
    assert er.entries["370a8ff4"].action == "answer" and "81 days" in er.entries["370a8ff4"].answer
    with pytest.raises(E.ErrataError, match="action must be one of"):
        bad = Path(er.path).read_text().replace("action: exclude", "action: guess", 1)
        p = tmp_path / "bad.yaml"
        p.write_text(bad)
        E.load(p)


# ------------------------------------------------------------------------------ 2. judge error, measured


def test_the_probe_measures_a_scripted_judges_known_false_positive_rate(tmp_path):
    """A judge that accepts any number in place of the gold's and any answer containing the gold: its false
    positives are exactly the planted changed number and the denials, its false negative the gold's number in
    words (no list is reordered: issue 44); graded through the stage's ledger and cache."""
    import re

    from hydra import compose, initialize_config_dir
    from statsmodels.stats.proportion import proportion_confint

    from harness.records import RunDir
    from harness.records.ledger import read_ledger
    from judge.probe import run_probe
    from tests.fake_model import FakeModel

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for qid, gold, ok, question in (("q0", "12 apples", True, "How many apples did I buy?"),
                                    ("q1", "May 3", True, "When is my dentist appointment?"),
                                    ("q2", "Alice, Bob and Carol", False, "Who came to the party?"),
                                    ("q3_abs", "The user never said.", True, "What is my hamster's name?")):
        st.add("tool_hybrid", qid, gold=gold, correct=ok, abstention=qid.endswith("_abs"))["question"] = question
    st.write()

    def lenient(req):
        p = req["messages"][0]["content"]
        response = re.search(r"Model response: (.*?)\n\n", p, re.S).group(1)
        if "Explanation: " in p:
            return {"role": "assistant", "content": "yes" if "don't have" in response else "no"}
        gold = re.search(r"Correct answer: (.*?)\n\nModel response", p, re.S).group(1)
        digits = lambda x: re.sub(r"\d+", "#", x.lower())  # noqa: E731
        return {"role": "assistant", "content": "yes" if digits(gold) in digits(response) else "no"}

    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with FakeModel(script=lenient) as fake:
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "stage=main", "judge=vllm", "judge.name=testjudge", f"judge.base_url={fake.base_url}",
                "judge.backoff_s=0.01", f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache"])
        rd = RunDir.for_stage(cfg)
        s = run_probe(cfg, rd)
        assert s["failed"] == 0 and s["judgements"] == 17  # 9 planted wrong + 8 planted right
        sent = len(fake.run_requests)
        run_probe(cfg, rd)
        assert len(fake.run_requests) == sent  # cached: a second probe sends nothing
    tags = {e["tag"] for e in read_ledger(rd.ledger_path) if e.get("role") == "judge"}
    assert "judge-probe:probe.changed_number.q0.r0" in tags
    out = analyse(tmp_path, pre)
    t = csv(out, "judge_error.csv")
    ssu = row(t, qtype="single-session-user", judge="testjudge")
    assert (ssu["planted_wrong"], ssu["false_positives"], ssu["planted_right"], ssu["false_negatives"]) == (8, 4, 7, 1)
    # errors clustered by question (q0: 2 of 3 wrong answers accepted, q1: 1 of 3, q2: 1 of 2): Wilson on n / deff,
    # the design effect computed here as the between-question variance of the error share over the binomial one
    k, n = np.array([2, 1, 1]), np.array([3, 3, 2])
    r = k.sum() / n.sum()
    deff = max(1.0, (len(n) / (len(n) - 1) * np.sum((k - r * n) ** 2) / n.sum() ** 2) / (r * (1 - r) / n.sum()))
    lo, hi = proportion_confint(r * 8 / deff, 8 / deff, alpha=0.05, method="wilson")
    assert ssu["fp_rate"] == pytest.approx(4 / 8) and (ssu["fp_lo"], ssu["fp_hi"]) == pytest.approx((lo, hi))
    assert ssu["main_judge"] in (True, "True") and ssu["accuracy"] == pytest.approx(2 / 3)
    corr = csv(out, "judge_corrected.csv")
    hy = row(corr, kind="condition", what="tool_hybrid")
    fp, fn = 4 / 9, 1 / 8  # every planted answer, abstention included
    assert hy["reported"] == pytest.approx(3 / 4) and hy["corrected"] == pytest.approx((3 / 4 - fp) / (1 - fp - fn))
    assert hy["corrected_lo"] < hy["corrected"] < hy["corrected_hi"]
    control = row(t, qtype="all", judge="substring (control)")  # the substring matcher fails the probe
    assert control["false_positives"] == 3 and control["false_negatives"] == 1
    ab = row(t, qtype="abstention", judge="testjudge")
    assert (ab["planted_wrong"], ab["false_positives"], ab["planted_right"], ab["false_negatives"]) == (1, 0, 1, 0)
    # the probe's judgements are not a judge of the stage's answers: no second judge appears
    assert csv(out, "judge_robustness.csv").empty
    t6 = csv(out, "table6.csv")
    assert "judge-probe" in set(t6["party"])  # its calls are in the stage's costs
    assert "## Judge error (the probe)" in (out / "report.md").read_text()


# ------------------------------------------------------------------------------ 5. retrieval recall joined to answers


def test_exact_index_config_replaces_only_the_approximate_dense_part():
    from harness.run.replay import exact_index_config

    pg = {"name": "pgvector", "dim": 384, "ef_search": 40, "iterative_scan": "off", "table": None}
    assert exact_index_config(pg) == {"name": "exact", "dim": 384}
    hy = {"name": "hybrid", "depth": 50, "rrf_k": 60, "lexical": "fts5", "dense": {"name": "redis_qe", "m": 16}}
    got = exact_index_config(hy)
    assert got["dense"] == {"name": "exact", "dim": 384} and got["depth"] == 50 and hy["dense"]["name"] == "redis_qe"
    assert exact_index_config({"name": "fts5", "path": None}) == {"name": "fts5", "path": None}


def test_each_run_gets_the_recall_its_own_searches_got_against_exact_search(tmp_path):
    """Two runs whose logged searches returned the exact top-k, and two whose search missed units (as a
    post-filtering index truncates): recall per run by hand, and accuracy beside it per condition."""
    from harness.data.synth import write
    from harness.memory.space import space_from_config
    from harness.memory.views import View
    from harness.run.context import LME_AGENT
    from harness.data.longmemeval import load
    from harness.memory.units import units_of_sessions

    data = write(tmp_path / "data", seed=0, size="tiny")
    qs = load(data)
    qids = sorted(qs)[:2]
    space = space_from_config({"name": "fts5"})  # lexical: no encoder to load; bm25 scoring is its exact search
    for q in qids:
        space.add_units(units_of_sessions(qs[q].sessions, q, lambda sid: LME_AGENT, lambda agent: "private"))
    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "smoke", prereg_sha=sha256_file(pre),
               data={"path": str(data), "sha256": sha256_file(data), "kind": "synth"},
               config_extra={"index": {"name": "fts5", "path": None}, "encoder": {"name": "minilm", "path": None,
                             "batch_size": 32, "device": "cpu"}})
    expected = {}
    for cond, drop in (("tool_bm25", 0), ("tool_hybrid", 3)):  # tool_hybrid's searches lost 3 of 8 units
        for q, ok in zip(qids, (True, False)):
            view = {"org": q, "agent": LME_AGENT, "scope": "own", "since": None, "until": None}
            query = qs[q].question
            exact = [[r.unit.uid, r.unit.owner] for r in space.search(query, View(q, LME_AGENT, "own"), k=8,
                                                                      scoring="bm25")]
            assert len(exact) == 8
            log = {"agent": LME_AGENT, "k": 8, "kind": "search", "query": query, "scoring": "bm25",
                   "units": exact[: len(exact) - drop], "view": view, "since": None, "until": None,
                   "session": None, "round": None, "window": None}
            st.add(cond, q, correct=ok, tools=[{"log": log}], tool_calls=1, module="tool_bm25")
            expected[(cond, q)] = (8 - drop) / 8
    st.write()
    space.close()
    out = analyse(tmp_path, pre)  # replay=none
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'r2'}", f"prereg={pre}", "replay=all"]) == 0
    per_run = csv(tmp_path / "r2", "retrieval_recall_runs.csv")
    for (cond, q), rec in expected.items():
        assert row(per_run, condition=cond, run_id=run_id(cond, q))["recall"] == pytest.approx(rec)
    s = csv(tmp_path / "r2", "retrieval_recall.csv")
    hy = row(s, condition="tool_hybrid")
    assert hy["mean_recall"] == pytest.approx(5 / 8) and hy["index"] == "fts5" and hy["accuracy_pct"] == 50
    assert hy["n_partial_recall"] == 2 and row(s, condition="tool_bm25")["n_full_recall"] == 2
    assert (tmp_path / "r2" / "figure_recall.png").exists()
    # replay=none (the default for a LongMemEval folder is org only): nothing compared, and the report says why
    assert csv(out, "retrieval_recall.csv").empty
    assert "not compared: replay=none" in (out / "report.md").read_text()


def test_make_judge_refuses_an_errata_file_that_names_no_data_of_the_stage_before_paying(tmp_path):
    """`make judge errata=FILE` on a stage whose data the errata is not about exits 2, and before any judge call:
    the stage's own judging (paid) used to run first and the refusal came after it."""
    import json
    from pathlib import Path

    import pytest
    from hydra import compose, initialize_config_dir

    from harness.data.errata import ErrataError
    from harness.records import RunDir
    from judge.answer_check import judge_command
    from tests.analysis_fixtures import answered_record
    from tests.fake_model import FakeModel

    rec_dir = tmp_path / "runs" / "smoke" / "smoke" / "records"
    rec_dir.mkdir(parents=True)
    rec = answered_record("none.lme.q00.r0", "q00", "single-session-user", "", "What is q00?", "41", "It is 41.")
    rec["data_path"] = "/gen/longmemeval_org.json"  # not a file the errata lists (by its content's sha256)
    rec["data_sha256"] = "e" * 64
    (rec_dir / "none.lme.q00.r0.json").write_text(json.dumps(rec))
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with FakeModel(script=lambda req: {"role": "assistant", "content": "yes"}) as fake:
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "stage=smoke", "judge=vllm", f"judge.base_url={fake.base_url}", "judge.backoff_s=0.01",
                f"runs_dir={tmp_path}/runs", f"cache_dir={tmp_path}/cache", f"+errata={path}"])
        rd = RunDir.for_stage(cfg)
        with pytest.raises(ErrataError, match="refused") as exc:
            judge_command(cfg, rd)
        assert exc.value.exit_code == 2
        assert fake.run_requests == []  # nothing judged, nothing paid


def test_usd_per_correct_reproduces_from_the_ledger_when_a_run_was_retried(tmp_path):
    """A run whose first attempt (100k prompt tokens, metered) was superseded: the money was spent, so USD per
    correct answer by hand from the ledger counts it, in Table 6 and in Table 1 (repeat 0: the same runs here)."""
    from tests.analysis_fixtures import PRICES, Stage, sha256_file
    from tests.test_analysis import csv, prereg_file, row

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for i in range(10):
        st.add("session_search", f"q{i:02d}", correct=i % 2 == 0, prompt=1000, output=100, attempt=2 if i == 0 else 1)
        st.add("tool_hybrid", f"q{i:02d}", correct=True, prompt=500, output=50)
    base = {"call": "deadbeef00000001", "tag": "session_search.lme.q00.r0", "attempt": 1, "role": "agent",
            "model": "test-model", "path": "/chat/completions", "ts": "2026-10-08T10:00:00.000+00:00"}
    st.ledger += [{**base, "event": "request"}, {**base, "event": "response", "status": 200, "prompt": 100000,
                                                 "hit": 0, "miss": 100000, "output": 0, "reasoning": 0}]
    st.write()
    out = analyse(tmp_path, pre)
    by_hand = (10 * (1000 * PRICES["miss"] + 100 * PRICES["output"]) + 100000 * PRICES["miss"]) / 1e6 / 5
    assert row(csv(out, "table6.csv"), party="agents", condition="session_search")["usd_per_correct"] == \
        pytest.approx(by_hand)
    assert row(csv(out, "table1.csv"), condition="session_search")["usd_per_correct"] == pytest.approx(by_hand)
