"""Gold errata: corrections to a benchmark's gold, versioned and pinned by the file's sha256.

An errata file (YAML; data/errata/longmemeval.yaml is LongMemEval's open gold reports) says,
per question id, what is wrong with the official gold and what to use instead, with the public
source of the report and our reasoning:

    errata_format: 1
    name: longmemeval-open-gold-reports
    version: "2026-12-01"
    applies_to: [longmemeval_s_cleaned.json, longmemeval_m_cleaned.json]
    entries:
      - qid: 370a8ff4
        action: answer        # answer: a corrected gold answer; the affected runs are judged again
        answer: "..."         #   against it (make judge ... errata=FILE), into their own judgements file
        source: https://...   # exclude: the gold is not supported and no corrected answer is established:
        reasoning: "..."      #   the question is left out of every table under the corrected gold
                              # evidence: the labelled evidence sessions are wrong (`evidence: [ids]`, or
                              #   null when unknown): evidence-hit rates leave the question out
    notes:                    # reports about the data that change no question (e.g. which file a table used)
      - {source: https://..., reasoning: "..."}

`make analyze errata=FILE` prints every table under the official and the corrected gold
(analysis/errata.py); the sha256 names the corrected judgements and is printed in the report, and
`errata_sha256=` pins it (a file that differs is refused).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

FORMAT = 1
ACTIONS = ("answer", "exclude", "evidence")


class ErrataError(ValueError):
    """A malformed errata file (exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Entry:
    qid: str
    action: str
    source: str
    reasoning: str
    answer: str | None = None
    evidence: tuple[str, ...] | None = None
    sources: tuple[str, ...] = ()  # further reports of the same error


@dataclass
class Errata:
    path: Path
    sha256: str
    name: str
    version: str
    entries: dict[str, Entry]
    notes: list[dict] = field(default_factory=list)
    applies_to: tuple[str, ...] = ()

    @property
    def tag(self) -> str:
        """What names the judgements made against this file's corrected answers."""
        return f"errata-{self.sha256[:12]}"

    def answers(self) -> dict[str, str]:
        return {q: e.answer for q, e in self.entries.items() if e.action == "answer" and e.answer is not None}

    def judgements_name(self, judge: str) -> str:
        return f"{judge}.{self.tag}"


def _text(d: dict, key: str, where: str, required: bool = True) -> str | None:
    v = d.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, (str, int, float)) or not str(v).strip():
        raise ErrataError(f"{where}: `{key}` must be a non-empty text")
    return " ".join(str(v).split())


def load(path: str | Path, pin: str | None = None) -> Errata:
    path = Path(path)
    if not path.exists():
        raise ErrataError(f"errata file {path} does not exist")
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    if pin and not sha.startswith(str(pin).lower()):
        raise ErrataError(f"{path}: sha256 {sha[:16]} is not the pinned {pin}: the file changed")
    try:
        data = yaml.safe_load(raw) or {}
    except yaml.YAMLError as exc:
        raise ErrataError(f"{path}: not YAML ({exc})") from None
    if not isinstance(data, dict) or data.get("errata_format") != FORMAT:
        raise ErrataError(f"{path}: needs `errata_format: {FORMAT}` at the top")
    entries: dict[str, Entry] = {}
    for i, e in enumerate(data.get("entries") or []):
        where = f"{path}: entry {i}"
        if not isinstance(e, dict):
            raise ErrataError(f"{where}: must be a mapping")
        qid = _text(e, "qid", where)
        where = f"{path}: entry {i} ({qid})"
        action = e.get("action")
        if action not in ACTIONS:
            raise ErrataError(f"{where}: action must be one of {ACTIONS}, got {action!r}")
        source = _text(e, "source", where)
        if not source.startswith("https://"):
            raise ErrataError(f"{where}: source must be the public URL of the report")
        if qid in entries:
            raise ErrataError(f"{where}: a second entry for {qid}")
        answer = _text(e, "answer", where) if action == "answer" else None
        evidence = e.get("evidence")
        if action == "evidence" and evidence is not None and not (
                isinstance(evidence, list) and all(isinstance(x, str) for x in evidence)):
            raise ErrataError(f"{where}: evidence must be a list of session ids, or null when unknown")
        extra = e.get("sources") or []
        entries[qid] = Entry(qid, action, source, _text(e, "reasoning", where), answer,
                             tuple(evidence) if evidence is not None else None, tuple(str(s) for s in extra))
    notes = []
    for i, n in enumerate(data.get("notes") or []):
        where = f"{path}: note {i}"
        notes.append({"source": _text(n, "source", where), "reasoning": _text(n, "reasoning", where)})
    if not entries and not notes:
        raise ErrataError(f"{path}: no entries and no notes")
    return Errata(path, sha, str(data.get("name") or path.stem), str(data.get("version") or ""), entries, notes,
                  tuple(data.get("applies_to") or ()))
