"""LongMemEval-Org end to end: every sharing condition through the driver, then the exposure audit.

A scripted model searches with the question (or asks a1 first, under ask_agent),
so which units reach each context is decided by the views alone: no unit of the
private agents a4/a5 may appear under shared, isolated or ask_agent, and they
must appear without the view. The analysis replays every logged call.
"""

import csv
import json
import sys
from pathlib import Path

import pytest

from tests import cli
from tests.fake_model import FakeModel

PRIVATE = {"a4", "a5"}


def policy(req):
    names = [t["function"]["name"] for t in req.get("tools") or []]
    msgs = req["messages"]
    question = next(m["content"] for m in msgs if m["role"] == "user")
    done = any(m["role"] == "tool" for m in msgs)
    if req.get("tool_choice") == "none" or not names or done:
        return {"role": "assistant", "content": "Here is what I found."}
    if "ask_agent" in names:
        name, args = "ask_agent", {"agent": "a1", "question": question}
    elif "memory_search" in names:
        name, args = "memory_search", {"query": question}
    else:
        name, args = names[0], {"query": " ".join(w.strip("?'.,") for w in question.split()[-3:])}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"c{len(msgs)}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}


@pytest.fixture(scope="module")
def org_stage(tmp_path_factory):
    root = tmp_path_factory.mktemp("org")
    with FakeModel(script=policy) as fake:
        res = cli.run([sys.executable, "-m", "harness.run", "stage=smoke_org", "model=vllm",
                              f"model.base_url={fake.base_url}", "stage.judge_after_run=false",
                              f"runs_dir={root}/runs", "concurrency=4"],
                             capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return root / "runs" / "smoke_org" / "smoke_org"


def records(stage: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((stage / "records").glob("*.json"))]


def owners(rec: dict) -> list[str]:
    return [owner for t in rec["tools"] for _, owner in (t.get("log") or {}).get("units", [])]


def test_every_org_condition_runs_and_the_views_hold(org_stage):
    recs = records(org_stage)
    assert len(recs) == 26 and all(r["status"] == "ok" for r in recs), [r["error"] for r in recs if r["error"]]
    by = {}
    for r in recs:
        by.setdefault(r["condition"], []).append(r)
    for cond in ("shared", "isolated", "ask_agent", "kernel"):
        seen = [o for r in by[cond] for o in owners(r) + prefetched(r)]
        assert seen, f"{cond} retrieved nothing"
        assert not PRIVATE & set(seen), f"{cond} exposed a private agent's unit"
    assert set(o for r in by["isolated"] for o in owners(r)) == {"a0"}
    assert set(o for r in by["shared"] for o in owners(r)) <= {"a0", "a1", "a2", "a3"}
    private_nv = [r for r in by["no_view"] + by["no_view_policy"] if r["variant"] == "private"]
    assert any(PRIVATE & set(owners(r)) for r in private_nv), "without the view private units come back"


def prefetched(rec: dict) -> list[str]:
    return [owner for entry in rec.get("prefetch") or [] for _, owner in entry.get("units", [])]


def test_kernel_injects_visible_memories_and_offers_no_tool(org_stage):
    for r in (r for r in records(org_stage) if r["condition"] == "kernel"):
        assert r["tool_calls"] == 0 and r["prefetch"][0]["view"]["scope"] == "shared"
        assert r["condition_notes"]["barrier"]["timed_out"] is False
        assert not PRIVATE & set(prefetched(r))


def test_ask_agent_runs_the_asked_agents_own_loop_under_the_asking_run(org_stage):
    for r in (r for r in records(org_stage) if r["condition"] == "ask_agent"):
        roles = [c["role"] for c in r["calls"]]
        assert "asked:a1" in roles and roles[0] == "agent"
        asked = [t for t in r["tools"] if (t.get("log") or {}).get("agent") == "a1"
                 and t["log"]["kind"] in ("search", "read")]
        assert asked and all(o == "a1" for t in asked for _, o in t["log"]["units"]), "a1 reads only its own units"
        assert r["model_calls"] == len(r["calls"]) > r["agent_calls"]


def test_fanout_opens_the_four_stores_directly_and_says_so(org_stage):
    for r in (r for r in records(org_stage) if r["condition"] == "fanout"):
        assert r["condition_notes"]["fanout_mode"] == "direct"
        assert set(r["condition_notes"]["stores"]) == {"a0", "a1", "a2", "a3"}
        assert r["tools"] and r["tools"][0]["name"] == "session_search"


def test_org_prompt_paragraph_and_policy_instruction(org_stage):
    recs = records(org_stage)
    assert all(r["variant"] in ("public", "private") for r in recs)
    policy_runs = [r for r in recs if r["condition"] == "no_view_policy"]
    assert policy_runs and all(r["variant"] == "private" for r in policy_runs)


def test_exposure_replay_matches_and_counts_private_units(org_stage, tmp_path):
    out = tmp_path / "results"
    res = cli.run([sys.executable, "-m", "analysis.run", f"runs={org_stage}", f"out={out}", "replay=org",
                          "resamples=200"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "table4.csv")))
    assert rows, "table 4 is empty"
    logged = {}
    for r in records(org_stage):
        n = sum(o in PRIVATE for o in owners(r))
        logged[(r["condition"], r["variant"])] = logged.get((r["condition"], r["variant"]), 0) + n
    assert {r["condition"] for r in rows if r["replayed"] == "True"} >= {"shared", "isolated", "ask_agent", "no_view"}
    assert all(r["replayed"] == "False" for r in rows if r["condition"] == "fanout"), "fan-out is not replayed"
    for row in (r for r in rows if r["replayed"] == "True"):
        cond, variant = row["condition"], row["variant"]
        assert int(row["calls_mismatched"]) == 0 and int(row["calls_failed"]) == 0, row
        if cond in ("shared", "isolated", "ask_agent"):
            assert int(row["private_units"]) == 0, row
        if (cond, variant) in logged:
            assert int(row["private_units"]) == logged[(cond, variant)], row
    assert any(int(r["private_units"]) > 0 for r in rows if r["condition"].startswith("no_view"))
    assert not (out / "replay_mismatches.csv").read_text().strip().splitlines()[1:], "no replay mismatch"
