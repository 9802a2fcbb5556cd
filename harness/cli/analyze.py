"""`python -m harness.cli.analyze [runs=PATH,...] [key=value ...]` — what `make analyze` calls.

WHY: the analysis of a stage belongs to its study (harness/studies/: `Study.analysis`, a
"module:function"(argv) -> exit code). This command finds the stage folders, reads each one's
study kind from its stage.json, and runs the analysis of every study that has a folder, once
each, in the order of their kinds; it names no study. A study with no folder is not run, so
either study alone analyses cleanly (exit 0), and a plugged-in study's folders reach its own
analysis.

Arguments: `runs=` (or bare paths) and `runs_root=` choose the folders, as every analysis reads them; any
other `key=value` goes to each chosen analysis that declares the key in its module's
`OPTIONS` (an analysis without `OPTIONS` takes them all), and a key no chosen analysis
declares is refused (exit 2) before anything is written. `out=DIR` goes to the first analysis (the
default study's, which rewrites DIR as a whole); each later one writes DIR/<its kind>.

A folder whose study kind is not registered (a plugged-in study's, its plugin not loaded) is left out,
named with why on a `left out:` line, and the other folders are analysed; the exit code is then at
least 1 (written, something left out). Only when no folder's study is loaded does the command stop (2).

Exit codes: the highest of the analyses' (0 written and clean; 1 written with something left
out, each analysis or the line above says what; 2 bad arguments, no stage folder, or none whose study
is loaded).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Sequence

from harness import studies
from harness.failures import announce


def _paths(argv: Sequence[str]) -> tuple[list[str], str]:
    runs: list[str] = []
    root = "runs"
    for a in argv:
        key, eq, value = a.partition("=")
        if key == "runs" and eq:
            runs += [v for v in value.split(",") if v]
        elif key == "runs_root" and eq:
            root = value
        elif not eq and Path(a).exists():  # a bare path is a folder to read, as analysis.run takes it
            runs.append(a)
    return runs, root


def unopened(root: Path) -> list[Path]:
    """Folders at a stage folder's place (runs/<stage>/<label>) holding files but no stage.json, none above them."""
    return [d for d in sorted(root.glob("*/*")) if d.is_dir() and not d.parent.name.startswith(".")
            and not (d / "stage.json").exists() and not (d.parent / "stage.json").exists() and any(d.iterdir())]


def kinds_present(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The study kinds of the stage folders the arguments choose (pilots left out unless named), and the
    folders left out, each with why: a folder whose study is not registered (a plugin's, not loaded)."""
    from analysis.load import find_folders

    runs, root = _paths(argv)
    if not runs and not Path(root).exists():
        return [], []
    kinds, left_out = set(), []
    if not runs:  # a folder a run step wrote without opening it has no study to analyse it: said, not skipped
        left_out += [f"{d}: no stage.json, so no study kind; a study's run step opens its folder with "
                     "RunDir.for_stage(cfg).open(cfg, info) (docs/extending.md)" for d in unopened(Path(root))]
    for f in find_folders(runs or None, root):
        try:
            kinds.add(studies.get(f.info.get("kind")).kind)
        except studies.StudyError as exc:
            left_out.append(f"{f.path}: {exc}; a plugin's study is analysed with its plugin loaded "
                            "(MEMSPACE_PLUGINS=<its module>, or its package installed)")
    return sorted(kinds), left_out


def analyses(kinds: Sequence[str]) -> dict[str, list[str]]:
    """Each analysis step ("module:function") of the given study kinds -> the kinds it reads. The default
    study's analysis comes first: it rewrites the results folder as a whole, the others write inside it."""
    first = studies.get(None).kind
    out: dict[str, list[str]] = {}
    for kind in sorted(kinds, key=lambda k: (k != first, k)):
        study = studies.get(kind)
        out.setdefault(study.analysis, []).append(kind)  # "module:function", as registration requires
    return out


def _options(module) -> set[str] | None:
    opts = getattr(module, "OPTIONS", None)
    return None if opts is None else set(opts) | {"runs", "runs_root"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(__doc__)
        return 0
    from analysis.load import AnalysisError
    from harness.plugins import PluginError, RegistryError

    try:
        kinds, left_out = kinds_present(argv)
        if not kinds and left_out:
            raise AnalysisError("no stage folder whose study is loaded: " + "; ".join(left_out))
        if not kinds:
            runs, root = _paths(argv)
            raise AnalysisError(f"no stage folders under {','.join(runs) or root}; run a stage first "
                                "(make run STAGE=smoke)")
        steps = analyses(kinds)
        modules = {t: importlib.import_module(t.partition(":")[0]) for t in steps}
        declared = [_options(m) for m in modules.values()]
        if all(d is not None for d in declared):
            known = set().union(*declared)
            unknown = [a for a in argv if a.partition("=")[0] not in known and ("=" in a or not Path(a).exists())]
            if unknown:
                raise AnalysisError(f"no analysis of {', '.join(kinds)} reads {', '.join(unknown)} "
                                    f"(they read: {', '.join(sorted(known))})")
    except (AnalysisError, PluginError, RegistryError, studies.StudyError) as exc:
        return announce(exc)  # error: ..., exit 2 (harness.failures)
    runs, _ = _paths(argv)
    argv = [a for a in argv if "=" in a and a.partition("=")[0] != "runs"] + ([f"runs={','.join(runs)}"] if runs else [])
    out = next((a.partition("=")[2] for a in argv if a.startswith("out=")), None)
    for why in left_out:
        print(f"left out: {why}", file=sys.stderr)
    code = 1 if left_out else 0  # written, something left out (each named above)
    for i, (target, module) in enumerate(modules.items()):
        own = _options(module)
        args = [a for a in argv if own is None or a.partition("=")[0] in own]
        if out and i:  # one out= for several analyses: each after the first in a folder of its own inside it
            args = [a for a in args if not a.startswith("out=")] + [f"out={out}/{steps[target][0].replace('/', '_')}"]
        print(f"analysis of {', '.join(steps[target])}: python -m {target.partition(':')[0]} {' '.join(args)}".rstrip(),
              file=sys.stderr)
        rc = getattr(module, target.partition(":")[2])(args)
        code = max(code, int(rc or 0))
    return code


if __name__ == "__main__":
    sys.exit(main())
