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

import hashlib
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
