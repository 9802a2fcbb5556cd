"""An outside audit of runtime.session_search=adaptive (claims of issue 32), on adversarial stores.

Every expectation below is written by hand from the 0.21.5 rules as the issue states them
(harness/runtime/adaptive.py's docstring): ties in rank, lineages whose root is hidden or cron,
a title that is also a content match, messages of exactly 4,000/4,001 and 1,200/1,201
characters with multi-byte characters at the cut, anchors at a session's first and last
message (the ±5 window clipped), compaction summaries inside the window and among the
bookends, limits 0, 11 and strings, and queries with `?`, apostrophes and CJK. Message ids are
read from the store with plain SQL; the store is written by the installed runtime's own code.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from harness.runtime import SessionSearchTool, load_runtime
from tests.runtime_helpers import imported_store, message_ids
from tests.test_runtime_adaptive import filler, session, text

EMOJI = "\U0001F426"  # 4 bytes in UTF-8, 2 UTF-16 units: one character
CJK = "\u9e1f"  # 3 bytes in UTF-8


def exact(head: str, n: int, tail: str) -> str:
    """A message of exactly n characters: head, multi-byte filler, then `tail` as its last characters."""
    body = head + " " + (EMOJI + "\u00e9") * n
    return body[: n - len(tail)] + tail


def sessions() -> list[dict]:
    out = []
    # ties: three one-message sessions with the same text (the same BM25 rank), one of them cron
    out += [session("t_a", 0, ["tieword same text here", "r"]), session("t_b", 1, ["tieword same text here", "r"]),
            session("t_c", 2, ["tieword same text here", "r"], source="cron")]
    # a lineage whose root is hidden (subagent) and one whose child is hidden
    out += [session("h_root", 3, ["root text", "r"], source="subagent"),
            session("h_child", 4, ["plover in the child", "r"], parent="h_root"),
            session("k_root", 5, ["cli root", "r"]),
            session("k_child", 6, ["plover plover plover", "r"], source="subagent", parent="k_root")]
    # a lineage whose child is cron (demoted) under an interactive root
    out += [session("c_root", 7, ["interactive root", "r"]),
            session("c_child", 8, ["sandpiper sandpiper sandpiper", "r"], source="cron", parent="c_root"),
            session("c_plain", 9, ["sandpiper " + filler("cp", 300), "r"])]
    # anchors on the first and on the last of 12 messages
    first = [text(f"e{k}", 100, f"e{k}") for k in range(12)]
    first[0] = "curlew first " + filler("ef", 50)
    last = [text(f"g{k}", 100, f"g{k}") for k in range(12)]
    last[11] = "godwit last " + filler("gl", 50)
    out += [session("e_start", 10, first), session("e_end", 11, last)]
    # the top session of "dunlin": 16 messages, the match at 7, window 2..12, bookends 0,1 | 13,14,15
    top = [text(f"d{k}", 200, f"d{k}") for k in range(16)]
    top[0] = exact("open", 1200, EMOJI)  # bookend, exactly 1,200 characters (4,800+ bytes): not cut
    top[1] = exact("second", 1201, CJK)  # bookend, 1,201: cut after character 1,200
    top[3] = "[CONTEXT COMPACTION] inside the window " + filler("cw", 100)  # in the window: kept
    top[4] = exact("four", 4000, EMOJI)  # window, exactly 4,000 characters: not cut
    top[5] = exact("five", 4001, CJK)  # window, 4,001: cut after character 4,000 (an emoji)
    top[7] = "dunlin dunlin dunlin"
    top[13] = "\n  [CONTEXT SUMMARY]: handoff " + filler("cs", 80)  # bookend: dropped
    out.append(session("d_top", 12, top))
    out.append(session("d_cut", 13, [exact("dunlin", 4001, EMOJI), "r"]))  # compact anchor of 4,001: cut
    out.append(session("d_keep", 14, [exact("dunlin", 4000, CJK), "r"]))  # compact anchor of 4,000: not cut
    # a title that is also a content match, and a longer content match elsewhere
    out += [session("ti", 15, ["bittern marsh notes", "reply", "more"], title="bittern marsh"),
            session("ti2", 16, ["bittern marsh again " + filler("t2", 100), "reply"])]
    out.append(session("ap", 17, ["nothing here", "nor here"], title="Bob's Plans"))
    # CJK: two characters take the runtime's LIKE path (newest first), five its trigram table
    out += [session("cj1", 18, ["我们去大别山项目吧", "好"]), session("cj2", 19, ["项目 讨论 大别", "好"])]
    # twelve sessions for limit 11: "knot" in a message that grows with k (rank order n00..n11)
    for k in range(12):
        out.append(session(f"n{k:02d}", 30 + k, [("knot " + filler(f"n{k}", 12 * k)).strip(), "r"]))
    # the scan stops at 300 rows: 300 cron rows outrank the one interactive "ruff" (row 301, never in hand);
    # "wren": 299 of them, so the interactive row is the 300th and comes first
    for k in range(300):
        words = "ruff ruff wren" if k < 299 else "ruff ruff"
        out.append(session(f"r{k:03d}", 60 + k / 1000, [words, "r"], source="cron"))
    out.append(session("r_cli", 59, ["ruff wren " + filler("rc", 400), "r"]))
    return out


@pytest.fixture(scope="module")
def store() -> Path:
    return imported_store("adaptive_audit", sessions())


@pytest.fixture(scope="module")
def ids(store) -> dict[str, list[int]]:
    return message_ids(store)


@pytest.fixture(scope="module")
def raw(store) -> dict[int, str]:
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return dict(con.execute("SELECT id, content FROM messages"))
    finally:
        con.close()


@pytest.fixture(scope="module")
def tool(store):
    t = SessionSearchTool(store, search="adaptive")
    yield t
    t.close()


def call(tool, **args) -> dict:
    return json.loads(tool(**args).text)


def sids(out: dict) -> list[str]:
    return [r["session_id"] for r in out["results"]]


def test_ties_keep_both_sessions_and_cron_still_last(tool):
    out = call(tool, query="tieword")
    assert set(sids(out)[:2]) == {"t_a", "t_b"} and sids(out)[2] == "t_c"
    assert [r["detail"] for r in out["results"]] == ["full", "compact", "compact"]
    # two slots: the two interactive sessions, never the cron one (it ties them on rank)
    assert set(sids(call(tool, query="tieword", limit=2))) == {"t_a", "t_b"}


def test_hidden_sources_and_lineages(tool, ids):
    # k_child is a subagent session: hidden although its root is interactive;
    # h_child is interactive: shown, deduplicated onto (and naming) its hidden root
    out = call(tool, query="plover")
    assert sids(out) == ["h_child"] and out["results"][0]["parent_session_id"] == "h_root"
    assert out["results"][0]["match_message_id"] == ids["h_child"][0] and out["sessions_searched"] == 1
    # the cron child ranks first by BM25 (3x, short) and is moved below the interactive session
    out = call(tool, query="sandpiper")
    assert sids(out) == ["c_plain", "c_child"] and out["results"][1]["parent_session_id"] == "c_root"
    assert [r["detail"] for r in out["results"]] == ["full", "compact"]


def test_anchor_on_the_first_and_last_message_clips_the_window(tool, ids):
    (r,) = call(tool, query="curlew")["results"]
    m = ids["e_start"]
    assert [x["id"] for x in r["messages"]] == m[0:6] and (r["messages_before"], r["messages_after"]) == (0, 5)
    assert r["bookend_start"] == [] and [x["id"] for x in r["bookend_end"]] == m[9:12]
    (r,) = call(tool, query="godwit")["results"]
    m = ids["e_end"]
    assert [x["id"] for x in r["messages"]] == m[6:12] and (r["messages_before"], r["messages_after"]) == (5, 0)
    assert [x["id"] for x in r["bookend_start"]] == m[0:3] and r["bookend_end"] == []


def test_cuts_count_characters_not_bytes_and_summaries_leave_only_the_bookends(tool, ids, raw):
    out = call(tool, query="dunlin", limit=3)
    assert sids(out)[0] == "d_top" and set(sids(out)[1:]) == {"d_cut", "d_keep"}
    top = out["results"][0]
    m = ids["d_top"]
    assert top["detail"] == "full" and top["match_message_id"] == m[7]
    assert [x["id"] for x in top["messages"]] == m[2:13]
    by = {x["id"]: x for x in top["messages"]}
    assert by[m[3]]["content"] == raw[m[3]]  # a compaction summary inside the window stays, uncut
    assert by[m[4]]["content"] == raw[m[4]] and "content_truncated" not in by[m[4]]  # 4,000: kept whole
    five = by[m[5]]
    assert len(raw[m[5]]) == 4001 and five["content"] == raw[m[5]][:4000] + "…"
    assert five["content"].endswith(raw[m[5]][3999] + "…") and five["original_content_chars"] == 4001
    assert five["content_truncated"] is True
    assert [x["id"] for x in top["bookend_start"]] == m[0:2]
    b0, b1 = top["bookend_start"]
    assert b0["content"] == raw[m[0]] and "content_truncated" not in b0
    assert b1["content"] == raw[m[1]][:1200] + "…" and b1["original_content_chars"] == 1201
    assert [x["id"] for x in top["bookend_end"]] == [m[14], m[15]]  # 13 is a summary: dropped, not replaced
    low = {r["session_id"]: r for r in out["results"][1:]}
    cut, keep = low["d_cut"]["messages"], low["d_keep"]["messages"]
    assert [x["id"] for x in cut] == ids["d_cut"][:1] and [x["id"] for x in keep] == ids["d_keep"][:1]
    assert cut[0]["content"] == raw[ids["d_cut"][0]][:4000] + "…" and cut[0]["original_content_chars"] == 4001
    assert keep[0]["content"] == raw[ids["d_keep"][0]] and "content_truncated" not in keep[0]


def test_compact_cut_over_multibyte_adaptive_result(store, ids, raw):
    with SessionSearchTool(store, search="adaptive", compact=True) as t:
        out = json.loads(t(query="dunlin").text)
    top = out["results"][0]
    m = ids["d_top"]
    assert [x["id"] for x in top["messages"]] == m[6:9] and "bookend_start" not in top
    low = {r["session_id"]: r for r in out["results"][1:]}
    c = low["d_cut"]["messages"][0]
    # cut to 1,000 characters (999 + "…"), flagged with the stored message's length (the runtime's count)
    assert c["content"] == raw[ids["d_cut"][0]][:999] + "…" and c["original_content_chars"] == 4001


def test_title_that_is_also_a_content_match_is_one_session(tool, ids):
    out = call(tool, query="bittern marsh")
    assert sids(out) == ["ti", "ti2"] and out["sessions_searched"] == 2
    assert out["results"][0]["matched_role"] == "session_title" and out["results"][0]["detail"] == "full"
    assert out["results"][1]["detail"] == "compact"
    one = call(tool, query="bittern marsh", limit=1)
    assert sids(one) == ["ti"] and one["sessions_searched"] == 1


@pytest.mark.parametrize("limit, expect", [(0, 1), (11, 10), ("11", 10), ("2", 2), (2.7, 2), ("2.7", 3),
                                           (None, 3), ("", 3)])
def test_limits(tool, limit, expect):
    out = call(tool, query="knot", limit=limit)
    assert sids(out) == [f"n{k:02d}" for k in range(expect)] and out["sessions_searched"] == expect


def test_question_marks_and_apostrophes_are_swallowed_fts5_errors_titles_still_match(tool):
    for q in ("dunlin?", "dunlin's"):
        r = tool(query=q)
        assert r.empty and r.error and "syntax error" in r.log["fts5_error"]
        assert json.loads(r.text)["detail"] == "adaptive"
    for q in ("Bob's Plans", "'Bob's Plans'", "`Bob's Plans`"):
        out = call(tool, query=q)
        assert sids(out) == ["ap"] and out["results"][0]["matched_role"] == "session_title"


def test_cjk_queries(tool):
    assert sids(call(tool, query="大别")) == ["cj2", "cj1"]  # LIKE: newest message first
    assert sids(call(tool, query="大别山项目")) == ["cj1"]


def test_following_a_results_link_reads_this_store(tool, ids):
    """0.21.5's texts tell the model to resolve a `link` by splitting it into profile + id; the link names
    the profile of the store searched, so both halves must lead back to that store (as in fan-out)."""
    out = call(tool, query="curlew")
    link = out["results"][0]["link"]
    profile, _, sid = link.removeprefix("@session:").partition("/")
    assert (profile, sid) == ("default", "e_start")
    read = call(tool, session_id=sid, profile=profile)
    assert read.get("mode") == "read" and [m["id"] for m in read["messages"]] == ids["e_start"]
    again = call(tool, query="curlew", profile=profile.upper())
    assert again.get("detail") == "adaptive" and sids(again) == ["e_start"]
    # another profile is still the runtime's to refuse
    assert "does not exist" in call(tool, query="curlew", profile="nobody")["error"]


def test_the_scan_holds_300_rows_before_cron_is_demoted(tool):
    out = call(tool, query="ruff")
    assert "r_cli" not in sids(out) and all(r["source"] == "cron" for r in out["results"]) and out["count"] == 3
    out = call(tool, query="wren")
    assert sids(out)[0] == "r_cli" and [r["source"] for r in out["results"]] == ["cli", "cron", "cron"]
    # sorted by time, the newest cron rows still come after the older interactive one
    assert sids(call(tool, query="wren", sort="newest"))[0] == "r_cli"


@pytest.mark.parametrize("search, pooled", [("installed", True), ("adaptive", False)])
def test_a_stage_written_before_the_setting_pools_with_the_same_search_only(tmp_path, search, pooled):
    """A stage started before runtime.session_search existed (its hash is kept for `installed`, so it
    resumes) recorded its runtime row's pool as '<version>|<shape>'. A new stage with the same search,
    shape and texts (the installed runtime's own) must pool with it; the emulated search must not."""
    from analysis import run as analysis_run
    from harness.run.fidelity import runtime_row
    from harness.runtime.hermes import runtime_facts
    from tests.analysis_fixtures import Stage, sha256_file

    f = runtime_facts()
    old_pool = f"{f['version']}|{f['session_search_shape']}"  # the row as the stages before issue 32 wrote it
    new = runtime_row({"runtime"}, {"runtime": {"session_search": search}})

    def manifest(pool: str) -> dict:
        row = {"key": "runtime", "setting": "runtime", "paper": "p", "stage": pool, "status": "differs",
               "pool": pool, "detail": ""}
        return {"preset": None, "allow_deviation": [], "accepted": [], "rows": [row]}

    pre = Path(__file__).resolve().parents[1] / "conf" / "prereg" / "hypotheses.yaml"
    main = Stage(tmp_path / "runs", "main", prereg_sha=sha256_file(pre), fidelity=manifest(old_pool))
    scale = Stage(tmp_path / "runs", "scale", prereg_sha=sha256_file(pre), fidelity=manifest(new.pool))
    for i in range(6):
        main.add("tool_hybrid", f"q{i}", prompt=1000, output=0)
        scale.add("tool_hybrid", f"q{i}", prompt=1300, output=0)
    main.write()
    scale.write()
    out = tmp_path / "results"
    assert analysis_run.main([f"runs={tmp_path / 'runs'}", f"out={out}", "resamples=50"]) in (0, 1)
    import pandas as pd

    pl = pd.read_csv(out / "pooling.csv")
    decision = pl.loc[pl["table"] == "scale", "decision"].iloc[0]
    assert decision.startswith("pooled") is pooled, decision


def test_the_manifest_says_why_a_present_texts_file_is_not_used(tmp_path, monkeypatch):
    """With a texts file present but unusable (here: a module without `detail`/`scope`, e.g. fetched at
    another tag), the installed texts are used and the runtime row must say the file is unusable, not
    that 0.21.5's texts were never downloaded."""
    from harness.run.fidelity import runtime_row
    from harness.runtime import adaptive as A
    from tests.test_runtime_adaptive import synthetic_module

    if load_runtime().shape == "top_session_window":
        pytest.skip("the installed runtime is 0.21.5's: nothing is emulated")
    cfg = {"runtime": {"session_search": "adaptive"}}
    monkeypatch.setenv(A.TEXTS_ENV, str(tmp_path / "absent.py"))
    assert "0.21.5's not downloaded" in runtime_row({"runtime"}, cfg).stage
    old = synthetic_module(tmp_path / "old" / "session_search_tool.py", props=("query", "limit"))
    monkeypatch.setenv(A.TEXTS_ENV, str(old))
    row = runtime_row({"runtime"}, cfg)
    assert "tool texts installed" in row.stage and row.status == "differs"
    assert "not downloaded" not in row.stage and "not usable" in row.stage and "detail`/`scope" in row.detail
