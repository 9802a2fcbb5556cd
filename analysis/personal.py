"""`python -m analysis.personal [runs=PATH ...] [out=results/personal] [judge=NAME] [resamples=N]`.

The second seed paper's tables from the personalization records and rubric judgements:
Table 2 (mean +- SD per model x method x dimension), Table 4 (kernel_shared vs
naive_concat: mean difference, 95% bootstrap CI, Welch t, Mann-Whitney U, rank-biserial),
Table 5 (output words by method; Welch t on words; Pearson r of words with latency),
latency and tokens per call, the exposure check at both endpoints, the write-barrier
table (reads that missed a write the user had already made), and Figure 3 (the
kernel_shared - naive_concat differences with their CIs). Groups are independent
samples (different trials per method would do; here each trial meets every method,
but the paper's tests are unpaired and so are these). `make analyze` runs it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from harness.failures import announce
from analysis.load import AnalysisError, find_folders
from judge.rubric import DIMENSIONS, load_rubric
from harness.records import RunDir

A, B = "kernel_shared", "naive_concat"
PRIVATE_ENDPOINT = ("mem0_default", "kernel_private")
SHARED_ENDPOINT = ("kernel_shared",)
RESAMPLES, SEED = 10_000, 0


# ------------------------------------------------------------------------------ statistics

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
    a, b = np.asarray(a, float), np.asarray(b, float)
    out = {"n_a": len(a), "n_b": len(b), "mean_a": a.mean() if len(a) else np.nan,
           "mean_b": b.mean() if len(b) else np.nan}
    out["diff"] = out["mean_a"] - out["mean_b"]
    if len(a) < 2 or len(b) < 2:
        return {**out, "ci_low": np.nan, "ci_high": np.nan, "welch_t": np.nan, "welch_p": np.nan,
                "mwu_u": np.nan, "mwu_p": np.nan, "rank_biserial": np.nan}
    lo, hi = bootstrap_diff_ci(a, b, resamples, seed)
    w = stats.ttest_ind(a, b, equal_var=False)
    mw = stats.mannwhitneyu(a, b, alternative="two-sided")
    return {**out, "ci_low": lo, "ci_high": hi, "welch_t": float(w.statistic), "welch_p": float(w.pvalue),
            "mwu_u": float(mw.statistic), "mwu_p": float(mw.pvalue),
            "rank_biserial": rank_biserial(float(mw.statistic), len(a), len(b))}


# ------------------------------------------------------------------------------ loading

def runs_frame(folders, judge: str | None = None) -> pd.DataFrame:
    rows = []
    for f in folders:
        rd = RunDir(f.path)
        names = sorted(p.name.removesuffix(".rubric.jsonl") for p in (f.path / "judgements").glob("*.rubric.jsonl"))
        name = judge or (names[0] if len(names) == 1 else None)
        if judge is None and len(names) > 1:
            raise AnalysisError(f"{f.path}: several rubric judges {names}; pick one with judge=NAME")
        scores = load_rubric(rd, name) if name else {}
        for r in (x.model_dump(mode="json") for x in rd.records()):
            s = (scores.get(r["run_id"]) or {}).get("scores") or {}
            a = r.get("assistant_tokens") or {}
            rows.append({
                "folder": f.name, "model": (r.get("model") or {}).get("name"), "condition": r["condition"],
                "trial_id": r["trial_id"], "status": r["status"], "words": r["answer_words"], "wall_s": r["wall_s"],
                "answer_s": r["answer_s"], "retrieval_s": r["retrieval_s"], "calls": len(r["calls"]),
                "assistant_prompt": a.get("prompt"), "assistant_output": a.get("output"),
                "tokens_prompt": r["tokens"]["prompt"], "tokens_output": r["tokens"]["output"],
                "cost_list": r["cost_list"], "n_injected": r["n_injected"], "n_candidates": r["n_candidates"],
                "foreign_items": r["foreign_items"], "exposure_private": r["exposure_private"],
                "conversation_retrieved": r["conversation_retrieved"],
                "conversation_injected": r["conversation_injected"], "missed_writes": r["missed_writes"],
                "timed_out": bool((r.get("barrier") or {}).get("timed_out")),
                "barrier": (r.get("barrier") or {}).get("barrier", "on" if r.get("barrier") else None),
                "judge": name, **{d: s.get(d) for d in DIMENSIONS}})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ tables

def table2(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (model, cond), g in runs.groupby(["model", "condition"], sort=True):
        row = {"model": model, "condition": cond, "n": len(g)}
        for d in DIMENSIONS:
            x = g[d].dropna()
            row[f"{d}_mean"], row[f"{d}_sd"], row[f"{d}_n"] = x.mean(), x.std(ddof=1), len(x)
        rows.append(row)
    return pd.DataFrame(rows)


def table4(runs: pd.DataFrame, resamples: int = RESAMPLES) -> pd.DataFrame:
    rows = []
    for model, g in runs.groupby("model", sort=True):
        for d in DIMENSIONS:
            a = g.loc[g.condition == A, d].dropna()
            b = g.loc[g.condition == B, d].dropna()
            if len(a) and len(b):
                rows.append({"model": model, "dimension": d, **compare(a, b, resamples)})
    return pd.DataFrame(rows)


def table5(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for model, g in runs.groupby("model", sort=True):
        ok = g[g.status == "ok"]
        row = {"model": model}
        for cond, c in ok.groupby("condition", sort=True):
            row[f"{cond}_words_mean"], row[f"{cond}_words_sd"] = c.words.mean(), c.words.std(ddof=1)
            if len(c) >= 3 and c.words.nunique() > 1 and c.wall_s.nunique() > 1:
                r = stats.pearsonr(c.words, c.wall_s)
                row[f"{cond}_r_words_latency"], row[f"{cond}_r_p"] = float(r.statistic), float(r.pvalue)
        a, b = ok.loc[ok.condition == A, "words"], ok.loc[ok.condition == B, "words"]
        if len(a) >= 2 and len(b) >= 2:
            w = stats.ttest_ind(a, b, equal_var=False)
            row["words_diff"], row["welch_t"], row["welch_p"] = a.mean() - b.mean(), w.statistic, w.pvalue
        rows.append(row)
    return pd.DataFrame(rows)


def latency_tokens(runs: pd.DataFrame) -> pd.DataFrame:
    g = runs.groupby(["model", "condition"], sort=True)
    out = g.agg(n=("trial_id", "size"), failed=("status", lambda s: int((s != "ok").sum())),
                wall_s=("wall_s", "mean"), answer_s=("answer_s", "mean"), retrieval_s=("retrieval_s", "mean"),
                calls_per_run=("calls", "mean"), assistant_prompt_tokens=("assistant_prompt", "mean"),
                assistant_output_tokens=("assistant_output", "mean"), tokens_prompt=("tokens_prompt", "sum"),
                tokens_output=("tokens_output", "sum"), calls=("calls", "sum"), cost_list=("cost_list", "sum"))
    out["tokens_per_call"] = (out.tokens_prompt + out.tokens_output) / out.calls.where(out.calls > 0)
    return out.reset_index()


def exposure(runs: pd.DataFrame) -> pd.DataFrame:
    """Private endpoint: trials whose read could see another agent's private item (k/n).
    Shared endpoint: private-by-default conversation items among all retrieved items."""
    rows = []
    for (model, cond), g in runs.groupby(["model", "condition"], sort=True):
        if cond in PRIVATE_ENDPOINT:
            rows.append({"model": model, "condition": cond, "endpoint": "private",
                         "exposed_trials": int((g.exposure_private > 0).sum()), "trials": len(g),
                         "foreign_items": int(g.foreign_items.sum())})
        if cond in SHARED_ENDPOINT:
            rows.append({"model": model, "condition": cond, "endpoint": "shared",
                         "conversation_retrieved": int(g.conversation_retrieved.sum()),
                         "conversation_injected": int(g.conversation_injected.sum()),
                         "retrieved_items": int(g.n_candidates.sum()), "injected_items": int(g.n_injected.sum()),
                         "trials": len(g), "foreign_items": int(g.foreign_items.sum())})
    return pd.DataFrame(rows)


def barrier(runs: pd.DataFrame) -> pd.DataFrame:
    k = runs[runs.missed_writes.notna()]
    if k.empty:
        return pd.DataFrame()
    return k.groupby(["model", "condition"], sort=True).agg(
        reads=("trial_id", "size"), barrier=("barrier", "first"), missed_writes=("missed_writes", "sum"),
        reads_missing=("missed_writes", lambda s: int((s > 0).sum())), timeouts=("timed_out", "sum")).reset_index()


def figure3(t4: pd.DataFrame, path: Path) -> Path | None:
    if t4.empty:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{m} / {d}" for m, d in zip(t4.model, t4.dimension)]
    y = np.arange(len(t4))
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(t4) + 1.2))
    ax.errorbar(t4["diff"], y, xerr=[t4["diff"] - t4.ci_low, t4.ci_high - t4["diff"]], fmt="o", capsize=3)
    ax.axvline(0, ls="--", c="grey")
    ax.set_yticks(y, labels)
    ax.set_xlabel(f"{A} - {B} (mean score, 95% bootstrap CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    return path


def md_table(t: pd.DataFrame) -> str:
    def cell(v) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, t.columns)) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in t.itertuples(index=False)]
    return "\n".join([head, "|" + "---|" * len(t.columns), *rows])


def markdown(tables: dict[str, pd.DataFrame], figure: str | None) -> str:
    parts = ["# Personalization study (second seed paper)", ""]
    for name, t in tables.items():
        parts += [f"## {name}", "", md_table(t) if not t.empty else "(no data)", ""]
    if figure:
        parts += ["## Figure 3", "", f"![Figure 3]({figure})", ""]
    return "\n".join(parts)


def analyse(folders, out: Path, judge: str | None = None, resamples: int = RESAMPLES) -> dict[str, pd.DataFrame]:
    runs = runs_frame(folders, judge)
    if runs.empty:
        raise AnalysisError("no personalization records")
    from analysis.tables.fidelity import manifest_rows

    fidelity = pd.DataFrame([{k: r.get(k) for k in ("folder", "setting", "paper", "stage", "status")}
                             for f in folders for r in manifest_rows(f, None)], columns=["folder", "setting", "paper",
                                                                                        "stage", "status"])
    # the report opens with what each folder measured against the second paper (harness.run.fidelity)
    tables = {"fidelity": fidelity, "table2_scores": table2(runs), "table4_kernel_vs_concat": table4(runs, resamples),
              "table5_words": table5(runs), "latency_tokens": latency_tokens(runs), "exposure": exposure(runs),
              "barrier": barrier(runs)}
    if not out.parent.exists():  # results/ made here is one `make analyze` may rewrite later
        from analysis.run import MARKER

        out.parent.mkdir(parents=True)
        (out.parent / MARKER).write_text("This folder is rewritten by `make analyze`; do not edit.\n")
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    for name, t in tables.items():
        t.to_csv(out / f"{name}.csv", index=False, float_format="%.15g")
    fig = figure3(tables["table4_kernel_vs_concat"], out / "figure3.png")
    (out / "personal.md").write_text(markdown(tables, fig.name if fig else None), encoding="utf-8")
    return tables


def main(argv: Sequence[str] | None = None) -> int:
    opts = {"runs": [], "out": "results/personal", "judge": None, "resamples": str(RESAMPLES)}
    for a in (sys.argv[1:] if argv is None else argv):
        k, _, v = a.partition("=")
        if k == "runs":
            opts["runs"] += [x for x in v.split(",") if x]
        elif k in opts:
            opts[k] = v
    try:
        from harness import studies

        mine = studies.analysed_by("analysis.personal")
        folders = [f for f in find_folders(opts["runs"] or None) if f.info.get("kind") in mine]
        if not folders:
            print("analysis.personal: no personalization stage folders; nothing to do", file=sys.stderr)
            return 0
        tables = analyse(folders, Path(opts["out"]), opts["judge"], int(opts["resamples"]))
    except AnalysisError as exc:
        return announce(exc)  # error: ..., exit 2 (harness.failures)
    print(f"{opts['out']}/personal.md: {', '.join(f'{k} ({len(v)} rows)' for k, v in tables.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
