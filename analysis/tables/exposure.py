"""Table 4: the exposure audit, from the replay of every logged memory-tool call, and its violations."""

from __future__ import annotations

import math
from typing import Iterable

import pandas as pd

from analysis.markdown import DASH, integer, link, md_table
from harness.run.replay import FolderReplay, mismatch_rows, owner_counts
from analysis.tables import Table, register
from analysis.tables.common import ORG_AGENTS
from analysis.tables.status import status_line as _status_line


def exposure_table(runs: pd.DataFrame, replays: Iterable[FolderReplay]) -> pd.DataFrame:
    """Retrieved units by owner per condition, from the replay (logged counts beside them)."""
    rows = []
    for rep in replays:
        by_cond: dict[tuple[str, str], dict] = {}
        for run_id, info in sorted(rep.runs.items()):
            key = (info["variant"], info["condition"])
            e = by_cond.setdefault(key, {"runs": 0, "not_replayed": None, "calls": [], "run_ids": set()})
            e["runs"] += 1
            e["not_replayed"] = e["not_replayed"] or info["not_replayed"]
        for c in rep.calls:
            by_cond[(c.variant, c.condition)]["calls"].append(c)
        for (variant, cond), e in sorted(by_cond.items()):
            calls = e["calls"]
            replayed = rep.status == "replayed" and bool(calls)
            rep_units = [u for c in calls if c.replayed is not None for u in c.replayed]
            log_units = [u for c in calls for u in c.logged]
            owners = owner_counts(rep_units if replayed else [])
            runs_with_calls = {c.run_id for c in calls}
            priv_runs = {c.run_id for c in calls if c.private_units("replayed") > 0}
            priv_runs_logged = {c.run_id for c in calls if c.private_units("logged") > 0}
            under_view = sum(c.private_units("replayed") for c in calls if c.scope in ("shared", "own"))
            under_view_logged = sum(c.private_units("logged") for c in calls if c.scope in ("shared", "own"))
            status = (f"not replayed ({e['not_replayed']})" if e["not_replayed"] else
                      "no memory-tool calls" if not calls else rep.status)
            row = {"folder": rep.folder, "variant": variant, "condition": cond, "runs": e["runs"],
                   "runs_with_calls": len(runs_with_calls), "calls": len(calls),
                   "searches": sum(c.kind == "search" for c in calls), "reads": sum(c.kind == "read" for c in calls),
                   "replayed": replayed, "replay_status": status,
                   "calls_matched": sum(c.match is True for c in calls),
                   "calls_mismatched": sum(c.match is False for c in calls),
                   "calls_failed": sum(c.error is not None for c in calls),
                   "units": len(rep_units) if replayed else math.nan}
            for a in ORG_AGENTS:
                row[f"units_{a}"] = owners.get(a, 0) if replayed else math.nan
            others = sorted(set(owners) - set(ORG_AGENTS))
            row["units_other_owners"] = sum(owners[o] for o in others) if replayed else math.nan
            row.update(private_units=sum(c.private_units("replayed") for c in calls) if replayed else math.nan,
                       runs_with_private=len(priv_runs) if replayed else math.nan,
                       private_units_under_view=under_view if replayed else math.nan,
                       logged_units=len(log_units),
                       logged_private_units=sum(c.private_units("logged") for c in calls),
                       logged_runs_with_private=len(priv_runs_logged),
                       logged_private_units_under_view=under_view_logged)
            rows.append(row)
    return pd.DataFrame(rows)


def _count(x) -> int:
    return 0 if x is None or x != x else int(x)


def violations(t4: pd.DataFrame) -> list[str]:
    """Private units of other agents under an own/shared view, from the logs or the replay:
    the view must never admit one, so each is reported whether or not the replay could run."""
    out = []
    for _, r in t4.iterrows() if not t4.empty else []:
        logged, replayed = _count(r.get("logged_private_units_under_view")), _count(r.get("private_units_under_view"))
        if max(logged, replayed) > 0:
            out.append(f"VIOLATION: private units of other agents retrieved under an own/shared view in "
                       f"{r['folder']} {r['variant'] or '-'} {r['condition']}: {logged} logged, "
                       f"{replayed if r.get('replayed') else 'not replayed'} replayed (table4.csv)")
    return out


def exposure_section(t4: pd.DataFrame) -> str:
    if t4.empty:
        return "No memory-tool calls to replay.\n"
    owners = [c for c in t4.columns if c.startswith("units_a")]
    rows = []
    for _, r in t4.iterrows():
        rows.append([r["folder"], r["variant"] or DASH, r["condition"], integer(r["runs"]), integer(r["calls"]),
                     r["replay_status"], f"{integer(r['calls_matched'])} / {integer(r['calls_mismatched'])}",
                     integer(r["units"]), *(integer(r[o]) for o in owners), integer(r["private_units"]),
                     integer(r["runs_with_private"]),
                     integer(r["private_units_under_view"]) + (" **VIOLATION**" if violations(
                         pd.DataFrame([r])) else ""),
                     f"{integer(r['logged_units'])} / {integer(r['logged_private_units'])}"])
    return md_table(["folder", "variant", "condition", "runs", "calls", "replay", "matched / mismatched",
                     "units", *(o.replace("units_", "") for o in owners), "private units", "runs with private",
                     "private under shared/own view", "logged units / private"], rows) + "\n"


def table4_section(res) -> str:
    """Table 4 with its replay mode and status."""
    t = res.tables
    parts: list[str] = []
    # Table 4
    parts.append("\n## Table 4: exposure audit (replay of every logged memory-tool call)\n\n")
    parts.append(f"{link('table4.csv')}, differences {link('replay_mismatches.csv')}; status: "
                 f"{_status_line(res, 'exposure_audit')}. Replay mode `{res.replay_mode}`. Units by owner are what the "
                 "replay returned (search results and rounds read); private units = units of a private agent other "
                 "than the one whose view it is. Under a shared or own view they must be 0. Fan-out is not "
                 "replayed; ask-agent rows include the asked agents' calls.\n\n")
    parts.append(exposure_section(t["table4"]))

    return "".join(parts)


def _mismatches(res) -> pd.DataFrame:
    return pd.DataFrame([row for rep in res.replays for row in mismatch_rows(rep)],
                        columns=["folder", "run_id", "call", "kind", "agent", "scope", "query", "error", "logged",
                                 "replayed"])


register(Table("table4", "table4.csv", lambda res: exposure_table(res.runs, res.replays), table4_section,
               prereg=("exposure_audit",), order=60))
register(Table("replay_mismatches", "replay_mismatches.csv", _mismatches, order=61))
