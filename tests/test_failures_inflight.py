"""Calls in flight (issue 33): a reply still coming when an attempt times out is never a billed reply
missing from its record, and runs in flight when the stage stops send nothing more. Both are held by the
scripted upstream on events (bench/fake_upstream.py), so the order of what happens is fixed, not timed."""

from __future__ import annotations

import json
import signal
import threading

import pytest

from bench.fake_upstream import is_preflight
from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.endpoints.proxy import STREAMED, MeteringProxy
from harness.endpoints.usage import chars_count, request_text
from harness.run.budget import Budget
from harness.studies.agents import run as run_agents
from harness.studies.personal import run as run_personal
from harness.failures import STOPPED, exit_code
from harness.records import RunDir
from harness.records.ledger import Ledger, read_ledger
from tests.fake_model import FakeModel, prompt_tokens
from tests.test_failures_midstage import once
from tests.test_failures_midstage import (  # noqa: F401 - _shared_cache: the same data and index cache
    FAST, _shared_cache, agents_cfg, ledger_matches_records, stopped)

PRICES = {"currency": "USD", "hit": 0.5, "miss": 2.0, "output": 8.0, "usd_per_currency": 1.0}
MSGS = [{"role": "user", "content": "what did I say about the garden? " + "z" * 200}]


def key(req: dict) -> str:
    return json.dumps([req.get("messages"), req.get("tools")], sort_keys=True)


def question(req: dict) -> str:
    return next((str(m.get("content")) for m in req.get("messages") or [] if m.get("role") == "user"), "")


def test_a_reply_still_coming_when_its_attempt_times_out_is_no_billed_reply_missing_from_the_record(tmp_path):
    """The first run request's reply is sent a byte at a time until its retry arrives. The client used to give
    up at its timeout while the proxy read on, so the ledger got that billed 200 and the record did not (the
    CI failure of test_transport_faults...[html500] under load); now the proxy keeps the deadline, answers
    504, and the ledger's answered calls are the record's, call by call."""
    held: dict[str, threading.Event] = {}
    lock = threading.Lock()

    def stall(req):
        if is_preflight(req):
            return None
        with lock:
            if not held:
                held[key(req)] = threading.Event()
                return held[key(req)]
            if key(req) in held:
                held[key(req)].set()  # its retry arrived: the held reply finishes now
        return None

    with FakeModel(stall=stall) as fake:
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1"))
        (k,) = held
        assert sum(key(r["body"]) == k for r in fake.requests) == 2  # the held call was retried
    rd = RunDir(tmp_path / "runs" / "smoke" / "smoke")
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    ledger_matches_records(rd, after)
    late = [e for e in read_ledger(rd.ledger_path) if e.get("event") == "response" and e.get("status") == 504]
    assert len(late) == 1 and "timeout" in late[0]["error"]


def _stage(kind: str, tmp_path, fake, extra: list[str]):
    """(command, config, stage folder) for the smoke, Org smoke and personal smoke stages."""
    if kind == "personal":
        from tests.personal_helpers import stage_cfg

        cfg = stage_cfg(tmp_path, fake.base_url, ["naive_concat"], n=2,
                        extra=["index=exact", "stage.concurrency=2", *FAST, *extra])
        return run_personal, cfg
    return run_agents, agents_cfg(tmp_path, fake, *extra, stage="smoke_org" if kind == "org" else "smoke")


@pytest.mark.parametrize("kind", ["smoke", "org", "personal"])
def test_runs_in_flight_when_the_breaker_trips_send_nothing_more_and_the_same_command_finishes(tmp_path, kind):
    """Two runs at once. The server fails one (A) at once, every time; the other's (B) first request is held
    until the breaker's probe arrives, then fails asking for a 5 s wait. A runs out of retries, the probe fails,
    the breaker trips: B must not wait and retry (it used to, into the stopped stage, until its retries or
    budget ran out), no request reaches the server after the probe, and the driver returns only after B."""
    from tests.personal_helpers import Script

    state = {"on": True, "held": None, "probe": None}
    lock = threading.Lock()
    probed = threading.Event()
    dead = {"error": {"message": "no healthy upstream", "type": "service_unavailable"}}

    def refuse(req):
        if not state["on"]:
            return None
        if is_preflight(req):
            if state["held"] is None:
                return None  # the stage's preflight: the server passes it
            state["probe"] = len(fake.requests)
            probed.set()
            return 503, dead, {"Retry-After": "0"}
        with lock:
            state["held"] = state["held"] or question(req)
            mine = question(req) == state["held"]
        if mine and not probed.is_set():
            probed.wait(30)
            return 503, dead, {"Retry-After": "5"}
        return 503, dead, {"Retry-After": "0"}

    extra = ["+model.max_wait_s=30", "model.retry_budget_s=20", "concurrency=2"]
    with FakeModel(refuse=refuse, script=Script() if kind == "personal" else None) as fake:
        run, cfg = _stage(kind, tmp_path, fake, extra)
        exc = stopped(run, cfg)
        assert exit_code(exc) == STOPPED and "keeps failing" in str(exc) and "no healthy upstream" in str(exc), exc
        assert not any(t.name.startswith("agent") and t.is_alive() for t in threading.enumerate())
        assert state["probe"] is not None
        after_stop = [r for r in fake.requests[state["probe"]:] if not is_preflight(r["body"])]
        assert after_stop == []  # nothing from the stopped invocation reached the server after the stop
        rd = RunDir(next((tmp_path / "runs").rglob("stage.json")).parent)
        assert once(rd) == {}
        used = {}
        for e in read_ledger(rd.ledger_path):
            if e.get("event") == "request" and e.get("role") != "preflight":
                used[e["tag"]] = max(used.get(e["tag"], 0), e["attempt"])
        state["on"] = False
        run, cfg = _stage(kind, tmp_path, fake, extra)
        run(cfg)
    after = once(rd)
    assert after and all(r["status"] == "ok" for r in after.values())
    assert used and all(after[t]["attempt"] > a for t, a in used.items() if t in after)  # no attempt number reused
    ledger_matches_records(rd, after)


# ------------------------------------------------------------------ event streams and 413

def test_an_event_stream_to_a_plain_request_is_billed_in_ledger_record_and_budget(tmp_path):
    """A server that answers `stream: false` with text/event-stream carrying a usage chunk: no completion
    (retried, then the run's failure), but billed: the meter's calls, the ledger's lines and the cap agree."""
    from harness.endpoints.client import Agent, Meter, ModelCallFailed
    from harness.endpoints.pricing import list_cost
    from harness.endpoints.proxy import STREAMED, MeteringProxy
    from harness.records.ledger import Ledger
    from harness.run.budget import Budget
    from tests.fake_model import prompt_tokens

    prices = {"currency": "USD", "hit": 0.5, "miss": 2.0, "output": 8.0, "usd_per_currency": 1.0}
    msgs = [{"role": "user", "content": "what did I say about the garden? " + "z" * 200}]
    with FakeModel(always="sse") as fake:
        ledger = Ledger(tmp_path / "l.jsonl")
        meter = Meter(prices)
        with MeteringProxy(fake.base_url, ledger) as proxy:
            agent = Agent(proxy.base_url, {"name": "t", "model": "m", "timeout_s": 5}, "r", 1, meter,
                          max_retries=1, backoff_s=0.01)
            with pytest.raises(ModelCallFailed):
                agent.complete(msgs)
        ledger.close()
    pt = prompt_tokens(msgs, None)
    resp = [e for e in read_ledger(tmp_path / "l.jsonl") if e["event"] == "response"]
    assert [(e["prompt"], e["output"], e["error"]) for e in resp] == [(pt, 7, STREAMED)] * 2
    assert [(c["prompt"], c["output"], c["usage_estimated"]) for c in meter.calls] == [(pt, 7, False)] * 2
    assert all(c["flags"] == [f"retried: {STREAMED}"] for c in meter.calls)
    billed = 2 * list_cost(prices, 0, pt, 7)
    assert billed > 0 and sum(c["cost_list"] for c in meter.calls) == pytest.approx(billed)
    assert Budget(1.0, prices, None, [tmp_path / "l.jsonl"]).spent == pytest.approx(billed)


def test_a_413_is_the_runs_own_failure_never_the_breakers(tmp_path):
    """A request too large for the endpoint (HTTP 413, body or not) fails that run as context_length; it used to
    be an unexplained rejection the breaker counted toward stopping the stage."""
    victim = {"q": None}

    def refuse(req):
        if is_preflight(req):
            return None
        victim["q"] = victim["q"] or question(req)
        return (413, {"error": {"message": "Request Entity Too Large", "type": "invalid_request_error"}}) \
            if question(req) == victim["q"] else None

    with FakeModel(refuse=refuse) as fake:
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1", "model.breaker_runs=1"))
    after = once(RunDir(tmp_path / "runs" / "smoke" / "smoke"))
    failed = [r for r in after.values() if r["status"] == "failed"]
    assert len(after) == 4 and len(failed) == 2 and {r["question"] for r in failed} == {victim["q"]}
    assert all(r["failure_reason"] == "context_length" and "HTTP 413" in r["error"] for r in failed)


# ------------------------------------------------------------------ tables: length cuts and estimated usage

def test_table6_counts_length_cut_replies_per_condition_and_tables_1_and_6_mark_estimated_usage(tmp_path):
    from tests.analysis_fixtures import ON_PEAK_TS, Stage, run_id, sha256_file
    from tests.test_analysis import analyse, csv, prereg_file, row

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    for q in ("q0", "q1"):
        st.add("session_search", q, calls=2, ts=ON_PEAK_TS)
        st.add("none", q, calls=2, ts=ON_PEAK_TS)
    cut, est = run_id("none", "q0"), run_id("none", "q1")
    for rec in st.records:  # the records and their ledger lines say the same
        if rec["run_id"] == cut:
            rec["calls"][1]["finish"] = "length"
            rec["calls"][1]["flags"] = ["finish_reason length: the reply was cut at its token limit"]
        if rec["run_id"] == est:
            rec["calls"][0]["usage_estimated"] = True
    lines = [e for e in st.ledger if e["event"] == "response"]
    [e for e in lines if e["tag"] == cut][1]["finish"] = "length"
    [e for e in lines if e["tag"] == est][0]["usage_estimated"] = True
    st.write()
    out = analyse(tmp_path, pre)
    t6 = csv(out, "table6.csv")
    by = {c: row(t6, folder="main/main", party="agents", condition=c) for c in ("none", "session_search", "all")}
    assert [int(by[c]["calls_cut_length"]) for c in ("none", "session_search", "all")] == [1, 0, 1]
    assert [int(by[c]["calls_usage_estimated"]) for c in ("none", "session_search", "all")] == [1, 0, 1]
    t1 = csv(out, "table1.csv")
    assert int(row(t1, condition="none")["usage_estimated_calls"]) == 1
    assert int(row(t1, condition="session_search")["usage_estimated_calls"]) == 0
    tok = csv(out, "tokens.csv")  # the token table's count was always 0: the runs' frame dropped the column
    assert [int(row(tok, condition=c)["usage_estimated_calls"]) for c in ("none", "session_search")] == [1, 0]
    report = next(p for p in out.rglob("*.md") if "Table 1" in p.read_text()).read_text()
    table1 = report.split("Table 1", 1)[1].split("\n## ", 1)[0]
    none_row = next(ln for ln in table1.splitlines() if ln.startswith("| none "))
    ref_row = next(ln for ln in table1.splitlines() if ln.startswith("| session_search "))
    assert none_row.count("~") == 3 and "~" not in ref_row  # tokens, cost, USD per correct: the estimated condition only
    assert "~ usage estimated in 1 model calls" in table1
    assert "cut at length" in report.split("Table 6", 1)[1]



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

    extra = ["concurrency=2", "model.timeout_s=120", "model.retry_budget_s=240"]  # a held reply waits for the main thread, however loaded the machine
    # Ctrl-C is a KeyboardInterrupt in this process, whatever the worker's parent set (interrupt_main does nothing
    # while SIGINT is ignored); tests/conftest.py puts back the handler the test found
    signal.signal(signal.SIGINT, signal.default_int_handler)
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
