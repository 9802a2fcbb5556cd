"""Retrieval quality joined to answers: the recall each run's own searches got, and accuracy beside it.

Every logged memory search of a folder (prefetch's included) is issued again on the stage's space
rebuilt with exact dense search (harness/run/replay.py: recall_folder), under the same view, query,
k and scoring; a run's recall is the share of the exact top-k units its searches returned, summed
over its searches. Per condition and index: the mean recall of the runs that searched, the accuracy,
and the accuracy of runs whose searches found everything against those that missed some: the link
between the backend study (Section 5.4) and the accuracy tables. The comparison runs where the
analysis runs (`replay=none` skips it); a stage whose index is exact is its own ground truth (recall 1
without a rebuild). Exploratory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import figures
from analysis.markdown import integer, link, md_table, num, share
from analysis.tables import Table, register
from analysis.tables.common import each_condition
from analysis.tables.status import status_line

RUN_COLUMNS = ("folder", "index", "run_id", "condition", "variant", "searches", "exact_units", "found", "recall",
               "correct")
SUMMARY_COLUMNS = ("folder", "index", "variant", "condition", "runs", "runs_searched", "mean_recall", "accuracy_pct",
                   "n_judged", "acc_full_recall_pct", "n_full_recall", "acc_partial_recall_pct", "n_partial_recall",
                   "status")


def index_label(folder) -> str:
    """The folder's index with the parameter that decides its recall (pgvector's iterative scan, ef)."""
    return _label(dict(folder.config().get("index") or {}))


def _label(idx: dict) -> str:
    name = str(idx.get("name") or "?")
    if name == "hybrid" and isinstance(idx.get("dense"), dict):
        return "hybrid/" + _label(idx["dense"])
    keys = {"pgvector": ("iterative_scan", "ef_search"), "redis_qe": ("ef_runtime",), "vectorset": ("quant",)}.get(name, ())
    params = ", ".join(f"{k} {idx[k]}" for k in keys if idx.get(k) is not None)
    return name + (f" ({params})" if params else "")


def _runs(res: Any) -> pd.DataFrame:
    rows = []
    correct = res.runs.set_index(["folder", "run_id"])["correct"].to_dict()
    for f in res.folders:
        status, calls = res.recalls.get(f.name, ("not compared", []))
        by: dict[str, list[dict]] = {}
        for c in calls:
            if not c["error"] and c["exact"] is not None:
                by.setdefault(c["run_id"], []).append(c)
        label = index_label(f)
        for rid, cs in sorted(by.items()):
            exact, found = sum(c["exact"] for c in cs), sum(c["found"] for c in cs)
            rows.append({"folder": f.name, "index": label, "run_id": rid, "condition": cs[0]["condition"],
                         "variant": cs[0]["variant"], "searches": len(cs), "exact_units": exact, "found": found,
                         "recall": found / exact if exact else math.nan,
                         "correct": correct.get((f.name, rid), math.nan)})
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))


def _summary(res: Any) -> pd.DataFrame:
    per_run = res.table("retrieval_recall_runs")
    rows = []
    for f, variant, c, d in each_condition(res.runs, res.folders):
        status = res.recalls.get(f.name, ("not compared", []))[0]
        r = per_run[(per_run["folder"] == f.name) & (per_run["variant"] == variant) & (per_run["condition"] == c)]
        r = r[r["run_id"].isin(set(d["run_id"]))]  # repeat 0, as every per-condition table
        if r.empty:
            continue
        j = d[d["correct"].notna()]
        full = r[(r["recall"] >= 1.0) & r["correct"].notna()]
        part = r[(r["recall"] < 1.0) & r["correct"].notna()]
        rows.append({"folder": f.name, "index": index_label(f), "variant": variant, "condition": c, "runs": len(d),
                     "runs_searched": len(r), "mean_recall": float(r["recall"].mean()),
                     "accuracy_pct": float(j["correct"].mean() * 100) if len(j) else math.nan, "n_judged": len(j),
                     "acc_full_recall_pct": float(full["correct"].mean() * 100) if len(full) else math.nan,
                     "n_full_recall": len(full),
                     "acc_partial_recall_pct": float(part["correct"].mean() * 100) if len(part) else math.nan,
                     "n_partial_recall": len(part), "status": status})
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


def section(res: Any) -> str:
    t = res.table("retrieval_recall")
    head = (f"\n## Retrieval recall and answers\n\n{link('retrieval_recall.csv')}, per run "
            f"{link('retrieval_recall_runs.csv')}; status: "
            f"{status_line(res, 'retrieval_recall') if not t.empty else '*exploratory*'}. Every memory search of a "
            "run issued again with exact dense search under the same view, query, k and scoring; recall = the "
            "share of the exact top-k its searches returned (all its searches together).\n\n")
    not_done = [f"- {name}: {st}" for name, (st, _) in sorted(res.recalls.items()) if not st.startswith("compared")]
    if t.empty:
        return head + "No memory search was compared.\n" + ("\n".join(not_done) + "\n" if not_done else "")
    rows = [[r["folder"], r["index"], r["condition"] + (f" ({r['variant']})" if r["variant"] else ""),
             f"{integer(r['runs_searched'])} of {integer(r['runs'])}", share(r["mean_recall"]),
             num(r["accuracy_pct"], 1) + f" (n={integer(r['n_judged'])})",
             num(r["acc_full_recall_pct"], 1) + f" (n={integer(r['n_full_recall'])})",
             num(r["acc_partial_recall_pct"], 1) + f" (n={integer(r['n_partial_recall'])})"] for _, r in t.iterrows()]
    out = head + md_table(["folder", "index", "condition", "runs that searched", "mean recall", "accuracy %",
                           "accuracy %, recall 100%", "accuracy %, recall < 100%"], rows) + "\n"
    if "figure_recall.png" in res.figures:
        out += f"\n![{res.figures['figure_recall.png']}](figure_recall.png)\n"
    if not_done:
        out += "\nNot compared:\n\n" + "\n".join(not_done) + "\n"
    return out


def draw(res: Any, out: Path) -> dict[str, str]:
    t = res.table("retrieval_recall")
    if not t.empty and figures.figure_recall(t, out / "figure_recall.png"):
        return {"figure_recall.png": "Accuracy against the recall of the runs' own searches, per condition and index"}
    return {}


register(Table("retrieval_recall_runs", "retrieval_recall_runs.csv", _runs, order=63, columns=RUN_COLUMNS))
register(Table("retrieval_recall", "retrieval_recall.csv", _summary, section, prereg=("retrieval_recall",), order=62,
               draw=draw, columns=SUMMARY_COLUMNS))
