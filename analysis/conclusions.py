"""Every conclusion of the analysis recomputed on other labels: would it still hold?

A conclusion is a pre-registered hypothesis (its outcome, and each test's effect and interval)
or a paired accuracy comparison of Tables 1 and 2 (a − b in points with its bootstrap interval;
its verdict: a > b or a < b when the interval excludes 0, else no difference shown). The labels
change when another judge graded the runs (analysis/tables/judge_robustness.py) or when the gold
is corrected (analysis/errata.py); both call `conclusions` with a runs frame whose `correct`
(and `leak`) columns hold the other labels, and `compare_verdicts` to say which conclusion flips.
Nothing else differs: the same questions, pairing, seed and resamples as the main analysis.

A check is one conclusion under one other set of labels, set against a reference verdict on the
same runs (`against`): a judge that graded a sample is compared with the main judge on that
sample, never with the main judge on all runs. A check whose verdict or reference is undecided
(missing judgements, nothing graded) is "not comparable" and shows its overlap (n of the main's n).
`p_chance` is the probability that the check flips by chance, computed by running the registered
rules themselves (`chance_of_flips`): each label on the reference runs is flipped independently at
the other judge's observed disagreement rate r (no systematic disagreement), every conclusion is
decided again by the same function that decided it (prereg.redecide: exact McNemar, the interval
rules with their bootstrap, H2c's intersection-union, Holm over the family; `decide_comparison` for
a paired comparison), and the share of relabellings whose decided verdict differs from the
reference's is the chance, with its Monte Carlo standard error. Seeded; CHANCE_SIMS relabellings,
each bootstrap at most CHANCE_RESAMPLES resamples (the reference decided at the same count, so
r = 0 flips nothing).
"""

from __future__ import annotations

import math
from typing import Any

import zlib

import numpy as np
import pandas as pd

from analysis import prereg as P
from analysis.stats import make_rng
from analysis.tables.common import Settings

COLUMNS = ("conclusion", "kind", "component", "test", "labels", "main", "n", "estimate", "lo", "hi", "p",
           "holds", "verdict", "rule", "threshold", "against", "p_chance", "p_chance_se", "folder", "overlap")
NOT_DECIDED = ("not run", "not evaluable", "undecided", "descriptive")
CHANCE_SIMS = 400  # relabellings per other judge (Monte Carlo se of a chance at most 0.025)
CHANCE_RESAMPLES = 1000  # bootstrap resamples of each interval rule inside the simulation (the analysis: 10,000+)


def comparison_id(folder: str, variant: str, a: str, b: str) -> str:
    return f"{folder}{' ' + variant if variant else ''}: {a} vs {b}"


def pair_verdict(est: float, lo: float, hi: float) -> str:
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return "not evaluable"
    if lo > 0:
        return "a > b"
    if hi < 0:
        return "a < b"
    return "no difference shown"


def accuracy_pairs(res: Any) -> list[tuple[str, str, str, str]]:
    """(folder, variant, a, b) of every paired accuracy comparison of Tables 1 and 2."""
    pairs = res.table("comparisons")
    if pairs.empty:
        return []
    acc = pairs[pairs["statistic"] == "accuracy_diff_points"]
    return list(dict.fromkeys((r.folder, r.variant, r.a, r.b) for r in acc.itertuples()))


def outcome_rows(outcomes: list, judged: set[str], labels: str, main: bool) -> list[dict]:
    """One row per test of every hypothesis in `judged` (those reading judgements; the others cannot change)."""
    rows = []
    for o in outcomes:
        if o.id not in judged:
            continue
        for c in o.components:
            rows.append({"conclusion": o.id, "kind": "hypothesis", "component": c.index, "test": c.what,
                         "labels": labels, "main": main, "n": c.n, "estimate": c.estimate, "lo": c.lo, "hi": c.hi,
                         "p": math.nan if c.p is None else c.p,
                         "holds": None if c.holds is None else bool(c.holds), "verdict": o.outcome,
                         "rule": c.rule, "threshold": 0.0 if c.rule == "mcnemar_superior" else c.threshold,
                         "against": "", "p_chance": math.nan, "p_chance_se": math.nan, "folder": c.folder,
                         "overlap": ""})
    return rows


def main_outcomes(res: Any) -> list:
    res.table("table3")  # evaluates the hypotheses once (analysis/tables/prereg_tables.py)
    return list(res.outcomes)


def decide_comparison(reads: P.Reads, labels: dict[str, np.ndarray], st: Settings) -> dict:
    """THE decision of a paired accuracy comparison (a − b in points, its bootstrap interval, exact McNemar p,
    its verdict); `conclusions` and the relabelling simulation both call it."""
    if not len(reads.a):
        return {"n": 0, "estimate": math.nan, "lo": math.nan, "hi": math.nan, "p": math.nan,
                "verdict": "not evaluable"}
    e, m = P.accuracy_difference(reads, labels, st)
    return {"n": len(reads.a), "estimate": e.estimate, "lo": e.lo, "hi": e.hi, "p": m.p,
            "verdict": pair_verdict(e.estimate, e.lo, e.hi)}


def _comparison_reads(res: Any, runs: pd.DataFrame) -> dict[str, tuple[tuple, P.Reads]]:
    return {comparison_id(*k): (k, P.paired_reads(runs, *k)[0]) for k in accuracy_pairs(res)}


def conclusions(res: Any, runs: pd.DataFrame, labels: str, main: bool = False, outcomes: list | None = None
                ) -> list[dict]:
    """The rows of every label-dependent conclusion computed on `runs` (labels: who gave them).
    `outcomes` given (e.g. every hypothesis evaluated on fewer questions): every hypothesis is a row."""
    judged = {h["id"] for h in res.prereg.hypotheses if outcomes is not None or P.reads_judgements(h)}
    if main:
        outcomes = main_outcomes(res)
    elif outcomes is None:
        ctx = P.Context(runs, res.folders, res.table("table4"), res.first_calls)
        outcomes = P.reevaluate(res.prereg, ctx, main_outcomes(res))
    rows = outcome_rows(outcomes, judged, labels, main)
    lab = P.labels_of(runs)
    for cid, ((folder, variant, a, b), reads) in _comparison_reads(res, runs).items():
        d = decide_comparison(reads, lab, res.settings)
        rows.append({"conclusion": cid, "kind": "comparison", "component": 0,
                     "test": f"accuracy {a} − {b} (points)", "labels": labels, "main": main, **d,
                     "holds": None, "rule": "comparison", "threshold": 0.0, "against": "", "p_chance": math.nan,
                     "p_chance_se": math.nan, "folder": folder, "overlap": ""})
    return rows


def undecided(verdict: Any) -> bool:
    return not isinstance(verdict, str) or verdict.startswith(NOT_DECIDED)


def relabel(labels: dict[str, np.ndarray], r: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every label (not a missing one) flipped independently with probability r."""
    out = {}
    for col, v in labels.items():
        flip = (rng.random(len(v)) < r) & ~np.isnan(v)
        out[col] = np.where(flip, 1.0 - v, v)
    return out


def chance_of_flips(res: Any, runs: pd.DataFrame, r: float, key: str = "", sims: int = CHANCE_SIMS,
                    resamples: int = CHANCE_RESAMPLES) -> dict[str, tuple[float, float]]:
    """conclusion -> (chance it flips, Monte Carlo se) when every label of `runs` (the reference: the main
    judge on the other judge's runs) is flipped independently at rate r and each conclusion is decided again
    by its own rule (`simulate_flips`). Seeded by the analysis seed and `key` (the judge): a report reproduces."""
    if not (r == r) or r < 0:
        return {}
    ctx = P.Context(runs, res.folders, res.table("table4"), res.first_calls)
    ref = P.reevaluate(res.prereg, ctx, main_outcomes(res), resamples_cap=resamples)
    st = Settings(res.settings.seed, min(int(res.settings.resamples), int(resamples)), res.settings.confidence)
    pairs = {cid: reads for cid, (_, reads) in _comparison_reads(res, runs).items()}
    rng = make_rng([int(res.settings.seed), zlib.crc32(key.encode())])
    return simulate_flips(res.prereg, ref, pairs, P.labels_of(runs), r, rng, sims, resamples, st)


def simulate_flips(prereg: P.Prereg, ref: list, pairs: dict[str, P.Reads], labels: dict[str, np.ndarray], r: float,
                   rng: np.random.Generator, sims: int = CHANCE_SIMS, resamples: int = CHANCE_RESAMPLES,
                   st: Settings | None = None) -> dict[str, tuple[float, float]]:
    """The relabelling simulation: `ref` (outcomes evaluated on the reference labels, at most `resamples`
    resamples) and `pairs` (paired comparisons, decided at `st`) decided again on `sims` relabellings at
    rate r, through the same functions (prereg.redecide, decide_comparison). A flip: a decided verdict other
    than the reference's; an undecided reference gives NaN. Returns conclusion -> (chance, its Monte Carlo se)."""
    judged = {h["id"] for h in prereg.hypotheses if P.reads_judgements(h)}

    def verdicts(outs, lab) -> dict[str, str]:
        v = {o.id: o.outcome for o in outs if o.id in judged}
        v.update({cid: decide_comparison(reads, lab, st)["verdict"] for cid, reads in pairs.items()})
        return v

    base = verdicts(ref, labels)
    live = [cid for cid, v in base.items() if not undecided(v)]
    flips = dict.fromkeys(live, 0)
    runs = sims if r > 0 else 0  # r = 0 changes no label: nothing can flip
    for _ in range(runs):
        lab = relabel(labels, r, rng)
        got = verdicts(P.redecide(prereg, ref, lab, resamples), lab)
        for cid in live:
            if not undecided(got[cid]) and got[cid] != base[cid]:
                flips[cid] += 1
    out = {cid: (math.nan, math.nan) for cid in base}
    for cid in live:
        p = flips[cid] / runs if runs else 0.0
        out[cid] = (p, math.sqrt(p * (1 - p) / runs) if runs else 0.0)
    return out


def compare_verdicts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per conclusion: the main verdict, which checks flip it (decided, and another verdict than their
    reference on the same runs), which are not comparable (with their overlap), and the checks made."""
    cols = ["conclusion", "kind", "main_verdict", "flips_under", "not_comparable_under", "checks", "flips",
            "chance_flips", "chance_flips_se", "robust"]
    if rows.empty:
        return pd.DataFrame(columns=cols)
    out = []
    for cid, g in rows.groupby("conclusion", sort=False):
        per = g.drop_duplicates("labels").set_index("labels")
        main_l = g.loc[g["main"].astype(bool), "labels"]
        main_label = main_l.iloc[0] if len(main_l) else ""
        main_v = per.at[main_label, "verdict"] if main_label else ""
        n_main = g.loc[g["labels"] == main_label, "n"]
        flips, apart, checks, chance, chance_se = [], [], 0, 0.0, 0.0
        for lab, x in per.iterrows():
            if str(main_v).startswith("not run"):
                break  # no conclusion to check (its stage was not analysed)
            ref = x.get("against") or ""
            if lab == main_label or not ref or ref not in per.index:
                continue  # the main rows and the references are not checks
            if undecided(x["verdict"]) or undecided(per.at[ref, "verdict"]):
                over = x.get("overlap") or f"n={_n(g.loc[g['labels'] == lab, 'n'])} of {_n(n_main)}"
                apart.append(f"{lab} (overlap {over})")
                continue
            checks += 1
            chance += float(x["p_chance"]) if x["p_chance"] == x["p_chance"] else 0.0
            se = x.get("p_chance_se", math.nan)
            chance_se += float(se) if se == se else 0.0
            if x["verdict"] != per.at[ref, "verdict"]:
                flips.append(lab)
        tail = f" (not comparable: {'; '.join(apart)})" if apart else ""
        robust = ("flips under " + ", ".join(flips)) if flips else (
            ("holds under all" if checks else "no comparable check") + tail)
        out.append({"conclusion": cid, "kind": g["kind"].iloc[0], "main_verdict": main_v,
                    "flips_under": "; ".join(flips), "not_comparable_under": "; ".join(apart), "checks": checks,
                    "flips": len(flips), "chance_flips": chance, "chance_flips_se": chance_se, "robust": robust + (tail if flips else "")})
    return pd.DataFrame(out, columns=cols)


def _n(ns: pd.Series) -> str:
    v = pd.to_numeric(ns, errors="coerce").fillna(0)
    return f"{int(v.sum()):d}"


def summary(verdicts: pd.DataFrame, what: str) -> str:
    """'12 checks under other judges; 1 flip; chance alone would give about 0.4' (the report's line)."""
    if verdicts.empty:
        return ""
    k, f, e = int(verdicts["checks"].sum()), int(verdicts["flips"].sum()), float(verdicts["chance_flips"].sum())
    se = float(verdicts["chance_flips_se"].sum()) if "chance_flips_se" in verdicts else math.nan
    nc = int((verdicts["not_comparable_under"].astype(str) != "").sum())
    chance = (f"; random disagreement at each judge's observed rate would flip about {e:.2f} of them (each rule "
              f"run on {CHANCE_SIMS} seeded relabellings, bootstraps of {CHANCE_RESAMPLES:,} resamples; Monte Carlo "
              f"error at most ±{se:.2f})" if what == "judges" else "")
    return (f"{k} check(s) made ({what}; each conclusion under each other set of labels against the reference on "
            f"the same runs), {f} flip(s){chance}; {nc} conclusion(s) with a check that is not comparable.")
