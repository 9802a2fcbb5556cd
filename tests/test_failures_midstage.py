"""After the preflight (issue 33): a server that dies, runs out of credit or lies about usage never
burns a stage or its budget; malformed replies are the model's, never the harness's.

Each stage is small (4 runs of the smoke sample, 2 of them tool-using), run in process against the
scripted upstream (bench/fake_upstream.py), with short timeouts set through the config; then the
server is fixed and the same command must finish every run exactly once.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from bench.fake_upstream import is_preflight
from harness.cli.run import CONF
from harness.studies.agents import run as run_agents
from harness.studies.personal import run as run_personal
from harness.endpoints.client import Agent, Meter, ModelCallFailed, worst_wait
from harness.endpoints.proxy import MeteringProxy
from harness.endpoints.registry import served_context
from harness.endpoints.usage import CEILING, chars_count, request_text, usage_split
from harness.failures import BUDGET, STOPPED, exit_code
from harness.records import RunDir
from harness.records.ledger import Ledger, read_ledger
from harness.run.loop import normalise_calls
from tests import endpoint_replies as R
from tests.fake_model import FakeModel, prompt_tokens

PRICES = {"currency": "USD", "hit": 0.0, "miss": 0.0, "output": 0.0, "usd_per_currency": 1.0}
FAST = ["model.backoff_s=0.01", "model.max_retries=2", "model.timeout_s=1", "model.retry_budget_s=3"]


_CACHE: dict[str, Path] = {}


@pytest.fixture(autouse=True)
def _shared_cache(tmp_path_factory):
    """One data and index cache for this file's stages (cache_dir is not part of a stage's identity)."""
    _CACHE.setdefault("dir", tmp_path_factory.mktemp("cache"))


_COMPOSED: dict[tuple, object] = {}


def agents_cfg(tmp: Path, fake, *extra, stage: str = "smoke", conds: str = "none,tool_bm25"):
    overrides = [f"stage={stage}", "model=vllm", f"model.base_url={fake.base_url}", "model.api_key_env=null",
                 *FAST, "stage.judge_after_run=false", f"runs_dir={tmp}/runs", f"cache_dir={_CACHE['dir']}",
                 "concurrency=2"]
    if stage == "smoke":
        overrides += ["samples.smoke.limit=2", f"stage.groups=[{{sample:smoke,conditions:[{conds}]}}]"]
    # the same command again (a test's second stage after the server is fixed) is the same config: composed
    # once, each call given its own copy (composing reads every config file again, a good part of a second)
    key = (*overrides, *extra)
    if key not in _COMPOSED:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            _COMPOSED[key] = compose(config_name="config", overrides=list(key))
    return copy.deepcopy(_COMPOSED[key])


def stage_of(tmp: Path, stage: str = "smoke", label: str = "smoke") -> RunDir:
    return RunDir(Path(tmp) / "runs" / stage / label)


def recs(rd: RunDir) -> dict[str, dict]:
    return {r.run_id: r.model_dump(mode="json") for r in rd.records()} if rd.root.exists() else {}


def stopped(fn, *args) -> BaseException:
    with pytest.raises(Exception) as got:
        fn(*args)
    return got.value


def ledger_matches_records(rd: RunDir, records: dict[str, dict]) -> None:
    """Every answered call of a recorded attempt is in its record with the ledger's numbers, in order."""
    lines = read_ledger(rd.ledger_path)
    for rid, r in records.items():
        mine = [e for e in lines if e.get("event") == "response" and e["tag"] == rid and e["attempt"] == r["attempt"]
                and e["status"] == 200 and not e.get("error")]
        assert [(e["prompt"], e["hit"], e["output"], bool(e.get("usage_estimated"))) for e in mine] == \
            [(c["prompt"], c["hit"], c["output"], c["usage_estimated"]) for c in r["calls"]], rid


# ------------------------------------------------------------------ 1. persistent failure is the environment's

@pytest.mark.parametrize("fault, said", [
    ("503", "no healthy upstream"), ("error200", "backend unavailable"), ("hang", "Timeout"),
    ("quota", "no credit left"), ("402", "no credit left")])
def test_a_server_that_dies_after_the_preflight_stops_the_stage_unrecorded_and_the_same_command_finishes(
        tmp_path, capsys, fault, said):
    with FakeModel(dies_with=fault, hang_s=2.0) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake))
        assert exit_code(exc) == STOPPED, exc
        assert said in str(exc)  # the server's last answer is named
        rd = stage_of(tmp_path)
        assert recs(rd) == {}  # nothing burnt
        runs_sent = [r for r in fake.requests if not is_preflight(r["body"])]
        if fault in ("quota", "402"):  # credit gone: stopped at once, never retried
            assert len(runs_sent) <= 2 and "credit" in str(exc)
        else:
            assert "keeps failing" in str(exc)
        started = [json.loads(x)["run"] for x in rd.attempts_path.read_text().splitlines()]
        assert started  # the runs it hit were started and stay unrecorded
        fake.dies_with = None  # the server is fixed
        assert run_agents(agents_cfg(tmp_path, fake)) is not None
    after = recs(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    assert all(r["attempt"] >= 2 for rid, r in after.items() if rid in started)
    ledger_matches_records(rd, after)


def test_runs_that_fail_in_a_row_while_the_server_still_answers_a_plain_request_stop_the_stage(tmp_path):
    """A gateway that fails only the runs' requests (the probe passes): runs of breaker_runs questions in a row."""
    broken = {"on": True}
    refuse = lambda req: (503, {"error": {"message": "upstream overloaded", "type": "x"}}) \
        if broken["on"] and not is_preflight(req) else None  # noqa: E731
    with FakeModel(refuse=refuse) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, "concurrency=1", "model.breaker_runs=2"))
        assert exit_code(exc) == STOPPED and "2 runs in a row ran out of retries" in str(exc)
        assert "upstream overloaded" in str(exc)
        assert recs(stage_of(tmp_path)) == {}
        broken["on"] = False
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1", "model.breaker_runs=2"))
    after = recs(stage_of(tmp_path))
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())


def test_one_run_out_of_retries_among_successes_is_recorded_failed_not_a_stop(tmp_path):
    """The server works (other runs' calls succeed meanwhile): that run's failure is its own."""
    victim = {"q": None}

    def refuse(req):
        if is_preflight(req):
            return None
        q = next(m["content"] for m in req["messages"] if m["role"] == "user")
        victim["q"] = victim["q"] or q
        return (500, {"error": {"message": "boom", "type": "server_error"}}) if q == victim["q"] else None

    with FakeModel(refuse=refuse) as fake:
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1"))
    after = recs(stage_of(tmp_path))
    failed = [r for r in after.values() if r["status"] == "failed"]
    assert len(after) == 4 and failed and all(r["failure_reason"] == "retries" for r in failed)


def test_the_retry_budget_bounds_a_run_and_the_dry_run_prints_the_worst_case(tmp_path, capsys):
    assert worst_wait({"timeout_s": 300, "max_retries": 6, "backoff_s": 1.0})[1] == pytest.approx(
        7 * 300 + sum(1.5 * 2 ** i for i in range(6)))
    assert worst_wait({"timeout_s": 300, "max_retries": 6, "retry_budget_s": 120})[0] == 121
    with FakeModel() as fake:
        run_agents(agents_cfg(tmp_path, fake, "dry_run=true", "model.timeout_s=300", "model.max_retries=6",
                              "model.retry_budget_s=600", "model.backoff_s=1"))
        assert not fake.requests
    out = capsys.readouterr().out
    assert "holds each run at most 601 s" in out and "2,194 s" in out
    # a hang: the run gives up after its budget, not after max_retries x timeout_s
    with FakeModel(always="hang", hang_s=3.0) as fake:
        ledger = Ledger(tmp_path / "l.jsonl")
        with MeteringProxy(fake.base_url, ledger) as proxy:
            mc = {"name": "t", "model": "m", "timeout_s": 1.0, "retry_budget_s": 1.5}
            agent = Agent(proxy.base_url, mc, "r", 1, Meter(PRICES), max_retries=50, backoff_s=0.01)
            with pytest.raises(ModelCallFailed) as got:
                agent.complete([{"role": "user", "content": "hi"}])
        ledger.close()
    assert "retry budget" in str(got.value) and 2 <= len(fake.requests) <= 3  # not 51 attempts


# ------------------------------------------------------------------ 2. malformed replies are the model's

def test_tool_calls_with_object_arguments_or_no_id_are_normalised_and_the_runs_finish(tmp_path):
    def script(req):
        tools = req.get("tools") or []
        if tools and req.get("tool_choice") != "none" and not any(m["role"] == "tool" for m in req["messages"]):
            return {"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "function": {"name": tools[0]["function"]["name"], "arguments": {"query": "x"}}},
                {"id": None, "type": "function", "function": {"name": "no_such_tool", "arguments": "{}"}}]}
        return {"role": "assistant", "content": "I don't know.", "finish_reason": "length"}

    with FakeModel(script=script) as fake:
        run_agents(agents_cfg(tmp_path, fake))
    after = recs(stage_of(tmp_path))
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    tooled = [r for r in after.values() if r["tool_calls"]]
    assert tooled
    for r in tooled:
        first = r["calls"][0]["flags"]
        assert any("arguments sent as JSON dict" in f for f in first) and any("without an id" in f for f in first)
        assert [t.get("failure") for t in r["tools"]] == [None, "tool_error"]  # the unknown tool went back as an error
        assert json.loads(r["tools"][0]["arguments"]) == {"query": "x"}
    # finish_reason length is flagged on every call that ended so, and the summary says so
    assert all(any(f.startswith("finish_reason length") for f in r["calls"][-1]["flags"]) for r in after.values())


def test_a_forced_answer_that_comes_back_as_a_tool_call_is_flagged():
    assert normalise_calls([{"function": {"name": "f", "arguments": {"a": 1}}}], 0) == (
        [{"id": "call_h0_0", "name": "f", "arguments": '{"a": 1}'}],
        ["tool call 0 arguments sent as JSON dict, not a string: serialised",
         "tool call 0 without an id: assigned call_h0_0"])
    calls, flags = normalise_calls([{"id": "a", "function": {"name": "f", "arguments": "{}"}},
                                    {"id": "a", "function": {"name": None, "arguments": None}}], 2)
    assert [c["id"] for c in calls] == ["a", "call_h2_1"] and calls[1]["name"] == "" and len(flags) == 2


def test_a_record_that_does_not_validate_is_a_bug_report_and_a_failed_run(tmp_path):
    from pydantic import BaseModel

    from harness.run.driver import validated

    class Rec(BaseModel):
        run_id: str
        attempt: int
        status: str
        failure_reason: str | None = None
        error: str | None = None
        transcript: dict | None = None

    rd = RunDir(tmp_path / "stage")
    rd.root.mkdir(parents=True)
    data = {"run_id": "r1", "attempt": 2, "status": "ok", "transcript": ["not", "a", "transcript"]}
    got = validated(rd, Rec.model_validate, data, {"transcript": None})
    assert got.status == "failed" and got.failure_reason == "record_invalid" and got.transcript is None
    report = json.loads((rd.root / "bugs" / "r1.2.json").read_text())
    assert report["record"]["transcript"] == ["not", "a", "transcript"] and "transcript" in report["error"]


# ------------------------------------------------------------------ 3. usage validated, never silently zero

@pytest.mark.parametrize("usage, flag", [
    (None, "usage: missing"), ({"prompt_tokens": None, "completion_tokens": 3}, "prompt_tokens null"),
    ({"prompt_tokens": -50, "completion_tokens": 3}, "negative"),
    ({"prompt_tokens": "12", "completion_tokens": 3}, "not a whole number"),
    ({"prompt_tokens": 10 ** 12, "completion_tokens": 3}, "beyond what the model can take"),
    ({"completion_tokens": 3}, "prompt_tokens missing")])
def test_usage_that_is_not_a_count_is_flagged_and_estimated_from_the_request(usage, flag):
    msgs = [{"role": "user", "content": "x" * 400}]
    u = usage_split(usage, msgs, None, {"content": "yes"})
    assert u["usage_estimated"] is True and any(flag in f for f in u["flags"])
    assert u["prompt"] == chars_count(request_text(msgs, None)) > 100 and u["miss"] == u["prompt"]
    assert u["output"] == (3 if usage and "completion_tokens" in usage else 1)
    ok = usage_split({"prompt_tokens": 10, "completion_tokens": 3}, msgs, None, {"content": "yes"})
    assert ok["usage_estimated"] is False and ok["flags"] == [] and ok["prompt"] == 10
    assert usage_split({"prompt_tokens": 3000, "completion_tokens": 3}, msgs, context=2048)["usage_estimated"]
    assert CEILING < 10 ** 12


def test_odd_usage_never_kills_the_proxy_and_ledger_and_meter_agree_call_by_call(tmp_path):
    blocks = [{"prompt_tokens": "12", "completion_tokens": 3}, {"prompt_tokens": -5, "completion_tokens": -1},
              {"prompt_tokens": 10 ** 12, "completion_tokens": 1}, None, {"prompt_tokens": None},
              R.USAGE["deepseek"], {"prompt_tokens": 100, "completion_tokens": 2,
                                    "prompt_tokens_details": {"cached_tokens": 500}}]
    queue = list(blocks)
    with FakeModel(usage=lambda pt: queue.pop(0)) as fake:
        ledger = Ledger(tmp_path / "l.jsonl")
        meter = Meter(PRICES)
        with MeteringProxy(fake.base_url, ledger) as proxy:
            agent = Agent(proxy.base_url, {"name": "t", "model": "m", "timeout_s": 5}, "r", 1, meter, backoff_s=0.01)
            for i in range(len(blocks)):
                agent.complete([{"role": "user", "content": f"question {i} " + "y" * 80}])
        ledger.close()
    assert len(fake.requests) == len(blocks)  # each answered once: no "Connection error" on a 200
    resp = [e for e in read_ledger(tmp_path / "l.jsonl") if e["event"] == "response"]
    assert [(e["prompt"], e["hit"], e["miss"], e["output"], e["usage_estimated"], e["flags"]) for e in resp] == \
        [(c["prompt"], c["hit"], c["miss"], c["output"], c["usage_estimated"], c["flags"]) for c in meter.calls]
    assert [c["usage_estimated"] for c in meter.calls] == [True, True, True, True, True, False, False]
    assert all(c["prompt"] > 0 and c["output"] >= 0 for c in meter.calls)
    assert meter.calls[5]["hit"] == 1024 and meter.calls[6]["hit"] == 0 and meter.calls[6]["flags"]


def test_a_cap_on_a_server_without_usage_is_kept_on_estimates_and_says_so(tmp_path, capsys):
    prices = ["model.prices.hit=1000", "model.prices.miss=1000", "model.prices.output=1000",
              "+model.params.max_tokens=50"]  # a call's worst case is its prompt and max_tokens (harness.run.budget)
    with FakeModel(usage=lambda pt: None) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, *prices, "budget_usd=3", "concurrency=1",
                                             conds="none,full"))
        assert exit_code(exc) == BUDGET, exc
        err = capsys.readouterr().err
        assert "estimated tokens" in err.split("preflight model")[-1]  # said at the start, after the preflight
        rd = stage_of(tmp_path)
        spent = sum((e["hit"] + e["miss"] + e["output"]) * 1000 / 1e6 for e in read_ledger(rd.ledger_path)
                    if e.get("event") == "response" and e.get("status") == 200)
        assert spent <= 3 and all(e.get("usage_estimated") for e in read_ledger(rd.ledger_path)
                                    if e.get("event") == "response")
        first = recs(rd)
        assert 0 < len(first) < 4 and all(r["cost_list"] > 0 for r in first.values())
        run_agents(agents_cfg(tmp_path, fake, *prices, "budget_usd=1000", "concurrency=1", conds="none,full"))
    assert len(recs(stage_of(tmp_path))) == 4
    assert "usage estimated in" in capsys.readouterr().err  # the summary table says its tokens are estimates


# ------------------------------------------------------------------ 4. truncation by what the server knows

def test_ollamas_cut_is_caught_at_its_reported_context_even_when_it_keeps_most_of_the_prompt(tmp_path):
    ctx = 600
    with FakeModel(usage=lambda pt: {**R.USAGE["ollama"], "prompt_tokens": min(pt, ctx)}, ollama_ctx=ctx) as fake:
        assert served_context(fake.base_url, "fake") == (ctx, "ollama /api/ps")
        assert served_context(fake.base_url, "other") == (ctx, "ollama /api/show num_ctx")
        ledger = Ledger(tmp_path / "l.jsonl")
        with MeteringProxy(fake.base_url, ledger) as proxy:
            mc = {"name": "t", "model": "m", "timeout_s": 5, "truncates_silently": True, "context_tokens": ctx}
            meter = Meter(PRICES)
            agent = Agent(proxy.base_url, mc, "r", 1, meter, backoff_s=0.01)
            cut = []
            for n in (1246, 1448):  # full-context prompts the server cut to 600: 41-48% kept
                msgs = [{"role": "user", "content": "z" * (n * 4 - 40)}]
                assert 0.4 < ctx / prompt_tokens(msgs, None) < 0.5
                with pytest.raises(ModelCallFailed) as got:
                    agent.complete(msgs)
                cut.append(got.value.reason)
            agent.complete([{"role": "user", "content": "w" * 2000}])  # 500 tokens: inside the context
        ledger.close()
    assert cut == ["context_length", "context_length"] and "600" in str(got.value)
    assert [c["prompt"] for c in meter.calls] == [600, 600, prompt_tokens([{"role": "user", "content": "w" * 2000}],
                                                                          None)]


# ------------------------------------------------------------------ 5. the preflight sends the runs' system message

def test_the_preflight_sends_the_system_message_the_runs_send(tmp_path):
    no_system = lambda req: (400, {"error": {"message": "System role not supported", "type": "invalid_request_error",
                                             "param": "messages"}}) \
        if any(m["role"] == "system" for m in req["messages"]) else None  # noqa: E731
    with FakeModel(refuse=no_system) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake))
        assert exit_code(exc) == STOPPED and "preflight model failed" in str(exc)
        assert fake.requests and all(is_preflight(r["body"]) for r in fake.requests)  # no run's call was paid
        [sys_msg, _] = fake.requests[0]["body"]["messages"]
        assert sys_msg["role"] == "system" and sys_msg["content"].startswith("You are a personal assistant")


# ------------------------------------------------------------------ the Org and personal stages

def test_the_org_stage_stops_on_a_dead_server_and_the_same_command_finishes_it(tmp_path):
    with FakeModel(dies_with="503") as fake:
        cfg = lambda: agents_cfg(tmp_path, fake, stage="smoke_org")  # noqa: E731
        exc = stopped(run_agents, cfg())
        assert exit_code(exc) == STOPPED and "keeps failing" in str(exc)
        rd = next((tmp_path / "runs").rglob("stage.json")).parent
        assert recs(RunDir(rd)) == {}
        fake.dies_with = None
        run_agents(cfg())
    after = recs(RunDir(rd))
    assert after and all(r["status"] == "ok" for r in after.values())
    ledger_matches_records(RunDir(rd), after)


def test_the_personal_stage_stops_on_a_dead_server_and_the_same_command_finishes_it(tmp_path):
    from tests.personal_helpers import Script, stage_cfg

    with FakeModel(script=Script(), dies_with="error200") as fake:
        cfg = lambda: stage_cfg(tmp_path, fake.base_url, ["naive_concat"], n=2,  # noqa: E731
                                extra=["index=exact", "stage.concurrency=1", *FAST])
        exc = stopped(run_personal, cfg())
        assert exit_code(exc) == STOPPED and "backend unavailable" in str(exc)
        rd = stage_of(tmp_path, "personal_smoke")
        assert recs(rd) == {}
        fake.dies_with = None
        run_personal(cfg())
    after = recs(rd)
    assert len(after) == 2 and all(r["status"] == "ok" for r in after.values())


# ------------------------------------------------------------------ Table 6: rejected 200s fail, estimates shown

def test_table6_counts_a_200_error_body_as_a_failed_call_and_shows_estimated_usage(tmp_path):
    from tests.analysis_fixtures import ON_PEAK_TS, PRICES as LIST, Stage, run_id, sha256_file
    from tests.test_analysis import analyse, csv, prereg_file, row

    pre = prereg_file(tmp_path)
    st = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre))
    st.add("session_search", "q0", prompt=1_000_000, hit=0, output=0, ts=ON_PEAK_TS)
    rid = run_id("session_search", "q0")
    base = {"tag": rid, "attempt": 1, "role": "agent", "model": "m", "path": "/chat/completions"}
    st.ledger += [{**base, "call": "bad", "event": "request", "ts": ON_PEAK_TS},
                  {**base, "call": "bad", "event": "response", "ts": ON_PEAK_TS, "status": 200,
                   "error": "a 200 body carrying an error: backend unavailable"},
                  {**base, "call": "est", "event": "request", "ts": ON_PEAK_TS},
                  {**base, "call": "est", "event": "response", "ts": ON_PEAK_TS, "status": 200, "prompt": 1_000_000,
                   "hit": 0, "miss": 1_000_000, "output": 0, "usage_reported": False, "usage_estimated": True,
                   "flags": ["usage: missing"]}]
    st.write()
    t6 = csv(analyse(tmp_path, pre), "table6.csv")
    agents = row(t6, folder="main/main", party="agents", condition="all")
    assert agents["calls"] == 2 and agents["failed_calls"] == 1  # the error body is not a successful call
    assert agents["calls_usage_estimated"] == 1 and agents["calls_without_usage"] == 1
    assert agents["cost_list_usd"] == pytest.approx(2 * LIST["miss"])  # the estimated call is priced, not free


def once(rd) -> dict[str, dict]:
    """The stage's records, checking that no run was recorded twice."""
    ids = [r.run_id for r in rd.records()]
    assert len(ids) == len(set(ids)), ids
    return recs(rd)


def test_a_server_that_dies_mid_stage_after_some_successes_burns_no_run(tmp_path):
    """The server answers 5 run requests (the last run's first call among them: one at a time, the runs ask
    1, 1, 2, 2), then 503s for good: the run it hit had a call answered since it started, which must not make
    its failure its own."""
    with FakeModel(dies_with="503", dies_after=5) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, "concurrency=1"))
        assert exit_code(exc) == STOPPED and "keeps failing" in str(exc), exc
        rd = stage_of(tmp_path)
        first = once(rd)
        assert first and all(r["status"] == "ok" for r in first.values()), first  # nothing recorded failed
        fake.dies_with = None
        run_agents(agents_cfg(tmp_path, fake, "concurrency=1"))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    assert all(after[k]["attempt"] == r["attempt"] for k, r in first.items())  # the first session's runs kept
    ledger_matches_records(rd, after)


@pytest.mark.parametrize("status, body", [
    # OpenRouter: credit gone, inside a 200 (its error object carries the 402)
    (200, {"error": {"code": 402, "message": "Insufficient credits. Add more using https://openrouter.ai/credits"}}),
    # a gateway's 429 worded as credits, not quota
    (429, {"error": {"message": "You have insufficient credits for this request", "type": "rate_limit_error"}})])
def test_credit_gone_in_other_words_stops_at_once_and_burns_no_run(tmp_path, status, body):
    broke = {"on": True}
    with FakeModel(refuse=lambda req: (status, body) if broke["on"] and not is_preflight(req) else None) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake))
        assert exit_code(exc) == STOPPED and "no credit left" in str(exc), exc
        assert len(fake.run_requests) <= 2  # one per concurrent run: never retried
        rd = stage_of(tmp_path)
        assert once(rd) == {}
        broke["on"] = False
        run_agents(agents_cfg(tmp_path, fake))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    ledger_matches_records(rd, after)


def test_an_assigned_tool_call_id_never_repeats_one_the_model_sent():
    """A missing id is assigned call_h<round>_<i>; the model may have used that very id for another call."""
    same = {"name": "memory_search", "arguments": "{}"}
    calls, flags = normalise_calls([{"id": "call_h0_1", "function": same}, {"id": None, "function": same},
                                    {"id": "call_h0_1", "function": same}], 0)
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == 3 and ids[0] == "call_h0_1" and len(flags) == 2, (ids, flags)
    many, flags = normalise_calls([{"id": "x", "function": same}] * 50, 1)  # 50 calls in one reply, one id
    assert len({c["id"] for c in many}) == 50 and len(flags) == 49


@pytest.mark.parametrize("choices", [["x"], {"0": 1}, [{"index": 0, "message": None, "finish_reason": "stop"}],
                                     [{"index": 0, "finish_reason": "stop"}]])
def test_a_200_whose_choices_carry_no_message_is_a_failed_call_not_a_harness_bug_or_an_answer(tmp_path, choices):
    """After the preflight every answer is a 200 with usage whose choices are not messages: a bad reply,
    retried, billed, and a dead server (the probe gets it too), never an empty answer or a loop crash."""
    broke = {"on": True, "died": False}

    def refuse(req):  # like dies_with: every request once the runs began, the probe's too
        broke["died"] = broke["died"] or not is_preflight(req)
        if broke["on"] and broke["died"]:
            return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices,
                         "usage": {"prompt_tokens": 10, "completion_tokens": 2}}
        return None

    with FakeModel(refuse=refuse) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake))
        assert exit_code(exc) == STOPPED and "choices carry no message" in str(exc), exc
        rd = stage_of(tmp_path)
        assert once(rd) == {}
        bad = [e for p in rd.ledger_paths() for e in read_ledger(p) if e.get("event") == "response"
               and str(e.get("tag")).startswith(("none.", "tool_bm25."))]  # the runs' calls
        assert bad and all(e["error"].startswith("a 200 reply whose choices") and e["prompt"] == 10 for e in bad)
        broke["on"] = False
        run_agents(agents_cfg(tmp_path, fake))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    ledger_matches_records(rd, after)


@pytest.mark.parametrize("fault", ["reset", "drip", "html500", "empty200", "sse"])
def test_transport_faults_after_the_preflight_stop_the_stage_unburnt_and_the_same_command_finishes(tmp_path, fault):
    """Faults the claims do not list: a reset after the headers, a body trickling past the
    timeout, an HTML 500, an empty 200, an event stream to a plain request."""
    with FakeModel(dies_with=fault, hang_s=2.5) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake))
        assert exit_code(exc) == STOPPED and "keeps failing" in str(exc), exc
        rd = stage_of(tmp_path)
        assert once(rd) == {}
        fake.dies_with = None
        run_agents(agents_cfg(tmp_path, fake))
    after = once(rd)
    assert len(after) == 4 and all(r["status"] == "ok" for r in after.values())
    ledger_matches_records(rd, after)
