"""`python -m judge.agreement stage=NAME +judge@judge2=deepseek` — judge validation (Appendix E).

A second judge grades a stratified sample of the answers the main judge judged: 3
runs per (condition, question type), the Org variants of a condition pooled, as the paper
has it (Appendix E: 234 answers = 3 x 6 types x the 13 conditions of main and org; the two
conditions added after its internal review, conf/paper.yaml second_judge.not_sampled, were
not in it and are not sampled), drawn with a generator seeded by cfg.seed, so the sample is
deterministic. The count is printed beside the paper's share of it. Both
judges get the same prompts (the main judge's `judge.prompts`); the second judge
has its own cache identity, its own judgements file
(runs/<stage>/<label>/judgements/<judge2 name>.jsonl, or `<name>.judge2.jsonl` when
both judges share a config name) and its own ledger tag ("judge2:<run_id>").

Writes runs/<stage>/<label>/agreement/agreement.csv (one row per judged answer and kind:
run_id, kind, condition, variant, qtype, label1, label2, ...) and disagreements.csv, and
prints the agreement, Cohen's kappa and each disagreement; `make analyze` recomputes the
same from the two judgements files (analysis/tables/judge_agreement.py), pooled over
stages, and keeps it in the report. The main judge is run first (free when `make judge`
already ran: cached or already judged).
"""

from __future__ import annotations

import csv
import math
import random
import sys
from collections import defaultdict
from pathlib import Path

import hydra
from omegaconf import DictConfig

from harness.failures import exits_with_code
from harness.records import RunDir
from harness.run import sweep as _sweep  # noqa: F401  (hydra.sweep.dir's resolver: a dry run writes no sweep file)
from judge import prompts as P
from judge import common as C
from judge.answer_check import judge_stage, load_judgements

PER_STRATUM = 3
FIELDS = ["run_id", "kind", "condition", "variant", "qtype", "qid", "label1", "label2", "status1", "status2"]
EXTRA = ["reply1", "reply2", "question", "gold", "answer"]


def kappa(labels1: list, labels2: list) -> dict:
    """Agreement and Cohen's kappa (statsmodels' cohens_kappa on the two raters' table)."""
    import numpy as np
    from statsmodels.stats.inter_rater import cohens_kappa

    cats = sorted(set(labels1) | set(labels2))
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(labels1, labels2):
        table[cats.index(x), cats.index(y)] += 1
    agree = float(np.trace(table) / len(labels1))
    if len(cats) < 2:
        return {"n": len(labels1), "agreement": agree, "kappa": math.nan, "kappa_se": math.nan}
    with np.errstate(divide="ignore", invalid="ignore"):
        res = cohens_kappa(table)
    return {"n": len(labels1), "agreement": agree, "kappa": float(res.kappa), "kappa_se": float(res.std_kappa)}


def stratified_sample(records: list[dict], main: dict, seed: int, per_stratum: int = PER_STRATUM,
                      skip: set[str] | frozenset = frozenset()) -> list[dict]:
    """Up to `per_stratum` records per (condition, qtype) among runs whose correctness the main judge
    decided with a model reply (failed runs and failed judgements are not eligible); conditions in
    `skip` are not sampled."""
    strata: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        j = main.get((r["run_id"], "correct"))
        if j and j["status"] in ("ok", "unparsable") and r["condition"] not in skip:
            strata[(r["condition"], r["qtype"])].append(r)
    out = []
    for key in sorted(strata):
        group = sorted(strata[key], key=lambda r: r["run_id"])
        rng = random.Random(f"agreement:{seed}:{'/'.join(key)}")
        out.extend(sorted(rng.sample(group, min(per_stratum, len(group))), key=lambda r: r["run_id"]))
    return out


def paper_design() -> dict:
    """The second judge's sample as the paper has it (conf/paper.yaml second_judge)."""
    from harness.run.fidelity import reference

    return reference()["second_judge"]


def agreement_rows(sample: list[dict], main: dict, second: dict) -> list[dict]:
    rows = []
    for r in sample:
        for kind in ("correct", "leak"):
            j1, j2 = main.get((r["run_id"], kind)), second.get((r["run_id"], kind))
            if j1 is None:
                continue
            rows.append({
                "run_id": r["run_id"], "kind": kind, "condition": r["condition"], "variant": r.get("variant") or "",
                "qtype": r["qtype"], "qid": r["qid"], "label1": j1.get("label"),
                "label2": j2.get("label") if j2 else None, "status1": j1["status"],
                "status2": j2["status"] if j2 else "missing", "reply1": j1.get("reply"),
                "reply2": j2.get("reply") if j2 else None, "question": r.get("question"), "gold": r.get("gold"),
                "answer": r.get("answer")})
    return rows


def summarise(rows: list[dict]) -> dict:
    both = [r for r in rows if isinstance(r["label1"], bool) and isinstance(r["label2"], bool)]
    out = {"rows": len(rows), "compared": len(both), "not_compared": len(rows) - len(both)}
    for scope, sel in (("all", both), ("correct", [r for r in both if r["kind"] == "correct"]),
                       ("leak", [r for r in both if r["kind"] == "leak"])):
        if sel:
            k = kappa([r["label1"] for r in sel], [r["label2"] for r in sel])
            k["only_main_yes"] = sum(r["label1"] and not r["label2"] for r in sel)
            k["only_second_yes"] = sum(r["label2"] and not r["label1"] for r in sel)
            out[scope] = k
    return out


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def run_agreement(cfg, results_dir: str | Path | None = None) -> dict:
    rd = RunDir.for_stage(cfg)
    C.answer_check_stage(cfg, rd, "judge.agreement")  # first: a second judge would not make another study's stage do
    if cfg.get("judge2") is None:
        raise C.NothingToJudge("no second judge: add +judge@judge2=NAME (e.g. make agreement JUDGE2=deepseek)")
    if not rd.records_dir.exists():
        raise C.NothingToJudge(f"{rd.root} has no records; run and judge the stage first")
    prompts = P.load(cfg.judge.get("prompts", "builtin"))
    name1 = str(cfg.judge.name)
    name2 = str(cfg.judge2.name)
    if name2 == name1:
        name2 = f"{name2}.judge2"
    s1 = judge_stage(cfg, rd, prompts=prompts)  # free when already judged (dry_run=true: its plan only)
    main = load_judgements(rd, name1)
    records = [r.model_dump(mode="json") for r in rd.records()]
    design = paper_design()
    sample = stratified_sample(records, main, int(cfg.seed), int(design["per_stratum"]), set(design["not_sampled"]))
    if C.dry_run(cfg):  # the second judge's plan on the sample the main judge's lines give; nothing sent
        if sample:
            judge_stage(cfg, rd, judge_cfg=cfg.judge2, only={r["run_id"] for r in sample}, name=name2,
                        prompts=prompts, tag_prefix="judge2")
        else:
            print(f"dry run: second judge {name2}: a stratified sample of the main judge's judgements, once it has "
                  "judged (none yet)", file=sys.stderr)
        return {"dry_run": True, "judges": {"main": s1["identity"]}}
    if not sample:
        raise C.NothingToJudge(f"the main judge has no model judgement in {rd.root}")
    strata = {(r["condition"], r["qtype"]) for r in sample}
    print(f"second-judge sample: {len(sample)} answers, {design['per_stratum']} per (condition, question type) over "
          f"{len(strata)} strata (not sampled: {', '.join(design['not_sampled'])}); the paper's sample: "
          f"{design['answers']} answers over the main and org stages", file=sys.stderr)
    s2 = judge_stage(cfg, rd, judge_cfg=cfg.judge2, only={r["run_id"] for r in sample}, name=name2,
                     prompts=prompts, tag_prefix="judge2")
    if s1["identity"] == s2["identity"]:
        print("warning: both judges have the same identity; agreement is trivially complete", file=sys.stderr)
    second = load_judgements(rd, name2)
    rows = agreement_rows(sample, main, second)
    stats = summarise(rows)
    if not stats.get("compared"):
        for r in rows:
            print(f"  not compared {r['run_id']} [{r['kind']}]: {name1} {r['status1']}, {name2} {r['status2']}",
                  file=sys.stderr)
        raise C.NothingToJudge(f"no judgement could be compared ({len(rows)} sampled; see the lines above): "
                                 "no agreement or kappa to report")
    stage = str(cfg.stage.name)
    label = str(cfg.stage.label)
    if results_dir or cfg.get("results_dir"):
        out = Path(str(results_dir or cfg.get("results_dir"))) / "agreement" / stage
        out = out / label if label != stage else out
    else:  # beside the judgements, where `make analyze` (which replaces results/) never deletes it
        out = rd.root / "agreement"
    _write_csv(out / "agreement.csv", rows, FIELDS)
    dis = [r for r in rows if isinstance(r["label1"], bool) and isinstance(r["label2"], bool)
           and r["label1"] != r["label2"]]
    _write_csv(out / "disagreements.csv", dis, FIELDS + EXTRA)
    report(stats, rows, dis, name1, name2, out)
    return {"stats": stats, "rows": rows, "disagreements": dis, "out": str(out), "sample": len(sample),
            "judges": {"main": s1["identity"], "second": s2["identity"]}}


def report(stats: dict, rows: list[dict], dis: list[dict], name1: str, name2: str, out: Path) -> None:
    print(f"agreement of {name1} and {name2} on {stats['rows']} judgements "
          f"({stats['compared']} with a label from both):", file=sys.stderr)
    for scope in ("all", "correct", "leak"):
        if scope in stats:
            k = stats[scope]
            print(f"  {scope:<8} n={k['n']:<4} agreement {100 * k['agreement']:.1f}%  Cohen's kappa {k['kappa']:.3f}"
                  f"  (yes only by {name1}: {k['only_main_yes']}, only by {name2}: {k['only_second_yes']})",
                  file=sys.stderr)
    for r in dis:
        print(f"  disagreement {r['run_id']} [{r['kind']}, {r['qtype']}]: {name1}={r['label1']} "
              f"({r['status1']}, {r['reply1']!r}) {name2}={r['label2']} ({r['status2']}, {r['reply2']!r})",
              file=sys.stderr)
    for r in rows:
        if not (isinstance(r["label1"], bool) and isinstance(r["label2"], bool)):
            print(f"  not compared {r['run_id']} [{r['kind']}]: {name1} {r['status1']}, {name2} {r['status2']}",
                  file=sys.stderr)
    print(f"  wrote {out / 'agreement.csv'} and {out / 'disagreements.csv'}", file=sys.stderr)


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with exits_with_code():  # 2 bad input, 3 stopped, 4 budget (harness.failures)
        run_agreement(cfg)


if __name__ == "__main__":
    main()
