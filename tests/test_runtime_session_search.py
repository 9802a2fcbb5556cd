"""The runtime's session_search as a harness tool: identical to the runtime, compact cut, errors, fan-out."""

from __future__ import annotations

import json
import os

import pytest

from harness.runtime import (
    SessionSearchTool, build_org_stores, build_store, compact_result, fts5_error, load_runtime,
    profile_search_supported, runtime_label, runtime_schema, runtime_version,
)
from harness.runtime.store import open_session_db
from tests.runtime_helpers import evidence_word, long_question, shared_stores, tiny_questions


@pytest.fixture(scope="module")
def data():
    return tiny_questions()


@pytest.fixture(scope="module")
def root():
    return shared_stores()


def _direct(path, **args):
    """What the runtime's own function returns, called directly on a freshly opened store."""
    rt = load_runtime()
    db = open_session_db(path)
    try:
        return rt.session_search(db=db, **args)
    finally:
        db.close()


def test_schema_is_the_runtimes_own():
    rt = load_runtime()
    schema = runtime_schema()
    own = rt.search_module.SESSION_SEARCH_SCHEMA
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "session_search"
    assert schema["function"]["description"] == own["description"]
    assert schema["function"]["parameters"] == own["parameters"]
    assert "profile" in schema["function"]["parameters"]["properties"]  # unmodified: even the fan-out argument


def test_tool_returns_exactly_what_the_runtime_returns(data, root):
    qs, sha = data
    for q in list(qs.values())[:6]:
        info = build_store(q, sha, root=root)
        word = evidence_word(q)
        calls = [
            {"query": word},
            {"query": q.question},  # verbatim question: usually an FTS5 error the runtime swallows
            {"query": f"{word} OR weather"},
            {"query": word, "sort": "newest", "limit": 5},
            {"query": word, "role_filter": "user"},
            {"query": '"' + word + '"'},
            {},  # browse
        ]
        with SessionSearchTool(info) as tool:
            hit = json.loads(tool(query=word).text)["results"][0]
            calls += [
                {"session_id": hit["session_id"], "around_message_id": hit["match_message_id"], "window": 2},
                {"session_id": hit["session_id"]},
                {"session_id": "s000000000000"},
            ]
            for args in calls:
                res = tool(**args)
                assert res.text == _direct(info.path, **args), args
                assert res.log["runtime"] == runtime_label()


def test_sessions_empty_and_error_are_reported(data, root):
    qs, sha = data
    q = next(q for q in qs.values() if not q.abstention)
    info = build_store(q, sha, root=root)
    with SessionSearchTool(info) as tool:
        res = tool(query=evidence_word(q))
        ids = [r["session_id"] for r in json.loads(res.text)["results"]]
        assert res.sessions == ids and set(ids) & q.evidence
        assert not res.empty and not res.error and res.retrieval_s > 0

        nothing = tool(query="xylophonequartz")
        assert nothing.empty and not nothing.error and nothing.sessions == []

        rt = load_runtime()
        for bad in ("what's my job", "where do I work?", "Who is my employer?", 'it"s', "a AND"):
            res = tool(query=bad)
            # whether FTS5 raises on the runtime's sanitised query, asked of SQLite directly: 0.19.0's
            # sanitiser left `?` and `'` (errors it swallowed as "No matching sessions found."); 0.21.5's drops them
            raised = _raises(info.path, rt.sanitize_fts5_query(bad))
            assert res.error == raised, bad
            assert ("fts5_error" in res.log) == raised
            if raised:
                assert res.empty and json.loads(res.text)["message"].startswith("No matching sessions found.")
        assert fts5_error(info.path, "plain words") is None


def _raises(path, sanitized: str) -> bool:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        con.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT 1", (sanitized,)).fetchall()
        return False
    except sqlite3.OperationalError:
        return bool(sanitized)
    finally:
        con.close()


def test_compact_cuts_to_match_and_neighbours(tmp_path):
    q = long_question(n_sessions=3, n_turns=16, chars=2500)
    info = build_store(q, "0" * 64, root=tmp_path)
    target = q.sessions_by_time()[1]
    word = "mk1x7"  # message 7 of 16 in session 1: bookends exist on both sides of the ±5 window
    with SessionSearchTool(info) as full, SessionSearchTool(info, compact=True) as compact:
        d = full(query=word)
        c = compact(query=word)
    dj, cj = json.loads(d.text), json.loads(c.text)
    assert [r["session_id"] for r in cj["results"]] == [r["session_id"] for r in dj["results"]] == [target.sid]
    assert c.sessions == d.sessions == [target.sid]
    full_r, r = dj["results"][0], cj["results"][0]
    assert full_r["bookend_start"] and full_r["bookend_end"]  # the runtime's default has bookends ...
    assert "bookend_start" not in r and "bookend_end" not in r  # ... the compact cut drops them
    anchor = r["match_message_id"]
    assert [m["id"] for m in r["messages"]] == [anchor - 1, anchor, anchor + 1]
    assert [m.get("anchor", False) for m in r["messages"]] == [False, True, False]
    assert all(len(m["content"]) <= 1000 for m in r["messages"])
    assert r["messages"][1]["content"].startswith(word)
    assert (r["messages_before"], r["messages_after"]) == (1, 1)
    # the session's first and last messages are not in the compact result
    first_last = {target.turns[0].content[:900], target.turns[-1].content[:900]}
    assert not any(m["content"][:900] in first_last for m in r["messages"])
    assert len(c.text) < len(d.text) / 4
    assert c.log["variant"] == "compact" and d.log["variant"] == "default"


def test_compact_at_the_edge_of_a_session_and_on_scroll(tmp_path):
    q = long_question(n_sessions=1, n_turns=6, chars=1500)
    info = build_store(q, "1" * 64, root=tmp_path)
    with SessionSearchTool(info, compact=True) as tool:
        first = json.loads(tool(query="mk0x0").text)["results"][0]
        assert [m.get("anchor", False) for m in first["messages"]] == [True, False]
        assert (first["messages_before"], first["messages_after"]) == (0, 1)
        scroll = json.loads(tool(session_id=q.sessions[0].sid, around_message_id=4, window=5).text)
        assert [m["id"] for m in scroll["messages"]] == [3, 4, 5]
        read = json.loads(tool(session_id=q.sessions[0].sid).text)
        assert len(read["messages"]) == 6 and all(len(m["content"]) <= 1000 for m in read["messages"])


def test_compact_passes_through_what_it_does_not_understand():
    for raw in ('{"error": "x", "success": false}', "not json", '{"success": true, "mode": "browse", "results": []}'):
        assert compact_result(raw) == raw


def test_fanout_reaches_the_public_agents_stores(data, root):
    qs, sha = data
    q = next(q for q in qs.values() if not q.abstention and len(q.evidence) >= 1)
    stores = build_org_stores(q, sha, "public", root=root)
    word = evidence_word(q)
    holder = next(a for a in ("a1", "a2", "a3") if set(stores[a].sessions) & q.evidence
                  and json.loads(_direct(stores[a].path, query=word))["results"])
    four = {a: stores[a] for a in ("a0", "a1", "a2", "a3")}
    with SessionSearchTool(four, home="a0") as tool:
        assert tool.fanout and tool.schema() == runtime_schema()
        res = tool(query=word, profile=holder)
        assert res.text == _direct(stores[holder].path, query=word)
        assert set(res.sessions) & q.evidence
        assert res.log["store"] == holder
        assert res.log["fanout_mode"] == "direct"  # each store opened as the runtime's own (deterministic links)
        none = tool(query="xylophonequartz", profile=holder)  # an empty result is counted on that store
        assert none.empty and not none.error and none.log["store"] == holder
        assert none.text == _direct(stores[holder].path, query="xylophonequartz")
        own = tool(query=word)  # no profile: a0's own store, which never holds evidence
        assert own.log["store"] == "a0" and not set(own.sessions) & q.evidence
        assert own.text == _direct(stores["a0"].path, query=word)
        for private in ("a4", "nobody"):
            denied = tool(query=word, profile=private)
            assert denied.error and denied.empty and denied.sessions == []
            assert "does not exist" in json.loads(denied.text)["error"]
        sid = next(iter(set(stores[holder].sessions) & q.evidence))
        read = tool(session_id=f"{holder}/{sid}")  # the runtime's '@session:<profile>/<id>' form
        assert read.sessions == [sid] and json.loads(read.text)["mode"] == "read"


def test_runtime_0_19_cannot_search_another_profile_by_name():
    """The quirk the fan-out works around (SPEC 3): recorded, and re-checked on every runtime."""
    if runtime_version() == "0.19.0":
        assert profile_search_supported() is False


def test_profile_mode_exposes_stores_to_the_runtime(data, root):
    """If a runtime can open profiles by name, the stores are exposed as profiles (checked with READ, which 0.19.0 supports)."""
    qs, sha = data
    q = next(q for q in qs.values() if not q.abstention)
    stores = build_org_stores(q, sha, "public", root=root)
    rt = load_runtime()
    four = {a: stores[a] for a in ("a0", "a1", "a2", "a3")}
    tool = SessionSearchTool(four, home="a0", fanout_mode="profile")
    try:
        agent = next(a for a in ("a1", "a2", "a3") if stores[a].sessions)
        sid = stores[agent].sessions[0]
        res = tool(session_id=sid, profile=agent)
        assert res.sessions == [sid] and res.log["fanout_mode"] == "profile" and res.log["store"] == agent
        names = list(tool._profile_dirs.values())
        assert names and all((rt.home / "profiles" / n / "state.db").exists() for n in names)
    finally:
        tool.close()
    assert not any((rt.home / "profiles" / n).exists() for n in names)


def test_profile_mode_finds_the_stores_after_the_processs_environment_was_reset(data, root, monkeypatch):
    """The runtime reads HERMES_HOME at call time: a command run in-process (tests/cli.py) restores its caller's
    environment, dropping the HERMES_HOME the first load set; the next load sets it again, so a profile opens the
    store it was given, not one of a default home."""
    qs, sha = data
    q = next(q for q in qs.values() if not q.abstention)
    stores = build_org_stores(q, sha, "public", root=root)
    rt = load_runtime()
    monkeypatch.delenv("HERMES_HOME")
    assert load_runtime() is rt and os.environ["HERMES_HOME"] == str(rt.home)
    tool = SessionSearchTool({a: stores[a] for a in ("a0", "a1", "a2", "a3")}, home="a0", fanout_mode="profile")
    try:
        agent = next(a for a in ("a1", "a2", "a3") if stores[a].sessions)
        sid = stores[agent].sessions[0]
        assert tool(session_id=sid, profile=agent).sessions == [sid]
    finally:
        tool.close()


def test_works_when_another_module_imported_the_runtime_first(data, root):
    """harness.memory reads a constant from hermes_state; the tool must still be the runtime's own."""
    import subprocess
    import sys
    from pathlib import Path

    qs, sha = data
    q = next(iter(qs.values()))
    info = build_store(q, sha, root=root)
    code = (
        "import json, sys, hermes_state\n"
        "from harness.runtime import SessionSearchTool, load_runtime\n"
        "rt = load_runtime()\n"
        "tool = SessionSearchTool(sys.argv[1])\n"
        "own = rt.search_module.SESSION_SEARCH_SCHEMA\n"
        "s = tool.schema()['function']\n"
        "assert s['description'] == own['description'] and s['parameters'] == own['parameters']\n"
        "res = tool(query=sys.argv[2])\n"
        "print(json.dumps([str(rt.early_home), res.sessions]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(info.path), evidence_word(q)], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1], env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    early, sessions = json.loads(out.stdout)
    assert early != "None" and set(sessions) & q.evidence


# ---------------------------------------------------------------- the conditions run the runtime's own tool

def _condition(module: str, tmp_path, q, sha, **node):
    """A condition's Access as the driver builds it (its typed Settings from the yaml's keys)."""
    import types

    import conditions
    from harness.run.settings import condition_node

    spec = types.SimpleNamespace(variant=node.pop("variant", None))
    ctx = types.SimpleNamespace(question=q, assignment=node.pop("assignment", None), agent=node.pop("agent", "a0"),
                                is_org=spec.variant is not None, spec=spec,
                                env=types.SimpleNamespace(plan=types.SimpleNamespace(data={"sha256": sha})))
    cfg = condition_node({"module": module, "access": "Your past conversations are stored.", **node})
    return conditions.load(module).build(cfg, ctx)


def _has_detail() -> bool:
    """The installed tool takes `detail` (0.21.5 does; 0.19.0 does not)."""
    return "detail" in runtime_schema()["function"]["parameters"]["properties"]


def _calls(q, info):
    """Argument sets a model sends: discovery (words, OR, phrase, sort, role, limit, detail), scroll, read, browse."""
    word = evidence_word(q)
    hit = json.loads(_direct(info.path, query=word))["results"][0]
    detail = [{"query": word, "detail": "full"}] if _has_detail() else []
    return [{"query": word}, {"query": f"{word} OR weather", "limit": 5}, {"query": f'"{word}"'},
            {"query": word, "sort": "oldest"}, {"query": word, "role_filter": "user"},
            *detail, {"query": q.question}, {"query": "xylophonequartz"},
            {"query": f"{word} xylophonequartz"},  # an empty multi-word search (0.21.5 retries it as OR)
            {"session_id": hit["session_id"], "around_message_id": hit["match_message_id"], "window": 3},
            {"session_id": hit["session_id"]}, {"session_id": "s000000000000"}, {}]


def test_the_session_search_conditions_return_the_runtimes_own_output(data, monkeypatch, tmp_path):
    """session_search and session_search_compact, built as the driver builds them: every call's text is a
    direct call of the installed runtime's session_search on the same store (compact: that text through
    compact_result), its schema the runtime's registry's, its log naming the installed runtime."""
    monkeypatch.setenv("MEMSPACE_STORE_CACHE", str(tmp_path))
    qs, sha = data
    for q in [q for q in qs.values() if not q.abstention][:3]:
        default = _condition("session_search", tmp_path, q, sha, compact=False)
        compact = _condition("session_search", tmp_path, q, sha, compact=True)
        try:
            (d,), (c,) = default.tools, compact.tools
            assert d.schema() == c.schema() == runtime_schema()
            assert d.paths["a0"] == c.paths["a0"] and d.paths["a0"].parts[-5] == runtime_label().replace("==", "-")
            for args in _calls(q, _info(d)):
                own = _direct(d.paths["a0"], **args)
                assert d(**args).text == own, args
                assert c(**args).text == compact_result(own, load_runtime().shape), args
            assert default.notes["runtime"] == compact.notes["runtime"] == runtime_label()
        finally:
            for close in default.close + compact.close:
                close()


def _info(tool):
    import types

    return types.SimpleNamespace(path=tool.paths[tool.home])


def test_the_fanout_condition_searches_each_agents_store_with_the_runtime(data, monkeypatch, tmp_path):
    """fan-out over a0-a3: a call naming an agent equals the runtime's own call on that agent's store."""
    monkeypatch.setenv("MEMSPACE_STORE_CACHE", str(tmp_path))
    qs, sha = data
    checked = 0
    for q in [q for q in qs.values() if not q.abstention][:4]:
        access = _condition("fanout", tmp_path, q, sha, agents=["a0", "a1", "a2", "a3"], variant="public")
        try:
            (tool,) = access.tools
            assert set(tool.paths) == {"a0", "a1", "a2", "a3"} and access.notes["fanout_mode"] == "direct"
            word = evidence_word(q)
            for agent in ("a0", "a1", "a2", "a3"):
                for args in ({"query": word}, {"query": f"{word} OR the", "limit": 4}, {}):
                    res = tool(**args, **({} if agent == "a0" else {"profile": agent}))
                    assert res.text == _direct(tool.paths[agent], **args), (agent, args)
                    assert res.log["store"] == agent and res.log["runtime"] == runtime_label()
                    checked += 1
        finally:
            for close in access.close:
                close()
    assert checked == 4 * 4 * 3


def _long_store(tmp_path):
    """One session whose 4th message is 6,000 characters (the issue's read case), others short and long."""
    from datetime import datetime

    from harness.data.longmemeval import Question, Session, Turn

    lengths = [40, 1500, 300, 6000, 2500, 80, 4500, 1200, 60, 3000]
    turns = tuple(Turn("user" if k % 2 == 0 else "assistant",
                       (f"mark{k} heron " + ("lorem ipsum dolor " * 400))[:n]) for k, n in enumerate(lengths))
    other = tuple(Turn("user" if k % 2 == 0 else "assistant", f"heron note {k} " + "x" * (200 * k)) for k in range(6))
    s1 = Session("s0000000000a1", datetime(2023, 5, 1, 10), turns)
    s2 = Session("s0000000000b2", datetime(2023, 6, 1, 10), other)
    q = Question(qid="glong6k", qtype="single-session-user", question="?", answer="x", date=datetime(2023, 7, 1),
                 sessions=(s1, s2), evidence=frozenset({s1.sid}))
    return q, build_store(q, "6" * 64, root=tmp_path)


def test_read_and_scroll_of_a_long_message_are_the_runtimes(tmp_path):
    """A 6,000-character message: read returns it cut as the runtime's read cuts it (0.21.5: 2,000 + '…',
    flagged with its original length), scroll and discovery as theirs do; the tool's text is the runtime's."""
    q, info = _long_store(tmp_path)
    rt = load_runtime()
    sid = q.sessions[0].sid
    ids = [m["id"] for m in json.loads(_direct(info.path, session_id=sid))["messages"]]
    with SessionSearchTool(info) as tool, SessionSearchTool(info, compact=True) as compact:
        read = tool(session_id=sid)
        assert read.text == _direct(info.path, session_id=sid)
        long = json.loads(read.text)["messages"][3]
        cap = getattr(rt.search_module, "_READ_MAX_CONTENT", None)
        if cap is not None:  # 0.21.5
            assert cap == 2000 and long["content"] == q.sessions[0].turns[3].content[:2000] + "…"
            assert long["content_truncated"] is True and long["original_content_chars"] == 6000
        scroll_args = {"session_id": sid, "around_message_id": ids[3], "window": 5}
        scroll = tool(**scroll_args)
        assert scroll.text == _direct(info.path, **scroll_args)
        disc = json.loads(tool(query="mark3").text)["results"][0]
        shown = disc["messages"][[m["id"] for m in disc["messages"]].index(ids[3])]["content"]
        if rt.shape == "top_session_window":  # 0.21.5: discovery's window cap (4,000)
            assert shown == q.sessions[0].turns[3].content[:4000] + "…"
        # compact: the same runtime output, every kept message at most 1,000 characters ('…' included)
        for args in ({"session_id": sid}, scroll_args, {"query": "mark3"}):
            out = json.loads(compact(**args).text)
            msgs = out.get("messages") or [m for r in out.get("results", []) for m in r["messages"]]
            assert msgs and all(len(m["content"]) <= 1000 for m in msgs)


def _check_compact(raw: str, cut: str) -> None:
    """The paper's cut, checked against the runtime's own output: match + one neighbour each side (what
    the runtime returned of them), each <= 1,000 characters, no bookends; everything else the runtime's."""
    full, short = json.loads(raw), json.loads(cut)
    if full.get("mode") != "discover" or not full.get("results"):
        assert cut == raw if full.get("mode") not in ("scroll", "read") else True
        return
    assert {k: v for k, v in short.items() if k != "results"} == {k: v for k, v in full.items() if k != "results"}
    assert "link_hint" not in full or short["link_hint"] == full["link_hint"]
    for r, c in zip(full["results"], short["results"], strict=True):
        assert "bookend_start" not in c and "bookend_end" not in c
        ids = [m["id"] for m in r["messages"]]
        at = ids.index(r["match_message_id"])
        keep = ids[max(0, at - 1):at + 2]
        assert [m["id"] for m in c["messages"]] == keep
        assert (c["messages_before"], c["messages_after"]) == (keep.index(ids[at]), len(keep) - keep.index(ids[at]) - 1)
        for m in c["messages"]:
            orig = r["messages"][ids.index(m["id"])]
            if len(orig["content"]) <= 1000:
                assert m["content"] == orig["content"]
            else:
                assert m["content"] == orig["content"][:999] + "…"
                # flagged as the runtime flags its own cuts, in the shapes whose runtime does (0.21.5)
                assert m.get("content_truncated") is (True if load_runtime().shape != "sessions_expanded" else None)
        same = {k: v for k, v in r.items() if k not in ("bookend_start", "bookend_end", "messages",
                                                         "messages_before", "messages_after")}
        assert {k: c[k] for k in same} == same
        if r.get("detail") == "compact":  # 0.21.5's lower-ranked result: its matching message alone, kept alone
            assert len(c["messages"]) == 1


def test_compact_cut_rules_on_the_runtimes_result(tmp_path):
    q, info = _long_store(tmp_path)
    with SessionSearchTool(info, compact=True) as tool:
        for query in ("heron", "mark3", "mark0", "mark9", "heron OR mark4", "note"):
            for detail in (("adaptive", "full") if _has_detail() else (None,)):
                args = {"query": query, **({"detail": detail} if detail else {})}
                _check_compact(_direct(info.path, **args), tool(**args).text)
        out = json.loads(tool(query="heron").text)
        if _has_detail():  # 0.21.5: the top session full, the other its matching message alone
            assert [r["detail"] for r in out["results"]] == ["full", "compact"] and "link_hint" in out


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(["heron", "note", "mark1", "mark3", "mark4", "mark6", "lorem", "ipsum", "x",
                                       "zzzq", "OR", "dolor", "mark9", "1", "2"]), min_size=1, max_size=4),
       limit=st.integers(1, 10), detail=st.sampled_from(["adaptive", "full"]),
       sort=st.sampled_from([None, "newest", "oldest"]))
def test_compact_cut_holds_for_generated_searches(tmp_path_factory, words, limit, detail, sort):
    """Generated searches over a store with long messages: the compact tool's text is compact_result of the
    runtime's own, and the cut's rules hold on it."""
    global _GEN
    if _GEN is None:
        _GEN = _long_store(tmp_path_factory.mktemp("gen"))[1]
    args = {"query": " ".join(words), "limit": limit, **({"detail": detail} if _has_detail() else {}),
            **({"sort": sort} if sort else {})}
    own = _direct(_GEN.path, **args)
    with SessionSearchTool(_GEN, compact=True) as tool:
        res = tool(**args)
    assert res.text == compact_result(own, load_runtime().shape)
    _check_compact(own, res.text)


_GEN = None


def test_a_stage_records_the_runtime_that_ran_its_searches(tmp_path):
    """A stage on a scripted upstream: every record of the session-search conditions names the installed
    runtime (distribution==version), its shape and tool module in its notes and every call's log;
    stage.json's versions and runtime row name it; the stores it searched are that runtime's."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from harness.runtime import runtime_facts, tool_sha256
    from tests.fake_model import FakeModel

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DEEPSEEK_API_KEY": "sk-test", "MEMSPACE_STORE_CACHE": str(tmp_path / "stores")}
    with FakeModel() as fake:
        env["DEEPSEEK_BASE_URL"] = fake.base_url
        res = subprocess.run([sys.executable, "-m", "harness.run", "stage=main", "model=deepseek", "judge=deepseek",
                              "data=synth_tiny", f"runs_dir={tmp_path}/runs", "samples.smoke.limit=2",
                              "stage.groups=[{sample:smoke,conditions:[session_search,session_search_compact]}]",
                              "judge.prompts=builtin", "concurrency=2"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    facts = runtime_facts()
    folder = tmp_path / "runs" / "main" / "main"
    recs = [json.loads(p.read_text()) for p in (folder / "records").glob("*.json")]
    assert sorted(r["condition"] for r in recs) == ["session_search"] * 2 + ["session_search_compact"] * 2
    for r in recs:
        n = r["condition_notes"]
        assert (n["runtime"], n["session_search_shape"], n["session_search_tool_sha256"]) == \
            (facts["label"], facts["session_search_shape"], tool_sha256())
        assert all(t["log"]["runtime"] == facts["label"] for t in r["tools"])
    assert any(r["tools"] for r in recs)  # the scripted model searched
    stage = json.loads((folder / "stage.json").read_text())
    assert stage["versions"][facts["package"]] == facts["version"]
    row = next(x for x in stage["fidelity"]["rows"] if x["key"] == "runtime")
    assert facts["label"] in row["stage"] and row["status"] == ("same" if facts["matches_paper"] else "differs")
    written = {json.loads(p.read_text())["runtime"] for p in (tmp_path / "stores").rglob("a0.json")}
    assert written == {facts["label"]}
