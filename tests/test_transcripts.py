"""Transcripts in the run records and their export to Inspect logs.

Two small stages run through the driver against a scripted model (LongMemEval with
none/tool_bm25 and two repeats, the first question's model calls always fail; Org with
shared/ask_agent, where the agent asks a1), judged by a scripted judge, analysed and
exported. The transcript must equal what the model was sent; the export, read back with
inspect_ai, must carry it and give Table 1's accuracy through `samples_df`.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests import cli
from tests.fake_model import FakeModel
from tests.test_judge import judge_script
from tests.test_org_stage import policy as org_policy

inspect_log = pytest.importorskip("inspect_ai.log", reason="the optional extra `viewer` (inspect-ai) is not installed")

SMOKE = ["stage=smoke", "stage.groups=[{sample:smoke,conditions:[none,tool_bm25],repeats:2}]"]
ORG = ["stage=smoke_org", "stage.groups=[{variant:public,sample:smoke_org,conditions:[shared,ask_agent]},"
       "{variant:private,sample:smoke_org,conditions:[shared,ask_agent]}]"]


def _run(root: Path, stage: list[str], script) -> list[dict]:
    with FakeModel(script=script) as fake:
        res = cli.run([sys.executable, "-m", "harness.run", *stage, "model=vllm", f"model.base_url={fake.base_url}",
                              "model.backoff_s=0.01", "model.max_retries=1", "stage.judge_after_run=false",
                       # the scripted failure is one question's, in all 4 of its runs: runs in a row out of
                       # retries would stop the stage as the server's (harness.endpoints.liveness); 0 records each
                       "model.breaker_runs=0",
                              f"runs_dir={root}/runs", f"cache_dir={root}/cache", "concurrency=2"],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        requests = list(fake.requests)
    with FakeModel(script=lambda req: judge_script(req, None)) as judge:
        res = cli.run([sys.executable, "-m", "judge.run", *stage, "judge=vllm", f"judge.base_url={judge.base_url}",
                              f"runs_dir={root}/runs", f"cache_dir={root}/cache"], capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    return requests


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    root = tmp_path_factory.mktemp("transcripts")
    state: dict = {}

    def agent(req):
        """Searches with the question, then answers with the gold answer for half the questions."""
        if "golds" not in state:
            data = json.loads((root / "cache" / "data" / "synth_tiny_seed0_q2.json").read_text())
            state["golds"] = {d["question"]: (d["question_id"], d["question_type"], str(d["answer"])) for d in data}
            plan = json.loads((root / "runs" / "smoke" / "smoke" / "stage.json").read_text())["plan"]["runs"]
            state["fail"] = sorted(r.split(".", 2)[2].rpartition(".r")[0] for r in plan)[0]
        question = next(m["content"] for m in req["messages"] if m["role"] == "user")
        qid, _, gold = state["golds"][question]
        if qid == state["fail"]:
            raise RuntimeError("scripted failure: the connection drops")
        if req.get("tools") and req.get("tool_choice") != "none" and not any(m["role"] == "tool" for m in req["messages"]):
            return {"role": "assistant", "content": "Let me look.", "tool_calls": [{
                "id": f"call_{len(req['messages'])}", "type": "function",
                "function": {"name": "memory_search", "arguments": json.dumps({"query": question})}}]}
        if int(hashlib.sha256(qid.encode()).hexdigest(), 16) % 2:
            return {"role": "assistant", "content": f"It is {gold}."}
        return {"role": "assistant", "content": "I don't know."}

    smoke_requests = _run(root, SMOKE, agent)
    _run(root, ORG, org_policy)
    smoke, org = root / "runs" / "smoke" / "smoke", root / "runs" / "smoke_org" / "smoke_org"
    res = cli.run([sys.executable, "-m", "analysis.run", f"runs={smoke},{org}", f"out={root}/results",
                          "replay=none", "resamples=50", "lenient=true"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    res = subprocess.run([sys.executable, "-m", "analysis.export_inspect", f"runs={smoke},{org}", f"out={root}/logs"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return {"root": root, "smoke": smoke, "org": org, "requests": smoke_requests, "logs": root / "logs"}


def records(stage: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((stage / "records").glob("*.json"))}


# ------------------------------------------------------------------------------ transcripts


def test_the_transcript_is_what_the_model_was_sent(stages):
    recs = records(stages["smoke"])
    checked = 0
    for r in recs.values():
        if r["condition"] != "tool_bm25" or r["status"] != "ok":
            continue
        t = r["transcript"]
        system = (stages["smoke"] / "prompts" / f"{t['system_sha256']}.txt").read_text()
        assert hashlib.sha256(system.encode()).hexdigest() == t["system_sha256"]
        assert [m["role"] for m in t["messages"]] == ["user", "assistant", "tool", "assistant"]
        assert t["tools"] == ["memory_search", "memory_read"]
        # the request that carried the final answer holds every earlier message, as sent
        call_id = t["messages"][1]["tool_calls"][0]["id"]
        sent = [[(m["role"], m["content"] or "") for m in q["body"]["messages"]] for q in stages["requests"]
                if any(m.get("tool_call_id") == call_id for m in q["body"]["messages"])
                and q["body"]["messages"][1]["content"] == r["question"]]  # both repeats sent the same
        assert sent and [("system", system)] + [(m["role"], m["content"]) for m in t["messages"][:3]] in sent
        tool = r["tools"][t["messages"][2]["tool"]]
        assert tool["name"] == "memory_search" and tool["chars"] == len(t["messages"][2]["content"])
        assert r["calls"][t["messages"][3]["call"]]["finish"] == "stop"
        assert t["messages"][3]["content"] == r["answer"]
        checked += 1
    assert checked == 4  # 3 questions x 2 repeats, one question fails


def test_a_failed_run_keeps_its_transcript_up_to_the_failure(stages):
    failed = [r for r in records(stages["smoke"]).values() if r["status"] == "failed"]
    assert len(failed) == 4  # one question, two conditions, two repeats
    for r in failed:
        assert r["error"].startswith("model:")
        assert r["transcript"]["messages"] == [{"role": "user", "content": r["question"], "tool_calls": None,
                                                "tool_call_id": None, "tool": None, "call": None, "asked": None}]


def test_an_asked_agents_loop_is_nested_under_its_ask_agent_call(stages):
    asks = [r for r in records(stages["org"]).values() if r["condition"] == "ask_agent"]
    assert asks
    for r in asks:
        top = r["transcript"]
        (answer,) = [m for m in top["messages"] if m["role"] == "tool"]
        assert r["tools"][answer["tool"]]["name"] == "ask_agent"
        (asked,) = answer["asked"]
        assert asked["role"] == "asked:a1" and asked["system_sha256"] != top["system_sha256"]
        assert (stages["org"] / "prompts" / f"{asked['system_sha256']}.txt").exists()
        searched = [m for m in asked["messages"] if m["role"] == "tool"]
        assert searched and all(r["tools"][m["tool"]]["log"]["agent"] == "a1" for m in searched)
        assert asked["messages"][-1]["content"] == answer["content"]  # the asked agent's answer is what the asker read


def test_a_long_tool_result_is_recorded_as_the_model_read_it_after_the_cut():
    from harness.endpoints.client import Agent, Meter
    from harness.run.loop import MAX_RESULT_CHARS, TranscriptRecorder, run_loop
    from harness.runtime.tools import ToolResult

    class Big:
        name = "memory_search"

        def schema(self):
            return {"type": "function", "function": {"name": self.name, "parameters": {
                "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}

        def __call__(self, query=""):
            return ToolResult("x" * (MAX_RESULT_CHARS + 5000))

    rec = TranscriptRecorder()
    with FakeModel() as fake:
        agent = Agent(fake.base_url, {"model": "fake", "params": {}}, "run", 1, Meter({"hit": 0, "miss": 0, "output": 0}),
                      max_retries=0)
        run_loop(agent, "sys", "what?", [Big()], recorder=rec)
        sent = fake.requests[-1]["body"]["messages"][-1]["content"]
    tool_msg = rec.transcript()["messages"][2]
    assert tool_msg["content"] == sent and len(sent) < MAX_RESULT_CHARS + 100 and sent.endswith("5000 more characters]")
    assert rec.prompts == {hashlib.sha256(b"sys").hexdigest(): "sys"}


# ------------------------------------------------------------------------------ export


def _logs(stages) -> dict[str, object]:
    return {p.name: inspect_log.read_eval_log(str(p)) for p in sorted(stages["logs"].glob("*.eval"))}


def test_one_log_per_stage_and_condition_with_runs_as_samples_and_repeats_as_epochs(stages):
    logs = _logs(stages)
    assert sorted((lg.eval.metadata["folder"], lg.eval.task) for lg in logs.values()) == [
        ("smoke/smoke", "none"), ("smoke/smoke", "tool_bm25"), ("smoke_org/smoke_org", "ask_agent"),
        ("smoke_org/smoke_org", "shared")]
    recs = {**records(stages["smoke"]), **records(stages["org"])}
    for lg in logs.values():
        assert lg.status == "success"
        for s in lg.samples:
            r = recs[s.metadata["run_id"]]
            assert s.epoch == r["repeat"] + 1 and s.target == r["gold"] and s.output.completion == r["answer"]
            assert s.model_usage and next(iter(s.model_usage.values())).input_tokens == r["tokens"]["prompt"]
            assert s.metadata["tokens_hit"] == r["tokens"]["hit"] and s.metadata["cost_list_usd"] == r["cost_list"]
            assert (s.error is not None) == (r["status"] == "failed")
    (bm25,) = [lg for lg in logs.values() if lg.eval.task == "tool_bm25"]
    assert {s.epoch for s in bm25.samples} == {1, 2}
    s = next(s for s in bm25.samples if s.error is None)
    tool = next(m for m in s.messages if m.role == "tool")
    call = next(m for m in s.messages if m.role == "assistant" and m.tool_calls).tool_calls[0]
    r = recs[s.metadata["run_id"]]
    assert call.function == "memory_search" and call.arguments == {"query": r["question"]}
    assert tool.function == "memory_search" and tool.text == r["transcript"]["messages"][2]["content"]
    assert s.messages[0].role == "system" and s.messages[0].metadata["sha256"] == r["transcript"]["system_sha256"]
    assert s.scores["correct"].value in ("C", "I") and s.scores["correct"].explanation.startswith("judge reply:")


def test_the_asked_dialogue_and_the_leak_label_reach_the_org_logs(stages):
    logs = _logs(stages)
    (ask,) = [lg for lg in logs.values() if lg.eval.task == "ask_agent"]
    for s in map(inspect_log.resolve_sample_attachments, ask.samples):
        (info,) = [e for e in s.events if e.event == "info"]
        assert info.source == "asked:a1" and "memory_search" in info.data
        assert s.scores["private_under_view"].value == 0
        assert ("leak" in s.scores) == (s.metadata["variant"] == "private")


def test_samples_df_gives_table_1_and_2_accuracy(stages):
    from inspect_ai.analysis import samples_df

    df = samples_df(str(stages["logs"]))
    df = df[(df["epoch"] == 1) & df["score_correct"].notna()]
    got = (df.assign(c=df["score_correct"] == "C").groupby(["metadata_variant", "metadata_condition"])["c"].mean() * 100)
    res = stages["root"] / "results"
    t = pd.concat([pd.read_csv(res / "table1.csv"), pd.read_csv(res / "table2.csv")])
    t["variant"] = t["variant"].fillna("")
    want = t.set_index(["variant", "condition"])["accuracy_pct"]
    assert len(want) == 6
    for key, acc in want.items():
        assert got[key] == pytest.approx(acc, abs=1e-9), key
    assert 0 < want[("", "tool_bm25")] < 100  # the check could fail: accuracies are neither all 0 nor all 100


def test_a_private_unit_under_a_view_and_interrupted_attempts_stand_out(tmp_path):
    from tests.analysis_fixtures import Stage

    s = Stage(tmp_path / "runs", "org")
    view = {"org": "q0@private", "agent": "a0", "scope": "shared", "since": None, "until": None}
    leak = {"kind": "search", "agent": "a0", "query": "x", "k": 8, "since": None, "until": None,
            "scoring": "hybrid", "view": view, "units": [["q0@private|s1|3|0", "a4"], ["q0@private|s2|0|0", "a1"]]}
    s.add("shared", "q0", variant="private", leak=False, tool_calls=1, tools=[{"log": leak}], attempt=2)
    s.add("shared", "q1", variant="private", leak=False, tool_calls=1,
          tools=[{"log": dict(leak, units=[["q1@private|s2|0|0", "a1"]])}])
    path = s.write()
    info = json.loads((path / "stage.json").read_text())
    info["plan"]["runs"].append("shared.private.q2.r0")  # started, never recorded
    (path / "stage.json").write_text(json.dumps(info))
    (path / "attempts.jsonl").write_text("".join(json.dumps({"run": r, "attempt": a, "ts": "t"}) + "\n" for r, a in
                                                 [("shared.private.q0.r0", 1), ("shared.private.q0.r0", 2),
                                                  ("shared.private.q1.r0", 1), ("shared.private.q2.r0", 1)]))
    out = tmp_path / "logs"
    res = subprocess.run([sys.executable, "-m", "analysis.export_inspect", f"runs={path}", f"out={out}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (lg,) = [inspect_log.read_eval_log(str(p)) for p in out.glob("*.eval")]
    by = {s.id: s for s in lg.samples}
    assert by["q0:private"].scores["private_under_view"].value == 1
    assert "a4 (private) session s1 round 3 [shared of a0]" in by["q0:private"].scores["private_under_view"].explanation
    assert by["q0:private"].metadata["units_by_owner"] == {"a1": 1, "a4": 1}
    assert by["q1:private"].scores["private_under_view"].value == 0
    assert by["q0:private"].metadata["interrupted_attempts"] == [1] and by["q1:private"].metadata["interrupted_attempts"] == []
    assert by["q2:private"].error is not None and "interrupted" in by["q2:private"].error.message
    assert lg.status == "error" and "1 of 3 planned runs not recorded" in lg.error.message
    # a folder the export did not write is never replaced
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    res = subprocess.run([sys.executable, "-m", "analysis.export_inspect", f"runs={path}", f"out={other}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and (other / "notes.txt").read_text() == "keep"


# ------------------------------------------------------------------------------ in a real browser


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_viewer_shows_a_runs_tool_call_and_judged_answer_in_a_real_browser(stages, tmp_path):
    import time
    import urllib.request

    from tests.browser import Browser, BrowserUnavailable

    (log_file,) = stages["logs"].glob("*_tool-bm25_*.eval")
    (lg,) = [inspect_log.read_eval_log(str(log_file))]
    s = next(s for s in lg.samples if s.scores and s.scores.get("correct") and s.scores["correct"].value == "C")
    tool = next(m for m in s.messages if m.role == "tool")
    port = _free_port()
    inspect = Path(sys.executable).with_name("inspect")
    view = subprocess.Popen([str(inspect), "view", "start", "--log-dir", str(stages["logs"]), "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    browser = None
    try:
        for _ in range(300):
            try:
                listing = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/logs", timeout=2))
                break
            except OSError:
                assert view.poll() is None, view.stderr.read().decode()[-2000:]
                time.sleep(0.1)
        else:
            raise AssertionError("inspect view did not answer on /api/logs")
        assert any(f["name"].endswith(log_file.name) for f in listing["files"])
        try:
            browser = Browser.start(tmp_path / "chromium")
        except BrowserUnavailable as exc:
            pytest.skip(f"headless Chromium cannot start here, so the viewer was not checked in a browser: {exc}")
        base = f"http://127.0.0.1:{port}/#/logs/{log_file.name}"
        browser.goto(base)  # the log: its samples listed
        browser.wait_for_text("tool_bm25", str(s.id))
        browser.goto(f"{base}/samples/sample/{s.id}/{s.epoch}/")  # one sample
        first_line = tool.text.splitlines()[0]
        text = browser.wait_for_text("memory_search", first_line, s.output.completion, "SCORE")
        assert s.target in text and s.input in text
        shot = browser.screenshot(tmp_path / "sample.png")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
        print(f"screenshot: {shot}")
    finally:
        if browser is not None:
            browser.close()
        view.terminate()
        try:
            view.wait(timeout=10)
        except subprocess.TimeoutExpired:
            view.kill()
