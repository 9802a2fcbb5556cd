"""Power before paying: for each pre-registered comparison of a stage, the power of its planned
sample, the questions 80% power needs, and what each costs (`dry_run=true`, the forecast).

Each comparison rule of conf/prereg/hypotheses.yaml decides on a 95% interval bound against a
threshold (or, for mcnemar_superior, a two-sided alpha); its power at a true effect is that of the
one-sided normal test of the same bound on the per-question differences:

    power = Phi(distance * sqrt(n) / sd - z(1 - alpha1)),   n80 = ((z(1 - alpha1) + z(0.8)) * sd / distance)^2

* accuracy rules (noninferiority, accuracy_above, mcnemar_superior): the paired differences
  d_i in {-1, 0, 1}; with a true difference delta and a discordant share psi,
  sd = sqrt(psi - delta^2); distance = delta - threshold (noninferiority: delta + margin).
* ratio rules (ratio_upper_below / ratio_lower_above, ratio of per-question means): the log of
  the ratio by the delta method, sd = sd(a_i / mean(a) - b_i / mean(b)); distance =
  log(threshold) - log(ratio) (or the reverse).

The effect is the test's `power_at` (in the rule's units: a ratio, or points), named in the
pre-registration file; a test without one uses the pilot's estimate and says so. The spread
(psi, sd) comes from a pilot of the same model that ran both conditions (its judgements for
psi), otherwise from the stated ASSUMPTIONS. alpha1 = (1 - confidence) / 2 for interval rules,
alpha / 2 for McNemar. Tests: statsmodels' NormalIndPower and the closed form above.
"""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass
from typing import Iterable, Sequence

from statistics import NormalDist

import numpy as np

from harness.records import RunDir
from harness.run.forecast import pilot_records

TARGET = 0.8
N = NormalDist()  # the standard normal (the stdlib's: a dry run need not import scipy)
RULES = ("ratio_upper_below", "ratio_lower_above", "noninferiority", "accuracy_above", "mcnemar_superior")
ACCURACY_RULES = ("noninferiority", "accuracy_above", "mcnemar_superior")
# without a pilot: what the spread is assumed to be (stated in every line that uses it)
ASSUMPTIONS = {"discordant": 0.3, "log_ratio_sd": 1.0}
ASSUMED = {"discordant": "assumed: 30% of questions discordant",
           "log_ratio_sd": "assumed: per-question CV 1.0 in each condition, correlation 0.5 (sd of log ratio 1.0)"}


def power(distance: float, sd: float, n: int, alpha1: float) -> float:
    """Power of the one-sided normal test at level alpha1 with n questions."""
    if n <= 0 or sd <= 0 or not math.isfinite(distance):
        return math.nan
    return float(N.cdf(distance * math.sqrt(n) / sd - N.inv_cdf(1 - alpha1)))


def n_for(distance: float, sd: float, alpha1: float, target: float = TARGET) -> float:
    """Questions needed for `target` power (inf when the effect is on the wrong side of the threshold)."""
    if sd <= 0 or not math.isfinite(distance):
        return math.nan
    if distance <= 0:
        return math.inf
    return float(math.ceil(((N.inv_cdf(1 - alpha1) + N.inv_cdf(target)) * sd / distance) ** 2))


def log_ratio_sd(a: Sequence[float], b: Sequence[float]) -> float:
    """Per-question sd of the log of a ratio of means, by the delta method."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or a.mean() <= 0 or b.mean() <= 0:
        return math.nan
    return float(np.std(a / a.mean() - b / b.mean(), ddof=1))


@dataclass
class Comparison:
    hypothesis: str
    rule: str
    what: str
    a: str
    b: str
    variant: str
    n_planned: int
    effect: float  # ratio, or points
    effect_from: str
    spread: float  # psi (accuracy) or sd of the log ratio
    spread_from: str
    threshold: float
    alpha1: float
    cost_per_question: float  # both conditions, USD at list price

    @property
    def accuracy(self) -> bool:
        return self.rule in ACCURACY_RULES

    def distance_sd(self) -> tuple[float, float]:
        if self.accuracy:
            delta = self.effect / 100
            sd = math.sqrt(max(self.spread - delta ** 2, 0.0))
            return delta - self.threshold / 100, sd
        if self.effect <= 0 or self.threshold <= 0:
            return math.nan, self.spread
        d = math.log(self.threshold) - math.log(self.effect)
        return (d if self.rule == "ratio_upper_below" else -d), self.spread

    @property
    def power(self) -> float:
        return power(*self.distance_sd(), self.n_planned, self.alpha1)

    @property
    def n80(self) -> float:
        return n_for(*self.distance_sd(), self.alpha1)


def _threshold(t: dict) -> float:
    if t["rule"] == "noninferiority":
        return -float(t["margin"])
    if t["rule"] == "mcnemar_superior":
        return 0.0
    return float(t.get("threshold", 0.0))


def comparisons(prereg, stage: str, planned: dict[tuple[str, str, str], int], costs: dict[str, float],
                pilot: dict | None = None) -> list[Comparison]:
    """Every comparison test of `stage` (planned: (variant, a, b) -> paired questions of the plan;
    costs: condition -> USD per run; pilot: {"runs": {(variant, cond, qid): (tokens, calls, time, correct)},
    "folder": name} or None)."""
    conf = float(prereg.settings.get("confidence", 0.95))
    alpha = float(prereg.settings.get("alpha", 0.05))
    out = []
    for h in prereg.hypotheses:
        if h["stage"] != stage:
            continue
        for t in h["tests"]:
            if t["rule"] not in RULES:
                continue
            variant = str(t.get("variant", h.get("variant", "")) or "")
            a, b = t["a"], t["b"]
            key = (variant, a, b)
            if key not in planned:
                continue
            from analysis.prereg import describe_test

            c = Comparison(h["id"], t["rule"], describe_test({**t, "stage": stage, "variant": variant}), a, b, variant,
                           planned[key], math.nan, "", math.nan, "", _threshold(t),
                           alpha / 2 if t["rule"] == "mcnemar_superior" else (1 - conf) / 2,
                           costs.get(a, math.nan) + costs.get(b, math.nan))
            pilot_effect, pilot_spread, pilot_n = _from_pilot(pilot, t, variant)
            if t.get("power_at") is not None:
                c.effect, c.effect_from = float(t["power_at"]), "pre-registered (power_at)"
            elif pilot_effect is not None:
                c.effect, c.effect_from = pilot_effect, f"pilot estimate ({pilot_n} questions; not pre-registered)"
            else:
                c.effect_from = "no effect named (power_at) and no pilot"
            key_s = "discordant" if c.accuracy else "log_ratio_sd"
            if pilot_spread is not None and math.isfinite(pilot_spread):
                c.spread, c.spread_from = pilot_spread, f"pilot {pilot['folder']} ({pilot_n} questions)"
            else:
                c.spread, c.spread_from = ASSUMPTIONS[key_s], ASSUMED[key_s]
            out.append(c)
    return out


def _from_pilot(pilot: dict | None, t: dict, variant: str) -> tuple[float | None, float | None, int]:
    """(effect, spread, questions) of the test on the pilot's paired questions, when it ran both conditions."""
    if not pilot:
        return None, None, 0
    runs = pilot["runs"]
    qids = sorted({q for (v, c, q) in runs if v == variant and c == t["a"]} &
                  {q for (v, c, q) in runs if v == variant and c == t["b"]})
    if len(qids) < 2:
        return None, None, len(qids)
    a = [runs[(variant, t["a"], q)] for q in qids]
    b = [runs[(variant, t["b"], q)] for q in qids]
    if t["rule"] in ACCURACY_RULES:
        pairs = [(x["correct"], y["correct"]) for x, y in zip(a, b) if x["correct"] is not None and y["correct"] is not None]
        if len(pairs) < 2:
            return None, None, len(pairs)
        d = [x - y for x, y in pairs]
        return 100 * float(np.mean(d)), float(np.mean([abs(x) for x in d])), len(pairs)
    m = t["metric"]
    xa, xb = [x[m] for x in a], [y[m] for y in b]
    eff = float(np.mean(xa) / np.mean(xb)) if np.mean(xb) > 0 else None
    return eff, log_ratio_sd(xa, xb), len(qids)


def render(rows: Iterable[Comparison]) -> str:
    rows = list(rows)
    if not rows:
        return "power: no pre-registered comparison in this stage's plan"
    lines = ["power of the planned sample for each pre-registered comparison (analysis/power.py; normal approximation "
             "of the rule's interval bound; cost at list price, both conditions; exploratory: the effects are "
             "pre-registered where it says so, the power analysis is not):",
             f"{'test':<46}{'n':>6}{'effect':>10}{'power':>8}{'n for 80%':>11}{'cost (n)':>11}{'cost (n80)':>12}"
             "  effect from; spread from"]
    for c in rows:
        n80 = c.n80
        eff = f"{c.effect:.3g}" + ("pts" if c.accuracy else "x") if math.isfinite(c.effect) else "-"
        pw = f"{c.power:.2f}" if math.isfinite(c.power) else "-"
        n80s = "-" if not math.isfinite(n80) and not math.isinf(n80) else ("never" if math.isinf(n80) else f"{n80:,.0f}")
        cost_n = c.cost_per_question * c.n_planned
        cost_80 = c.cost_per_question * n80 if math.isfinite(n80) else math.nan
        lines.append(f"{(c.hypothesis + ' ' + c.what)[:45]:<46}{c.n_planned:>6}{eff:>10}{pw:>8}{n80s:>11}"
                     f"{_usd(cost_n):>11}{_usd(cost_80):>12}  {c.effect_from}; {c.spread_from}")
    return "\n".join(lines)


def _usd(x: float) -> str:
    return "-" if not math.isfinite(x) else f"${x:,.2f}" if x >= 1 else f"${x:.4f}"


# ------------------------------------------------------------------------------ a stage's power lines

def pilot_runs(runs_dir: Path, model: str) -> dict | None:
    """The pilot's repeat-0 runs for the power of each comparison: per (variant,
    condition, question) its tokens, calls, time and correctness (the pilot's judge; None unjudged;
    a failed run is wrong)."""
    from analysis.load import SIDE_JUDGEMENTS  # pandas: only when a pilot exists

    folder, recs = pilot_records(runs_dir, model)
    if not recs:
        return None
    rd = RunDir(folder)
    names = sorted(p.stem for p in (folder / "judgements").glob("*.jsonl") if not p.name.endswith(".attempts.jsonl")
                   and not any(m in p.name for m in SIDE_JUDGEMENTS))  # the answers' judge, not a probe or errata
    labels = {k: j.label for k, j in rd.judgements(names[0]).items()} if names else {}
    runs = {}
    for r in recs:
        if r.repeat:
            continue
        lab = labels.get((r.run_id, "correct"))
        correct = 0.0 if r.status != "ok" else (None if not isinstance(lab, bool) else float(lab))
        runs[(r.variant or "", r.condition, r.qid)] = {
            "tokens": r.tokens.prompt + r.tokens.output, "model_calls": r.model_calls, "time": r.wall_s,
            "tool_calls": r.tool_calls, "cost": r.cost_list, "correct": correct}
    return {"folder": f"{folder.parent.name}/{folder.name}", "runs": runs}


def stage_lines(cfg, plan, rows) -> str:
    """The power of each pre-registered comparison of this stage at the planned sample, each priced with the
    forecast's rows (harness.run.forecast.Row); the agents study's `power` step, printed by a dry run."""
    from analysis import prereg as P

    pre = P.load(Path(__file__).resolve().parents[1] / "conf" / "prereg" / "hypotheses.yaml")
    by: dict[tuple[str, str], set[str]] = {}
    for r in plan.runs:
        if r.repeat == 0:
            by.setdefault((r.variant, r.condition), set()).add(r.qid)
    planned = {(v, a, b): len(by[(v, a)] & by[(v, b)]) for (v, a) in by for (w, b) in by if v == w and a != b}
    prices = dict(cfg.model.prices)
    costs = {r.condition: r.cost(prices) / r.runs for r in rows if r.runs}
    pilot = pilot_runs(Path(str(cfg.runs_dir)), str(cfg.model.model)) if plan.stage != "pilot" else None
    return render(comparisons(pre, plan.stage, planned, costs, pilot))
