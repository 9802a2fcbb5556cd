"""The agent loop's control flow and the metering proxy, against a scripted server on loopback."""


import pytest

from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.run.loop import MAX_RESULT_CHARS, run_loop
from harness.endpoints.proxy import MeteringProxy, usage_split
from harness.records.ledger import Ledger, read_ledger
from harness.runtime.tools import ToolError, ToolResult
from tests.fake_model import FakeModel, prompt_tokens

PRICES = {"hit": 0.006, "miss": 0.30, "output": 1.20}
MODEL = {"model": "fake", "params": {"temperature": 0}, "timeout_s": 2}


class Echo:
    name = "memory_search"

    def __init__(self, text="found: nothing", fail=None):
        self.text, self.fail, self.calls = text, fail, []

    def schema(self):
        return {"type": "function", "function": {"name": self.name, "description": "search",
                                                  "parameters": {"type": "object",
                                                                 "properties": {"query": {"type": "string"}},
                                                                 "required": ["query"]}}}

    def __call__(self, query):
        self.calls.append(query)
        if self.fail:
            raise self.fail
        return ToolResult(self.text, sessions=["s1"], retrieval_s=0.01)


@pytest.fixture
def proxied(tmp_path):
    """A fake upstream behind a real metering proxy; yields (fake, proxy, ledger path)."""
    servers = []

    def make(**kw):
        fake = FakeModel(**kw).start()
        ledger = Ledger(tmp_path / f"ledger{len(servers)}.jsonl")
        proxy = MeteringProxy(fake.base_url, ledger, api_key="sk-upstream-secret", timeout_s=1.0).start()
        servers.append((fake, proxy, ledger))
        return fake, proxy, ledger.path

    yield make
    for fake, proxy, ledger in servers:
        proxy.stop()
        fake.stop()
        ledger.close()


def agent(proxy, meter, **kw):
    return Agent(proxy.base_url, MODEL, "run-1", 1, meter, backoff_s=0.01, **kw)


def test_search_then_answer_and_accounting(proxied):
    fake, proxy, ledger = proxied(answer="Biscuit")
    meter = Meter(PRICES)
    tool = Echo()
    res = run_loop(agent(proxy, meter), "sys", "What is my dog called?", [tool])
    assert res.answer == "Biscuit" and res.tool_rounds == 1 and not res.forced
    assert tool.calls == ["What is my dog called?"]
    assert [m["role"] for m in res.messages] == ["system", "user", "assistant", "tool", "assistant"]
    # the tool result reached the model in the second request
    second = fake.requests[1]["body"]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": second[-2]["tool_calls"][0]["id"], "content": "found: nothing"}
    # tokens counted from the provider's usage, split into cache hit and miss
    expect = [prompt_tokens(r["body"]["messages"], r["body"].get("tools")) for r in fake.requests]
    assert [c["prompt"] for c in meter.calls] == expect
    assert [c["hit"] for c in meter.calls] == [p // 2 for p in expect]
    cost = sum((p // 2 * 0.006 + (p - p // 2) * 0.30 + 7 * 1.20) / 1e6 for p in expect)
    assert sum(c["cost_list"] for c in meter.calls) == pytest.approx(cost)
    assert meter.tools[0]["sessions"] == ["s1"] and meter.tools[0]["retrieval_s"] == 0.01


def test_forced_answer_after_ten_tool_rounds(proxied):
    def always_search(req):
        if req.get("tool_choice") == "none":
            return {"role": "assistant", "content": "forced answer"}
        n = sum(m["role"] == "tool" for m in req["messages"])
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "memory_search", "arguments": '{"query": "q"}'}}]}

    fake, proxy, _ = proxied(script=always_search)
    meter = Meter(PRICES)
    res = run_loop(agent(proxy, meter), "sys", "q", [Echo()], max_rounds=10)
    assert res.forced and res.tool_rounds == 10 and res.answer == "forced answer"
    assert len(fake.requests) == 11
    assert fake.requests[-1]["body"]["tool_choice"] == "none"
    assert all("tool_choice" not in r["body"] for r in fake.requests[:-1])


@pytest.mark.parametrize("name,args,expect", [
    ("memory_search", "{not json", "not valid JSON"),
    ("memory_search", '{"nope": 1}', "bad arguments"),
    ("memory_search", "[1, 2]", "must be a JSON object"),
    ("launch_rocket", "{}", "unknown tool"),
])
def test_bad_tool_calls_become_tool_errors(proxied, name, args, expect):
    def script(req):
        if any(m["role"] == "tool" for m in req["messages"]):
            return {"role": "assistant", "content": "done"}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}]}

    fake, proxy, _ = proxied(script=script)
    meter = Meter(PRICES)
    res = run_loop(agent(proxy, meter), "sys", "q", [Echo()])
    assert res.answer == "done"
    tool_msg = res.messages[3]
    assert tool_msg["role"] == "tool" and tool_msg["content"].startswith("error:") and expect in tool_msg["content"]
    assert meter.tools[0]["error"] is True


@pytest.mark.parametrize("exc,kind", [(ToolError("k must be an integer"), "tool_error"),
                                      (RuntimeError("index down"), "exception")])
def test_tool_exceptions_do_not_end_the_run(proxied, exc, kind):
    fake, proxy, _ = proxied(answer="ok")
    meter = Meter(PRICES)
    res = run_loop(agent(proxy, meter), "sys", "q", [Echo(fail=exc)])
    assert res.answer == "ok"
    assert str(exc) in res.messages[3]["content"]
    assert meter.tools[0]["failure"] == kind


def test_long_tool_results_are_cut(proxied):
    fake, proxy, _ = proxied(answer="ok")
    meter = Meter(PRICES)
    run_loop(agent(proxy, meter), "sys", "q", [Echo(text="x" * 50_000)])
    sent = fake.requests[1]["body"]["messages"][-1]["content"]
    assert sent.startswith("x" * MAX_RESULT_CHARS) and "cut: 20000 more characters" in sent
    assert meter.tools[0]["cut"] is True


def test_retries_on_429_500_and_timeouts(proxied):
    fake, proxy, ledger = proxied(schedule=["429", "500", "hang", "ok"], hang_s=3.0)
    meter = Meter(PRICES)
    res = run_loop(agent(proxy, meter), "sys", "q", [])
    assert res.answer == "I don't know."
    assert fake.faults == ["429", "500", "hang"]
    statuses = [e["status"] for e in read_ledger(ledger) if e["event"] == "response"]
    assert statuses == [429, 500, 504, 200]
    assert len(meter.calls) == 1, "only the successful call is counted for the run"


def test_exhausted_retries_fail_the_run(proxied):
    fake, proxy, _ = proxied(p500=1.0)
    with pytest.raises(ModelCallFailed):
        run_loop(agent(proxy, Meter(PRICES), max_retries=2), "sys", "q", [])
    assert len(fake.requests) == 3


def test_proxy_forwards_unchanged_tags_calls_and_keeps_the_key_out(proxied, tmp_path):
    fake, proxy, ledger = proxied()
    meter = Meter(PRICES)
    a = Agent(proxy.base_url, MODEL, "main.lme.q1.r0", 3, meter, role="judge", backoff_s=0.01)
    a.complete([{"role": "user", "content": "hello"}])
    got = fake.requests[0]
    assert got["body"]["messages"] == [{"role": "user", "content": "hello"}] and got["body"]["model"] == "fake"
    assert got["headers"]["Authorization"] == "Bearer sk-upstream-secret"
    assert not any(k.lower().startswith("x-run") for k in got["headers"])
    entries = read_ledger(ledger)
    assert [e["event"] for e in entries] == ["request", "response"]
    resp = entries[1]
    assert (resp["tag"], resp["attempt"], resp["role"], resp["status"]) == ("main.lme.q1.r0", 3, "judge", 200)
    pt = prompt_tokens(got["body"]["messages"], None)
    assert (resp["prompt"], resp["hit"], resp["miss"], resp["output"]) == (pt, pt // 2, pt - pt // 2, 7)
    assert "sk-upstream-secret" not in ledger.read_text()


def test_usage_split_reads_each_providers_cache_fields():
    assert usage_split({"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 60,
                        "prompt_cache_miss_tokens": 40})["hit"] == 60
    openai_style = usage_split({"prompt_tokens": 100, "completion_tokens": 5,
                                "prompt_tokens_details": {"cached_tokens": 30}})
    assert (openai_style["hit"], openai_style["miss"], openai_style["cache_reported"]) == (30, 70, True)
    plain = usage_split({"prompt_tokens": 100, "completion_tokens": 5})
    assert (plain["hit"], plain["miss"], plain["cache_reported"]) == (0, 100, False)


def test_ledger_survives_a_torn_last_line(tmp_path):
    led = Ledger(tmp_path / "l.jsonl")
    led.append({"event": "request", "n": 1})
    led.close()
    with open(tmp_path / "l.jsonl", "a") as f:
        f.write('{"event": "resp')
    assert read_ledger(tmp_path / "l.jsonl") == [{"event": "request", "n": 1}]
    again = Ledger(tmp_path / "l.jsonl")
    again.append({"event": "response", "n": 2})
    again.close()
    assert read_ledger(tmp_path / "l.jsonl") == [{"event": "request", "n": 1}, {"event": "response", "n": 2}]
