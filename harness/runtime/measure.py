"""Footprint and speed of the runtime's own memory on a data file (no model calls).

`python -m harness.runtime.measure --data FILE [--n 6] [--out JSON]`

WHY: reports must say what the runtime's store and search cost before any agent
runs: store bytes per user-assistant round (and the share of the trigram and
main full-text indexes), time to build a store, search latency, and characters
returned per search (default and compact), plus how often a query typed the way
a model types it (the question verbatim) hits the swallowed FTS5 error. One
question per type is taken in file order (then more, round robin, up to --n).
Every number is labelled with the runtime version and session_search result
shape that produced it (`runtime_facts()`): 0.19.0 expands up to three whole
sessions, 0.21.5 hydrates the top one, so characters per search and which
sessions a search shows are not comparable across shapes.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.data.longmemeval import QUESTION_TYPES, iter_questions, sha256_file

from .hermes import load, runtime_facts, runtime_label
from .session_search import SessionSearchTool, read_result
from .shell import ShellTool
from .store import build_store, open_session_db

STOP = set("""a an the and or but if of to in on at for with from by about as is are was were be been being do does did
have has had i me my mine we our you your he she it its they them their what which who whom whose when where why how
that this these those there here can could would should will shall may might must not no yes so than then too very
just also any some all each many much more most other into over under again once tell remind know said say told
ago last first before after time times day days week weeks month months year years""".split())


def keywords(question: str, k: int = 3) -> list[str]:
    words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z-]+", question)]
    out: list[str] = []
    for w in words:
        if w not in STOP and len(w) > 2 and w not in out:
            out.append(w)
    return sorted(out, key=len, reverse=True)[:k]


def search_measures(text: str, evidence: set[str] | frozenset[str]) -> dict:
    """What one session_search result measures, in either runtime's shape.

    chars: characters the model reads; sessions: sessions the result shows
    (an anchor-only result of 0.21.5 shows its matching message); hydrated:
    those shown with a window; evidence / evidence_hydrated: whether an
    evidence session is among them; messages / longest_message: what the
    per-message cap (4,000 in 0.21.5, none in 0.19.0) leaves.
    """
    f = read_result(text)
    ev = set(evidence)
    return {"chars": len(text), "sessions": len(f.sessions), "hydrated": len(f.hydrated),
            "evidence": bool(ev & set(f.sessions)), "evidence_hydrated": bool(ev & set(f.hydrated)),
            "messages": f.messages, "longest_message": f.longest_message, "empty": f.empty, "shape": f.shape}


def _pick(path: Path, n: int):
    by_type: dict[str, list] = {t: [] for t in QUESTION_TYPES}
    for q in iter_questions(path):
        if len(by_type[q.qtype]) < n:
            by_type[q.qtype].append(q)
    chosen = []
    while len(chosen) < n and any(by_type.values()):
        for t in QUESTION_TYPES:
            if by_type[t] and len(chosen) < n:
                chosen.append(by_type[t].pop(0))
    return chosen


def _index_shares(path: Path) -> dict[str, float]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.OperationalError:
        return {}
    finally:
        con.close()
    total = sum(r[1] for r in rows) or 1
    tri = sum(r[1] for r in rows if r[0].startswith("messages_fts_trigram"))
    main = sum(r[1] for r in rows if r[0].startswith("messages_fts") and not r[0].startswith("messages_fts_trigram"))
    return {"trigram": tri / total, "fts_main": main / total}


def _summary(xs: list[float]) -> dict:
    if not xs:
        return {}
    xs = sorted(xs)
    return {"n": len(xs), "median": statistics.median(xs), "p95": xs[min(len(xs) - 1, int(0.95 * len(xs)))],
            "min": xs[0], "max": xs[-1], "mean": statistics.fmean(xs)}


def measure(data: Path, n: int, root: Path, shell: bool = True) -> dict:
    sha = sha256_file(data)
    qs = _pick(data, n)
    stores, per_q = [], []
    lat = {"default": [], "compact": []}
    chars = {"default": [], "compact": []}
    hits = {"keywords": 0, "or": 0}
    verbatim_errors = verbatim_empty = 0
    shell_s: list[float] = []
    per_search: dict[str, list[dict]] = {"default": [], "compact": []}
    for q in qs:
        info = build_store(q, sha, root=root)
        stores.append(info)
        kw = keywords(q.question)
        queries = {"verbatim": q.question, "keywords": " ".join(kw), "or": " OR ".join(kw)}
        row = {"qid": q.qid, "type": q.qtype, "rounds": info.rounds, "bytes": info.bytes,
               "bytes_per_round": info.bytes / max(info.rounds, 1), "build_s": info.build_s,
               "cache_hit": info.cache_hit, **_index_shares(info.path), "queries": {}}
        for variant in ("default", "compact"):
            with SessionSearchTool(info, compact=variant == "compact") as tool:
                tool(query="warmup")
                for name, text in queries.items():
                    res = tool(query=text)
                    lat[variant].append(res.retrieval_s)
                    if not res.empty:
                        chars[variant].append(len(res.text))
                    m = search_measures(res.text, q.evidence)
                    row["queries"].setdefault(name, {})[variant] = {
                        "query": text, **{k: m[k] for k in ("chars", "sessions", "hydrated", "evidence",
                                                            "evidence_hydrated", "longest_message")},
                        "empty": res.empty, "error": res.error, "ms": round(res.retrieval_s * 1000, 3)}
                    if not res.empty:
                        per_search[variant].append(m)
                    if variant == "default":
                        if name == "verbatim":
                            verbatim_errors += res.error
                            verbatim_empty += res.empty
                        elif set(res.sessions) & q.evidence:
                            hits[name] += 1
        if shell:
            tool = ShellTool(info)
            word = kw[0] if kw else "the"
            res = tool(command=f"sqlite3 /memory/state.db \"SELECT m.session_id, substr(m.content, 1, 200) FROM "
                               f"messages_fts f JOIN messages m ON m.id = f.rowid WHERE messages_fts MATCH '{word}' "
                               f"LIMIT 5\"")
            shell_s.append(res.retrieval_s)
            row["shell"] = {"command_s": res.retrieval_s, "chars": len(res.text), "sessions": len(res.sessions)}
        per_q.append(row)
    # sequential open-search-close over every store (the fan-out pattern)
    t0 = time.perf_counter()
    rt_calls = 0
    for info in stores:
        db = open_session_db(info.path)
        try:
            load().session_search(query="plans", db=db)
            rt_calls += 1
        finally:
            db.close()
    seq = time.perf_counter() - t0
    rounds = sum(s.rounds for s in stores)
    built = [s for s in stores if not s.cache_hit]
    return {
        "runtime": runtime_label(),
        "runtime_facts": runtime_facts(),
        "data": str(data), "data_sha256": sha, "questions": len(qs),
        "store_bytes_per_round": sum(s.bytes for s in stores) / max(rounds, 1),
        "rounds_per_store": _summary([s.rounds for s in stores]),
        "store_bytes": _summary([s.bytes for s in stores]),
        "build_s": _summary([s.build_s for s in built]),
        "trigram_share": _summary([r["trigram"] for r in per_q if "trigram" in r]),
        "fts_main_share": _summary([r["fts_main"] for r in per_q if "fts_main" in r]),
        "search_ms": {v: {k: round(x * 1000, 3) for k, x in _summary(lat[v]).items() if k != "n"} for v in lat},
        "chars_per_nonempty_search": {v: _summary(chars[v]) for v in chars},
        "sessions_per_nonempty_search": {v: _summary([m["sessions"] for m in per_search[v]]) for v in per_search},
        "hydrated_per_nonempty_search": {v: _summary([m["hydrated"] for m in per_search[v]]) for v in per_search},
        "longest_message_chars": {v: _summary([m["longest_message"] for m in per_search[v]]) for v in per_search},
        "verbatim_question": {"empty": verbatim_empty, "fts5_error": verbatim_errors, "of": len(qs)},
        "evidence_in_first_result": {"keywords": hits["keywords"], "or": hits["or"], "of": len(qs)},
        "open_search_close_all_s": seq, "stores_opened": rt_calls,
        "shell_command_s": _summary(shell_s),
        "per_question": per_q,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.runtime.measure")
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--root", type=Path, default=None, help="store cache (default: a fresh temporary directory)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-shell", action="store_true")
    args = ap.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="memspace-measure-"))
    try:
        report = measure(args.data, args.n, root, shell=not args.no_shell)
    finally:
        if args.root is None:  # a fresh cache, so build times are real builds; not kept
            shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(report, indent=1, default=float)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    short = {k: v for k, v in report.items() if k != "per_question"}
    print(json.dumps(short, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
