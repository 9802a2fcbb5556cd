"""What the personalization tables share: the methods' roles and the unpaired comparison.

A method's role is in its yaml (`roles:` in conf/condition/<name>.yaml, read from each folder's
config as the first study's `compare_with` is): `under_test` (the method the tables compare with
every baseline: the kernel), `baseline` (the paper's Table 1 methods), `reference` (the baseline
Table 4, Figure 3 and the latency and length sections name first), `private_end` (memories private
to their writer: the exposure's private end), `phase1` / `phase2` (the ablation's two phases,
Appendix A.5; the method under test is Phase 2 too); `hide_in: [table5]` keeps a method out of a
table's Markdown as the paper does (the CSV keeps it). No table spells a method's name.

The paper's tests are on independent samples (n = 150 per condition): Welch's t, the
Mann-Whitney U, a percentile bootstrap CI of the mean difference (each group resampled on
its own) and the rank-biserial correlation. Here every trial meets every method, but the
tests stay unpaired, as the paper's are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from judge.rubric import DIMENSIONS  # noqa: F401  (the three rubric dimensions, in the paper's order)

PAPER_THRESHOLD = 0.3  # Section 4.2
RESAMPLES, SEED = 10_000, 0
DIMENSION_NAMES = {"profile_usage": "Profile", "task_usage": "Task", "integration": "Integration"}


@dataclass(frozen=True)
class Roles:
    """Who plays which part in the analysed folders (their stage configs, over today's conf/condition/)."""

    of: dict[str, tuple[str, ...]]  # method -> its roles, in the order the stages declare the methods
    hidden: dict[str, tuple[str, ...]] = field(default_factory=dict)  # method -> tables it stays out of (`hide_in`)

    def shown_in(self, table: str, names) -> list[str]:
        return [n for n in names if table not in self.hidden.get(n, ())]

    def with_role(self, role: str) -> tuple[str, ...]:
        return tuple(m for m, r in self.of.items() if role in r)

    def _one(self, role: str) -> str | None:
        found = self.with_role(role)
        return found[0] if found else None

    @property
    def under_test(self) -> str | None:
        return self._one("under_test")

    @property
    def baselines(self) -> tuple[str, ...]:
        return self.with_role("baseline")

    @property
    def reference(self) -> str | None:
        return self._one("reference") or (self.baselines[0] if self.baselines else None)

    @property
    def private_end(self) -> tuple[str, ...]:
        return self.with_role("private_end")

    @property
    def phase1(self) -> str | None:
        return self._one("phase1")

    @property
    def phase2(self) -> tuple[str, ...]:
        return tuple(m for m in self.of if m == self.under_test or "phase2" in self.of[m])

    @property
    def methods(self) -> tuple[str, ...]:
        """The paper's methods in its order: the baselines, then the method under test."""
        return (*self.baselines, *((self.under_test,) if self.under_test else ()))

    def order(self, names) -> list[str]:
        """The paper's methods in its order, then any others sorted."""
        names = set(names)
        return [m for m in self.methods if m in names] + sorted(names - set(self.methods))


def roles(folders, seen=()) -> Roles:
    """The methods' roles from each folder's config (analysis.load.Folder.condition_conf: the stage's
    settings over today's conf/condition/<name>.yaml), for the methods the folders declare (`stage.methods`,
    then `stage.conditions`, in their order) and those `seen` in their records (sorted)."""
    of: dict[str, tuple[str, ...]] = {}
    hidden: dict[str, tuple[str, ...]] = {}
    for f in folders:
        stage = f.config().get("stage") or {}
        declared = list(dict.fromkeys([*(stage.get("methods") or ()), *(stage.get("conditions") or {})]))
        for name in declared + sorted(set(seen) - set(declared)):
            if name not in of:
                conf = f.condition_conf(name)
                of[name] = tuple(str(r) for r in (conf.get("roles") or ()))
                hidden[name] = tuple(str(t) for t in (conf.get("hide_in") or ()))
    return Roles(of, hidden)


def bootstrap_diff_ci(a, b, resamples: int = RESAMPLES, seed: int = SEED, confidence: float = 0.95):
    """Percentile CI of mean(a) - mean(b), each group resampled on its own (independent samples)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
    db = b[rng.integers(0, len(b), (resamples, len(b)))].mean(axis=1)
    lo, hi = np.quantile(da - db, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def rank_biserial(u_a: float, n_a: int, n_b: int) -> float:
    """r = 2U/(n_a n_b) - 1 for U of group a: the share of pairs a wins minus the share it loses."""
    return 2 * u_a / (n_a * n_b) - 1


def compare(a, b, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """a vs b: means, difference, bootstrap CI, Welch t, Mann-Whitney U (two-sided), rank-biserial."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"n_a": len(a), "n_b": len(b), "mean_a": a.mean() if len(a) else np.nan,
           "mean_b": b.mean() if len(b) else np.nan}
    out["diff"] = out["mean_a"] - out["mean_b"]
    if len(a) < 2 or len(b) < 2:
        return {**out, "ci_low": np.nan, "ci_high": np.nan, "welch_t": np.nan, "welch_p": np.nan,
                "mwu_u": np.nan, "mwu_p": np.nan, "rank_biserial": np.nan}
    lo, hi = bootstrap_diff_ci(a, b, resamples, seed)
    with np.errstate(divide="ignore", invalid="ignore"):  # two constant groups: Welch's t is undefined (NaN)
        w = stats.ttest_ind(a, b, equal_var=False)
    t, p = float(w.statistic), float(w.pvalue)
    mw = stats.mannwhitneyu(a, b, alternative="two-sided")
    return {**out, "ci_low": lo, "ci_high": hi, "welch_t": t, "welch_p": p,
            "mwu_u": float(mw.statistic), "mwu_p": float(mw.pvalue),
            "rank_biserial": rank_biserial(float(mw.statistic), len(a), len(b))}


def mean_sd(x) -> str:
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    if not len(x):
        return "–"
    return f"{x.mean():.2f} ± {x.std(ddof=1):.2f}" if len(x) > 1 else f"{x.mean():.2f}"
