"""Kinds of judgement the answer-check judge makes, registered: one module each, found without a list.

LongMemEval's answer check (judge/prompts.py) makes `correct` for every run and `leak` for Org
private runs. A new kind is a module that registers a `Kind`: which judgements it asks for a
record (each an Item with its kind name and exact prompt; none when it does not apply) and
how a reply becomes a label, a status and optional named scores. The judge writes every
kind's judgements to the same judgements file through the schema; the analysis puts each
kind other than correct/leak in runs.csv as `score_<kind>` and in other_judgements.csv, and
the Inspect export gives it a score of its own. Modules outside the tree come in through
harness.plugins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from judge.prompts import Item, PromptSet, items_for as answer_check_items, parse_reply

BUILTIN = ("correct", "leak")


def yes_no(reply: str | None) -> tuple[bool | None, str, dict | None]:
    """The official rule: label = 'yes' in the reply; unparsable when it says neither yes nor no."""
    label, status = parse_reply(reply)
    return label, status, None


@dataclass(frozen=True)
class Kind:
    name: str
    items: Callable[[dict, PromptSet], list[Item]]  # the judgements to make for a record
    read: Callable[[str | None], tuple[bool | None, str, dict | None]] = yes_no  # label, status, scores


_REGISTRY: dict[str, Kind] = {}
_READERS: dict[str, Callable] = {}  # item kind -> how its replies are read


def register(kind: Kind) -> Kind:
    if kind.name in _REGISTRY and _REGISTRY[kind.name] != kind:
        raise ValueError(f"judgement kind {kind.name!r} is registered twice")
    _REGISTRY[kind.name] = kind
    return kind


def kinds() -> list[Kind]:
    from harness import plugins

    plugins.load()
    return list(_REGISTRY.values())


def items_for(record: dict, prompts: PromptSet) -> list[Item]:
    """Every judgement every registered kind asks for this record, in registration order."""
    out: list[Item] = []
    for k in kinds():
        for item in k.items(record, prompts):
            _READERS[item.kind] = k.read
            out.append(item)
    return out


def read(item_kind: str, reply: str | None) -> tuple[bool | None, str, dict | None]:
    return _READERS.get(item_kind, yes_no)(reply)


register(Kind("answer_check", answer_check_items))  # correct (+ leak on Org private runs), judge/prompts.py
