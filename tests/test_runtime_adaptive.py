"""0.21.5's adaptive session search (runtime.session_search=adaptive), checked against its rules.

Every expected value below is written by hand from the rules of harness/runtime/adaptive.py's
docstring (0.21.5's tools/session_search_tool.py), on a store generated here with the
installed runtime's own storage code: which sessions come back and in which order, which one
is `full`, which message ids its window and bookends hold, where each message is cut (4,000
characters in the window, 1,200 in the bookends, + "…") and how the cut is flagged. Message ids
are read from the store with plain SQL; the orders follow from BM25 by construction (one word
repeated more often in a message of the same length ranks higher; a longer message lower).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from harness.runtime import SessionSearchTool, load_runtime
from harness.runtime import adaptive as A
from tests.runtime_helpers import imported_store, message_ids
from tests.test_hub import fake_raw  # noqa: F401  (the raw-file stand-in fixture)

DAY = 86400.0
T0 = 1_680_000_000.0  # 2023-03-28 UTC


def filler(tag: str, n: int) -> str:
    """n characters of words that match no query of these tests (hex words; `tag` keeps them distinct)."""
    words, i = [], 0
    while sum(len(w) + 1 for w in words) < n + 10:
        words.append("w" + hashlib.sha256(f"{tag}:{i}".encode()).hexdigest()[:9])
        i += 1
    return " ".join(words)[:n]


def text(head: str, n: int, tag: str) -> str:
    """A message of exactly n characters starting with `head`."""
    return (head + " " + filler(tag, n))[:n]


def session(sid, day, contents, source="cli", title=None, parent=None):
    start = T0 + day * DAY
    out = {"id": sid, "source": source, "started_at": start, "ended_at": start + len(contents),
           "messages": [{"role": "user" if k % 2 == 0 else "assistant", "content": c, "timestamp": start + k}
                        for k, c in enumerate(contents)]}
    if title:
        out["title"] = title
    if parent:
        out["parent_session_id"] = parent
    return out


def top_session() -> list[str]:
    """20 messages; the match ("heron") at index 10, the window 5..15, bookends 0,1,(2) and (16),17,18,19."""
    c = [text(f"top{k}", 300, f"top{k}") for k in range(20)]
    c[0] = text("opening", 2000, "b0")  # bookend, cut at 1,200
    c[1] = text("second", 1200, "b1")  # bookend, exactly 1,200: not cut
    c[2] = "[CONTEXT COMPACTION] summary of earlier turns " + filler("cc", 200)  # dropped
    c[5] = text("five", 4000, "m5")  # window, exactly 4,000: not cut
    c[6] = text("six", 4001, "m6")  # window, cut
    c[10] = text("heron", 6000, "m10")  # the match, cut
    c[17] = text("seventeen", 1201, "b17")  # bookend, cut
    c[19] = "   [CONTEXT SUMMARY]: handoff " + filler("cs", 100)  # dropped (leading spaces too)
    return c


def sessions() -> list[dict]:
    out = [session("s_top", 0, top_session())]
    # a lineage: root <- child <- grand; "egret" in child and grand, the grand's message ranks higher
    out.append(session("s_root", 1, ["root opening " + filler("r0", 50), "root reply " + filler("r1", 50)]))
    out.append(session("s_child", 2, ["egret marsh wader", "child reply"], parent="s_root"))
    out.append(session("s_grand", 3, ["egret egret marsh", "grand reply"], parent="s_child"))
    out.append(session("s_egret_long", 4, ["egret " + filler("el", 400), "long reply"]))
    # automation and hidden sources, each with the words they would win on
    out.append(session("s_cron", 5, ["cron start kite kite kite", text("heron heron heron", 4500, "cr"), "cron end"],
                       source="cron"))
    out.append(session("s_cron2", 6, ["kite " + filler("c2", 60), "cron2 reply"], source="cron"))
    out.append(session("s_kite_long", 7, ["kite " + filler("kl", 300), "reply"]))
    for src in ("subagent", "tool", "kanban"):
        out.append(session(f"s_{src}", 8, [f"heron egret ibis kite {src}", "reply"], source=src,
                           title="Hidden Work" if src == "subagent" else None))
    # twelve sessions for the limit: "ibis" in a message that grows with k (rank order p00..p11); p11 the oldest
    for k in range(12):
        out.append(session(f"s_p{k:02d}", 40 - k, [("ibis " + filler(f"p{k}", 12 * k)).strip(), f"reply {k}"]))
    # a titled session; its messages hold no query word, one is long (a title match is not cut)
    titled = [text(f"tt{k}", 200, f"tt{k}") for k in range(8)]
    titled[1] = text("tlong", 5000, "tl")
    out.append(session("s_titled", 50, titled, title="Garden Plans"))
    out.append(session("s_garden", 51, ["our garden plans for spring", "reply"]))
    return out


@pytest.fixture(scope="module")
def store() -> Path:
    return imported_store("adaptive", sessions())


@pytest.fixture(scope="module")
def ids(store) -> dict[str, list[int]]:
    return message_ids(store)


@pytest.fixture(scope="module")
def tool(store):
    t = SessionSearchTool(store, search="adaptive")
    yield t
    t.close()


def call(tool, **args) -> dict:
    return json.loads(tool(**args).text)


def contents(store, mids) -> dict[int, str]:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        q = ",".join("?" * len(mids))
        return dict(con.execute(f"SELECT id, content FROM messages WHERE id IN ({q})", list(mids)).fetchall())
    finally:
        con.close()


# ---------------------------------------------------------------- discovery


def test_top_session_full_window_cut_at_4000_bookends_at_1200_summaries_dropped(tool, store, ids):
    out = call(tool, query="heron")
    assert out["success"] is True and out["mode"] == "discover" and out["detail"] == "adaptive"
    # subagent/tool/kanban hidden; the cron session matches 3x in a shorter message but ranks below
    assert [r["session_id"] for r in out["results"]] == ["s_top", "s_cron"]
    assert out["count"] == 2 and out["sessions_searched"] == 2
    top, cron = out["results"]
    m = ids["s_top"]
    assert top["detail"] == "full" and top["match_message_id"] == m[10] and top["matched_role"] == "user"
    assert [x["id"] for x in top["messages"]] == m[5:16]
    assert (top["messages_before"], top["messages_after"]) == (5, 5)
    assert [x["id"] for x in top["messages"] if x.get("anchor")] == [m[10]]
    raw = contents(store, m)
    by_id = {x["id"]: x for x in top["messages"]}
    for k in range(5, 16):
        x = by_id[m[k]]
        if k in (6, 10):  # 4,001 and 6,000 characters: cut to 4,000 + "…", flagged with the original length
            assert x["content"] == raw[m[k]][:4000] + "…" and len(x["content"]) == 4001
            assert x["content_truncated"] is True and x["original_content_chars"] == (4001 if k == 6 else 6000)
        else:  # 4,000 or 300 characters: as stored, no flag
            assert x["content"] == raw[m[k]] and "content_truncated" not in x and "original_content_chars" not in x
    # bookends: 0 and 1 (2 is a compaction summary); 17 and 18 (16 is not among the last three, 19 a summary)
    assert [x["id"] for x in top["bookend_start"]] == [m[0], m[1]]
    assert [x["id"] for x in top["bookend_end"]] == [m[17], m[18]]
    b0, b1 = top["bookend_start"]
    assert b0["content"] == raw[m[0]][:1200] + "…" and b0["original_content_chars"] == 2000 and b0["content_truncated"]
    assert b1["content"] == raw[m[1]] and "content_truncated" not in b1
    b17, b18 = top["bookend_end"]
    assert b17["content"] == raw[m[17]][:1200] + "…" and b17["original_content_chars"] == 1201
    assert b18["content"] == raw[m[18]] and "content_truncated" not in b18
    # the other session: compact, the matching message alone (cut at 4,000), no bookends, the window's counts
    c = ids["s_cron"]
    assert cron["detail"] == "compact" and cron["source"] == "cron" and cron["match_message_id"] == c[1]
    assert cron["bookend_start"] == [] and cron["bookend_end"] == []
    assert [x["id"] for x in cron["messages"]] == [c[1]] and cron["messages"][0]["anchor"] is True
    craw = contents(store, [c[1]])[c[1]]
    assert cron["messages"][0]["content"] == craw[:4000] + "…" and cron["messages"][0]["original_content_chars"] == 4500
    assert (cron["messages_before"], cron["messages_after"]) == (1, 1)
    assert "parent_session_id" not in top and "parent_session_id" not in cron
    assert (top["link"], cron["link"]) == ("@session:default/s_top", "@session:default/s_cron")


def test_full_detail_hydrates_every_session(tool, ids):
    out = call(tool, query="heron", detail="FULL")
    assert out["detail"] == "full" and [r["detail"] for r in out["results"]] == ["full", "full"]
    cron = out["results"][1]
    c = ids["s_cron"]
    assert [x["id"] for x in cron["messages"]] == c  # ±5 around index 1 of 3 messages: all of them
    assert cron["bookend_start"] == [] and cron["bookend_end"] == []  # nothing outside the window
    assert call(tool, query="heron", detail="bogus")["detail"] == "adaptive"


def test_lineage_root_dedup_keeps_the_best_row_and_names_the_root(tool, ids):
    out = call(tool, query="egret")
    # grand (tf 2) and child (tf 1) share the root s_root: one result, the grand's row; then the long one
    assert [r["session_id"] for r in out["results"]] == ["s_grand", "s_egret_long"]
    grand, other = out["results"]
    assert grand["parent_session_id"] == "s_root" and grand["match_message_id"] == ids["s_grand"][0]
    assert grand["detail"] == "full" and other["detail"] == "compact" and "parent_session_id" not in other
    assert out["sessions_searched"] == 2


def test_cron_ranked_below_interactive_keeping_its_own_order(tool):
    out = call(tool, query="kite")
    # by BM25: s_cron (3x, short), s_cron2, then the long interactive message; cron moved below, stable
    assert [r["session_id"] for r in out["results"]] == ["s_kite_long", "s_cron", "s_cron2"]
    assert [r["detail"] for r in out["results"]] == ["full", "compact", "compact"]


@pytest.mark.parametrize("limit, expect", [(None, 3), (1, 1), (5, 5), (10, 10), (20, 10), (0, 1), (-4, 1),
                                           ("7", 7), ("many", 3)])
def test_limit_default_3_clamped_1_to_10(tool, limit, expect):
    args = {"query": "ibis"} if limit is None else {"query": "ibis", "limit": limit}
    out = call(tool, **args)
    assert [r["session_id"] for r in out["results"]] == [f"s_p{k:02d}" for k in range(expect)]
    assert [r["detail"] for r in out["results"]] == ["full"] + ["compact"] * (expect - 1)
    assert out["sessions_searched"] == expect


def test_sort_orders_by_message_time(tool):
    assert [r["session_id"] for r in call(tool, query="ibis", sort="oldest")["results"]] == ["s_p11", "s_p10", "s_p09"]
    assert [r["session_id"] for r in call(tool, query="ibis", sort="Newest")["results"]] == ["s_p00", "s_p01", "s_p02"]


def test_title_match_first_takes_the_full_slot_uncut(tool, store, ids):
    out = call(tool, query='"Garden Plans"')
    assert [r["session_id"] for r in out["results"]] == ["s_titled", "s_garden"]
    t, g = out["results"]
    m = ids["s_titled"]
    assert t["matched_role"] == "session_title" and t["detail"] == "full" and t["title"] == "Garden Plans"
    assert t["snippet"] == "Session title matched: Garden Plans" and t["match_message_id"] == m[0]
    assert [x["id"] for x in t["messages"]] == m[0:6] and t["messages"][0]["anchor"] is True
    assert (t["messages_before"], t["messages_after"]) == (0, 5)
    # nothing precedes the window: the first three messages stand in; the end is the store's last three after it
    assert [x["id"] for x in t["bookend_start"]] == m[0:3]
    assert [x["id"] for x in t["bookend_end"]] == m[6:8]
    long = t["messages"][1]
    assert len(long["content"]) == 5000 and "content_truncated" not in long
    # the FTS hit comes second and is compact although it is the first FTS session
    assert g["detail"] == "compact" and g["bookend_start"] == [] and len(g["messages"]) == 1
    assert out["sessions_searched"] == 2 and out["count"] == 2


def test_hidden_title_and_hidden_rows_find_nothing(tool):
    out = call(tool, query="Hidden Work")
    assert out == {"success": True, "mode": "discover", "query": "Hidden Work", "detail": "adaptive", "results": [],
                   "count": 0, "message": "No matching sessions found."}
    r = tool(query="Hidden Work")
    assert r.empty and not r.error and r.sessions == []


def test_scope_is_checked_and_the_other_shapes_are_the_runtimes(tool, ids):
    assert call(tool, query="heron", scope="all")["results"][0]["session_id"] == "s_top"
    bad = call(tool, query="heron", scope="team")
    assert bad["success"] is False and "scope" in bad["error"]
    scroll = call(tool, session_id="s_top", around_message_id=ids["s_top"][10], window=2)
    assert scroll["mode"] == "scroll" and [x["id"] for x in scroll["messages"]] == ids["s_top"][8:13]
    assert call(tool, session_id="s_child")["mode"] == "read"
    assert call(tool)["mode"] == "browse"


def test_the_tool_result_logs_the_emulation_and_names_the_sessions(tool):
    r = tool(query="heron")
    assert r.sessions == ["s_top", "s_cron"] and r.log["hydrated"] == ["s_top"]
    assert r.log["session_search"] == "adaptive" and r.log["emulates"] == "0.21.5"
    assert r.log["session_search_shape"] == "top_session_window" and r.log["runtime"].startswith("hermes-agent==")


def test_compact_cut_over_the_adaptive_result(store, ids):
    with SessionSearchTool(store, search="adaptive", compact=True) as t:
        out = json.loads(t(query="heron").text)
    top, cron = out["results"]
    m = ids["s_top"]
    assert [x["id"] for x in top["messages"]] == m[9:12] and "bookend_start" not in top
    assert all(len(x["content"]) <= 1000 for x in top["messages"])
    anchor = top["messages"][1]
    assert anchor["original_content_chars"] == 6000 and anchor["content_truncated"] is True
    assert [x["id"] for x in cron["messages"]] == [ids["s_cron"][1]]


def test_installed_search_stays_selectable_and_differs(store):
    with SessionSearchTool(store) as t:
        assert t.search == "installed" and not t.emulated
        out = json.loads(t(query="heron").text)
    if t.shape == "sessions_expanded":  # 0.19.0: every session expanded, no cap, no detail
        assert "detail" not in out and all("detail" not in r for r in out["results"])
        # 0.19.0 hides subagent and tool only: the kanban session (short, so first by BM25) comes back
        assert [r["session_id"] for r in out["results"]] == ["s_kanban", "s_top", "s_cron"]
        assert max(len(x["content"]) for x in out["results"][1]["messages"]) == 6000  # uncut
        assert all(r["bookend_start"] or r["bookend_end"] or len(r["messages"]) > 1 for r in out["results"])
    with pytest.raises(ValueError, match="runtime.session_search"):
        A.facts("fancy")


def test_fanout_under_adaptive_opens_each_store(store, tmp_path):
    other = tmp_path / "a1.db"
    db = load_runtime().SessionDB(db_path=other)
    db.import_sessions([session("s_other", 0, ["heron in another store", "reply"])])
    db.close()
    with SessionSearchTool({"a0": store, "a1": other}, home="a0", search="adaptive") as t:
        assert t.fanout_mode == "direct"
        r = t(query="heron", profile="a1")
    assert r.sessions == ["s_other"] and r.log["store"] == "a1" and json.loads(r.text)["detail"] == "adaptive"
    assert json.loads(r.text)["results"][0]["link"] == "@session:a1/s_other"


# ---------------------------------------------------------------- the setting and the manifest


def test_setting_default_installed_preset_adaptive():
    from omegaconf import OmegaConf

    root = Path(__file__).resolve().parents[1]
    assert A.choice(OmegaConf.load(root / "conf" / "config.yaml")) == "installed"
    assert A.choice(OmegaConf.load(root / "conf" / "preset" / "paper.yaml")) == "adaptive"
    assert A.choice(None) == "installed"
    with pytest.raises(ValueError, match="must be one of"):
        A.choice({"runtime": {"session_search": "turbo"}})


# ---------------------------------------------------------------- the tool texts


def synthetic_module(path: Path, props=("query", "limit", "detail", "scope"), desc="Synthetic description.") -> Path:
    """A stand-in for tools/session_search_tool.py: our own literal schema (never the runtime's text)."""
    properties = {p: {"type": "string", "description": f"synthetic {p}"} for p in props}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import json\n\nSESSION_SEARCH_SCHEMA = {\n    \"name\": \"session_search\",\n"
                    f"    \"description\": (\n        {desc[:10]!r}\n        {desc[10:]!r}\n    ),\n"
                    f"    \"parameters\": {{\"type\": \"object\", \"properties\": {properties!r}, \"required\": []}},\n"
                    "}\n\nraise SystemExit('never executed')\n")
    return path


def test_texts_parse_without_running_the_file(tmp_path):
    p = synthetic_module(tmp_path / "session_search_tool.py")
    d = A.parse_texts(p)
    assert d["type"] == "function" and d["function"]["name"] == "session_search"
    assert d["function"]["description"] == "Synthetic description."
    assert set(d["function"]["parameters"]["properties"]) == {"query", "limit", "detail", "scope"}
    (tmp_path / "bad.py").write_text("SESSION_SEARCH = {}\n")
    with pytest.raises(A.TextsError, match="no SESSION_SEARCH_SCHEMA"):
        A.parse_texts(tmp_path / "bad.py")
    (tmp_path / "call.py").write_text("SESSION_SEARCH_SCHEMA = dict(name='session_search')\n")
    with pytest.raises(A.TextsError, match="not a literal"):
        A.parse_texts(tmp_path / "call.py")


def test_texts_status_absent_old_pinned_and_tampered(tmp_path, monkeypatch):
    st = A.texts_status(tmp_path / "nope.py")
    assert not st["present"] and A.TEXTS_FETCH in st["detail"] and not A.texts_usable(st)
    old = synthetic_module(tmp_path / "old" / "session_search_tool.py", props=("query", "limit"))
    st = A.texts_status(old)
    assert st["parses"] and not st["has_detail_and_scope"] and not A.texts_usable(st)
    new = synthetic_module(tmp_path / "new" / "session_search_tool.py")
    sha = hashlib.sha256(new.read_bytes()).hexdigest()
    monkeypatch.setattr(A, "TEXTS_SHA256", sha)
    st = A.texts_status(new)
    assert st["matches_pin"] is True and A.texts_usable(st) and "matches the pin" in st["detail"]
    new.write_text(new.read_text().replace("Synthetic", "Edited"))
    st = A.texts_status(new)
    assert st["matches_pin"] is False and not A.texts_usable(st) and "differs from the pinned" in st["detail"]


def test_schema_and_manifest_follow_the_texts(tmp_path, monkeypatch, store):
    from harness.run.fidelity import runtime_row
    from harness.runtime.session_search import runtime_schema

    monkeypatch.setenv(A.TEXTS_ENV, str(tmp_path / "absent.py"))
    with SessionSearchTool(store, search="adaptive") as t:
        assert t.schema() == runtime_schema()  # without the download: the installed runtime's texts
    cfg = {"runtime": {"session_search": "adaptive"}}
    row = runtime_row({"runtime"}, cfg)
    if load_runtime().shape != "top_session_window":
        assert "0.21.5 behaviour, emulated over" in row.stage and "tool texts installed" in row.stage
        assert row.status == "differs" and A.TEXTS_FETCH in row.detail
    p = synthetic_module(tmp_path / "texts" / "session_search_tool.py")
    monkeypatch.setenv(A.TEXTS_ENV, str(p))
    with SessionSearchTool(store, search="adaptive") as t:
        assert t.schema() == A.parse_texts(p)
    row2 = runtime_row({"runtime"}, cfg)
    sha = hashlib.sha256(p.read_bytes()).hexdigest()
    if load_runtime().shape != "top_session_window":
        assert row2.status == "same" and "tool texts 0.21.5" in row2.stage and sha[:16] in row2.stage
    installed = runtime_row({"runtime"}, {"runtime": {"session_search": "installed"}})
    # pooled results need one shape and one text: the pool keys differ
    assert len({row.pool, row2.pool, installed.pool}) == 3


def test_download_at_the_tag_pinned_refused_and_trust_on_first_download(fake_raw, tmp_path, monkeypatch, capsys):
    from harness.data import hub
    from harness.data.__main__ import main

    base, files, seen = fake_raw
    data = synthetic_module(tmp_path / "src" / "session_search_tool.py").read_bytes()
    path = f"/{A.TEXTS_REPO}/{A.TEXTS_TAG}/{A.TEXTS_FILE}"
    files[path] = data
    out = tmp_path / "texts"
    # no pin: trust on first download, recorded as such
    monkeypatch.setattr(A, "TEXTS_SHA256", None)
    info = hub.download_session_search_texts(out, base_url=base)
    assert seen[-1] == path and info["pinned"] is False and info["parses"] is True
    e = json.loads((out / "download.json").read_text())["files"]["session_search_tool.py"]
    assert e["pinned_sha256"] is None and e["sha256"] == hashlib.sha256(data).hexdigest()
    assert e["revision"] == "v0.21.5" and e["url"] == base + path
    # pinned: the right bytes pass, others are deleted and refused
    monkeypatch.setattr(A, "TEXTS_SHA256", hashlib.sha256(data).hexdigest())
    assert main(["download", "--what", "session_search_texts", "--out", str(out), "--base-url", base]) == 0
    assert "matches the pin" in capsys.readouterr().out
    files[path] = data.replace(b"Synthetic", b"Tampered!")
    (out / "session_search_tool.py").unlink()
    assert main(["download", "--what", "session_search_texts", "--out", str(out), "--base-url", base]) == 1
    assert "REFUSED" in capsys.readouterr().err and not (out / "session_search_tool.py").exists()
    assert not list(out.glob(".*partial"))


# ---------------------------------------------------------------- the analysis table and the preset's dry run


def test_session_search_table_w_and_p_per_shape_and_flags_mixing():
    from types import SimpleNamespace

    from analysis.tables.session_search import session_search_table

    def rec(cond, shape, chars, schema=5860, search="installed"):
        return {"condition": cond, "condition_notes": {"session_search_shape": shape, "session_search": search,
                                                       "schema_chars": schema},
                "tools": [{"name": "session_search", "chars": c, "log": {"session_search_shape": shape}} for c in chars]
                + [{"name": "memory_search", "chars": 999, "log": {}}]}

    f = SimpleNamespace(name="main", records=[
        rec("session_search", "top_session_window", [6000, 4000], 7000, "adaptive"),
        rec("session_search", "top_session_window", [5000], 7000, "adaptive"),
        rec("fanout", "sessions_expanded", [20000]),
        rec("fanout", "top_session_window", [3000, 3000, 3000], 7000, "adaptive"),
        {"condition": "tool_hybrid", "condition_notes": {}, "tools": [{"name": "memory_search", "chars": 10}]}])
    t = session_search_table([f]).set_index(["condition", "shape"])
    s = t.loc[("session_search", "top_session_window")]
    assert (s["runs"], s["searches"], s["w_chars_per_search"], s["chars_per_question"]) == (2, 3, 5000, 7500)
    assert s["P_schema_chars"] == 7000 and not s["mixed"] and s["paper_chars_per_question"] == 47_700
    assert t.loc[("fanout", "sessions_expanded")]["w_chars_per_search"] == 20000
    assert t.loc[("fanout", "top_session_window")]["chars_per_question"] == 9000
    assert t.loc[("fanout", "sessions_expanded")]["mixed"] and t.loc[("fanout", "top_session_window")]["mixed"]
    assert "tool_hybrid" not in t.index.get_level_values(0)
    from analysis.tables.session_search import session_search_section

    md = session_search_section(SimpleNamespace(tables={"session_search_shapes": session_search_table([f])}))
    assert "by result shape" in md and "**Mixed shapes**: main/fanout" in md and "47,700" in md


def test_the_search_is_part_of_the_stage_hash_and_the_default_keeps_old_hashes():
    from omegaconf import OmegaConf

    from harness.records import config_hash

    base = {"seed": 0, "stage": {"name": "main"}}
    old = config_hash(OmegaConf.create(base))
    assert config_hash(OmegaConf.create({**base, "runtime": {"session_search": "installed"}})) == old
    # a stage started with one search refuses to resume with the other (StageMismatch): no stage mixes shapes
    assert config_hash(OmegaConf.create({**base, "runtime": {"session_search": "adaptive"}})) != old


# ---------------------------------------------------------------- against the recorded results of tests/data


def test_against_the_recorded_history_of_tests_data(tmp_path):
    """tests/data holds one history as 0.19.0 returned it (every message of its three sessions) and the
    same search in 0.21.5's shape, written by hand from 0.21.5's source by another author. Rebuilt
    here into a store, the emulation must give 0.19.0's ranking (the FTS5 rank is the same code) and
    each session shaped as that file shapes it: the `full` one and the `compact` ones alike."""
    from datetime import datetime, timezone

    data = Path(__file__).parent / "data"
    old = json.loads((data / "hermes_0_19_0" / "discover.json").read_text())
    new = json.loads((data / "hermes_0_21_5" / "discover_adaptive.json").read_text())
    imported = []
    for r in sorted(old["results"], key=lambda r: r["messages"][0]["id"]):
        msgs = sorted(r["bookend_start"] + r["messages"] + r["bookend_end"], key=lambda m: m["id"])
        start = datetime.strptime(r["when"], "%B %d, %Y at %I:%M %p").replace(tzinfo=timezone.utc).timestamp()
        imported.append({"id": r["session_id"], "source": r["source"], "started_at": start,
                         "messages": [{"role": m["role"], "content": m["content"], "timestamp": m["timestamp"]}
                                      for m in msgs]})
    path = tmp_path / "state.db"
    db = load_runtime().SessionDB(db_path=path)
    assert db.import_sessions(imported)["ok"]
    db.close()
    with SessionSearchTool(path, search="adaptive") as t:
        adaptive = json.loads(t(query="trellis").text)
        full = json.loads(t(query="trellis", detail="full").text)
    assert [r["session_id"] for r in adaptive["results"]] == [r["session_id"] for r in old["results"]]
    assert [r["match_message_id"] for r in adaptive["results"]] == [r["match_message_id"] for r in old["results"]]
    snippets = {r["session_id"]: r["snippet"] for r in old["results"]}
    assert all(r["snippet"] == snippets[r["session_id"]] for r in adaptive["results"])
    # the file's `full` session against our full shaping of it (detail="full"), its `compact` ones against
    # ours where we shape them compact too (our top session is the file's third); its snippets are its own
    full_by = {r["session_id"]: r for r in full["results"]}
    compact_by = {r["session_id"]: r for r in adaptive["results"] if r["detail"] == "compact"}
    compared = []
    for want in new["results"]:
        sid = want["session_id"]
        got = full_by[sid] if want["detail"] == "full" else compact_by.get(sid)
        if got is None:
            continue
        drop = ("snippet",)
        assert {k: v for k, v in got.items() if k not in drop} == {k: v for k, v in want.items() if k not in drop}, sid
        compared.append((sid, want["detail"]))
    assert compared == [("s456e0eb1849d", "full"), ("s77714aa82db7", "compact")]


def test_a_profile_name_on_one_store_is_the_runtimes_to_refuse(tool):
    out = call(tool, query="heron", profile="nobody")
    assert "error" in out and "nobody" in out["error"] and "does not exist" in out["error"]


def test_a_stage_under_the_setting_records_the_emulation_and_the_report_shows_it(tmp_path):
    """runtime.session_search=adaptive on a scripted upstream: both session-search conditions get the
    emulated shape (run notes, every call's log), and stage.json's runtime row says so."""
    import os
    import subprocess
    import sys

    from tests.fake_model import FakeModel

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "DEEPSEEK_API_KEY": "sk-test", A.TEXTS_ENV: str(tmp_path / "absent.py")}
    with FakeModel() as fake:
        env["DEEPSEEK_BASE_URL"] = fake.base_url
        res = subprocess.run([sys.executable, "-m", "harness.run", "stage=main", "model=deepseek", "judge=deepseek",
                              "data=synth_tiny", f"runs_dir={tmp_path}/runs", "samples.smoke.limit=2",
                              "stage.groups=[{sample:smoke,conditions:[session_search,session_search_compact]}]",
                              "judge.prompts=builtin", "concurrency=2", "runtime.session_search=adaptive"],
                             cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    folder = tmp_path / "runs" / "main" / "main"
    recs = [json.loads(p.read_text()) for p in (folder / "records").glob("*.json")]
    assert sorted(r["condition"] for r in recs) == ["session_search"] * 2 + ["session_search_compact"] * 2
    for r in recs:
        n = r["condition_notes"]
        assert (n["session_search"], n["session_search_shape"], n["emulates"], n["tool_texts"]) == \
            ("adaptive", "top_session_window", "0.21.5", "installed")
        assert r["tools"] and all(t["log"]["session_search_shape"] == "top_session_window" for t in r["tools"])
    row = next(x for x in json.loads((folder / "stage.json").read_text())["fidelity"]["rows"] if x["key"] == "runtime")
    if load_runtime().shape != "top_session_window":
        assert row["stage"].startswith("0.21.5 behaviour, emulated over") and row["status"] == "differs"
