"""Extension points are one file each, found by registration: a package outside the tree (its names in
its namespace, `toyplug/...`) adds a
condition (one module + one yaml), a table (one module) and a judgement kind (one module), and
each appears in a stage's records, judgements, results/, the report, the pre-registration status
and the Inspect export. (A toy backend: tests/test_backend_plugins.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from tests.fake_model import FakeModel

REPO = Path(__file__).resolve().parents[1]

CONDITION = '''
import conditions
from conditions import Access
from harness.runtime.tools import ToolResult

SEARCH_TOOLS = ("toy_lookup",)  # the tool_use table counts its calls as searches
FORECAST = {"calls": 2, "result_chars": 100, "schema_chars": 200}


class Lookup:
    name = "toy_lookup"

    def schema(self):
        return {"type": "function", "function": {"name": self.name, "description": "Look something up.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                               "required": ["query"]}}}

    def __call__(self, query: str = ""):
        return ToolResult(text=f"toy memory about {query}")


def build(cfg, ctx):
    return Access(text=str(cfg.access), tools=[Lookup()])


conditions.register("toyplug/toy")  # a condition's code is found only by its registered name
'''

TABLE = '''
import pandas as pd

from analysis.tables import Table, register


def build(res):
    return pd.DataFrame([{"folder": f.name, "toy_runs": sum(r["condition"] == "toy" for r in f.records)}
                         for f in res.folders])


def section(res):
    return "\\n## Toy table\\n\\n" + "".join(f"- {r.folder}: {r.toy_runs} toy runs\\n"
                                          for r in res.table("toyplug/toy").itertuples())


register(Table("toyplug/toy", "toy.csv", build, section, prereg=("toy",), order=115))
'''

KIND = '''
from judge.kinds import Kind, register
from judge.prompts import Item


def items(record, prompts):
    return [Item("toyplug/brief", "toy", "answer", "Is this answer shorter than twenty words? Reply yes or no.\\n\\n"
                 + str(record.get("answer") or ""))]


register(Kind("toyplug/brief", items))
'''


def judge_policy(req):
    text = req["messages"][-1]["content"]
    return {"role": "assistant", "content": "yes" if "shorter than twenty words" in text else "no"}


def test_a_condition_and_a_table_from_outside_the_tree(tmp_path):
    pkg = tmp_path / "plug" / "toyplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cond.py").write_text(CONDITION)
    (pkg / "table.py").write_text(TABLE)
    (pkg / "kind.py").write_text(KIND)
    conf = tmp_path / "plug" / "conf" / "condition"
    conf.mkdir(parents=True)
    (conf / "toy.yaml").write_text('module: toyplug/toy\naccess: "Use toy_lookup to look things up."\n')
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'plug'}{os.pathsep}{REPO}",
           "MEMSPACE_PLUGINS": "toyplug.cond,toyplug.table,toyplug.kind"}
    runs = tmp_path / "runs"
    with FakeModel() as fake:  # calls the first tool offered, then answers
        res = subprocess.run(
            [sys.executable, "-m", "harness.run", "stage=smoke", "model=vllm", f"model.base_url={fake.base_url}",
             f"hydra.searchpath=[file://{tmp_path / 'plug' / 'conf'}]", "+condition@stage.conditions.toy=toy",
             "stage.groups=[{sample:smoke,conditions:[none,toy]}]", "stage.judge_after_run=false",
             f"runs_dir={runs}"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    folder = runs / "smoke" / "smoke"
    recs = [json.loads(p.read_text()) for p in (folder / "records").glob("toy.*.json")]
    assert len(recs) == 3 and all(r["module"] == "toyplug/toy" and r["tools"][0]["name"] == "toy_lookup"
                                  for r in recs)

    with FakeModel(script=judge_policy) as judge:
        jr = subprocess.run([sys.executable, "-m", "judge.run", "stage=smoke", "judge=vllm",
                             f"judge.base_url={judge.base_url}", "+judge.kinds=[answer_check,toyplug/brief]",
                             f"runs_dir={runs}"],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert jr.returncode == 0, jr.stderr[-3000:]
    lines = [json.loads(x) for x in (folder / "judgements" / "vllm.jsonl").read_text().splitlines()]
    brief = [j for j in lines if j["kind"] == "toyplug/brief"]
    assert len(brief) == 6 and all(j["label"] is True and j["template"] == "toy" for j in brief)
    assert {j["kind"] for j in lines} == {"correct", "toyplug/brief"}

    out = tmp_path / "results"
    ana = subprocess.run([sys.executable, "-m", "analysis.run", f"runs={folder}", f"out={out}", "resamples=50",
                          "lenient=true"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert ana.returncode == 0, ana.stderr[-3000:]
    assert pd.read_csv(out / "toy.csv").to_dict("records") == [{"folder": "smoke/smoke", "toy_runs": 3}]
    report = (out / "report.md").read_text()
    assert "## Toy table\n\n- smoke/smoke: 3 toy runs" in report and "[`toy.csv`](toy.csv)" in report
    tool_use = pd.read_csv(out / "tool_use.csv")
    assert tool_use.set_index("condition").loc["toy", "searches"] == 3  # its SEARCH_TOOLS, not a name list
    expl = pd.read_csv(out / "table3_exploratory.csv")
    assert "toy" in set(expl["analysis"])  # a table the pre-registration does not name is exploratory
    assert "toy" in set(pd.read_csv(out / "table1.csv")["condition"])
    runs_csv = pd.read_csv(out / "runs.csv")
    assert runs_csv["score_toyplug/brief"].tolist() == [1.0] * 6  # the kind's own column, from its judgements
    other = pd.read_csv(out / "other_judgements.csv")
    assert set(other["kind"]) == {"toyplug/brief"} and other["yes_share"].tolist() == [1.0, 1.0]
    assert "## Other judgements" in report

    logs = tmp_path / "logs"
    exp = subprocess.run([sys.executable, "-m", "analysis.export_inspect", f"runs={folder}", f"out={logs}"],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert exp.returncode == 0, exp.stderr[-3000:]
    toy_logs = [p for p in logs.glob("*.eval") if "_toy_" in p.name]
    assert toy_logs
    from inspect_ai.log import read_eval_log

    samples = read_eval_log(str(toy_logs[0])).samples
    assert samples and all(s.scores["toyplug/brief"].value == "C" for s in samples)


def test_a_plugin_that_does_not_import_is_named(tmp_path):
    env = {**os.environ, "MEMSPACE_PLUGINS": "no_such_plugin_pkg"}
    res = subprocess.run([sys.executable, "-m", "analysis.run", f"runs={tmp_path}", f"out={tmp_path / 'r'}"],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert res.returncode != 0 and "plugin 'no_such_plugin_pkg'" in res.stderr


def test_a_stage_of_an_unknown_study_kind_is_refused_with_the_known_ones(tmp_path):
    """A stage's kind is its file's (an override of stage.kind is refused at the command's edge), so the
    unknown kind comes in a stage file on the search path, as a plugin's stage would."""
    (tmp_path / "conf" / "stage").mkdir(parents=True)
    smoke = (REPO / "conf" / "stage" / "smoke.yaml").read_text()
    assert "\n  kind: agents\n" in smoke
    (tmp_path / "conf" / "stage" / "toy_unknown_kind.yaml").write_text(
        smoke.replace("\n  kind: agents\n", "\n  kind: toyplug/no_such_study\n"))
    res = subprocess.run([sys.executable, "-m", "harness.run", f"hydra.searchpath=[file://{tmp_path}/conf]",
                          "stage=toy_unknown_kind", "dry_run=true", f"runs_dir={tmp_path}/runs"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    from harness.studies import STUDIES

    known = STUDIES.names()  # the tree's studies, a user's own among them
    assert {"agents", "backends", "personal"} <= set(known)
    assert f"stage.kind 'toyplug/no_such_study' is no registered study (known: {', '.join(known)})" in res.stderr
