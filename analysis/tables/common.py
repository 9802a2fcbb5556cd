"""What the tables share: pairing, per-condition descriptives and the per-condition iterator.

Every comparison is paired: conditions A and B of one stage folder (and one Org
variant) are compared on the questions both ran, using repeat 0 of each (the second
run of the 60 repeated questions is only for Table 5). Costs use every paired
question; accuracy uses the paired questions whose correctness is known on both
sides (a failed run counts as wrong; a missing judgement leaves the question out,
and the row says how many). Each table row carries what is needed to recompute it:
the folder, the conditions, n, the seed, the number of resamples and the confidence.

Ratios are A / B: in Table 1 each condition over session search, in Table 2 the
shared view over each other condition (the paper's "0.27x the tokens of fan-out").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import pandas as pd

from analysis import stats
from analysis.load import Folder
from analysis.markdown import ESTIMATED, estimated_calls

METRICS = ("model_calls", "tool_calls", "tokens", "cost", "time")
QTYPE_ORDER = ("single-session-user", "single-session-assistant", "single-session-preference", "multi-session",
               "temporal-reasoning", "knowledge-update")
ORG_AGENTS = ("a0", "a1", "a2", "a3", "a4", "a5")


@dataclass(frozen=True)
class Settings:
    seed: int
    resamples: int
    confidence: float = 0.95


@dataclass
class Paired:
    folder: str
    variant: str
    a: str
    b: str
    qids: list[str]  # questions both ran (repeat 0)
    qids_judged: list[str]  # of those, correctness known on both sides
    metrics: stats.PairComparison | None
    accuracy: stats.PairComparison | None
    estimated: int = 0  # calls of both sides' paired runs whose usage was estimated: their token/cost ratios too

    @property
    def n(self) -> int:
        return len(self.qids)

    @property
    def n_judged(self) -> int:
        return len(self.qids_judged)


_GROUPS: list = []  # [(runs frame, {(folder, variant, condition, repeat): rows})], the last frame grouped


def _groups(runs: pd.DataFrame) -> dict:
    if not _GROUPS or _GROUPS[0][0] is not runs:
        g = {k: d.sort_values("qid", kind="mergesort")
             for k, d in runs.groupby(["folder", "variant", "condition", "repeat"], sort=True)}
        _GROUPS[:] = [(runs, g)]
    return _GROUPS[0][1]


def select(runs: pd.DataFrame, folder: str, variant: str, condition: str, repeat: int | None = 0) -> pd.DataFrame:
    """Runs of one condition (one repeat, or all) of a folder and variant, sorted by question."""
    if repeat is not None:
        d = _groups(runs).get((folder, variant, condition, repeat))
        return runs.iloc[0:0] if d is None else d
    m = (runs["folder"] == folder) & (runs["variant"] == variant) & (runs["condition"] == condition)
    return runs[m].sort_values(["qid", "repeat"], kind="mergesort")


def pair_frame(runs: pd.DataFrame, folder: str, variant: str, a: str, b: str) -> pd.DataFrame:
    return merge_pairs(select(runs, folder, variant, a), select(runs, folder, variant, b))


def merge_pairs(da: pd.DataFrame, db: pd.DataFrame) -> pd.DataFrame:
    return da.merge(db, on="qid", suffixes=("_a", "_b"), how="inner", validate="one_to_one").sort_values(
        "qid", kind="mergesort")


def compare(runs: pd.DataFrame, folder: str, variant: str, a: str, b: str, st: Settings,
            metrics: Sequence[str] = METRICS, keep_boot: bool = False,
            statistics: Sequence[str] = stats.STATISTICS) -> Paired:
    """A vs B on the questions both ran: metric ratios, and accuracy on the jointly judged ones."""
    return compare_frames(pair_frame(runs, folder, variant, a, b), folder, variant, a, b, st, metrics, keep_boot,
                          statistics)


def compare_frames(m: pd.DataFrame, folder: str, variant: str, a: str, b: str, st: Settings,
                   metrics: Sequence[str] = METRICS, keep_boot: bool = False,
                   statistics: Sequence[str] = stats.STATISTICS) -> Paired:
    """The same on an already merged frame (merge_pairs), e.g. runs of two folders on one set of questions."""
    qids = m["qid"].tolist()
    mc = None
    if qids and metrics:
        mc = stats.compare_pair({k: m[f"{k}_a"].to_numpy(float) for k in metrics},
                                {k: m[f"{k}_b"].to_numpy(float) for k in metrics},
                                seed=st.seed, n_resamples=st.resamples, confidence=st.confidence,
                                statistics=statistics, keep_boot=keep_boot, names=(a, b))
    j = m[m["correct_a"].notna() & m["correct_b"].notna()]
    ac = None
    if len(j):
        ac = stats.compare_pair({}, {}, correct_a=j["correct_a"].to_numpy(float),
                                correct_b=j["correct_b"].to_numpy(float), seed=st.seed, n_resamples=st.resamples,
                                confidence=st.confidence, keep_boot=keep_boot, names=(a, b))
    return Paired(folder, variant, a, b, qids, j["qid"].tolist(), mc, ac, paired_estimated(m))


def paired_estimated(m: pd.DataFrame) -> int:
    """Calls of estimated usage in the runs of a merged pair (merge_pairs), both sides."""
    return sum(estimated_calls(m, f"{ESTIMATED}{s}") for s in ("_a", "_b"))


def pair_rows(p: Paired) -> list[dict]:
    """Long-format rows (stats.ROW_FIELDS) of one pair, with folder and variant."""
    rows = []
    for pc in (p.metrics, p.accuracy):
        if pc is not None:
            for r in pc.rows():
                rows.append({"folder": p.folder, "variant": p.variant, **r,
                             ESTIMATED: p.estimated if r.get("metric") in ("tokens", "cost") else 0})
    return rows


def _nan(x) -> float:
    return math.nan if x is None else float(x)


def pair_columns(p: Paired | None, metrics: Sequence[str] = METRICS) -> dict:
    """Wide columns of one pair for Tables 1 and 2."""
    out: dict = {"a": None, "b": None, "n_paired": 0, "n_paired_judged": 0, "acc_diff_pts": math.nan,
                 "acc_diff_lo": math.nan, "acc_diff_hi": math.nan, "mcnemar_p": math.nan, "a_only": math.nan,
                 "b_only": math.nan}
    for k in metrics:
        out.update({f"ratio_{k}": math.nan, f"ratio_{k}_lo": math.nan, f"ratio_{k}_hi": math.nan})
    out.update({"median_ratio_tokens": math.nan, "median_ratio_tokens_lo": math.nan,
                "median_ratio_tokens_hi": math.nan, "median_ratio_tokens_excluded": math.nan,
                "share_cheaper_tokens": math.nan, "share_ties_tokens": math.nan})
    if p is None:
        return out
    out.update(a=p.a, b=p.b, n_paired=p.n, n_paired_judged=p.n_judged)
    if p.accuracy is not None:
        e, mn = p.accuracy.accuracy, p.accuracy.mcnemar
        out.update(acc_diff_pts=e.estimate, acc_diff_lo=e.lo, acc_diff_hi=e.hi, mcnemar_p=mn.p, a_only=mn.a_only,
                   b_only=mn.b_only)
    if p.metrics is not None:
        for k in metrics:
            e = p.metrics.ratio.get(k)
            if e is not None:
                out.update({f"ratio_{k}": e.estimate, f"ratio_{k}_lo": e.lo, f"ratio_{k}_hi": e.hi})
        e = p.metrics.median_ratio.get("tokens")
        if e is not None:
            out.update(median_ratio_tokens=e.estimate, median_ratio_tokens_lo=e.lo, median_ratio_tokens_hi=e.hi,
                       median_ratio_tokens_excluded=e.n_excluded)
        s = p.metrics.share.get("tokens")
        if s is not None:
            out.update(share_cheaper_tokens=s.cheaper, share_ties_tokens=s.ties)
    return out


def describe(d: pd.DataFrame) -> dict:
    """Per-condition descriptives over its repeat-0 runs."""
    judged = d["correct"].notna()
    out = {"n_questions": len(d), "n_failed": int((d["status"] != "ok").sum()), "n_judged": int(judged.sum()),
           "n_unjudged": int((~judged).sum()),
           "accuracy_pct": float(d.loc[judged, "correct"].mean() * 100) if judged.any() else math.nan}
    for k in METRICS:
        out[f"mean_{k}"] = float(d[k].mean()) if len(d) else math.nan
    out["median_time"] = float(d["time"].median()) if len(d) else math.nan
    n_correct = int(d.loc[judged, "correct"].sum()) if judged.any() else 0
    # USD per correct answer, the one definition (Tables 1, 2 and 6): the list-price cost of a set of runs over the
    # correct answers among the same runs (failed and unjudged runs cost, and are not correct); here repeat 0
    out["usd_per_correct"] = float(d["cost"].sum()) / n_correct if n_correct else math.nan
    out["total_tokens"] = int(d["tokens"].sum())
    # what the model read back from its tools per question (Section 5.1: 47.7k vs 28.0k characters)
    out["mean_result_chars"] = float(d["result_chars"].mean()) if len(d) else math.nan
    return out


VARIANT_ORDER = ("", "public", "private")


def folder_variants(runs: pd.DataFrame, folder: str) -> list[str]:
    have = set(runs.loc[runs["folder"] == folder, "variant"])
    return [v for v in VARIANT_ORDER if v in have] + sorted(have - set(VARIANT_ORDER))


def conditions_in(runs: pd.DataFrame, folder: str, variant: str, order: Sequence[str]) -> list[str]:
    have = set(runs.loc[(runs["folder"] == folder) & (runs["variant"] == variant), "condition"])
    return [c for c in order if c in have] + sorted(have - set(order))


def per_type_rows(d: pd.DataFrame, folder: str, variant: str, cond: str) -> list[dict]:
    rows = []
    groups = [(t, d[d["qtype"] == t]) for t in QTYPE_ORDER if (d["qtype"] == t).any()]
    groups += [(t, d[d["qtype"] == t]) for t in sorted(set(d["qtype"].dropna()) - set(QTYPE_ORDER))]
    if d["abstention"].any():
        groups.append(("abstention", d[d["abstention"]]))
    groups.append(("all", d))
    for t, g in groups:
        j = g["correct"].notna()
        rows.append({"folder": folder, "variant": variant, "condition": cond, "qtype": t, "n": len(g),
                     "n_judged": int(j.sum()), "n_correct": int(g.loc[j, "correct"].sum()),
                     "accuracy_pct": float(g.loc[j, "correct"].mean() * 100) if j.any() else math.nan})
    return rows


def reference_and_pairs(folder: Folder, conds: Sequence[str]) -> tuple[str | None, list[tuple[str, str]]]:
    """The condition every other one is compared with (`reference: true` in its yaml) and the further
    pairs the conditions ask for (`compare_with`), in the folder's condition order."""
    ref = next((c for c in conds if folder.condition_conf(c).get("reference")), None)
    pairs = [(c, o) for c in conds for o in folder.condition_conf(c).get("compare_with") or [] if o in conds]
    return ref, pairs


def each_condition(runs: pd.DataFrame, folders: Sequence[Folder]) -> Iterator[tuple[Folder, str, str, pd.DataFrame]]:
    """(folder, variant, condition, its repeat-0 runs) for every condition of every folder, in the
    folder's condition order: the one loop every per-condition table walks."""
    for f in folders:
        for variant in folder_variants(runs, f.name):
            for c in conditions_in(runs, f.name, variant, f.condition_order()):
                yield f, variant, c, select(runs, f.name, variant, c)
