"""What of a stage folder must not leave the machine: endpoint URLs, keys and local paths.

A published stage (analysis/publish.py) has each of them replaced, in every file, by a
placeholder that says what was there: `<endpoint url>`, `<key>`, `<local path>/NAME` (the
file or folder name is kept, the directories above it are not). The same rule is applied
where the analysis prints an endpoint's identity, so a report drawn from a published stage
and one drawn from the original folder are the same bytes.

Found by reading the folder, not guessed: endpoint URLs are the values of `base_url` keys
(config.yaml, stage.json, records, judgements); keys are the values of this process's
environment variables named like keys (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*`) and of
`api_key`-like fields (8 characters or more: `EMPTY` is no key); local paths are absolute paths
whose top directory exists here (`/tmp/...`, `/home/...`; not `/usr/...` or `/etc/...`, the same
everywhere, nor an API path such as `/chat/completions`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

URL = "<endpoint url>"
KEY = "<key>"
LOCAL = "<local path>"

_URL_RE = re.compile(r"https?://[^\s\"'`<>\\]+")
_PATH_RE = re.compile(r"(?<![\w.:/<>~-])/[A-Za-z0-9_.+-]+(?:/[^\s\"'`\\,;:()<>\[\]{}|]+)+")
_KEY_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
_KEY_FIELD = re.compile(r"^(api_?key|token|secret|password|authorization)$", re.IGNORECASE)


_IDENTITY_URL = re.compile(r"https?://[^\s\"'`<>\\]+?(?=:[0-9a-f]{6,}$|$)")


def without_urls(text: str) -> str:
    """An identity string (provider:model@base_url:hash) with its endpoint's URL replaced, hash kept."""
    return _IDENTITY_URL.sub(URL, text)


def is_redacted(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith(LOCAL) or URL in value or KEY in value)


SYSTEM_DIRS = {"usr", "bin", "sbin", "lib", "lib64", "etc", "proc", "dev", "sys"}  # the same on every machine


def _is_local(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return len(parts) >= 3 and parts[1] not in SYSTEM_DIRS and Path("/", parts[1]).is_dir()


@dataclass
class Private:
    """The private strings found in one or more folders, and how each is replaced."""

    urls: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)

    def scan_object(self, obj: Any, key: str | None = None) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.scan_object(v, str(k))
        elif isinstance(obj, list):
            for v in obj:
                self.scan_object(v, key)
        elif isinstance(obj, str) and obj:
            if key == "base_url" and _URL_RE.fullmatch(obj):
                self.urls.add(obj)
            elif key and _KEY_FIELD.match(key) and len(obj) >= 8:  # not a placeholder such as EMPTY
                self.keys.add(obj)

    def scan_text(self, text: str) -> None:
        for m in _PATH_RE.finditer(text):
            if _is_local(m.group(0)):
                self.paths.add(m.group(0).rstrip("."))
        for name, value in os.environ.items():
            if _KEY_NAME.search(name) and len(value) >= 8 and value in text:
                self.keys.add(value)

    def replacements(self) -> list[tuple[str, str]]:
        """(private string, placeholder), longest first, so a path is replaced before its parent."""
        out = [(u, URL) for u in self.urls] + [(k, KEY) for k in self.keys]
        out += [(p, f"{LOCAL}/{PurePosixPath(p).name}") for p in self.paths]
        return sorted(set(out), key=lambda r: (-len(r[0]), r[0]))

    def redact(self, text: str) -> str:
        for old, new in self.replacements():
            text = text.replace(old, new)
        return text

    def summary(self) -> dict[str, int]:
        return {"endpoint urls": len(self.urls), "keys": len(self.keys), "local paths": len(self.paths)}
