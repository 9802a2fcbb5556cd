"""Kinds of judgement, one module each in this package (or a plugin), chosen per stage or judge.

LongMemEval's answer check (judge/kinds/answer_check.py: `correct` for every run, `leak` for
Org private runs) is the default. Another kind is a module that registers a `Kind`: which
judgements it asks of a record (each an Item with its kind name and exact prompt; none when it
does not apply) and how a reply becomes a label, a status and optional named scores. A kind is
made only where it is chosen: `judge.kinds=[answer_check,brief]` on the command line, or
`judge_kinds: [...]` in a stage's yaml (the judge's list wins). The judge writes every chosen
kind's judgements to the same judgements file; the analysis puts each kind other than
correct/leak in runs.csv as `score_<kind>` and in other_judgements.csv, and the Inspect export
gives it a score of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from harness.plugins import Registry, caller
from judge.prompts import Item, PromptSet, parse_reply

BUILTIN = ("correct", "leak")
DEFAULT = ("answer_check",)


def yes_no(reply: str | None) -> tuple[bool | None, str, dict | None]:
    """The official rule: label = 'yes' in the reply; unparsable when it says neither yes nor no."""
    label, status = parse_reply(reply)
    return label, status, None


@dataclass(frozen=True)
class Kind:
    name: str
    items: Callable[[dict, PromptSet], list[Item]]  # the judgements to make for a record
    read: Callable[[str | None], tuple[bool | None, str, dict | None]] = yes_no  # label, status, scores


KINDS: Registry[Kind] = Registry("judgement kind", __name__)


def register(kind: Kind) -> Kind:
    return KINDS.register(kind.name, kind, caller())


def chosen(judge_cfg=None, stage_cfg=None) -> list[Kind]:
    """The kinds a judge makes: the judge config's `kinds`, else the stage's `judge_kinds`, else the answer check.
    judge_cfg: the judge's typed node (harness.run.settings.JudgeSettings) or its config."""
    names: Sequence[str] | None = None
    for node, key in ((judge_cfg, "kinds"), (stage_cfg, "judge_kinds")):
        value = (node.get(key) if hasattr(node, "get") else getattr(node, key, None)) if node is not None else None
        if value:
            names = [str(n) for n in value]
            break
    return [KINDS.get(n) for n in (names or DEFAULT)]


def items_for(record: dict, prompts: PromptSet, kinds: Sequence[Kind]) -> list[tuple[Item, Kind]]:
    """Every judgement the chosen kinds ask of this record, in the order chosen, with its kind."""
    return [(item, k) for k in kinds for item in k.items(record, prompts)]
