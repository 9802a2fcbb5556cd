"""Gold errata (harness/data/errata.py): pinned by full sha256, applied by content to the data they list, refused
where none matches; the corrected gold flips exactly the conclusions it touches, for every judge."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as hst
from scipy.stats import norm

from analysis import conclusions as C
from analysis import run as A
from tests.analysis_fixtures import JUDGE, Stage, run_id, sha256_file
from tests.test_analysis import csv, holm_by_hand, prereg_file, row
from tests.trust_fixtures import (ERRATA, LME, RULE_KINDS, TYPES, _borderline, _brute_verdicts,
                                  _exact_mcnemar_power, _tiny_hypothesis, analyse, comparison, judge_file,
                                  lme_questions, main_stage, org_stage, second_judge, stage_with_hybrid_wrong)


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


def test_the_corrected_view_scores_every_judge_against_the_corrected_gold(tmp_path):
    """q00's gold is corrected. A second judge marked hybrid's q00 answer wrong against the old gold (a flip of
    H1c under the official gold) and right against the corrected one: under the corrected gold it flips
    nothing; a judge with no judgements against the corrected answer has q00 left out there."""
    from harness.data import errata as E
    from tests.trust_fixtures import ERRATA, main_stage

    pre = prereg_file(tmp_path)
    st = main_stage(tmp_path, sha256_file(pre))
    st.write()
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    er = E.load(path)
    jdir = st.path / "judgements"

    def against_corrected(name: str) -> None:
        lines = [{**j, "judge": {**j["judge"], "name": f"{name}.{er.tag}"}} for j in st.judgements if j["qid"] == "q00"]
        (jdir / f"{er.judgements_name(name)}.jsonl").write_text("".join(json.dumps(x, sort_keys=True) + "\n"
                                                                       for x in lines))

    against_corrected(JUDGE)
    q00 = run_id("tool_hybrid", "q00")
    second_judge(st, "oldgold", {q00})
    against_corrected("oldgold")
    second_judge(st, "nocorr", {q00})
    out = analyse(tmp_path, pre, f"errata={path}", f"errata_sha256={er.sha256}")
    off = C.compare_verdicts(csv(out, "judge_robustness.csv")).set_index("conclusion")
    assert off.at["H1c", "flips_under"] == "nocorr; oldgold"  # against the official gold both flip it
    t = csv(out / "corrected", "judge_robustness.csv")
    cor = C.compare_verdicts(t).set_index("conclusion")
    assert (cor["flips"] == 0).all() and cor.at["H1c", "checks"] == 2
    h1c = t[t["conclusion"] == "H1c"]
    assert row(h1c, labels="oldgold")["n"] == 19 and row(h1c, labels="oldgold")["verdict"] == "supported"  # q01 out
    assert row(h1c, labels="nocorr")["n"] == 18  # and q00, which it never judged against the corrected answer
    assert row(h1c, labels="nocorr")["against"].endswith("on nocorr's runs")


def test_an_errata_pin_is_the_full_sha256_and_a_prefix_or_another_file_is_refused(tmp_path):
    import hashlib

    from harness.data import errata as E
    from tests.trust_fixtures import ERRATA

    path = tmp_path / "e.yaml"
    path.write_text(ERRATA)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert E.load(path, sha).sha256 == sha and E.load(path, sha.upper()).sha256 == sha
    for pin in (sha[:1], sha[:12], sha[:63]):
        with pytest.raises(E.ErrataError, match="full 64-digit sha256"):
            E.load(path, pin)
    path.write_text(ERRATA.replace("by mistake", "by mistake!"))  # a modified file under the old pin
    with pytest.raises(E.ErrataError, match="the file changed"):
        E.load(path, sha)
    path.write_text(ERRATA[:ERRATA.index("applies_to:")] + ERRATA[ERRATA.index("entries:"):])
    with pytest.raises(E.ErrataError, match="applies_to"):
        E.load(path)


def test_errata_apply_only_to_the_data_they_list_by_content_and_are_refused_where_none_matches(tmp_path):
    """The main folder's data has the listed sha256; the Org folder's file has the same name (data.json) but
    another content: it keeps the official gold (its q-ids overlap). An errata file listing neither content is
    refused with exit 2, whatever the names."""
    from analysis import run as A
    from tests.trust_fixtures import ERRATA

    pre = prereg_file(tmp_path)
    sha = sha256_file(pre)
    st = stage_with_hybrid_wrong(tmp_path, sha, wrong=0)
    st.write()
    org = Stage(tmp_path / "runs", "org", prereg_sha=sha,
                data={"path": "/gen/data.json", "sha256": "e" * 64, "kind": "org"})  # the listed name, other content
    for q in ("q01", "q02"):  # the same question ids as the main stage's excluded and evidence entries
        org.add("shared", q, variant="public", correct=True)
        org.add("isolated", q, variant="public", correct=False)
    org.write()
    path = tmp_path / "errata.yaml"
    path.write_text(ERRATA)
    out = analyse(tmp_path, pre, f"errata={path}")
    aff = csv(out, "errata.csv")
    assert set(aff["folder"]) == {"main/main"}  # the Org folder is not touched
    runs = csv(out / "corrected", "runs.csv")
    assert set(runs.loc[runs["folder"] == "org/org", "qid"]) == {"q01", "q02"}  # q01 not excluded there
    assert "q01" not in set(runs.loc[runs["folder"] == "main/main", "qid"])
    rep = (out / "report.md").read_text()
    assert "not applied to org/org (data.json, sha256 eeeeeeeeeeee)" in rep
    other = tmp_path / "other.yaml"
    other.write_text(ERRATA.replace("d" * 64, "a" * 64))  # another content (the name data.json kept): refused
    assert A.main([f"runs={tmp_path / 'runs'}", f"out={tmp_path / 'r2'}", f"prereg={pre}", "replay=none",
                   f"errata={other}"]) == 2


@settings(max_examples=40, deadline=None, derandomize=True)
@given(listed=hst.lists(hst.tuples(hst.from_regex(r"[a-z_]{1,12}\.json", fullmatch=True),
                                   hst.from_regex(r"[0-9a-f]{64}", fullmatch=True)), min_size=1, max_size=3),
       name=hst.from_regex(r"[a-z_]{1,12}\.json", fullmatch=True), sha=hst.from_regex(r"[0-9a-f]{64}", fullmatch=True))
def test_errata_apply_by_content_never_by_name(tmp_path_factory, listed, name, sha):
    """Any listed files, any data file: the corrections apply exactly when its sha256 is listed, whatever its name."""
    import yaml

    from harness.data import errata as E

    path = tmp_path_factory.mktemp("e") / "e.yaml"
    path.write_text(yaml.safe_dump({"errata_format": 1, "name": "x", "applies_to": [{"file": f, "sha256": h}
                                                                                     for f, h in listed],
                                    "notes": [{"source": "https://example.org/1", "reasoning": "r"}]}))
    er = E.load(path)
    assert er.applies(sha) == (sha in {h for _, h in listed})
    for f, h in listed:
        assert er.applies(h) and er.applies(h.upper())
    assert not er.applies(None) and not any(er.applies(f) for f, _ in listed)  # a name is never a match
    if sha not in {h for _, h in listed}:
        with pytest.raises(E.ErrataError, match="refused"):
            er.require({sha: f"/x/{listed[0][0]}"}, "here")  # the listed name with another content


def test_the_shipped_errata_list_every_open_report_with_its_choice():
    from pathlib import Path

    from harness.data import errata as E

    er = E.load(Path(__file__).resolve().parents[1] / "data" / "errata" / "longmemeval.yaml")
    rep = er.reports()
    by_issue: dict[str, list[dict]] = {}
    for r in rep:
        for s in r["source"].split():
            by_issue.setdefault(s.rsplit("/", 1)[-1], []).append(r)
    assert {"19", "27", "37", "38", "40", "50"} <= set(by_issue)
    assert {r["choice"] for r in rep} <= {"corrected (answer)", "corrected (evidence)", "excluded", "left"}
    assert [r["qid"] for r in by_issue["50"]] == ["9aaed6a3", "gpt4_f420262d", "gpt4_5dcc0aab"]  # all three items
    assert {r["qid"]: r["choice"] for r in by_issue["40"]} == {"370a8ff4": "corrected (answer)",
                                                               "gpt4_88806d6e": "left"}
    assert by_issue["38"][0]["choice"] == "left"
    assert er.applies_to == {"d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442":
                             "longmemeval_s_cleaned.json"}  # by content: the published S file


def test_the_errata_list_the_open_reports_they_missed_and_claim_nothing_unread():
    """Open LongMemEval reports #12 (ad7109d1), #21 (dd2973ad), #22 (51a45a95) and #41 (370a8ff4 filed again after
    #40 was closed) had no choice recorded; #50's third item was described (a question about shoes) from an excerpt
    that ends at the question id."""
    from pathlib import Path

    from harness.data import errata as E

    er = E.load(Path(__file__).resolve().parents[1] / "data" / "errata" / "longmemeval.yaml")
    by: dict[str, dict[str, str]] = {}
    for r in er.reports():
        for s in r["source"].split():
            by.setdefault(s.rsplit("/", 1)[-1], {})[r["qid"]] = r["choice"]
    assert by["41"] == {"370a8ff4": "corrected (answer)"}
    assert by["21"] == {"dd2973ad": "excluded"}  # acknowledged upstream; no corrected bedtime established
    assert by["12"] == {"ad7109d1": "left"} and by["22"] == {"51a45a95": "left"}
    third = next(n for n in er.notes if n.get("qid") == "gpt4_5dcc0aab")["reasoning"].lower()
    assert "shoe" not in third and "cut off" in third
