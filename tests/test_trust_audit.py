"""An outside statistician's audit of the trust features (issue 34): each test is a case the shipped
code got wrong, with the truth written by hand (planted answers read one by one)."""

from __future__ import annotations

import pytest

from judge import probe as PR


def _q(qid: str, question: str, gold: str) -> dict:
    return {"qid": qid, "qtype": "multi-session", "question": question, "gold": gold, "abstention": False}


def _planted(*qs: dict) -> dict[tuple[str, str], str]:
    return {(p["qid"], p["kind"]): p["answer"] for p in PR.plant(list(qs), seed=0)}


def test_no_reordering_for_order_questions_without_the_word_order():
    """'From most to least favourite', 'chronologically', 'ranked': the reversed list is a wrong answer. Since
    issue 44 no list is reordered at all (whether a comma or "and" separates items is a reading of the gold),
    and the second rule refuses a reordered answer as a right one."""
    qs = [_q("o1", "What are my three favorite movies, from most to least favorite?", "Inception, Interstellar and Memento"),
          _q("o2", "List the cities I visited chronologically.", "Paris, Rome and Berlin"),
          _q("o3", "Can you give me the gyms I tried, ranked by how much I liked them?", "Equinox, Crunch and Planet Fitness"),
          _q("u1", "Which friends came to my birthday dinner?", "Alice, Bob and Carol")]
    by = _planted(*qs)
    assert not [k for k in by if k[1] == "reordered"], by
    for q in qs:
        parts = [x.strip() for x in q["gold"].replace(" and ", ", ").split(", ")]
        reversed_ = {**q, "kind": "reordered", "truth": True, "answer": ", ".join(parts[::-1][:-1]) + " and " + parts[0]}
        assert PR.check(reversed_), reversed_


def test_a_name_or_title_joined_by_and_is_not_a_list_to_reorder():
    """'Pride and Prejudice', 'Bread and Butter', 'Tom and Jerry' are one name each: 'Prejudice and Pride' is not
    the gold, so it must not be planted as a right answer, and the second rule must refuse it."""
    qs = [_q("t1", "Which book did I recommend to my sister?", "Pride and Prejudice"),
          _q("t2", "Which restaurant did we go to for our anniversary?", "Bread and Butter"),
          _q("t3", "Which cartoon did my son watch all weekend?", "Tom and Jerry")]
    by = _planted(*qs)
    assert not [k for k in by if k[1] == "reordered"], by
    for q in qs:
        a, b = q["gold"].split(" and ")
        assert PR.check({**q, "kind": "reordered", "truth": True, "answer": f"{b} and {a}"})


def test_a_changed_number_keeps_no_accepted_alternative_written_in_words():
    """'11 weeks, or twelve if rounded up': changing 11 to 14 leaves 'twelve if rounded up', an accepted answer,
    in a planted wrong answer. The second rule must see numbers in words too."""
    q = _q("n1", "How many weeks did the course take?", "11 weeks, or twelve if rounded up")
    by = _planted(q)
    assert ("n1", "changed_number") not in by, by
    assert PR.check({**q, "kind": "changed_number", "truth": False, "answer": "14 weeks, or twelve if rounded up"})
    assert PR.check({**q, "kind": "changed_number", "truth": False, "answer": "eleven weeks"})  # the gold in words
    # a number changed where nothing of the gold survives is kept
    assert _planted(_q("n2", "How many days did it take?", "21 days. 22 days (including the last day) is also "
                                                          "acceptable."))[("n2", "changed_number")] == "24 days"


def test_a_date_is_changed_only_when_the_question_asks_when_not_for_a_when_clause():
    """'What was I doing when I met Emma?' asks what, not when: 'a conference in August' still names the
    conference, so it is no planted wrong answer; the second rule reads the question too."""
    q = _q("d1", "What was I doing when I met Emma?", "I was at a conference in May")
    by = _planted(q)
    assert ("d1", "changed_date") not in by, by
    assert PR.check({**q, "kind": "changed_date", "truth": False, "answer": "I was at a conference in August"})
    for text in ("When did I start my new job?", "What date is my dentist appointment?",
                 "On which day did I adopt my dog?"):
        assert _planted(_q("d2", text, "March 2023"))[("d2", "changed_date")] == "June 2023", text


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


def _exact_mcnemar_power(n: int, psi: float, delta: float, alpha: float = 0.05) -> float:
    """Independent of analysis.power: m ~ Bin(n, psi) discordant, a_only | m ~ Bin(m, (psi + delta) / (2 psi)),
    decided by scipy's binomtest."""
    from scipy.stats import binom, binomtest

    tot = 0.0
    for m in range(1, n + 1):
        pm = binom.pmf(m, n, psi)
        if pm < 1e-13:
            continue
        for a in range(m // 2 + 1, m + 1):
            if binomtest(a, m, 0.5).pvalue <= alpha:
                tot += pm * binom.sf(a - 1, m, (psi + delta) / (2 * psi))
                break  # every larger a_only is also significant
    return tot


def test_the_exact_mcnemar_n_for_80_is_the_smallest_n_that_reaches_it_on_a_saw_tooth():
    """The exact test's power is not monotone in n (psi 1.0, delta 0.2: 0.804 at 199, 0.787 at 200, 0.817 at 203):
    a bisection stops at a local crossing (203). The smallest n with 80% is 199."""
    from analysis import power as W

    psi, delta = 1.0, 0.2
    got = int(W.mcnemar_n(psi, delta, 0.05))
    assert _exact_mcnemar_power(got, psi, delta) >= 0.8
    assert all(_exact_mcnemar_power(k, psi, delta) < 0.8 for k in range(180, got))
    assert got == 199


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
    from tests.test_trust import ERRATA

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
    from tests.test_trust import analyse

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
