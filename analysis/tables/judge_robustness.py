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


def runs_under(res: Any, by_folder: dict[str, dict], judge: str = "") -> pd.DataFrame:
    """res.runs with correct and leak from one judge's lines; NaN where that judge gave no label.
    Under a corrected gold (res.corrected_by) a corrected question takes the label this judge gave
    against the corrected answer (its <judge>.errata-<sha>.jsonl), NaN when it has none."""
    runs = res.runs.copy()
    er = getattr(res, "corrected_by", None)
    fixed = er.answers() if er is not None else {}
    against: dict[str, dict] = {}
    if fixed and judge:
        from analysis.errata import _lines

        name = er.judgements_name(judge.split(" [")[0])
        against = {f.name: _lines(f, name) for f in res.folders if (f.path / "judgements" / f"{name}.jsonl").exists()}
    correct, leak = [], []
    for r in runs.itertuples():
        lines = by_folder.get(r.folder) or {}
        if r.qid in fixed and r.variant != "private":
            lines = {**lines, (r.run_id, "correct"): (against.get(r.folder) or {}).get((r.run_id, "correct"))}
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


def overlap(main: pd.DataFrame, other: pd.DataFrame, folders: set) -> str:
    """'12 of 40 labels' the other judge gave among those the main judge gave in these folders."""
    sel = main["folder"].isin({f for f in folders if f})
    k = m = 0
    for col in ("correct", "leak"):
        has = main.loc[sel, col].notna()
        m += int(has.sum())
        k += int((has & other.loc[sel, col].notna()).sum())
    return f"{k} of {m} labels"


def _build(res: Any) -> pd.DataFrame:
    """The main judge's rows; per other judge its rows, each against the main judge on the runs that
    judge labelled (the main rows themselves when it labelled every run the main judge did)."""
    vs = variants(res)
    if not vs:
        return pd.DataFrame(columns=list(COLUMNS))
    mains = sorted({f.judge for f in res.folders if f.judge})
    main_label = MAIN + f" ({', '.join(mains)})"
    main_rows = C.conclusions(res, res.runs, main_label, main=True)
    rows = list(main_rows)
    for label in sorted(vs):
        other = runs_under(res, vs[label], label)
        same = res.runs.copy()
        for col in ("correct", "leak"):
            same.loc[other[col].isna(), col] = math.nan
        if all((same[c].notna() == res.runs[c].notna()).all() for c in ("correct", "leak")):
            ref_label, ref_rows = main_label, main_rows
        else:
            ref_label = f"{main_label} on {label}'s runs"
            ref_rows = C.conclusions(res, same, ref_label)
            rows += ref_rows
        chances = C.chance_of_flips(res, same, other, key=label)
        mine = C.conclusions(res, other, label)
        used: dict[str, set] = {}
        for x in mine:
            used.setdefault(x["conclusion"], set()).add(x["folder"])
        for x in mine:
            x["against"] = ref_label
            x["overlap"] = overlap(res.runs, other, used[x["conclusion"]])
            x["p_chance"], x["p_chance_se"], x["chance_rate"] = chances.get(x["conclusion"], (math.nan, math.nan, ""))
            rows.append(x)
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


def checks_line(res: Any) -> str:
    t = res.table("judge_robustness")
    return C.summary(C.compare_verdicts(t), "judges") if not t.empty else ""


def section(res: Any) -> str:
    t = res.table("judge_robustness")
    head = (f"\n## Conclusions under each judge\n\n{link('judge_robustness.csv')}; status: *exploratory* (not in "
            "the pre-registration file; the tests it repeats are). Every hypothesis that "
            "reads judgements and every paired accuracy comparison, recomputed with each judge's labels (a judge "
            "model or prompt source); a judge counts only the runs it labelled (n). A conclusion flips when another "
            "judge decides it differently from the main judge *on the runs it graded* (a judge that graded a sample "
            "is set against the main judge on that sample: the column `… on X's runs`); a check with a verdict "
            "undecided on either side is not comparable and shows its overlap. Comparisons: a > b / a < b when the "
            "95% interval excludes 0. The chance of a flip (`p_chance`, ± `p_chance_se`) is the registered rule run on "
            f"{C.CHANCE_SIMS} seeded relabellings of the labels that conclusion reads, each kind (correct, leak) at the "
            "other judge's observed disagreement on exactly those labels (`chance_rate`), decided at the registered "
            "resamples on the same bootstrap draw as the reported verdict, which is the reference.\n\n")
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
    return head + md_table(["conclusion", *labels, "robust"], rows) + "\n\n" + checks_line(res) + "\n"


register(Table("judge_robustness", "judge_robustness.csv", _build, section, prereg=("judge_robustness",), order=54,
               columns=COLUMNS))
