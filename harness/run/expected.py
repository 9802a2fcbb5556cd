"""What a stage gives on the embedded defaults (conf/expected/<stage>.yaml): measured from run records,
printed beside each condition at the end of the stage, so a newcomer can judge a run.

    python -m harness.run.expected runs/smoke/smoke_seed0 runs/smoke/smoke_seed1 ... [--write]

reads the judged run folders of one stage (one per seed) and prints, or with --write writes, the file.
The numbers come from the records, never typed by hand, so the file is re-measured by running this
again. Per condition:
- accuracy: the Wilson 95% interval of the share judged correct, pooled over every finished run of
  every seed (an unjudged run counts as wrong, as the stage's summary counts it). A failed run (out of
  retries: on a loaded machine a call can pass model.timeout_s) measures the machine, not the
  condition: it is left out and counted in the file (`failed_left_out`). With 3 questions per
  seed the per-seed shares move in steps of a third, so their min/max would say more about the draw of
  questions than about the condition; the interval states the uncertainty of the pooled share.
- tokens_per_run: the smallest and largest tokens (prompt + output) of one run over every run, widened
  by TOKENS_MARGIN each way: a stage's tokens per run is a mean over its runs, so it lies inside the
  per-run extremes, and the margin absorbs questions with longer histories than the measured ones.
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import date
from pathlib import Path

import yaml

EXPECTED = Path(__file__).resolve().parents[2] / "conf" / "expected"
Z95 = 1.959964  # two-sided 95% normal quantile
TOKENS_MARGIN = 0.25  # tokens_per_run: observed per-run min and max widened by a quarter each way


def run_tokens(r) -> int:
    """The tokens of one run as the stage's summary counts them: prompt + output over its calls."""
    return r.tokens.prompt + r.tokens.output


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of k successes in n trials (0 <= low <= k/n <= high <= 1)."""
    if n <= 0:
        raise ValueError("no runs: no interval")
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # exact at the ends (k = 0: low 0; k = n: high 1), and never past the share through rounding
    return (0.0 if k == 0 else max(0.0, min(p, mid - half)), 1.0 if k == n else min(1.0, max(p, mid + half)))


def measure(folders: list[Path]) -> dict:
    """The expected file's content from judged run folders of one stage: per condition runs, correct,
    the accuracy interval and the tokens range; `measured` names the date, seeds, model, encoder, code."""
    from harness.records.rundir import RunDir

    runs: dict[str, list[tuple[bool, int]]] = {}
    failed: dict[str, int] = {}
    seeds, models, encoders, commits, stages, applies = set(), set(), set(), set(), set(), set()
    for folder in folders:
        rd = RunDir(folder)
        cfg = yaml.safe_load((Path(folder) / "config.yaml").read_text(encoding="utf-8"))
        labels = {rid: j.label for (rid, kind), j in rd.judgements(str(cfg["judge"]["name"])).items()
                  if kind == "correct"}
        applies.add((("model", cfg["model"]["name"]), ("encoder", cfg["encoder"]["name"]),
                     ("data", cfg["data"]["kind"])))
        if not labels:
            raise ValueError(f"{folder}: no judgements of {cfg['judge']['name']}: judge the stage first")
        for r in rd.records():
            if r.status != "ok":
                failed[r.condition] = failed.get(r.condition, 0) + 1
                continue
            runs.setdefault(r.condition, []).append((labels.get(r.run_id) is True, run_tokens(r)))
            seeds.add(r.seed)
            stages.add(r.stage)
            models.add(str(r.model.get("model")))
            encoders.add(str(((r.memory_space or {}).get("encoder") or {}).get("encoder_id") or r.encoder.get("name")))
            commits.add(r.code.commit[:12] if r.code.commit else "unknown")
    if not runs:
        raise ValueError("no run records in " + ", ".join(map(str, folders)))
    if len(stages) > 1 or len(applies) > 1:
        raise ValueError(f"the folders hold more than one stage or setting: {sorted(stages)}, {sorted(applies)}")
    conditions = {}
    for cond, rs in sorted(runs.items()):
        n, k = len(rs), sum(ok for ok, _ in rs)
        lo, hi = wilson(k, n)
        tmin, tmax = min(t for _, t in rs), max(t for _, t in rs)
        conditions[cond] = {"runs": n, "correct": k, "accuracy": [round(lo, 2), round(hi, 2)],
                            "tokens_observed": [tmin, tmax],
                            "tokens_per_run": [math.floor(tmin * (1 - TOKENS_MARGIN)),
                                               math.ceil(tmax * (1 + TOKENS_MARGIN))],
                            "failed_left_out": failed.get(cond, 0)}
    stage = stages.pop()
    return {"stage": stage, "applies_to": dict(applies.pop()),
            "measured": {"date": date.today().isoformat(), "seeds": sorted(seeds),
                         "model": ", ".join(sorted(models)), "encoder": ", ".join(sorted(encoders)),
                         "code": ", ".join(sorted(commits)),
                         "command": f"python -m harness.run stage={stage} seed=S (S in {sorted(seeds)}); "
                                    f"python -m harness.run.expected <their folders> --write"},
            "method": f"accuracy: Wilson 95% interval of the pooled share judged correct; tokens_per_run: "
                      f"per-run min/max widened by {TOKENS_MARGIN:.0%} (harness/run/expected.py)",
            "conditions": conditions}


HEADER = """\
# What `make run STAGE={stage}` gives on the embedded defaults, printed beside each condition at the
# end of the stage (harness/run/expected.py: expected_lines) so a newcomer can judge the run. Written
# by `python -m harness.run.expected <run folders> --write` from judged records (never by hand); see
# docs/measurements.md. Plain yaml read by path: no stage composes it, the fidelity manifest never sees
# it. A stage on another model, encoder or data prints the ranges with a note that they do not apply.
"""


def render(measured: dict) -> str:
    """The expected file's text: the header and what `measure` returned (without the stage's name)."""
    body = {k: measured[k] for k in ("applies_to", "measured", "method", "conditions")}
    return HEADER.format(stage=measured["stage"]) + yaml.safe_dump(body, sort_keys=False, width=100, default_flow_style=None)


def expected_lines(cfg, got: dict[str, tuple[int, float | None, float]]) -> list[str]:
    """The range each condition gives on the embedded defaults (conf/expected/<stage>.yaml, measured) beside what
    this stage gave, each figure outside its range named (or that none is measured yet), so the end of a stage
    says whether its numbers look right. `got`: condition -> (finished runs, their accuracy or None when not
    judged, their tokens per run); failed runs are left out, as the ranges were measured. Fewer runs than a
    measured seed had make an accuracy outside its range likely by chance: said so."""
    path = EXPECTED / f"{cfg.stage.get('name')}.yaml"
    if not path.exists():
        return []
    exp = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    want = exp.get("applies_to") or {}
    here = {"model": cfg.model.get("name"), "encoder": (cfg.get("encoder") or {}).get("name"),
            "data": (cfg.get("data") or {}).get("kind")}
    off = [f"{k} {here.get(k)} (expected for {v})" for k, v in want.items() if str(here.get(k)) != str(v)]
    rows = exp.get("conditions") or {}
    where = f"conf/expected/{path.name}"
    m = exp.get("measured")
    if not rows or not m:
        return [f"expected on the embedded defaults: not yet measured ({where})"]
    seeds = len(m["seeds"]) if isinstance(m, dict) and m.get("seeds") else 1
    when = f"{m['date']}, seeds {','.join(map(str, m['seeds']))}" if isinstance(m, dict) else str(m)
    out = [f"expected on the embedded defaults ({where}, measured {when})"
           + (f"; they do not apply here: {', '.join(off)}" if off else "") + ":"]
    for c in sorted(got):
        r = rows.get(c)
        if not r:
            out.append(f"  {c:<22} not measured")
            continue
        acc, tok = r["accuracy"], r["tokens_per_run"]
        n, acc_got, tok_got = got[c]
        if not n:
            out.append(f"  {c:<22} accuracy {acc[0]:.0%}-{acc[1]:.0%}, tokens/run {tok[0]:,}-{tok[1]:,}; this run: "
                       "no finished run to set beside it")
            continue
        # this run's figures as compared (one decimal: 56.2% is outside 3%-56%), each outside its range named
        acc_text = "accuracy not judged" if acc_got is None else f"accuracy {acc_got:.1%}"
        outside = ([acc_text] if acc_got is not None and not acc[0] <= acc_got <= acc[1] else []) \
            + ([f"tokens/run {tok_got:,.1f}"] if not tok[0] <= tok_got <= tok[1] else [])
        per_seed = r["runs"] / seeds if "runs" in r else 0
        few = n < per_seed
        verdict = f"; this run {acc_text}, tokens/run {tok_got:,.1f}: " + (
            f"OUTSIDE: {', '.join(outside)}" if outside else "within" if acc_got is not None else "tokens within") + (
            f" ({n} finished run(s), fewer than a measured seed's {per_seed:g}: an accuracy outside is likely by "
            "chance)" if few and outside else "")
        out.append(f"  {c:<22} accuracy {acc[0]:.0%}-{acc[1]:.0%}, tokens/run {tok[0]:,}-{tok[1]:,}"
                   + (f" ({r['correct']} of {r['runs']} measured runs correct)" if "runs" in r else "") + verdict)
    return out


def figures(records, labels: dict | None) -> dict[str, tuple[int, float | None, float]]:
    """Per condition, what expected_lines sets beside its range, counted as the ranges were measured (`measure`):
    (finished runs, the share of them judged correct or None without judgements, their mean tokens per run); a
    failed run is left out."""
    by: dict[str, list] = {}
    for r in records:
        by.setdefault(r.condition, []).append(r)
    out = {}
    for c, rs in by.items():
        fs = [r for r in rs if r.status == "ok"]
        out[c] = (len(fs), sum(labels.get(r.run_id) is True for r in fs) / len(fs) if labels and fs else None,
                  sum(run_tokens(r) for r in fs) / len(fs) if fs else 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.run.expected", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="judged run folders of one stage, one per seed")
    ap.add_argument("--write", action="store_true", help="write conf/expected/<stage>.yaml (else print it)")
    args = ap.parse_args(argv)
    try:
        got = measure(args.folders)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.write:
        path = EXPECTED / f"{got['stage']}.yaml"
        path.write_text(render(got), encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    else:
        print(render(got), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
