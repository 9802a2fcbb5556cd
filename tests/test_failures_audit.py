"""Audit of issue 33's claims (docs/failures.md): failure modes the claims do not list, each on the tiny
stages of tests/test_failures_midstage.py against the scripted upstream (bench/fake_upstream.py)."""

from __future__ import annotations

import pytest

from bench.fake_upstream import is_preflight
from harness.studies.agents import run as run_agents
from harness.failures import STOPPED, exit_code
from harness.records.ledger import read_ledger
from harness.run.loop import normalise_calls
from tests.fake_model import FakeModel
from tests.test_failures_midstage import (  # noqa: F401 - _shared_cache: the same data and index cache
    _shared_cache, agents_cfg, ledger_matches_records, recs, stage_of, stopped)


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
    """Faults the claims do not list (held on audit): a reset after the headers, a body trickling past the
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
