"""The offline smoke path with the real local model: a tool condition searches, records and judge follow.

A cut-down `make run STAGE=smoke` (one question, two conditions, the search returning 3 results rather than 8)
so the whole chain — local model, tool adapter, memory space, proxy, records, judge — is exercised in CI. The
local model reads about 40 prompt tokens a second on one thread, and the search's results are most of the prompt
of the answer's call (8 results: 1,220 tokens, 718 of them new to the server's cache).
"""

import json
import subprocess
import sys

import pytest


@pytest.mark.model
def test_local_smoke_run_searches_and_is_judged(tmp_path):
    res = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "samples.smoke.limit=1",
                          "stage.groups=[{sample:smoke,conditions:[tool_bm25,none]}]", "stage.conditions.tool_bm25.k=3",
                          f"runs_dir={tmp_path}/runs"],
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    stage = tmp_path / "runs" / "smoke" / "smoke"
    recs = {p.stem.split(".")[0]: json.loads(p.read_text()) for p in (stage / "records").glob("*.json")}
    assert set(recs) == {"tool_bm25", "none"} and all(r["status"] == "ok" for r in recs.values())
    tool = recs["tool_bm25"]
    assert tool["tool_calls"] >= 1 and tool["tools"][0]["name"] == "memory_search"
    assert tool["condition_config"]["k"] == 3  # the override reached the condition the run used
    assert tool["adapter"]["name"] == "json-schema-tool-adapter"
    assert tool["evidence"]["any"] is not None and tool["answer"]
    assert tool["endpoint"]["local"]["sha256"].startswith("cc324af0")
    judged = [json.loads(line) for line in (stage / "judgements" / "local.jsonl").read_text().splitlines()]
    assert {j["run_id"] for j in judged} == {r["run_id"] for r in recs.values()}
    assert all(j["status"] in ("ok", "unparsable") and j["label"] is not None for j in judged)
    assert "tool use" in res.stderr and "accuracy judged by local" in res.stderr
