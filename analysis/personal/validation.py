"""The human validation of the rubric judge (Section 4.3, Appendix A.1): a blinded sample, then agreement.

    python -m analysis.personal.validation sample runs=runs/personal/gpt-4o [judge=NAME] [per_method=6]
        [duplicates=6] [seed=0] [dimension=integration] [out=DIR]
    python -m analysis.personal.validation agree ratings=DIR/ratings.csv [key=DIR/key.csv]

`sample` draws `per_method` judged, successful runs of each of the paper's four methods (6 x 4 = 24
unique items, GPT-4o), adds `duplicates` second copies of some of them at positions at
least a quarter of the sheet apart (the intra-rater check), shuffles everything with
`seed` and writes into DIR (default <folder>/validation/):
  sheet.csv   what the rater sees: position, an opaque item id, the user's profile and task
              (what the judge saw), the query, the reply and an empty `score` column; no
              method, run or judge score;
  key.csv     item -> run, method, copy (kept from the rater);
  sample.json how it was drawn (folder, judge, dimension, seed, sizes).
The rater scores each item 1-5 on the dimension with the judge's rubric (the RUBRIC text
in sheet.csv's header comment is the judge's) and saves the filled sheet as ratings.csv
beside the key. `agree` then gives Table 3: by method and overall, the human and judge
means, exact agreement, agreement within one point, mean absolute error and Spearman's
rho with its p (the paper's statistics), on the first copy of every item; and the
intra-rater consistency on the duplicate pairs (same score k of n, mean absolute
difference). `make analyze` builds the same table from every <folder>/validation/ratings.csv.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from analysis.load import AnalysisError
from analysis.markdown import md_table
from harness.failures import announce
from harness.records import RunDir
from judge.rubric import DIMENSIONS, describe_profile, describe_task, load_rubric

from .common import roles

SHEET_COLUMNS = ("position", "item", "profile", "task", "query", "reply", "score")
KEY_COLUMNS = ("item", "run_id", "condition", "trial_id", "copy", "position")


# ------------------------------------------------------------------------------ statistics

def agreement(human: Sequence[float], judge: Sequence[float]) -> dict:
    """Exact match, within one point, MAE and Spearman's rho (with p) of paired ratings."""
    h, j = np.asarray(human, float), np.asarray(judge, float)
    if len(h) != len(j) or not len(h):
        raise ValueError("need the same, non-zero number of human and judge ratings")
    d = np.abs(h - j)
    with warnings.catch_warnings():  # a constant side (every rating 1) has no rank correlation: NaN
        warnings.simplefilter("ignore")
        rho = stats.spearmanr(h, j) if len(h) > 1 else None
    return {"n": len(h), "human_mean": h.mean(), "judge_mean": j.mean(), "exact": float((d == 0).mean()),
            "within_one": float((d <= 1).mean()), "mae": float(d.mean()),
            "spearman_rho": float(rho.statistic) if rho is not None else np.nan,
            "spearman_p": float(rho.pvalue) if rho is not None else np.nan}


def intra_rater(first: Sequence[float], second: Sequence[float]) -> dict:
    a, b = np.asarray(first, float), np.asarray(second, float)
    return {"pairs": len(a), "same": int((a == b).sum()),
            "mean_abs_diff": float(np.abs(a - b).mean()) if len(a) else np.nan}


# ------------------------------------------------------------------------------ sample

def _positions(n_items: int, pairs: list[tuple[int, int]], rng, min_gap: int) -> list[int]:
    """A seeded permutation (item index -> position) placing each pair's copies min_gap apart."""
    for _ in range(20_000):
        pos = rng.permutation(n_items)
        if all(abs(int(pos[a]) - int(pos[b])) >= min_gap for a, b in pairs):
            return [int(p) for p in pos]
    raise AnalysisError(f"cannot place {len(pairs)} duplicates {min_gap} positions apart among {n_items} items")


def item_id(seed: int, run_id: str, copy: int) -> str:
    return "item-" + hashlib.sha256(f"{seed}:{run_id}:{copy}".encode()).hexdigest()[:10]


def sample(folder: Path, judge: str | None = None, per_method: int = 6, duplicates: int = 6, seed: int = 0,
           dimension: str = "integration", out: Path | None = None) -> Path:
    from harness.data import personal as trials_data

    from .load import judge_name

    if dimension not in DIMENSIONS:
        raise AnalysisError(f"dimension must be one of {DIMENSIONS}, got {dimension!r}")
    from analysis.load import Folder

    rd = RunDir(folder)
    if not rd.stage_path.exists():
        raise AnalysisError(f"{folder}: not a stage folder (no stage.json)")
    f = Folder(Path(folder), rd.stage().model_dump(mode="json"), name=f"{Path(folder).parent.name}/{Path(folder).name}")
    name = judge_name(f, judge)
    if name is None:
        raise AnalysisError(f"{folder}: no rubric judgements{f' of {judge}' if judge else ''}; run make judge first")
    lines = load_rubric(rd, name)
    recs = sorted((r.model_dump(mode="json") for r in rd.records()), key=lambda r: r["run_id"])
    judged = [r for r in recs if r["status"] == "ok" and ((lines.get(r["run_id"]) or {}).get("scores") or {})
              .get(dimension) is not None]
    rng = np.random.default_rng(seed)
    chosen: list[dict] = []
    present = {r["condition"] for r in judged}
    who = roles([f])
    for cond in [m for m in who.methods if m in present] or who.order(present):  # the paper's methods (their roles)
        pool = [r for r in judged if r["condition"] == cond]
        if len(pool) < per_method:
            raise AnalysisError(f"{folder}: {cond} has {len(pool)} judged runs, fewer than per_method={per_method}")
        chosen += [pool[i] for i in sorted(rng.choice(len(pool), per_method, replace=False))]
    if duplicates > len(chosen):
        raise AnalysisError(f"duplicates={duplicates} exceeds the {len(chosen)} unique items")
    dup = sorted(int(i) for i in rng.choice(len(chosen), duplicates, replace=False))
    items = [(r, 1) for r in chosen] + [(chosen[i], 2) for i in dup]
    pairs = [(i, len(chosen) + k) for k, i in enumerate(dup)]
    min_gap = max(1, len(items) // 4)
    pos = _positions(len(items), pairs, rng, min_gap)
    trials = {}
    for path in sorted({r["data_path"] for r, _ in items}):
        trials.update({t["trial_id"]: t for t in trials_data.load(path)["trials"]})
    out = Path(out) if out else Path(folder) / "validation"
    out.mkdir(parents=True, exist_ok=True)
    order = sorted(range(len(items)), key=lambda i: pos[i])
    with open(out / "sheet.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(SHEET_COLUMNS)
        for p, i in enumerate(order, start=1):
            r, copy = items[i]
            t = trials[r["trial_id"]]
            w.writerow([p, item_id(seed, r["run_id"], copy), describe_profile(t["profile"]),
                        describe_task(t["task"]), r["query"], r["answer"], ""])
    with open(out / "key.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(KEY_COLUMNS)
        for p, i in enumerate(order, start=1):
            r, copy = items[i]
            w.writerow([item_id(seed, r["run_id"], copy), r["run_id"], r["condition"], r["trial_id"], copy, p])
    info = {"folder": str(Path(folder).resolve()), "judge": name, "dimension": dimension, "seed": seed,
            "per_method": per_method, "duplicates": duplicates, "min_gap": min_gap, "items": len(items),
            "methods": who.order({r["condition"] for r in chosen}),
            "instructions": f"Score every row's reply 1-5 on {dimension} with the judge's rubric (judge/rubric.py "
                            "TEMPLATE); save the filled sheet as ratings.csv beside key.csv."}
    (out / "sample.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out


# ------------------------------------------------------------------------------ agree

def read_ratings(path: Path) -> dict[str, int]:
    out, blank = {}, []
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if rows and not {"item", "score"} <= set(rows[0]):
        raise AnalysisError(f"{path}: needs columns item and score (the filled sheet.csv)")
    for i, row in enumerate(rows, start=2):
        s = (row.get("score") or "").strip()
        if not s:
            blank.append(row["item"])
            continue
        if not s.isdigit() or not 1 <= int(s) <= 5:
            raise AnalysisError(f"{path}:{i}: score must be an integer 1-5, got {s!r}")
        out[row["item"].strip()] = int(s)
    if blank:
        raise AnalysisError(f"{path}: {len(blank)} item(s) not scored yet: {', '.join(blank[:5])}")
    return out


def _f(x, nd=2) -> str:
    return "–" if pd.isna(x) else f"{x:.{nd}f}"


def render(table: pd.DataFrame, intra: dict, info: dict) -> str:
    body = [[r.method, r.n, _f(r.human_mean), _f(r.judge_mean), f"{100 * r.exact:.1f}%", f"{100 * r.within_one:.1f}%",
             _f(r.mae), _f(r.spearman_rho, 3), "–" if pd.isna(r.spearman_p) else f"{r.spearman_p:.2g}"]
            for r in table.itertuples()]
    return (md_table(["method", "n", "human mean", "judge mean", "exact", "within one", "MAE", "Spearman ρ", "p"],
                     body) + f"\n\nDimension {info['dimension']}, judge {info['judge']}. Intra-rater: the same score "
            f"on {intra['same']} of {intra['pairs']} duplicate pairs, mean absolute difference "
            f"{_f(intra['mean_abs_diff'])}.\n")


def agree(ratings: Path, key: Path | None = None) -> tuple[pd.DataFrame, dict, dict]:
    """(Table 3 by method + "all", the intra-rater check, sample.json) for a filled ratings sheet."""
    ratings = Path(ratings)
    key = Path(key) if key else ratings.parent / "key.csv"
    info_path = key.parent / "sample.json"
    if not key.exists() or not info_path.exists():
        raise AnalysisError(f"{key.parent}: no key.csv and sample.json (written by `... validation sample`)")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    k = pd.read_csv(key, dtype={"item": str, "run_id": str})
    human = read_ratings(ratings)
    unknown = sorted(set(human) - set(k["item"]))
    if unknown:
        raise AnalysisError(f"{ratings}: items not in {key}: {', '.join(unknown[:5])}")
    missing = sorted(set(k["item"]) - set(human))
    if missing:
        raise AnalysisError(f"{ratings}: {len(missing)} item(s) of the key have no score: {', '.join(missing[:5])}")
    lines = load_rubric(RunDir(info["folder"]), info["judge"])
    k["human"] = k["item"].map(human)
    k["judge"] = k["run_id"].map(lambda rid: ((lines.get(rid) or {}).get("scores") or {}).get(info["dimension"]))
    if k["judge"].isna().any():
        raise AnalysisError(f"{info['folder']}: the judge {info['judge']} has no {info['dimension']} score for "
                            + ", ".join(k.loc[k["judge"].isna(), "run_id"].head(5)))
    first = k[k["copy"] == 1]
    rated = set(first.condition)  # in the order the sample listed its methods (their roles), then any others
    order = [m for m in info.get("methods") or () if m in rated] + sorted(rated - set(info.get("methods") or ()))
    rows = [{"method": m, **agreement(g.human, g.judge)} for m in order
            for g in [first[first.condition == m]]]
    rows.append({"method": "all", **agreement(first.human, first.judge)})
    pairs = k.pivot_table(index="run_id", columns="copy", values="human", aggfunc="first").dropna()
    intra = intra_rater(pairs[1], pairs[2]) if 2 in pairs else intra_rater([], [])
    return pd.DataFrame(rows), intra, info


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in ("sample", "agree"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    cmd, opts = argv[0], {}
    try:
        for a in argv[1:]:
            key, eq, value = a.partition("=")
            if not eq:
                raise AnalysisError(f"arguments are key=value, got {a!r}")
            opts[key] = value
        if cmd == "sample":
            allowed = {"runs", "judge", "per_method", "duplicates", "seed", "dimension", "out"}
            if set(opts) - allowed or "runs" not in opts:
                raise AnalysisError(f"sample takes runs=FOLDER and optionally {sorted(allowed - {'runs'})}")
            ints = {}
            for name, default in (("per_method", 6), ("duplicates", 6), ("seed", 0)):
                v = opts.get(name, str(default))
                if not v.isdigit():
                    raise AnalysisError(f"{name} must be a non-negative integer, got {v!r}")
                ints[name] = int(v)
            out = sample(Path(opts["runs"]), opts.get("judge"), ints["per_method"], ints["duplicates"], ints["seed"],
                         opts.get("dimension", "integration"), Path(opts["out"]) if opts.get("out") else None)
            print(f"{out}/sheet.csv: {json.loads((out / 'sample.json').read_text())['items']} items for the rater "
                  f"(blind); the key is {out}/key.csv; save the scored sheet as {out}/ratings.csv")
            return 0
        if set(opts) - {"ratings", "key"} or "ratings" not in opts:
            raise AnalysisError("agree takes ratings=FILE and optionally key=FILE")
        table, intra, info = agree(Path(opts["ratings"]), Path(opts["key"]) if opts.get("key") else None)
    except AnalysisError as exc:
        return announce(exc)
    print(render(table, intra, info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
