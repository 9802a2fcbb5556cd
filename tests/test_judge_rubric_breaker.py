"""The personal study's rubric judge when its server dies (issue 33): the answer check's rule and pool
(judge.common.ask/judge_all, harness.endpoints.liveness) stop judging with exit 3 naming the server's last
answer, write no failed judgement, start nothing queued, and the same command on the fixed server scores
exactly the rest. One tiny stage (3 trials x 2 methods, 6 runs) answered by one scripted upstream, judged by
another (bench/fake_upstream.py), in process."""

from __future__ import annotations

import sqlite3

import pytest

from harness.studies.personal import run as run_personal
from harness.failures import STOPPED
from judge.rubric import load_rubric
from judge.run import main_entry
from tests.fake_model import FakeModel
from tests.personal_helpers import Script, stage_cfg

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
def stage(tmp_path):
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
        stage, capsys):
    tmp, rd = stage
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
        stage, capsys):
    tmp, rd = stage
    with FakeModel(script=grade, always="500") as fake:
        code, err = judge(tmp, fake, capsys, "judge.max_retries=1")
        assert code == STOPPED, err
        assert "judge's server keeps failing" in err and "boom" in err
        assert load_rubric(rd, "rj") == {} and len(graded(fake)) == 2  # one judgement's 2 attempts, no more
        fake.always = None
        rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, {})


def test_a_rubric_server_whose_credit_goes_stops_judging_at_once_and_the_same_command_scores_the_rest(
        stage, capsys):
    tmp, rd = stage
    with FakeModel(script=grade, dies_with="quota", dies_after=3) as fake:
        code, err = judge(tmp, fake, capsys)  # the default 6 retries: quota is never retried
        assert code == STOPPED, err
        assert "quota" in err
        first = load_rubric(rd, "rj")
        assert len(first) == 3 and {v["status"] for v in first.values()} == {"ok"}
        assert len(graded(fake)) == 4  # 3 answered, the fourth refused once, nothing after it
        fake.dies_with = None
        rerun_scores_exactly_the_rest(tmp, rd, fake, capsys, first)
