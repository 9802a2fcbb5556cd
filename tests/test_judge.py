"""The judge: LongMemEval's answer-check logic, the official-file parser, and judging a stage
end to end against a scripted judge (cache, crash, failures, agreement)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from bench.fake_upstream import is_preflight
from harness.records.ledger import read_ledger
from judge import prompts as P
from judge.agreement import stratified_sample, summarise
from judge.answer_check import load_judgements
from tests import cli
from tests.fake_model import FakeModel

TYPES = P.QUESTION_TYPES


def rec(qtype="single-session-user", qid="q1", variant="", answer="It is Paris.", gold="Paris", status="ok",
        condition="none", run_id=None):
    return {"run_id": run_id or f"{condition}.{variant or 'lme'}.{qid}.r0", "condition": condition, "qid": qid,
            "qtype": qtype, "variant": variant, "question": "Where did I go?", "gold": gold, "answer": answer,
            "status": status, "abstention": qid.endswith("_abs")}


# ------------------------------------------------------------------------------ templates

def test_one_template_per_type_shared_base_and_abstention_for_abs_ids():
    ps = P.builtin()
    names = {t: P.items_for(rec(t, qid=f"q{i}"), ps)[0].template for i, t in enumerate(TYPES)}
    assert names == {"single-session-user": "base", "single-session-assistant": "base", "multi-session": "base",
                     "temporal-reasoning": "temporal-reasoning", "knowledge-update": "knowledge-update",
                     "single-session-preference": "single-session-preference"}
    # any _abs id, whatever its base type, uses the abstention template with its explanation
    for t in TYPES:
        (item,) = P.items_for(rec(t, qid="x9_abs", gold="You never mentioned a trip."), ps)
        assert (item.kind, item.template, item.answer_slot) == ("correct", "abstention", "gold")
        assert "You never mentioned a trip." in item.prompt and "unanswerable" in item.prompt
    (item,) = P.items_for(rec("temporal-reasoning", gold="18 days", answer="19 days"), ps)
    assert item.prompt == P.BUILTIN["temporal-reasoning"].format(
        question="Where did I go?", answer="18 days", response="19 days")
    assert item.prompt_sha256 == hashlib.sha256(item.prompt.encode()).hexdigest()


def test_org_private_is_judged_for_declining_and_for_leaking():
    ps = P.builtin()
    items = P.items_for(rec("knowledge-update", variant="private", gold="Atlas Foods", answer="Atlas Foods"), ps)
    assert [(i.kind, i.template, i.answer_slot) for i in items] == [
        ("correct", "abstention", "org_private_explanation"), ("leak", "knowledge-update", "gold")]
    correct, leak = items
    assert P.ORG_PRIVATE_EXPLANATION in correct.prompt and "Atlas Foods\n\nModel response" not in correct.prompt
    assert "private" in P.ORG_PRIVATE_EXPLANATION
    assert leak.prompt == P.BUILTIN["knowledge-update"].format(question="Where did I go?", answer="Atlas Foods",
                                                              response="Atlas Foods")
    # the public variant and LongMemEval: the per-type template only
    for variant in ("public", ""):
        (only,) = P.items_for(rec("single-session-preference", variant=variant), ps)
        assert (only.kind, only.template) == ("correct", "single-session-preference")
    # a preference question in the private variant leaks against its rubric
    assert P.items_for(rec("single-session-preference", variant="private"), ps)[1].template == "single-session-preference"


def test_builtin_wording_states_each_rule_with_three_slots():
    for name, text in P.BUILTIN.items():
        fields = [f for _, f, _, _ in __import__("string").Formatter().parse(text) if f]
        assert sorted(fields) == ["answer", "question", "response"], name
        assert "yes or no only" in text
    assert "off-by-one" in P.BUILTIN["temporal-reasoning"] and "days" in P.BUILTIN["temporal-reasoning"]
    assert "off-by-one" not in P.BUILTIN["base"]
    assert "older information" in P.BUILTIN["knowledge-update"] and "updated answer" in P.BUILTIN["knowledge-update"]
    assert "Rubric:" in P.BUILTIN["single-session-preference"]
    assert "Explanation:" in P.BUILTIN["abstention"] and "cannot be answered" in P.BUILTIN["abstention"]
    # a response containing braces is inserted verbatim, never interpreted
    (item,) = P.items_for(rec(answer="{question} {0}"), P.builtin())
    assert "Model response: {question} {0}\n" in item.prompt


@pytest.mark.parametrize("reply,label,status", [
    ("Yes.", True, "ok"), ("no", False, "ok"), ("YES, because it matches", True, "ok"), ("No.", False, "ok"),
    ("I cannot say", False, "unparsable"), ("", False, "unparsable"), (None, False, "unparsable"),
    ("Nope", False, "unparsable"), ("yes and no", True, "ok"), ("  \nyes\n", True, "ok"),
    ("eyes", True, "unparsable"),  # the official rule is a substring test; we keep it and flag the reply
])
def test_label_rule_is_the_official_substring_test(reply, label, status):
    assert P.parse_reply(reply) == (label, status)


# ------------------------------------------------------------------------------ the official file, parsed

SYNTHETIC = '''\
import os
import sys
import not_a_real_module_anywhere  # the parser must never import this file
open({marker!r}, "w").write("executed")


def helper():
    template = "a decoy outside the function {{}} {{}} {{}}"


def get_anscheck_prompt(task, question, answer, response, abstention=False):
    if not abstention:
        if task in ['single-session-user', 'single-session-assistant', 'multi-session']:
            template = "SYN-BASE q=[{{}}] a=[{{}}] r=[{{}}] say yes or no"
            prompt = template.format(question, answer, response)
{extra_branches}        else:
            raise NotImplementedError
{abstention_branch}    return prompt


if __name__ == '__main__':
    print(get_anscheck_prompt(*sys.argv[1:5]))
'''
BRANCHES = {
    "temporal-reasoning": '''\
        elif task == 'temporal-reasoning':
            template = ("SYN-TEMPORAL allow one day either way "
                        "q=[{}] a=[{}] r=[{}]")
            prompt = template.format(question, answer, response)
''',
    "knowledge-update": '''\
        elif task == 'knowledge-update':
            template = "SYN-UPDATE r=[{}] " + "q=[{}] a=[{}]"
            prompt = template.format(response, question, answer)
''',
    "single-session-preference": '''\
        elif task == 'single-session-preference':
            template = "SYN-PREF q=[{}] rubric=[{}] r=[{}]"
            prompt = template.format(question, answer, response)
''',
}
ABST = '''\
    else:
        template = "SYN-ABSTAIN q=[{}] why=[{}] r=[{}]"
        prompt = template.format(question, answer, response)
'''


def write_synthetic(tmp_path, drop=(), abstention=True, name="evaluate_qa.py") -> Path:
    extra = "".join(v for k, v in BRANCHES.items() if k not in drop)
    text = SYNTHETIC.format(marker=str(tmp_path / "EXECUTED"), extra_branches=extra,
                            abstention_branch=ABST if abstention else "")
    p = tmp_path / name
    p.write_text(text)
    return p


def test_official_file_is_parsed_not_executed(tmp_path):
    p = write_synthetic(tmp_path)
    ps = P.load(str(p))
    assert not (tmp_path / "EXECUTED").exists()
    assert ps.source == f"file:{p.resolve()}"
    assert ps.source_sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    got = {t: ps.for_type(t).render("Q", "A", "R") for t in TYPES}
    for t in ("single-session-user", "single-session-assistant", "multi-session"):
        assert got[t] == "SYN-BASE q=[Q] a=[A] r=[R] say yes or no" and ps.for_type(t).name == "base"
    assert got["temporal-reasoning"] == "SYN-TEMPORAL allow one day either way q=[Q] a=[A] r=[R]"
    # `+` concatenation is read, and format()'s argument order decides what fills each slot
    assert got["knowledge-update"] == "SYN-UPDATE r=[R] q=[Q] a=[A]"
    assert got["single-session-preference"] == "SYN-PREF q=[Q] rubric=[A] r=[R]"
    assert ps.abstention.render("Q", "A", "R") == "SYN-ABSTAIN q=[Q] why=[A] r=[R]"
    # the same record choice applies to file templates
    items = P.items_for(rec("knowledge-update", variant="private", gold="G", answer="R0"), ps)
    assert [i.prompt for i in items] == [f"SYN-ABSTAIN q=[Where did I go?] why=[{P.ORG_PRIVATE_EXPLANATION}] r=[R0]",
                                         "SYN-UPDATE r=[R0] q=[Where did I go?] a=[G]"]


@pytest.mark.parametrize("drop", ["knowledge-update", "temporal-reasoning", "single-session-preference"])
def test_official_file_missing_a_branch_names_it(tmp_path, drop):
    p = write_synthetic(tmp_path, drop=(drop,))
    with pytest.raises(P.PromptFileError, match=f"no template for question type.*{drop}"):
        P.load(str(p))


def test_official_file_errors_are_clear(tmp_path):
    with pytest.raises(P.PromptFileError, match="abstention template is missing"):
        P.load(str(write_synthetic(tmp_path, abstention=False)))
    other = tmp_path / "other.py"
    other.write_text("def something():\n    return 1\n")
    with pytest.raises(P.PromptFileError, match="no function `get_anscheck_prompt`"):
        P.load(str(other))
    with pytest.raises(P.PromptFileError, match="no such file"):
        P.load(str(tmp_path / "missing.py"))
    two_slots = write_synthetic(tmp_path, name="two.py")
    two_slots.write_text(two_slots.read_text().replace("SYN-PREF q=[{}] rubric=[{}] r=[{}]", "SYN-PREF {} {}"))
    with pytest.raises(P.PromptFileError, match="three positional slots"):
        P.load(str(two_slots))
    assert P.load("builtin").source == "builtin" and P.load(None).source == "builtin"



def test_official_status_present_absent_tampered_and_unparsable(tmp_path, monkeypatch):
    keys = {"path", "present", "sha256", "pinned_sha256", "matches_pin", "parses", "detail"}
    st = P.official_status(tmp_path / "nowhere" / "evaluate_qa.py")
    assert set(st) == keys
    assert (st["present"], st["sha256"], st["matches_pin"], st["parses"]) == (False, None, None, False)
    assert "download --what evaluate_qa --out data/longmemeval" in st["detail"]
    assert P.official_status()["path"] == str((P.REPO / P.OFFICIAL_DEFAULT_PATH).resolve())
    assert P.OFFICIAL_DEFAULT_PATH == "data/longmemeval/evaluate_qa.py"

    p = write_synthetic(tmp_path)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    st = P.official_status(p)  # a parsable file that is not the pinned one
    assert st["present"] is True and st["sha256"] == digest and st["pinned_sha256"] == P.OFFICIAL_SHA256
    assert st["matches_pin"] is False and st["parses"] is True and "differs from" in st["detail"]
    monkeypatch.setattr(P, "OFFICIAL_SHA256", digest)  # as if this synthetic file were the pinned one
    st = P.official_status(str(p))
    assert st["matches_pin"] is True and st["parses"] is True and "sha256 matches" in st["detail"]
    assert not (tmp_path / "EXECUTED").exists()  # parsed, never executed
    p.write_text(p.read_text().replace("SYN-BASE", "EDITED"))  # tampered
    st = P.official_status(p)
    assert st["matches_pin"] is False and st["parses"] is True
    broken = write_synthetic(tmp_path, drop=("knowledge-update",), name="broken.py")
    st = P.official_status(broken)
    assert st["present"] is True and st["parses"] is False and "does not parse" in st["detail"]
    assert "knowledge-update" in st["detail"]

# ------------------------------------------------------------------------------ end to end

GROUPS = ("stage.groups=[{sample:smoke,conditions:[none]},{variant:private,sample:smoke_org,conditions:[none]},"
          "{variant:public,sample:smoke_org,conditions:[none]}]")
STAGE = ["stage=org", "data=synth_tiny", "+condition@stage.conditions.none=none", "samples.smoke.per_type=5",
         "samples.smoke.limit=null", GROUPS, "model=vllm", "model.backoff_s=0.01", "model.max_retries=1"]
FAIL_TYPE = "single-session-user"  # the agent model breaks on the first question of this type


def stage_dir(root) -> Path:
    return Path(root) / "runs" / "org" / "org"


@pytest.fixture(scope="module")
def stage_runs(tmp_path_factory):
    """One Org + LongMemEval stage (variant '', private, public) run against a scripted agent that
    answers some questions with the gold answer, declines others and fails on one."""
    root = tmp_path_factory.mktemp("judge_stage")
    data_path = root / "cache" / "data" / "synth_tiny_seed0_q2.json"
    state = {}

    def agent(req):
        if "golds" not in state:
            data = json.loads(data_path.read_text())
            state["golds"] = {d["question"]: (d["question_id"], d["question_type"], str(d["answer"])) for d in data}
            state["fail"] = sorted(d["question_id"] for d in data
                                   if d["question_type"] == FAIL_TYPE and not d["question_id"].endswith("_abs"))[0]
        question = next(m["content"] for m in req["messages"] if m["role"] == "user")
        qid, _, gold = state["golds"][question]
        if qid == state["fail"]:
            raise RuntimeError("scripted failure: the connection drops")
        if int(hashlib.sha256(qid.encode()).hexdigest(), 16) % 2:
            return {"role": "assistant", "content": f"It is {gold}."}
        return {"role": "assistant", "content": "I don't know; I have no record of that."}

    with FakeModel(script=agent) as fake:
        res = cli.run([sys.executable, "-m", "harness.run", *STAGE, f"model.base_url={fake.base_url}",
                              f"runs_dir={root}/runs", f"cache_dir={root}/cache", "concurrency=4"],
                             capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    recs = [json.loads(p.read_text()) for p in (stage_dir(root) / "records").glob("*.json")]
    assert {r["variant"] for r in recs} == {"", "private", "public"}
    assert any(r["status"] == "failed" for r in recs) and any(r["abstention"] for r in recs)
    return root


@pytest.fixture
def stage(stage_runs, tmp_path):
    """A private copy of the stage's run folder for one test to judge."""
    shutil.copytree(stage_dir(stage_runs), stage_dir(tmp_path))
    return tmp_path


def records(root) -> dict[str, dict]:
    return {r["run_id"]: r for r in (json.loads(p.read_text()) for p in (stage_dir(root) / "records").glob("*.json"))}


def expected(root) -> dict[tuple[str, str], bool]:
    """What a faithful judge says about each answer of the scripted agent."""
    out = {}
    for rid, r in records(root).items():
        answered = r["answer"].startswith("It is")
        if r["status"] != "ok":
            out[(rid, "correct")] = False
            if r["variant"] == "private":
                out[(rid, "leak")] = False
        elif r["variant"] == "private":
            out[(rid, "correct")], out[(rid, "leak")] = not answered, answered
        elif r["abstention"]:
            out[(rid, "correct")] = not answered
        else:
            out[(rid, "correct")] = answered
    return out


def judge_script(req, unparsable_marker="off-by-one"):
    """A scripted judge that reads the builtin prompt like a careful grader would."""
    (msg,) = req["messages"]
    p = msg["content"]
    response = re.search(r"Model response: (.*?)\n\n", p, re.S).group(1)
    if unparsable_marker and unparsable_marker in p:
        return {"role": "assistant", "content": "Hmm, I cannot say"}
    if "Explanation: " in p:
        yes = "don't know" in response
    else:
        gold = re.search(r"(?:Correct answer|Rubric): (.*?)\n\nModel response", p, re.S).group(1)
        yes = gold.lower() in response.lower()
    return {"role": "assistant", "content": "Yes." if yes else "No."}


def judge_cmd(root, fake, *extra, module="judge.run"):
    return [sys.executable, "-m", module, *STAGE, "judge=vllm", f"judge.base_url={fake.base_url}",
            "judge.backoff_s=0.01", f"runs_dir={root}/runs", f"cache_dir={root}/cache", "concurrency=3", *extra]


def test_judging_a_stage_end_to_end_then_rerun_sends_nothing(stage):
    with FakeModel(script=judge_script) as fake:
        res = cli.run(judge_cmd(stage, fake), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        first = len(fake.run_requests)
        lines = read_ledger(stage_dir(stage) / "judgements" / "vllm.jsonl")
        got = load_judgements(stage_dir(stage), "vllm")
        exp = expected(stage)
        assert set(got) == set(exp) and len(lines) == len(exp)  # one line per (run, kind), nothing dropped
        recs = records(stage)
        for key, j in got.items():
            r = recs[key[0]]
            if r["status"] != "ok":
                assert (j["status"], j["label"], j["reply"], j["prompt"]) == ("failed_run", False, None, None)
            elif j["template"] == "temporal-reasoning":
                assert (j["status"], j["label"], j["reply"]) == ("unparsable", False, "Hmm, I cannot say")
            else:
                assert j["status"] == "ok" and j["label"] == exp[key], (key, j["reply"], j["prompt"])
            if j["status"] != "failed_run":
                assert j["prompt_sha256"] == hashlib.sha256(j["prompt"].encode()).hexdigest()
                assert f"Model response: {r['answer']}\n" in j["prompt"]
            assert j["prompt_source"] == "builtin" and j["prompt_source_sha256"] == P.builtin().source_sha256
            assert j["judge"]["name"] == "vllm" and j["judge"]["model"] == "default"
            if r["variant"] == "private" and key[1] == "correct":
                assert j["template"] == "abstention" and j["answer_slot"] == "org_private_explanation"
        assert any(j["status"] == "failed_run" for j in got.values())
        assert sum(k[1] == "leak" and v for k, v in exp.items()) >= 1, "the scripted agent leaks at least once"
        # every request: one user message, temperature 0, at most 10 tokens; identical prompts asked once
        bodies = [r["body"] for r in fake.run_requests]
        assert all(len(b["messages"]) == 1 and b["messages"][0]["role"] == "user" for b in bodies)
        assert all(b["temperature"] == 0 and b["max_tokens"] == 10 for b in bodies)
        prompts = {j["prompt_sha256"] for j in got.values() if j["prompt"]}
        assert len(bodies) == len(prompts) == first
        # a repeated prompt is answered from the cache, and says so
        assert sum(not j["cached"] for j in got.values() if j["prompt"]) == first < len([j for j in got.values() if j["prompt"]])
        # the stage ledger holds the judge calls under role judge and tag judge:<run_id>
        ledger = read_ledger(stage_dir(stage) / "ledger.jsonl")
        jl = [e for e in ledger if e.get("role") == "judge" and e.get("event") == "response"]
        assert len(jl) == first and all(e["status"] == 200 and e["tag"].startswith("judge:") for e in jl)
        assert {e["tag"][6:] for e in jl} <= {k[0] for k, j in got.items() if j["prompt"]}
        assert sum(j["usage"]["prompt"] for j in got.values() if j.get("usage")) == sum(e["prompt"] for e in jl)
        assert "unparsable" in res.stderr and "Hmm, I cannot say" in res.stderr
        # a second run: everything is already judged; zero requests, no new lines
        again = cli.run(judge_cmd(stage, fake), capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert len(fake.run_requests) == first
        assert len(read_ledger(stage_dir(stage) / "judgements" / "vllm.jsonl")) == len(lines)
        # with the judgements file gone, the cache answers: still zero requests, lines marked cached
        (stage_dir(stage) / "judgements" / "vllm.jsonl").unlink()
        third = cli.run(judge_cmd(stage, fake), capture_output=True, text=True, timeout=300)
        assert third.returncode == 0, third.stderr
        assert len(fake.run_requests) == first
        redone = load_judgements(stage_dir(stage), "vllm")
        assert {k: v["label"] for k, v in redone.items()} == {k: v["label"] for k, v in got.items()}
        assert all(v["cached"] for v in redone.values() if v["status"] != "failed_run")


def test_prompts_from_a_file_are_recorded_with_source_and_hash(stage, tmp_path):
    f = write_synthetic(tmp_path)
    with FakeModel(script=lambda req: {"role": "assistant", "content": "yes"}) as fake:
        res = cli.run(judge_cmd(stage, fake, f"judge.prompts={f}"), capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 0, res.stderr
        assert not (tmp_path / "EXECUTED").exists()
    got = load_judgements(stage_dir(stage), "vllm")
    sha = hashlib.sha256(f.read_bytes()).hexdigest()
    judged = [j for j in got.values() if j["status"] != "failed_run"]
    assert judged and all(j["prompt_source"] == f"file:{f.resolve()}" and j["prompt_source_sha256"] == sha
                          for j in got.values())
    for j in judged:
        head = {"abstention": "SYN-ABSTAIN", "base": "SYN-BASE", "temporal-reasoning": "SYN-TEMPORAL",
                "knowledge-update": "SYN-UPDATE", "single-session-preference": "SYN-PREF"}[j["template"]]
        assert j["prompt"].startswith(head) and j["label"] is True


def test_killed_judging_resumes_with_one_judgement_per_run_and_kind(stage):
    with FakeModel(script=lambda req: (time.sleep(0.4), judge_script(req, None))[1]) as fake:
        proc = subprocess.Popen(judge_cmd(stage, fake), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        path = stage_dir(stage) / "judgements" / "vllm.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline and (not path.exists() or len(read_ledger(path)) < 8):
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        before = read_ledger(path)
        exp = expected(stage)
        assert 8 <= len(before) < len(exp)
        res = cli.run(judge_cmd(stage, fake), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
    lines = read_ledger(path)
    assert Counter((j["run_id"], j["kind"]) for j in lines) == Counter(exp.keys())  # exactly one each
    got = load_judgements(stage_dir(stage), "vllm")
    assert {k: v["label"] for k, v in got.items()} == exp
    # nothing judged before the kill was asked again; at most the calls in flight were lost
    unique = len({j["prompt_sha256"] for j in lines if j["prompt"]})
    assert unique <= len(fake.run_requests) <= unique + 3
    # attempts cut by the kill are marked interrupted in the ledger and judged again under a higher number
    ledger = read_ledger(stage_dir(stage) / "ledger.jsonl")
    interrupted = {(e["tag"], e["attempt"]) for e in ledger if e.get("event") == "interrupted"}
    assert interrupted, "the kill cut a judging attempt in flight"
    for tag, a in interrupted:
        assert tag.startswith("judge:")
        mine = [j for j in lines if j["run_id"] == tag[6:]]
        assert mine and all(j["attempt"] != a for j in mine), "an interrupted attempt wrote nothing"
        assert any(j["attempt"] > a or j["cached"] for j in mine)  # judged again (or its reply was cached)


def test_a_judge_server_failing_every_call_stops_judging_unwritten_and_the_same_command_judges_the_rest(stage):
    """Every judge call 500s (the preflight's too): the first judgement out of retries, the probe failing as well,
    stops judging with exit 3 naming the server's last answer; no judgement is written failed (issue 33)."""
    with FakeModel(p500=1.0) as bad:
        res = cli.run(judge_cmd(stage, bad, "judge.max_retries=1"), capture_output=True, text=True,
                             timeout=300)
    assert res.returncode == 3, res.stderr
    assert "judge's server keeps failing" in res.stderr and "boom" in res.stderr
    got = load_judgements(stage_dir(stage), "vllm")
    assert {j["status"] for j in got.values()} <= {"failed_run"}  # the offline ones only, nothing failed
    db = sqlite3.connect(stage / "cache" / "judge_cache.sqlite")
    assert db.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == 0  # failures are never cached
    with FakeModel(script=lambda req: judge_script(req, None)) as good:
        res = cli.run(judge_cmd(stage, good), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
    got = load_judgements(stage_dir(stage), "vllm")
    assert {k: v["label"] for k, v in got.items()} == expected(stage)
    assert {j["status"] for j in got.values()} == {"ok", "failed_run"}
    assert db.execute("SELECT COUNT(*) FROM replies").fetchone()[0] == len(good.run_requests)


def judge_fixed_server(stage, fake, *args) -> list[dict]:
    """The same judging command once the server is fixed: the grading requests it sent."""
    fake.dies_with = None
    before = len(fake.run_requests)
    res = cli.run(judge_cmd(stage, fake, *args), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return [r for r in fake.run_requests[before:] if "Model response" in r["body"]["messages"][0]["content"]]


def judged_exactly_the_rest(stage, ok: dict, asked: list[dict]) -> None:
    """Every judgement made, the first session's kept, and the rerun asked each missing prompt once."""
    got = load_judgements(stage_dir(stage), "vllm")
    assert {k: v["label"] for k, v in got.items()} == expected(stage)
    assert all(got[k]["attempt"] == v["attempt"] for k, v in ok.items())  # the first session's kept
    todo = {v["prompt_sha256"] for v in got.values() if v["status"] == "ok"} - {v["prompt_sha256"] for v in ok.values()}
    assert len(asked) == len(todo)  # exactly the rest, each once


def test_a_judge_server_dying_after_some_judgements_stops_judging_and_the_rerun_judges_exactly_the_rest(stage):
    """The judge's server answers 4 judgements, then 503s for good (its probe too): exit 3 naming its last
    answer, the 4 kept, none written failed; the fixed server is then asked exactly the prompts not judged."""
    with FakeModel(script=lambda req: judge_script(req, None), dies_with="503", dies_after=4) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1", "concurrency=1"), capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 3, res.stderr
        assert "judge's server keeps failing" in res.stderr and "no healthy upstream" in res.stderr
        first = load_judgements(stage_dir(stage), "vllm")
        ok = {k: v for k, v in first.items() if v["status"] == "ok"}
        assert len({v["prompt_sha256"] for v in ok.values()}) == 4
        assert {v["status"] for v in first.values()} <= {"ok", "failed_run"}  # nothing written failed
        asked = judge_fixed_server(stage, fake)
    judged_exactly_the_rest(stage, ok, asked)


def test_stratified_sample_is_seeded_and_takes_three_per_condition_and_type():
    recs, main = [], {}
    for cond in ("none", "tool_bm25"):
        for t in ("multi-session", "temporal-reasoning"):
            for i in range(6):
                r = rec(t, qid=f"{t[:3]}{i}", condition=cond)
                recs.append(r)
                main[(r["run_id"], "correct")] = {"status": "failed_run" if i == 0 else "ok", "label": True}
    a = stratified_sample(recs, main, seed=0)
    assert len(a) == 12 and Counter((r["condition"], r["qtype"]) for r in a) == Counter(
        {(c, t): 3 for c in ("none", "tool_bm25") for t in ("multi-session", "temporal-reasoning")})
    assert all(main[(r["run_id"], "correct")]["status"] == "ok" for r in a)  # failed runs are not eligible
    assert [r["run_id"] for r in stratified_sample(list(reversed(recs)), main, seed=0)] == [r["run_id"] for r in a]
    assert any([r["run_id"] for r in stratified_sample(recs, main, seed=s)] != [r["run_id"] for r in a]
               for s in range(1, 6))
    # kappa on a known table: 8 yes/yes, 2 no/no, 1 yes/no, 1 no/yes -> po = 10/12, pe = (9*9 + 3*3)/144
    rows = [{"kind": "correct", "label1": a_, "label2": b_}
            for a_, b_ in [(True, True)] * 8 + [(False, False)] * 2 + [(True, False), (False, True)]]
    s = summarise(rows)["all"]
    po, pe = 10 / 12, (9 * 9 + 3 * 3) / 144
    assert s["agreement"] == pytest.approx(po) and s["kappa"] == pytest.approx((po - pe) / (1 - pe))
    assert s["only_main_yes"] == 1 and s["only_second_yes"] == 1


def test_every_judging_command_honours_dry_run(stage):
    """make judge, agreement and probe with dry_run=true print their plan and send, open and write nothing."""
    before = sorted(p.name for p in (stage_dir(stage)).rglob("*"))
    with FakeModel(script=lambda req: judge_script(req, None)) as one, FakeModel(script=judge_script) as two:
        for module, extra in (("judge.run", ()), ("judge.probe", ()),
                              ("judge.agreement", ("+judge@judge2=vllm", f"judge2.base_url={two.base_url}"))):
            res = cli.run(judge_cmd(stage, one, "dry_run=true", *extra, module=module), capture_output=True,
                                 text=True, timeout=300)
            assert res.returncode == 0, (module, res.stderr)
            assert "would need a model call" in res.stdout and "nothing sent" in res.stdout, (module, res.stdout)
        assert one.requests == [] and two.requests == []
    assert sorted(p.name for p in (stage_dir(stage)).rglob("*")) == before


def test_agreement_with_a_second_judge(stage):
    def second(req):  # agrees except that it never says yes to an abstention template
        out = judge_script(req, None)
        if "Explanation: " in req["messages"][0]["content"]:
            out = {"role": "assistant", "content": "No"}
        return out

    with FakeModel(script=lambda req: judge_script(req, None)) as one, FakeModel(script=second) as two:
        res = cli.run(judge_cmd(stage, one, "+judge@judge2=vllm", f"judge2.base_url={two.base_url}",
                                       "judge2.model=second", f"+results_dir={stage}/results",
                                       module="judge.agreement"), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
    ledger = read_ledger(stage_dir(stage) / "ledger.jsonl")
    second_calls = [e for e in ledger if e.get("event") == "response" and e["tag"].startswith("judge2:")]
    assert len(second_calls) == len(two.run_requests) > 0
    assert all(e["role"] == "judge" and e["model"] == "second" for e in second_calls)
    out = stage / "results" / "agreement" / "org"
    import csv

    rows = list(csv.DictReader(open(out / "agreement.csv")))
    dis = list(csv.DictReader(open(out / "disagreements.csv")))
    recs = records(stage)
    eligible = [r for r in recs.values() if r["status"] == "ok"]
    # 3 per (condition, question type), the Org variants pooled (Appendix E): a stratum of <= 3 is sampled whole
    strata = Counter((r["condition"], r["qtype"]) for r in eligible)
    sampled = {r["run_id"] for r in rows}
    assert Counter((recs[i]["condition"], recs[i]["qtype"]) for i in sampled) == {k: min(3, n) for k, n in strata.items()}
    assert any(n > 3 for n in strata.values())  # the pooled variants make a stratum larger than the sample
    assert len(rows) == sum(2 if recs[i]["variant"] == "private" else 1 for i in sampled)
    assert f"second-judge sample: {len(sampled)} answers" in res.stderr
    # the second judge said no to every abstention-template yes of the first
    assert {(d["run_id"], d["kind"]) for d in dis} == {(r["run_id"], r["kind"]) for r in rows
                                                       if r["label1"] == "True" and r["label2"] == "False"}
    assert dis and all(d["label1"] == "True" and d["label2"] == "False" for d in dis)
    from analysis.stats import agreement

    a = agreement([r["label1"] == "True" for r in rows], [r["label2"] == "True" for r in rows])
    assert f"agreement {100 * a.agreement:.1f}%" in res.stderr and f"Cohen's kappa {a.kappa:.3f}" in res.stderr
    # the second judge's file is its own; the main judge's was made (or reused) first
    assert (stage_dir(stage) / "judgements" / "vllm.judge2.jsonl").exists()
    assert (stage_dir(stage) / "judgements" / "vllm.jsonl").exists()
    # make analyze computes the same agreement from the two judgements files and keeps it in the report
    from analysis import run as A

    res_dir = stage / "analysed"
    assert A.main([f"runs={stage_dir(stage)}", f"out={res_dir}", "judge=vllm", "resamples=50", "replay=none",
                   "lenient=true"]) in (0, 1)
    got = list(csv.DictReader(open(res_dir / "judge_agreement.csv")))
    mine = next(g for g in got if g["kind"] == "all" and g["judge2"] == "vllm.judge2")
    assert int(mine["n"]) == len(rows) and float(mine["agreement"]) == pytest.approx(a.agreement)
    assert float(mine["kappa"]) == pytest.approx(a.kappa)
    assert int(mine["only_main_yes"]) == len(dis) and int(mine["only_second_yes"]) == 0
    assert "## Judge validation (Appendix E)" in (res_dir / "report.md").read_text()


def test_two_servers_with_one_model_name_never_share_labels(stage):
    """vLLM serves every model as `default`: the cache and the already-judged check must key on
    the endpoint (base URL), not on the model name alone."""
    yes = lambda req: {"role": "assistant", "content": "yes"}  # noqa: E731
    no = lambda req: {"role": "assistant", "content": "no"}  # noqa: E731
    with FakeModel(script=yes) as a:
        res = cli.run(judge_cmd(stage, a, "judge.model=default"), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert a.requests
    with FakeModel(script=no) as b:
        res = cli.run(judge_cmd(stage, b, "judge.model=default"), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert b.requests, "the second server was never asked: its labels came from the first"
    lines = load_judgements(stage_dir(stage), "vllm")
    judged = [j for j in lines.values() if j["status"] == "ok"]
    assert judged and all(j["label"] is False for j in judged)
    assert all(j["judge"]["base_url"] == b.base_url for j in judged)


def test_the_judge_sends_only_the_official_parameters_unless_asked(stage):
    with FakeModel(script=lambda req: {"role": "assistant", "content": "yes"}) as fake:
        res = cli.run(judge_cmd(stage, fake, "+judge.params.reasoning_effort=low", "+judge.params.top_p=0.5"),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        bodies = [r["body"] for r in fake.run_requests]
    assert bodies
    for body in bodies:
        extra = set(body) - {"model", "messages"}
        assert extra == {"temperature", "max_tokens"}, extra
        assert body["temperature"] == 0 and body["max_tokens"] == 10 and len(body["messages"]) == 1
    with FakeModel(script=lambda req: {"role": "assistant", "content": "no"}) as fake:
        res = cli.run(judge_cmd(stage, fake, "+judge.judge_params.reasoning_effort=low"),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert fake.run_requests and all(r["body"]["reasoning_effort"] == "low" for r in fake.run_requests)


@pytest.mark.parametrize("fault", ["empty", "nonjson"])
def test_a_judge_reply_with_no_choices_or_no_json_fails_that_judgement_not_the_process(stage, fault):
    """Every reply bad (the probe's too): a dead server, so judging stops (exit 3) naming the bad reply, with no
    traceback and nothing written failed (issue 33: the judge's breaker)."""
    with FakeModel(always=fault) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1"), capture_output=True, text=True,
                             timeout=300)
        assert res.returncode == 3, res.stderr
        assert "Traceback" not in res.stderr and "judge's server keeps failing" in res.stderr
    assert ("no choices" if fault == "empty" else "not JSON") in res.stderr
    lines = load_judgements(stage_dir(stage), "vllm")
    assert not [j for j in lines.values() if j["status"] == "failed"]
    with FakeModel(script=judge_script) as fake:  # the upstream recovers: the same command finishes
        res = cli.run(judge_cmd(stage, fake), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
    assert not [j for j in load_judgements(stage_dir(stage), "vllm").values() if j["status"] == "failed"]


def test_a_judging_plan_with_a_price_not_set_says_unknown_never_zero():
    """A judge whose prices are null (conf/judge/gpt54.yaml until set): the dry run's plan says the cost is
    unknown; with prices it gives the list cost."""
    from judge.common import plan_lines

    jc = {"name": "gpt54", "model": "gpt-5.4", "base_url": "https://api.openai.com/v1",
          "prices": {"hit": None, "miss": None, "output": None}, "params": {"max_tokens": 60}}
    line = plan_lines("stage", jc, "id", 3, 0, 0, 0, ["x" * 400] * 3)[1]
    assert "list cost unknown (no miss or output price set)" in line and "$0" not in line
    priced = plan_lines("stage", {**jc, "prices": {"hit": 0.1, "miss": 1.0, "output": 10.0}}, "id", 3, 0, 0, 0,
                        ["x" * 400] * 3)[1]
    assert f"list ${(300 * 1.0 + 180 * 10.0) / 1e6:.4f}" in priced


# ------------------------------------------------------------------ the judge's server, several judgements at once

@pytest.mark.parametrize("fault, said", [("503", "no healthy upstream"), ("quota", "no credit left")])
def test_a_judge_server_dying_with_judgements_in_flight_writes_none_failed_and_the_rerun_judges_exactly_the_rest(
        stage, fault, said):
    """Four judgements at once; the judge's server answers 4 judgements, then fails for good (a 503, or credit
    gone): exit 3 naming its answer, nothing written failed (neither the judgement that tripped the stop nor
    those in flight), and the fixed server is asked exactly the prompts not judged, each once."""

    from judge.answer_check import load_judgements

    with FakeModel(script=lambda req: judge_script(req, None), dies_with=fault, dies_after=4) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1", "concurrency=4"), capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 3, res.stderr
        assert said in res.stderr, res.stderr[-2000:]
        first = load_judgements(stage_dir(stage), "vllm")
        assert {v["status"] for v in first.values()} <= {"ok", "failed_run"}  # nothing written failed
        ok = {k: v for k, v in first.items() if v["status"] == "ok"}
        asked = judge_fixed_server(stage, fake, "concurrency=4")
    judged_exactly_the_rest(stage, ok, asked)


def test_a_judge_endpoint_rejecting_the_judges_request_stops_judging_at_its_preflight_writing_nothing_failed(stage):
    """The judge's endpoint rejects its request shape with a 400 the body does not explain (as a gateway does
    for a parameter it will not take): the judge's preflight is that very request, so every judgement would
    be rejected too. Judging must stop there (exit 3, the rejection named), not write each judgement failed."""

    from judge.answer_check import load_judgements

    odd = (400, {"error": {"message": "unsupported request for this deployment", "type": "invalid_request_error"}})
    with FakeModel(refuse=lambda req: odd) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1"), capture_output=True, text=True,
                             timeout=300)
        asked = [r for r in fake.requests if "Model response" in r["body"]["messages"][0]["content"]]
    assert res.returncode == 3, res.stderr[-2000:]
    assert "unsupported request for this deployment" in res.stderr
    assert asked == []  # no judgement sent after the preflight's refusal
    got = load_judgements(stage_dir(stage), "vllm")
    assert {j["status"] for j in got.values()} <= {"failed_run"}


def test_a_judge_stop_names_the_server_failure_not_a_judgement_it_cut_short(stage):
    """Two judgements at once: the first run's waits out a long Retry-After while the other runs' judgements fail
    fast until one runs out of retries and the probe fails too. The first run's judgement is then cut short
    (it raises "stopping"); the stop must still name the server's failure and its last answer, as the driver's
    does, whichever judgement's result is read first."""
    import json

    first = sorted((r for r in records(stage).values() if r["status"] == "ok"), key=lambda r: r["run_id"])[0]
    state = {"preflight": False}
    dead = {"error": {"message": "no healthy upstream", "type": "service_unavailable"}}

    def refuse(req):
        if is_preflight(req):
            if not state["preflight"]:
                state["preflight"] = True
                return None  # judging's preflight passes
            return 503, dead, {"Retry-After": "0"}  # the probe
        if json.dumps(first["question"])[1:-1] in json.dumps(req["messages"]):
            return 503, dead, {"Retry-After": "60"}
        return 503, dead, {"Retry-After": "0"}

    with FakeModel(refuse=refuse) as fake:
        res = cli.run(judge_cmd(stage, fake, "judge.max_retries=1", "concurrency=2", "+judge.max_wait_s=120"),
                             capture_output=True, text=True, timeout=300)
    last = [ln for ln in res.stderr.splitlines() if ln.startswith("stopped")]
    assert res.returncode == 3 and last, res.stderr[-2000:]
    assert "keeps failing" in last[-1] and "no healthy upstream" in last[-1], last[-1]
