"""Hydra sweeps seen from a stage: each multirun job's own label, and the -m flag's position.

Shared by every command that takes a stage (harness.cli.run, judge.run): a sweep's jobs find
their folders the same way whether they run or judge, so this lives below both.
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import re
import shutil
import tempfile

from omegaconf import OmegaConf

_DRY_SWEEP_DIR: list[str] = []


def sweep_dir(dry_run, real: str) -> str:
    """hydra.sweep.dir: `real` (under runs_dir), or for a dry run a private temporary folder removed when the
    process ends. Hydra writes multirun.yaml and makes each job's folder there before any job runs; a dry run
    writes nothing under runs/ (conf/config.yaml: ${memspace_sweep_dir:${dry_run},...})."""
    if not dry_run:  # as the commands read it (`if cfg.dry_run`): any true value is a dry run, `yes` too
        return real
    if not _DRY_SWEEP_DIR:
        _DRY_SWEEP_DIR.append(tempfile.mkdtemp(prefix="memspace-dry-run-sweep-"))
        atexit.register(shutil.rmtree, _DRY_SWEEP_DIR[0], True)
    return _DRY_SWEEP_DIR[0]


# every command that composes conf/config.yaml imports this module first (harness.cli.run, judge.*)
OmegaConf.register_new_resolver("memspace_sweep_dir", sweep_dir, replace=True)


def sweep_label(cfg) -> dict | None:
    """In a multirun job, set stage.label to `<label>+<overrides>` and return what stage.json records
    (e.g. smoke+model-deepseek+seed-0; `make judge` with the same -m arguments finds the same folders).

    The overrides are the job's, sorted, without the keys listed under
    hydra.job.config.override_dirname.exclude_keys (shard, where things live, speed, the judge and,
    by the pattern judge.*, every judge setting): the
    shards of one combination share one folder, and a relaunch with the same command finds it.
    A long value (a path, a list) is cut and tagged with its hash.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    dirname = str(hc.job.override_dirname or "")
    base = str(cfg.stage.label)
    excluded = set(hc.job.config.override_dirname.exclude_keys)
    parts = []
    for o in sorted(str(o) for o in hc.overrides.task):
        key, _, value = o.partition("=")
        if any(fnmatch.fnmatchcase(key.lstrip("+~"), x) for x in excluded):  # judge.*: every judge setting
            continue
        parts.append(label_part(key, value))
    if parts:
        suffix = "+".join(parts)
        if len(suffix) > 150:
            suffix = suffix[:120] + "~" + hashlib.sha256(suffix.encode()).hexdigest()[:12]
        cfg.stage.label = f"{base}+{suffix}"
    return {"overrides": [str(o) for o in hc.overrides.task], "override_dirname": dirname, "base_label": base}


def label_part(key: str, value: str) -> str:
    """One override as the label writes it: `seed-1`, `model-deepseek`; a DSN, a note, a path, a list by its hash
    (`index.dsn-h1f2e3d4c`); a key that is not one of the harness's own configuration (`+zqacme.account`) by its hash
    too, with its value (`k1a2b3c4d-h5e6f7a8b`), and a credential's value always: a label is published with the
    stage, so a configuration string, a user's key or a number they chose under it never is as written."""
    own = _own_key(key)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", key) if own else "k" + hashlib.sha256(key.encode()).hexdigest()[:8]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", value) if own and _label_value(key, value) else \
        "h" + hashlib.sha256(value.encode()).hexdigest()[:8]
    return f"{name}-{safe}"


def _own_key(key: str) -> bool:
    """A key path of the harness's own configuration (`seed`, `model`, `stage.conditions.tool_bm25.k`): its first
    part a configuration root and every part a word the harness writes; a credential's name (`password`) never."""
    from harness.records.privacy import _KEY_FIELD, config_roots, harness_word, tree_keys

    parts = key.lstrip("+~").split(".")
    return parts[0] in config_roots() and all(harness_word(x) or x in tree_keys() for x in parts) \
        and not any(_KEY_FIELD.match(x) for x in parts)


def _label_value(key: str, value: str) -> bool:
    """Whether a swept value is written into the label as it is: a number, a flag, or a preset's name of the
    key's group (`model=deepseek`, `seed=1`). Any other (a DSN, a host, a path, a note, a list) is named by its
    hash: a label is published with the stage, and a configuration string is never published as written."""
    from harness.records.privacy import local_preset

    return re.fullmatch(r"-?\d+(?:\.\d+)?|true|false|null", value, re.IGNORECASE) is not None or \
        local_preset(key.lstrip("+~"), value) is not None


def multirun_flag_first(argv: list[str]) -> list[str]:
    """Hydra's parser takes -m/--multirun only before the overrides; `make run STAGE=x ARGS="-m ..."`
    puts it after stage=x, so move it to the front."""
    flags = [a for a in argv[1:] if a in ("-m", "--multirun")]
    return argv[:1] + flags + [a for a in argv[1:] if a not in ("-m", "--multirun")]


FALSE = ("false", "null", "0", "0.0", "", "''", '""')  # what Hydra reads as a false dry_run; any other value is true


def dry_sweep_here(argv: list[str]) -> list[str]:
    """A dry run's sweep plans its jobs in this process: whatever launcher the command names (hydra/launcher=slurm
    submits each job with sbatch, which starts runs and reaches the cluster's hosts), a dry run of a sweep runs on
    Hydra's basic launcher. The allowlist is the other way round: only a sweep whose every dry_run value is false
    keeps its launcher."""
    if not any(a in ("-m", "--multirun") for a in argv[1:]):
        return argv
    values = [a.partition("=")[2] for a in argv[1:] if a.lstrip("+").partition("=")[0] == "dry_run"]
    if not any(v.strip().lower() not in FALSE for value in values for v in value.split(",")):
        return argv
    kept = [a for a in argv[1:] if a.lstrip("+~").partition("=")[0] != "hydra/launcher"]
    return argv[:1] + kept + ["hydra/launcher=basic"]
