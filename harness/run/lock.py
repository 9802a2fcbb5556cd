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
before any run or judgement (fidelity.refusals). The runtime's identity (distribution, version, its tool
texts' sha256, read from the installed runtime) is one more row: `harness.runtime.paper_identity()`,
compared with conf/paper.yaml `runtime_identity` once both exist.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.records.provenance import code_revision, command_preset

REPO = Path(__file__).resolve().parents[2]

# conf/paper.yaml as this code knows it: an edit of the reference is an edit of this line too
PAPER_YAML_SHA256 = "3d42ac4089954975507e86c8242ddd1bf9aa552f670797fbc4ef7cd6886d4365"

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


def reference_sha256() -> str:
    """sha256 of the reference fidelity.reference() reads (conf/paper.yaml)."""
    from harness.run import fidelity

    return hashlib.sha256(fidelity.REFERENCE_PATH.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------ texts the model reads

DATE = "2023/05/30 (Tue) 23:40"  # a question date in the benchmark's format
CUT_PROBE = 30_007  # one result longer than the paper's 30,000-character cut


def model_texts(modules: set[str], org: bool) -> dict[str, str]:
    """name -> a text the model reads, rendered through the code that sends it (the names each sender's module
    looks up when it runs, so a plugin or an edited module that replaces one is seen): the system prompt (with
    `{access}` where a condition's paragraph goes), the cut of a long tool result, and the paragraphs and tool
    descriptions of the conditions whose module the stage uses. The memory tools' texts: fidelity.tool_texts_row."""
    import importlib

    from harness.run import agents, loop

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


# ------------------------------------------------------------------------------ rows


def reference_row():
    from harness.run.fidelity import Row

    sha = reference_sha256()
    same = sha == PAPER_YAML_SHA256
    return Row("reference", "the reference (conf/paper.yaml)", f"sha256 {PAPER_YAML_SHA256[:16]} (pinned in "
               "harness/run/lock.py)", f"sha256 {sha[:16]}", "same" if same else "differs", sha,
               "" if same else "conf/paper.yaml is not the pinned reference: restore it (git checkout conf/paper.yaml); "
               "no allow_deviation accepts another reference")


def code_row(state: dict | None = None):
    """The tree's state: the commit, the packages' tracked files modified and untracked files present."""
    from harness.run.fidelity import Row

    st = code_revision(REPO) if state is None else state
    if st.get("commit") is None:
        return Row("code", "the tree (harness, conditions, judge, analysis, bench, conf)", "a git checkout, unmodified",
                   "not a git checkout: its files cannot be compared", "differs", "",
                   "run from a git checkout, or accept it with allow_deviation=[code]")
    parts = [f"modified: {', '.join(st['modified'])}"] if st.get("modified") else []
    parts += [f"untracked: {', '.join(st['untracked'])}"] if st.get("untracked") else []
    same = not parts
    return Row("code", "the tree (harness, conditions, judge, analysis, bench, conf)",
               "the commit's files, unmodified, nothing untracked",
               f"commit {st['commit'][:12]}" + ("" if same else "; " + "; ".join(parts)), "same" if same else "differs",
               "", "" if same else "commit or remove these files (a module under the packages is imported as code)")


def plugins_row():
    """The plugins loaded ($MEMSPACE_PLUGINS, entry points of group memspace_harness): any is code the paper did not run."""
    from harness import plugins
    from harness.run.fidelity import Row

    plugins.load()
    names = sorted(plugins.loaded())
    return Row("plugins", "plugins loaded", "none", ", ".join(names) or "none", "differs" if names else "same",
               ",".join(names), "" if not names else "unset MEMSPACE_PLUGINS (or uninstall the entry point)")


def texts_row(cfg):
    """Every text the model reads besides the memory tools' (their own row) and the config's paragraphs (the
    conditions' rows), by sha256 against conf/paper.yaml `texts`."""
    from harness.run.fidelity import Row, _is_org, reference

    mods = {str(c.get("module")) for c in (cfg.stage.get("conditions") or {}).values()}
    pins = reference().get("texts") or {}
    got = {k: sha256_text(v) for k, v in model_texts(mods, _is_org(cfg)).items()}
    differ = [k for k, h in sorted(got.items()) if pins.get(k) != h]
    return Row("texts", "texts the model reads (system prompt, paragraphs, tool descriptions, cut)",
               "conf/paper.yaml texts (sha256)", "; ".join(f"{k} {got[k][:12]}" for k in sorted(got)),
               "differs" if differ else "same", ",".join(f"{k}|{got[k]}" for k in sorted(got)),
               "" if not differ else f"differ from the pinned texts: {', '.join(differ)}")


def runtime_identity_row():
    """The installed runtime's identity (distribution, version, its tool texts' sha256) against conf/paper.yaml
    `runtime_identity`, once the runtime module says it (`harness.runtime.paper_identity()`); None before."""
    import harness.runtime as rt
    from harness.run.fidelity import Row, _leaves, fmt, reference

    fn, want = getattr(rt, "paper_identity", None), reference().get("runtime_identity")
    if fn is None or want is None:
        return None
    got = fn()
    a, b = _leaves(got), _leaves(want)
    diffs = [f"{k} {fmt(a.get(k))} (paper {fmt(b.get(k))})" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return Row("runtime.identity", "the runtime's identity (installed)", fmt(want), "; ".join(diffs) or fmt(got),
               "differs" if diffs else "same", fmt(got), "" if not diffs else "install the paper's runtime (make setup)")


def rows(cfg=None, texts: bool = True) -> list:
    """The lock's own rows, beside the manifest's: the reference's pin, the tree, the plugins (and, for an agent
    stage, the texts and the runtime's identity)."""
    out = [reference_row(), code_row(), plugins_row()]
    if texts and cfg is not None:
        out.append(texts_row(cfg))
        ident = runtime_identity_row()
        if ident is not None:
            out.append(ident)
    return out
