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
PAPER_JUDGE_MODEL = "gpt-5.4"  # the second paper's sole judge (Section 4.2); conf/judge/gpt54.yaml
PRESETS: Registry[Path] = Registry("endpoint preset", None)


def discover(sources: Iterable[Path]) -> Registry[Path]:
    """Register `<group>/<name>` for every preset yaml of every config source folder, in order."""
    for src in sources:
        for group in GROUPS:
            for path in sorted((Path(src) / group).glob("*.yaml")):
                PRESETS.register(f"{group}/{path.stem}", path.resolve(), origin=str(path.resolve()))
    return PRESETS


def is_paper_judge(model) -> bool:
    """GPT-5.4 itself or a dated snapshot of it (gpt-5.4-2026-03-05), never a sibling sharing its prefix
    (gpt-5.4-mini, gpt-5.41): those are other judges. Here, below both, because the fidelity manifest
    (harness.run) and the rubric judge (judge/) ask it."""
    import re

    return re.fullmatch(re.escape(PAPER_JUDGE_MODEL) + r"(-\d{4}-\d{2}-\d{2})?", str(model).strip().lower()) is not None
