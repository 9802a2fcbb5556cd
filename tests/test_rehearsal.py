"""The rehearsal's fake upstream and its accounting (the benchmark itself runs with make rehearsal)."""

from __future__ import annotations

import json
import math
import statistics

import httpx
import pytest

from bench.fake_upstream import FakeUpstream, prompt_tokens
from bench.rehearsal import compose, sample_overrides, shares, stage_overrides

SEARCH = {"type": "function", "function": {"name": "memory_search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}}, "required": ["query"]}}}


def post(fake: FakeUpstream, body: dict) -> httpx.Response:
    return httpx.post(fake.base_url + "/chat/completions", json=body, timeout=10)


def conversation(fake: FakeUpstream, question: str) -> list[dict]:
    """Play the agent's side: answer every tool call with a fixed result until the fake answers."""
    msgs = [{"role": "system", "content": "You are an assistant with memory."}, {"role": "user", "content": question}]
    replies = []
    for _ in range(10):
        r = post(fake, {"model": "deepseek-chat", "messages": msgs, "tools": [SEARCH]})
        assert r.status_code == 200, r.text
        body = r.json()
        replies.append(body)
        msg = body["choices"][0]["message"]
        msgs.append(msg)
        if not msg.get("tool_calls"):
            return replies
        call = msg["tool_calls"][0]
        msgs.append({"role": "tool", "tool_call_id": call["id"],
                     "content": "Session s1 round 2: we talked about Juniper the dachshund and her vaccination"})
    raise AssertionError("the fake never answered")


def test_agent_searches_then_answers_from_the_results_with_deepseek_cache_usage():
    with FakeUpstream(seed=1, scale=0.0, p429=0.0, p5xx=0.0) as fake:
        replies = conversation(fake, "What did I name my dachshund puppy?")
    calls = [r["choices"][0]["message"].get("tool_calls") for r in replies]
    assert 1 <= sum(bool(c) for c in calls) <= 3 and not calls[-1]
    first = json.loads(calls[0][0]["function"]["arguments"])
    assert calls[0][0]["function"]["name"] == "memory_search"
    assert set(first["query"].split()) <= {"dachshund", "puppy"}  # words of the question, none invented
    answer = replies[-1]["choices"][0]["message"]["content"]
    assert set(answer.rstrip(".").split(": ", 1)[1].split()) <= {"session", "round", "talked", "juniper", "dachshund",
                                                                  "vaccination", "about"}
    for i, r in enumerate(replies):
        u = r["usage"]
        assert u["prompt_cache_hit_tokens"] + u["prompt_cache_miss_tokens"] == u["prompt_tokens"]
        assert u["prompt_cache_hit_tokens"] % 64 == 0
        if i:  # a later call of the conversation hits the cache up to the last call's prompt
            prev = replies[i - 1]["usage"]["prompt_tokens"]
            assert u["prompt_cache_hit_tokens"] == prev // 64 * 64


def test_judge_gets_yes_or_no_and_preflight_ok():
    from harness.run.preflight import PROMPT

    with FakeUpstream(seed=0, scale=0.0, p429=0.0, p5xx=0.0) as fake:
        j = post(fake, {"model": "m", "messages": [{"role": "user", "content": "Q... Reply with yes or no only."}]})
        p = post(fake, {"model": "m", "messages": [{"role": "user", "content": PROMPT}]})
        s = fake.stats()
    assert j.json()["choices"][0]["message"]["content"] in ("yes", "no")
    assert p.json()["choices"][0]["message"]["content"] == "OK"
    assert s["calls"] == {"agent": 0, "judge": 1, "preflight": 1}


def test_latency_is_seeded_lognormal_scaled_and_faults_come_at_their_rate():
    fake = FakeUpstream(seed=3, scale=0.5, median_s=1.5, sigma=0.7, p429=0.01, p5xx=0.01)
    draws = [fake.draw(json.dumps({"n": i}).encode()) for i in range(4000)]
    ok = [lat for _, lat, f in draws if f is None]
    logs = [math.log(x) for x in ok]
    assert statistics.median(ok) == pytest.approx(0.75, rel=0.06)
    assert statistics.stdev(logs) == pytest.approx(0.7, rel=0.06)
    faults = sum(f is not None for _, _, f in draws)
    assert 40 <= faults <= 120  # 2% of 4000 = 80, binomial sd ~ 9
    again = FakeUpstream(seed=3, scale=0.5)
    assert again.draw(json.dumps({"n": 7}).encode())[1] == draws[7][1]  # same body, same seed: same draw
    assert fake.draw(json.dumps({"n": 7}).encode())[1] != draws[7][1]  # a retry of that body draws anew


def test_the_figures_read_after_a_reply_count_that_reply():
    """A reply reaches its client before the upstream counts its request: figures read right after it wait for the
    count. The upstream here takes 0.3 s between sending a reply and returning, where a race would show."""
    import time

    class SlowToCount(FakeUpstream):
        def _answer(self, handler, raw):
            out = super()._answer(handler, raw)
            time.sleep(0.3)
            return out

    with SlowToCount(seed=0, scale=0.01, p429=1.0, p5xx=0.0) as fake:
        r = post(fake, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        s = fake.stats()
    assert r.status_code == 429 and s["faults"]["429"] == 1 and s["calls"]["agent"] == 1


def test_refused_calls_are_counted_as_waiting():
    import time

    with FakeUpstream(seed=0, scale=0.01, p429=1.0, p5xx=0.0) as fake:
        t0 = time.perf_counter()
        r = post(fake, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        client_s = time.perf_counter() - t0
        s = fake.stats()
    assert r.status_code == 429
    # the upstream's time is the whole request inside it: never more than the client waited
    assert s["faults"]["429"] == 1 and s["calls"]["agent"] == 1 and 0 < s["waited_s"]["agent"] <= client_s


def test_prompt_tokens_counts_tools_too():
    msgs = [{"role": "user", "content": "x" * 400}]
    assert prompt_tokens(msgs, [SEARCH]) == (len(json.dumps(msgs)) + len(json.dumps([SEARCH]))) // 4


def test_shares_closed_form():
    # 10 runs: 100 s in loops of which 90 s waiting at latency x0.1, 20 s setup; stage 20 s x 8 slots
    s = shares(busy_s=120.0, loop_s=100.0, wait_s=90.0, stage_wall_s=20.0, concurrency=8, latency_scale=0.1)
    assert s["share_per_run"] == pytest.approx(30 / 120)
    assert s["share_prepared"] == pytest.approx(10 / 100)
    assert s["share_stage"] == pytest.approx(1 - 90 / 160)
    assert s["share_prepared_x1"] == pytest.approx(10 / (10 + 900))
    assert s["share_per_run_x1"] == pytest.approx(30 / (30 + 900))


def test_full_size_knobs_are_the_study_sample():
    """questions=180 composes the study's main stage (main 30 per type, the subset 10 per type)."""
    cfg = compose(stage_overrides({"label": "rehearsal", "seed": 0, "concurrency": 8, "out": "/tmp/x",
                                   "cache_dir": ".cache", "latency_scale": 1.0, "questions": 180},
                                  "http://127.0.0.1:1/v1"))
    assert cfg.samples.main.per_type == 30 and cfg.samples.main.limit == 180 and cfg.samples.full.per_type == 10
    assert cfg.stage.name == "main" and cfg.model.base_url == "http://127.0.0.1:1/v1" and cfg.model.api_key_env is None
    assert sample_overrides(12) == ["samples.main.per_type=2", "samples.main.limit=12", "samples.full.per_type=1"]
