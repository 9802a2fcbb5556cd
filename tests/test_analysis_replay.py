"""The exposure replay against a real memory space (exact index, hash encoder, generated org).

The runs' logs are produced here by the memory tool itself on a space built the way
the driver builds it; the analysis must rebuild the space from the saved config and
data file, replay every call to the same units, catch a tampered log, and count
private units: none under `shared` or `own` views, some without a view.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from analysis import run as A
from conditions.memory_tool import MemoryRead, MemorySearch
from harness.run.context import Environment, RunContext
from harness.data import synth
from harness.data.longmemeval import load
from harness.data.org import VISIBILITY
from harness.run.plan import RunSpec
from tests.analysis_fixtures import Stage, run_id, sha256_file

REPO = Path(__file__).resolve().parents[1]
SCOPES = {"shared": "shared", "no_view": "all", "isolated": "own", "ask_agent": "own", "tool_hybrid": "own"}


def prereg(tmp_path: Path) -> Path:
    data = yaml.safe_load((REPO / "conf" / "prereg" / "hypotheses.yaml").read_text())
    data["settings"].update(resamples=50, primary_resamples=50)
    p = tmp_path / "hyp.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def tool_entry(name: str, result) -> dict:
    return {"name": name, "arguments": "{}", "sessions": sorted(set(result.sessions)), "empty": result.empty,
            "error": result.error, "retrieval_s": 0.0, "log": result.log}


def memory_calls(ctx, scope: str, agent: str | None = None) -> list[dict]:
    """What an agent's memory tool logs: a search, a dated search, and a read of the first hit."""
    view = ctx.view(scope, agent=agent)
    search = MemorySearch(ctx, view, "hybrid", 8, agent)
    out = []
    first = search(query=ctx.question.question)
    out.append(tool_entry("memory_search", first))
    out.append(tool_entry("memory_search", search(query="what did I say about it", k=5, since="2020-01-01",
                                                  until="2035-12-31")))
    if first.log["units"]:
        uid = first.log["units"][0][0]
        _, session, rnd, _ = uid.split("|")
        out.append(tool_entry("memory_read", MemoryRead(ctx, view, agent)(session_id=session, round=int(rnd))))
    return out


@pytest.fixture(scope="module")
def org_runs(tmp_path_factory):
    """Run folders whose logs come from the real memory tool on a generated organisation."""
    tmp = tmp_path_factory.mktemp("replay")
    data = synth.write(tmp / "data", 0, "tiny")
    qids = sorted(q.qid for q in load(data).values() if not q.abstention)[:2]
    cfg = {"index": {"name": "exact", "dim": 384}, "encoder": {"name": "hash"}, "cache_dir": str(tmp / ".cache")}
    org = Stage(tmp / "runs", "org", config_extra=cfg,
                data={"path": str(data), "sha256": sha256_file(data), "kind": "synth"})
    main = Stage(tmp / "runs", "main", config_extra=cfg,
                 data={"path": str(data), "sha256": sha256_file(data), "kind": "synth"})
    specs = [RunSpec(c, q, v, 0) for q in qids for v in ("public", "private")
             for c in ("shared", "no_view", "isolated", "ask_agent", "fanout")]
    specs += [RunSpec("tool_hybrid", q, "", 0) for q in qids]
    env = Environment(OmegaConf.create(cfg), SimpleNamespace(runs=specs, data={"path": str(data)}))
    logged: dict[str, list] = {}
    for s in specs:
        ctx = RunContext(s, env)
        tools = []
        if s.condition != "fanout":
            tools = memory_calls(ctx, SCOPES[s.condition])
        if s.condition == "ask_agent":
            # as conditions/ask_agent.py records it: the asked agent's loop shares the run's meter, so its
            # memory calls (viewer a1, own view) are tool entries of the run, before the ask_agent entry
            tools += memory_calls(ctx, "own", agent="a1")
            tools.append({"name": "ask_agent", "arguments": "{}", "sessions": [], "empty": False, "error": False,
                          "retrieval_s": 0.0, "log": {"kind": "ask", "agent": "a1", "question": "q"}})
        stage = main if not s.variant else org
        stage.add(s.condition, s.qid, variant=s.variant, tools=tools, module=s.condition,
                  leak=False if s.variant == "private" else None)
        logged[run_id(s.condition, s.qid, s.variant)] = tools
    env.close()
    org.write()
    main.write()
    return tmp, logged


def units_of(tools: list) -> list:
    out = []
    for t in tools:
        log = t.get("log") or {}
        if "units" in log:
            out += log["units"]
    return out


def private_of(units, agent="a0") -> int:
    return sum(1 for _, owner in units if VISIBILITY[owner] == "private" and owner != agent)


def run_analysis(tmp: Path, out: str, *extra: str) -> Path:
    assert A.main([f"runs={tmp / 'runs'}", f"out={tmp / out}", f"prereg={prereg(tmp)}", *extra]) == 0
    return tmp / out


def test_faithful_logs_replay_to_the_same_units_and_views_keep_private_units_out(org_runs):
    tmp, logged = org_runs
    out = run_analysis(tmp, "faithful", "replay=all")
    t4 = pd.read_csv(out / "table4.csv", keep_default_na=False, na_values=[""])
    assert pd.read_csv(out / "replay_mismatches.csv").empty
    for _, r in t4.iterrows():
        if r["condition"] == "fanout":
            assert r["replay_status"].startswith("not replayed (fan-out")
            continue
        assert r["replay_status"] == "replayed", r.to_dict()
        assert r["calls_mismatched"] == 0 and r["calls_matched"] == r["calls"] > 0
        variant = r["variant"] if isinstance(r["variant"], str) else ""
        units = [u for rid, tools in logged.items() for u in units_of(tools)
                 if rid.startswith(f"{r['condition']}.{variant or 'lme'}.")]
        assert r["units"] == len(units)
        owners = Counter(o for _, o in units)
        for a in ("a0", "a1", "a2", "a3", "a4", "a5"):
            assert r[f"units_{a}"] == owners.get(a, 0), (r["condition"], a)
        if r["condition"] in ("shared", "isolated", "ask_agent", "tool_hybrid"):
            assert r["private_units"] == 0 and r["private_units_under_view"] == 0
    nv = t4[t4["condition"] == "no_view"]
    expected = sum(private_of(units_of(t)) for rid, t in logged.items() if rid.startswith("no_view."))
    assert expected > 0, "the generated org must put private units within reach of an unfiltered search"
    assert nv["private_units"].sum() == expected
    # ask-agent rows include the asked agent's calls (a1's own units)
    ask = t4[(t4["condition"] == "ask_agent") & (t4["variant"] == "public")].iloc[0]
    assert ask["units_a1"] > 0
    rep = (out / "report.md").read_text()
    assert "VIOLATION" not in rep
    # H2b reports the audit next to its answer-level leak count
    t3 = pd.read_csv(out / "table3.csv").set_index("id")
    priv = sum(private_of(units_of(t)) for rid, t in logged.items() if rid.startswith("no_view.private."))
    n_priv = sum(1 for rid in logged if rid.startswith("no_view.private."))
    assert f"private units in the context of 0 of {n_priv} runs (0 units)" in t3.loc["H2b", "note"]
    assert f"({priv} units)" in t3.loc["H2b", "note"]


def test_a_tampered_log_is_detected(org_runs, tmp_path):
    tmp, logged = org_runs
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(tmp / "runs", runs)
    rid = run_id("shared", sorted({k.split(".")[2] for k in logged})[0], "private")
    p = runs / "org" / "org" / "records" / f"{rid}.json"
    rec = json.loads(p.read_text())
    units = rec["tools"][0]["log"]["units"]
    units[0], units[1] = units[1], units[0]  # the run "saw" another order
    p.write_text(json.dumps(rec))
    (tmp_path / "data").mkdir(exist_ok=True)
    assert A.main([f"runs={runs}", f"out={tmp_path / 'out'}", f"prereg={prereg(tmp_path)}"]) == 0
    mm = pd.read_csv(tmp_path / "out" / "replay_mismatches.csv")
    assert list(mm["run_id"]) == [rid] and list(mm["call"]) == [0]
    t4 = pd.read_csv(tmp_path / "out" / "table4.csv", keep_default_na=False, na_values=[""])
    r = t4[(t4["condition"] == "shared") & (t4["variant"] == "private")].iloc[0]
    assert r["calls_mismatched"] == 1
    assert "differ from the logs" in (tmp_path / "out" / "report.md").read_text()


def test_a_changed_data_file_is_reported_not_replayed(org_runs, tmp_path):
    tmp, logged = org_runs
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(tmp / "runs", runs)
    info_p = runs / "org" / "org" / "stage.json"
    info = json.loads(info_p.read_text())
    info["data"]["sha256"] = "0" * 64
    info_p.write_text(json.dumps(info))
    assert A.main([f"runs={runs}", f"out={tmp_path / 'out'}", f"prereg={prereg(tmp_path)}"]) == 0
    t4 = pd.read_csv(tmp_path / "out" / "table4.csv", keep_default_na=False, na_values=[""])
    r = t4[(t4["condition"] == "no_view") & (t4["variant"] == "private")].iloc[0]
    assert "changed since the stage ran" in r["replay_status"]
    # the logged counts are still there, the replayed ones are not
    expected = sum(private_of(units_of(t)) for rid, t in logged.items() if rid.startswith("no_view.private."))
    assert r["logged_private_units"] == expected
    assert pd.isna(r["private_units"])
