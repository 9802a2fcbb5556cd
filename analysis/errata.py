"""Every table under the official and under the corrected gold (`make analyze errata=FILE`).

The errata file (harness/data/errata.py) corrects some questions' gold. Under the corrected gold:
a question with a corrected answer takes its correctness from the judgements made against that
answer (`make judge ... errata=FILE` writes judgements/<judge>.errata-<sha12>.jsonl; a run not yet
judged so is left out and counted); an excluded question is left out of every table; a question
whose evidence is disputed is left out of the evidence-hit rates. The Org private variant keeps its
correctness (it asks whether the answer declines, not for the gold). Every table is built again on
the corrected runs into `corrected/` beside the official results, and errata_conclusions.csv says
which conclusion changes.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import conclusions as C
from analysis.load import _label_of
from harness.data.errata import Errata
from harness.records.ledger import read_lines
from harness.records.schema import RecordError, parse

AFFECTED_COLUMNS = ("folder", "qid", "action", "runs", "official_correct", "corrected_correct", "corrected_unjudged",
                    "changed_labels", "source")


def _lines(folder, name: str) -> dict[tuple[str, str], dict]:
    path = folder.path / "judgements" / f"{name}.jsonl"
    out = {}
    for i, obj in read_lines(path)[0]:
        try:
            j = parse("judgement", obj, path, i).model_dump(mode="json")
        except RecordError:
            continue
        out[(j["run_id"], j["kind"])] = j
    return out


def data_path(folder) -> str | None:
    return (folder.info.get("data") or {}).get("path")


def data_sha256(folder) -> str | None:
    """The sha256 of the data file the stage ran on (recorded in its stage.json): what `applies_to` matches."""
    return (folder.info.get("data") or {}).get("sha256")


def not_applied(res: Any, er: Errata) -> list[str]:
    """'org/org (longmemeval_org.json, sha256 0123456789ab)' for each folder with runs whose data the errata is
    not about."""
    return [f"{f.name} ({Path(str(data_path(f) or '?')).name}, sha256 {str(data_sha256(f) or '?')[:12]})"
            for f in res.folders if f.records and not er.applies(data_sha256(f))]


def corrected_runs(res: Any, er: Errata) -> tuple[pd.DataFrame, list[dict]]:
    """res.runs under the corrected gold, and one row per (folder, corrected question) it touched."""
    runs = res.runs.copy()
    keep = pd.Series(True, index=runs.index)
    affected = []
    for f in res.folders:
        if not er.applies(data_sha256(f)):
            continue  # data with another content (applies_to): its questions keep the official gold
        lines = _lines(f, er.judgements_name(f.judge)) if f.judge else {}
        for qid, e in sorted(er.entries.items()):
            sel = (runs["folder"] == f.name) & (runs["qid"] == qid)
            if not sel.any():
                continue
            before = runs.loc[sel, "correct"].copy()
            if e.action == "exclude":
                keep &= ~sel
            elif e.action == "evidence":
                runs.loc[sel, ["ev_first", "ev_any"]] = math.nan
            else:
                for i in runs.index[sel & (runs["variant"] != "private")]:
                    j = lines.get((runs.at[i, "run_id"], "correct"))
                    runs.at[i, "correct"] = 0.0 if runs.at[i, "status"] != "ok" else (
                        math.nan if j is None else _label_of({}, j)[0])
            after = runs.loc[sel, "correct"]
            excluded = e.action == "exclude"
            affected.append({
                "folder": f.name, "qid": qid, "action": e.action, "runs": int(sel.sum()),
                "official_correct": int((before == 1).sum()),
                "corrected_correct": 0 if excluded else int((after == 1).sum()),
                "corrected_unjudged": 0 if excluded else int((after.isna() & before.notna()).sum()),
                "changed_labels": 0 if excluded else int(((after != before) & after.notna() & before.notna()).sum()),
                "source": e.source})
    return runs[keep].reset_index(drop=True), affected


def corrected(res: Any) -> Any:
    """The Results of every table on the corrected runs (built once; written to corrected/)."""
    def make():
        er = res.errata
        runs, affected = corrected_runs(res, er)
        alt = dataclasses.replace(res, runs=runs, tables={}, outcomes=[], figures={}, notes=[], _memo={},
                                  errata=None, corrected_by=er, gold=f"corrected: {er.name} {er.version} (sha256 {er.sha256[:16]})",
                                  command=res.command + " [every table under the corrected gold]")
        from analysis import tables as registry

        for t in registry.tables():
            alt.table(t.name)
        return alt, affected

    return res.memo("corrected", make)


def affected_frame(res: Any) -> pd.DataFrame:
    if res.errata is None:
        return pd.DataFrame(columns=list(AFFECTED_COLUMNS))
    return pd.DataFrame(corrected(res)[1], columns=list(AFFECTED_COLUMNS))


def conclusions_frame(res: Any) -> pd.DataFrame:
    """Every conclusion under the official and the corrected gold, and whether it changes."""
    if res.errata is None:
        return pd.DataFrame(columns=[*C.COLUMNS, "robust"])
    alt, _ = corrected(res)
    rows = [{**r, "main": True} for r in C.conclusions(res, res.runs, "official gold", outcomes=C.main_outcomes(res))]
    rows += [{**r, "against": "official gold"}
             for r in C.conclusions(res, alt.runs, "corrected gold", outcomes=C.main_outcomes(alt))]
    df = pd.DataFrame(rows, columns=list(C.COLUMNS))
    df["robust"] = df["conclusion"].map(C.compare_verdicts(df).set_index("conclusion")["robust"])
    return df
