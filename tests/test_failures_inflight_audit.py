"""An outside audit of the in-flight claims of issue 33 (docs/failures.md): the breaks it found, one test
each, held on the scripted upstream (bench/fake_upstream.py) rather than on timing where it can be."""

from __future__ import annotations

import pytest

from bench.fake_upstream import is_preflight
from harness.endpoints.client import Agent, Meter, ModelCallFailed
from harness.endpoints.proxy import STREAMED, MeteringProxy
from harness.endpoints.usage import chars_count, request_text
from harness.records.ledger import Ledger, read_ledger
from harness.run.budget import Budget
from tests.fake_model import FakeModel, prompt_tokens

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
    """The server sends its whole 200 (usage and all: billed) a little after the attempt's deadline of 2 s: headers
    and half the body at 1.2 s, the rest at 2.4 s, so no read waits longer than the deadline. The proxy read
    all of it, then answered 504 and logged the call without its usage: a billed reply in no record, counted
    $0 by the cap, and paid again by the retry. A reply the proxy holds whole is the call's answer (the
    client waits twice the deadline for the proxy); a body still coming past the deadline is a timeout."""
    with FakeModel(schedule=["late"], hang_s=1.2) as fake:
        ledger = Ledger(tmp_path / "l.jsonl")
        meter = Meter(PRICES)
        with MeteringProxy(fake.base_url, ledger) as proxy:
            msg = _agent(proxy, meter, timeout_s=2.0).complete(MSGS)
        ledger.close()
        n_requests = len(fake.requests)
    assert msg.content == "I don't know."
    assert n_requests == 1  # answered once, not paid twice
    resp = [e for e in read_ledger(tmp_path / "l.jsonl") if e["event"] == "response"]
    pt = prompt_tokens(MSGS, None)
    assert [(e["status"], e["prompt"], e["output"]) for e in resp] == [(200, pt, 7)]
    assert [(c["prompt"], c["output"]) for c in meter.calls] == [(pt, 7)]
