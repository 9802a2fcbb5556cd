"""Study kinds, one module each, registered: what `make run`, `make judge` and `make analyze` do with a stage.

A stage's `stage.kind` names its study. The study says, once, where its run step is (plan,
preflight and driver: it receives the config and the sweep), how its answers are judged
(None: nothing to judge), which analysis reads its folders (harness.cli.analyze runs it), and which record schema its
records/ holds. The commands dispatch through this registry and spell no kind; a new study
is one module here (or a plugin, harness.plugins) that calls `register`.

Steps are named as "module:function" and imported when used, so the registry imports none
of the heavy code it points to. Such a string is an import all the same: tests/test_import_graph.py
reads it as one, so the kind modules (`harness.studies.*`) sit above the analysis and the benchmarks
they name, beside the command line, while this registry stays below the driver, the judge and the
analysis that read it (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable

from harness.plugins import Registry, caller


@dataclass(frozen=True)
class Study:
    kind: str
    run: str  # "module:function"(cfg, sweep) -> None
    judge: str | None  # "module:function"(cfg, run_dir) -> exit code; None: no judge
    analysis: str  # "module:function"(argv) -> exit code: what `make analyze` runs on its folders (harness.cli.analyze)
    record: str = "record"  # harness.records.schema name of its records
    power: str | None = None  # "module:function"(cfg, plan, forecast rows) -> str: a dry run's power lines
    judge_refusal: str | None = None  # "module:function"(cfg) -> why this judge is refused, or None (asked in a dry run)
    judge_checks: str = ""  # the commands that check this study's judge (named when another study's are refused)
    # "module:function"(folder, judge name or None) -> [(file name, inspect_ai EvalLog)]: how `make view`
    # (analysis.export_inspect) writes its folders; None: its records are agent run records ("record"),
    # which analysis.export_inspect writes itself
    inspect: str | None = None
    publishable: bool = False  # `make publish` (analysis.publish) can write its folders as tables
    # "module:function"(cfg, job overrides): a later job of a preset=paper sweep checked before job 0 runs
    # (raises what the job's own preflight would); None: each job is checked when it starts
    sweep_check: str | None = None
    # its run step applies a preset's lock to its stage (harness.run.fidelity: every setting beside the paper's,
    # refused unless allowed); a study that does not is refused whole under any preset (harness.cli.run)
    locked: bool = False
    about: str = ""

    def step(self, name: str) -> Callable[..., Any]:
        target = getattr(self, name)
        if target is None:
            raise StudyError(f"study kind {self.kind!r} has no {name} step")
        module, _, fn = target.partition(":")
        return getattr(importlib.import_module(module), fn)


class StudyError(ValueError):
    exit_code = 2  # bad input (harness.failures)


STUDIES: Registry[Study] = Registry("study kind", __name__)


STEPS = ("run", "judge", "analysis", "power", "judge_refusal", "inspect", "sweep_check")
STEP = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def register(study: Study) -> Study:
    """Each step is "module:function" (None where optional): the one spelling the commands import and the layer
    test reads as an import; anything else is refused here, at registration."""
    for name in STEPS:
        value = getattr(study, name)
        needed = value is not None or name in ("run", "analysis")
        if needed and not (isinstance(value, str) and STEP.fullmatch(value)):
            raise StudyError(f"study kind {study.kind!r}: its {name} step {value!r} is not \"module:function\"")
    return STUDIES.register(study.kind, study, caller())


def get(kind: str | None) -> Study:
    kind = str(kind or "agents")
    if kind not in STUDIES:
        raise StudyError(f"stage.kind {kind!r} is no registered study (known: {', '.join(STUDIES.names())})")
    return STUDIES.get(kind)


def kinds() -> list[str]:
    return STUDIES.names()


def analysed_by(module: str) -> set[str]:
    """The study kinds whose folders the analysis in `module` (or a module of that package) reads."""
    return {k for k, s in STUDIES.items().items()
            if (m := s.analysis.partition(":")[0]) == module or m.startswith(module + ".")}
