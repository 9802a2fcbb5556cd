"""`python -m analysis.run [runs=PATH ...] [out=results] [...]` — the analysis of the agent and backend studies.

`make analyze` runs it through the study registry (harness.cli.analyze) when a folder of those studies exists.

Regenerates, from the run records, the judgements and the ledger alone, a results
folder with CSV tables, PNG figures and one Markdown report (report.md) linking them.
Nothing in it is typed by hand, and two runs on the same inputs write identical bytes.

Arguments (key=value; bare paths are added to runs):
  runs=PATH[,PATH]  stage folders (runs/<stage>/<label>), folders of labels, or a runs root.
                    Default: every stage folder under runs/ except the pilots (pilot, pilot_local).
  out=DIR           output folder (default results). It is replaced as a whole; a folder
                    not written by this command is never overwritten.
  prereg=FILE       hypotheses file (default conf/prereg/hypotheses.yaml)
  judge=NAME        judgements/<NAME>.jsonl gives correctness (default: the stage's judge,
                    or the only judgements file)
  resamples=N       bootstrap resamples of the descriptive tables (default: the file's
                    settings.resamples; hypotheses always use the file's settings)
  replay=org|all|none  which folders get the exposure replay (default org: LongMemEval-Org
                    folders; all adds LongMemEval folders, which rebuilds their whole index)
  lenient=true      exit 0 even when files or lines were left out (data_quality.csv lists them)
  errata=FILE       also every table under the corrected gold of this errata file (data/errata/, harness/data/
                    errata.py) into OUT/corrected/; the report lists the affected questions and the conclusions
                    that change. errata_sha256=HEX pins the file (refused when it differs)
  pool=true         draw a result from folders whose fidelity manifests differ in a pooled setting
                    (refused by default; pooling.csv and the report's first section say which)

Exit codes: 0 written and clean; 1 written, but a private unit was logged under a view
(VIOLATION) or files/lines were left out (data_quality.csv; lenient=true accepts them);
2 bad arguments or nothing readable.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from harness.failures import announce
from analysis import prereg as P
from analysis import report
from analysis import tables as registry
from analysis.load import (
    REPO,
    AnalysisError,
    Folder,
    find_folders,
    first_call_ts,
    ledger_frame,
    load_folder,
    runs_frame,
)
from harness.run.replay import FolderReplay, recall_folder, replay_folder
from analysis.tables.common import Settings
from analysis.tables.exposure import violations

MARKER = ".generated-by-analysis"
REPLAY_MODES = ("org", "all", "none")
OPTIONS = ("runs", "out", "prereg", "judge", "resamples", "replay", "runs_root", "lenient", "pool", "errata",
           "errata_sha256")  # the keys parse_args reads (harness.cli.analyze hands each analysis its own)
FLOAT_FORMAT = "%.15g"


@dataclass
class Results:
    folders: list[Folder]
    prereg: P.Prereg
    settings: Settings
    runs: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    outcomes: list[P.Outcome] = field(default_factory=list)
    replays: list[FolderReplay] = field(default_factory=list)
    recalls: dict[str, tuple[str, list[dict]]] = field(default_factory=dict)  # folder -> (status, search rows)
    figures: dict[str, str] = field(default_factory=dict)  # file -> caption
    first_calls: dict[str, str | None] = field(default_factory=dict)
    ledgers: dict[str, pd.DataFrame] = field(default_factory=dict)
    code: dict = field(default_factory=dict)
    command: str = ""
    replay_mode: str = "org"
    notes: list[str] = field(default_factory=list)  # why a figure was or was not drawn
    options: dict = field(default_factory=dict)  # the command's arguments, for tables that read one
    errata: Any = None  # harness.data.errata.Errata of errata=FILE
    gold: str = "official"  # which gold every table of this Results is under
    corrected_by: Any = None  # the Errata whose corrected gold these runs are under (every judge is scored on it)
    _memo: dict = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame:
        """A registered table's frame, built on first request (analysis.tables)."""
        if name not in self.tables:
            t = registry.get(name)
            df = t.build(self) if t.build else None
            self.tables[name] = pd.DataFrame(columns=list(t.columns)) if df is None else df
        return self.tables[name]

    def memo(self, key: str, make):
        """One computation shared by the tables built from it (e.g. Tables 1 and 2 in one pass)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


# ------------------------------------------------------------------------------ arguments


def parse_args(argv: Sequence[str]) -> dict:
    opts: dict = {"runs": [], "out": "results", "prereg": str(P.DEFAULT_PATH), "judge": None, "resamples": None,
                  "replay": "org", "runs_root": "runs", "lenient": "false", "pool": "false",
                  "errata": None, "errata_sha256": None}
    last = None
    for a in argv:
        if a in ("-h", "--help", "help"):
            print(__doc__)
            sys.exit(0)
        key, eq, value = a.partition("=")
        if eq and key in opts:
            if key == "runs":
                opts["runs"] += [v for v in value.split(",") if v]
            else:
                opts[key] = value
            last = key
        elif not eq and last == "runs" or not eq and Path(a).exists():
            opts["runs"].append(a)
        else:
            raise AnalysisError(f"unknown argument {a!r}; see python -m analysis.run --help")
    if opts["replay"] not in REPLAY_MODES:
        raise AnalysisError(f"replay must be one of {REPLAY_MODES}")
    if opts["resamples"] is not None:
        try:
            opts["resamples"] = int(opts["resamples"])
        except ValueError:
            raise AnalysisError(f"resamples must be a positive integer, got {opts['resamples']!r}") from None
        if opts["resamples"] < 1:
            raise AnalysisError("resamples must be a positive integer")
    opts["judge"] = opts["judge"] or None
    if str(opts["lenient"]).lower() not in ("true", "false"):
        raise AnalysisError(f"lenient must be true or false, got {opts['lenient']!r}")
    opts["lenient"] = str(opts["lenient"]).lower() == "true"
    if str(opts["pool"]).lower() not in ("true", "false"):
        raise AnalysisError(f"pool must be true or false, got {opts['pool']!r}")
    opts["pool"] = str(opts["pool"]).lower() == "true"
    return opts


# ------------------------------------------------------------------------------ analysis


def analyse(opts: dict, progress: bool = True) -> Results:
    pre = P.load(opts["prereg"])
    from harness import studies  # the folders of the studies this analysis reads (others: analysis/personal/)

    mine = studies.analysed_by("analysis.run")
    folders = [f for f in find_folders(opts["runs"] or None, opts["runs_root"]) if (f.info.get("kind") or studies.get(None).kind) in mine]
    if not folders:
        raise AnalysisError(f"no stage folders under {opts['runs'] or opts['runs_root']}")
    for f in folders:
        load_folder(f, opts["judge"])
    s = pre.settings
    st = Settings(int(s["seed"]), int(opts["resamples"] or s["resamples"]), float(s["confidence"]))
    runs = runs_frame(folders)
    ledgers = {f.name: ledger_frame(f) for f in folders}
    from analysis.tables.cost import superseded_costs

    earlier = superseded_costs(folders, ledgers)  # billed calls of attempts a record no longer holds
    if earlier and len(runs):
        keys = list(zip(runs["folder"], runs["run_id"]))
        runs["cost"] = runs["cost"] + [earlier.get(k, (0.0, 0.0))[0] for k in keys]
        runs["cost_paid"] = runs["cost_paid"] + [earlier.get(k, (0.0, 0.0))[1] for k in keys]
    res = Results(folders, pre, st, runs, replay_mode=opts["replay"], options=opts)
    if opts.get("errata"):
        from harness.data import errata as E

        res.errata = E.load(opts["errata"], opts.get("errata_sha256"))
        res.errata.require({(f.info.get("data") or {}).get("sha256"): (f.info.get("data") or {}).get("path")
                            for f in folders if f.records}, "the analysed stage folders")
    res.ledgers = ledgers
    res.first_calls = {f.name: first_call_ts(res.ledgers[f.name]) for f in folders}
    from harness.records.provenance import code_revision

    res.code = code_revision(REPO)

    # exposure replay (Table 4)
    for f in folders:
        if not f.records:
            continue
        wanted = opts["replay"] == "all" or (opts["replay"] == "org" and f.is_org)
        if progress:
            print(f"{f.name}: {'replaying memory calls' if wanted else 'replay skipped'}", file=sys.stderr)
        rep = replay_folder(f.name, f.path, f.info, f.records, enabled=wanted, progress=progress)
        if not wanted and rep.status == "not replayed: replay switched off":
            rep.status = f"not replayed: replay={opts['replay']}" + ("" if f.is_org else " (LongMemEval folder)")
        res.replays.append(rep)
        # the runs' searches against exact search (retrieval_recall.csv): every folder unless replay=none (it
        # rebuilds only the exact dense index, from the encoder's cache)
        status, rows = recall_folder(f.name, f.path, f.info, f.records, enabled=opts["replay"] != "none",
                                     progress=progress)
        if status == "not compared: replay switched off":
            status = "not compared: replay=none"
        res.recalls[f.name] = (status, rows)
    for t in registry.tables():  # every registered table, each built once (a table asks for the ones it reads)
        res.table(t.name)
    return res


# ------------------------------------------------------------------------------ output


def write(res: Results, out: Path) -> Path:
    """Write everything into a fresh folder, then put it in place of `out`."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise AnalysisError(f"{out} exists and was not written by analysis.run; choose another out=")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        _write_into(res, tmp)
        if res.errata is not None:  # every table under the corrected gold (analysis/errata.py)
            from analysis.errata import corrected

            alt = corrected(res)[0]
            (tmp / "corrected").mkdir()
            _write_into(alt, tmp / "corrected")
        (tmp / MARKER).write_text("This folder is rewritten by `make analyze`; do not edit.\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def _write_into(res: Results, folder: Path) -> None:
    for t in registry.tables():
        if t.csv and registry.written(res.table(t.name)):  # neither rows nor columns: not written (report.md says)
            res.table(t.name).to_csv(folder / t.csv, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
    for t in registry.tables():
        if t.draw:
            res.figures.update(t.draw(res, folder))
    (folder / "report.md").write_text(report.render(res), encoding="utf-8")


def summary(res: Results, out: Path) -> str:
    lines = [f"analysed {len(res.folders)} stage folder(s): " + ", ".join(f.name for f in res.folders)]
    for _, c in res.tables["coverage"].iterrows():
        if not c["complete"]:
            lines.append(f"INCOMPLETE: {c['folder']}: {c['records']} of {c['planned']} planned records")
    for _, c in res.tables["shards"].iterrows():
        if c["status"] != "complete" and c["shard"] != "-":  # an unsharded folder: INCOMPLETE above
            what = ("MISSING" if c["status"] == "missing" else "INCOMPLETE") + f": {c['folder']} shard {c['shard']}: "
            lines.append(what + ("never started (no shard folder)" if c["status"] == "missing" else
                                 f"{c['records']} of its {c['runs']} runs recorded")
                         + (" (its driver is running)" if c["running"] else ""))
    dq = res.tables["data_quality"]
    if not dq.empty:
        lines.append(f"DATA QUALITY: {len(dq)} file(s) or line(s) left out (data_quality.csv):")
        for _, p in dq.head(20).iterrows():
            where = p["file"] + (f" line {int(p['line'])}" if p["line"] == p["line"] and p["line"] is not None else "")
            lines.append(f"  {where}: {p['problem']} [{p['consequence']}]")
        if len(dq) > 20:
            lines.append(f"  ... and {len(dq) - 20} more")
    n_missing = int(res.runs["correct"].isna().sum())
    if n_missing:
        lines.append(f"WARNING: {n_missing} run(s) without a usable judgement (not counted; see judgement_problems.csv)")
    mism = res.tables["replay_mismatches"]
    if not mism.empty:
        lines.append(f"WARNING: {len(mism)} replayed memory call(s) differ from the logs (replay_mismatches.csv)")
    lines += violations(res.tables["table4"])
    for o in res.outcomes:
        p = "" if o.p is None else f" p={o.p:.4g}" + ("" if o.p_holm is None else f" (Holm {o.p_holm:.4g})")
        lines.append(f"  {o.id:4s} {o.outcome}{p} [{o.status}]")
    from analysis.tables.judge_robustness import flips

    from analysis.tables.errata import changes

    lines += [f"FLIPS: {x}" for x in flips(res)]
    from analysis.tables.judge_robustness import checks_line

    if checks_line(res):
        lines.append(f"judges: {checks_line(res)}")
    if res.errata is not None:
        n = len(res.tables["errata"])
        lines.append(f"errata {res.errata.path} (sha256 {res.errata.sha256[:16]}): {n} question(s) of these folders "
                     f"affected; every table under the corrected gold in {out}/corrected/")
        lines += [f"CHANGES UNDER CORRECTED GOLD: {x}" for x in changes(res)] or ["no conclusion changes under the corrected gold"]
    empty = [t.csv for t in registry.tables() if t.csv and res.table(t.name).empty and registry.written(res.table(t.name))]
    unwritten = [t.csv for t in registry.tables() if t.csv and not registry.written(res.table(t.name))]
    if empty:
        lines.append(f"{len(empty)} of {len(registry.csv_files())} CSVs hold their header only (no row for these "
                     f"stages; report.md, Files, says what would fill each): {', '.join(empty)}")
    if unwritten:
        lines.append(f"{len(unwritten)} of {len(registry.csv_files())} CSVs not written (no row and no column for "
                     f"these stages; report.md, Files, says what would fill each): {', '.join(unwritten)}")
    lines.append(f"wrote {out}/report.md")
    return "\n".join(lines)


def exit_code(res: Results, lenient: bool) -> int:
    if violations(res.tables["table4"]):
        return 1
    if not res.tables["data_quality"].empty and not lenient:
        return 1
    return 0


def command_line(argv: Sequence[str], folders: Sequence[Folder]) -> str:
    """The command as the report prints it: the folders it read by name, no output folder, no local
    path (harness.records.privacy), so the report of a published dataset equals the original's."""
    parts, named = ["python -m analysis.run"], False
    for a in argv:
        key, eq, value = a.partition("=")
        if not eq or key == "runs":
            if not named:
                parts.append("runs=" + ",".join(f.name for f in folders))
                named = True
        elif key in ("prereg", "runs_root"):
            parts.append(f"{key}={Path(value).name}")
        elif key != "out":
            parts.append(a)
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from harness.data.errata import ErrataError
    from harness.plugins import PluginError, RegistryError

    try:
        opts = parse_args(argv)
        registry.TABLES.discover()  # a plugin that does not import is named before any folder is read
        res = analyse(opts)
        res.command = command_line(argv, res.folders)
        out = write(res, Path(opts["out"]))
    except (AnalysisError, P.PreregError, PluginError, RegistryError, ErrataError) as exc:
        return announce(exc)  # error: ..., exit 2 (harness.failures)
    print(summary(res, out))
    code = exit_code(res, opts["lenient"])
    if code and not violations(res.tables["table4"]):
        print("exit 1: files or lines were left out (see above); lenient=true accepts them", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
