"""Question samples (SPEC 1), declared as data in `conf/config.yaml` and drawn with a seed.

Each sample takes the first `per_type` questions of every type from the order of
its source: `all` is a seeded shuffle of every question id; any other source is a
sample drawn before it (so `scale` keeps the main sample's order). `exclude` drops
the questions of other samples, `abstention: false` drops `_abs` questions, and
`limit` keeps only the first N (for smoke runs). Only ids and
types are needed, so an M file is sampled without loading its histories.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Iterable, Mapping

from .longmemeval import QUESTION_TYPES


class SampleError(ValueError):
    exit_code = 2  # harness.failures.BAD_INPUT


def seeded_order(index: Iterable[tuple[str, str]], seed: int) -> list[str]:
    """Every question id in a seeded random order that does not depend on file order."""
    ids = sorted(qid for qid, _ in index)
    random.Random(f"sample-order:{seed}").shuffle(ids)
    return ids


def first_per_type(order: list[str], qtypes: Mapping[str, str], per_type: int,
                   exclude: set[str] = frozenset(), abstention: bool = True) -> tuple[list[str], dict[str, int]]:
    """The first `per_type` ids of each type in `order`; also how many each type fell short."""
    taken: dict[str, int] = defaultdict(int)
    out = []
    for qid in order:
        t = qtypes[qid]
        if qid in exclude or (not abstention and qid.endswith("_abs")) or taken[t] >= per_type:
            continue
        taken[t] += 1
        out.append(qid)
    short = {t: per_type - taken[t] for t in QUESTION_TYPES if taken[t] < per_type}
    return out, short


def draw(index: list[tuple[str, str]], specs: Mapping[str, Mapping], seed: int,
         names: Iterable[str] | None = None, strict: bool = False) -> dict[str, dict]:
    """Draw the named samples (and the samples they derive from).

    Returns {name: {"ids": [...], "short": {type: missing}}}. A sample that falls
    short of its size is kept and reported (`short`), or refused when `strict`.
    """
    qtypes = dict(index)
    out: dict[str, dict] = {}

    def resolve(name: str, stack: tuple[str, ...] = ()) -> list[str]:
        if name == "all":
            return seeded_order(index, seed)
        if name in out:
            return out[name]["ids"]
        if name in stack:
            raise SampleError(f"samples depend on each other in a cycle: {' -> '.join(stack + (name,))}")
        if name not in specs:
            raise SampleError(f"unknown sample {name!r}; defined: {sorted(specs)}")
        spec = specs[name]
        source = resolve(spec.get("from", "all"), stack + (name,))
        exclude: set[str] = set()
        for other in spec.get("exclude", []) or []:
            exclude |= set(resolve(other, stack + (name,)))
        ids, short = first_per_type(source, qtypes, int(spec["per_type"]), exclude,
                                    bool(spec.get("abstention", True)))
        if spec.get("limit") is not None:
            ids = ids[: int(spec["limit"])]
        if short and strict:
            raise SampleError(f"sample {name!r} needs {spec['per_type']} per type; short by {short}")
        out[name] = {"ids": ids, "short": short}
        return ids

    for name in (names if names is not None else specs):
        resolve(name)
    return out
