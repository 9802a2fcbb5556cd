"""The one breaker of the driver and both judges (harness.endpoints.liveness.Breaker, issue 42).

The server is judged by what it answered since the failures began: runs (judgements) out of retries or
rejected the same unexplained way are held, recorded failed only once a later one succeeds, and stop the
stage unrecorded otherwise — whatever succeeded earlier and whatever the one-token probe answers.

The personal study's rubric judge when its server dies (issue 33): the answer check's rule and pool
(judge.common.ask/judge_all) stop judging with exit 3 naming the server's last answer, write no failed judgement,
start nothing queued, and the same command on the fixed server scores exactly the rest: one tiny stage (3 trials
x 2 methods, 6 runs) answered by one scripted upstream, judged by another (bench/fake_upstream.py), in process.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading

import pytest

from bench.fake_upstream import is_preflight
from harness.studies.agents import run as run_agents
from harness.studies.personal import run as run_personal
from harness.endpoints.liveness import Breaker
from harness.failures import STOPPED, EnvironmentFailure, exit_code
from harness.records import RunDir
from judge.answer_check import load_judgements
from judge.rubric import load_rubric
from judge.run import main_entry
from tests import endpoint_replies as R
from tests.fake_model import FakeModel
from tests.personal_helpers import Script, stage_cfg
from tests.test_failures_midstage import (  # noqa: F401 (fixture)
    _shared_cache, agents_cfg, ledger_matches_records, once, recs, stage_of, stopped)
from tests.test_judge import judge_cmd, judge_fixed_server, judge_script, judged_exactly_the_rest, stage_dir
from tests.test_judge import stage, stage_runs  # noqa: F401 (fixtures)


# ------------------------------------------------------------------ the rule itself

def test_a_success_before_the_failures_began_does_not_disarm_the_rejection_breaker():
    b = Breaker(3)
    assert b.admit("ok1", True) == ["ok1"]
    assert b.admit("r1", False, "rejected", "400:Bad Request", "q1") == []
    assert b.admit("r2", False, "rejected", "400:Bad Request", "q2") == []
    with pytest.raises(EnvironmentFailure, match="same endpoint rejection ended 3 runs"):
        b.admit("r3", False, "rejected", "400:Bad Request", "q3", "Bad Request")
    assert b.admit("ok2", True) == [] and b.release() == []  # tripped: nothing after it is recorded either


def test_held_failures_are_recorded_only_once_a_later_unit_succeeds():
    b = Breaker(3)
    assert b.admit("f1", False, "retries", None, "q1") == []
    assert b.admit("own", False, "context_length", None, "q2") == ["own"]  # the run's own failure: at once
    assert b.admit("f2", False, "retries", None, "q1") == []  # 2 runs of 3
    assert b.admit("ok", True) == ["f1", "f2", "ok"]  # the server kept answering others
    assert b.release() == []


def test_failures_still_held_at_the_end_are_the_servers_whatever_succeeded_earlier():
    b = Breaker(3, probe=lambda: True)  # the probe answers: it decides nothing
    assert b.admit("ok", True) == ["ok"]
    assert b.admit("tail1", False, "retries", None, "q1") == []
    assert b.admit("tail2", False, "rejected", "400:x", "q2") == []
    with pytest.raises(EnvironmentFailure, match="none succeeded after them"):
        b.release()


def test_a_failing_probe_stops_at_the_first_run_out_of_retries_and_n_zero_records_every_failure():
    with pytest.raises(EnvironmentFailure, match="does not answer a plain request"):
        Breaker(3, probe=lambda: False).admit("f", False, "retries", None, "q")
    off = Breaker(0, probe=lambda: False)
    assert off.admit("f", False, "retries", None, "q") == ["f"] and off.release() == []


# ------------------------------------------------------------------ the driver

def test_a_gateway_turning_to_unexplained_400s_after_one_success_stops_the_stage_and_burns_nothing(tmp_path):
    """16 of 18 runs were recorded `rejected` with exit 0: the breaker disarmed at the first success."""
    answered = {"n": 0}

    def refuse(req):
        if is_preflight(req):
            return None
        answered["n"] += 1
        return R.OPAQUE if answered["n"] > 1 else None

    with FakeModel(refuse=refuse) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, "concurrency=1", "model.breaker_runs=2"))
        assert exit_code(exc) == STOPPED and "same endpoint rejection" in str(exc), exc
        first = recs(stage_of(tmp_path))
        assert all(r["status"] == "ok" for r in first.values()) and len(first) <= 1
        fake.refuse = None  # the gateway is fixed: the same command runs every run left
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1", "model.breaker_runs=2"))
    after = recs(stage_of(tmp_path))
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())


def test_runs_at_the_tail_failing_while_the_probe_answers_stay_unrecorded_and_exit_3(tmp_path):
    """A gateway that drops the runs' requests near the end but answers the one-token probe."""
    with FakeModel(dies_with="503", dies_after=3) as fake:
        fake.refuse = lambda req: None
        real = fake._next_fault
        fake._next_fault = lambda req: None if is_preflight(req) else real(req)  # the probe always answers
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, "concurrency=1"))
        assert exit_code(exc) == STOPPED and "none succeeded after them" in str(exc), exc
        first = recs(stage_of(tmp_path))
        assert 0 < len(first) < 4 and all(r["status"] == "ok" for r in first.values())
        fake.dies_with = None
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1"))
    after = recs(stage_of(tmp_path))
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    assert all(after[k]["finished"] == v["finished"] for k, v in first.items())  # the first session's kept


# ------------------------------------------------------------------ both judges

def test_the_answer_check_writes_no_failed_judgement_when_the_server_fails_every_call_but_answers_the_probe(stage):  # noqa: F811
    with FakeModel(script=lambda req: judge_script(req, None), dies_with="503", dies_after=2) as fake:
        real = fake._next_fault
        fake._next_fault = lambda req: None if is_preflight(req) else real(req)  # the probe always answers
        res = subprocess.run(judge_cmd(stage, fake, "judge.max_retries=1", "concurrency=1"), capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 3, res.stderr
        assert "judge's server keeps failing" in res.stderr
        first = load_judgements(stage_dir(stage), "vllm")
        assert {v["status"] for v in first.values()} <= {"ok", "failed_run"}  # nothing written failed
        ok = {k: v for k, v in first.items() if v["status"] == "ok"}
        asked = judge_fixed_server(stage, fake)
    judged_exactly_the_rest(stage, ok, asked)


def test_the_rubric_judge_writes_no_failed_score_when_its_server_turns_to_unexplained_400s(rubric_stage, capsys):
    tmp, rd = rubric_stage
    state = {"n": 0}

    def script(req):
        return {"role": "assistant", "content": '{"profile_usage": 4, "task_usage": 3, "integration": 2}'} \
            if req["messages"][0]["content"].startswith("You are grading") else {"role": "assistant", "content": "OK"}

    def refuse(req):
        if not req["messages"][0]["content"].startswith("You are grading"):
            return None
        state["n"] += 1
        return R.OPAQUE if state["n"] > 1 else None

    with FakeModel(script=script, refuse=refuse) as fake:
        code, err = judge(tmp, fake, capsys)
        assert code == STOPPED and "judge's server keeps failing" in err, err
        first = load_rubric(rd, "rj")
        assert {v["status"] for v in first.values()} == {"ok"} and len(first) == 1  # one scored, none failed
        assert len(graded(fake)) == 4  # the one answered, then breaker_runs (3) rejections
        fake.refuse = None
        rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, first)


# ------------------------------------------------------------------ property: random servers over sharded stages

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SERVER = {"500": (500, {"error": {"message": "boom", "type": "server_error"}}),
          "503": (503, {"error": {"message": "no healthy upstream", "type": "service_unavailable"}}),
          "400": R.OPAQUE}


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(script=st.lists(st.sampled_from(["ok", "ok", "500", "503", "400"]), min_size=2, max_size=16))
def test_property_no_run_is_recorded_failed_for_a_fault_of_the_server(tmp_path_factory, script):
    """Two shards of a stage, one after the other, against a server answering each request as `script` says
    (then answering): a run recorded failed (out of retries, or rejected) always has a run answered after it
    (the server kept answering others); every stop is exit 3; and the same commands on the fixed server
    record every run exactly once."""
    tmp = tmp_path_factory.mktemp("prop")
    todo = list(script)
    lock = threading.Lock()

    def refuse(req):
        with lock:
            kind = todo.pop(0) if todo else "ok"
        return SERVER.get(kind)

    def shards(fake) -> None:
        for i in range(2):
            try:
                run_agents(agents_cfg(tmp, fake, f"shard={i}/2", "concurrency=1", "model.breaker_runs=2"))
            except Exception as exc:  # noqa: BLE001 - a stop, checked
                assert exit_code(exc) == STOPPED, exc

    with FakeModel(refuse=refuse) as fake:
        shards(fake)
        first = recs(stage_of(tmp))
        for r in first.values():
            if r["status"] != "ok":
                assert r["failure_reason"] in ("retries", "rejected"), r["error"]
                assert any(o["status"] == "ok" and o["finished"] > r["finished"] for o in first.values()), r["run_id"]
        fake.refuse = None  # the server is fixed
        shards(fake)
    after = recs(stage_of(tmp))
    assert len(after) == 4 and {k: v["finished"] for k, v in first.items()} == \
        {k: after[k]["finished"] for k in first}  # nothing recorded twice, the first session's kept
    assert all(r["status"] == "ok" for k, r in after.items() if k not in first)


# ------------------------------------------------------------------ the breaker on a stage of fewer questions than breaker_runs

def test_a_gateway_failing_every_run_request_of_a_stage_with_fewer_questions_than_breaker_runs_burns_no_run(tmp_path):
    """The smoke stage asks 2 questions (4 runs); a gateway fails every run request but answers the probe.
    At the default breaker_runs=3 "different questions in a row" can never be reached, so every run was
    recorded failed at the stage's end with exit 0 — the whole stage burnt, no run ever succeeding. Every
    question of the stage out of retries, none succeeding, is the server's: exit 3, 0 runs recorded."""
    from harness.failures import STOPPED, exit_code
    from tests.test_failures_midstage import stopped

    broken = {"on": True}
    refuse = lambda req: (503, {"error": {"message": "upstream overloaded", "type": "x"}}, {"Retry-After": "0"}) \
        if broken["on"] and not is_preflight(req) else None  # noqa: E731
    with FakeModel(refuse=refuse) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, "concurrency=1"))
        assert exit_code(exc) == STOPPED and "upstream overloaded" in str(exc), exc
        rd = RunDir(tmp_path / "runs" / "smoke" / "smoke")
        assert once(rd) == {}
        broken["on"] = False
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1"))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    ledger_matches_records(rd, after)


def test_a_stage_of_two_questions_stops_after_breaker_runs_failed_runs_not_at_its_end(tmp_path):
    """2 questions x 4 conditions; a gateway fails every run request and answers the probe. "3 different questions
    in a row" could never happen, so the stage ran all 8 runs out of retries (the audit's smoke_org: 97 run requests)
    before stopping at its end. Now the third failed run stops it, the three unrecorded, the rest never started."""
    refuse = lambda req: (503, {"error": {"message": "upstream overloaded", "type": "x"}}, {"Retry-After": "0"}) \
        if not is_preflight(req) else None  # noqa: E731
    with FakeModel(refuse=refuse) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, "concurrency=1", "model.breaker_runs=3",
                                             conds="none,full,prefetch,tool_bm25"))
    assert exit_code(exc) == STOPPED and "3 runs in a row ran out of retries" in str(exc), exc
    rd = stage_of(tmp_path)
    started = {json.loads(x)["run"] for x in rd.attempts_path.read_text().splitlines()}
    assert len(started) == 3  # of 8 planned: stopped at the third failed run, one at a time
    assert once(rd) == {}  # none recorded failed for the server's fault


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 5), seq=st.lists(st.tuples(st.booleans(), st.sampled_from(["q1", "q2"])), max_size=30))
def test_property_the_breaker_trips_at_the_nth_run_out_of_retries_since_the_last_success_whatever_its_question(
        n, seq):
    b, streak, recorded = Breaker(n), 0, []
    for i, (ok, q) in enumerate(seq):
        streak = 0 if ok else streak + 1
        if streak >= n:
            with pytest.raises(EnvironmentFailure, match=f"{n} runs in a row ran out of retries"):
                b.admit(i, ok, None if ok else "retries", None, q)
            assert not any(u in recorded for u in range(i - n + 1, i + 1))  # the n held runs stay unrecorded
            return
        recorded += b.admit(i, ok, None if ok else "retries", None, q)
    assert all(seq[u][0] or any(seq[v][0] for v in range(u + 1, len(seq))) for u in recorded)  # failed: a later ok


METHODS = ["naive_concat", "kernel_shared"]
SCORES = '{"profile_usage": 4, "task_usage": 3, "integration": 2}'


def grade(req):
    if req["messages"][0]["content"].startswith("You are grading"):
        return {"role": "assistant", "content": SCORES}
    return {"role": "assistant", "content": "OK"}


def graded(fake) -> list[str]:
    return [r["body"]["messages"][0]["content"] for r in fake.requests
            if r["body"]["messages"][0]["content"].startswith("You are grading")]


@pytest.fixture()
def rubric_stage(tmp_path):
    with FakeModel(script=Script()) as fake:
        rd = run_personal(stage_cfg(tmp_path, fake.base_url, METHODS, n=3, extra=["index=exact"]))
    assert len(list(rd.records())) == 6
    return tmp_path, rd


def judge(tmp, judge_fake, capsys, *extra) -> tuple[int, str]:
    cfg = stage_cfg(tmp, "http://127.0.0.1:9/v1", METHODS, n=3, extra=[
        "index=exact", "judge=vllm", f"judge.base_url={judge_fake.base_url}", "judge.backoff_s=0.01",
        "judge.name=rj", "concurrency=1", *extra])
    capsys.readouterr()
    code = main_entry(cfg)
    return code, capsys.readouterr().err


def cached(tmp) -> int:
    return sqlite3.connect(tmp / "cache" / "judge_cache.sqlite").execute("SELECT COUNT(*) FROM replies").fetchone()[0]


def rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, kept: dict) -> None:
    before = len(fake.requests)
    code, err = judge(tmp, fake, capsys)
    assert code == 0, err
    asked = [r["body"]["messages"][0]["content"] for r in fake.requests[before:]
             if r["body"]["messages"][0]["content"].startswith("You are grading")]
    lines = load_rubric(rd, "rj")
    assert len(lines) == 6 and {v["status"] for v in lines.values()} == {"ok"}
    assert all(lines[k]["ts"] == v["ts"] for k, v in kept.items())  # the first session's kept, not re-asked
    assert sorted(asked) == sorted(v["prompt"] for k, v in lines.items() if k not in kept)  # the rest, each once
    assert cached(tmp) == 6


def test_a_rubric_server_dying_after_some_judgements_stops_judging_and_the_rerun_scores_exactly_the_rest(
        rubric_stage, capsys):
    tmp, rd = rubric_stage
    with FakeModel(script=grade, dies_with="503", dies_after=2) as fake:
        code, err = judge(tmp, fake, capsys, "judge.max_retries=1")
        assert code == STOPPED, err
        assert "judge's server keeps failing" in err and "no healthy upstream" in err
        first = load_rubric(rd, "rj")
        assert len(first) == 2 and {v["status"] for v in first.values()} == {"ok"}  # nothing written failed
        # 2 answered, the third's 2 attempts; the probe; nothing queued started after the stop
        assert len(graded(fake)) == 4 and cached(tmp) == 2
        fake.dies_with = None
        rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, first)


def test_a_rubric_server_failing_every_call_stops_judging_unwritten_and_the_same_command_scores_the_rest(
        rubric_stage, capsys):
    tmp, rd = rubric_stage
    with FakeModel(script=grade, always="500") as fake:
        code, err = judge(tmp, fake, capsys, "judge.max_retries=1")
        assert code == STOPPED, err
        assert "judge's server keeps failing" in err and "boom" in err
        assert load_rubric(rd, "rj") == {} and len(graded(fake)) == 2  # one judgement's 2 attempts, no more
        fake.always = None
        rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, {})


def test_a_rubric_server_whose_credit_goes_stops_judging_at_once_and_the_same_command_scores_the_rest(
        rubric_stage, capsys):
    tmp, rd = rubric_stage
    with FakeModel(script=grade, dies_with="quota", dies_after=3) as fake:
        code, err = judge(tmp, fake, capsys)  # the default 6 retries: quota is never retried
        assert code == STOPPED, err
        assert "quota" in err
        first = load_rubric(rd, "rj")
        assert len(first) == 3 and {v["status"] for v in first.values()} == {"ok"}
        assert len(graded(fake)) == 4  # 3 answered, the fourth refused once, nothing after it
        fake.dies_with = None
        rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, first)
