"""`python -m analysis.personal [runs=PATH ...] [out=results/personal] [judge=NAME] [resamples=N] [smoke=true]`.

Builds every registered personalization table (analysis/personal/), writes each CSV and
figure and results/personal/personal.md, which opens with each folder's fidelity manifest
against the second paper. `make analyze` runs it through the study registry (harness.cli.analyze)
when a personalization folder exists (`make analyze ARGS="smoke=true"` passes its option here).

Exit codes: 0 written; 1 written, but a table could not be built (Table 7 without the
system-call layer): the report and stderr say which; 2 bad arguments or nothing readable.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from analysis import personal as registry
from analysis.load import AnalysisError, Folder
from harness.failures import announce

from .common import RESAMPLES, Roles, roles
from .load import runs_frame, select


class TableUnavailable(RuntimeError):
    """A table whose input is not in this tree (e.g. Table 7 without harness.kernel.syscalls)."""


@dataclass
class Study:
    folders: list[Folder]
    runs: pd.DataFrame  # every row; `study` and `ablation` below select by the folder's purpose
    resamples: int = RESAMPLES
    smoke: bool = False
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # table -> why it is not built
    figures: dict[str, str] = field(default_factory=dict)

    @property
    def study(self) -> pd.DataFrame:
        """Rows of the paper's main study (smoke folders too when smoke=true asked for them)."""
        return self.runs[self.runs["purpose"].isin(["study", "smoke"])]

    @property
    def ablation(self) -> pd.DataFrame:
        return self.runs[self.runs["purpose"] == "ablation"]

    @property
    def roles(self) -> Roles:
        """The methods' roles (analysis/personal/common.py), from the folders' configs."""
        if "_roles" not in self.__dict__:
            self.__dict__["_roles"] = roles(self.folders, set(self.runs.condition) if len(self.runs) else ())
        return self.__dict__["_roles"]

    def table(self, name: str) -> pd.DataFrame:
        if name not in self.tables:
            t = registry.get(name)
            try:
                df = t.build(self) if t.build else None
            except TableUnavailable as exc:
                self.unavailable[name] = str(exc)
                df = None
            self.tables[name] = pd.DataFrame(columns=list(t.columns)) if df is None else df
        return self.tables[name]


def analyse(folders: list[Folder], resamples: int = RESAMPLES, judge: str | None = None,
            smoke: bool = False) -> Study:
    runs = runs_frame(folders, judge)
    if runs.empty:
        raise AnalysisError("no personalization records")
    st = Study(folders, runs, resamples, smoke)
    for t in registry.tables():
        st.table(t.name)
    return st


def write(st: Study, out: Path) -> Path:
    out = Path(out)
    if not out.parent.exists():  # results/ made here is one `make analyze` may rewrite later
        from analysis.run import MARKER

        out.parent.mkdir(parents=True)
        (out.parent / MARKER).write_text("This folder is rewritten by `make analyze`; do not edit.\n")
    out.mkdir(parents=True, exist_ok=True)
    plain = st.runs.drop(columns=[c for c in st.runs.columns if st.runs[c].map(lambda v: isinstance(v, list)).any()])
    plain.to_csv(out / "runs.csv", index=False, float_format="%.15g", lineterminator="\n")
    for t in registry.tables():
        if t.csv:
            st.table(t.name).to_csv(out / t.csv, index=False, float_format="%.15g", lineterminator="\n")
    for t in registry.tables():
        if t.draw:
            st.figures.update(t.draw(st, out))
    (out / "personal.md").write_text(markdown(st), encoding="utf-8")
    return out


def markdown(st: Study) -> str:
    parts = ["# Personalization study (second seed paper)\n"]
    if st.smoke and (st.runs["purpose"] == "smoke").any():
        parts.append("\n**SMOKE: this report includes smoke folders (smoke=true); its numbers check the pipeline "
                     "and are not the paper's.**\n")
    models = st.runs.drop_duplicates("model")[["model", "model_source", "model_config"]]
    parts.append("\nRows are keyed on the assistant model the endpoint reported (ledger), else the configured id, "
                 "else the config name: " + "; ".join(f"`{m}` ({src}; config {c})" for m, src, c in
                                                      models.itertuples(index=False)) + ".\n")
    for t in registry.tables():
        if t.name in st.unavailable:
            parts.append(f"\n## {t.name}\n\n**Not built: {st.unavailable[t.name]}**\n")
        elif t.section:
            parts.append("\n" + t.section(st).rstrip() + "\n")
    return "".join(parts)


OPTIONS = ("runs", "out", "judge", "resamples", "smoke", "runs_root")  # the keys main reads (harness.cli.analyze)


def main(argv: Sequence[str] | None = None) -> int:
    opts = {"runs": [], "out": "results/personal", "judge": None, "resamples": str(RESAMPLES), "smoke": "false",
            "runs_root": "runs"}
    try:
        for a in (sys.argv[1:] if argv is None else argv):
            if a in ("-h", "--help"):
                print(__doc__)
                return 0
            k, eq, v = a.partition("=")
            if not eq or k not in opts:
                raise AnalysisError(f"unknown argument {a!r}; see python -m analysis.personal --help")
            if k == "runs":
                opts["runs"] += [x for x in v.split(",") if x]
            else:
                opts[k] = v
        if opts["smoke"] not in ("true", "false"):
            raise AnalysisError(f"smoke must be true or false, got {opts['smoke']!r}")
        if not opts["resamples"].isdigit() or int(opts["resamples"]) < 1:
            raise AnalysisError(f"resamples must be a positive integer, got {opts['resamples']!r}")
        smoke = opts["smoke"] == "true"
        folders = select(opts["runs"], opts["runs_root"], smoke)
        if not folders:
            print("analysis.personal: no personalization stage folders; nothing to do", file=sys.stderr)
            return 0
        st = analyse(folders, int(opts["resamples"]), opts["judge"] or None, smoke)
        write(st, Path(opts["out"]))
    except AnalysisError as exc:
        return announce(exc)  # error: ..., exit 2 (harness.failures)
    print(f"{opts['out']}/personal.md: " + ", ".join(f"{k} ({len(v)} rows)" for k, v in st.tables.items()))
    for name, why in st.unavailable.items():
        print(f"error: {name} not built: {why}", file=sys.stderr)
    return 1 if st.unavailable else 0
