"""`python -m analysis.run [runs=PATH ...] [out=results] [...]` — what `make analyze` calls.

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
from typing import Sequence

import pandas as pd

from analysis import backends as B, figures, prereg as P, report, tables as T
from analysis.load import (REPO, SHARD_COLUMNS, AnalysisError, Folder, find_folders, first_call_ts,
                           judgement_problems, ledger_frame, load_folder, runs_frame, shard_coverage)
from analysis.replay import FolderReplay, mismatch_rows, replay_folder

MARKER = ".generated-by-analysis"
QUALITY_COLUMNS = ["folder", "file", "line", "problem", "consequence"]
REPLAY_MODES = ("org", "all", "none")
ANALYSES = ("table1", "table1_types", "table2", "exposure_audit", "table5", "table6", "token_decomposition",
            "evidence_hit", "median_ratio", "scale")
FLOAT_FORMAT = "%.15g"


@dataclass
class Results:
    folders: list[Folder]
    prereg: P.Prereg
    settings: T.Settings
    runs: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    outcomes: list[P.Outcome] = field(default_factory=list)
    replays: list[FolderReplay] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)  # file -> caption
    first_calls: dict[str, str | None] = field(default_factory=dict)
    ledgers: dict[str, pd.DataFrame] = field(default_factory=dict)
    code: dict = field(default_factory=dict)
    command: str = ""
    replay_mode: str = "org"
    notes: list[str] = field(default_factory=list)  # why a figure was or was not drawn


# ------------------------------------------------------------------------------ arguments


def parse_args(argv: Sequence[str]) -> dict:
    opts: dict = {"runs": [], "out": "results", "prereg": str(P.DEFAULT_PATH), "judge": None, "resamples": None,
                  "replay": "org", "runs_root": "runs", "lenient": "false"}
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
    return opts


# ------------------------------------------------------------------------------ analysis


def _stage_pairs(folders: Sequence[Folder]) -> list[tuple[Folder, Folder]]:
    """(S folder, M folder) for the scale comparison: the main and scale stages, one folder each."""
    mains = [f for f in folders if f.stage == "main" and f.records]
    scales = [f for f in folders if f.stage == "scale" and f.records]
    return [(m, s) for m in mains for s in scales] if len(mains) == 1 and len(scales) == 1 else []


def analyse(opts: dict, progress: bool = True) -> Results:
    pre = P.load(opts["prereg"])
    # the personalization study has its own tables (analysis/personal.py)
    folders = [f for f in find_folders(opts["runs"] or None, opts["runs_root"]) if f.info.get("kind") != "personal"]
    if not folders:
        raise AnalysisError(f"no stage folders under {opts['runs'] or opts['runs_root']}")
    for f in folders:
        load_folder(f, opts["judge"])
    s = pre.settings
    st = T.Settings(int(s["seed"]), int(opts["resamples"] or s["resamples"]), float(s["confidence"]))
    runs = runs_frame(folders)
    res = Results(folders, pre, st, runs, replay_mode=opts["replay"])
    res.ledgers = {f.name: ledger_frame(f) for f in folders}
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
    t4 = T.exposure_table(runs, res.replays)
    res.tables["table4"] = t4
    res.tables["replay_mismatches"] = pd.DataFrame(
        [row for rep in res.replays for row in mismatch_rows(rep)],
        columns=["folder", "run_id", "call", "kind", "agent", "scope", "query", "error", "logged", "replayed"])

    ct = T.condition_tables(runs, folders, st, t4)
    res.tables.update(table1=ct["table1"], table1_types=ct["table1_types"], table2=ct["table2"],
                      comparisons=ct["pairs"])
    res.tables["table5"] = T.agreement_table(runs, folders)
    res.tables["table6"] = T.cost_table(folders, res.ledgers)
    res.tables["tokens"] = T.tokens_table(runs, folders)
    res.tables["evidence"] = T.evidence_table(runs, folders)
    res.tables["tool_use"] = T.tool_use_table(runs, folders)
    scale = [T.scale_table(runs, s_f, m_f, st) for s_f, m_f in _stage_pairs(folders)]
    res.tables["scale"] = pd.concat(scale, ignore_index=True) if scale else pd.DataFrame()
    res.tables["judgement_problems"] = pd.DataFrame(
        [p for f in folders for p in judgement_problems(f)],
        columns=["folder", "run_id", "kind", "problem", "reply", "counted_as"])
    res.tables["ledger_checks"] = T.ledger_checks(folders, res.ledgers)
    res.tables["data_quality"] = pd.DataFrame([p for f in folders for p in f.problems], columns=QUALITY_COLUMNS)
    res.tables["coverage"] = pd.DataFrame(
        [{"folder": f.name, "family": _family(f), "sweep": (f.info.get("sweep") or {}).get("override_dirname", ""),
          "kind": f.kind, "records": len(f.records), "planned": f.planned,
          "complete": f.kind != "agents" or len(f.records) == f.planned} for f in folders],
        columns=["folder", "family", "sweep", "kind", "records", "planned", "complete"])
    res.tables["shards"] = pd.DataFrame([row for f in folders for row in shard_coverage(f)], columns=SHARD_COLUMNS)

    # pre-registered tests (Table 3)
    ctx = P.Context(runs, folders, t4, res.first_calls)
    res.outcomes = P.evaluate(pre, ctx)
    res.tables["table3"] = P.table3(res.outcomes, pre)
    res.tables["table3_components"] = P.components_table(res.outcomes)
    done = [a for a in ANALYSES if _analysis_present(res, a)]
    res.tables["table3_exploratory"] = P.exploratory_rows(ct["pairs"], folders, pre, done)
    res.tables["runs"] = runs
    backend_folders = [f for f in folders if B.is_backends(f)]
    res.tables["backends"] = B.recall_table(backend_folders)
    res.tables["backends_paper"] = B.paper_table(backend_folders)
    res.tables["backends_survivors"] = B.survivors_table(backend_folders)
    return res


def _family(f: Folder) -> str:
    """The jobs of one sweep (-m) form a family: <stage>/<label before the overrides>."""
    return f"{f.stage}/{(f.info.get('sweep') or {}).get('base_label') or f.label}"


def _analysis_present(res: Results, name: str) -> bool:
    key = {"token_decomposition": "tokens", "evidence_hit": "evidence", "median_ratio": "table1",
           "exposure_audit": "table4"}.get(name, name)
    df = res.tables.get(key)
    if name == "median_ratio":
        return any(not res.tables[k].empty for k in ("table1", "table2"))
    return df is not None and not df.empty


# ------------------------------------------------------------------------------ output


CSV_FILES = {  # table key -> file name
    "runs": "runs.csv", "table1": "table1.csv", "table1_types": "table1_types.csv", "comparisons": "comparisons.csv",
    "table2": "table2.csv", "table3": "table3.csv", "table3_components": "table3_components.csv",
    "table3_exploratory": "table3_exploratory.csv", "table4": "table4.csv",
    "replay_mismatches": "replay_mismatches.csv", "table5": "table5.csv", "table6": "table6.csv",
    "tokens": "tokens.csv", "evidence": "evidence.csv", "tool_use": "tool_use.csv", "scale": "scale.csv",
    "judgement_problems": "judgement_problems.csv", "ledger_checks": "ledger_checks.csv",
    "data_quality": "data_quality.csv", "coverage": "coverage.csv", "shards": "shards.csv",
    "backends": "backends_recall.csv", "backends_paper": "backends_paper.csv",
    "backends_survivors": "backends_survivors.csv",
}


def _key(folder: str) -> str:
    return folder.replace("/", "_")


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
        for key, name in CSV_FILES.items():
            df = res.tables.get(key)
            if df is None:
                df = pd.DataFrame()
            df.to_csv(tmp / name, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
        t1, t2 = res.tables["table1"], res.tables["table2"]
        for f in res.folders:
            if not t1.empty and (t1["folder"] == f.name).any():
                name = f"figure3_{_key(f.name)}.png"
                if figures.figure3(t1, f.name, tmp / name):
                    res.figures[name] = f"Figure 3: accuracy against tokens per condition, {f.name}"
            if not t2.empty and (t2["folder"] == f.name).any():
                name = f"figure6_{_key(f.name)}.png"
                if figures.figure6(t2, f.name, tmp / name):
                    res.figures[name] = f"Figure 6: LongMemEval-Org conditions, {f.name}"
        for f in res.folders:
            if not B.is_backends(f):
                continue
            ok, why = B.realistic(f)
            res.notes.append(f"{f.name}: {why}" + ("" if ok else "; Figures 2 and 7 not drawn"))
            if ok:
                for num, draw, what in ((2, B.figure2, "recall@10 and p50 latency by view selectivity"),
                                        (7, B.figure7, "fan-out against one shared index")):
                    name = f"figure{num}_{_key(f.name)}.png"
                    if draw(f, tmp / name):
                        res.figures[name] = f"Figure {num}: {what}, {f.name}"
        if not res.tables["scale"].empty and figures.figure5(res.tables["scale"], tmp / "figure5.png"):
            res.figures["figure5.png"] = "Figure 5: S vs M histories on the scale questions"
        (tmp / "report.md").write_text(report.render(res, CSV_FILES), encoding="utf-8")
        (tmp / MARKER).write_text("This folder is rewritten by `make analyze`; do not edit.\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def summary(res: Results, out: Path) -> str:
    lines = [f"analysed {len(res.folders)} stage folder(s): " + ", ".join(f.name for f in res.folders)]
    for _, c in res.tables["coverage"].iterrows():
        if c["kind"] == "agents" and c["records"] != c["planned"]:
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
    lines += T.violations(res.tables["table4"])
    for o in res.outcomes:
        p = "" if o.p is None else f" p={o.p:.4g}" + ("" if o.p_holm is None else f" (Holm {o.p_holm:.4g})")
        lines.append(f"  {o.id:4s} {o.outcome}{p} [{o.status}]")
    lines.append(f"wrote {out}/report.md")
    return "\n".join(lines)


def exit_code(res: Results, lenient: bool) -> int:
    if T.violations(res.tables["table4"]):
        return 1
    if not res.tables["data_quality"].empty and not lenient:
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
        res = analyse(opts)
        res.command = "python -m analysis.run " + " ".join(argv)
        out = write(res, Path(opts["out"]))
    except (AnalysisError, P.PreregError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary(res, out))
    code = exit_code(res, opts["lenient"])
    if code and not T.violations(res.tables["table4"]):
        print("exit 1: files or lines were left out (see above); lenient=true accepts them", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
