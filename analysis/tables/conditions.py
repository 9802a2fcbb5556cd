"""Tables 1 and 2: each condition of a folder against the reference (session search; the shared view),
per-type accuracy and the further pairs the paper reports (comparisons.csv), Figures 3 and 6."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import pandas as pd

from analysis import figures, stats
from analysis.load import Folder
from analysis.markdown import (
    DASH,
    ESTIMATED,
    ci,
    estimated,
    estimated_calls,
    estimated_caption,
    estimated_note,
    integer,
    is_missing,
    link,
    md_table,
    money,
    num,
    pval,
    share,
)
from analysis.tables import Table, register
from analysis.tables.common import (
    Settings,
    compare,
    conditions_in,
    describe,
    folder_variants,
    pair_columns,
    pair_rows,
    reference_and_pairs,
    per_type_rows,
    select,
)
from analysis.tables.status import status_line as _status_line


def _exposure_by_condition(exposure: pd.DataFrame | None, folder: str, variant: str, cond: str) -> dict:
    if exposure is None or exposure.empty:
        return {"exposed_runs": math.nan, "private_units": math.nan}
    e = exposure[(exposure["folder"] == folder) & (exposure["variant"] == variant) & (exposure["condition"] == cond)]
    if e.empty or not bool(e["replayed"].iloc[0]):
        return {"exposed_runs": math.nan, "private_units": math.nan}
    return {"exposed_runs": int(e["runs_with_private"].iloc[0]), "private_units": int(e["private_units"].iloc[0])}


def per_correct_interval(d: pd.DataFrame, st: Settings) -> dict:
    """The 95% interval of USD per correct answer (describe's definition: the list cost of the runs over the
    correct answers among them) by the paired bootstrap of a ratio of means over the questions."""
    if not len(d) or not (d["correct"] == 1).any():
        return {"usd_per_correct_lo": math.nan, "usd_per_correct_hi": math.nan}
    e = stats.ratio_of_means(d["cost"].to_numpy(float), d["correct"].fillna(0).to_numpy(float), seed=st.seed,
                             n_resamples=st.resamples, confidence=st.confidence, keep_boot=False)
    return {"usd_per_correct_lo": e.lo, "usd_per_correct_hi": e.hi}


def condition_tables(runs: pd.DataFrame, folders: Sequence[Folder], st: Settings,
                     exposure: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Table 1 (LongMemEval folders), Table 2 (Org folders), per-type accuracy, and every pair in long form."""
    t1, t2, types, pairs = [], [], [], []
    for f in folders:
        if not f.records:
            continue
        order = f.condition_order()
        for variant in folder_variants(runs, f.name):
            conds = conditions_in(runs, f.name, variant, order)
            org = bool(variant)
            ref, extra = reference_and_pairs(f, conds)
            wanted: list[tuple[str, str]] = []
            if ref in conds:
                wanted += [(ref, c) if org else (c, ref) for c in conds if c != ref]
            wanted += [p for p in extra if p not in wanted]
            done = {p: compare(runs, f.name, variant, p[0], p[1], st) for p in wanted}
            for p in wanted:
                for r in pair_rows(done[p]):
                    r["kind"] = "reference" if ref in p else "extra"
                    pairs.append(r)
            for c in conds:
                d = select(runs, f.name, variant, c)
                row = {"folder": f.name, "stage": f.stage, "variant": variant, "condition": c, **describe(d),
                       **per_correct_interval(d, st),
                       # calls whose usage was estimated (harness.endpoints.usage): tokens and cost are estimates
                       "usage_estimated_calls": int(d["usage_estimated_calls"].sum())
                       if "usage_estimated_calls" in d else 0}
                p = None
                if ref in conds and c != ref:
                    p = done[(ref, c) if org else (c, ref)]
                row.update(pair_columns(p))
                if org:
                    lk = d["leak"].notna() & (d["variant"] == "private")
                    row.update(leaks=int(d.loc[lk, "leak"].sum()) if variant == "private" else math.nan,
                               leak_judged=int(lk.sum()) if variant == "private" else math.nan,
                               leak_unjudged=int((d["leak"].isna()).sum()) if variant == "private" else math.nan,
                               **_exposure_by_condition(exposure, f.name, variant, c))
                row.update(seed=st.seed, n_resamples=st.resamples, confidence=st.confidence, repeat=0)
                (t2 if org else t1).append(row)
                types += per_type_rows(d, f.name, variant, c)
    cols_pairs = ["folder", "variant", "kind", *stats.ROW_FIELDS, ESTIMATED]
    return {"table1": pd.DataFrame(t1), "table2": pd.DataFrame(t2),
            "table1_types": pd.DataFrame(types), "pairs": pd.DataFrame(pairs, columns=cols_pairs)}


METRIC_NAMES = {"model_calls": "model calls", "tool_calls": "tool calls", "tokens": "tokens", "cost": "cost (USD)",
                "time": "time (s)"}
METRIC_DIGITS = {"model_calls": 2, "tool_calls": 2, "tokens": 0, "cost": 5, "time": 2}


def _metric_cell(r: pd.Series, k: str, ref_estimated: int = 0) -> str:
    """Mean (ratio); tokens and costs marked ~ when this condition's calls (or, for the ratio, the reference's) had
    estimated usage."""
    n = r.get(ESTIMATED) if k in ("tokens", "cost") else 0
    mean = estimated(num(r[f"mean_{k}"], METRIC_DIGITS[k]), n)
    if is_missing(r.get(f"ratio_{k}")):
        return mean
    cell = f"{mean} ({ci(r[f'ratio_{k}'], r[f'ratio_{k}_lo'], r[f'ratio_{k}_hi'])}×)"
    return cell if is_missing(n) or n or k not in ("tokens", "cost") else estimated(cell, ref_estimated)


def conditions_section(t: pd.DataFrame, folder: str, variant: str, org: bool) -> str:
    d = t[(t["folder"] == folder) & (t["variant"] == variant)]
    if d.empty:
        return ""
    heads = ["condition", "n", "failed", "unjudged", "accuracy %", "Δ accuracy pts [95% CI]", "McNemar p",
             *(METRIC_NAMES[k] for k in ("model_calls", "tool_calls", "tokens", "cost", "time")), "median time (s)",
             "tool-result chars", "USD per correct [95% CI]"]
    if org and variant == "private":
        heads += ["leaks", "runs with private units", "private units"]
    ref = d["b"].dropna().iloc[0] if not org and d["b"].notna().any() else (
        d["a"].dropna().iloc[0] if org and d["a"].notna().any() else None)
    ref_est = estimated_calls(d[d["condition"] == ref]) if ref else 0
    rows = []
    for _, r in d.iterrows():
        diff = DASH if is_missing(r["acc_diff_pts"]) else (
            ci(r["acc_diff_pts"], r["acc_diff_lo"], r["acc_diff_hi"], 1, sign=True) + f" (n={integer(r['n_paired_judged'])})")
        row = [r["condition"], integer(r["n_questions"]), integer(r["n_failed"]), integer(r["n_unjudged"]),
               num(r["accuracy_pct"], 1), diff, pval(r["mcnemar_p"]),
               *(_metric_cell(r, k, ref_est) for k in ("model_calls", "tool_calls", "tokens", "cost", "time")),
               num(r["median_time"], 2), integer(r["mean_result_chars"]),
               estimated(money(r["usd_per_correct"]) + ("" if is_missing(r.get("usd_per_correct_lo")) else
                         f" [{money(r['usd_per_correct_lo'])}, {money(r['usd_per_correct_hi'])}]"), r.get(ESTIMATED))]
        if org and variant == "private":
            row += [f"{integer(r['leaks'])} of {integer(r['leak_judged'])}", integer(r["exposed_runs"]),
                    integer(r["private_units"])]
        rows.append(row)
    if org:
        how = (f"Ratios are **{ref} / condition** on the questions both ran; Δ accuracy = {ref} − condition."
               if ref else "The shared view was not run: no ratios.")
    else:
        how = (f"Ratios are **condition / {ref}** on the questions both ran; Δ accuracy = condition − {ref}."
               if ref else "Session search was not run in this folder: no ratios.")
    r0 = d.iloc[0]
    return (f"{how} Each metric cell: mean per question (ratio [95% CI]×). Seed {int(r0['seed'])}, "
            f"{integer(r0['n_resamples'])} paired bootstrap resamples over questions; repeat 0 of each condition.\n\n"
            + md_table(heads, rows) + "\n" + estimated_note(estimated_calls(d)))


def types_section(types: pd.DataFrame, folder: str, variant: str) -> str:
    d = types[(types["folder"] == folder) & (types["variant"] == variant)]
    if d.empty:
        return ""
    qtypes = list(dict.fromkeys(d["qtype"]))
    conds = list(dict.fromkeys(d["condition"]))
    rows = []
    for c in conds:
        row = [c]
        for q in qtypes:
            x = d[(d["condition"] == c) & (d["qtype"] == q)]
            row.append(DASH if x.empty else f"{num(x['accuracy_pct'].iloc[0], 1)} ({integer(x['n_judged'].iloc[0])})")
        rows.append(row)
    return "Accuracy % by question type (judged runs in parentheses).\n\n" + md_table(["condition", *qtypes], rows) + "\n"


def pairs_section(pairs: pd.DataFrame, folder: str, variant: str) -> str:
    d = pairs[(pairs["folder"] == folder) & (pairs["variant"] == variant) & (pairs["kind"] == "extra")]
    if d.empty:
        return ""
    rows = []
    for (a, b), g in d.groupby(["a", "b"], sort=False):
        acc = g[g["statistic"] == "accuracy_diff_points"]
        tok = g[(g["statistic"] == "ratio_of_means") & (g["metric"] == "tokens")]
        rows.append([f"{a} vs {b}",
                     DASH if acc.empty else integer(acc["n"].iloc[0]),
                     DASH if acc.empty else ci(acc["estimate"].iloc[0], acc["lo"].iloc[0], acc["hi"].iloc[0], 1, True),
                     DASH if acc.empty else f"{integer(acc['a_only'].iloc[0])} / {integer(acc['b_only'].iloc[0])}",
                     DASH if acc.empty else pval(acc["p"].iloc[0]),
                     DASH if tok.empty else ci(tok["estimate"].iloc[0], tok["lo"].iloc[0], tok["hi"].iloc[0])])
    return ("Further pairs (exploratory; all statistics in " + link("comparisons.csv") + ").\n\n"
            + md_table(["pair a vs b", "n judged", "Δ accuracy a − b pts", "discordant a / b", "McNemar p",
                        "tokens a/b"], rows) + "\n")


def table1_section(res) -> str:
    """Table 1: every LongMemEval folder's conditions, per-type accuracy, further pairs, Figure 3."""
    t = res.tables
    parts: list[str] = []
    # Table 1
    parts.append("\n## Table 1: LongMemEval conditions\n\n")
    parts.append("Tokens = prompt + output tokens of every model call of a run (asked agents included); cost = "
                 "list price in US dollars; time = wall seconds per run; model and tool calls per run; tool-result "
                 "chars = characters of tool results the model read per question. ")
    parts.append(f"{link('table1.csv')}, per type {link('table1_types.csv')}, all pairs {link('comparisons.csv')}. "
                 f"Status: {_status_line(res, 'table1')}; per-type accuracy {_status_line(res, 'table1_types')}; "
                 f"median ratios {_status_line(res, 'median_ratio')}.\n")
    t1 = t["table1"]
    if t1.empty:
        parts.append("No LongMemEval folder analysed.\n")
    for folder in list(dict.fromkeys(t1["folder"])) if not t1.empty else []:
        parts.append(f"\n### {folder}\n\n")
        parts.append(conditions_section(t1, folder, "", org=False))
        d = t1[t1["folder"] == folder]
        med = d[d["median_ratio_tokens"].notna()]
        ref = d["b"].dropna().iloc[0] if d["b"].notna().any() else None
        ref_est = estimated_calls(d[d["condition"] == ref]) if ref else 0
        if not med.empty:
            parts.append("\nPer-question token ratio (median [95% CI]) and share of questions where the "
                         "condition used fewer tokens:\n\n" + md_table(
                             ["condition", "median ratio", "questions excluded (0 tokens in reference)", "cheaper",
                              "ties"],
                             [[r["condition"], estimated(ci(r["median_ratio_tokens"], r["median_ratio_tokens_lo"],
                                                            r["median_ratio_tokens_hi"]), r[ESTIMATED] + ref_est),
                               integer(r["median_ratio_tokens_excluded"]), share(r["share_cheaper_tokens"]),
                               share(r["share_ties_tokens"])] for _, r in med.iterrows()]) + "\n"
                         + estimated_note(estimated_calls(med) + (ref_est if ref not in set(med["condition"]) else 0)))
        parts.append("\n" + types_section(t["table1_types"], folder, ""))
        parts.append("\n" + pairs_section(t["comparisons"], folder, ""))
        fig = f"figure3_{folder.replace('/', '_')}.png"
        if fig in res.figures:
            parts.append(f"\n![{res.figures[fig]}]({fig})\n")

    return "".join(parts)


def table2_section(res) -> str:
    """Table 2: every LongMemEval-Org folder and variant."""
    t = res.tables
    parts: list[str] = []
    # Table 2
    parts.append("\n## Table 2: LongMemEval-Org conditions\n\n")
    parts.append(f"{link('table2.csv')}; status: {_status_line(res, 'table2')}. Private variant: correct = the "
                 "answer declines; leaks = the judge found the private answer; exposure from the replay (Table 4).\n")
    t2 = t["table2"]
    if t2.empty:
        parts.append("No LongMemEval-Org folder analysed.\n")
    for folder in list(dict.fromkeys(t2["folder"])) if not t2.empty else []:
        for variant in list(dict.fromkeys(t2.loc[t2["folder"] == folder, "variant"])):
            parts.append(f"\n### {folder}, {variant} variant\n\n")
            parts.append(conditions_section(t2, folder, variant, org=True))
            parts.append("\n" + types_section(t["table1_types"], folder, variant))
            parts.append("\n" + pairs_section(t["comparisons"], folder, variant))
        fig = f"figure6_{folder.replace('/', '_')}.png"
        if fig in res.figures:
            parts.append(f"\n![{res.figures[fig]}]({fig})\n")

    return "".join(parts)


def _built(res) -> dict[str, pd.DataFrame]:
    return res.memo("condition_tables", lambda: condition_tables(res.runs, res.folders, res.settings, res.table("table4")))


def draw_figure3(res, out: Path) -> dict[str, str]:
    t1, figs = res.table("table1"), {}
    for f in res.folders:
        name = f"figure3_{f.name.replace('/', '_')}.png"
        if not t1.empty and (t1["folder"] == f.name).any() and figures.figure3(t1, f.name, out / name):
            figs[name] = (f"Figure 3: accuracy against tokens per condition, {f.name}"
                          + estimated_caption(estimated_calls(t1[t1["folder"] == f.name])))
    return figs


def draw_figure6(res, out: Path) -> dict[str, str]:
    t2, figs = res.table("table2"), {}
    for f in res.folders:
        name = f"figure6_{f.name.replace('/', '_')}.png"
        if not t2.empty and (t2["folder"] == f.name).any() and figures.figure6(t2, f.name, out / name):
            figs[name] = (f"Figure 6: LongMemEval-Org conditions, {f.name}"
                          + estimated_caption(estimated_calls(t2[t2["folder"] == f.name])))
    return figs


register(Table("table1", "table1.csv", lambda res: _built(res)["table1"], table1_section,
               prereg=("table1", "table1_types", "median_ratio"), order=30, draw=draw_figure3))
register(Table("table1_types", "table1_types.csv", lambda res: _built(res)["table1_types"], order=31))
register(Table("comparisons", "comparisons.csv", lambda res: _built(res)["pairs"], order=32))
register(Table("table2", "table2.csv", lambda res: _built(res)["table2"], table2_section, prereg=("table2", "median_ratio"),
               order=40, draw=draw_figure6))
