"""The JSON-schema tool adapter: translation against a scripted upstream, then the real model.

The scripted upstream is a real HTTP server on loopback, so the adapter's own
HTTP client, error handling and retry are exercised exactly as in a run.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from bench.fake_upstream import ScriptedUpstream
from harness.endpoints.tool_adapter import (
    ADAPTER_NAME,
    FINGERPRINT_SUFFIX,
    AdapterError,
    ToolAdapter,
    action_schema,
    render_messages,
    translate_request,
)

LOOKUP = {"type": "function", "function": {
    "name": "lookup", "description": "Look up a stored fact by key.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string", "description": "one-word key"}},
                   "required": ["key"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Full-text search over notes.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                   "required": ["query"]}}}


# --------------------------------------------------------------------------- scripted upstream


class FakeUpstream(ScriptedUpstream):
    """bench/fake_upstream.py's loopback server replaying scripted (status, body) replies; records requests."""

    models = ("fake-model",)

    def __init__(self):
        super().__init__()
        self.requests: list[dict] = []
        self.script: list[tuple[int, dict]] = []
        self.start()

    def get(self, path: str) -> tuple[int, dict]:
        if path == "/v1/models":
            return super().get(path)
        if path == "/health":
            return 200, {"status": "ok"}
        return 404, {"error": "nope"}

    def respond(self, handler, raw: bytes) -> None:
        self.requests.append({"path": handler.path, "body": json.loads(raw)})
        code, obj = self.script.pop(0) if self.script else (500, {"error": {"message": "script empty"}})
        handler.send(code, obj)

    def reply(self, content, finish="stop", usage=None, code=200):
        """Queue a llama.cpp-shaped chat reply carrying `content`."""
        self.script.append((code, {
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "fake-model",
            "system_fingerprint": "b0-fake",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": usage or {"prompt_tokens": 120, "completion_tokens": 17, "total_tokens": 137,
                               "prompt_tokens_details": {"cached_tokens": 96}},
            "timings": {"cache_n": 96, "prompt_n": 24, "predicted_n": 17}}))

    def close(self):
        self.stop()


@pytest.fixture
def upstream():
    u = FakeUpstream()
    yield u
    u.close()


@pytest.fixture
def adapter(upstream):
    with ToolAdapter(upstream.base_url) as a:
        yield a


@pytest.fixture
def client(adapter):
    return openai.OpenAI(base_url=adapter.base_url, api_key="x", max_retries=0, timeout=30)


def _msgs():
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Code of Zephyr?"}]


# --------------------------------------------------------------------------- pure translation


def test_request_with_tools_becomes_constrained_plain_chat():
    body = {"model": "m", "messages": _msgs(), "tools": [LOOKUP, SEARCH], "temperature": 0.2, "seed": 7,
            "max_completion_tokens": 33, "top_p": 0.9}
    up, plan = translate_request(body)
    assert "tools" not in up and "tool_choice" not in up
    assert (up["temperature"], up["seed"], up["max_tokens"], up["top_p"]) == (0.2, 7, 33, 0.9)
    assert "max_completion_tokens" not in up and up["stream"] is False
    sys0 = up["messages"][0]
    assert sys0["role"] == "system" and sys0["content"].startswith("You are terse.")
    assert "lookup(key: string): Look up a stored fact by key." in sys0["content"]
    assert "search(query: string, k?: integer)" in sys0["content"]
    assert '"action":"answer"' in sys0["content"]
    branches = up["json_schema"]["anyOf"]
    assert branches[0]["properties"]["action"] == {"const": "answer"}
    by_tool = {b["properties"]["tool"]["const"]: b for b in branches[1:]}
    assert set(by_tool) == {"lookup", "search"}
    args = by_tool["search"]["properties"]["arguments"]
    assert args["required"] == ["query"] and args["properties"]["k"] == {"type": "integer"}
    assert args["additionalProperties"] is False
    assert plan.mode == "tools" and plan.schema_kind == "per-tool"
    assert body["tools"] == [LOOKUP, SEARCH]  # caller's request untouched


def test_tool_choice_variants():
    up, _ = translate_request({"messages": _msgs(), "tools": [LOOKUP, SEARCH], "tool_choice": "required"})
    consts = [b["properties"]["action"]["const"] for b in up["json_schema"]["anyOf"]]
    assert consts == ["call", "call"]
    up, plan = translate_request({"messages": _msgs(), "tools": [LOOKUP, SEARCH],
                                  "tool_choice": {"type": "function", "function": {"name": "search"}}})
    assert up["json_schema"]["properties"]["tool"] == {"const": "search"} and plan.names == ["search"]
    assert "You must call the tool search now." in up["messages"][0]["content"]
    up, plan = translate_request({"messages": _msgs(), "tools": [LOOKUP], "tool_choice": "none"})
    assert plan.mode == "plain" and "json_schema" not in up and "tools" not in up
    assert up["messages"] == _msgs()
    with pytest.raises(AdapterError, match="unknown tool 'nope'"):
        translate_request({"messages": _msgs(), "tools": [LOOKUP],
                           "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    with pytest.raises(AdapterError, match="stream"):
        translate_request({"messages": _msgs(), "stream": True})


def test_constraint_dialects():
    body = {"messages": _msgs(), "tools": [LOOKUP]}
    up, _ = translate_request(body, constraint="llguidance")
    assert up["grammar"].startswith("%llguidance {}\nstart: %json {")
    schema = json.loads(up["grammar"].split("%json ", 1)[1])
    assert schema["x-guidance"] == {"whitespace_flexible": False} and len(schema["anyOf"]) == 2
    up, _ = translate_request(body, constraint="response_format")
    assert up["response_format"]["type"] == "json_schema" and "anyOf" in up["response_format"]["json_schema"]["schema"]
    generic = action_schema([{"name": "a", "description": "", "parameters": {}},
                             {"name": "b", "description": "", "parameters": {}}], per_tool=False)
    assert generic["anyOf"][1]["properties"]["tool"] == {"enum": ["a", "b"]}


def test_history_rendering_tools_and_plain():
    history = _msgs() + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "zephyr"}'}},
            {"id": "c2", "type": "function", "function": {"name": "search", "arguments": '{"query":"code"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "code is 7341"},
        {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "no hits"}]},
        {"role": "assistant", "content": "It is 7341."},
        {"role": "user", "content": "Thanks"},
    ]
    tools = render_messages(history, tools_mode=True)
    assert [m["role"] for m in tools] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert tools[2]["content"].splitlines() == [
        '{"action":"call","tool":"lookup","arguments":{"key":"zephyr"}}',
        '{"action":"call","tool":"search","arguments":{"query":"code"}}']
    assert tools[3]["content"] == "[result of tool lookup]\ncode is 7341\n\n[result of tool search]\nno hits"
    assert tools[4]["content"] == '{"action":"answer","answer":"It is 7341."}'
    plain = render_messages(history, tools_mode=False)
    assert plain[2]["content"].startswith('[called tool lookup with arguments {"key":"zephyr"}]')
    assert plain[4]["content"] == "It is 7341."
    assert all(set(m) == {"role", "content"} for m in plain + tools)  # no tool_calls/tool roles leak upstream


# --------------------------------------------------------------------------- over HTTP, scripted upstream


def test_call_reply_becomes_tool_calls(upstream, client):
    upstream.reply('{"action":"call","tool":"lookup","arguments":{"key":"zephyr"}}')
    r = client.chat.completions.create(model="m", messages=_msgs(), tools=[LOOKUP], temperature=0, seed=3,
                                       max_tokens=40)
    sent = upstream.requests[-1]["body"]
    assert "tools" not in sent and "json_schema" in sent and sent["seed"] == 3 and sent["max_tokens"] == 40
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (tc,) = ch.message.tool_calls
    assert tc.type == "function" and tc.function.name == "lookup" and tc.id.startswith("call_")
    assert json.loads(tc.function.arguments) == {"key": "zephyr"}
    assert r.usage.prompt_tokens == 120 and r.usage.completion_tokens == 17
    assert r.usage.prompt_tokens_details.cached_tokens == 96
    assert r.system_fingerprint == "b0-fake" + FINGERPRINT_SUFFIX
    extra = r.model_extra
    assert extra["adapter"]["name"] == ADAPTER_NAME and extra["adapter"]["parsed"] is True
    assert extra["timings"]["cache_n"] == 96


def test_answer_reply_becomes_content_and_history_round_trips(upstream, client):
    upstream.reply('{"action":"call","tool":"lookup","arguments":{"key":"zephyr"}}')
    upstream.reply('{"action":"answer","answer":"The code is 7341."}')
    msgs = _msgs()
    r1 = client.chat.completions.create(model="m", messages=msgs, tools=[LOOKUP])
    msgs.append(r1.choices[0].message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": r1.choices[0].message.tool_calls[0].id, "content": "code=7341"})
    r2 = client.chat.completions.create(model="m", messages=msgs, tools=[LOOKUP])
    assert r2.choices[0].finish_reason == "stop" and r2.choices[0].message.content == "The code is 7341."
    assert not r2.choices[0].message.tool_calls
    sent = upstream.requests[-1]["body"]["messages"]
    assert sent[-2] == {"role": "assistant",
                        "content": '{"action":"call","tool":"lookup","arguments":{"key":"zephyr"}}'}
    assert sent[-1] == {"role": "user", "content": "[result of tool lookup]\ncode=7341"}


def _after_one_call():
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "zephyr"}'}}
    return _msgs() + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": "code=7341"}]


def test_forced_answer_after_tool_rounds_stays_json_and_allows_only_an_answer(upstream, client):
    upstream.reply('{"action":"answer","answer":"7341"}')
    r = client.chat.completions.create(model="m", messages=_after_one_call(), tools=[LOOKUP], tool_choice="none")
    sent = upstream.requests[-1]["body"]
    assert sent["json_schema"]["properties"]["action"] == {"const": "answer"}
    assert "anyOf" not in sent["json_schema"], "no call branch may remain"
    assert sent["messages"][-2]["content"] == '{"action":"call","tool":"lookup","arguments":{"key":"zephyr"}}'
    assert "No more tool calls" in sent["messages"][0]["content"]
    assert r.choices[0].message.content == "7341" and not r.choices[0].message.tool_calls
    assert r.model_extra["adapter"]["schema"] == "answer-only"


def test_an_identical_repeated_call_is_turned_into_an_answer(upstream, client):
    upstream.reply('{"action":"call","tool":"lookup","arguments":{"key":"zephyr"}}',
                   usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                          "prompt_tokens_details": {"cached_tokens": 80}})
    upstream.reply('{"action":"answer","answer":"It is 7341."}',
                   usage={"prompt_tokens": 105, "completion_tokens": 8, "total_tokens": 113,
                          "prompt_tokens_details": {"cached_tokens": 90}})
    r = client.chat.completions.create(model="m", messages=_after_one_call(), tools=[LOOKUP])
    assert len(upstream.requests) == 2
    assert upstream.requests[1]["body"]["json_schema"]["properties"]["action"] == {"const": "answer"}
    assert r.choices[0].message.content == "It is 7341." and not r.choices[0].message.tool_calls
    assert r.model_extra["adapter"]["repeat_guard"]["repeated_call"] == "lookup"
    # both upstream calls are metered as this one reply
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (205, 18)
    assert r.usage.prompt_tokens_details.cached_tokens == 170


def test_a_new_call_is_not_guarded(upstream, client):
    upstream.reply('{"action":"call","tool":"lookup","arguments":{"key":"orion"}}')
    r = client.chat.completions.create(model="m", messages=_after_one_call(), tools=[LOOKUP])
    assert len(upstream.requests) == 1
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"key": "orion"}
    assert "repeat_guard" not in r.model_extra["adapter"]


@pytest.mark.parametrize("raw,finish,err", [
    ('Sure! {"action": "call", "tool": "look', "length", "not valid JSON"),
    ('{"action":"call","tool":"rm_rf","arguments":{}}', "stop", "unknown tool"),
    ('["answer"]', "stop", "not an object"),
    ('{"action":"dance"}', "stop", "no valid action"),
])
def test_malformed_model_output_is_returned_as_marked_content(upstream, client, raw, finish, err):
    upstream.reply(raw, finish=finish)
    r = client.chat.completions.create(model="m", messages=_msgs(), tools=[LOOKUP])
    ch = r.choices[0]
    assert ch.message.content == raw and not ch.message.tool_calls
    assert ch.finish_reason == finish
    a = r.model_extra["adapter"]
    assert a["parsed"] is False and err in a["parse_error"] and a["raw_content"] == raw


def test_answer_cut_off_by_max_tokens_is_salvaged(upstream, client):
    raw = '{"action":"answer","answer":"A hash table maps keys \\"k\\" to buck\\u00'
    upstream.reply(raw, finish="length")
    r = client.chat.completions.create(model="m", messages=_msgs(), tools=[LOOKUP], max_tokens=20)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and ch.message.content == 'A hash table maps keys "k" to buck'
    a = r.model_extra["adapter"]
    assert a["parsed"] is False and a["salvaged"] == "partial_answer" and a["raw_content"] == raw


def test_schema_rejection_retries_with_generic_schema(upstream, client):
    upstream.script.append((400, {"error": {"code": 400, "message": "JSON schema error at #/x: unrecognized type"}}))
    upstream.reply('{"action":"call","tool":"search","arguments":{"k":2}}')
    r = client.chat.completions.create(model="m", messages=_msgs(), tools=[LOOKUP, SEARCH])
    first, second = (q["body"]["json_schema"] for q in upstream.requests)
    assert first["anyOf"][1]["properties"]["tool"] == {"const": "lookup"}
    assert second["anyOf"][1]["properties"]["tool"] == {"enum": ["lookup", "search"]}
    assert r.choices[0].message.tool_calls[0].function.name == "search"
    a = r.model_extra["adapter"]
    assert a["schema"] == "generic" and a["argument_problems"] == ["missing required argument 'query'"]


def test_upstream_errors_pass_through(upstream, adapter):
    upstream.script.append((400, {"error": {"message": "request (9000 tokens) exceeds the available context size",
                                            "type": "exceed_context_size_error"}}))
    r = httpx.post(adapter.base_url + "/chat/completions",
                   json={"messages": _msgs(), "tools": [LOOKUP]}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["type"] == "exceed_context_size_error"
    assert len(upstream.requests) == 1  # not a schema problem: no retry
    r = httpx.post(adapter.base_url + "/chat/completions", json={"messages": _msgs(), "stream": True}, timeout=30)
    assert r.status_code == 400 and "stream" in r.json()["error"]["message"]
    r = httpx.post(adapter.base_url + "/chat/completions", content=b"{not json", timeout=30)
    assert r.status_code == 400


def test_upstream_down_is_502():
    with ToolAdapter("http://127.0.0.1:9/v1", timeout=5) as a:
        r = httpx.post(a.base_url + "/chat/completions", json={"messages": _msgs()}, timeout=30)
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"


def test_plain_request_passes_through_and_is_marked(upstream, client):
    upstream.reply("Hello there")
    msgs = _msgs() + [{"role": "assistant", "content": "ok"}]
    r = client.chat.completions.create(model="m", messages=msgs, temperature=0.5, stop=["\n"])
    sent = upstream.requests[-1]["body"]
    assert sent["messages"] == msgs and sent["temperature"] == 0.5 and sent["stop"] == ["\n"]
    assert not any(k in sent for k in ("json_schema", "grammar", "response_format"))
    assert r.choices[0].message.content == "Hello there" and r.choices[0].finish_reason == "stop"
    assert r.model_extra["adapter"]["mode"] == "plain"


def test_models_endpoint_proxies(adapter):
    r = httpx.get(adapter.base_url + "/models", timeout=10)
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "fake-model"


def test_stop_closes_port(upstream):
    a = ToolAdapter(upstream.base_url).start()
    url = a.base_url + "/models"
    assert httpx.get(url, timeout=5).status_code == 200
    a.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=5)


# --------------------------------------------------------------------------- the real local model

FACT = "The access code of project Zephyr is 7341."


def run_lookup(args_json: str) -> str:
    """The toy tool: a fact store that is forgiving about the exact key spelling."""
    key = str(json.loads(args_json).get("key", "")).lower()
    return FACT if "zephyr" in key else f"no fact stored under {key!r}"


@pytest.fixture(scope="module")  # stopped with this file: a later file of the same process may start its own
def real_client():
    from harness.endpoints.local_model import LocalModel

    with LocalModel(ctx_size=2048) as m:
        yield m.client(timeout=300)


@pytest.mark.model
def test_real_model_calls_tool_then_answers(real_client):
    msgs = [{"role": "system", "content": "You are a helpful assistant. Use tools to find facts."},
            {"role": "user", "content": "What is the access code of project Zephyr? Use the lookup tool."}]
    r1 = real_client.chat.completions.create(model="local", messages=msgs, tools=[LOOKUP], temperature=0,
                                             max_tokens=48)
    ch = r1.choices[0]
    assert ch.finish_reason == "tool_calls", r1.model_extra["adapter"]
    (tc,) = ch.message.tool_calls
    assert tc.function.name == "lookup" and isinstance(json.loads(tc.function.arguments)["key"], str)
    assert r1.model_extra["adapter"]["parsed"] is True and r1.usage.prompt_tokens > 50
    msgs.append(ch.message.model_dump(exclude_none=True))
    msgs.append({"role": "tool", "tool_call_id": tc.id, "content": run_lookup(tc.function.arguments)})
    r2 = real_client.chat.completions.create(model="local", messages=msgs, tools=[LOOKUP], temperature=0,
                                             max_tokens=48)
    assert r2.choices[0].finish_reason == "stop", r2.model_extra["adapter"]
    assert "7341" in r2.choices[0].message.content  # only knowable from the tool result
    # the second round re-uses the first round's prompt from llama.cpp's cache
    assert r2.usage.prompt_tokens_details.cached_tokens > r1.usage.prompt_tokens // 2


@pytest.mark.model
def test_real_model_tool_choice_none_is_plain(real_client):
    r = real_client.chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Reply with one word: what colour is the sky?"}],
        tools=[LOOKUP], tool_choice="none", temperature=0, max_tokens=12)
    ch = r.choices[0]
    assert not ch.message.tool_calls and ch.finish_reason in ("stop", "length")
    assert ch.message.content.strip() and '"action"' not in ch.message.content
    assert r.model_extra["adapter"]["mode"] == "plain"


def test_optional_arguments_show_their_defaults_to_the_model():
    search = {"type": "function", "function": {"name": "memory_search", "description": "Search memory.",
                                               "parameters": {"type": "object", "properties": {
                                                   "query": {"type": "string"},
                                                   "k": {"type": "integer", "default": 8}},
                                                   "required": ["query"]}}}
    up, _ = translate_request({"model": "m", "messages": _msgs(), "tools": [search]})
    text = up["messages"][0]["content"]
    assert "memory_search(query: string, k?: integer = 8 (the default; leave it out))" in text


def test_the_loop_records_which_defaults_a_model_overrode():
    from harness.endpoints.client import Meter
    from harness.run.loop import call_tool
    from harness.runtime.tools import ToolResult

    class Search:
        name = "memory_search"

        def schema(self):
            return {"type": "function", "function": {"name": self.name, "parameters": {"type": "object", "properties": {
                "query": {"type": "string"}, "k": {"type": "integer", "default": 8}}}}}

        def __call__(self, query="", k=8):
            return ToolResult(f"{k} results for {query}")

    meter = Meter({"hit": 0, "miss": 0, "output": 0})
    call_tool({"memory_search": Search()}, "memory_search", '{"query": "cat", "k": 1}', meter)
    call_tool({"memory_search": Search()}, "memory_search", '{"query": "cat", "k": 8}', meter)
    call_tool({"memory_search": Search()}, "memory_search", '{"query": "cat"}', meter)
    assert [t["overrode_defaults"] for t in meter.tools] == [{"k": 1}, {}, {}]
