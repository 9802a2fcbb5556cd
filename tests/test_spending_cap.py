"""The spending cap is kept by the metering proxy, call by call, across shards and inside runs (issue 42).

The proxy is the one place money is decided (harness.endpoints.proxy, harness.run.budget): it sends no
call whose worst case (prompt estimate + max_tokens) would take the stage's spend — every ledger of the
folder, read live, calls in flight at their worst — past the cap.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from harness.studies.agents import run as run_agents
from harness.endpoints.client import Agent, Meter
from harness.endpoints.proxy import MeteringProxy
from harness.failures import BUDGET, CapReached, exit_code
from harness.records import RunDir
from harness.records.ledger import Ledger, read_ledger
from harness.records.shards import Shard, shard_dir
from harness.run.budget import Budget
from tests.fake_model import FakeModel
from tests.test_failures_midstage import _shared_cache, agents_cfg, recs, stage_of, stopped  # noqa: F401 (fixture)

PRICES = {"currency": "USD", "hit": 100.0, "miss": 100.0, "output": 100.0, "usd_per_currency": 1.0}  # per 1M tokens
MC = {"name": "t", "model": "m", "timeout_s": 1.0, "retry_budget_s": 2.0, "prices": PRICES,
      "params": {"max_tokens": 50}}


def ledger_spend(root: Path, prices=PRICES) -> float:
    """Answered calls over every ledger of the folder at list price, summed here from the raw lines."""
    total = 0.0
    for p in RunDir(root).ledger_paths():
        for e in read_ledger(p):
            if e.get("event") == "response" and e.get("status") == 200:
                total += (e["hit"] * prices["hit"] + e["miss"] * prices["miss"] + e["output"] * prices["output"]) / 1e6
    return total


def ask(url: str, tag: str, text: str = "hello there") -> None:
    Agent(url, MC, tag, 1, Meter(PRICES), max_retries=0).complete([{"role": "user", "content": text}])


def test_two_shards_at_once_share_one_cap_read_live_from_each_others_ledgers(tmp_path):
    root = tmp_path / "stage"
    cap = 0.05
    refused: list[str] = []
    with FakeModel() as fake:
        ledgers = [Ledger(shard_dir(root, Shard(i, 2)) / "ledger.jsonl") for i in range(2)]
        # each shard builds its own Budget, as two drivers on two machines would
        budgets = [Budget(cap, PRICES, PRICES, RunDir(root).ledger_paths) for _ in range(2)]
        with MeteringProxy(fake.base_url, ledgers[0], budget=budgets[0]) as p0, \
                MeteringProxy(fake.base_url, ledgers[1], budget=budgets[1]) as p1:
            def shard(url: str, i: int) -> None:
                for k in range(200):
                    try:
                        ask(url, f"s{i}.{k}", "a question of some length " * 20)
                    except CapReached as exc:
                        refused.append(str(exc))
                        return

            threads = [threading.Thread(target=shard, args=(p.base_url, i)) for i, p in enumerate((p0, p1))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for led in ledgers:
            led.close()
    assert len(refused) == 2 and all("stopped at budget" in r for r in refused)  # both shards stopped at the cap
    both = ledger_spend(root)
    assert 0.8 * cap < both <= cap  # alone, each would have spent the whole cap
    sent = [sum(e.get("event") == "response" for e in read_ledger(led.path)) for led in ledgers]
    assert all(n > 0 for n in sent)  # both shards spent part of it


def test_a_reply_sent_but_not_received_counts_at_its_worst_case_until_the_ledger_knows_better(tmp_path):
    led_path = tmp_path / "ledger.jsonl"
    budget = Budget(10.0, PRICES, PRICES, [led_path])
    with FakeModel(always="hang", hang_s=3.0) as fake:
        ledger = Ledger(led_path)
        with MeteringProxy(fake.base_url, ledger, budget=budget) as proxy:
            with pytest.raises(Exception):
                ask(proxy.base_url, "r1")
        ledger.close()
    lines = read_ledger(led_path)
    request = next(e for e in lines if e["event"] == "request")
    response = next(e for e in lines if e["event"] == "response")
    assert response["status"] == 504 and response["unanswered"] is True
    worst = (request["worst"]["prompt"] * PRICES["miss"] + request["worst"]["output"] * PRICES["output"]) / 1e6
    assert request["worst"]["output"] == 50 and worst > 0
    assert budget.spent == pytest.approx(worst)
    # a driver killed mid-call leaves a request line and no response: its worst case too
    with open(led_path, "a") as f:
        f.write(json.dumps({**request, "call": "killed"}) + "\n")
    assert budget.spent == pytest.approx(2 * worst)
    # the ledger knowing better: the answer arrives, at its real cost
    with open(led_path, "a") as f:
        f.write(json.dumps({"event": "response", "call": "killed", "status": 200, "role": "agent", "hit": 0,
                            "miss": 10, "output": 1}) + "\n")
    assert budget.spent == pytest.approx(worst + 11 * 100 / 1e6)


def test_one_tool_loop_run_is_stopped_at_the_cap_inside_the_run_and_stays_unrecorded(tmp_path):
    """A run that never stops calling tools: the cap, not the run's end, decides (it spent $3.09 on $0.05)."""
    def script(req):  # a search on every turn, forever
        tools = req.get("tools") or []
        if not tools or req.get("tool_choice") == "none":
            return {"role": "assistant", "content": "I don't know."}
        fn = tools[0]["function"]
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{len(req['messages'])}", "type": "function",
            "function": {"name": fn["name"], "arguments": json.dumps({"query": "more"})}}]}

    prices = [f"model.prices.{k}=100" for k in ("hit", "miss", "output")] + ["+model.params.max_tokens=50"]
    cap = 1.5
    with FakeModel(script=script) as fake:
        exc = stopped(run_agents, agents_cfg(tmp_path, fake, *prices, f"budget_usd={cap}", "concurrency=1",
                                             conds="tool_bm25"))
        assert exit_code(exc) == BUDGET, exc
        calls = len(fake.run_requests)
    rd = stage_of(tmp_path)
    assert ledger_spend(rd.root, {"hit": 100, "miss": 100, "output": 100}) <= cap
    assert calls >= 3  # the loop ran several turns before the cap stopped it
    assert all(r["status"] == "ok" for r in recs(rd).values())  # the run it stopped is not recorded failed


# ------------------------------------------------------------------ property: random servers, random shards

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BEHAVIOURS = ["ok", "429", "500", "reset", "hang", "empty", "lie_huge", "lie_within"]


def _usage_for(kind: str):
    """The usage a behaviour reports: the fake's own, a count no model can take, or one inflated within bounds."""
    if kind == "lie_huge":
        return lambda pt: {"prompt_tokens": 2_000_000, "completion_tokens": 7}
    if kind == "lie_within":
        return lambda pt: {"prompt_tokens": pt * 3, "completion_tokens": 50}  # within what the request can hold
    return None


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(shards=st.integers(1, 3), cap=st.floats(0.002, 0.03), max_tokens=st.integers(5, 80),
       script=st.lists(st.sampled_from(BEHAVIOURS), min_size=1, max_size=14))
def test_property_spend_never_passes_the_cap_by_more_than_the_calls_in_flight(tmp_path_factory, shards, cap,
                                                                                max_tokens, script):
    """Shards calling at once through their own proxies against a server doing anything in `script`
    (then answering): the spend over every ledger — answered calls at their (bounded) usage, calls billed but
    never received at their worst case — passes the cap by at most what one call per shard in flight bills
    beyond its worst case, and every shard ends at the cap (CapReached) or with its calls done."""
    root = tmp_path_factory.mktemp("prop") / "stage"
    todo = list(script)
    lock = threading.Lock()
    usage_now = {"f": None}

    def draw(req):  # the next behaviour, shared by every shard, in order
        with lock:
            kind = todo.pop(0) if todo else "ok"
        usage_now["f"] = _usage_for(kind)
        return kind

    mc = {**MC, "params": {"max_tokens": max_tokens}, "max_retries": 1, "backoff_s": 0.01}
    outcomes: list[str] = []
    with FakeModel(hang_s=1.5) as fake:
        fake._next_fault = lambda req: (lambda k: None if k in ("ok", "lie_huge", "lie_within") else k)(draw(req))
        fake.usage = lambda pt: (usage_now["f"] or (lambda p: {"prompt_tokens": p, "completion_tokens": 7}))(pt)
        ledgers = [Ledger(shard_dir(root, Shard(i, shards)) / "ledger.jsonl") for i in range(shards)]
        budgets = [Budget(cap, PRICES, PRICES, RunDir(root).ledger_paths) for _ in range(shards)]
        proxies = [MeteringProxy(fake.base_url, led, timeout_s=5, budget=b).start() for led, b in zip(ledgers, budgets)]

        def shard(url: str, i: int) -> None:
            for k in range(12):
                try:
                    Agent(url, mc, f"s{i}.{k}", 1, Meter(PRICES), max_retries=1, backoff_s=0.01).complete(
                        [{"role": "user", "content": f"question {k} of shard {i} " + "words " * 40}])
                except CapReached:
                    outcomes.append("cap")
                    return
                except Exception:  # noqa: BLE001 - the server's fault: this call's, the next one goes on
                    pass
            outcomes.append("done")

        threads = [threading.Thread(target=shard, args=(p.base_url, i)) for i, p in enumerate(proxies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p, led in zip(proxies, ledgers):
            p.stop()
            led.close()
    assert len(outcomes) == shards
    # the spend, summed here from the raw lines of every ledger (not through Budget)
    lines = [e for p in RunDir(root).ledger_paths() for e in read_ledger(p)]
    worst = {e["call"]: (e["worst"]["prompt"] * PRICES["miss"] + e["worst"]["output"] * PRICES["output"]) / 1e6
             for e in lines if e["event"] == "request"}
    spend, excess = 0.0, 0.0
    answered = set()
    for e in lines:
        if e["event"] != "response":
            continue
        answered.add(e["call"])
        if e.get("unanswered"):
            spend += worst[e["call"]]
        elif e["status"] == 200:
            cost = sum(e.get(k, 0) * PRICES[k] for k in ("hit", "miss", "output")) / 1e6
            spend += cost
            excess = max(excess, cost - worst[e["call"]])
            assert e.get("prompt", 0) < 100_000  # a count no model can take is never billed as reported
    assert set(worst) == answered  # every call sent has its answer in the ledger
    assert spend <= cap + shards * excess + 1e-9, (spend, cap, excess)


# ------------------------------------------------------------------ the rubric judge under the stage's cap

def test_the_rubric_judge_stops_at_the_stage_cap_with_exit_4_and_the_rest_unscored(tmp_path, capsys):
    """The personal study's judge spent a $0.06 cap 2.4 times over, exit 0: it opened its proxy with no Budget."""
    from harness.studies.personal import run as run_personal
    from judge.rubric import load_rubric
    from judge.run import main_entry
    from tests.personal_helpers import Script, stage_cfg

    methods = ["naive_concat", "kernel_shared"]
    with FakeModel(script=Script()) as fake:
        rd = run_personal(stage_cfg(tmp_path, fake.base_url, methods, n=3, extra=["index=exact"]))
    assert len(list(rd.records())) == 6

    def grade(req):
        return {"role": "assistant", "content": '{"profile_usage": 4, "task_usage": 3, "integration": 2}'}

    jp = {k: 20.0 for k in ("hit", "miss", "output")}  # a rubric call: ~400 tokens, $0.008; six of them $0.048
    cap = 0.025
    with FakeModel(script=grade) as judge_fake:
        cfg = stage_cfg(tmp_path, "http://127.0.0.1:9/v1", methods, n=3, extra=[
            "index=exact", "judge=vllm", f"judge.base_url={judge_fake.base_url}", "judge.name=rj", "concurrency=1",
            *[f"judge.prices.{k}={v}" for k, v in jp.items()], f"budget_usd={cap}"])
        capsys.readouterr()
        code = main_entry(cfg)
        err = capsys.readouterr().err
    assert code == BUDGET, err
    assert "stopped at budget" in err
    spent = sum((e["hit"] + e["miss"] + e["output"]) * 20.0 / 1e6 for p in rd.ledger_paths() for e in read_ledger(p)
                if e.get("event") == "response" and e.get("status") == 200 and e.get("role") == "judge")
    assert 0 < spent <= cap  # the judge's calls (the agents' model is free here) within the cap
    scored = load_rubric(rd, "rj")
    assert 0 < len(scored) < 6 and {v["status"] for v in scored.values()} == {"ok"}  # the rest unscored, none failed
