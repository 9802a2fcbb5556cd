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

import functools
import math
from pathlib import Path
from dataclasses import dataclass
from pathlib import Path
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
    index: int = 0  # the test's position in its hypothesis
    pilot_n: int = 0  # questions of the pilot the spread comes from (0: assumed)
    smallest: float = math.nan  # the smallest effect of interest (conf/prereg/smallest_effects.yaml)
    smallest_why: str = ""

    @property
    def accuracy(self) -> bool:
        return self.rule in ACCURACY_RULES

    @property
    def refused(self) -> str:
        return refusal(self.rule, self.n_planned, self.effect, self.spread)

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
        """The normal approximation (nan for an impossible input)."""
        return math.nan if self.refused else power(*self.distance_sd(), self.n_planned, self.alpha1)

    @property
    def n80(self) -> float:
        return math.nan if self.refused else n_for(*self.distance_sd(), self.alpha1)

    @property
    def n80_rule(self) -> float:
        """Questions for 80% power under the rule: exact for McNemar, searched on the simulated rule for the
        interval rules (`simulated_n`, the normal formula its first guess)."""
        if self.refused:
            return math.nan
        if self.rule == "mcnemar_superior":
            return mcnemar_n(self.spread, self.effect / 100, 2 * self.alpha1)
        return simulated_n(self.hypothesis, self.rule, self.what, self.effect, self.spread, self.threshold,
                           self.alpha1, self.n80)

    def spread_range(self) -> tuple[float, float] | None:
        """The pilot's 95% interval of the spread (Jeffreys for the discordant share, chi-square for an sd)."""
        if not self.pilot_n or not math.isfinite(self.spread):
            return None
        from scipy.stats import beta, chi2

        m = self.pilot_n
        if self.accuracy:
            k = round(self.spread * m)
            return float(beta.ppf(0.025, k + 0.5, m - k + 0.5)), float(beta.ppf(0.975, k + 0.5, m - k + 0.5))
        if m < 2:
            return None
        return (self.spread * math.sqrt((m - 1) / chi2.ppf(0.975, m - 1)),
                self.spread * math.sqrt((m - 1) / chi2.ppf(0.025, m - 1)))


SMALLEST_PATH = Path(__file__).resolve().parents[1] / "conf" / "prereg" / "smallest_effects.yaml"


def load_smallest(path: Path = SMALLEST_PATH) -> dict[tuple[str, int], dict]:
    """(hypothesis, test index) -> {effect, why}: the smallest effect each test should detect."""
    import yaml

    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    out = {}
    for e in data.get("tests") or []:
        eff = e.get("effect")
        if isinstance(eff, bool) or not isinstance(eff, (int, float)) or not str(e.get("why") or "").strip():
            raise ValueError(f"{path}: {e.get('hypothesis')} test {e.get('test', 0)}: needs a numeric effect and a why")
        out[(str(e["hypothesis"]), int(e.get("test", 0)))] = {"effect": float(eff), "why": " ".join(str(e["why"]).split())}
    return out


def _threshold(t: dict) -> float:
    if t["rule"] == "noninferiority":
        return -float(t["margin"])
    if t["rule"] == "mcnemar_superior":
        return 0.0
    return float(t.get("threshold", 0.0))


def comparisons(prereg, stage: str, planned: dict[tuple[str, str, str], int], costs: dict[str, float],
                pilot: dict | None = None, smallest: dict | None = None) -> list[Comparison]:
    """Every comparison test of `stage` (planned: (variant, a, b) -> paired questions of the plan;
    costs: condition -> USD per run; pilot: {"runs": {(variant, cond, qid): (tokens, calls, time, correct)},
    "folder": name} or None; smallest: smallest effects of interest, default SMALLEST_PATH's)."""
    smallest = load_smallest() if smallest is None else smallest
    conf = float(prereg.settings.get("confidence", 0.95))
    alpha = float(prereg.settings.get("alpha", 0.05))
    out = []
    for h in prereg.hypotheses:
        if h["stage"] != stage:
            continue
        for i, t in enumerate(h["tests"]):
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
                           costs.get(a, math.nan) + costs.get(b, math.nan), index=i)
            sm = smallest.get((h["id"], c.index))
            if sm:
                c.smallest, c.smallest_why = float(sm["effect"]), str(sm["why"])
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
                c.pilot_n = pilot_n
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


# ------------------------------------------------------------------------------ the registered rule, simulated
#
# The normal formula above is the power of a normal test of the rule's bound; the rule that decides is
# another: an exact McNemar test, a bootstrap percentile interval, an intersection-union of several
# tests, Holm over the primary family. `simulate` draws samples of the planned size from a model of
# the data at a true effect and applies that rule to each: the share that decides "holds" is its power.
#
# * accuracy: each question is discordant for a with probability (psi + delta) / 2 and for b with
#   (psi - delta) / 2 (psi: the discordant share); the rule's bootstrap interval is that of the paired
#   difference, drawn BOOT times per distinct sample; McNemar is exact (and its power is also summed
#   exactly over every outcome: `mcnemar_power`).
# * ratio of means: per-question values lognormal with CV s in each condition and correlation 0.5
#   (so the delta-method sd of the log ratio is s, the spread above), condition a scaled to the
#   effect; the bootstrap resamples questions (weights shared across samples: common random numbers).
# A hypothesis of several tests is supported when all hold (components simulated independently: with
# positive dependence the joint power is higher); a primary one must also pass Holm over the family
# of m, which needs its p <= alpha / m when no other member is rejected and <= alpha when all others are.

SIMS = 1000  # simulated samples per comparison (seeded). The binomial part of the Monte Carlo sd is at most 0.016;
# an accuracy interval rule shares one bootstrap draw per distinct (a_only, b_only), so samples with the same table
# err together and the power of an interval rule moves more over seeds: sd 0.031 measured at n = 30 (0.019 at 120,
# 0.009 at 200; 20 seeds). McNemar's power is exact (`mcnemar_power`).
BOOT = 600  # bootstrap resamples per simulated sample (the analysis uses 10,000 / 100,000; ratios: half)


class Refused(ValueError):
    """An input no data can have (e.g. a difference larger than the discordant share): no power."""


def refusal(rule: str, n: int, effect: float, spread: float) -> str:
    """Why no sample of size n can have this effect and spread ('' when it can)."""
    if not n or n < 1:
        return "no planned question"
    if not math.isfinite(effect):
        return "no effect to power at (power_at) and no pilot estimate"
    if not math.isfinite(spread) or spread <= 0:
        return ("the pilot has no discordant question: the discordant share is unknown" if rule in ACCURACY_RULES
                else "the spread of the log ratio is unknown or 0")
    if rule in ACCURACY_RULES:
        delta = effect / 100
        if spread > 1:
            return f"discordant share {spread:.2f} above 1"
        if abs(delta) > spread + 1e-12:
            return (f"discordant share {spread:.2f} is below the effect {abs(delta):.2f}: a difference of "
                    f"{effect:g} points needs at least {abs(effect):g}% of the questions discordant")
    elif effect <= 0:
        return f"a ratio of means must be positive, got {effect:g}"
    return ""


def mcnemar_p(a_only, b_only) -> np.ndarray:
    """Exact two-sided McNemar p (as analysis.stats.mcnemar_exact), vectorised: min(1, 2 P(Bin(m, 1/2) <= min))."""
    from scipy.stats import binom

    a, b = np.asarray(a_only), np.asarray(b_only)
    m = a + b
    p = np.minimum(1.0, 2 * binom.cdf(np.minimum(a, b), m, 0.5))
    return np.where(m == 0, 1.0, p)


def mcnemar_power(n: int, psi: float, delta: float, alpha: float) -> float:
    """Exact power of 'p <= alpha and a_only > b_only', summed over every (a_only, b_only) of n questions."""
    from scipy.special import gammaln

    why = refusal("mcnemar_superior", n, 100 * delta, psi)
    if why:
        raise Refused(why)
    p10, p01 = (psi + delta) / 2, (psi - delta) / 2
    p00 = 1 - p10 - p01
    if p10 <= 0:
        return 0.0  # a is never the only one right: never "a more accurate"

    def span(p):
        mu, sd = n * p, math.sqrt(n * p * (1 - p)) + 1
        return np.arange(max(0, int(mu - 9 * sd)), min(n, int(mu + 9 * sd) + 1) + 1)

    i, j = np.meshgrid(span(p10), span(p01), indexing="ij")
    ok = (i + j <= n) & (i > j)
    i, j = i[ok], j[ok]
    with np.errstate(divide="ignore"):
        logp = (gammaln(n + 1) - gammaln(i + 1) - gammaln(j + 1) - gammaln(n - i - j + 1)
                + i * np.log(p10) + (j * np.log(p01) if p01 > 0 else np.where(j == 0, 0.0, -np.inf))
                + ((n - i - j) * np.log(p00) if p00 > 0 else np.where(n - i - j == 0, 0.0, -np.inf)))
    return float(np.sum(np.exp(logp) * (mcnemar_p(i, j) <= alpha)))


def mcnemar_n(psi: float, delta: float, alpha: float, target: float = TARGET, cap: int = 20000) -> float:
    """Smallest n with exact McNemar power >= target. The exact power is a saw-tooth in n (discrete
    p-values: 0.804 at 199, 0.787 at 200, 0.817 at 203 for psi 1, delta 0.2), so a bisection stops at a
    crossing that need not be the first: it is followed by a scan down that stops after 8 sizes in a row
    below the target (the teeth are a few sizes wide)."""
    if delta <= 0:
        return math.inf
    lo, hi = 1, 8
    while mcnemar_power(hi, psi, delta, alpha) < target:
        lo, hi = hi, hi * 2
        if hi > cap:
            return math.nan
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mcnemar_power(mid, psi, delta, alpha) >= target else (mid, hi)
    best, k, misses = hi, hi - 1, 0
    while k >= 1 and misses < 8:
        if mcnemar_power(k, psi, delta, alpha) >= target:
            best, misses = k, 0
        else:
            misses += 1
        k -= 1
    return float(best)


@dataclass
class Simulated:
    holds: np.ndarray  # per simulated sample: the rule decided "holds"
    p: np.ndarray  # its p (McNemar's, or the one-sided bootstrap p Holm adjusts)

    @property
    def power(self) -> float:
        return float(self.holds.mean())


def _rng(seed: int, *key) -> np.random.Generator:
    import zlib

    return np.random.default_rng([int(seed), zlib.crc32(repr(key).encode())])


def simulate(c: "Comparison", n: int | None = None, effect: float | None = None, spread: float | None = None,
             sims: int = SIMS, boot: int = BOOT, seed: int = 0) -> Simulated:
    """The registered rule of comparison c on `sims` samples of n questions at a true effect (defaults: c's)."""
    n = int(c.n_planned if n is None else n)
    effect = c.effect if effect is None else effect
    spread = c.spread if spread is None else spread
    why = refusal(c.rule, n, effect, spread)
    if why:
        raise Refused(why)
    rng = _rng(seed, c.hypothesis, c.what, n, effect, spread)
    conf_tail = c.alpha1 if c.rule != "mcnemar_superior" else (1 - 0.95) / 2
    if c.accuracy:
        delta = effect / 100
        counts = rng.multinomial(n, [(spread + delta) / 2, (spread - delta) / 2, 1 - spread], size=sims)
        a10, a01 = counts[:, 0], counts[:, 1]
        if c.rule == "mcnemar_superior":
            p = mcnemar_p(a10, a01)
            return Simulated((p <= 2 * c.alpha1) & (a10 > a01), p)
        thr = c.threshold  # points
        pairs, inverse = np.unique(counts[:, :2], axis=0, return_inverse=True)
        # the bootstrap of a paired 0/±1 difference depends on (a_only, b_only) only: BOOT draws per distinct pair
        p10, p01 = pairs[:, 0] / n, pairs[:, 1] / n  # a multinomial draw as two binomials (vectorised)
        d10 = rng.binomial(n, np.broadcast_to(p10, (boot, len(pairs))))
        rest = np.where(p10 < 1, p01 / np.where(p10 < 1, 1 - p10, 1), 0.0).clip(0, 1)
        d01 = rng.binomial(n - d10, np.broadcast_to(rest, d10.shape))
        diff = 100 * (d10 - d01) / n  # boot x pairs
        inverse = inverse.ravel()
        holds = (np.quantile(diff, conf_tail, axis=0) > thr)[inverse]
        p = ((np.count_nonzero(diff <= thr, axis=0) + 1) / (boot + 1))[inverse]
        return Simulated(holds, p)
    s2 = math.log(1 + spread ** 2)
    rho = math.log(1 + 0.5 * spread ** 2) / s2
    z0, z1 = rng.standard_normal((2, n, sims))
    a = effect * np.exp(math.sqrt(s2) * z0 - s2 / 2)
    b = np.exp(math.sqrt(s2) * (rho * z0 + math.sqrt(1 - rho ** 2) * z1) - s2 / 2)
    w = rng.multinomial(n, np.full(n, 1 / n), size=boot).astype(float)
    r = (w @ a) / (w @ b)  # boot x sims
    if c.rule == "ratio_upper_below":
        return Simulated(np.quantile(r, 1 - conf_tail, axis=0) < c.threshold,
                         (np.count_nonzero(r >= c.threshold, axis=0) + 1) / (boot + 1))
    return Simulated(np.quantile(r, conf_tail, axis=0) > c.threshold,
                     (np.count_nonzero(r <= c.threshold, axis=0) + 1) / (boot + 1))


SIM_N_CAP = 5000  # above it the simulated search would take minutes: the normal formula's n (the two agree there)


@functools.lru_cache(maxsize=None)
def simulated_n(hypothesis: str, rule: str, what: str, effect: float, spread: float, threshold: float,
                alpha1: float, guess: float, target: float = TARGET, seed: int = 0) -> float:
    """Smallest n at which the simulated interval rule (`simulate`, seeded, as `assess` runs it) reaches
    `target`, by bisection from the normal formula's n (`guess`): the n returned reaches it and the one below
    does not. The simulated power is noisy in n (Monte Carlo sd about 0.013 at 80%), so the n is that of
    this seed, within a few percent of the rule's. Beyond SIM_N_CAP questions (the normal formula's n above it, or
    the simulated rule short of `target` at it), the normal formula's n, and never one the search found short."""
    if not math.isfinite(guess) or guess > SIM_N_CAP:
        return guess
    c = Comparison(hypothesis, rule, what, "a", "b", "", 1, effect, "", spread, "", threshold, alpha1, 0.0)
    boot = BOOT // 2 if not c.accuracy else BOOT

    def reaches(n: int) -> bool:
        return simulate(c, n=n, boot=boot, seed=seed).power >= target

    lo, hi = 0, max(2, int(math.ceil(guess)))  # reaches(lo) is False: no question decides nothing
    if reaches(hi):
        while hi > 1 and reaches(hi // 2):
            hi //= 2
        lo = hi // 2
    else:
        while not reaches(hi):
            if hi >= SIM_N_CAP:  # short at the cap: beyond it, and the normal formula's n no lower than that
                return max(guess, float(SIM_N_CAP + 1))
            lo, hi = hi, min(2 * hi, SIM_N_CAP)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return float(hi)


@dataclass
class Assessed:
    """A comparison's power under its registered rule: at the planned n and effect, at the smallest
    effect of interest, and over the pilot's 95% interval of the spread (None where not computed)."""
    c: Comparison
    refused: str
    at_effect: Simulated | None = None
    at_smallest: Simulated | None = None
    pilot_range: tuple[float, float] | None = None
    pilot_n80: tuple[float, float] | None = None  # questions for 80% at the two ends of the pilot's interval
    clipped: str = ""  # an end of the pilot's interval no data can have, and what it was clipped to


TINY_N = 10  # below this many planned (or pilot) questions a power is printed with a warning


def feasible_range(c: Comparison) -> tuple[tuple[float, float], str] | None:
    """The pilot's 95% interval of the spread, each end no data can have clipped to the nearest one that can
    (a discordant share below the effect's |delta| or above 1), and a sentence saying so ('' when none was)."""
    rng_ = c.spread_range()
    if rng_ is None:
        return None
    lo, hi = rng_
    said = []
    if c.accuracy:
        floor = abs(c.effect) / 100
        if lo < floor:
            said.append(f"the pilot's lower end {lo:.3f} of the discordant share is below the {floor:.3f} a difference "
                        f"of {c.effect:g} points needs: clipped to {floor:.3f}")
            lo = floor
        if hi > 1:
            said.append(f"the upper end {hi:.3f} is above 1: clipped to 1")
            hi = 1.0
        hi = max(hi, lo)
    return (lo, hi), "; ".join(said)


def assess(rows: Iterable[Comparison], seed: int = 0, sims: int = SIMS, boot: int = BOOT,
           search_n: bool = True) -> list[Assessed]:
    """Each comparison's simulated power; `search_n`: also the questions for 80% at the ends of the pilot's
    interval (a search on the simulated rule per end: seconds each)."""
    out = []
    for c in rows:
        a = Assessed(c, c.refused)
        if not a.refused:
            # a ratio needs a matrix of resampled means per sample: half the resamples keep it to a second; every
            # test keeps the same number of samples, so a hypothesis's tests combine sample by sample
            kw = dict(sims=sims, boot=boot // 2 if not c.accuracy else boot, seed=seed)
            a.at_effect = simulate(c, **kw)
            if math.isfinite(c.smallest) and not refusal(c.rule, c.n_planned, c.smallest, c.spread):
                a.at_smallest = simulate(c, effect=c.smallest, **kw)
            fr = feasible_range(c)
            if fr is not None:
                # the range over the (clipped) interval: its two ends and the pilot's own spread, which lies in it,
                # so the range always contains the point power whatever the Monte Carlo noise at the ends
                import dataclasses

                ends, a.clipped = fr
                ok = [x for x in ends if not refusal(c.rule, c.n_planned, c.effect, x)]
                ps = [simulate(c, spread=x, **kw).power for x in ok] + [a.at_effect.power]
                a.pilot_range = (min(ps), max(ps))
                if search_n:
                    ns = [dataclasses.replace(c, spread=x).n80_rule for x in ok] + [c.n80_rule]
                    ns = [x for x in ns if not math.isnan(x)]
                    a.pilot_n80 = (min(ns), max(ns)) if ns else None
        out.append(a)
    return out


def hypothesis_lines(assessed: list[Assessed], prereg) -> list[str]:
    """Per hypothesis: the power of its decision (all its tests hold: intersection-union) and, for a
    member of the Holm family, the range Holm's adjustment leaves it (first to last of m rejected)."""
    family = list((prereg.settings.get("holm_family") or []) if prereg is not None else [])
    alpha = float(prereg.settings.get("alpha", 0.05)) if prereg is not None else 0.05
    tests_of = {h["id"]: h["tests"] for h in (prereg.hypotheses if prereg is not None else [])}
    lines = []
    by: dict[str, list[Assessed]] = {}
    for a in assessed:
        by.setdefault(a.c.hypothesis, []).append(a)
    for hid, got in by.items():
        refused = [a for a in got if a.refused]
        if refused:
            lines.append(f"{hid}: refused ({'; '.join(a.c.what + ': ' + a.refused for a in refused)})")
            continue
        other = [t["rule"] for t in tests_of.get(hid, []) if t["rule"] not in RULES]
        missing = len([t for t in tests_of.get(hid, []) if t["rule"] in RULES]) - len(got)
        for label, attr in (("the power_at effects", "at_effect"), ("the smallest effects of interest", "at_smallest")):
            sims = [getattr(a, attr) for a in got]
            if any(x is None for x in sims):
                continue
            k = min(len(x.holds) for x in sims)
            holds = np.logical_and.reduce([x.holds[:k] for x in sims])
            p = np.max([x.p[:k] for x in sims], axis=0)
            what = (f"all {len(got)} tests hold (intersection-union; tests simulated independently)" if len(got) > 1
                    else "its test holds")
            line = f"{hid} at {label}: {what}: power {holds.mean():.2f}"
            if hid in family:
                m = len(family)
                line += (f"; with Holm over the {m} primary hypotheses {np.mean(holds & (p <= alpha / m)):.2f} (the "
                         f"first of {m} rejected: p <= {alpha / m:g}) to {np.mean(holds & (p <= alpha)):.2f} (the last)")
            if other or missing > 0:
                line += (f" (not simulated: {', '.join(other)}" + (f"; {missing} test(s) not in this plan" if missing > 0
                                                                     else "") + ")")
            lines.append(line)
    return lines


def render(rows: Iterable[Comparison], prereg=None, seed: int = 0) -> str:
    rows = list(rows)
    if not rows:
        return "power: no pre-registered comparison in this stage's plan"
    assessed = assess(rows, seed=int(prereg.settings.get("seed", seed)) if prereg is not None else seed)
    lines = ["power of the planned sample for each pre-registered comparison (analysis/power.py): `power` is the "
             f"registered rule itself (exact McNemar, or the {BOOT}-resample bootstrap interval) on {SIMS:,} simulated "
             "samples (seeded), `approx` the normal formula; n for 80% exact for McNemar, else searched on the simulated rule; "
             "`smallest` the smallest effect of interest (conf/prereg/smallest_effects.yaml); `pilot range` the power "
             "(and the questions for 80%) over the pilot's 95% interval of the spread, its ends and the pilot's own spread "
             "(so it contains `power`; * an end no data can have, clipped and said below); cost at list price, both "
             f"conditions; fewer than {TINY_N} planned or pilot questions are warned about; exploratory:",
             f"{'test':<46}{'n':>6}{'effect':>10}{'power':>7}{'approx':>7}{'n for 80%':>11}{'smallest':>10}"
             f"{'power':>7}{'pilot range':>13}{'cost (n)':>11}{'cost (n80)':>12}  effect from; spread from"]
    for a in assessed:
        c = a.c
        unit = "pts" if c.accuracy else "x"
        eff = f"{c.effect:.3g}{unit}" if math.isfinite(c.effect) else "-"
        head = f"{(c.hypothesis + ' ' + c.what)[:45]:<46}{c.n_planned:>6}{eff:>10}"
        if a.refused:
            lines.append(f"{head}  refused: {a.refused}")
            continue
        n80 = c.n80_rule
        pw = f"{a.at_effect.power:.2f}"
        ap = f"{c.power:.2f}" if math.isfinite(c.power) else "-"
        n80s = "-" if not math.isfinite(n80) and not math.isinf(n80) else ("never" if math.isinf(n80) else f"{n80:,.0f}")
        sm = f"{c.smallest:.3g}{unit}" if math.isfinite(c.smallest) else "-"
        smp = f"{a.at_smallest.power:.2f}" if a.at_smallest is not None else "-"
        pr = (f"{a.pilot_range[0]:.2f}-{a.pilot_range[1]:.2f}" + ("*" if a.clipped else "")) if a.pilot_range else "-"
        if a.pilot_n80 and all(math.isfinite(x) for x in a.pilot_n80):
            pr += f" (n80 {a.pilot_n80[0]:,.0f}-{a.pilot_n80[1]:,.0f})"
        cost_n = c.cost_per_question * c.n_planned
        cost_80 = c.cost_per_question * n80 if math.isfinite(n80) else math.nan
        lines.append(f"{head}{pw:>7}{ap:>7}{n80s:>11}{sm:>10}{smp:>7}{pr:>13}{_usd(cost_n):>11}{_usd(cost_80):>12}"
                     f"  {c.effect_from}; {c.spread_from}")
        lines += [f"    * pilot range clipped: {a.clipped}"] * bool(a.clipped) + [
            f"    warning: {w}" for w in tiny(c)]
    hyp = hypothesis_lines(assessed, prereg)
    if hyp:
        lines += ["the decision of each hypothesis (its tests together, and Holm where it is primary):", *hyp]
    return "\n".join(lines)


def tiny(c: Comparison) -> list[str]:
    """Warnings for a power computed on too few questions (planned, or the pilot's the spread comes from)."""
    out = []
    if c.n_planned < TINY_N:
        out.append(f"{c.n_planned} planned question(s): with so few the rule can hardly decide, and the power at "
                   f"this n says little about the study")
    if 0 < c.pilot_n < TINY_N:
        out.append(f"the spread comes from {c.pilot_n} pilot question(s): its interval is too wide to plan on")
    return out


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
    return render(comparisons(pre, plan.stage, planned, costs, pilot), pre)
