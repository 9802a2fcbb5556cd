"""An outside audit of the in-flight claims of issue 33 (docs/failures.md): the breaks it found, one test
each, held on the scripted upstream (bench/fake_upstream.py) rather than on timing where it can be."""

from __future__ import annotations

import threading

import pytest

from bench.fake_upstream import is_preflight
from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.endpoints.proxy import STREAMED, MeteringProxy
from harness.endpoints.usage import chars_count, request_text
from harness.records.ledger import Ledger, read_ledger
from harness.run.budget import Budget
from harness.studies.agents import run as run_agents
from harness.records import RunDir
from tests import cli
from tests.fake_model import FakeModel, prompt_tokens
from tests.test_failures_midstage import once
from tests.test_judge import stage, stage_runs  # noqa: F401 - the judged stage (fixtures)
from tests.test_failures_midstage import (  # noqa: F401 - _shared_cache: the same data and index cache
    _shared_cache, agents_cfg, ledger_matches_records)

PRICES = {"currency": "USD", "hit": 0.5, "miss": 2.0, "output": 8.0, "usd_per_currency": 1.0}
MSGS = [{"role": "user", "content": "what did I say about the garden? " + "z" * 200}]


def _agent(proxy, meter, timeout_s=5.0, max_retries=1):
    return Agent(proxy.base_url, {"name": "t", "model": "m", "timeout_s": timeout_s}, "r", 1, meter,
                 max_retries=max_retries, backoff_s=0.01)


def test_an_event_stream_without_a_usage_chunk_is_billed_at_estimated_usage_never_free(tmp_path):
    """A server that streams to a `stream: false` request without `include_usage` sends no usage chunk, but
    it generated (and bills) the reply. Unknown usage is never free (claims-33 #3): the ledger, the cap
    and the run's calls must carry an estimate, flagged. They carried nothing: the ledger said
    "unparsable upstream body" with no tokens, the meter skipped the call, the cap counted $0."""
    with FakeModel(always="sse", usage=lambda pt: None) as fake:
        ledger = Ledger(tmp_path / "l.jsonl")
        meter = Meter(PRICES)
        with MeteringProxy(fake.base_url, ledger) as proxy:
            with pytest.raises(ModelCallFailed):
                _agent(proxy, meter).complete(MSGS)
        ledger.close()
        answer = fake.answer
    est = (chars_count(request_text(MSGS, None)), chars_count(answer))
    resp = [e for e in read_ledger(tmp_path / "l.jsonl") if e["event"] == "response"]
    assert [(e.get("prompt"), e.get("output"), e.get("usage_estimated"), e["error"]) for e in resp] == \
        [(*est, True, STREAMED)] * 2
    assert [(c["prompt"], c["output"], c["usage_estimated"]) for c in meter.calls] == [(*est, True)] * 2
    cost = sum(c["cost_list"] for c in meter.calls)
    assert cost > 0 and Budget(1.0, PRICES, None, [tmp_path / "l.jsonl"]).spent == pytest.approx(cost)


def test_a_whole_reply_that_arrives_just_past_the_deadline_is_answered_not_thrown_away(tmp_path):
    """The server sends its whole 200 (usage and all: billed) a little after the attempt's deadline of 4 s: headers
    and half the body at 2.5 s, the rest at 5 s, so no read waits longer than the deadline (1.5 s spare on a
    busy machine) and the whole reply is a second past it. The proxy read
    all of it, then answered 504 and logged the call without its usage: a billed reply in no record, counted
    $0 by the cap, and paid again by the retry. A reply the proxy holds whole is the call's answer (the
    client waits twice the deadline for the proxy); a body still coming past the deadline is a timeout."""
    with FakeModel(schedule=["late"], hang_s=2.5) as fake:
        ledger = Ledger(tmp_path / "l.jsonl")
        meter = Meter(PRICES)
        with MeteringProxy(fake.base_url, ledger) as proxy:
            msg = _agent(proxy, meter, timeout_s=4.0).complete(MSGS)
        ledger.close()
        n_requests = len(fake.requests)
    assert msg.content == "I don't know."
    assert n_requests == 1  # answered once, not paid twice
    resp = [e for e in read_ledger(tmp_path / "l.jsonl") if e["event"] == "response"]
    pt = prompt_tokens(MSGS, None)
    assert [(e["status"], e["prompt"], e["output"]) for e in resp] == [(200, pt, 7)]
    assert [(c["prompt"], c["output"]) for c in meter.calls] == [(pt, 7)]


# ------------------------------------------------------------------ Ctrl-C while runs are in flight

def _main_thread_in_pool_shutdown() -> bool:
    """The main thread is past the driver's abort, waiting in the pool's shutdown for its workers."""
    import sys

    f = sys._current_frames().get(threading.main_thread().ident)
    while f is not None:
        if f.f_code.co_name == "shutdown" and "concurrent" in f.f_code.co_filename:
            return True
        f = f.f_back
    return False


def test_ctrl_c_while_runs_are_in_flight_sends_nothing_more_and_the_same_command_finishes_each_run_once(tmp_path):
    """Two runs' first requests are held by the server; Ctrl-C arrives (KeyboardInterrupt in the main thread)
    while both are in flight, and the replies come once the driver is waiting for its workers. A run the
    reply finished is recorded whole; no other request reaches the server; the rerun finishes every run
    exactly once, with new attempt numbers and ledger and records matching call by call."""
    import _thread


    state = {"hold": True, "held": [], "sent_at_release": None}
    lock = threading.Lock()
    release = threading.Event()

    def stall(req):
        if not state["hold"] or is_preflight(req):
            return None
        with lock:
            state["held"].append(req)
            if len(state["held"]) == 2:
                _thread.interrupt_main()  # Ctrl-C, with both runs in flight
        return release

    def releaser():
        while not _main_thread_in_pool_shutdown():
            threading.Event().wait(0.01)
        state["sent_at_release"] = len(fake.run_requests)
        release.set()

    extra = ["concurrency=2", "model.timeout_s=10", "model.retry_budget_s=20"]
    with FakeModel(stall=stall) as fake:
        watcher = threading.Thread(target=releaser, daemon=True)
        watcher.start()
        with pytest.raises(KeyboardInterrupt):
            run_agents(agents_cfg(tmp_path, fake, *extra))
        watcher.join(5)
        assert not any(t.name.startswith("agent") and t.is_alive() for t in threading.enumerate())
        assert state["sent_at_release"] == 2 and len(fake.run_requests) == 2  # nothing sent after Ctrl-C
        rd = RunDir(tmp_path / "runs" / "smoke" / "smoke")
        first = once(rd)
        assert all(r["status"] == "ok" for r in first.values())  # only runs the held replies finished
        used = {e["tag"]: e["attempt"] for e in read_ledger(rd.ledger_path)
                if e.get("event") == "request" and e.get("role") != "preflight"}
        state["hold"] = False
        run_agents(agents_cfg(tmp_path, fake, *extra))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    assert all(after[t]["attempt"] > a for t, a in used.items() if t not in first)  # no attempt number reused
    assert all(after[t] == first[t] for t in first)  # a recorded run is never run again
    ledger_matches_records(rd, after)


# ------------------------------------------------------------------ the judge's server, several judgements at once

@pytest.mark.parametrize("fault, said", [("503", "no healthy upstream"), ("quota", "no credit left")])
def test_a_judge_server_dying_with_judgements_in_flight_writes_none_failed_and_the_rerun_judges_exactly_the_rest(
        stage, fault, said):
    """Four judgements at once; the judge's server answers 4 judgements, then fails for good (a 503, or credit
    gone): exit 3 naming its answer, nothing written failed (neither the judgement that tripped the stop nor
    those in flight), and the fixed server is asked exactly the prompts not judged, each once."""

    from judge.answer_check import load_judgements
    from tests.test_judge import judge_cmd, judge_fixed_server, judge_script, judged_exactly_the_rest, stage_dir

    with FakeModel(script=lambda req: judge_script(req, None), dies_with=fault, dies_after=4) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1", "concurrency=4"), capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 3, res.stderr
        assert said in res.stderr, res.stderr[-2000:]
        first = load_judgements(stage_dir(stage), "vllm")
        assert {v["status"] for v in first.values()} <= {"ok", "failed_run"}  # nothing written failed
        ok = {k: v for k, v in first.items() if v["status"] == "ok"}
        asked = judge_fixed_server(stage, fake, "concurrency=4")
    judged_exactly_the_rest(stage, ok, asked)


# ------------------------------------------------------------------ a 413 on the preflight

def test_a_413_on_the_preflight_stops_the_stage_before_any_run_and_the_same_command_runs_them(tmp_path):
    """A gateway whose request-size limit is below even the preflight's request: the stage stops there
    (exit 3, the 413 named), no run starts or is recorded, and the fixed gateway then runs every run once."""
    from harness.failures import STOPPED, exit_code
    from tests.test_failures_midstage import stopped

    state = {"on": True}
    too_large = (413, {"error": {"message": "Request Entity Too Large", "type": "invalid_request_error"}})
    with FakeModel(refuse=lambda req: too_large if state["on"] else None) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake))
        assert exit_code(exc) == STOPPED and "preflight" in str(exc) and "413" in str(exc), exc
        assert fake.run_requests == []
        rd = RunDir(tmp_path / "runs" / "smoke" / "smoke")
        assert once(rd) == {} and not rd.attempts()
        state["on"] = False
        run_agents(agents_cfg(tmp_path, fake))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" and r["attempt"] == 1 for r in after.values())
    ledger_matches_records(rd, after)


# ------------------------------------------------------------------ length cuts in the personal study's tables

def _call(role: str, finish: str) -> dict:
    return {"prompt": 90, "hit": 0, "miss": 90, "output": 10, "reasoning": 0, "cache_reported": False,
            "latency_s": 1.0, "finish": finish, "role": role, "cost_list": 0.0, "cost_paid": 0.0, "ts": "t",
            "flags": ["finish_reason length: the reply was cut at its token limit"] if finish == "length" else []}


def test_the_personal_output_length_table_counts_answers_cut_at_their_token_limit(tmp_path):
    """Table 5 compares the assistant's answer length in words between methods; an answer cut at its token
    limit (finish_reason length) is shorter because it was cut, not because of the method. The records flag
    it, but Table 5 said nothing: each model x method row must count its cut answers and the report say so
    (a writer's call cut at length is not the answer)."""
    from analysis.personal.load import select
    from analysis.personal.report import analyse
    from tests.personal_helpers import fake_folder

    cut = {("t0000", "naive_concat"), ("t0002", "naive_concat"), ("t0001", "kernel_shared")}
    runs = []
    for i in range(4):
        for c in ("naive_concat", "kernel_shared"):
            t = f"t{i:04d}"
            runs.append({"condition": c, "trial_id": t, "words": 10 + 3 * i + (c == "kernel_shared"),
                         "answer_s": 1.0 + i, "calls": [_call("writer", "length"),
                                                        _call("assistant", "length" if (t, c) in cut else "stop")]})
    fake_folder(tmp_path / "runs", "personal", "a", {"name": "vllm", "model": "m"}, runs)
    st = analyse(select([tmp_path / "runs"]), resamples=50)
    t5 = st.table("table5").set_index("condition")
    assert int(t5.loc["naive_concat", "answers_cut_length"]) == 2
    assert int(t5.loc["kernel_shared", "answers_cut_length"]) == 1
    from analysis.personal import table5

    text = table5.section(st)
    assert "3 answers cut at their token limit" in text


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


def test_an_event_stream_with_a_usage_block_in_every_chunk_bills_the_last_not_their_sum(tmp_path):
    """vLLM's continuous usage stats put a running total in every chunk: the stream billed the last total
    once (summing the chunks would bill it several times over; the first would bill a fraction)."""
    import json

    from harness.endpoints.usage import event_stream
    from bench.fake_upstream import usage_of

    chunks = [{"choices": [{"delta": {"content": w}}], "usage": usage_of(50, i + 1, 0)}
              for i, w in enumerate(["I ", "don't ", "know."])]
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    usage, message = event_stream(text)
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (50, 3) and message["content"] == "I don't know."


def test_a_judge_endpoint_rejecting_the_judges_request_stops_judging_at_its_preflight_writing_nothing_failed(stage):
    """The judge's endpoint rejects its request shape with a 400 the body does not explain (as a gateway does
    for a parameter it will not take): the judge's preflight is that very request, so every judgement would
    be rejected too. Judging must stop there (exit 3, the rejection named), not write each judgement failed."""

    from judge.answer_check import load_judgements
    from tests.test_judge import judge_cmd, stage_dir

    odd = (400, {"error": {"message": "unsupported request for this deployment", "type": "invalid_request_error"}})
    with FakeModel(refuse=lambda req: odd) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1"), capture_output=True, text=True,
                             timeout=300)
        asked = [r for r in fake.requests if "Model response" in r["body"]["messages"][0]["content"]]
    assert res.returncode == 3, res.stderr[-2000:]
    assert "unsupported request for this deployment" in res.stderr
    assert asked == []  # no judgement sent after the preflight's refusal
    got = load_judgements(stage_dir(stage), "vllm")
    assert {j["status"] for j in got.values()} <= {"failed_run"}


def test_a_judge_stop_names_the_server_failure_not_a_judgement_it_cut_short(stage):
    """Two judgements at once: the first run's waits out a long Retry-After while the other runs' judgements fail
    fast until one runs out of retries and the probe fails too. The first run's judgement is then cut short
    (it raises "stopping"); the stop must still name the server's failure and its last answer, as the driver's
    does, whichever judgement's result is read first."""
    import json

    from tests.test_judge import judge_cmd, records

    first = sorted((r for r in records(stage).values() if r["status"] == "ok"), key=lambda r: r["run_id"])[0]
    state = {"preflight": False}
    dead = {"error": {"message": "no healthy upstream", "type": "service_unavailable"}}

    def refuse(req):
        if is_preflight(req):
            if not state["preflight"]:
                state["preflight"] = True
                return None  # judging's preflight passes
            return 503, dead, {"Retry-After": "0"}  # the probe
        if json.dumps(first["question"])[1:-1] in json.dumps(req["messages"]):
            return 503, dead, {"Retry-After": "60"}
        return 503, dead, {"Retry-After": "0"}

    with FakeModel(refuse=refuse) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1", "concurrency=2", "+judge.max_wait_s=120"),
                             capture_output=True, text=True, timeout=300)
    last = [ln for ln in res.stderr.splitlines() if ln.startswith("stopped")]
    assert res.returncode == 3 and last, res.stderr[-2000:]
    assert "keeps failing" in last[-1] and "no healthy upstream" in last[-1], last[-1]
