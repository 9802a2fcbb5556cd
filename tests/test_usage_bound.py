"""Usage is bounded by what the model can take (harness.endpoints.usage.bound, issue 42): the context the
endpoint reports (vLLM's max_model_len in /v1/models, Ollama's loaded context) or the preset declares, else
the smaller of that and the request's own size plus its max_tokens. A count beyond it is flagged and estimated,
never billed."""

from __future__ import annotations

from harness.studies.agents import run as run_agents
from harness.endpoints.registry import listed_context
from harness.endpoints.usage import DEFAULT_OUTPUT, TEMPLATE_TOKENS, bound, request_text, usage_split
from harness.records.ledger import read_ledger
from harness.run.budget import Budget
from tests import endpoint_replies as R
from tests.fake_model import FakeModel
from tests.test_failures_midstage import _shared_cache, agents_cfg, recs  # noqa: F401 (fixture)

MSGS = [{"role": "user", "content": "what did I say about the garden?"}]


def test_the_bound_is_the_context_else_the_requests_own_size_plus_max_tokens():
    size = len(request_text(MSGS, None))
    assert bound(MSGS, None, None, 32768) == 32768
    assert bound(MSGS, None, 50, None) == size + TEMPLATE_TOKENS + 50
    assert bound(MSGS, None, None, None) == size + TEMPLATE_TOKENS + DEFAULT_OUTPUT
    lie = usage_split({"prompt_tokens": 2_000_000, "completion_tokens": 7}, MSGS, None, {"content": "ok"})
    assert lie["usage_estimated"] and lie["prompt"] < 100 and lie["output"] == 7
    assert any("beyond what the model can take (2,000,000" in f for f in lie["flags"])
    over = usage_split({"prompt_tokens": 12, "completion_tokens": 51}, MSGS, None, {"content": "ok"}, max_tokens=50)
    assert over["usage_estimated"] and over["prompt"] == 12  # 51 output tokens on max_tokens=50 is not a count
    fine = usage_split({"prompt_tokens": 12, "completion_tokens": 50}, MSGS, None, {"content": "ok"}, max_tokens=50)
    assert not fine["usage_estimated"] and not fine["flags"]


def test_the_bound_is_the_smaller_of_the_context_and_the_requests_own_size():
    """A count inside a listed context of 131,072 but 30 times what the request could be was billed as reported."""
    size = len(request_text(MSGS, None).encode())
    assert bound(MSGS, None, 50, 131072) == size + TEMPLATE_TOKENS + 50
    assert bound(MSGS, None, 50, 100) == 100
    assert bound(None, None, 50, 131072) == 131072  # no request to measure: the context alone
    lie = usage_split({"prompt_tokens": 100_000, "completion_tokens": 7}, MSGS, None, {"content": "ok"},
                      context=131072, max_tokens=50)
    assert lie["usage_estimated"] and lie["prompt"] < 100
    assert any("beyond what the model can take (100,000" in f for f in lie["flags"])


def test_a_server_listing_its_context_and_reporting_100000_prompt_tokens_on_small_requests_keeps_the_cap(tmp_path):
    """vLLM lists max_model_len=131072; a reported 100,000 prompt tokens on ~1,100 characters passed the cap 30x."""
    prices = [f"model.prices.{k}=300" for k in ("hit", "miss", "output")] + ["+model.params.max_tokens=50"]
    lie = lambda pt: {"prompt_tokens": 100_000, "completion_tokens": 7, "total_tokens": 100_007}  # noqa: E731
    cap = 5
    with FakeModel(max_model_len=131072, usage=lie) as fake:
        rd = run_agents(agents_cfg(tmp_path, fake, *prices, "model.model=fake", f"budget_usd={cap}", conds="none"))
    got = recs(rd)
    assert got and all(r["status"] == "ok" for r in got.values())
    calls = [c for r in got.values() for c in r["calls"]]
    assert calls and all(c["usage_estimated"] and c["prompt"] < 10_000
                         and any("beyond what the model can take (100,000" in f for f in c["flags"]) for c in calls)
    answered = [e for p in rd.ledger_paths() for e in read_ledger(p)
                if e.get("event") == "response" and e.get("status") == 200]
    assert answered and all(e["usage_estimated"] and e["prompt"] < 10_000 for e in answered)
    spent = sum((e["hit"] + e["miss"] + e["output"]) * 300 / 1e6 for e in answered)
    assert 0 < spent <= cap  # 100,000 tokens a call at $300 per 1M would be $30 each


def test_property_no_count_passes_the_requests_own_size_whatever_the_context():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None, derandomize=True)
    @given(text=st.text(max_size=400), max_tokens=st.one_of(st.none(), st.integers(1, 5000)),
           context=st.one_of(st.none(), st.integers(1, 1_000_000)), reported=st.integers(0, 2_000_000))
    def check(text, max_tokens, context, reported):
        msgs = [{"role": "user", "content": text}]
        own = len(request_text(msgs, None).encode()) + TEMPLATE_TOKENS + (max_tokens or context or DEFAULT_OUTPUT)
        limit = min(own, context) if context else own
        assert bound(msgs, None, max_tokens, context) == limit
        u = usage_split({"prompt_tokens": reported, "completion_tokens": 1}, msgs, None, {"content": "x"},
                        context=context, max_tokens=max_tokens)
        assert u["usage_estimated"] == (reported > limit)  # flagged exactly when beyond the bound, else kept
        if reported <= limit:
            assert u["prompt"] == reported and not u["flags"]

    check()


def test_a_server_reporting_two_million_prompt_tokens_neither_spends_the_cap_nor_stops_the_stage(tmp_path):
    """It made the preflight count $600 against a $5 cap, and the stage exited 4 on every rerun after."""
    prices = [f"model.prices.{k}=300" for k in ("hit", "miss", "output")] + ["+model.params.max_tokens=50"]
    lie = lambda pt: {"prompt_tokens": 2_000_000, "completion_tokens": 7, "total_tokens": 2_000_007}  # noqa: E731
    with FakeModel(usage=lie) as fake:
        rd = run_agents(agents_cfg(tmp_path, fake, *prices, "budget_usd=5"))
    got = recs(rd)
    assert len(got) == 4 and all(r["status"] == "ok" for r in got.values())
    assert all(c["usage_estimated"] and c["prompt"] < 10_000 for r in got.values() for c in r["calls"])
    answered = [e for e in read_ledger(rd.ledger_path) if e.get("event") == "response" and e.get("status") == 200]
    assert answered and all(e["usage_estimated"] and e["prompt"] < 10_000 for e in answered)
    spent = Budget(5, {"hit": 300, "miss": 300, "output": 300}, None, rd.ledger_paths).spent
    assert sum(r["cost_list"] for r in got.values()) <= spent + 1e-9 < 5  # the runs and the preflight's calls


def test_vllms_max_model_len_is_read_and_bounds_every_count(tmp_path, capsys):
    with FakeModel(max_model_len=4096, usage=lambda pt: {"prompt_tokens": 5000, "completion_tokens": 7}) as fake:
        assert listed_context(fake.base_url, "fake") == (4096, "/v1/models max_model_len")
        assert listed_context(fake.base_url, "other") == (None, None)
        rd = run_agents(agents_cfg(tmp_path, fake, "model.model=fake", conds="none"))
    assert "context  4,096 tokens (/v1/models max_model_len)" in capsys.readouterr().err
    calls = [c for r in recs(rd).values() for c in r["calls"]]
    assert calls and all(c["usage_estimated"] and any("5,000 > 4,096" in f for f in c["flags"]) for c in calls)


def test_ollamas_cut_is_caught_at_the_context_it_reports_once_the_model_is_loaded(tmp_path):
    """A real Ollama lists a model's context in /api/ps only once loaded, and /api/show names no num_ctx:
    prompts cut to 600 tokens recorded 0 of the full-context runs as context_length."""
    ctx = 600
    with FakeModel(usage=lambda pt: {**R.USAGE["ollama"], "prompt_tokens": min(pt, ctx)}, ollama_ctx=ctx,
                   ollama_lazy=True) as fake:
        rd = run_agents(agents_cfg(tmp_path, fake, "+model.truncates_silently=true", "model.model=fake",
                                   conds="none,full"))
    got = recs(rd)
    full = [r for r in got.values() if r["condition"] == "full"]
    assert len(full) == 2 and all(r["failure_reason"] == "context_length" and "600" in r["error"] for r in full)
    assert all(r["status"] == "ok" for r in got.values() if r["condition"] == "none")
