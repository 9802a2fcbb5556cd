"""The run plan of a stage: which condition runs on which question, how often, in what order.

Built from the stage config alone (samples, groups, seed), so the same config and
seed always give the same runs in the same interleaved order. Runs of all
conditions are shuffled together (Appendix F(v)), and a run's id names its
condition, variant, question and repeat so records and ledger lines can be
matched to the plan.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from harness.data import source
from harness.data.longmemeval import iter_raw, parse_record, DataError
from harness.data.samples import draw
from harness.run.settings import StageSettings


class PlanError(ValueError):
    exit_code = 2  # harness.failures.BAD_INPUT


@dataclass(frozen=True, order=True)
class RunSpec:
    condition: str
    qid: str
    variant: str  # "" for LongMemEval, "public" / "private" for LongMemEval-Org
    repeat: int

    @property
    def run_id(self) -> str:
        return f"{self.condition}.{self.variant or 'lme'}.{self.qid}.r{self.repeat}"

    @property
    def org(self) -> str:
        """The organisation whose memory the run reads: one per question (and Org variant)."""
        return f"{self.qid}@{self.variant}" if self.variant else self.qid


@dataclass
class Plan:
    stage: str
    label: str
    seed: int
    data: dict
    samples: dict[str, dict]
    runs: list[RunSpec]
    qtypes: dict[str, str]
    source: object = None  # what the data is read from: its path, or a dry run's generated file in memory

    def to_dict(self) -> dict:
        return {
            "stage": self.stage, "label": self.label, "seed": self.seed, "data": self.data,
            "samples": {k: {"n": len(v["ids"]), "short": v["short"], "ids": v["ids"]} for k, v in self.samples.items()},
            "runs": [r.run_id for r in self.runs],
        }

    def render(self, show_runs: bool = True) -> str:
        lines = [f"stage {self.stage}  label {self.label}  seed {self.seed}",
                 f"data  {self.data['path']}  sha256 {self.data['sha256']}  ({self.data['questions']} questions)"
                 + ("  generated in memory, written by the first run (dry run)" if self.data.get("unwritten") else "")]
        for name, s in self.samples.items():
            note = f"  SHORT by {s['short']}" if s["short"] else ""
            lines.append(f"sample {name}: {len(s['ids'])} questions{note}")
        counts: dict[tuple[str, str], set] = {}
        reps: dict[tuple[str, str], int] = {}
        for r in self.runs:
            counts.setdefault((r.condition, r.variant), set()).add(r.qid)
            reps[(r.condition, r.variant)] = reps.get((r.condition, r.variant), 0) + 1
        lines.append(f"{'condition':<24}{'variant':<10}{'questions':>10}{'runs':>8}")
        for (cond, var), qs in sorted(counts.items()):
            lines.append(f"{cond:<24}{var or '-':<10}{len(qs):>10}{reps[(cond, var)]:>8}")
        lines.append(f"total runs {len(self.runs)} (seeded interleaved order below)")
        if show_runs:
            width = len(str(len(self.runs)))
            for i, r in enumerate(self.runs, 1):
                lines.append(f"{i:>{width}} {r.run_id}  [{self.qtypes[r.qid]}]")
        return "\n".join(lines)


def scan(path: Path) -> list[tuple[str, str]]:
    """Validate every record (stops on the first bad one) and return (question id, type) pairs."""
    index, seen = [], set()
    for i, rec in iter_raw(path):
        q = parse_record(rec, i)
        if q.qid in seen:
            raise DataError(i, q.qid, "question_id", "duplicate question id")
        seen.add(q.qid)
        index.append((q.qid, q.qtype))
    return index


def group_conditions(stage, group) -> list[str]:
    """The conditions a group runs: its `conditions` (keys of stage.conditions), else every condition of the
    stage, less its `exclude`. A condition is named once, in the stage's defaults; a group names keys only."""
    defined = list(stage.get("conditions") or {})
    listed, exclude = group.get("conditions"), list(group.get("exclude") or [])
    chosen = list(listed) if listed is not None else defined
    for cond in [*chosen, *exclude]:
        if cond not in defined:
            raise PlanError(f"stage {stage.name!r} names condition {cond!r} but does not define it "
                            f"(add '/condition@stage.conditions.{cond}: {cond}' to its defaults; "
                            f"defined: {', '.join(defined) or 'none'})")
    return [c for c in chosen if c not in exclude]


def build(stage: StageSettings, cfg) -> Plan:
    """The stage's runs: its groups (stage, its typed node: harness.run.settings.stage_node) over the samples
    drawn from the data set; cfg gives the data set, samples, seed and cache only."""
    path = source.resolve(cfg.data, write=not cfg.get("dry_run"))
    index = scan(path)
    groups = list(stage.get("groups") or [])  # `~stage.groups` removed the key: no groups, not an AttributeError
    if not groups:
        raise PlanError(f"stage {stage.name!r} has no groups of runs")
    wanted = sorted({g["sample"] for g in groups})
    samples = draw(index, cfg.samples, int(cfg.seed), names=wanted)
    runs: set[RunSpec] = set()
    for g in groups:
        repeats = int(g.get("repeats", 1))
        if repeats < 1:
            raise PlanError(f"repeats must be >= 1, got {repeats}")
        for cond in group_conditions(stage, g):
            for qid in samples[g["sample"]]["ids"]:
                for rep in range(repeats):
                    runs.add(RunSpec(cond, qid, str(g.get("variant", "") or ""), rep))
    order = sorted(runs)
    random.Random(f"run-order:{cfg.seed}:{stage.name}").shuffle(order)
    data = {"path": str(path), "kind": str(cfg.data.kind),
            "sha256": source.cached_sha256(path, Path(str(cfg.cache_dir))), "questions": len(index)}
    if isinstance(path, source.Unwritten):
        data["unwritten"] = True
    return Plan(str(stage.name), str(stage.label), int(cfg.seed), data,
                {k: samples[k] for k in samples}, order, dict(index), path)
