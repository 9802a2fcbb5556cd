"""Tool use and the arguments the model chose, beside judged accuracy and the literal check."""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from analysis.load import Folder
from analysis.markdown import integer, link, num, share, simple_section, text
from analysis.tables import Table, register
from analysis.tables.common import each_condition


def tool_use_table(runs: pd.DataFrame, folders: Sequence[Folder]) -> pd.DataFrame:
    """Per condition: how often the model used its tools and how it filled them (the k it asked
    memory_search for, date filters; calls that overrode a default), beside judged accuracy and
    the judge-free literal check (analysis.literal) where it applies."""
    rows = []
    for f, variant, c, d in each_condition(runs, folders):
        calls, searches, k_set = int(d["tool_calls"].sum()), int(d["searches"].sum()), int(d["k_set"].sum())
        lit = d["literal"].dropna()
        rows.append({
            "folder": f.name, "variant": variant, "condition": c, "n": len(d), "repeat": 0,
            "tool_use_rate": float((d["tool_calls"] > 0).mean()), "tool_calls_mean": float(d["tool_calls"].mean()),
            "override_share": d["overrides"].sum() / calls if calls else math.nan,
            "searches": searches, "k_set_share": k_set / searches if searches else math.nan,
            "k1_share": d["k1"].sum() / searches if searches else math.nan,
            "k_mean_when_set": d["k_sum"].sum() / k_set if k_set else math.nan,
            "dated_share": d["dated"].sum() / searches if searches else math.nan,
            "dated_empty": int(d["dated_empty"].sum()),
            "accuracy": float(d["correct"].mean()),
            "literal_hits": int(lit.sum()), "n_literal": len(lit),
            "literal_rate": float(lit.mean()) if len(lit) else math.nan,
        })
    return pd.DataFrame(rows)


def tool_use_section(res) -> str:
    """Tool use."""
    t = res.tables
    parts: list[str] = []
    parts.append("\n## Tool use and the arguments the model chose\n\n")
    parts.append(f"{link('tool_use.csv')}. Per condition: runs that called a tool, tool calls per run, the share "
                 "of calls that set an argument to another value than its default, and for memory_search the "
                 "share of searches that set k, that asked for k = 1, and the mean k when set (absent = the "
                 "tool's default), the share limited to dates (since/until) and how many of those came back "
                 "empty; judged accuracy beside them, and the judge-free literal check (the answer contains a "
                 "short gold word for word; not for preference or abstention questions).\n\n")
    parts.append(simple_section(t["tool_use"], [
        ("folder", "folder", text), ("variant", "variant", text), ("condition", "condition", text),
        ("n", "n", integer), ("tool use", "tool_use_rate", share), ("tool calls", "tool_calls_mean", num),
        ("overrode a default", "override_share", share), ("searches", "searches", integer),
        ("k set", "k_set_share", share), ("k = 1", "k1_share", share), ("mean k when set", "k_mean_when_set", num),
        ("dated", "dated_share", share), ("dated and empty", "dated_empty", integer), ("accuracy", "accuracy", share),
        ("literal: hits / applicable", "literal_hits", integer), ("", "n_literal", integer),
        ("literal rate", "literal_rate", share)]))
    return "".join(parts)


register(Table("tool_use", "tool_use.csv", lambda res: tool_use_table(res.runs, res.folders), tool_use_section,
               prereg=("tool_use",), order=110))
