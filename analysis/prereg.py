"""Pre-registered hypotheses: read the file, evaluate every decision rule, mark what is exploratory.

The hypotheses live in conf/prereg/hypotheses.yaml as data (comparison, metric, rule,
threshold); the driver records the file's SHA-256 in each stage's stage.json before
the stage's first model call. Here:

* one class per rule type (``Rule`` subclasses registered by name in ``RULES``), never one
  function per hypothesis;
* a hypothesis's components must all hold; with several p-values its p is the
  intersection-union p (stats.intersection_union);
* the primary hypotheses with a statistic form one Holm family (settings.holm_family);
  a member that could not be evaluated enters the family with p = 1 (conservative) and
  Table 3 says so;
* a test is confirmatory only if every stage folder it reads recorded, before its first
  model call, the SHA-256 of the file as it is now; otherwise it is exploratory and the
  row says why. Analyses not in the file are exploratory (Appendix A's Table 3).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import ClassVar, Sequence

import numpy as np
import pandas as pd
import yaml

from analysis import stats
from analysis.load import REPO, Folder
from analysis.tables.common import Settings, compare, select
from harness.plugins import Registry, caller

DEFAULT_PATH = REPO / "conf" / "prereg" / "hypotheses.yaml"
FAMILIES = ("primary", "secondary")
SOURCES = ("paper", "reconstructed")  # where a hypothesis or a threshold comes from
QUOTE_SEP = " [...] "  # between two passages of the paper in one quote cell


class NotRun(Exception):
    """The data the rule needs were never produced (stage, condition or study output missing)."""


class NotEvaluable(Exception):
    """The data exist but the rule cannot be decided on them (no paired questions, ambiguous folders)."""


class PreregError(ValueError):
    """The hypotheses file is malformed."""

    exit_code = 2  # harness.failures.BAD_INPUT


# ------------------------------------------------------------------------------ the file


@dataclass
class Prereg:
    path: Path
    sha256: str
    settings: dict
    analyses: list[str]
    hypotheses: list[dict]

    @property
    def ids(self) -> list[str]:
        return [h["id"] for h in self.hypotheses]


def load(path: str | Path = DEFAULT_PATH) -> Prereg:
    path = Path(path)
    raw = path.read_bytes()
    data = yaml.safe_load(raw) or {}
    settings = {"alpha": 0.05, "confidence": 0.95, "seed": 0, "resamples": stats.DEFAULT_RESAMPLES,
                "primary_resamples": stats.PRIMARY_RESAMPLES, "holm_family": []}
    settings.update(data.get("settings") or {})
    hyps = []
    seen = set()
    for h in data.get("hypotheses") or []:
        h = dict(h)
        for key in ("id", "family", "stage"):
            if key not in h:
                raise PreregError(f"{path}: a hypothesis lacks {key!r}: {h}")
        if h["id"] in seen:
            raise PreregError(f"{path}: duplicate hypothesis id {h['id']}")
        if h["family"] not in FAMILIES:
            raise PreregError(f"{path}: {h['id']}: family must be one of {FAMILIES}")
        seen.add(h["id"])
        if "tests" not in h:
            if "rule" not in h:
                raise PreregError(f"{path}: {h['id']} has neither `rule` nor `tests`")
            h["tests"] = [{k: v for k, v in h.items()
                           if k not in ("id", "family", "statement", "stage", "tests", "origin")}]
        h["origin"] = _origin(h.get("origin"), f"{path}: {h['id']}: origin")
        for i, t in enumerate(h["tests"]):
            if t.get("rule") not in RULES:
                raise PreregError(f"{path}: {h['id']}: unknown rule {t.get('rule')!r}; known: {sorted(RULES)}")
            if RULES[t["rule"]].judged or "threshold_origin" in t:
                t["threshold_origin"] = _origin(t.get("threshold_origin"),
                                                f"{path}: {h['id']}: test {i} ({t['rule']}): threshold_origin")
        hyps.append(h)
    powered = [(h["id"], t) for h in hyps for t in h["tests"] if "power_at" in t]
    for hid, t in powered:
        if isinstance(t["power_at"], bool) or not isinstance(t["power_at"], (int, float)):
            raise PreregError(f"{path}: {hid}: power_at must be a number (a ratio, or accuracy points), "
                              f"got {t['power_at']!r}")
    if powered:  # where the effects the power is computed at come from (analysis/power.py)
        settings["power_origin"] = _origin(settings.get("power_origin"), f"{path}: settings.power_origin")
    for hid in settings["holm_family"]:
        if hid not in seen:
            raise PreregError(f"{path}: holm_family names {hid}, which is not a hypothesis")
    return Prereg(path, hashlib.sha256(raw).hexdigest(), settings, list(data.get("analyses") or []), hyps)


def _origin(o, where: str) -> dict:
    """{source: paper, quote: "<the paper's words>" | [passages]} or {source: reconstructed, why: "..."};
    a paper entry may add a `why` (what we read into the quote). Returns source, quote (list), why."""
    if not isinstance(o, dict) or o.get("source") not in SOURCES:
        raise PreregError(f"{where}: must be {{source: paper, quote: ...}} or {{source: reconstructed, why: ...}}, "
                          f"got {o!r}")
    quote = o.get("quote") or []
    quote = [quote] if isinstance(quote, str) else list(quote)
    why = o.get("why") or ""
    if not all(isinstance(q, str) and q.strip() for q in quote) or not isinstance(why, str):
        raise PreregError(f"{where}: quote must be a non-empty string or list of strings, why a string")
    if o["source"] == "paper" and not quote:
        raise PreregError(f"{where}: source paper needs the paper's words in `quote`")
    if o["source"] == "reconstructed" and (quote or not why.strip()):
        raise PreregError(f"{where}: source reconstructed needs `why` (what we chose and why) and no `quote`")
    extra = set(o) - {"source", "quote", "why"}
    if extra:
        raise PreregError(f"{where}: unknown keys {sorted(extra)}")
    return {"source": o["source"], "quote": [" ".join(q.split()) for q in quote], "why": " ".join(why.split())}


# ------------------------------------------------------------------------------ results


@dataclass
class Component:
    hypothesis: str
    index: int
    rule: str
    what: str  # e.g. "tokens tool_hybrid/session_search"
    folder: str = ""
    variant: str = ""
    n: float = math.nan
    estimate: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    threshold: float = math.nan
    p: float | None = None
    holds: bool | None = None  # None: undecidable (e.g. missing judgements could change a count)
    direction: bool | None = None
    note: str = ""
    resamples: float = math.nan
    seed: float = math.nan
    error: str = ""  # "not run: ..." / "not evaluable: ..."
    threshold_source: str = "none"  # paper | reconstructed; none: a rule without threshold (descriptive)
    threshold_quote: str = ""
    threshold_why: str = ""
    test: dict = field(default_factory=dict, repr=False)  # the test's fields (with stage and variant)
    reads: "Reads | None" = field(default=None, repr=False)  # the labels a judged test decided on


@dataclass
class Outcome:
    id: str
    family: str
    statement: str
    stages: list[str]
    folders: list[str]
    components: list[Component]
    p: float | None = None
    p_holm: float | None = None
    in_holm: bool = False
    outcome: str = ""
    supported: bool | None = None
    status: str = "exploratory"
    reason: str = ""
    note: str = ""
    source: str = ""  # the hypothesis: paper | reconstructed
    quote: str = ""
    why: str = ""


@dataclass
class Context:
    runs: pd.DataFrame
    folders: list[Folder]
    exposure: pd.DataFrame | None
    first_calls: dict[str, str | None]  # folder name -> first agent request ts
    alpha: float = 0.05
    confidence: float = 0.95
    used: set = field(default_factory=set)  # folder names the current hypothesis read

    def folder(self, stage: str) -> Folder:
        fs = [f for f in self.folders if f.stage == stage]
        if not fs:
            raise NotRun(f"stage {stage!r} not analysed")
        if len(fs) > 1:
            raise NotEvaluable(f"{len(fs)} folders of stage {stage!r} ({', '.join(f.name for f in fs)}); "
                               f"choose one with runs=")
        self.used.add(fs[0].name)
        return fs[0]


def _need(ctx: Context, folder: Folder, variant: str, *conds: str) -> None:
    have = set(ctx.runs.loc[(ctx.runs["folder"] == folder.name) & (ctx.runs["variant"] == variant), "condition"])
    missing = [c for c in conds if c not in have]
    if missing:
        where = f"{folder.name}" + (f" ({variant} variant)" if variant else "")
        raise NotRun(f"{', '.join(missing)} not run in {where}")


# ------------------------------------------------------------------------------ rules


class Rule:
    """One rule type of the hypotheses file; a new rule type is one subclass, registered by name.

    ``evaluate(ctx, t, st, c)`` fills the component ``c`` (estimate, interval, threshold, p,
    holds) from the test ``t`` (the file's fields, with the hypothesis's stage and variant);
    ``describe(t)`` is the short text Table 3 shows. Flags: ``resampled`` -- its p comes from
    the paired bootstrap (one-sided bootstrap p); ``ci_resampled`` -- its interval does (the
    component then records the resamples and the seed); ``judged`` -- it decides something
    against a threshold (``descriptive`` does not).
    """

    name: ClassVar[str] = ""
    resampled: ClassVar[bool] = False
    ci_resampled: ClassVar[bool] = False
    judged: ClassVar[bool] = True
    reads_judgements: ClassVar[bool] = False  # its result depends on a judge's labels (accuracy, leaks)

    def evaluate(self, ctx: Context, t: dict, st: Settings, c: Component) -> None:
        """A rule that reads judgements gathers which labels it reads, then decides on their values (`decide`,
        the one function the analysis, the robustness table and the relabelling simulation all call)."""
        if not self.reads_judgements:
            raise NotImplementedError
        c.reads = self.gather(ctx, t, st, c)
        self.decide(c.reads, labels_of(ctx.runs), t, st, ctx.alpha, c)

    def gather(self, ctx: Context, t: dict, st: Settings, c: Component) -> "Reads":
        raise NotImplementedError

    def decide(self, reads: "Reads", labels: dict[str, np.ndarray], t: dict, st: Settings, alpha: float,
               c: Component) -> None:
        """Fill c's estimate, interval, p, holds and direction from the label values (`labels[col][positions]`)."""
        raise NotImplementedError

    def describe(self, t: dict) -> str:
        return f"{self.name} {t.get('source', '')}".strip()


@dataclass(frozen=True)
class Reads:
    """Which labels a judged test decides on: positions in the runs frame of the runs whose `col` (correct or
    leak) it reads; a paired test reads a's and b's runs of the questions both judged (in question order), a
    count one condition's runs. Relabelling changes the values at these positions, never the positions."""

    col: str
    a: np.ndarray
    b: np.ndarray | None = None
    note: str = ""  # what gathering them noted (questions left out, the exposure audit)


def labels_of(runs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The label columns of a runs frame as float arrays (NaN: no label), by position."""
    return {col: runs[col].to_numpy(float) for col in ("correct", "leak") if col in runs}


def _positions(runs: pd.DataFrame, d: pd.DataFrame) -> np.ndarray:
    if not runs.index.is_unique:
        raise ValueError("the runs frame needs a unique index")
    return runs.index.get_indexer(d.index)


def paired_reads(runs: pd.DataFrame, folder: str, variant: str, a: str, b: str) -> tuple[Reads, int]:
    """(the correct labels of a and b on the questions both ran and both have judged, questions both ran)."""
    da, db = select(runs, folder, variant, a), select(runs, folder, variant, b)
    m = pd.DataFrame({"qid": da["qid"].to_numpy(), "ia": _positions(runs, da)}).merge(
        pd.DataFrame({"qid": db["qid"].to_numpy(), "ib": _positions(runs, db)}), on="qid", how="inner",
        validate="one_to_one").sort_values("qid", kind="mergesort")
    lab = runs["correct"].to_numpy(float)
    ia, ib = m["ia"].to_numpy(), m["ib"].to_numpy()
    both = ~np.isnan(lab[ia]) & ~np.isnan(lab[ib])
    return Reads("correct", ia[both], ib[both]), len(m)


def accuracy_difference(reads: Reads, labels: dict[str, np.ndarray], st: Settings) -> tuple[stats.Estimate,
                                                                                              stats.McNemar]:
    """a - b in points (paired bootstrap, st's seed and resamples) and exact McNemar on the labels read."""
    ca, cb = labels[reads.col][reads.a], labels[reads.col][reads.b]
    e = stats.accuracy_difference(ca, cb, seed=st.seed, n_resamples=st.resamples, confidence=st.confidence,
                                  keep_boot=True)
    return e, stats.mcnemar_exact(ca, cb)


RULES: Registry[Rule] = Registry("pre-registered rule", None)  # this module's classes, and the plugins'


def register(cls: type[Rule]) -> type[Rule]:
    if not cls.name:
        raise ValueError(f"rule class {cls.__name__}: no name")
    RULES.register(cls.name, cls(), caller())
    return cls


class _Ratio(Rule):
    """a/b ratio of per-question means, paired bootstrap over the questions both ran."""

    resampled = ci_resampled = True
    upper: ClassVar[bool] = True  # decided on the upper bound (< threshold) or the lower one (> threshold)

    def evaluate(self, ctx, t, st, c):
        f = ctx.folder(t["stage"])
        _need(ctx, f, t["variant"], t["a"], t["b"])
        p = compare(ctx.runs, f.name, t["variant"], t["a"], t["b"], st, metrics=[t["metric"]], keep_boot=True,
                    statistics=("ratio",))
        if p.metrics is None:
            raise NotEvaluable(f"no question run by both {t['a']} and {t['b']}")
        e = p.metrics.ratio[t["metric"]]
        thr = float(t["threshold"])
        c.folder, c.n, c.estimate, c.lo, c.hi, c.threshold = f.name, p.n, e.estimate, e.lo, e.hi, thr
        if self.upper:
            c.p, c.holds, c.direction = e.p_value(thr, "less"), bool(e.hi < thr), bool(e.estimate < thr)
        else:
            c.p, c.holds, c.direction = e.p_value(thr, "greater"), bool(e.lo > thr), bool(e.estimate > thr)
        if e.n_undefined:
            c.note = f"{e.n_undefined} resamples with 0/0 left out"

    def describe(self, t):
        return f"{t['metric']} {t['a']}/{t['b']} {'<' if self.upper else '>'} {t['threshold']}"


@register
class RatioUpperBelow(_Ratio):
    name = "ratio_upper_below"
    upper = True


@register
class RatioLowerAbove(_Ratio):
    name = "ratio_lower_above"
    upper = False


class _Accuracy(Rule):
    """Accuracy a - b in points on the questions both ran and both have judged."""

    reads_judgements = True

    def gather(self, ctx, t, st, c):
        f = ctx.folder(t["stage"])
        _need(ctx, f, t["variant"], t["a"], t["b"])
        reads, n = paired_reads(ctx.runs, f.name, t["variant"], t["a"], t["b"])
        if not len(reads.a):
            raise NotEvaluable(f"no question with judged answers of both {t['a']} and {t['b']}")
        c.folder, c.n = f.name, len(reads.a)
        if len(reads.a) < n:
            reads = dataclasses.replace(reads, note=f"{n - len(reads.a)} of {n} paired questions left out: "
                                                    f"judgement missing")
            c.note = reads.note
        return reads


@register
class NonInferiority(_Accuracy):
    """Accuracy a - b in points: holds if the lower CI bound > -margin."""

    name = "noninferiority"
    resampled = ci_resampled = True

    def decide(self, reads, labels, t, st, alpha, c):
        e, _ = accuracy_difference(reads, labels, st)
        margin = float(t["margin"])
        ni = stats.non_inferiority(e, margin)
        c.estimate, c.lo, c.hi, c.threshold = ni.estimate, ni.lo, ni.hi, -margin
        c.p, c.holds, c.direction = ni.p, ni.holds, bool(ni.estimate > -margin)

    def describe(self, t):
        return f"accuracy {t['a']} - {t['b']} > -{t['margin']} pts"


@register
class AccuracyAbove(_Accuracy):
    """Accuracy a - b in points: holds if the lower CI bound > threshold."""

    name = "accuracy_above"
    resampled = ci_resampled = True

    def decide(self, reads, labels, t, st, alpha, c):
        e, _ = accuracy_difference(reads, labels, st)
        thr = float(t.get("threshold", 0.0))
        c.estimate, c.lo, c.hi, c.threshold = e.estimate, e.lo, e.hi, thr
        c.p, c.holds, c.direction = e.p_value(thr, "greater"), bool(e.lo > thr), bool(e.estimate > thr)

    def describe(self, t):
        return f"accuracy {t['a']} - {t['b']} > {t.get('threshold', 0)} pts"


@register
class McNemarSuperior(_Accuracy):
    """a more accurate than b: exact McNemar p <= alpha and a_only > b_only (the CI is bootstrapped)."""

    name = "mcnemar_superior"
    ci_resampled = True

    def decide(self, reads, labels, t, st, alpha, c):
        e, m = accuracy_difference(reads, labels, st)
        c.estimate, c.lo, c.hi, c.threshold = e.estimate, e.lo, e.hi, alpha
        c.p, c.direction = m.p, bool(m.a_only > m.b_only)
        c.holds = bool(m.p <= alpha and m.a_only > m.b_only)
        c.note = "; ".join(x for x in (f"discordant: {m.a_only} only {t['a']}, {m.b_only} only {t['b']}",
                                        reads.note) if x)

    def describe(self, t):
        return f"accuracy {t['a']} > {t['b']} (exact McNemar)"


class _Count(Rule):
    """Number of runs of `condition` with `measure` true against a threshold; a missing judgement
    counts as neither value and can make the rule undecidable (holds = None)."""

    op: ClassVar[str] = "<="
    reads_judgements = True

    def gather(self, ctx, t, st, c):
        f = ctx.folder(t["stage"])
        _need(ctx, f, t["variant"], t["condition"])
        d = select(ctx.runs, f.name, t["variant"], t["condition"])
        col = str(t.get("measure", "leak"))
        missing = int(d[col].isna().sum())
        c.folder, c.n, c.threshold = f.name, len(d), float(t["threshold"])
        notes = [f"{missing} of {len(d)} runs without a {col} judgement (not counted)"] if missing else []
        ex = ctx.exposure
        if col == "leak" and ex is not None and not ex.empty:  # the exposure audit, reported next to the leak count
            e = ex[(ex["folder"] == f.name) & (ex["variant"] == t["variant"]) & (ex["condition"] == t["condition"])]
            if not e.empty and bool(e["replayed"].iloc[0]):
                notes.append(f"exposure (replay): private units in the context of {int(e['runs_with_private'].iloc[0])} "
                             f"of {int(e['runs'].iloc[0])} runs ({int(e['private_units'].iloc[0])} units)")
            elif not e.empty:
                notes.append(f"exposure: {e['replay_status'].iloc[0]}")
        c.note = "; ".join(notes)
        return Reads(col, _positions(ctx.runs, d), note=c.note)

    def decide(self, reads, labels, t, st, alpha, c):
        v = labels[reads.col][reads.a]
        known = ~np.isnan(v)
        count, missing, thr = int(v[known].sum()), int((~known).sum()), int(t["threshold"])
        c.estimate, c.threshold = count, float(thr)
        if self.op == "<=":
            c.holds = True if count + missing <= thr else (False if count > thr else None)
            c.direction = count <= thr
        else:
            c.holds = True if count >= thr else (False if count + missing < thr else None)
            c.direction = count >= thr

    def describe(self, t):
        return f"{t.get('measure', 'leak')} runs of {t['condition']} {self.op} {t['threshold']}"


@register
class CountAtMost(_Count):
    name = "count_at_most"
    op = "<="


@register
class CountAtLeast(_Count):
    name = "count_at_least"
    op = ">="


@register
class GrowthRatioAtLeast(Rule):
    """(tokens of a at stage_to / at stage_from) / (same for b) on the questions all four ran;
    decided on the estimate (the bootstrap CI is for information)."""

    name = "growth_ratio_at_least"
    ci_resampled = True

    def evaluate(self, ctx, t, st, c):
        f0, f1 = ctx.folder(t["stage_from"]), ctx.folder(t["stage_to"])
        metric = t.get("metric", "tokens")
        for f in (f0, f1):
            _need(ctx, f, "", t["a"], t["b"])
        frames = []
        for cond in (t["a"], t["b"]):
            for f in (f0, f1):
                frames.append(select(ctx.runs, f.name, "", cond)[["qid", metric]].set_index("qid")[metric])
        m = pd.concat(frames, axis=1, join="inner").sort_index()
        if m.empty:
            raise NotEvaluable("no question ran under both conditions at both stages")
        v = m.to_numpy(float)  # columns: a@from, a@to, b@from, b@to
        tot = v.sum(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            est = (tot[1] / tot[0]) / (tot[3] / tot[2])
            counts = stats.resample_counts(len(m), st.resamples, st.seed).astype(np.float64)
            s = v.T @ counts
            boot = (s[1] / s[0]) / (s[3] / s[2])
        lo, hi, undefined = stats.percentile_ci(boot, st.confidence)
        thr = float(t["threshold"])
        c.folder = f"{f0.name} -> {f1.name}"
        c.n, c.estimate, c.lo, c.hi, c.threshold = len(m), float(est), lo, hi, thr
        c.holds = c.direction = bool(est >= thr)
        c.note = (f"growth {t['a']} {tot[1] / tot[0]:.4g}x, {t['b']} {tot[3] / tot[2]:.4g}x; "
                  f"decided on the estimate (CI for information)")

    def describe(self, t):
        return (f"{t.get('metric', 'tokens')} growth {t['stage_from']}->{t['stage_to']} {t['a']}/{t['b']} "
                f">= {t['threshold']}")


@register
class CvHighest(Rule):
    """Coefficient of variation of a's per-question metric above that of every condition in `among`."""

    name = "cv_highest"

    def evaluate(self, ctx, t, st, c):
        f = ctx.folder(t["stage"])
        _need(ctx, f, t["variant"], t["a"])
        metric = t.get("metric", "tokens")

        def cv(cond: str) -> float:
            x = select(ctx.runs, f.name, t["variant"], cond)[metric].to_numpy(float)
            return stats.coefficient_of_variation(x) if len(x) > 1 else math.nan

        have = set(ctx.runs.loc[ctx.runs["folder"] == f.name, "condition"])
        others = {o: cv(o) for o in t["among"] if o in have and o != t["a"]}
        if not others:
            raise NotRun(f"none of {t['among']} run in {f.name}")
        mine = cv(t["a"])
        top = max(others.values())
        c.folder, c.n, c.estimate, c.threshold = f.name, len(select(ctx.runs, f.name, t["variant"], t["a"])), mine, top
        c.holds = c.direction = bool(mine > top)
        missing = [o for o in t["among"] if o not in have]
        c.note = "CV " + ", ".join(f"{o} {v:.3g}" for o, v in sorted(others.items())) + (
            f"; not run: {', '.join(missing)}" if missing else "")

    def describe(self, t):
        return f"CV of {t.get('metric', 'tokens')}: {t['a']} highest"


def _study(ctx: Context, t: dict, c: Component) -> pd.DataFrame:
    f = ctx.folder(t["stage"])
    path = f.path / str(t["source"])
    if not path.exists():
        raise NotRun(f"backend study output {f.name}/{t['source']} missing")
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    c.folder = f"{f.name}/{t['source']}"
    return df


def _rows(df: pd.DataFrame, sel: dict, where: str) -> pd.DataFrame:
    """Rows whose column k equals v for every k: v of `sel` (a list v: any of its values)."""
    m = pd.Series(True, index=df.index)
    for k, v in (sel or {}).items():
        if k not in df.columns:
            raise NotEvaluable(f"{where} has no column {k!r}")
        m &= df[k].astype(str).isin([str(x) for x in v]) if isinstance(v, list) else df[k].astype(str) == str(v)
    out = df[m]
    if out.empty:
        raise NotEvaluable(f"no row of {where} matches {sel}")
    return out


def _values(df: pd.DataFrame, col: str, where: str) -> np.ndarray:
    if col not in df.columns:
        raise NotEvaluable(f"{where} has no column {col!r}")
    try:
        return df[col].astype(float).to_numpy()
    except ValueError:
        raise NotEvaluable(f"{where}: column {col!r} is not numeric") from None


class _Study(Rule):
    """Reads one CSV output of the backend study (stage `backends`, bench/backends/)."""

    def describe(self, t):
        return f"{t['source']} {t.get('select', {})} {t['column']} {self.name[6:]} {t['threshold']}"


def _failing(rows: pd.DataFrame, bad: np.ndarray, col: str) -> str:
    """'k of n rows fail: config=..., case=... (value); ...' naming the rows that break the rule."""
    keys = [k for k in ("config", "case", "agents", "backend") if k in rows.columns][:2]
    named = [", ".join(f"{k}={r[k]}" for k in keys) + f" ({r[col]})" for _, r in rows[bad].head(5).iterrows()]
    more = "; ..." if int(bad.sum()) > 5 else ""
    return f"{int(bad.sum())} of {len(rows)} rows fail: " + "; ".join(named) + more


@register
class StudyBelow(_Study):
    """Every selected row's value < threshold (the estimate is the largest)."""

    name = "study_below"

    def evaluate(self, ctx, t, st, c):
        rows = _rows(_study(ctx, t, c), t.get("select"), c.folder)
        v = _values(rows, t["column"], c.folder)
        c.n, c.estimate, c.threshold = len(v), float(v.max()), float(t["threshold"])
        c.holds = c.direction = bool(v.max() < c.threshold)
        if not c.holds:
            c.note = _failing(rows, v >= c.threshold, t["column"])


@register
class StudyAbove(_Study):
    """Every selected row's value > threshold (the estimate is the smallest)."""

    name = "study_above"

    def evaluate(self, ctx, t, st, c):
        rows = _rows(_study(ctx, t, c), t.get("select"), c.folder)
        v = _values(rows, t["column"], c.folder)
        c.n, c.estimate, c.threshold = len(v), float(v.min()), float(t["threshold"])
        c.holds = c.direction = bool(v.min() > c.threshold)
        if not c.holds:
            c.note = _failing(rows, v <= c.threshold, t["column"])


@register
class StudyRatioAtMost(_Study):
    """numerator row / denominator row of one column <= threshold."""

    name = "study_ratio_at_most"

    def evaluate(self, ctx, t, st, c):
        df = _rows(_study(ctx, t, c), t.get("select"), c.folder)
        num = _values(_rows(df, t["numerator"], c.folder), t["column"], c.folder)
        den = _values(_rows(df, t["denominator"], c.folder), t["column"], c.folder)
        if len(num) != 1 or len(den) != 1:
            raise NotEvaluable(f"{c.folder}: expected one row each for {t['numerator']} and {t['denominator']}")
        c.n, c.estimate, c.threshold = 2, float(num[0] / den[0]), float(t["threshold"])
        c.holds = c.direction = bool(c.estimate <= c.threshold)
        c.note = f"{num[0]:.4g} / {den[0]:.4g}"


@register
class Descriptive(Rule):
    """No decision: the study output is reported (rows and columns)."""

    name = "descriptive"
    judged = False

    def evaluate(self, ctx, t, st, c):
        df = _study(ctx, t, c)
        c.n = len(df)
        c.note = f"{len(df)} rows, columns: {', '.join(df.columns)}"


def describe_test(t: dict) -> str:
    return RULES[t["rule"]].describe(t)


# ------------------------------------------------------------------------------ status


def _parse_ts(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(str(ts))
    except ValueError:
        return None


def folder_status(folder: Folder, prereg: Prereg, first_call: str | None) -> tuple[bool, str]:
    """(confirmatory?, why not) for tests that read this folder."""
    rec = folder.info.get("prereg") or {}
    sha = rec.get("sha256")
    if not sha:
        return False, f"{folder.name}: no pre-registration hash recorded when the stage started"
    if sha != prereg.sha256:
        return False, (f"{folder.name}: pre-registration file changed after the stage started "
                       f"(recorded {sha[:12]}, now {prereg.sha256[:12]})")
    created, first = _parse_ts(folder.info.get("created")), _parse_ts(first_call)
    if created and first and created.replace(microsecond=0) > first.replace(microsecond=0):
        return False, f"{folder.name}: hash recorded ({created.isoformat()}) after the first model call ({first_call})"
    return True, ""


# ------------------------------------------------------------------------------ evaluation


def _verdict(comps: list[Component], family: str) -> tuple[str, bool | None]:
    if any(c.error.startswith("not run") for c in comps):
        return "not run", None
    if any(c.error for c in comps):
        return "not evaluable", None
    judged = [c for c in comps if RULES[c.rule].judged]
    if not judged:
        return "descriptive", None
    if all(c.holds is True for c in judged):
        return "supported", True
    if any(c.holds is None for c in judged) and not any(c.holds is False for c in judged):
        return "undecided (missing judgements)", None
    held = [c.what for c in judged if c.holds is True]
    if held:
        return "partly supported: holds for " + "; ".join(held), False
    if all(c.direction for c in judged):
        return "direction only", False
    return "not supported", False


def evaluate(prereg: Prereg, ctx: Context) -> list[Outcome]:
    """Every hypothesis on ctx.runs: each test gathered and decided by its rule at its registered resamples,
    then `decide` (IUT, verdict, Holm)."""
    s = prereg.settings
    ctx.alpha, ctx.confidence = float(s["alpha"]), float(s["confidence"])
    out: list[Outcome] = []
    for h in prereg.hypotheses:
        ctx.used = set()
        resamples = int(h.get("resamples") or (s["primary_resamples"] if h["family"] == "primary" else s["resamples"]))
        st = Settings(int(s["seed"]), resamples, ctx.confidence)
        comps = []
        for i, t in enumerate(h["tests"]):
            t = {"stage": h["stage"], "variant": h.get("variant", ""), **t}
            t["variant"] = t["variant"] or ""
            c = Component(h["id"], i, t["rule"], describe_test(t), variant=t["variant"], test=t)
            to = t.get("threshold_origin")
            if to:
                c.threshold_source, c.threshold_quote, c.threshold_why = (to["source"], QUOTE_SEP.join(to["quote"]),
                                                                          to["why"])
            rule = RULES[t["rule"]]
            if rule.resampled or rule.ci_resampled:
                c.resamples, c.seed = st.resamples, st.seed
            try:
                rule.evaluate(ctx, t, st, c)
            except NotRun as exc:
                c.error = f"not run: {exc}"
            except NotEvaluable as exc:
                c.error = f"not evaluable: {exc}"
            comps.append(c)
        stages = h["stage"] if isinstance(h["stage"], list) else [h["stage"]]
        out.append(Outcome(h["id"], h["family"], str(h.get("statement", "")).strip(), [str(x) for x in stages],
                           sorted(ctx.used), comps, source=h["origin"]["source"],
                           quote=QUOTE_SEP.join(h["origin"]["quote"]), why=h["origin"]["why"]))
    decide(prereg, out, ctx.alpha)
    for o in out:
        reasons = []
        for name in o.folders:
            f = next(f for f in ctx.folders if f.name == name)
            ok, why = folder_status(f, prereg, ctx.first_calls.get(name))
            if not ok:
                reasons.append(why)
        if o.outcome == "not run":
            o.status, o.reason = "n/a", ""
        else:
            if not o.folders:
                reasons.append("no stage folder was read")
            o.status = "exploratory" if reasons else "confirmatory"
            o.reason = "; ".join(reasons)
    return out


def decide(prereg: Prereg, outcomes: list[Outcome], alpha: float) -> None:
    """THE decision of every hypothesis from its decided tests: its p (one test's, or the intersection-union
    p of several), its verdict (all tests must hold), then Holm over the primary family. The analysis, the
    robustness table and the relabelling simulation (`redecide`) all decide through here."""
    for o in outcomes:
        o.p_holm, o.in_holm, o.note = None, False, ""
        ps = {f"{c.index}": c.p for c in o.components if c.p is not None}
        o.p = None
        if ps and not any(c.error for c in o.components):
            o.p = next(iter(ps.values())) if len(ps) == 1 else stats.intersection_union(ps, alpha).p
        o.outcome, o.supported = _verdict(o.components, o.family)
    _holm(prereg, outcomes, alpha)


def redecide(prereg: Prereg, base: Sequence[Outcome], labels: dict[str, np.ndarray],
             changed: dict[str, np.ndarray] | None = None) -> list[Outcome]:
    """The outcomes of `base` (evaluated on some runs frame) with other values of the labels they read
    (`labels`, by position in that frame): every test that read labels is decided again by its own rule
    (`Rule.decide`, the seed and resamples that decided it: the same bootstrap draw, so unchanged labels give
    exactly base's decision), the others kept, then `decide`. `changed` (col -> positions whose label differs
    from base's): only tests reading one of them are decided again, the others are kept as decided."""
    alpha, conf = float(prereg.settings["alpha"]), float(prereg.settings["confidence"])
    out = []
    for o in base:
        comps = []
        for c in o.components:
            if c.reads is None or c.error:
                comps.append(c)
                continue
            c2 = dataclasses.replace(c)
            if changed is not None and not _touches(c.reads, changed):
                comps.append(c)
                continue
            b = int(c.resamples) if c.resamples == c.resamples else 1
            seed = int(c.seed) if c.seed == c.seed else int(prereg.settings["seed"])
            RULES[c.rule].decide(c.reads, labels, c.test, Settings(seed, b, conf), alpha, c2)
            comps.append(c2)
        out.append(dataclasses.replace(o, components=comps))
    decide(prereg, out, alpha)
    return out


def read_positions(reads: Reads) -> np.ndarray:
    """The positions of every label a test reads (a's and b's runs of a paired test, one condition's of a count)."""
    return np.unique(reads.a if reads.b is None else np.concatenate([reads.a, reads.b]))


def _touches(reads: Reads, changed: dict[str, np.ndarray]) -> bool:
    ch = changed.get(reads.col)
    return ch is not None and bool(np.isin(read_positions(reads), ch).any())


def reads_judgements(h: dict) -> bool:
    """Whether some test of the hypothesis reads a judge's labels (its outcome can change with the judge)."""
    return any(RULES[t["rule"]].reads_judgements for t in h["tests"])


def reevaluate(prereg: Prereg, ctx: Context, base: Sequence[Outcome]) -> list[Outcome]:
    """The outcomes on other labels (another judge, corrected gold) in `ctx.runs`: every hypothesis
    that reads judgements is evaluated again, the others are copied from `base` (their numbers do
    not depend on labels), and every hypothesis and Holm decided on the mix (`decide`)."""
    import copy

    judged = [h for h in prereg.hypotheses if reads_judgements(h)]
    sub = dataclasses.replace(prereg, hypotheses=judged, settings={**prereg.settings, "holm_family": []})
    fresh = {o.id: o for o in evaluate(sub, ctx)}
    out = [fresh[o.id] if o.id in fresh else copy.deepcopy(o) for o in base]
    decide(prereg, out, float(prereg.settings["alpha"]))
    return out


def _holm(prereg: Prereg, outcomes: list[Outcome], alpha: float) -> None:
    family = list(prereg.settings.get("holm_family") or [])
    if not family:
        return
    by_id = {o.id: o for o in outcomes}
    ps = {hid: (by_id[hid].p if by_id[hid].p is not None else 1.0) for hid in family}
    for row in stats.holm(ps, alpha):
        o = by_id[row.name]
        o.in_holm = True
        o.p_holm = row.p_holm
        if o.p is None:
            o.note = (o.note + "; " if o.note else "") + "entered the Holm family with p = 1 (not evaluated)"
        elif o.supported and row.p_holm > alpha:
            o.outcome, o.supported = "holds unadjusted only", False


# ------------------------------------------------------------------------------ tables


def table3(outcomes: Sequence[Outcome], prereg: Prereg) -> pd.DataFrame:
    rows = []
    for o in outcomes:
        c0 = o.components[0] if len(o.components) == 1 else None
        rows.append({
            "id": o.id, "family": o.family, "statement": o.statement, "stages": "+".join(o.stages),
            "folders": "; ".join(o.folders), "tests": " AND ".join(c.what for c in o.components),
            "hypothesis_source": o.source, "hypothesis_quote": o.quote, "hypothesis_why": o.why,
            "threshold_source": " AND ".join(c.threshold_source for c in o.components),
            "n": c0.n if c0 else math.nan, "estimate": c0.estimate if c0 else math.nan,
            "lo": c0.lo if c0 else math.nan, "hi": c0.hi if c0 else math.nan,
            "threshold": c0.threshold if c0 else math.nan,
            "p": math.nan if o.p is None else o.p, "in_holm": o.in_holm,
            "p_holm": math.nan if o.p_holm is None else o.p_holm,
            "outcome": o.outcome, "supported": o.supported, "status": o.status, "reason": o.reason,
            "note": "; ".join(x for x in [o.note, *(f"[{c.index}] {c.note}" for c in o.components if c.note),
                                          *(f"[{c.index}] {c.error}" for c in o.components if c.error)] if x),
            "resamples": c0.resamples if c0 else max((c.resamples for c in o.components
                                                       if not math.isnan(c.resamples)), default=math.nan),
            "seed": prereg.settings["seed"], "alpha": prereg.settings["alpha"],
            "prereg_sha256": prereg.sha256,
        })
    return pd.DataFrame(rows)


def components_table(outcomes: Sequence[Outcome]) -> pd.DataFrame:
    rows = []
    for o in outcomes:
        for c in o.components:
            rows.append({"id": o.id, "component": c.index, "rule": c.rule, "test": c.what, "folder": c.folder,
                         "variant": c.variant, "n": c.n, "estimate": c.estimate, "lo": c.lo, "hi": c.hi,
                         "threshold": c.threshold, "p": math.nan if c.p is None else c.p, "holds": c.holds,
                         "direction": c.direction, "resamples": c.resamples, "seed": c.seed,
                         "note": c.note, "error": c.error, "threshold_source": c.threshold_source,
                         "threshold_quote": c.threshold_quote, "threshold_why": c.threshold_why})
    return pd.DataFrame(rows)


def covered_pairs(prereg: Prereg) -> set[tuple[str, str, str, str]]:
    """(stage, variant, a, b) compared by some hypothesis (those pairs are not 'extra')."""
    out = set()
    for h in prereg.hypotheses:
        for t in h["tests"]:
            if "a" in t and "b" in t and isinstance(h["stage"], str):
                out.add((h["stage"], t.get("variant", h.get("variant", "")) or "", t["a"], t["b"]))
    return out


def exploratory_rows(pairs: pd.DataFrame, folders: Sequence[Folder], prereg: Prereg,
                     analyses_done: Sequence[str]) -> pd.DataFrame:
    """Comparisons and analyses the file does not pre-specify: listed in Table 3 as exploratory."""
    rows = []
    stage_of = {f.name: f.stage for f in folders}
    covered = covered_pairs(prereg)
    if pairs is not None and not pairs.empty:
        acc = pairs[pairs["statistic"] == "accuracy_diff_points"]
        tok = pairs[(pairs["statistic"] == "ratio_of_means") & (pairs["metric"] == "tokens")]
        keys = sorted({(r.folder, r.variant, r.a, r.b) for r in pairs.itertuples()})
        for folder, variant, a, b in keys:
            if (stage_of.get(folder), variant, a, b) in covered:
                continue
            ra = acc[(acc["folder"] == folder) & (acc["variant"] == variant) & (acc["a"] == a) & (acc["b"] == b)]
            rt = tok[(tok["folder"] == folder) & (tok["variant"] == variant) & (tok["a"] == a) & (tok["b"] == b)]
            rows.append({
                "analysis": "comparison", "folder": folder, "variant": variant, "a": a, "b": b,
                "n": float(ra["n"].iloc[0]) if len(ra) else (float(rt["n"].iloc[0]) if len(rt) else math.nan),
                "acc_diff_pts": float(ra["estimate"].iloc[0]) if len(ra) else math.nan,
                "acc_diff_lo": float(ra["lo"].iloc[0]) if len(ra) else math.nan,
                "acc_diff_hi": float(ra["hi"].iloc[0]) if len(ra) else math.nan,
                "mcnemar_p": float(ra["p"].iloc[0]) if len(ra) else math.nan,
                "tokens_ratio": float(rt["estimate"].iloc[0]) if len(rt) else math.nan,
                "tokens_ratio_lo": float(rt["lo"].iloc[0]) if len(rt) else math.nan,
                "tokens_ratio_hi": float(rt["hi"].iloc[0]) if len(rt) else math.nan,
                "usage_estimated_calls": int(rt["usage_estimated_calls"].iloc[0])
                if len(rt) and "usage_estimated_calls" in rt else 0,  # the pair's calls of estimated usage
                "status": "exploratory", "reason": "not in the pre-registration file"})
    for name in analyses_done:
        if name not in prereg.analyses:
            rows.append({"analysis": name, "folder": "", "variant": "", "a": "", "b": "", "status": "exploratory",
                         "reason": "not in the pre-registration file", "usage_estimated_calls": 0})
    cols = ["analysis", "folder", "variant", "a", "b", "n", "acc_diff_pts", "acc_diff_lo", "acc_diff_hi",
            "mcnemar_p", "tokens_ratio", "tokens_ratio_lo", "tokens_ratio_hi", "usage_estimated_calls", "status",
            "reason"]
    return pd.DataFrame(rows, columns=cols)


def analysis_status(name: str, prereg: Prereg, folders: Sequence[Folder],
                    first_calls: dict[str, str | None]) -> tuple[str, str]:
    """('pre-specified' | 'exploratory', why) for a descriptive table of the report."""
    if name not in prereg.analyses:
        return "exploratory", "not in the pre-registration file"
    reasons = [why for f in folders if f.records for ok, why in [folder_status(f, prereg, first_calls.get(f.name))]
               if not ok]
    if reasons:
        return "exploratory", "; ".join(reasons)
    return "pre-specified", ""
