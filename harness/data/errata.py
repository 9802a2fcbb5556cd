"""Gold errata: corrections to a benchmark's gold, versioned and pinned by the file's sha256.

An errata file (YAML; data/errata/longmemeval.yaml is LongMemEval's open gold reports) says,
per question id, what is wrong with the official gold and what to use instead, with the public
source of the report and our reasoning:

    errata_format: 1
    name: longmemeval-open-gold-reports
    version: "2026-12-01"
    applies_to:               # the data files the corrections are about, by content (sha256); `file` is for
      - {file: longmemeval_s_cleaned.json, sha256: d6f21ea9...}   # the reader: a renamed copy still matches
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
`errata_sha256=` pins it: the full 64-digit sha256 (a prefix is refused: a one-character pin would
accept almost any file). `applies_to` lists the data files the corrections are about by their
content's sha256 (an allowlist: a file of the same name with other content, a renamed copy's name,
or a file whose hash nobody verified is not matched): a stage whose data has another hash (e.g.
LongMemEval-Org, generated from LongMemEval's questions) keeps the official gold, and a command
where no stage's data is listed is refused.

Every public report about the data is listed with the choice made: an entry's action is the
choice (answer, evidence: corrected; exclude: excluded); a note (`qid` optional) is a report left
as it is, with the reason.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

FORMAT = 1
ACTIONS = ("answer", "exclude", "evidence")
CHOICE = {"answer": "corrected (answer)", "evidence": "corrected (evidence)", "exclude": "excluded"}
SHA256 = re.compile(r"[0-9a-f]{64}")


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
    applies_to: dict[str, str] = field(default_factory=dict)  # sha256 of a data file -> its name (for the reader)

    @property
    def tag(self) -> str:
        """What names the judgements made against this file's corrected answers."""
        return f"errata-{self.sha256[:12]}"

    def answers(self) -> dict[str, str]:
        return {q: e.answer for q, e in self.entries.items() if e.action == "answer" and e.answer is not None}

    def judgements_name(self, judge: str) -> str:
        return f"{judge}.{self.tag}"

    def applies(self, data_sha256: str | None) -> bool:
        """Whether the corrections are about the data file with this content (its sha256 is in `applies_to`)."""
        return bool(data_sha256) and str(data_sha256).lower() in self.applies_to

    def listed(self) -> list[str]:
        """'longmemeval_s_cleaned.json (sha256 d6f21ea9d60a)' for each data file the corrections are about."""
        return [f"{name} (sha256 {sha[:12]})" for sha, name in self.applies_to.items()]

    def require(self, data: dict[str, str], where: str) -> None:
        """Refuse (exit 2) when none of these data files (sha256 -> path) is one the corrections are about."""
        if not any(self.applies(sha) for sha in data):
            used = sorted(f"{Path(str(p)).name} (sha256 {str(sha)[:12]})" for sha, p in data.items() if sha)
            raise ErrataError(f"errata {self.path} applies to {', '.join(self.listed())}; {where} use(s) "
                              f"{', '.join(used) or 'no known data file'}: refused")

    def reports(self) -> list[dict]:
        """Every report with the choice made: {source, qid, choice, reasoning}."""
        out = [{"source": " ".join([e.source, *e.sources]), "qid": e.qid, "choice": CHOICE[e.action],
                "reasoning": e.reasoning} for e in self.entries.values()]
        return out + [{"source": n["source"], "qid": n.get("qid") or "", "choice": "left",
                       "reasoning": n["reasoning"]} for n in self.notes]


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
    if pin is not None and str(pin).strip():
        pin = str(pin).strip().lower()
        if not SHA256.fullmatch(pin):
            raise ErrataError(f"errata_sha256 must be the full 64-digit sha256 of the file ({len(pin)} characters "
                              f"given): a prefix would accept other files")
        if sha != pin:
            raise ErrataError(f"{path}: sha256 {sha} is not the pinned {pin}: the file changed")
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
        if not isinstance(n, dict):
            raise ErrataError(f"{where}: must be a mapping")
        notes.append({"source": _text(n, "source", where), "reasoning": _text(n, "reasoning", where),
                      "qid": _text(n, "qid", where, required=False) or ""})
    if not entries and not notes:
        raise ErrataError(f"{path}: no entries and no notes")
    applies_to = data.get("applies_to")
    if not (isinstance(applies_to, list) and applies_to and all(
            isinstance(x, dict) and set(x) == {"file", "sha256"} and isinstance(x["file"], str) and x["file"].strip()
            and SHA256.fullmatch(str(x["sha256"]).lower()) for x in applies_to)):
        raise ErrataError(f"{path}: `applies_to` must list the data files the corrections are about by content, each "
                          f"{{file: <name>, sha256: <its 64-digit sha256>}} (a name alone would match any file of "
                          f"that name)")
    return Errata(path, sha, str(data.get("name") or path.stem), str(data.get("version") or ""), entries, notes,
                  {str(x["sha256"]).lower(): Path(x["file"].strip()).name for x in applies_to})
