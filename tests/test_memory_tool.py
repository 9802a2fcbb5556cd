"""The memory tool's date filters on a real memory space (exact index, hash encoder, generated data).

Small models fill `since`/`until` with the current date, which empties every search; with
guidance `assisted` an empty dated search must say which dates the memory holds, computed from
the view's own sessions, and searching that span must find what the dated search missed. With
guidance `paper` (Appendix B's tool) neither the schema nor the reply carries that help.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from conditions.memory_tool import MemorySearch, fmt_day
from harness.data import synth
from harness.data.longmemeval import load
from harness.run.context import Environment, RunContext
from harness.run.plan import RunSpec


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memtool")
    data = synth.write(tmp / "data", 0, "tiny")
    qid = sorted(q.qid for q in load(data).values() if not q.abstention)[0]
    cfg = {"index": {"name": "exact", "dim": 384}, "encoder": {"name": "hash"}, "cache_dir": str(tmp / ".cache")}
    spec = RunSpec("tool_hybrid", qid, "", 0)
    env = Environment(OmegaConf.create(cfg), SimpleNamespace(runs=[spec], data={"path": str(data)}))
    yield RunContext(spec, env)
    env.close()


def test_a_search_dated_on_the_current_day_says_which_dates_the_memory_holds(ctx):
    search = MemorySearch(ctx, ctx.view("own"), "hybrid", 8, guidance="assisted")
    q = ctx.question
    today = q.date.strftime("%Y-%m-%d")
    days = sorted(s.date.strftime("%Y-%m-%d") for s in q.sessions)
    assert days[-1] < today, "the generated history ends before the question"

    dated = search(query=q.question, since=today, until=today)
    assert dated.empty and not dated.sessions
    assert dated.text == (f"No matching memories from {today} to {today}, but your memory holds exchanges from "
                          f"{days[0]} to {days[-1]}. Search again without since and until.")

    # the two units whose dates it shows are logged as read (`shown`): a publish reads their owners
    shown = dated.log["shown"]
    assert dated.log["units"] == [] and len(shown) == 2
    units = {u.uid: u for u in ctx.space.units(ctx.view("own").without_dates())}
    assert [fmt_day(units[uid].time) for uid, _ in shown] == [days[0], days[-1]]
    assert all(owner == units[uid].owner for uid, owner in shown)

    first, last = re.search(r"holds exchanges from (\S+) to (\S+)\.", dated.text).groups()
    widened = search(query=q.question, since=first, until=last)
    assert not widened.empty and widened.sessions == search(query=q.question).sessions

    only_since = search(query=q.question, since=today)
    assert only_since.text.startswith(f"No matching memories from {today} to now, but your memory holds")


def test_an_empty_search_without_dates_stays_terse(ctx):
    search = MemorySearch(ctx, ctx.view("own", agent="nobody"), "hybrid", 8, guidance="assisted")
    assert search(query="anything").text == "No matching memories."
    assert search(query="anything", until="2030-01-01").text == \
        "No matching memories from the start to 2030-01-01; your memory is empty."


def test_paper_guidance_is_the_plain_tool_and_records_say_which(ctx):
    q = ctx.question
    today = q.date.strftime("%Y-%m-%d")
    paper = MemorySearch(ctx, ctx.view("own"), "hybrid", 8)  # the default
    assisted = MemorySearch(ctx, ctx.view("own"), "hybrid", 8, guidance="assisted")
    dated = paper(query=q.question, since=today, until=today)
    assert dated.empty and dated.text == "No matching memories."
    assert dated.log["guidance"] == "paper" and assisted(query=q.question).log["guidance"] == "assisted"
    p_since = paper.schema()["function"]["parameters"]["properties"]["since"]["description"]
    a_since = assisted.schema()["function"]["parameters"]["properties"]["since"]["description"]
    assert p_since == "Optional. Only exchanges on or after this date, YYYY-MM-DD."
    assert a_since.startswith(p_since) and "older than the current date" in a_since
    # the same search undated finds the same memories under either guidance
    assert paper(query=q.question).sessions == assisted(query=q.question).sessions


def test_an_unknown_guidance_is_refused(ctx):
    with pytest.raises(ValueError, match="paper, assisted"):
        MemorySearch(ctx, ctx.view("own"), "hybrid", 8, guidance="helpful")
