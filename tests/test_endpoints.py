"""Every way a real server says no (SPEC 10, issue 22): what stops a stage, what fails a run.

The refusals are replayed by the scripted upstream (tests/fake_model.py) from tests/endpoint_replies.py.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from harness.endpoints import fit as F
from harness.endpoints.client import Agent, Meter, ModelCallFailed, retry_after
from harness.endpoints.proxy import MeteringProxy, usage_split
from harness.failures import EnvironmentFailure
from harness.records.ledger import Ledger, read_ledger
from tests import cli, endpoint_replies as R
from tests.fake_model import FakeModel, prompt_tokens

PRICES = {"currency": "USD", "hit": 0.0, "miss": 0.0, "output": 0.0, "usd_per_currency": 1.0}


def stage_dir(tmp) -> Path:
    return Path(tmp) / "runs" / "smoke" / "smoke"


def records(tmp) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (stage_dir(tmp) / "records").glob("*.json")}


def cmd(fake, tmp, conds="none,full", model="vllm", *extra):
    return [sys.executable, "-m", "harness.run", "stage=smoke", f"model={model}", f"model.base_url={fake.base_url}",
            "model.api_key_env=null", "model.backoff_s=0.01", "samples.smoke.limit=null",
            f"stage.groups=[{{sample:smoke,conditions:[{conds}],repeats:2}}]", "stage.judge_after_run=false",
            f"runs_dir={tmp}/runs", f"cache_dir={cli.shared_cache(tmp)}", "concurrency=2", *extra]


def run(args, timeout=600):
    return cli.run(args)  # in this process (tests/cli.py): the stage's exit code, stdout and stderr


from bench.fake_upstream import is_preflight  # noqa: E402  (the preflight's prompt after the runs' system message)


# ------------------------------------------------------------------ bodies and usage, as servers send them

@pytest.mark.parametrize("name", sorted(R.USAGE))
def test_usage_is_read_as_each_server_reports_it(name):
    u = usage_split(R.USAGE[name])
    assert (u["prompt"], u["hit"], u["miss"], u["output"], u["reasoning"], u["cache_reported"]) == R.USAGE_SPLIT[name]
    assert u["usage_reported"] is True


def test_a_reply_without_usage_is_flagged_not_free():
    assert usage_split(None)["usage_reported"] is False
    assert usage_split({})["usage_reported"] is False


@pytest.mark.parametrize("reply,kind", [
    (R.VLLM_NO_TOOLS, F.REQUEST), (R.OPENAI_MAX_TOKENS, F.REQUEST), (R.OPENAI_TEMPERATURE, F.REQUEST),
    (R.OLLAMA_NO_TOOLS, F.REQUEST), (R.OPENAI_CONTEXT, F.CONTEXT), (R.VLLM_CONTEXT, F.CONTEXT),
    (R.DEEPSEEK_CONTEXT, F.CONTEXT), (R.LLAMACPP_CONTEXT, F.CONTEXT), (R.OPAQUE, F.UNKNOWN)])
def test_rejections_are_sorted_by_their_body(reply, kind):
    assert F.rejection_kind(*reply) == kind


def test_fit_renames_and_drops_what_the_endpoint_does_not_take():
    accepts = {"max_tokens": "max_completion_tokens", "temperature": False, "reasoning_effort": True}
    sent, dropped = F.fit({"temperature": 0, "max_tokens": 10, "reasoning_effort": "low", "seed": 1}, accepts)
    assert sent == {"max_completion_tokens": 10, "reasoning_effort": "low", "seed": 1} and dropped == ["temperature"]
    assert F.fit({"temperature": 0}, None) == ({"temperature": 0}, [])


def _agent(fake, tmp, model_cfg=None, **kw):
    ledger = Ledger(Path(tmp) / "ledger.jsonl")
    proxy = MeteringProxy(fake.base_url, ledger).start()
    mc = {"name": "t", "model": "m", "base_url": fake.base_url, "timeout_s": 5, **(model_cfg or {})}
    meter = Meter(PRICES)
    return proxy, ledger, meter, Agent(proxy.base_url, mc, "run", 1, meter, max_retries=kw.get("retries", 2),
                                       backoff_s=0.01, params=kw.get("params"))


def test_client_sorts_a_request_rejection_as_the_environments_and_context_as_the_runs(tmp_path):
    for reply, raises in ((R.VLLM_NO_TOOLS, EnvironmentFailure), (R.OPENAI_MAX_TOKENS, EnvironmentFailure),
                          (R.VLLM_CONTEXT, ModelCallFailed), (R.OPAQUE, ModelCallFailed)):
        with FakeModel(refuse=lambda req, r=reply: r) as fake:
            proxy, ledger, meter, agent = _agent(fake, tmp_path)
            try:
                with pytest.raises(raises) as got:
                    agent.complete([{"role": "user", "content": "hi"}])
            finally:
                proxy.stop()
                ledger.close()
            assert len(fake.requests) == 1  # never retried
            if reply is R.VLLM_NO_TOOLS:
                assert "--enable-auto-tool-choice" in str(got.value)
            if reply is R.OPENAI_MAX_TOKENS:
                assert "max_tokens" in got.value.what and "accepts" in got.value.fix
            if reply is R.VLLM_CONTEXT:
                assert got.value.reason == "context_length"
            if reply is R.OPAQUE:
                assert got.value.reason == "rejected" and got.value.signature


def test_a_prompt_ollama_cut_silently_fails_its_run_and_is_still_metered(tmp_path):
    """Ollama at its default context answers a long prompt having read only its last 2,048 tokens."""
    ctx = 2048
    cut = lambda pt: {**R.USAGE["ollama"], "prompt_tokens": min(pt, ctx)}  # noqa: E731
    long = [{"role": "user", "content": "The user said: " + "I moved to Lisbon in May. " * 2000}]
    short = [{"role": "user", "content": "Reply with OK."}]
    with FakeModel(usage=cut) as fake:
        proxy, ledger, meter, agent = _agent(fake, tmp_path, {"truncates_silently": True})
        unchecked = Agent(proxy.base_url, {"name": "t", "model": "m", "timeout_s": 5}, "run2", 1, Meter(PRICES))
        try:
            agent.complete(short)  # a prompt inside the context: no cut
            with pytest.raises(ModelCallFailed) as got:
                agent.complete(long)
            unchecked.complete(long)  # an endpoint not declared to cut is taken at its word
        finally:
            proxy.stop()
            ledger.close()
    assert got.value.reason == "context_length" and "OLLAMA_CONTEXT_LENGTH" in str(got.value)
    assert len(fake.requests) == 3  # the cut call was answered once, never retried
    assert [c["prompt"] for c in meter.calls] == [prompt_tokens(short, None), ctx]  # the cut call is metered


def test_accepts_fits_the_call_and_the_record_says_what_was_sent(tmp_path):
    with FakeModel(usage=lambda pt: R.USAGE["openai_reasoning"]) as fake:
        proxy, ledger, meter, agent = _agent(
            fake, tmp_path, {"accepts": {"max_tokens": "max_completion_tokens", "temperature": False}},
            params={"temperature": 0, "max_tokens": 400, "reasoning_effort": "low"})
        agent.complete([{"role": "user", "content": "hi " * 1000}])  # a prompt that can hold 1,200 tokens
        proxy.stop()
        ledger.close()
    body = fake.requests[0]["body"]
    assert body["max_completion_tokens"] == 400 and "max_tokens" not in body and "temperature" not in body
    [call] = meter.calls
    assert call["sent"] == {"max_completion_tokens": 400, "reasoning_effort": "low"} and call["dropped"] == ["temperature"]
    assert call["reasoning"] == 256 and call["hit"] == 1024
    [req] = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e["event"] == "request"]
    assert req["sent"] == {"max_completion_tokens": 400, "reasoning_effort": "low"}


def test_retry_after_is_honoured_in_seconds_and_bounded_by_patience(tmp_path):
    replies = [(429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"Retry-After": "1"})]
    with FakeModel(refuse=lambda req: replies.pop() if replies else None) as fake:
        proxy, ledger, meter, agent = _agent(fake, tmp_path)
        t0 = time.perf_counter()
        agent.complete([{"role": "user", "content": "hi"}])
        took = time.perf_counter() - t0
        proxy.stop()
        ledger.close()
    assert len(fake.requests) == 2 and took >= 0.9  # backoff alone would be ~0.01 s

    class Resp:
        def __init__(self, value):
            self.headers = {"retry-after": value}

    class Exc:
        status_code = 503

        def __init__(self, value):
            self.response = Resp(value)

    from email.utils import format_datetime
    from datetime import datetime, timedelta, timezone

    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 25 <= retry_after(Exc(when), 600) <= 30
    assert retry_after(Exc("3600"), 20) == 20  # bounded by the client's patience
    assert retry_after(Exc("not a date"), 20) is None


def test_usage_missing_is_recorded_as_unknown_cost(tmp_path):
    with FakeModel(usage=lambda pt: None) as fake:
        proxy, ledger, meter, agent = _agent(fake, tmp_path)
        agent.complete([{"role": "user", "content": "hi"}])
        proxy.stop()
        ledger.close()
    assert meter.calls[0]["usage_reported"] is False
    [resp] = [e for e in read_ledger(tmp_path / "ledger.jsonl") if e["event"] == "response"]
    assert resp["usage_reported"] is False


# ------------------------------------------------------------------ stages against replayed servers

def test_vllm_without_tool_calling_stops_the_stage_at_the_preflight_then_resumes(tmp_path):
    broken = {"on": True}
    refuse = lambda req: R.VLLM_NO_TOOLS if broken["on"] and req.get("tools") else None  # noqa: E731
    with FakeModel(refuse=refuse) as fake:
        res = run(cmd(fake, tmp_path, "none,tool_bm25"))
        assert res.returncode == 3, res.stderr
        assert "--enable-auto-tool-choice" in res.stderr and "preflight model failed" in res.stderr
        assert not records(tmp_path)
        assert all(is_preflight(r["body"]) for r in fake.requests)  # not one run's call was sent
        broken["on"] = False  # the server restarted with tool calling
        again = run(cmd(fake, tmp_path, "none,tool_bm25"))
    assert again.returncode == 0, again.stderr
    recs = records(tmp_path)
    assert recs and all(r["status"] == "ok" for r in recs.values())
    assert len({r["run_id"] for r in recs.values()}) == len(recs)


def test_preflight_sends_each_request_shape_once_and_the_dry_run_sends_none(tmp_path):
    with FakeModel() as fake:
        dry = run(cmd(fake, tmp_path, "none,full,tool_bm25,tool_dense", "vllm", "dry_run=true"))
        assert dry.returncode == 0, dry.stderr
        assert not fake.requests
        assert "3 metered call(s)" in dry.stdout and "tool_choice none" in dry.stdout
        res = run(cmd(fake, tmp_path, "none,full,tool_bm25,tool_dense"))
    assert res.returncode == 0, res.stderr
    pre = [r["body"] for r in fake.requests if is_preflight(r["body"])]
    assert len(pre) == 3
    assert sorted((bool(b.get("tools")), str(b.get("tool_choice"))) for b in pre) == [
        (False, "None"), (True, "None"), (True, "none")]
    assert all(b["max_tokens"] == 1 for b in pre)


reasoning_refusal = R.reasoning_refusal


def test_reasoning_model_without_accepts_stops_at_the_preflight_naming_the_parameter(tmp_path):
    with FakeModel(refuse=reasoning_refusal) as fake:
        res = run(cmd(fake, tmp_path, "none", "vllm"))
    assert res.returncode == 3, res.stderr
    assert "max_tokens" in res.stderr and "accepts" in res.stderr
    assert not records(tmp_path)


def test_reasoning_model_with_accepts_reads_and_judges(tmp_path):
    with FakeModel(refuse=reasoning_refusal, usage=lambda pt: R.USAGE["openai_reasoning"]) as fake:
        res = run(cmd(fake, tmp_path, "none,tool_bm25", "openai_reasoning", "judge=openai_reasoning",
                      f"judge.base_url={fake.base_url}", "judge.api_key_env=null", "stage.judge_after_run=true"))
    assert res.returncode == 0, res.stderr
    assert not [f for f in fake.faults if f.startswith("refused")]
    recs = records(tmp_path)
    assert recs and all(r["status"] == "ok" for r in recs.values())
    for r in recs.values():
        for c in r["calls"]:
            assert "temperature" not in c["sent"] and "max_tokens" not in c["sent"]
            assert c["dropped"] == [] and c["reasoning"] == 256
    ledger = read_ledger(stage_dir(tmp_path) / "ledger.jsonl")
    judged = [e for e in ledger if e["event"] == "request" and e.get("role") == "judge"]
    assert judged and all(e["sent"]["max_completion_tokens"] == 2000 and "temperature" not in e["sent"]
                          for e in judged)
    pre = [e for e in ledger if e["event"] == "request" and e.get("role") == "preflight"]
    assert pre and all(e["sent"].get("max_completion_tokens") == 1 for e in pre)


def test_small_context_fails_only_the_long_prompt_runs(tmp_path):
    limit = {"tokens": 600}

    def refuse(req):
        return R.VLLM_CONTEXT if prompt_tokens(req["messages"], req.get("tools")) > limit["tokens"] else None

    with FakeModel(refuse=refuse) as fake:
        res = run(cmd(fake, tmp_path, "none,full"))
        assert res.returncode == 0, res.stderr
        recs = records(tmp_path)
        full = [r for r in recs.values() if r["condition"] == "full"]
        none = [r for r in recs.values() if r["condition"] == "none"]
        assert full and all(r["status"] == "failed" and r["failure_reason"] == "context_length" for r in full)
        assert none and all(r["status"] == "ok" and r["failure_reason"] is None for r in none)
        limit["tokens"] = 10**9  # a server with a larger context
        again = run(cmd(fake, tmp_path, "none,full", "vllm", "retry_failed=true"))
    assert again.returncode == 0, again.stderr
    recs2 = records(tmp_path)
    assert set(recs2) == set(recs) and all(r["status"] == "ok" for r in recs2.values())
    assert all(recs2[k]["attempt"] == (2 if recs[k]["condition"] == "full" else 1) for k in recs2)


def test_the_same_unexplained_rejection_on_the_first_runs_trips_the_breaker(tmp_path):
    broken = {"on": True}
    refuse = lambda req: R.OPAQUE if broken["on"] and not is_preflight(req) else None  # noqa: E731
    with FakeModel(refuse=refuse) as fake:
        res = run(cmd(fake, tmp_path, "none,full", "vllm", "concurrency=1"))
        assert res.returncode == 3, res.stderr
        assert "the same endpoint rejection ended 3 runs in a row" in res.stderr
        assert not records(tmp_path)  # the runs it ended stay unrecorded
        assert len([r for r in fake.requests if not is_preflight(r["body"])]) == 3
        broken["on"] = False
        again = run(cmd(fake, tmp_path, "none,full", "vllm", "concurrency=1"))
    assert again.returncode == 0, again.stderr
    recs = records(tmp_path)
    assert recs and all(r["status"] == "ok" for r in recs.values())
    assert sorted(r["attempt"] for r in recs.values()).count(2) == 3


def test_an_unexplained_rejection_after_a_success_fails_only_that_run(tmp_path):
    seen = {"n": 0}

    def refuse(req):
        if is_preflight(req):
            return None
        seen["n"] += 1
        return R.OPAQUE if seen["n"] % 2 == 0 else None

    with FakeModel(refuse=refuse) as fake:
        res = run(cmd(fake, tmp_path, "none,full", "vllm", "concurrency=1"))
        # the last run's rejection had no success after it: the server's, unrecorded (harness.endpoints.liveness)
        assert res.returncode == 3 and "none succeeded after them" in res.stderr, res.stderr
        assert len(records(tmp_path)) == 23
        again = run(cmd(fake, tmp_path, "none,full", "vllm", "concurrency=1"))
    assert again.returncode == 0, again.stderr
    recs = records(tmp_path)
    failed = [r for r in recs.values() if r["status"] == "failed"]
    assert len(recs) == 24 and failed and all(r["failure_reason"] == "rejected" for r in failed)


def test_the_rubric_judges_shape_is_checked_before_scoring(tmp_path):
    from harness.run.preflight import judge_preflight

    refusal = (400, {"error": {"message": "response_format of type json_object is not supported by this model",
                               "type": "invalid_request_error", "param": "response_format"}})
    jc = {"name": "rubric", "model": "m", "prices": PRICES, "timeout_s": 5, "backoff_s": 0.01,
          "params": {"temperature": 0, "max_tokens": 60, "response_format": {"type": "json_object"}}}
    for refuse in (lambda req: refusal if "response_format" in req else None, None):
        with FakeModel(refuse=refuse) as fake:
            ledger = Ledger(tmp_path / "ledger.jsonl")
            with MeteringProxy(fake.base_url, ledger) as proxy:
                if refuse:
                    with pytest.raises(EnvironmentFailure, match="response_format"):
                        judge_preflight(proxy.base_url, None, config=jc)
                else:
                    judge_preflight(proxy.base_url, None, config=jc)
            ledger.close()
        [req] = fake.requests
        assert req["body"]["max_tokens"] == 1 and "JSON" in json.dumps(req["body"]["messages"])


# ------------------------------------------------------------------ the Org stage against the same servers

def org_cmd(fake, tmp, model="vllm"):
    return [sys.executable, "-m", "harness.run", "stage=smoke_org", f"model={model}", f"model.base_url={fake.base_url}",
            "model.api_key_env=null", "model.backoff_s=0.01", "stage.judge_after_run=false",
            f"runs_dir={tmp}/runs", f"cache_dir={cli.shared_cache(tmp)}", "concurrency=2"]


@pytest.mark.parametrize("refusal, named", [
    (lambda req: R.VLLM_NO_TOOLS if req.get("tools") else None, "--enable-auto-tool-choice"),
    (reasoning_refusal, "max_tokens"),
], ids=["vllm_without_tool_calling", "reasoning_model"])
def test_the_org_stage_stops_at_the_preflight_before_any_run(tmp_path, refusal, named):
    """Org's own tools (memory_search through a view, ask_agent) are request shapes of their own."""
    with FakeModel(refuse=refusal) as fake:
        res = run(org_cmd(fake, tmp_path))
    assert res.returncode == 3, res.stderr
    assert named in res.stderr and "preflight model failed" in res.stderr
    assert not list((tmp_path / "runs").rglob("records/*.json"))
    assert fake.requests and all(is_preflight(r["body"]) for r in fake.requests)
