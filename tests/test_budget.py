"""The spending cap (`budget_usd=`): agents and judge together, from the metering ledger."""

import json

from harness.records.ledger import read_ledger
from harness.run.budget import Budget
from tests import cli
from tests.fake_model import FakeModel
from tests.test_driver import cmd, records, stage_dir

PRICES = ["model.prices.hit=1000", "model.prices.miss=1000", "model.prices.output=1000",  # USD per 1M tokens
          "+model.params.max_tokens=64"]  # a call's worst case is its prompt and max_tokens (harness.run.budget)


def spent(tmp) -> float:
    """The ledger's spend at list price, computed here from the raw lines (not through Budget)."""
    total = 0.0
    for e in read_ledger(stage_dir(tmp) / "ledger.jsonl"):
        if e.get("event") == "response" and e.get("status") == 200:
            total += (e["hit"] + e["miss"] + e["output"]) * 1000 / 1e6
    return total


def test_budget_stops_new_runs_and_a_higher_cap_resumes(tmp_path):
    with FakeModel(delay_s=0.05) as fake:
        res = cli.run(cmd(fake, tmp_path, *PRICES, "budget_usd=2", "concurrency=2"),
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 4, res.stderr
        first = records(tmp_path)
        assert 0 < len(first) < 36
        assert f"stopped at budget: ${spent(tmp_path):.4f} of $2.0000, {len(first)} of 36 runs recorded" in res.stderr
        assert spent(tmp_path) <= 2  # the proxy sends no call whose worst case could pass the cap
        # the same cap again: the spend in the ledger counts, nothing is sent
        n = len(fake.run_requests)
        again = cli.run(cmd(fake, tmp_path, *PRICES, "budget_usd=2", "concurrency=2"),
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 4 and len(fake.run_requests) == n and records(tmp_path) == first
        # a higher cap resumes and finishes every run once
        more = cli.run(cmd(fake, tmp_path, *PRICES, "budget_usd=1000", "concurrency=2"),
                              capture_output=True, text=True, timeout=300)
        assert more.returncode == 0, more.stderr
    recs = records(tmp_path)
    assert len(recs) == 36 and all(r["status"] == "ok" for r in recs.values())
    assert {k: recs[k]["finished"] for k in first} == {k: v["finished"] for k, v in first.items()}


def test_budget_reads_every_ledger_line_at_its_partys_prices(tmp_path):
    led = tmp_path / "ledger.jsonl"
    lines = [{"event": "response", "status": 200, "tag": "none.lme.q.r0", "role": "agent", "hit": 100, "miss": 0,
              "output": 0},
             {"event": "response", "status": 200, "tag": "judge:none.lme.q.r0", "role": "judge", "hit": 0,
              "miss": 0, "output": 10},
             {"event": "response", "status": 429, "tag": "x", "role": "agent", "hit": 999, "miss": 999, "output": 9},
             {"event": "request", "tag": "x", "role": "agent"}]
    led.write_text("".join(json.dumps(x) + "\n" for x in lines))
    model = {"hit": 2.0, "miss": 3.0, "output": 5.0, "usd_per_currency": 1.0}
    judge = {"hit": 0.0, "miss": 0.0, "output": 7.0, "usd_per_currency": 0.5}
    b = Budget(1.0, model, judge, [led])
    assert b.spent == (100 * 2.0) / 1e6 + (10 * 7.0 / 1e6) * 0.5
    assert not b.exhausted and not Budget(None, model, judge, [led]).exhausted
    with open(led, "a") as f:  # the ledger is read live: a line another shard appends counts at once
        f.write(json.dumps({"event": "response", "status": 200, "role": "agent", "tag": "t", "hit": 0, "miss": 0,
                            "output": 200_000}) + "\n")
    assert b.exhausted


def test_the_cap_covers_the_judge_and_judging_resumes_with_more(tmp_path):
    judge_prices = ["judge.prices.hit=1000", "judge.prices.miss=1000", "judge.prices.output=1000"]
    with FakeModel() as fake:
        run = cmd(fake, tmp_path, *PRICES)
        assert cli.run(run, capture_output=True, timeout=300).returncode == 0
        runs_spend = spent(tmp_path)
        judge = [run[0], "-m", "judge.run", *run[3:], "judge=vllm", f"judge.base_url={fake.base_url}",
                 "judge.backoff_s=0.01", *judge_prices, "concurrency=1"]
        n, n_all = len(fake.run_requests), len(fake.requests)
        res = cli.run([*judge, f"budget_usd={runs_spend + 1e-6}"], capture_output=True, text=True, timeout=300)
        assert res.returncode == 4, res.stderr
        assert "stopped at budget" in res.stderr
        first = len(fake.run_requests) - n
        # one call at a time: the judge's preflight call (or the first judgement) crosses the cap, none starts after
        assert first <= 1 and len(fake.requests) - n_all - first <= 1
        res = cli.run([*judge, "budget_usd=1000"], capture_output=True, text=True, timeout=300)
        assert res.returncode in (0, 3), res.stderr  # 3: the scripted model's replies are unparsable
    lines = read_ledger(stage_dir(tmp_path) / "judgements" / "vllm.jsonl")
    distinct = {j["prompt_sha256"] for j in lines}
    assert len(fake.run_requests) - n == len(distinct)  # every distinct prompt asked once over both sessions


def test_a_judges_cap_counts_a_shard_ledger_created_after_it_was_built(tmp_path):
    """The answer check, the probe and the rubric judge take their Budget from judge.common.stage_budget: it reads
    the folder's ledgers again at every call (the answer check and probe once froze the list at the start)."""
    from omegaconf import OmegaConf

    from harness.records import RunDir
    from harness.records.shards import Shard, shard_dir
    from judge.common import stage_budget

    p = {"hit": 1000.0, "miss": 1000.0, "output": 1000.0}
    cfg = OmegaConf.create({"budget_usd": 1.0, "model": {"prices": p}})
    root = tmp_path / "stage"
    root.mkdir()
    budget = stage_budget(cfg, RunDir(root), p)
    assert budget.spent == 0
    late = shard_dir(root, Shard(1, 2)) / "ledger.jsonl"  # a shard that starts after the judge's Budget was built
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text(json.dumps({"event": "response", "call": "c1", "status": 200, "role": "agent", "hit": 0,
                                "miss": 100, "output": 50}) + "\n")
    assert abs(budget.spent - 150 * 1000 / 1e6) < 1e-9
    assert stage_budget(OmegaConf.create({"model": {"prices": p}}), RunDir(root), p) is None  # no cap, no Budget
