"""A backend defined outside the tree is found by name and describes itself (issue 20 item 3).

The toy backend lives in a module written to tmp_path and named in $MEMSPACE_PLUGINS; a subprocess
imports nothing of it by hand: make_backend finds it by name, the preflight's services check reaches
the service it declares (an unreachable Redis here: the check fails, it is not "in process"), the
personalization runner starts that service, and a replay renames the key that isolates its index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TOY = '''
from harness.memory.backends.base import register
from harness.memory.backends.exact import ExactBackend


@register("toy_backend_plugin/toy_store")
class ToyStore(ExactBackend):
    """Exact search that says it lives on a Redis server and names its index by `slot`."""

    service = "redis"
    filter_mode = "post-filter"
    in_place_visibility = False
    approximate = True
    isolation_keys = ("slot",)

    def __init__(self, slot=None, url=None, **kw):
        super().__init__(**kw)
        self.slot, self.url = slot, url

    @classmethod
    def private_params(cls, name):
        return {"slot": name}
'''

PROBE = '''
import json
import numpy as np

from harness.run.replay import replay_index_config
from harness.memory.backends.base import Query, backend_class, backends, make_backend
from harness.memory.space import space_from_config
from harness.memory.units import Unit
from harness.memory.views import View
from harness.personal.step import index_services
from harness.run.preflight import _services_check

out = {"registered": "toy_backend_plugin/toy_store" in backends(),
       "builtin": sorted(n for n in backends() if n != "toy_backend_plugin/toy_store")}
b = make_backend({"name": "toy_backend_plugin/toy_store", "slot": "s1", "dim": 4})
u = Unit("o", "a", "private", 1.0, "sess", 1, 0, "hello")
b.add([u], np.ones((1, 4), dtype=np.float32))
out["name"] = b.name
out["hits"] = [h.uid for h in b.search(Query(vector=np.ones(4)), View("o", "a", "own"), 3)]
c = backend_class("toy_backend_plugin/toy_store")
out["describes"] = [c.service, c.filter_mode, c.in_place_visibility, c.approximate, list(c.isolation_keys)]
chk = _services_check({"name": "toy_backend_plugin/toy_store", "slot": "s1", "url": "redis://127.0.0.1:9"})
out["check"] = [chk.ok, chk.detail]
hyb = _services_check({"name": "hybrid", "dense": {"name": "toy_backend_plugin/toy_store", "url": "redis://127.0.0.1:9"}})
out["hybrid_check"] = [hyb.ok, hyb.detail]
out["exact_check"] = _services_check({"name": "exact"}).detail
out["services"] = sorted(index_services({"name": "toy_backend_plugin/toy_store"}))
out["replay"] = replay_index_config({"name": "toy_backend_plugin/toy_store", "slot": "s1", "dim": 4})
out["replay_hybrid"] = replay_index_config({"name": "hybrid", "dense": {"name": "toy_backend_plugin/toy_store", "slot": "s2"}})
sp = space_from_config(out["replay"], encoder_cfg={"name": "hash"})
out["space"] = [sp.dense.name, sp.dense.slot]
print(json.dumps(out))
'''


def run_with_plugin(tmp_path: Path) -> dict:
    (tmp_path / "toy_backend_plugin.py").write_text(textwrap.dedent(TOY))
    env = {**os.environ, "MEMSPACE_PLUGINS": "toy_backend_plugin",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    p = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_backend_outside_the_tree_is_found_and_describes_itself(tmp_path):
    out = run_with_plugin(tmp_path)
    assert out["registered"] and out["name"] == "toy_backend_plugin/toy_store"
    # the tree's own modules are discovered without a list
    assert {"exact", "fts5", "fts5_shared", "hybrid", "pgvector", "redis_qe", "vectorset"} <= set(out["builtin"])
    assert out["hits"] == ["o|sess|1|0"]
    assert out["describes"] == ["redis", "post-filter", False, True, ["slot"]]
    # the preflight reaches the service the backend declares: an unreachable Redis fails the check
    ok, detail = out["check"]
    assert ok is False and "no server needed" not in detail and "Redis unreachable" in detail, detail
    ok, detail = out["hybrid_check"]  # through hybrid's dense part too
    assert ok is False and "Redis unreachable" in detail, detail
    assert out["exact_check"] == "index exact: in process, no server needed"
    assert out["services"] == ["redis"]  # what the personalization runner starts
    # a replay never touches the stage's own index: the backend's isolation key is renamed
    assert out["replay"]["slot"] == "s1_replay" and out["replay"]["dim"] == 4
    assert out["replay_hybrid"]["dense"]["slot"] == "s2_replay"
    assert out["space"] == ["toy_backend_plugin/toy_store", "s1_replay"]


def test_an_unknown_backend_is_refused_by_name():
    import pytest

    from harness.memory.backends.base import make_backend

    with pytest.raises(KeyError, match="no index backend 'no_such_backend' is registered"):
        make_backend("no_such_backend")


IN_PROCESS = '''
from harness.memory.backends.base import register
from harness.memory.backends.exact import ExactBackend


@register("toyback/toy_exact")
class ToyExact(ExactBackend):
    """Exact search under another name, in process: a stage can run on it."""
'''


def test_a_stage_runs_on_a_backend_from_outside_the_tree_and_every_output_names_it(tmp_path):
    """One module (the backend) and one yaml (conf/index/toy_exact.yaml), both outside the tree: the
    stage's records, its fidelity manifest, the report and the Inspect export name the index."""
    from bench.fake_upstream import FakeModel

    pkg = tmp_path / "plug"
    pkg.mkdir()
    (pkg / "toyback.py").write_text(IN_PROCESS)
    conf = pkg / "conf" / "index"
    conf.mkdir(parents=True)
    (conf / "toy_exact.yaml").write_text("name: toyback/toy_exact\ndim: 384\n")
    env = {**os.environ, "PYTHONPATH": f"{pkg}{os.pathsep}{REPO}", "MEMSPACE_PLUGINS": "toyback"}
    runs = tmp_path / "runs"
    with FakeModel() as fake:
        res = subprocess.run([sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm",
                              f"model.base_url={fake.base_url}", f"hydra.searchpath=[file://{pkg / 'conf'}]",
                              "index=toy_exact", "stage.groups=[{sample:smoke,conditions:[tool_dense]}]",
                              "stage.judge_after_run=false", f"runs_dir={runs}"],
                             capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "index toyback/toy_exact: in process" in res.stderr
    folder = runs / "smoke" / "smoke"
    recs = [json.loads(p.read_text()) for p in (folder / "records").glob("*.json")]
    assert len(recs) == 3 and all(r["index"]["name"] == "toyback/toy_exact" and r["status"] == "ok" for r in recs)
    assert all(r["tools"] and r["tools"][0]["sessions"] for r in recs)  # its searches found memories
    fid = {r["key"]: r for r in json.loads((folder / "stage.json").read_text())["fidelity"]["rows"]}
    assert fid["index"]["stage"] == "toyback/toy_exact" and fid["index"]["status"] == "differs"

    out = tmp_path / "results"
    ana = subprocess.run([sys.executable, "-m", "analysis.run", f"runs={folder}", f"out={out}", "resamples=50",
                          "lenient=true"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert ana.returncode == 0, ana.stderr[-3000:]
    assert "| vector index | Redis query engine HNSW" in (out / "report.md").read_text()
    assert "toyback/toy_exact" in (out / "fidelity.csv").read_text()
    logs = tmp_path / "logs"
    exp = subprocess.run([sys.executable, "-m", "analysis.export_inspect", f"runs={folder}", f"out={logs}"],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert exp.returncode == 0, exp.stderr[-3000:]
    from inspect_ai.log import read_eval_log

    meta = read_eval_log(str(next(logs.glob("*.eval")))).eval.metadata
    assert next(r for r in meta["fidelity"] if r["setting"] == "vector index")["stage"] == "toyback/toy_exact"
