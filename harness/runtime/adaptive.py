"""Hermes Agent 0.21.5's adaptive session search, written here from its rules, over 0.19.0's store.

WHY: the study's baseline is the runtime's session search as 0.21.5 returns it, and the
registry here serves nothing newer than 0.19.0 (0.21.x also declares Python 3.14). The
two releases share the store (schema, FTS5 tables, unicode61 tokenizer, the query
sanitiser and `search_messages`), and differ in what a discovery search returns. So the
discovery below is our own code, written from 0.21.5's rules, and it calls only the
installed store's primitives (`search_messages` with its sanitiser, `get_anchored_view`,
`get_messages`, `get_session`, `resolve_session_by_title`). Scroll, read and browse are the
installed runtime's own (0.21.5 changed none of them in a way this harness can reach: no
current session, no Telegram, no kanban sessions in a generated store).

The rules (0.21.5, tools/session_search_tool.py):
  * FTS5 over user and assistant messages (role_filter otherwise), ordered by rank (or by
    time with `sort`), up to 300 rows; sessions of source subagent, tool or kanban hidden;
    cron rows moved below all others, keeping their order (a stable sort).
  * A session whose title equals the query (stripped of quotes and backticks) comes first,
    anchored on its first message, with the window and bookends the store gives (messages
    uncut, `detail: "full"`), and takes the full slot.
  * Rows deduplicated by lineage root (the parent_session_id chain); the first `limit`
    distinct roots kept (limit default 3, clamped 1-10; a title match counts).
  * `detail="adaptive"` (default): the first hydrated session is `full` (+-5 messages
    around the match, each cut at 4,000 characters + "…" and flagged content_truncated /
    original_content_chars; 3+3 bookends cut at 1,200, compaction summaries dropped);
    every other session `compact`: only its matching message (cut at 4,000), empty
    bookends, the window's before/after counts kept. `detail="full"`: every session full.
  * The payload carries the top-level `detail` and `sessions_searched`, each result a `link`
    (@session:<profile>/<id>); no model is called.
"""

from __future__ import annotations

import json
from typing import Any

from .hermes import BOOKEND_MESSAGE_CHARS, WINDOW_MESSAGE_CHARS, load

EMULATED_VERSION = "0.21.5"
CHOICES = ("installed", "adaptive")  # runtime.session_search
HIDDEN_SOURCES = ("kanban", "subagent", "tool")
DEMOTED_SOURCES = ("cron",)
SCAN_LIMIT = 300
WINDOW = 5
BOOKEND = 3
COMPACTION_PREFIXES = ("[CONTEXT COMPACTION", "[CONTEXT SUMMARY]:")


def choice(cfg: Any) -> str:
    """The `runtime.session_search` setting of a (global) config: installed (default) or adaptive."""
    rt = (cfg.get("runtime") if cfg is not None else None) or {}
    value = str(rt.get("session_search") or "installed").strip().lower()
    if value not in CHOICES:
        raise ValueError(f"runtime.session_search must be one of {', '.join(CHOICES)}, got {value!r}")
    return value


def shape_message(m: dict, anchor_id: Any = None, cap: int | None = None) -> dict:
    """One message as a result carries it; `cap`: cut content longer than cap to cap + '…' and flag it."""
    content = m.get("content")
    cut = bool(cap) and isinstance(content, str) and len(content) > cap
    entry = {"id": m.get("id"), "role": m.get("role"), "content": content[:cap] + "…" if cut else content,
             "timestamp": m.get("timestamp")}
    for key in ("tool_name", "tool_calls", "tool_call_id"):
        if m.get(key):
            entry[key] = m[key]
    if anchor_id is not None and m.get("id") == anchor_id:
        entry["anchor"] = True
    if cut:
        entry["content_truncated"] = True
        entry["original_content_chars"] = len(content)
    return {k: v for k, v in entry.items() if v is not None or k == "content"}


def is_compaction_summary(content: Any) -> bool:
    return isinstance(content, str) and content.lstrip().startswith(COMPACTION_PREFIXES)


def lineage_root(db, session_id: str) -> str:
    """Follow parent_session_id to the top (a cycle stops where it closes)."""
    seen: set[str] = set()
    cur = session_id
    while cur and cur not in seen:
        seen.add(cur)
        s = db.get_session(cur)
        if not s or not s.get("parent_session_id"):
            break
        cur = s["parent_session_id"]
    return cur


def link_profile_name(profile: str | None = None) -> str:
    """The profile segment of the links a search writes: `profile`, else the active profile ('' if unnamed)."""
    name = (profile or "").strip()
    if not name:
        try:
            from hermes_cli.profiles import get_active_profile_name

            name = get_active_profile_name()
        except Exception:  # the runtime drops the profile segment when it cannot name it
            name = ""
        name = "" if name == "custom" else name
    return name


def session_link(session_id: str, profile: str | None = None) -> str:
    """The `link` 0.21.x puts on each result: @session:<profile>/<id>, the active profile unless named."""
    name = link_profile_name(profile)
    return f"@session:{name}/{session_id}" if name else f"@session:{session_id}"


def _when(ts: Any) -> str:
    return load().search_module._format_timestamp(ts)


def _title_result(db, query: str) -> tuple[dict, str] | None:
    title = query.strip().strip("`'\"")
    if not title:
        return None
    sid = db.resolve_session_by_title(title)
    if not sid:
        return None
    root = lineage_root(db, sid)
    meta = db.get_session(root) or db.get_session(sid) or {}
    if meta.get("source") in HIDDEN_SOURCES:
        return None
    messages = db.get_messages(sid)
    anchor = messages[0].get("id") if messages else None
    view = db.get_anchored_view(sid, anchor, window=WINDOW, bookend=BOOKEND) if anchor is not None else {}
    entry = {
        "session_id": sid, "when": _when(meta.get("started_at")), "source": meta.get("source", "unknown"),
        "model": meta.get("model") or "unknown", "title": meta.get("title") or title,
        "matched_role": "session_title", "match_message_id": anchor,
        "snippet": f"Session title matched: {meta.get('title') or title}",
        "bookend_start": [shape_message(m) for m in (view.get("bookend_start") or messages[:3])],
        "messages": [shape_message(m, anchor) for m in (view.get("window") or messages[:5])],
        "bookend_end": [shape_message(m) for m in (view.get("bookend_end") or messages[-3:])],
        "messages_before": view.get("messages_before", 0),
        "messages_after": view.get("messages_after", max(len(messages) - 5, 0)),
        "detail": "full",
    }
    if root and root != sid:
        entry["parent_session_id"] = root
    return entry, root


def discover(db, query: str, role_filter: list[str] | None = None, limit: int = 3, sort: str | None = None,
             detail: str = "adaptive", link_profile: str | None = None) -> str:
    """A discovery search by 0.21.5's rules (module docstring), as the JSON text the model reads."""
    rt = load()
    roles = role_filter or ["user", "assistant"]
    title = _title_result(db, query)
    try:
        rows = db.search_messages(query=query, role_filter=roles, exclude_sources=list(HIDDEN_SOURCES),
                                  limit=SCAN_LIMIT, offset=0, sort=sort)
    except Exception as exc:  # the runtime reports a failed search as a tool error, not an exception
        return rt.tool_error(f"Search failed: {exc}", success=False)
    rows = sorted(rows, key=lambda r: 1 if (r.get("source") or "") in DEMOTED_SOURCES else 0)
    if not rows and title is None:
        return json.dumps({"success": True, "mode": "discover", "query": query, "detail": detail, "results": [],
                           "count": 0, "message": "No matching sessions found."}, ensure_ascii=False)
    seen: dict[str, dict | None] = {}
    results: list[dict] = []
    if title is not None:
        entry, root = title
        if root:
            seen[root] = None
        results.append(entry)
    for r in rows:
        if len(seen) >= limit:
            break
        root = lineage_root(db, r["session_id"])
        if root not in seen:
            seen[root] = dict(r)
    for root, hit in seen.items():
        if hit is None:
            continue
        sid, mid = hit.get("session_id") or root, hit.get("id")
        view = db.get_anchored_view(sid, mid, window=WINDOW, bookend=BOOKEND)
        meta = db.get_session(root) or {}
        full = detail == "full" or not results
        window = view.get("window") or []
        if not full:
            window = [m for m in window if m.get("id") == mid]

        def bookends(key: str) -> list[dict]:
            if not full:
                return []
            return [shape_message(m, cap=BOOKEND_MESSAGE_CHARS) for m in (view.get(key) or [])
                    if not is_compaction_summary(m.get("content", ""))]

        entry = {
            "session_id": sid, "when": _when(meta.get("started_at") or hit.get("session_started")),
            "source": meta.get("source") or hit.get("source", "unknown"),
            "model": meta.get("model") or hit.get("model") or "unknown", "title": meta.get("title") or None,
            "matched_role": hit.get("role"), "match_message_id": mid, "snippet": hit.get("snippet") or "",
            "bookend_start": bookends("bookend_start"),
            "messages": [shape_message(m, mid, WINDOW_MESSAGE_CHARS) for m in window],
            "bookend_end": bookends("bookend_end"),
            "messages_before": view.get("messages_before", 0), "messages_after": view.get("messages_after", 0),
            "detail": "full" if full else "compact",
        }
        if root and root != sid:
            entry["parent_session_id"] = root
        results.append(entry)
    for entry in results:
        entry["link"] = session_link(entry["session_id"], link_profile)
    return json.dumps({"success": True, "mode": "discover", "query": query, "detail": detail, "results": results,
                       "count": len(results), "sessions_searched": len(seen)}, ensure_ascii=False)


def session_search(args: dict, db, link_profile: str | None = None) -> str:
    """The tool's handler (the registry's argument names): discovery by 0.21.5's rules, the rest the runtime's.

    link_profile: the profile name a result's `link` carries (fan-out: the agent whose store was opened)."""
    rt = load()
    scope = args.get("scope")
    if scope is not None and str(scope).strip() and str(scope).strip().lower() not in ("current", "all"):
        return json.dumps({"success": False, "error": "scope must be 'current' or 'all'"}, ensure_ascii=False)
    session_id = args.get("session_id")
    if isinstance(session_id, str) and "/" in session_id:  # an '@session:<profile>/<id>' value
        session_id = session_id.partition("/")[2] or session_id
    query = args.get("query") or ""
    profile = args.get("profile")
    if profile is not None and str(profile).strip().casefold() == link_profile_name(link_profile).casefold():
        # the profile the results' links name is the store searched here (as fan-out routes its own name):
        # resolving a link as 0.21.5's texts say (session_id=id, profile=profile) must come back to it
        profile = None
    if profile is not None and str(profile).strip():
        # another profile's store by name: the installed runtime resolves (or refuses) it; fan-out never
        # gets here (SessionSearchTool opens each agent's store itself and drops `profile`)
        return rt.registry.dispatch("session_search", {k: v for k, v in args.items() if k not in ("detail", "scope")},
                                    db=db)
    if (isinstance(session_id, str) and session_id.strip()) or not isinstance(query, str) or not query.strip():
        # scroll, read and browse: the installed runtime's own
        return rt.session_search(query="", role_filter=args.get("role_filter"), limit=args.get("limit", 3),
                                 session_id=session_id, around_message_id=args.get("around_message_id"),
                                 window=args.get("window", 5), db=db)
    limit = args.get("limit", 3)
    if not isinstance(limit, int):
        try:
            limit = int(limit)
        except (TypeError, ValueError):
            limit = 3
    limit = max(1, min(limit, 10))
    role = args.get("role_filter")
    roles = [r.strip() for r in role.split(",") if r.strip()] if isinstance(role, str) and role.strip() else None
    sort = args.get("sort")
    sort = sort.strip().lower() if isinstance(sort, str) and sort.strip().lower() in ("newest", "oldest") else None
    detail = args.get("detail", "adaptive")
    detail = "full" if isinstance(detail, str) and detail.strip().lower() == "full" else "adaptive"
    return discover(db, query.strip(), roles, limit, sort, detail, link_profile)


# ---------------------------------------------------------------- the tool texts the model reads

TEXTS_REPO = "NousResearch/hermes-agent"
TEXTS_TAG = "v0.21.5"
# the same release under its date tag ("Hermes Agent v0.21.5", commit f97608f178; tests/data/README.md):
# a download by either name is checked against the one pin
TEXTS_TAGS = (TEXTS_TAG, "v2026.9.24")
TEXTS_FILE = "tools/session_search_tool.py"
# sha256 of TEXTS_FILE at TEXTS_TAG. None: not yet pinned (the tag's snapshot could not be fetched where this was
# written), so a download at the tag is trust-on-first-download and download.json and the manifest say so.
TEXTS_SHA256: str | None = None
TEXTS_DEFAULT_PATH = "data/runtime/hermes-agent-0.21.5/session_search_tool.py"  # relative to the repository root
TEXTS_FETCH = "python -m harness.data download --what session_search_texts --out data/runtime/hermes-agent-0.21.5"
TEXTS_ENV = "MEMSPACE_SESSION_SEARCH_TEXTS"


class TextsError(ValueError):
    """The file is not a session_search tool module whose schema can be read."""


def parse_texts(path) -> dict:
    """The tool definition (as the registry hands it out) read from a session_search_tool.py, never imported.

    WHY ast: the file is the runtime's source; it is read as data, the schema being one literal dict.
    """
    import ast
    from pathlib import Path

    p = Path(path)
    try:
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
    except (OSError, SyntaxError, UnicodeDecodeError) as exc:
        raise TextsError(f"{p}: cannot be read as Python source ({exc})") from exc
    node = next((n for n in tree.body if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "SESSION_SEARCH_SCHEMA" for t in n.targets)), None)
    if node is None:
        raise TextsError(f"{p}: no SESSION_SEARCH_SCHEMA assignment (is this tools/session_search_tool.py?)")
    try:
        schema = ast.literal_eval(node.value)
    except ValueError as exc:
        raise TextsError(f"{p}: SESSION_SEARCH_SCHEMA is not a literal ({exc})") from exc
    if not isinstance(schema, dict) or not isinstance(schema.get("description"), str) \
            or not isinstance((schema.get("parameters") or {}).get("properties"), dict):
        raise TextsError(f"{p}: SESSION_SEARCH_SCHEMA lacks a description or parameters.properties")
    name = schema.get("name", "session_search")
    if name != "session_search":
        raise TextsError(f"{p}: the schema names {name!r}, not session_search")
    return {"type": "function", "function": {**schema, "name": name}}


def texts_path():
    import os
    from pathlib import Path

    from .hermes import REPO

    p = Path(os.environ.get(TEXTS_ENV) or TEXTS_DEFAULT_PATH).expanduser()
    return (p if p.is_absolute() else REPO / p).resolve()


def texts_status(path=None) -> dict:
    """Is 0.21.5's tool module here, the pinned one, readable? Never downloads.

    Keys: path, present, sha256, pinned_sha256, matches_pin (None: absent or no pin), parses,
    has_detail_and_scope, detail (one line, with the command that fetches it when absent or wrong).
    """
    import hashlib
    from pathlib import Path

    p = Path(path).expanduser().resolve() if path is not None else texts_path()
    out = {"path": str(p), "present": p.is_file(), "sha256": None, "pinned_sha256": TEXTS_SHA256,
           "matches_pin": None, "parses": False, "has_detail_and_scope": False}
    if not out["present"]:
        return {**out, "detail": f"no copy of {TEXTS_REPO}'s {TEXTS_FILE} at {TEXTS_TAG} at {p}; fetch it: {TEXTS_FETCH}"}
    out["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    if TEXTS_SHA256:
        out["matches_pin"] = out["sha256"] == TEXTS_SHA256
    try:
        props = parse_texts(p)["function"]["parameters"]["properties"]
    except TextsError as exc:
        return {**out, "detail": f"{exc}; fetch the file: {TEXTS_FETCH}"}
    out["parses"] = True
    out["has_detail_and_scope"] = "detail" in props and "scope" in props
    if out["matches_pin"] is False:
        why = f"differs from the pinned {TEXTS_SHA256[:12]} (another version or an edited copy)"
    elif not out["has_detail_and_scope"]:
        why = "has no `detail`/`scope` arguments: not 0.21.5's tool"
    else:
        why = ""
    if why:
        return {**out, "parses": True, "detail": f"{p}: sha256 {out['sha256'][:12]} {why}; fetch: {TEXTS_FETCH}"}
    pin = "matches the pin" if out["matches_pin"] else "no pin to check against (trust on first download)"
    return {**out, "detail": f"{p}: {TEXTS_FILE} at {TEXTS_TAG}, sha256 {out['sha256'][:12]} ({pin})"}


def texts_usable(st: dict) -> bool:
    return st["present"] and st["parses"] and st["has_detail_and_scope"] and st["matches_pin"] is not False


def adaptive_schema() -> tuple[dict | None, dict]:
    """(0.21.5's tool definition or None when absent/unusable, its texts_status)."""
    st = texts_status()
    return (parse_texts(st["path"]) if texts_usable(st) else None), st


def facts(search: str) -> dict:
    """What the harness's session search is under `runtime.session_search=search`, for runs and the manifest.

    Keys: search, version (installed), label, shape, emulated (0.21.5's rules written here over
    the installed store), texts ("0.21.5" from the downloaded file, or "installed"), texts_sha256,
    texts_detail, description (one line for the manifest).
    """
    from .hermes import SHAPE_TOP_WINDOW, SHAPES, runtime_schema, runtime_version

    if search not in CHOICES:
        raise ValueError(f"runtime.session_search must be one of {', '.join(CHOICES)}, got {search!r}")
    rt = load()
    real = rt.shape == SHAPE_TOP_WINDOW  # the installed release already searches this way (e.g. 0.21.5 itself)
    emulated = search == "adaptive" and not real
    shape = SHAPE_TOP_WINDOW if emulated else rt.shape
    version = runtime_version()
    if emulated:
        schema, st = adaptive_schema()
        if schema is not None:
            texts, sha, tdetail = EMULATED_VERSION, st["sha256"], st["detail"]
            source = f"{EMULATED_VERSION} ({TEXTS_REPO} {TEXTS_FILE} at {TEXTS_TAG}, downloaded)"
        else:
            texts, tdetail = "installed", st["detail"]
            sha = _sha(runtime_schema())
            why = "the file present is not usable" if st["present"] else "0.21.5's not downloaded"
            source = f"installed (hermes-agent {runtime_version()}'s own; {why})"
        what = (f"{EMULATED_VERSION} behaviour, emulated over {version}'s store (harness.runtime.adaptive), "
                f"session_search shape {shape}")
    else:
        texts, sha, tdetail = "installed", _sha(runtime_schema()), "the installed runtime's own schema"
        source = f"installed (hermes-agent {version}'s own)"
        what = f"hermes-agent {version}, session_search shape {shape}"
    return {"search": search, "version": version, "label": f"hermes-agent=={version}", "shape": shape,
            "shape_description": SHAPES[shape], "emulated": emulated, "emulates": EMULATED_VERSION if emulated else None,
            "texts": texts, "texts_sha256": sha, "texts_detail": tdetail,
            "description": f"{what}; tool texts {source}, sha256 {sha[:16]}"}


def _sha(obj: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
