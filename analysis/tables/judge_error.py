"""Judge error, measured: the judge probe's planted answers (judge/probe.py) against what the judge said.

Per folder, judge and question type: the false-positive rate (planted wrong answers judged correct)
and the false-negative rate (planted right answers judged wrong), each with its 95% Wilson
interval, beside the accuracy the folder reports for that type (the main judge's, every condition,
repeat 0). For the main judge the accuracy is also corrected for both errors (Rogan-Gladen:
(p - FP) / (1 - FP - FN), clipped to [0, 1]) with the range the two intervals allow. Exploratory.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from analysis.load import read_judgements
from analysis.markdown import integer, link, md_table, share
from analysis.tables import Table, register
from analysis.tables.common import QTYPE_ORDER
from analysis.tables.status import status_line

COLUMNS = ("folder", "judge", "main_judge", "qtype", "planted_wrong", "false_positives", "fp_rate", "fp_lo", "fp_hi",
           "planted_right", "false_negatives", "fn_rate", "fn_lo", "fn_hi", "accuracy", "n_judged",
           "accuracy_corrected", "accuracy_corrected_lo", "accuracy_corrected_hi")
ABSTENTION_KINDS = ("confident_answer", "refusal")


def _wilson(k: int, n: int) -> tuple[float, float, float]:
    if n == 0:
        return math.nan, math.nan, math.nan
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return k / n, float(lo), float(hi)


def corrected(p: float, fp: float, fn: float) -> float:
    if any(map(math.isnan, (p, fp, fn))) or 1 - fp - fn <= 0:
        return math.nan
    return min(1.0, max(0.0, (p - fp) / (1 - fp - fn)))


def _probe_lines(folder) -> dict[str, list[dict]]:
    """judge -> its latest probe judgement per planted answer."""
    from judge.probe import RIGHT, SUFFIX

    jdir = folder.path / "judgements"
    out = {}
    for p in sorted(jdir.glob(f"*.{SUFFIX}.jsonl")) if jdir.exists() else []:
        judge = p.name[: -len(f".{SUFFIX}.jsonl")]
        rows = []
        for (rid, kind), j in sorted(read_judgements(folder, p.stem).items()):
            parts = rid.split(".")
            if kind != "correct" or len(parts) < 4 or parts[0] != "probe" or not isinstance(j.get("label"), bool):
                continue
            rows.append({"kind": parts[1], "truth": parts[1] in RIGHT, "label": j["label"], "qtype": j.get("qtype"),
                         "abstention": parts[1] in ABSTENTION_KINDS})
        if rows:
            out[judge] = rows
    return out


def _build(res: Any) -> pd.DataFrame:
    rows = []
    for f in res.folders:
        runs = res.runs[(res.runs["folder"] == f.name) & (res.runs["repeat"] == 0)]
        for judge, lines in _probe_lines(f).items():
            d = pd.DataFrame(lines)
            groups = [(t, d[(d["qtype"] == t) & ~d["abstention"]], runs[(runs["qtype"] == t) & ~runs["abstention"]])
                      for t in [*QTYPE_ORDER, *sorted(set(d["qtype"].dropna()) - set(QTYPE_ORDER))]
                      if ((d["qtype"] == t) & ~d["abstention"]).any()]
            if d["abstention"].any():
                groups.append(("abstention", d[d["abstention"]], runs[runs["abstention"].astype(bool)]))
            groups.append(("all", d, runs))
            for t, g, r in groups:
                wrong, right = g[~g["truth"]], g[g["truth"]]
                fp, fp_lo, fp_hi = _wilson(int(wrong["label"].sum()), len(wrong))
                fn, fn_lo, fn_hi = _wilson(int((~right["label"].astype(bool)).sum()), len(right))
                judged = r["correct"].dropna()
                acc = float(judged.mean()) if len(judged) else math.nan
                main = judge == f.judge
                rows.append({"folder": f.name, "judge": judge, "main_judge": main, "qtype": t,
                             "planted_wrong": len(wrong), "false_positives": int(wrong["label"].sum()),
                             "fp_rate": fp, "fp_lo": fp_lo, "fp_hi": fp_hi, "planted_right": len(right),
                             "false_negatives": int((~right["label"].astype(bool)).sum()), "fn_rate": fn,
                             "fn_lo": fn_lo, "fn_hi": fn_hi, "accuracy": acc, "n_judged": len(judged),
                             "accuracy_corrected": corrected(acc, fp, fn) if main else math.nan,
                             "accuracy_corrected_lo": corrected(acc, fp_hi, fn_lo) if main else math.nan,
                             "accuracy_corrected_hi": corrected(acc, fp_lo, fn_hi) if main else math.nan})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _rate(r, k: str) -> str:
    if r[f"{k}_rate"] != r[f"{k}_rate"]:
        return "–"
    return f"{share(r[f'{k}_rate'])} [{share(r[f'{k}_lo'])}, {share(r[f'{k}_hi'])}]"


def section(res: Any) -> str:
    t = res.table("judge_error")
    head = (f"\n## Judge error (the probe)\n\n{link('judge_error.csv')}; status: "
            f"{status_line(res, 'judge_error') if not t.empty else '*exploratory*'}. `make probe STAGE=...` plants "
            "answers of known correctness built from the stage's own questions (another question's gold, a changed "
            "number or date, a confident answer to an abstention question; the gold restated, reordered or with "
            "extra words; a refusal) and has the judge grade them with the stage's prompts (judge/probe.py; metered "
            "and cached like any judging, in the stage's budget). False positives: planted wrong judged correct; "
            "false negatives: planted right judged wrong; 95% Wilson intervals. For the main judge the accuracy is "
            "corrected for both ((p − FP) / (1 − FP − FN)), with the range the intervals allow.\n\n")
    if t.empty:
        return head + "No probe judgements in these folders (make probe).\n"
    rows = [[r["folder"], r["judge"] + (" (main)" if r["main_judge"] else ""), r["qtype"],
             f"{integer(r['false_positives'])}/{integer(r['planted_wrong'])}", _rate(r, "fp"),
             f"{integer(r['false_negatives'])}/{integer(r['planted_right'])}", _rate(r, "fn"),
             share(r["accuracy"]) + f" (n={integer(r['n_judged'])})",
             "–" if r["accuracy_corrected"] != r["accuracy_corrected"] else
             f"{share(r['accuracy_corrected'])} [{share(r['accuracy_corrected_lo'])}, "
             f"{share(r['accuracy_corrected_hi'])}]"] for _, r in t.iterrows()]
    return head + md_table(["folder", "judge", "type", "FP", "FP rate [95% CI]", "FN", "FN rate [95% CI]",
                            "accuracy (reported)", "accuracy corrected [range]"], rows) + "\n"


register(Table("judge_error", "judge_error.csv", _build, section, prereg=("judge_error",), order=88,
               columns=COLUMNS))
