"""The fidelity manifest: each setting that decides what a stage measures, the paper's value beside it.

WHY: the embedded defaults (a stand-in encoder, the project's judge wording, the local model,
the runtime that installs here) measure something other than the paper, and a number must
never hide that. Every stage writes this manifest into stage.json before its first run; the
report and the Inspect export open with it; `make analyze` refuses to pool stages that differ
in a setting marked `pool`. With `preset=paper` the preflight stops on every row that differs
from the paper, one line each, unless the row's key is named in `allow_deviation=[...]`; the
accepted deviations are written to stage.json beside the manifest.

Each row: key (what allow_deviation names), setting, the paper's value, this stage's value,
status (same | differs | unknown | not used), and `pool`: what two stages must share to be
pooled in one result (empty: they may differ, e.g. the data of the S and M stages).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

import conditions

REPO = Path(__file__).resolve().parents[2]
STATUSES = ("same", "differs", "unknown", "not used")

# The paper's values (Sections 3.3, 4 and Appendices B, E), as this manifest compares them.
PAPER = {
    "reader_model": {"model": "deepseek-flash", "reasoning_effort": "low"},
    "judge_model": {"model": "deepseek-flash"},
    "index": {"name": "redis_qe", "m": 16, "ef_construction": 200, "ef_runtime": 10},
}
PAPER_TEXT = {
    "reader_model": "deepseek-flash (DeepSeek V4.1 Flash), reasoning effort low",
    "reader_reported": "deepseek-flash",
    "judge_model": "deepseek-flash (DeepSeek V4.1 Flash)",
    "judge_prompts": "LongMemEval's official evaluate_qa.py",
    "encoder": "BAAI/bge-small-en-v1.5 (384-d, fp32, CLS pooling)",
    "index": "Redis query engine HNSW (M 16, EF_CONSTRUCTION 200, EF_RUNTIME 10), the view as a pre-filter",
    "tool_texts": "memory_search / memory_read of Appendix B (guidance paper)",
    "data": "the published cleaned LongMemEval file",
    "sample_seed": "a seeded shuffle (the seed is not stated)",
}
# deviations the preset refuses unless named in allow_deviation (the seed is reported only; data is refused
# when it is generated or differs from the published file, not when no published hash is known, as for M)
PRESET_CHECKED = ("reader_model", "judge_model", "judge_prompts", "encoder", "runtime", "index", "tool_texts", "data")


@dataclass
class Row:
    key: str
    setting: str
    paper: str
    stage: str
    status: str
    pool: str  # the value stages pooled in one result must share; "" = may differ
    detail: str = ""  # what is missing and how to get it, when status is differs or unknown

    def line(self) -> str:
        return f"{self.setting}: {self.stage} (paper: {self.paper})" + (f" - {self.detail}" if self.detail else "")


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _status(same: bool | None) -> str:
    return "unknown" if same is None else "same" if same else "differs"


def _is_org(cfg) -> bool:
    return any(g.get("variant") for g in cfg.stage.get("groups") or [])


# ------------------------------------------------------------------------------ rows


def reader_row(cfg) -> Row:
    m = cfg.model
    effort = (m.get("params") or {}).get("reasoning_effort")
    same = str(m.get("model")) == PAPER["reader_model"]["model"] and effort == PAPER["reader_model"]["reasoning_effort"]
    return Row("reader_model", "reader model (configured)", PAPER_TEXT["reader_model"],
               f"{m.get('model')} ({m.get('name')}), reasoning effort {effort or 'not set'}", _status(same),
               f"{m.get('model')}|{effort}",
               "" if same else "model=deepseek (or preset=paper)")


def judge_rows(cfg) -> list[Row]:
    from judge.prompts import OFFICIAL_DEFAULT_PATH, official_status

    j = cfg.judge
    same = str(j.get("model")) == PAPER["judge_model"]["model"]
    rows = [Row("judge_model", "judge model (configured)", PAPER_TEXT["judge_model"], f"{j.get('model')} ({j.get('name')})",
                _status(same), str(j.get("model")), "" if same else "judge=deepseek (or preset=paper)")]
    spec = str(j.get("prompts") or "builtin")
    if spec == "builtin":
        from judge.prompts import builtin

        rows.append(Row("judge_prompts", "judge prompts", PAPER_TEXT["judge_prompts"],
                        f"builtin (the project's own wording), sha256 {builtin().source_sha256[:16]}", "differs",
                        f"builtin|{builtin().source_sha256}",
                        f"python -m harness.data download --what evaluate_qa, then judge.prompts={OFFICIAL_DEFAULT_PATH}"))
        return rows
    st = official_status(spec)
    if not st["present"] or not st["parses"]:
        rows.append(Row("judge_prompts", "judge prompts", PAPER_TEXT["judge_prompts"], f"{spec} (missing or unreadable)",
                        "differs", f"missing|{spec}", st["detail"]))
        return rows
    same = st["matches_pin"]
    rows.append(Row("judge_prompts", "judge prompts", PAPER_TEXT["judge_prompts"],
                    f"official file {spec}, sha256 {st['sha256'][:16]}", _status(True if same is None else same),
                    f"official|{st['sha256']}",
                    "" if same is not False else st["detail"]))
    return rows


def encoder_row(cfg, need: set[str]) -> Row:
    from harness.memory.encoder import weights_status

    e = cfg.encoder
    if "memory_space" not in need:
        return Row("encoder", "encoder", PAPER_TEXT["encoder"], f"{e.get('name')} (no condition embeds)", "not used", "")
    st = weights_status(str(e.get("name")), e.get("path"))
    weights = f", weights sha256 {st['weights_sha256'][:16]}" if st.get("weights_sha256") else ", weights absent"
    stage = f"{st['model']} ({e.get('name')}){weights}"
    bge = str(e.get("name")) == "bge"
    same = bge and st["present"] and st["matches_pin"] is not False
    fix = st["detail"] if bge else "encoder=bge, after python -m harness.data download --what bge --out data/models"
    return Row("encoder", "encoder", PAPER_TEXT["encoder"], stage, _status(same),
               f"{st['model']}|{st.get('weights_sha256')}", "" if same else fix)


def runtime_row(need: set[str], cfg=None) -> Row:
    from harness.runtime import search_choice, search_facts
    from harness.runtime.hermes import PAPER_RUNTIME_VERSION, PAPER_SESSION_SEARCH_SHAPE

    paper = f"hermes-agent {PAPER_RUNTIME_VERSION}, session_search shape {PAPER_SESSION_SEARCH_SHAPE}"
    f = search_facts(search_choice(cfg))  # runtime.session_search: installed, or 0.21.5's rules emulated here
    stage = f"{f['description']} ({f['shape_description']})"
    if "runtime" not in need:
        return Row("runtime", "runtime", paper, stage + "; no condition uses it", "not used", "")
    real = f["version"] == PAPER_RUNTIME_VERSION and not f["emulated"]
    same = f["shape"] == PAPER_SESSION_SEARCH_SHAPE and (real or f["texts"] == PAPER_RUNTIME_VERSION)
    fix = (f"tool texts: {f['texts_detail']}" if f["emulated"] else
           f"runtime.session_search=adaptive (or preset=paper), or install hermes-agent {PAPER_RUNTIME_VERSION}")
    return Row("runtime", "runtime", paper, stage, _status(same),
               f"{f['version']}|{f['search']}|{f['shape']}|{f['texts_sha256']}", "" if same else fix)


def index_row(cfg, need: set[str]) -> Row:
    ix = OmegaConf.to_container(cfg.index, resolve=True)
    dense = ix.get("dense") if ix.get("name") == "hybrid" else ix
    params = {k: dense.get(k) for k in ("m", "ef_construction", "ef_runtime", "ef_search", "iterative_scan")
              if dense.get(k) is not None}
    stage = f"{dense.get('name')}" + (" " + ", ".join(f"{k} {v}" for k, v in params.items()) if params else "")
    if "memory_space" not in need:
        return Row("index", "vector index", PAPER_TEXT["index"], stage + "; no condition searches it", "not used", "")
    same = all(dense.get(k) == v for k, v in PAPER["index"].items())
    return Row("index", "vector index", PAPER_TEXT["index"], stage, _status(same), stage,
               "" if same else "index=redis_qe (or preset=paper)")


def tool_texts_row(cfg) -> Row:
    """sha256 over every text the model reads from the stage's tools besides results, against
    the same texts as the paper's conditions have them (conditions define `tool_texts`)."""
    org = _is_org(cfg)
    mine, paper, guidance = [], [], set()
    for name, c in sorted((cfg.stage.get("conditions") or {}).items()):
        mod = conditions.load(str(c.module))
        if not hasattr(mod, "tool_texts"):
            continue
        mine.append([name, mod.tool_texts(c, org)])
        paper.append([name, mod.tool_texts(c, org, paper=True)])
        if c.get("guidance"):
            guidance.add(str(c.get("guidance")))
    if not mine:
        return Row("tool_texts", "memory tool texts", PAPER_TEXT["tool_texts"], "no memory tool in this stage",
                   "not used", "")
    h, ph = sha256_json(mine), sha256_json(paper)
    stage = f"guidance {', '.join(sorted(guidance)) or 'paper'}, sha256 {h[:16]}"
    # pooled stages must share the guidance: the texts also differ by design between LongMemEval and Org (owner)
    return Row("tool_texts", "memory tool texts", f"{PAPER_TEXT['tool_texts']}, sha256 {ph[:16]}", stage,
               _status(h == ph), "guidance " + ",".join(sorted(guidance)), "" if h == ph else "stage.tool_guidance=paper")


def data_row(plan) -> Row:
    from harness.data.hub import KNOWN_SHA256

    sha = str(plan.data.get("sha256") or "")
    name = Path(str(plan.data.get("path") or "")).name
    known = KNOWN_SHA256.get(name)
    paper = f"{name}, sha256 {known[:16]}" if known else PAPER_TEXT["data"] + " (no published sha256 for this file)"
    stage = f"{name} ({plan.data.get('kind') or 'file'}), sha256 {sha[:16]}"
    if known:
        same = sha == known
        return Row("data", "data file", paper, stage, _status(same), "",
                   "" if same else "a generated or altered file, not the published one")
    return Row("data", "data file", paper, stage, "unknown" if not name.startswith("synth") else "differs", "",
               "generated data" if name.startswith("synth") else "")


def seed_row(cfg) -> Row:
    return Row("sample_seed", "sample seed", PAPER_TEXT["sample_seed"], f"seed {int(cfg.seed)}", "unknown",
               str(int(cfg.seed)))


def manifest(cfg, plan) -> list[Row]:
    from harness.run.preflight import needs

    need = needs(cfg)
    return [reader_row(cfg), *judge_rows(cfg), encoder_row(cfg, need), runtime_row(need, cfg), index_row(cfg, need),
            tool_texts_row(cfg), data_row(plan), seed_row(cfg)]


# The second paper's study (Sections 4.1-4.2): its assistant models, its judge and the kernel's settings
PERSONAL_MODELS = ("gpt-4o", "llama3.1:8b", "qwen2.5:7b")
PERSONAL_KERNEL = {"threshold": 0.3, "cap": 10, "budget_tokens": 2000, "barrier_timeout_s": 5.0}


def personal_manifest(cfg) -> list[Row]:
    """The personalization stage's rows, against the second paper (not the first)."""
    from judge.rubric import is_paper_judge

    m, j = cfg.model, cfg.judge
    model = str(m.get("model"))
    rows = [Row("reader_model", "assistant model", "GPT-4o, Llama-3.1:8B or Qwen-2.5:7B", f"{model} ({m.get('name')})",
                _status(model.lower() in PERSONAL_MODELS), model, "" if model.lower() in PERSONAL_MODELS else
                "one of the paper's three assistant models"),
            Row("judge_model", "judge model", "GPT-5.4", f"{j.get('model')} ({j.get('name')})",
                _status(is_paper_judge(j.get("model"))), str(j.get("model")),
                "the paper's judge, distinct from every assistant")]
    conds = cfg.stage.get("conditions") or {}
    k = conds.get("kernel_shared") or {}
    for key, want in PERSONAL_KERNEL.items():
        got = k.get(key)
        rows.append(Row(f"kernel_{key}", f"kernel {key.replace('_', ' ')}", str(want), str(got),
                        _status(None if got is None else float(got) == want), str(got),
                        "" if got is not None and float(got) == want else "conf/condition/kernel_shared.yaml "
                        "(the personal stages set threshold -1 for the MiniLM stand-in)"))
    n = int((cfg.stage.get("trials") or {}).get("n") or 0)
    rows.append(Row("trials", "trials per condition", "150", str(n), _status(n == 150), "", ""))
    return rows


def backend_manifest(cfg, data: dict) -> list[Row]:
    """The backend study's rows (no model, no judge, every index): its encoder, data and seed."""
    from types import SimpleNamespace

    return [encoder_row(cfg, {"memory_space"}), data_row(SimpleNamespace(data=data)), seed_row(cfg)]


def record(cfg, plan=None, rows: list[Row] | None = None) -> dict:
    """What stage.json keeps: the preset, the rows, and the deviations the user accepted."""
    rows = manifest(cfg, plan) if rows is None else rows
    return {"preset": preset(cfg), "allow_deviation": allowed(cfg), "rows": [asdict(r) for r in rows],
            "accepted": [r.key for r in rows if r.status == "differs" and r.key in allowed(cfg)]}


def raise_refusals(cfg, rows: list[Row]) -> None:
    """For a stage without the agents' preflight (the backend study): stop on what the preset refuses."""
    from harness.failures import EnvironmentFailure

    refused = refusals(cfg, rows)
    if refused:
        raise EnvironmentFailure("preflight fidelity failed: " + "\n  ".join(
            f"{r.key}: {r.line()}; allow_deviation=[{r.key}] accepts it" for r in refused),
            "fetch or choose the part named (each line says how), or accept it with allow_deviation=[...]")


def preset(cfg) -> str | None:
    p = (cfg.get("fidelity") or {}).get("preset")
    return None if p in (None, "", "none") else str(p)


def allowed(cfg) -> list[str]:
    return [str(k) for k in (cfg.get("allow_deviation") or [])]


def refusals(cfg, rows: list[Row]) -> list[Row]:
    """Rows the paper preset refuses: they differ from the paper and allow_deviation does not name them."""
    if preset(cfg) != "paper":
        return []
    ok = set(allowed(cfg))
    unknown = ok - {r.key for r in rows}
    if unknown:
        raise ValueError(f"allow_deviation names {', '.join(sorted(unknown))}; the manifest's keys are "
                         + ", ".join(r.key for r in rows))
    return [r for r in rows if r.key in PRESET_CHECKED and r.status == "differs" and r.key not in ok]


def render(rows: list[dict] | list[Row]) -> str:
    """The manifest as text lines (dry run, preflight)."""
    out = []
    for r in rows:
        r = asdict(r) if isinstance(r, Row) else r
        out.append(f"  fidelity {r['key']:<13} {r['status']:<8} {r['stage']}  [paper: {r['paper']}]")
    return "\n".join(out)
