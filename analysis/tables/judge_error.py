"""Judge error, measured: the judge probe's planted answers (judge/probe.py) against what the judge said.

Per folder, judge and question type: the false-positive rate (planted wrong answers judged correct)
and the false-negative rate (planted right answers judged wrong). Several planted answers come from
one question, so their errors are not independent: each 95% interval is Wilson's on the effective
number of answers (n / design effect, the design effect from the spread of errors across questions;
1 when every question has one answer). Only planted answers that pass the probe's second rule
(judge.probe.check) on the stage's records count. A plain substring matcher graded on the same
answers is listed as a control judge (`substring (control)`): a probe it passes cannot tell a judge
from string matching.

judge_corrected.csv: the main judge's accuracy corrected for both errors (Rogan-Gladen:
(p - FP) / (1 - FP - FN)) per condition and for each paired difference of Tables 1 and 2
((p_a - p_b) / (1 - FP - FN)), each with a 95% percentile interval of a bootstrap that resamples
the runs' questions (the accuracy's own error) and, independently, the probe's questions (the
judge's error). Exploratory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from analysis.load import read_judgements
from analysis.markdown import integer, link, md_table, share
from analysis.tables import Table, register
from analysis.tables.common import QTYPE_ORDER
from analysis.tables.status import status_line

COLUMNS = ("folder", "judge", "main_judge", "qtype", "planted_wrong", "false_positives", "fp_rate", "fp_lo", "fp_hi",
           "planted_right", "false_negatives", "fn_rate", "fn_lo", "fn_hi", "accuracy", "n_judged")
ABSTENTION_KINDS = ("confident_answer", "refusal")


CONTROL = "substring (control)"


def design_effect(k: list[int], n: list[int]) -> float:
    """Variance of the ratio sum(k)/sum(n) across clusters over its binomial variance (>= 1)."""
    k, n = np.asarray(k, float), np.asarray(n, float)
    big_n, q = n.sum(), len(n)
    r = k.sum() / big_n if big_n else math.nan
    if q < 2 or not 0 < r < 1:
        return 1.0
    v_cluster = q / (q - 1) * np.sum((k - r * n) ** 2) / big_n ** 2
    return max(1.0, float(v_cluster / (r * (1 - r) / big_n)))


def _wilson(k: int, n: int, deff: float = 1.0) -> tuple[float, float, float]:
    """(rate, lo, hi): Wilson's 95% interval on n / deff answers."""
    if n == 0:
        return math.nan, math.nan, math.nan
    n_eff = n / deff
    lo, hi = proportion_confint(k / n * n_eff, n_eff, alpha=0.05, method="wilson")
    return k / n, float(lo), float(hi)


def _clustered(g: pd.DataFrame, errors: pd.Series) -> tuple[float, float, float]:
    per = pd.DataFrame({"q": g["qid"].to_numpy(), "e": errors.to_numpy().astype(int)}).groupby("q")["e"]
    return _wilson(int(errors.sum()), len(g), design_effect(per.sum().tolist(), per.size().tolist()))


def planted(folder) -> dict[str, dict]:
    """run id -> planted answer (judge.probe.probe_records) of the stage's records, every one passing the check."""
    from judge.probe import probe_records

    if not folder.records:
        return {}
    return {r["run_id"]: r for r in probe_records(folder.records, int(folder.info.get("seed") or 0))}


def _probe_lines(folder) -> dict[str, list[dict]]:
    """judge -> its latest probe judgement per planted answer that passes the check; and the control."""
    from judge.probe import RIGHT, SUFFIX, substring_judge

    jdir = folder.path / "judgements"
    known = planted(folder)
    out = {}
    graded: set[str] = set()
    for p in sorted(jdir.glob(f"*.{SUFFIX}.jsonl")) if jdir.exists() else []:
        judge = p.name[: -len(f".{SUFFIX}.jsonl")]
        rows = []
        for (rid, kind), j in sorted(read_judgements(folder, p.stem).items()):
            parts = rid.split(".")
            if kind != "correct" or len(parts) < 4 or parts[0] != "probe" or not isinstance(j.get("label"), bool):
                continue
            if rid not in known:
                continue  # not (or no longer) a planted answer that passes the second rule
            graded.add(rid)
            rows.append({"qid": parts[2], "kind": parts[1], "truth": parts[1] in RIGHT, "label": j["label"],
                         "qtype": j.get("qtype"), "abstention": parts[1] in ABSTENTION_KINDS})
        if rows:
            out[judge] = rows
    if graded:
        out[CONTROL] = [{"qid": rid.split(".")[2], "kind": rid.split(".")[1], "truth": rid.split(".")[1] in RIGHT,
                         "label": substring_judge(str(known[rid]["gold"]), str(known[rid]["answer"]),
                                                  bool(known[rid]["abstention"])),
                         "qtype": known[rid]["qtype"], "abstention": rid.split(".")[1] in ABSTENTION_KINDS}
                        for rid in sorted(graded)]
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
                fp, fp_lo, fp_hi = _clustered(wrong, wrong["label"].astype(bool))
                fn, fn_lo, fn_hi = _clustered(right, ~right["label"].astype(bool))
                judged = r["correct"].dropna()
                acc = float(judged.mean()) if len(judged) else math.nan
                main = judge == f.judge
                rows.append({"folder": f.name, "judge": judge, "main_judge": main, "qtype": t,
                             "planted_wrong": len(wrong), "false_positives": int(wrong["label"].sum()),
                             "fp_rate": fp, "fp_lo": fp_lo, "fp_hi": fp_hi, "planted_right": len(right),
                             "false_negatives": int((~right["label"].astype(bool)).sum()), "fn_rate": fn,
                             "fn_lo": fn_lo, "fn_hi": fn_hi, "accuracy": acc, "n_judged": len(judged)})
    return pd.DataFrame(rows, columns=list(COLUMNS))


CORRECTED_COLUMNS = ("folder", "judge", "kind", "what", "n", "reported", "reported_lo", "reported_hi", "fp_rate",
                     "fn_rate", "corrected", "corrected_lo", "corrected_hi", "resamples")


def _bootstrap_errors(lines: list[dict], B: int, seed: int) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(FP*, FN*) over B resamples of the probe's questions, and the observed FP, FN."""
    from analysis.stats import resample_counts

    d = pd.DataFrame(lines)
    d["fp"] = (~d["truth"]) & d["label"].astype(bool)
    d["fn"] = d["truth"] & ~d["label"].astype(bool)
    d["w"] = ~d["truth"]
    per = d.groupby("qid")[["fp", "fn", "w"]].sum().astype(float)
    per["r"] = d.groupby("qid")["truth"].sum().astype(float)
    cnt = resample_counts(len(per), B, seed).astype(float)  # questions x B
    with np.errstate(invalid="ignore", divide="ignore"):
        fp = (per["fp"].to_numpy() @ cnt) / (per["w"].to_numpy() @ cnt)
        fn = (per["fn"].to_numpy() @ cnt) / (per["r"].to_numpy() @ cnt)
    return fp, fn, float(per["fp"].sum() / per["w"].sum()), float(per["fn"].sum() / per["r"].sum())


def _rg(p, fp, fn):
    with np.errstate(invalid="ignore", divide="ignore"):
        den = 1 - fp - fn
        return np.where(den > 0, (p - fp) / den, np.nan)


def _ci(x: np.ndarray) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    return (float(np.quantile(x, 0.025)), float(np.quantile(x, 0.975))) if len(x) else (math.nan, math.nan)


def _build_corrected(res: Any) -> pd.DataFrame:
    """The main judge's accuracy per condition and each paired difference, corrected, with intervals."""
    from analysis.conclusions import accuracy_pairs
    from analysis.stats import resample_counts
    from analysis.tables.common import pair_frame

    rows = []
    B, seed = int(res.settings.resamples), int(res.settings.seed)
    for f in res.folders:
        lines = _probe_lines(f).get(f.judge) if f.judge else None
        if not lines or all(x["truth"] for x in lines) or not any(x["truth"] for x in lines):
            continue
        fp_b, fn_b, fp, fn = _bootstrap_errors(lines, B, seed + 1)
        runs = res.runs[(res.runs["folder"] == f.name) & (res.runs["repeat"] == 0)]
        for (variant, cond), g in runs.groupby(["variant", "condition"], sort=True):
            y = g["correct"].dropna().to_numpy(float)
            if not len(y):
                continue
            cnt = resample_counts(len(y), B, seed).astype(float)
            p_b = (y @ cnt) / len(y)
            p = float(y.mean())
            rows.append(_row(f, "condition", f"{cond}{' (' + variant + ')' if variant else ''}", len(y), p, p_b,
                             float(_rg(p, fp, fn)), _rg(p_b, fp_b, fn_b), fp, fn, B))
        for folder, variant, a, b in accuracy_pairs(res):
            if folder != f.name:
                continue
            m = pair_frame(res.runs, folder, variant, a, b)
            m = m[m["correct_a"].notna() & m["correct_b"].notna()]
            if not len(m):
                continue
            d = 100 * (m["correct_a"].to_numpy(float) - m["correct_b"].to_numpy(float))
            cnt = resample_counts(len(d), B, seed).astype(float)
            d_b = (d @ cnt) / len(d)
            with np.errstate(invalid="ignore", divide="ignore"):
                den_b = np.where(1 - fp_b - fn_b > 0, 1 - fp_b - fn_b, np.nan)
                rows.append(_row(f, "difference", f"{a} − {b}{' (' + variant + ')' if variant else ''} (points)",
                                 len(d), float(d.mean()), d_b, float(d.mean() / (1 - fp - fn)) if 1 - fp - fn > 0
                                 else math.nan, d_b / den_b, fp, fn, B))
    return pd.DataFrame(rows, columns=list(CORRECTED_COLUMNS))


def _row(f, kind, what, n, p, p_b, c, c_b, fp, fn, B) -> dict:
    lo, hi = _ci(p_b)
    clo, chi = _ci(c_b)
    return {"folder": f.name, "judge": f.judge, "kind": kind, "what": what, "n": n, "reported": p,
            "reported_lo": lo, "reported_hi": hi, "fp_rate": fp, "fn_rate": fn, "corrected": c, "corrected_lo": clo,
            "corrected_hi": chi, "resamples": B}


def _rate(r, k: str) -> str:
    if r[f"{k}_rate"] != r[f"{k}_rate"]:
        return "–"
    return f"{share(r[f'{k}_rate'])} [{share(r[f'{k}_lo'])}, {share(r[f'{k}_hi'])}]"


def section(res: Any) -> str:
    t = res.table("judge_error")
    head = (f"\n## Judge error (the probe)\n\n{link('judge_error.csv')}, {link('judge_corrected.csv')}; status: "
            f"{status_line(res, 'judge_error') if not t.empty else '*exploratory*'}. `make probe STAGE=...` plants "
            "answers of known correctness built from the stage's own questions (another question's gold, the asked "
            "number or date changed with every accepted alternative cut, the gold named and denied, a confident "
            "answer to an abstention question; the whole gold restated, with extra words, with its numbers in words; a "
            "refusal: nothing of the gold dropped or moved, so a right answer is right whatever its punctuation "
            "means), keeps those a second rule confirms, and has the judge grade them "
            "(judge/probe.py; metered and cached like any judging, in the stage's budget). False positives: planted "
            "wrong judged correct; false negatives: planted right judged wrong; 95% Wilson intervals on the answers' "
            f"effective number (clustered by question). `{CONTROL}` is a plain substring matcher on the same answers: "
            "a judge should do better than it.\n\n")
    if t.empty:
        return head + "No probe judgements in these folders (make probe).\n"
    rows = [[r["folder"], r["judge"] + (" (main)" if r["main_judge"] in (True, "True") else ""), r["qtype"],
             f"{integer(r['false_positives'])}/{integer(r['planted_wrong'])}", _rate(r, "fp"),
             f"{integer(r['false_negatives'])}/{integer(r['planted_right'])}", _rate(r, "fn"),
             share(r["accuracy"]) + f" (n={integer(r['n_judged'])})"] for _, r in t.iterrows()]
    out = head + md_table(["folder", "judge", "type", "FP", "FP rate [95% CI]", "FN", "FN rate [95% CI]",
                           "accuracy (reported)"], rows) + "\n"
    c = res.table("judge_corrected")
    if not c.empty:
        out += ("\nThe main judge's accuracy corrected for its measured errors ((p − FP) / (1 − FP − FN); a paired "
                "difference divided by 1 − FP − FN), per condition and for each paired difference, with 95% intervals "
                "of a bootstrap over the runs' questions and, independently, the probe's:\n\n" + md_table(
                    ["folder", "", "n", "reported [95% CI]", "corrected [95% CI]"],
                    [[r.folder, r.what, integer(r.n), _pct(r.reported, r.reported_lo, r.reported_hi, r.kind),
                      _pct(r.corrected, r.corrected_lo, r.corrected_hi, r.kind)] for r in c.itertuples()]) + "\n")
    return out


def _pct(x, lo, hi, kind) -> str:
    if x != x:
        return "–"
    if kind == "difference":
        return f"{x:+.1f} [{lo:+.1f}, {hi:+.1f}]"
    return f"{share(x)} [{share(lo)}, {share(hi)}]"


register(Table("judge_error", "judge_error.csv", _build, section, prereg=("judge_error",), order=88,
               columns=COLUMNS))
register(Table("judge_corrected", "judge_corrected.csv", _build_corrected, prereg=("judge_error",), order=89,
               columns=CORRECTED_COLUMNS))
