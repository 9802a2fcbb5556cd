"""Endpoint presets (conf/model/<name>.yaml, conf/judge/<name>.yaml), found in every config source.

WHY: a preset is a yaml file, and Hydra takes the first file of a name along its search path, so a
plugin's `conf/model/vllm.yaml` would silently shadow the tree's. The presets go through the one
Registry (harness.plugins): the tree's conf/ and every `hydra.searchpath` folder are scanned the
same way, and two files of one name are refused with both paths named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from harness.plugins import Registry

GROUPS = ("model", "judge")
PRESETS: Registry[Path] = Registry("endpoint preset", None)


def discover(sources: Iterable[Path]) -> Registry[Path]:
    """Register `<group>/<name>` for every preset yaml of every config source folder, in order."""
    for src in sources:
        for group in GROUPS:
            for path in sorted((Path(src) / group).glob("*.yaml")):
                PRESETS.register(f"{group}/{path.stem}", path.resolve(), origin=str(path.resolve()))
    return PRESETS
