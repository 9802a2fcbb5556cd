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
rules themselves (`chance_of_flips`): for each conclusion, only the labels it reads (those `Rule.gather`
gathered for its tests; a comparison's paired runs) are flipped, each independently, each kind (correct,
leak) at the other judge's observed disagreement on exactly those labels (`chance_rate`, e.g. "correct
3/40; leak 0/30": a leak count the other judge never disagreed on cannot flip by chance; a label of a
repeat or condition no conclusion reads changes no rate). Every relabelling is decided again by the same
function that decided the report (prereg.redecide: exact McNemar, the interval rules with their bootstrap,
H2c's intersection-union, Holm over the family with the other hypotheses' labels as they are;
`decide_comparison` for a paired comparison) at the registered resamples and seed: the same bootstrap
draw as the reported decision (common random numbers), so the reference is the reported verdict, a
relabelling that changes none of its labels decides it exactly and r = 0 flips nothing. The share of
relabellings whose decided verdict differs from the reported one is the chance, with its Monte Carlo
standard error sqrt(p(1-p)/CHANCE_SIMS) (the only Monte Carlo error left: the decisions are exact given the
draw). Seeded by the analysis seed and the judge.
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
           "holds", "verdict", "rule", "threshold", "against", "p_chance", "p_chance_se", "chance_rate", "folder",
           "overlap")
NOT_DECIDED = ("not run", "not evaluable", "undecided", "descriptive")
CHANCE_SIMS = 400  # relabellings per conclusion and other judge (Monte Carlo se of a chance at most 0.025)


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
                         "against": "", "p_chance": math.nan, "p_chance_se": math.nan, "chance_rate": "",
                         "folder": c.folder,
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
                     "p_chance_se": math.nan, "chance_rate": "", "folder": folder, "overlap": ""})
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


def read_sets(prereg: P.Prereg, ref: list, pairs: dict[str, P.Reads]) -> dict[str, dict[str, np.ndarray]]:
    """conclusion -> label kind (correct, leak) -> positions of the labels it reads: what `Rule.gather`
    gathered for its tests (a hypothesis), the paired runs (a comparison). Nothing else it could read."""
    judged = {h["id"] for h in prereg.hypotheses if P.reads_judgements(h)}
    out: dict[str, dict[str, np.ndarray]] = {}
    for o in ref:
        if o.id not in judged:
            continue
        s: dict[str, np.ndarray] = {}
        for c in o.components:
            if c.reads is not None and not c.error:
                s[c.reads.col] = np.union1d(s.get(c.reads.col, np.array([], int)), P.read_positions(c.reads))
        out[o.id] = s
    for cid, reads in pairs.items():
        out[cid] = {reads.col: P.read_positions(reads)}
    return out


def rates_of(sets: dict[str, dict[str, np.ndarray]], mine: dict[str, np.ndarray], other: dict[str, np.ndarray]
             ) -> dict[str, dict[str, tuple[int, int]]]:
    """conclusion -> label kind -> (labels the other judge gave differently, labels both gave) among exactly
    the labels that conclusion reads: its own observed disagreement rate per kind, never a pooled one."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for cid, s in sets.items():
        out[cid] = {}
        for col, pos in s.items():
            a, b = mine[col][pos], other[col][pos]
            both = ~np.isnan(a) & ~np.isnan(b)
            out[cid][col] = (int((a[both] != b[both]).sum()), int(both.sum()))
    return out


def rate_text(rates: dict[str, tuple[int, int]]) -> str:
    """'correct 3/40; leak 0/30' (the rates a conclusion's chance was computed at)."""
    return "; ".join(f"{col} {k}/{m}" for col, (k, m) in sorted(rates.items()))


def chance_of_flips(res: Any, runs: pd.DataFrame, other: pd.DataFrame, key: str = "", sims: int = CHANCE_SIMS
                    ) -> dict[str, tuple[float, float, str]]:
    """conclusion -> (chance it flips, Monte Carlo se, the rates used) when the labels it reads on `runs` (the
    reference: the main judge on the other judge's runs, decided exactly as reported) are flipped independently
    at the rate the other judge (`other`, the same runs) disagrees on those labels, kind by kind, and it is
    decided again by its own rule (`simulate_flips`). Seeded by the analysis seed and `key` (the judge)."""
    ctx = P.Context(runs, res.folders, res.table("table4"), res.first_calls)
    ref = P.reevaluate(res.prereg, ctx, main_outcomes(res))
    pairs = {cid: reads for cid, (_, reads) in _comparison_reads(res, runs).items()}
    labels = P.labels_of(runs)
    rates = rates_of(read_sets(res.prereg, ref, pairs), labels, P.labels_of(other))
    rng = make_rng([int(res.settings.seed), zlib.crc32(key.encode())])
    got = simulate_flips(res.prereg, ref, pairs, labels, rates, rng, sims, res.settings)
    return {cid: (*pc, rate_text(rates.get(cid, {}))) for cid, pc in got.items()}


def simulate_flips(prereg: P.Prereg, ref: list, pairs: dict[str, P.Reads], labels: dict[str, np.ndarray],
                   rates: dict[str, dict[str, tuple[int, int]]], rng: np.random.Generator, sims: int = CHANCE_SIMS,
                   st: Settings | None = None) -> dict[str, tuple[float, float]]:
    """The relabelling simulation. `ref`: outcomes evaluated on the reference labels at their registered
    resamples (the reported decisions); `pairs`: paired comparisons, decided at `st` (the report's settings).
    For each conclusion, on each of `sims` relabellings, only the labels it reads are flipped, each kind at its
    own rate (`rates`: k disagreements of m labels), and it is decided again through the same functions
    (prereg.redecide, decide_comparison) with the same seed and resamples: the same bootstrap draw (common
    random numbers), so a relabelling that changes none of its labels decides exactly the reported verdict, and
    r = 0 flips nothing. A flip: a decided verdict other than the reference's; an undecided reference, or a
    kind with no label both judges gave, gives NaN. Returns conclusion -> (chance, its Monte Carlo se)."""
    sets = read_sets(prereg, ref, pairs)
    base = {o.id: o.outcome for o in ref if o.id in sets}
    base.update({cid: decide_comparison(reads, labels, st)["verdict"] for cid, reads in pairs.items()})
    out = {cid: (math.nan, math.nan) for cid in base}
    for cid, s in sets.items():
        rs = rates.get(cid, {})
        if undecided(base[cid]) or any(rs.get(col, (0, 0))[1] == 0 for col in s):
            continue
        known = {col: pos[~np.isnan(labels[col][pos])] for col, pos in s.items()}
        seen: dict[bytes, str] = {}
        flips = 0
        for _ in range(sims):
            changed = {col: pos[rng.random(len(pos)) < rs[col][0] / rs[col][1]] for col, pos in known.items()}
            if not any(len(v) for v in changed.values()):
                continue  # none of its labels changed: the reported verdict, exactly
            memo = b"|".join(col.encode() + v.tobytes() for col, v in sorted(changed.items()))
            if memo not in seen:
                lab = {col: v.copy() for col, v in labels.items()}
                for col, v in changed.items():
                    lab[col][v] = 1.0 - lab[col][v]
                if cid in pairs:
                    seen[memo] = decide_comparison(pairs[cid], lab, st)["verdict"]
                else:
                    got = P.redecide(prereg, ref, lab, changed)
                    seen[memo] = next(o.outcome for o in got if o.id == cid)
            v = seen[memo]
            flips += int(not undecided(v) and v != base[cid])
        p = flips / sims
        out[cid] = (p, math.sqrt(p * (1 - p) / sims))
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
    chance = (f"; random disagreement at each judge's observed rate on the labels each conclusion reads would flip "
              f"about {e:.2f} of them (each rule run on {CHANCE_SIMS} seeded relabellings at its registered "
              f"resamples; Monte Carlo error at most ±{se:.2f})" if what == "judges" else "")
    return (f"{k} check(s) made ({what}; each conclusion under each other set of labels against the reference on "
            f"the same runs), {f} flip(s){chance}; {nc} conclusion(s) with a check that is not comparable.")
