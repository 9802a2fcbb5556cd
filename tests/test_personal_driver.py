"""The personalization stage through the one driver (issue 23 item 2, issue 22 items 1-2): what stops it,
what fails a run, the spending cap, retry_failed, shards, the dry run and the rubric judge's parameters.

One tiny stage (2 trials x naive_concat + kernel_shared on the exact index: 4 runs, 10 model calls) on the
scripted upstream (bench/fake_upstream.py), run in process; its faults come from the upstream's script.
"""

from __future__ import annotations

import json

import pytest
from harness.studies.personal import run as run_personal
from harness.failures import BUDGET, STOPPED, exit_code
from harness.records import RunDir
from harness.records.ledger import read_ledger
from tests.fake_model import FakeModel
from tests.personal_helpers import Script, records, stage_cfg

METHODS = ["naive_concat", "kernel_shared"]
BASE = ["index=exact", "stage.concurrency=1"]
CONCAT = "Everything the user has told you"  # naive_concat's block: marks its assistant's requests


def tiny(tmp, fake, *extra):
    return stage_cfg(tmp, fake.base_url, METHODS, n=2, extra=[*BASE, *extra])


def judge_script(req):
    if req["messages"][0]["content"].startswith("You are grading"):
        return {"role": "assistant", "content": '{"profile_usage": 4, "task_usage": 3, "integration": 2}'}
    return Script()(req)


def stage(tmp) -> RunDir:
    return RunDir(tmp / "runs" / "personal_smoke" / "smoke")


def attempts_started(rd: RunDir) -> list[str]:
    return [json.loads(x)["run"] for x in rd.attempts_path.read_text().splitlines()]


def test_a_refused_key_mid_stage_stops_it_unrecorded_and_the_same_command_finishes_each_run_once(tmp_path):
    # the 2 preflight calls (assistant, writers' JSON mode) and 5 run calls pass; then the key is refused
    with FakeModel(script=Script(), schedule=["ok"] * 7, always="401") as fake:
        with pytest.raises(Exception) as got:
            run_personal(tiny(tmp_path, fake))
        assert exit_code(got.value) == STOPPED and "HTTP 401" in str(got.value)
        rd = stage(tmp_path)
        before = records(rd)
        assert 0 < len(before) < 4 and all(r["status"] == "ok" for r in before.values())  # nothing burnt
        hit = set(attempts_started(rd)) - set(before)
        assert hit  # the run the refusal met was started, and stays unrecorded
        fake.always = None  # the key is fixed: the same command, here as two shards of the stage
        for shard in ("0/2", "1/2"):
            run_personal(tiny(tmp_path, fake, f"shard={shard}"))
    after = records(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    assert {k: v["finished"] for k, v in after.items() if k in before} == {k: v["finished"] for k, v in before.items()}
    for rid, r in after.items():
        assert r["attempt"] == (2 if rid in hit else 1)
    assert sorted(p.name for p in (rd.root / "shards").iterdir()) == ["0of2", "1of2"]
    ledger = [e for p in rd.ledger_paths() for e in read_ledger(p)]
    marked = {(e["tag"], e["attempt"]) for e in ledger if e.get("event") == "interrupted"}
    assert {(rid, 1) for rid in hit} <= marked
    # each record's calls are the ledgers' 200 responses of its attempt: nothing counted twice
    ok = [e for e in ledger if e.get("event") == "response" and e["status"] == 200]
    for rid, r in after.items():
        assert len([e for e in ok if e["tag"] == rid and e["attempt"] == r["attempt"]]) == len(r["calls"])
    # latency as the paper measures it, with retrieval and barrier wait beside it; the transcript kept
    for r in after.values():
        assert r["answer_s"] >= r["assistant_tokens"]["latency_s"] > 0
        assert r["retrieval_s"] >= 0 and r["barrier_wait_s"] >= 0
        msgs = r["transcript"]["messages"]
        assert rd.prompt(r["transcript"]["system_sha256"]).startswith("You are AssistantAgent")
        assert msgs[-1] == {"role": "assistant", "content": r["answer"], "tool_calls": None, "tool_call_id": None,
                            "tool": None, "call": None, "asked": None}
        assert (msgs[0]["role"], msgs[0]["content"]) == ("system", r["block"])


def test_an_endpoint_without_json_mode_stops_at_the_preflight_naming_the_parameter(tmp_path):
    refusal = (400, {"error": {"message": "response_format json_object is not supported by this server",
                               "type": "invalid_request_error", "param": "response_format", "code": None}})
    with FakeModel(script=Script(), refuse=lambda req: refusal if "response_format" in req else None) as fake:
        with pytest.raises(Exception) as got:
            run_personal(tiny(tmp_path, fake))
        assert exit_code(got.value) == STOPPED
        assert "preflight model failed" in str(got.value) and "response_format" in str(got.value)
        assert "writers, JSON mode" in str(got.value)
        assert fake.requests and not fake.run_requests  # not one run's call was sent
    assert not records(stage(tmp_path)) and not stage(tmp_path).attempts_path.exists()


def test_the_dry_run_prints_plan_shapes_and_forecast_and_sends_nothing(tmp_path, capsys):
    with FakeModel(script=Script()) as fake:
        assert run_personal(tiny(tmp_path, fake, "dry_run=true")) is None
        assert fake.requests == []
    out = capsys.readouterr().out
    assert "total runs 4" in out and "dry run: nothing started" in out
    assert "writers, JSON mode" in out and "assistant, plain request" in out and "rubric judge" in out
    assert "cost forecast" in out and "kernel_shared" in out
    assert not (tmp_path / "runs").exists()


def test_the_spending_cap_stops_the_stage(tmp_path):
    # $7 a call (7 output tokens at $1/token): the 2 preflight calls and about two runs fit in $40
    with FakeModel(script=Script()) as fake:
        with pytest.raises(Exception) as got:
            run_personal(tiny(tmp_path, fake, "model.prices.output=1000000.0", "budget_usd=40",
                              "model.params.max_tokens=7"))  # a call's worst case: its prompt and max_tokens
    assert exit_code(got.value) == BUDGET and "stopped at budget" in str(got.value)
    recs = records(stage(tmp_path))
    assert 0 < len(recs) < 4 and all(r["status"] == "ok" for r in recs.values())
    spent = sum(e["output"] * 1.0 for e in read_ledger(stage(tmp_path).ledger_path)
                if e.get("event") == "response" and e["status"] == 200)
    assert 7 * 2 <= spent <= 40  # the proxy sends no call whose worst case could pass the cap


from tests.endpoint_replies import reasoning_refusal  # noqa: E402 - the judge's endpoint


def test_retry_failed_reruns_only_failed_runs_and_the_rubric_never_scores_a_failed_run(tmp_path):
    """Also: the rubric judge is a reasoning model (judge=openai_reasoning, `accepts`): its endpoint
    refuses neither the stage's preflight of the rubric request nor a score."""
    from judge.rubric import judge_personal, load_rubric

    broken = {"on": True}

    def refuse(req):  # naive_concat's assistant gets 500s until its retries run out: those runs fail
        if req.get("model") == "o4-mini":
            return reasoning_refusal(req)
        concat = any(CONCAT in str(m.get("content")) for m in req["messages"])
        return (500, {"error": {"message": "boom", "type": "server_error"}}) if broken["on"] and concat else None

    with FakeModel(script=judge_script, refuse=refuse) as fake:
        cfg = tiny(tmp_path, fake, "judge=openai_reasoning", f"judge.base_url={fake.base_url}", "judge.api_key_env=null")
        # breaker_runs=0: this server is trusted, a run out of retries is its own even with no run answered after it
        rd = run_personal(tiny(tmp_path, fake, "judge=openai_reasoning", f"judge.base_url={fake.base_url}",
                               "judge.api_key_env=null", "model.breaker_runs=0"))
        first = records(rd)
        failed = {k for k, r in first.items() if r["status"] == "failed"}
        assert failed == {k for k, r in first.items() if r["condition"] == "naive_concat"} and len(failed) == 2
        assert all(first[k]["failure_reason"] == "retries" for k in failed)
        summary = judge_personal(cfg, rd)
        lines = load_rubric(rd, "openai_reasoning")
        assert summary["failed_runs"] == 2 and summary["written"] == {"failed_run": 2, "ok": 2}
        assert all(lines[k]["status"] == "failed_run" and lines[k]["scores"] is None for k in failed)
        graded = [r for r in fake.requests if r["body"]["messages"][0]["content"].startswith("You are grading")]
        assert len(graded) == 2  # the judge never saw the failed runs
        broken["on"] = False
        run_personal(tiny(tmp_path, fake, "judge=openai_reasoning", f"judge.base_url={fake.base_url}",
                          "judge.api_key_env=null", "retry_failed=true"))
        judge_personal(cfg, rd)
    assert not [f for f in fake.faults if f.startswith("refused 400")]
    judged = [r["body"] for r in fake.requests if r["body"].get("model") == "o4-mini"]
    assert len(judged) == 4 + 2 + 2  # 4 preflights (each stage run, each judging), the 2 ok runs, the 2 retried
    assert all("temperature" not in b and "max_tokens" not in b and b["max_completion_tokens"] in (1, 2000)
               and b["response_format"] == {"type": "json_object"} for b in judged)
    again = records(rd)
    assert all(r["status"] == "ok" for r in again.values())
    for k, r in again.items():
        assert r["attempt"] == (2 if k in failed else 1)
        if k not in failed:
            assert r["finished"] == first[k]["finished"]  # the ok runs were not run again
    lines = load_rubric(rd, "openai_reasoning")
    assert all(lines[k]["status"] == "ok" and lines[k]["scores"]["integration"] == 2.0 for k in again)
    # the Inspect export: one log per method, a sample per trial with the assistant's call and its scores
    from inspect_ai.log import read_eval_log

    from analysis.export_inspect import main as export

    assert export([f"runs={rd.root}", f"out={tmp_path / 'logs'}"]) == 0
    logs = [read_eval_log(str(p)) for p in sorted((tmp_path / "logs").glob("*.eval"))]
    assert sorted(log.eval.task for log in logs) == sorted(METHODS)
    for log in logs:
        assert len(log.samples) == 2 and log.eval.metadata["kind"] == "personal"
        for smp in log.samples:
            assert smp.scores["integration"].value == 2.0 and smp.metadata["answer_s"] > 0
            assert [m.role for m in smp.messages] == ["system", "system", "user", "assistant"]


@pytest.mark.services
def test_a_stopped_postgresql_stops_the_stage_before_its_first_run(tmp_path):
    with FakeModel(script=Script()) as fake:
        cfg = stage_cfg(tmp_path, fake.base_url, ["kernel_shared"], n=2,
                        extra=["index=pgvector", "index.dsn='host=127.0.0.1 port=1 user=postgres dbname=x'"])
        with pytest.raises(Exception) as got:
            run_personal(cfg)
        assert exit_code(got.value) == STOPPED and "PostgreSQL unreachable" in str(got.value)
        assert fake.requests == []


def test_the_three_paper_models_are_one_sweep_judged_and_keyed_on_the_model_ids(tmp_path):
    """`make run STAGE=personal_paper` by hand: three endpoints (one per preset), one judge, one Table 2. The three
    commands run in this process (tests/cli.py): their exit codes, endpoints and files are what is checked."""
    import os
    import sys

    import pandas as pd

    from tests import cli

    ids = {"OPENAI_BASE_URL": "gpt-4o", "LLAMA31_8B_BASE_URL": "llama3.1:8b", "QWEN25_7B_BASE_URL": "qwen2.5:7b"}
    common = ["stage=personal", "model=gpt4o,llama31_8b,qwen25_7b", "stage.trials.n=2",
              "stage.methods=[naive_concat,kernel_shared]", "index=exact", f"runs_dir={tmp_path}/runs",
              f"cache_dir={tmp_path}/cache"]
    with FakeModel(script=Script()) as a, FakeModel(script=Script()) as b, FakeModel(script=Script()) as c, \
            FakeModel(script=judge_script) as judge:
        ends = dict(zip(ids, (a, b, c)))
        env = {**os.environ, "OPENAI_API_KEY": "sk-test", **{k: f.base_url for k, f in ends.items()}}
        ran = cli.run([sys.executable, "-m", "harness.run", "-m", *common], env=env)
        assert ran.returncode == 0, ran.stderr[-3000:]
        judged = cli.run([sys.executable, "-m", "judge.run", "-m", *common, "judge=vllm",
                          f"judge.base_url={judge.base_url}", "judge.api_key_env=null"], env=env)
        assert judged.returncode == 0, judged.stderr[-3000:]  # the judge's settings name no other folder
    for var, fake in ends.items():  # each preset reached its own endpoint, asking for its own model
        assert fake.run_requests and {r["body"]["model"] for r in fake.requests} == {ids[var]}
    folders = sorted(p.name for p in (tmp_path / "runs" / "personal").iterdir())
    assert [f.split("+")[0] for f in folders] == sorted(ids.values())
    out = tmp_path / "results"
    res = cli.run([sys.executable, "-m", "analysis.personal", f"runs={tmp_path / 'runs'}", f"out={out}"])
    assert res.returncode == 0, res.stderr[-3000:]
    t2 = pd.read_csv(out / "table2_scores.csv")
    assert sorted(set(t2["model"])) == sorted(ids.values()) and len(t2) == 6
    assert (t2["n"] == 2).all() and (t2["profile_usage_mean"] == 4).all() and (t2["integration_mean"] == 2).all()


@pytest.mark.services
def test_postgresql_stopped_mid_stage_stops_it_and_the_same_command_finishes_it(tmp_path, monkeypatch):
    """A PostgreSQL of the test's own (the shared one stays up): the stage starts it, the third assistant
    call stops it, the next read or write stops the stage; the same command starts it again and finishes."""
    import socket

    from harness import services as svc

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MEMSPACE_PG_PORT", str(port))
    monkeypatch.setenv("MEMSPACE_SERVICES_DIR", str(tmp_path / "svc"))
    answers = {"n": 0, "stop_at": 3}

    def script(req):
        msg = Script()(req)
        if req["messages"][0]["content"].startswith("You are AssistantAgent"):
            answers["n"] += 1
            if answers["n"] == answers["stop_at"]:
                svc.pg_down(svc.settings())
        return msg

    extra = ["index=pgvector_kernel", "stage.concurrency=1"]
    try:
        with FakeModel(script=script) as fake:
            cfg = stage_cfg(tmp_path, fake.base_url, ["kernel_shared"], n=4, extra=extra)
            with pytest.raises(Exception) as got:
                run_personal(cfg)
            assert exit_code(got.value) == STOPPED and "PostgreSQL" in str(got.value)
            rd = stage(tmp_path)
            before = records(rd)
            assert 0 < len(before) < 4 and all(r["status"] == "ok" for r in before.values())  # nothing burnt
            answers["stop_at"] = None
            run_personal(stage_cfg(tmp_path, fake.base_url, ["kernel_shared"], n=4, extra=extra))
        after = records(rd)
        assert len(after) == 4 and all(r["status"] == "ok" and r["n_injected"] > 0 for r in after.values())
        assert {k: after[k]["attempt"] for k in before} == {k: v["attempt"] for k, v in before.items()}
    finally:
        svc.pg_down(svc.settings())
