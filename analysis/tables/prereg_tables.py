"""Table 3: every pre-registered test and its outcome, its components, and what the file does not pre-specify."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from analysis.markdown import (DASH, ESTIMATED, ci, estimated, estimated_calls, estimated_note, integer, is_missing,
                               link, md_table, num, pval)

USAGE_TEST = re.compile(r"\b(tokens?|cost)\b")  # a component whose estimate is a ratio of tokens or costs
from analysis.tables import Table, register


def table3_section(t3: pd.DataFrame, comps: pd.DataFrame, expl: pd.DataFrame) -> str:
    def origin(source: str, quote: Any, why: Any) -> str:  # "paper: “…”" / "reconstructed: why"
        text = "; ".join(x for x in ((f"“{quote}”" if isinstance(quote, str) and quote else ""),
                                     (why if isinstance(why, str) else "")) if x)
        return f"{source}: {text}" if text else str(source)

    rows = []
    for _, r in t3.iterrows():
        est = DASH if is_missing(r["estimate"]) else estimated(ci(r["estimate"], r["lo"], r["hi"], 3), r.get(ESTIMATED))
        rows.append([r["id"], r["family"], r["tests"], r["threshold_source"], r["folders"] or DASH, integer(r["n"]),
                     est, pval(r["p"]), pval(r["p_holm"]) if r["in_holm"] else DASH, f"**{r['outcome']}**",
                     r["status"] + (f" ({r['reason']})" if r["reason"] else "")])
    out = md_table(["id", "family", "rule", "threshold from", "folders", "n", "estimate [95% CI]", "p", "p (Holm)",
                    "outcome", "status"], rows) + "\n" + estimated_note(estimated_calls(t3))
    out += "\n" + "\n".join(f"- **{r['id']}**: {r['statement']} (hypothesis from "
                            f"{origin(r['hypothesis_source'], r['hypothesis_quote'], r['hypothesis_why'])})"
                            for _, r in t3.iterrows()) + "\n"
    crow = []
    for _, c in comps.iterrows():
        crow.append([f"{c['id']}.{int(c['component'])}", c["test"], c["folder"] or DASH, integer(c["n"]),
                     DASH if is_missing(c["estimate"]) else estimated(ci(c["estimate"], c["lo"], c["hi"], 3),
                                                                      c.get(ESTIMATED)),
                     num(c["threshold"], 3), c["threshold_source"], pval(c["p"]),
                     DASH if is_missing(c["holds"]) else ("holds" if c["holds"] else "does not hold"),
                     "; ".join(x for x in (c["note"], c["error"]) if isinstance(x, str) and x)])
    out += "\nComponents (" + link("table3_components.csv") + "):\n\n" + md_table(
        ["test", "rule", "folder", "n", "estimate [95% CI]", "threshold", "threshold from", "p", "result", "note"],
        crow) + "\n" + estimated_note(estimated_calls(comps))
    out += ("\nWhere each threshold comes from (paper: the paper's words; reconstructed: our choice):\n\n"
            + "\n".join(f"- {c['id']}.{int(c['component'])} {c['test']}: "
                         f"{origin(c['threshold_source'], c['threshold_quote'], c['threshold_why'])}"
                         for _, c in comps.iterrows() if c["threshold_source"] != "none") + "\n")
    if expl is not None and not expl.empty:
        erow = []
        for _, e in expl.iterrows():
            if e["analysis"] == "comparison":
                what = f"{e['a']} vs {e['b']} ({e['folder']}{' ' + e['variant'] if e['variant'] else ''})"
                res = (f"Δ acc {ci(e['acc_diff_pts'], e['acc_diff_lo'], e['acc_diff_hi'], 1, True)} pts, "
                       f"McNemar p {pval(e['mcnemar_p'])}; tokens "
                       f"{estimated(ci(e['tokens_ratio'], e['tokens_ratio_lo'], e['tokens_ratio_hi']), e.get(ESTIMATED))}×")
            else:
                what, res = e["analysis"], "descriptive"
            erow.append([what, res, f"{e['status']} ({e['reason']})"])
        out += "\nAnalyses not in the pre-registration file (" + link("table3_exploratory.csv") + "):\n\n" + md_table(
            ["analysis", "result", "status"], erow) + "\n" + estimated_note(estimated_calls(expl))
    return out


def table3_report(res) -> str:
    """Table 3 with the file's settings."""
    t = res.tables
    parts: list[str] = []
    # Table 3
    parts.append("\n## Table 3: pre-registered tests and outcomes\n\n")
    parts.append(f"{link('table3.csv')}. Rules from `{res.prereg.path.name}` (sha256 `{res.prereg.sha256[:16]}`); "
                 f"alpha {res.prereg.settings['alpha']}, seed {res.prereg.settings['seed']}, "
                 f"{int(res.prereg.settings['primary_resamples']):,} resamples for primary and "
                 f"{int(res.prereg.settings['resamples']):,} for secondary tests; Holm over "
                 f"{', '.join(res.prereg.settings.get('holm_family') or [])}. A test is confirmatory only if its "
                 "stage recorded this file's sha256 before its first model call.\n\n")
    parts.append(table3_section(t["table3"], t["table3_components"], t["table3_exploratory"]))
    from analysis.tables.judge_robustness import flips

    ids = set(t["table3"]["id"]) if not t["table3"].empty else set()
    mine = [x for x in flips(res) if x.split(":")[0] in ids]
    if mine:
        parts.append("\n**Outcomes that flip under another judge** (see *Conclusions under each judge*): "
                     + "; ".join(mine) + ".\n")

    return "".join(parts)


def _outcomes(res) -> list:
    from analysis import prereg as P

    def run() -> list:
        res.outcomes = P.evaluate(res.prereg, P.Context(res.runs, res.folders, res.table("table4"), res.first_calls))
        return res.outcomes

    return res.memo("outcomes", run)


def _table3(res) -> pd.DataFrame:
    from analysis import prereg as P

    t = P.table3(_outcomes(res), res.prereg)
    if not t.empty:  # a test's calls of estimated usage: those of its token or cost components
        t[ESTIMATED] = t["id"].map(res.table("table3_components").groupby("id")[ESTIMATED].sum()).fillna(0).astype(int)
    return t


def _components(res) -> pd.DataFrame:
    """The components; a token or cost component counts the calls of estimated usage in the runs of its folders."""
    from analysis import prereg as P

    c = P.components_table(_outcomes(res))
    if not c.empty:
        runs = res.runs
        c[ESTIMATED] = [
            estimated_calls(runs[runs["folder"].isin(set(re.split(r"[;,+ ]+", str(f or ""))))])
            if USAGE_TEST.search(str(test)) else 0 for test, f in zip(c["test"], c["folder"])]
    return c


def _exploratory(res) -> pd.DataFrame:
    from analysis import prereg as P
    from analysis.tables import analyses_present

    return P.exploratory_rows(res.table("comparisons"), res.folders, res.prereg, analyses_present(res))


register(Table("table3", "table3.csv", _table3, table3_report, order=50))
register(Table("table3_components", "table3_components.csv", _components, order=51))
register(Table("table3_exploratory", "table3_exploratory.csv", _exploratory, order=52))
