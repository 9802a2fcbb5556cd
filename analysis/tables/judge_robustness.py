"""Each conclusion under each judge: does it hold under every judge that graded the stage, or flip?

When a stage folder has judgements from more than one judge (another model's file, `make
agreement`'s second judge, or one file holding two prompt sources: analysis.load.judge_variants),
every pre-registered hypothesis that reads judgements and every paired accuracy comparison is
recomputed with each judge's labels (analysis/conclusions.py): a run counts under a judge only if
that judge labelled it (a failed run is wrong under a judge that wrote its `failed_run` line), so
a second judge that graded a sample is compared on its sample and the row says how many. The
judge-free tests (ratios of calls, tokens, time; the backend study) cannot change and are not
repeated. Exploratory: not in the pre-registration file.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis import conclusions as C
from analysis.load import _label_of, judge_variants
from analysis.markdown import DASH, ci, integer, link, md_table
from analysis.tables import Table, register

COLUMNS = (*C.COLUMNS, "robust")
MAIN = "main"


def variants(res: Any) -> dict[str, dict[str, dict]]:
    """judge label -> folder name -> its (run_id, kind) -> judgement, for every judge other than a
    folder's main one (a variant identical to the main judge's labels is the main judge)."""
    def make() -> dict:
        out: dict[str, dict[str, dict]] = {}
        for f in res.folders:
            if not f.records or not f.judge:
                continue
            for label, lines in judge_variants(f).items():
                if {k: v.get("label") for k, v in lines.items()} == {k: v.get("label") for k, v in f.judgements.items()}:
                    continue
                out.setdefault(label, {})[f.name] = lines
        return out

    return res.memo("judge_variants", make)


def runs_under(res: Any, by_folder: dict[str, dict]) -> pd.DataFrame:
    """res.runs with correct and leak from one judge's lines; NaN where that judge gave no label."""
    runs = res.runs.copy()
    correct, leak = [], []
    for r in runs.itertuples():
        lines = by_folder.get(r.folder) or {}
        out = []
        for kind in ("correct", "leak"):
            if kind == "leak" and r.variant != "private":
                out.append(math.nan)
                continue
            j = lines.get((r.run_id, kind))
            if j is not None and j.get("status") == "failed_run":
                out.append(0.0)
            elif j is not None and r.status == "ok":
                out.append(_label_of({}, j)[0])
            else:
                out.append(math.nan)
        correct.append(out[0])
        leak.append(out[1])
    runs["correct"], runs["leak"] = correct, leak
    return runs


def _build(res: Any) -> pd.DataFrame:
    vs = variants(res)
    if not vs:
        return pd.DataFrame(columns=list(COLUMNS))
    mains = sorted({f.judge for f in res.folders if f.judge})
    rows = C.conclusions(res, res.runs, MAIN + f" ({', '.join(mains)})", main=True)
    for label in sorted(vs):
        rows += C.conclusions(res, runs_under(res, vs[label]), label)
    df = pd.DataFrame(rows, columns=list(C.COLUMNS))
    verdicts = C.compare_verdicts(df).set_index("conclusion")["robust"]
    df["robust"] = df["conclusion"].map(verdicts)
    return df


def flips(res: Any) -> list[str]:
    """'H1c flips under deepseek' lines for the report's summary and the command's output."""
    t = res.table("judge_robustness")
    if t.empty:
        return []
    s = t.drop_duplicates("conclusion")
    return [f"{r.conclusion}: {r.robust}" for r in s.itertuples() if str(r.robust).startswith("flips")]


def section(res: Any) -> str:
    t = res.table("judge_robustness")
    head = (f"\n## Conclusions under each judge\n\n{link('judge_robustness.csv')}; status: *exploratory* (not in "
            "the pre-registration file; the tests it repeats are). Every hypothesis that "
            "reads judgements and every paired accuracy comparison, recomputed with each judge's labels (a judge "
            "model or prompt source); a judge counts only the runs it labelled (n). A conclusion flips when another "
            "judge decides it differently; comparisons: a > b / a < b when the 95% interval excludes 0.\n\n")
    if t.empty:
        return head + "One judge per folder: nothing to compare (a second judge: `make agreement` or `make judge judge=...`).\n"
    labels = list(dict.fromkeys(t["labels"]))
    rows = []
    for cid, g in t.groupby("conclusion", sort=False):
        cells = []
        for lab in labels:
            x = g[g["labels"] == lab]
            if x.empty:
                cells.append(DASH)
                continue
            eff = "; ".join(f"{ci(r.estimate, r.lo, r.hi, 1, True) if r.estimate == r.estimate else DASH} "
                            f"(n={integer(r.n)})" for r in x.itertuples())
            cells.append(f"{x['verdict'].iloc[0]}: {eff}")
        robust = g["robust"].iloc[0]
        rows.append([cid, *cells, f"**{robust}**" if str(robust).startswith("flips") else robust])
    return head + md_table(["conclusion", *labels, "robust"], rows) + "\n"


register(Table("judge_robustness", "judge_robustness.csv", _build, section, prereg=("judge_robustness",), order=54,
               columns=COLUMNS))
