"""`make run STAGE=personal_smoke`, `make judge` and `make analyze` with the real local model and services.

The smoke stage on one of its two users (`stage.trials.n=1`) and the paper's central pair of methods,
naive_concat and kernel_shared (the writers' JSON extraction, the barrier and the injection on PostgreSQL),
then the rubric judge on the same local model, then the personalization tables. Mem0 is left to
tests/test_personal.py (the real library against the scripted upstream): its own prompts run to ~8k
tokens, minutes per call on two cores, and vanilla_rag adds no code path the kernel's run does not take.
"""

import json
import sys

import pytest

from tests import cli


def _run(args, tmp_path, timeout):
    # in this process (tests/cli.py): the commands' exit codes, output and files are what is checked here; the
    # local model server is the harness's own child either way. tests/test_smoke_local.py keeps the real process.
    return cli.run([sys.executable, "-m", *args, f"runs_dir={tmp_path}/runs"], capture_output=True,
                   text=True, timeout=timeout)


METHODS = "stage.methods=[naive_concat,kernel_shared]"
# the answers cut at 96 tokens instead of the stage's 160 (the suite's budget: the answer and its judging are the
# slowest calls on one thread, about 8 output tokens a second), above the 82 of this user's longest extraction,
# which is never cut (the writers' calls are checked to end by themselves)
SHORT = "model.params.max_tokens=96"


@pytest.mark.model
@pytest.mark.services
@pytest.mark.timeout(2400)
def test_personal_smoke_runs_is_judged_and_analysed(tmp_path, services):
    res = _run(["harness.run", "stage=personal_smoke", "stage.trials.n=1", METHODS, SHORT], tmp_path, 2400)
    assert res.returncode == 0, res.stderr[-3000:]
    stage = tmp_path / "runs" / "personal_smoke" / "smoke"
    recs = [json.loads(p.read_text()) for p in (stage / "records").glob("*.json")]
    assert len(recs) == 2 and {r["condition"] for r in recs} == {"naive_concat", "kernel_shared"}
    assert all(r["status"] == "ok" and r["answer"] for r in recs), [r["error"] for r in recs if r["error"]]
    for r in recs:
        assert all(c["finish"] == "stop" for c in r["calls"] if c["role"] != "assistant"), r["calls"]  # writers whole
        assert r["foreign_items"] == 0 and r["exposure_private"] == 0 and r["conversation_injected"] == 0
        if r["condition"] == "kernel_shared":
            assert r["missed_writes"] == 0 or r["barrier"]["timed_out"]
    res = _run(["judge.run", "stage=personal_smoke", "stage.trials.n=1", METHODS, SHORT], tmp_path, 2400)
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [json.loads(x) for x in (stage / "judgements" / "local.rubric.jsonl").read_text().splitlines()]
    assert {x["run_id"] for x in lines} == {r["run_id"] for r in recs}
    out = tmp_path / "results" / "personal"
    from analysis.personal.report import main as analyse_personal  # `python -m analysis.personal`'s main

    assert analyse_personal([f"runs={stage}", f"out={out}", "smoke=true"]) == 0
    for name in ("table2_scores", "table4_kernel_vs_baselines", "table5_words", "latency_tokens", "exposure", "barrier",
                 "table7_syscalls"):
        assert (out / f"{name}.csv").exists()
    report = (out / "personal.md").read_text()
    assert report.startswith("# Personalization study") and report.index("## Fidelity") < report.index("## Table 2")
