"""What a stage will cost before it runs: calls, tokens and cost per condition (dry_run=true).

Two sources, and the forecast says which one each condition used:

* a pilot stage of the same model (runs/pilot/*/records): the mean calls and tokens per run
  of each condition, times the planned runs;
* otherwise the data: the prompt a run starts from (system prompt, question, tool schemas;
  for `full` the whole history of each planned question, oldest first) and the shape of the
  conversation per way of reaching memory (model calls per run, characters each tool result
  adds), with every later call's prompt prefix counted as a cache hit. A condition whose
  `forecast(settings, question)` takes the question sizes its results from that question's own
  history (the memory tool: k of its rounds as the tool shows them; prefetch: the k results in
  the prompt), so a stage on longer histories forecasts more; the rest are typical shapes (the
  paper's Section 5.1 means). A condition's yaml may give its own under `forecast:`.

Tokens are estimated as characters / 4. Off-peak cost applies the model's off-peak factor to
every call, the price paid when a stage runs inside the provider's window.
"""

from __future__ import annotations

import inspect
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from harness.endpoints.pricing import list_cost
from harness.run.settings import EndpointSettings, endpoint_node

CHARS_PER_TOKEN = 4
OUTPUT_TOKENS = 60  # per call: a short answer or one tool call

# a condition module's typical run (its FORECAST, or forecast(cfg)); a module that declares none gets this
DEFAULT_SHAPE = {"calls": 3, "result_chars": 6_000, "schema_chars": 1_200}


def reads_question(fn) -> bool:
    """Does a condition's forecast() take the question (forecast(settings, question)) besides its settings?"""
    try:
        inspect.signature(fn).bind(None, None)  # a second positional parameter, not a keyword-only option
        return True
    except (TypeError, ValueError):
        return False


def shape(cond_cfg, question=None, node=None) -> dict:
    """calls per run, characters each tool result adds, characters of tool schemas, and what the first
    prompt holds besides the question (`prefix: history` or `prefix_chars`), from the condition itself
    (its forecast() receives the condition's typed settings `node`, built here when not given, and the
    question when it reads one); the condition's config may override any of them under `forecast:`."""
    import conditions
    from harness.run.settings import condition_node

    mod = conditions.load(str(cond_cfg.module))
    fn = getattr(mod, "forecast", None)
    node = condition_node(cond_cfg) if node is None else node
    if callable(fn):
        own = fn(node, question) if question is not None and reads_question(fn) else fn(node)
    else:
        own = getattr(mod, "FORECAST", DEFAULT_SHAPE)
    return {**DEFAULT_SHAPE, **own, **dict(cond_cfg.get("forecast") or {})}


@dataclass
class Row:
    condition: str
    runs: int
    calls: float
    hit: float
    miss: float
    output: float
    source: str

    def cost(self, prices: dict, factor: float = 1.0) -> float:
        usd = float(prices.get("usd_per_currency", 1.0) or 1.0)
        return list_cost(prices, self.hit, self.miss, self.output) * usd * factor


def pilot_records(runs_dir: Path, model: str) -> tuple[Path | None, list]:
    """The newest pilot folder with records of this model, and those records."""
    from harness.records import RunDir

    folders = sorted((p for p in (runs_dir / "pilot").glob("*") if (p / "stage.json").exists()),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for folder in folders:
        recs = [r for r in RunDir(folder).records() if r.model.get("model") == model]
        if recs:
            return folder, recs
    return None, []


def _pilot_means(runs_dir: Path, model: str) -> tuple[dict[str, dict], str | None]:
    """condition -> mean calls / hit / miss / output per run, from the newest pilot of this model."""
    folder, recs = pilot_records(runs_dir, model)
    if recs:
        by: dict[str, list] = {}
        for r in recs:
            by.setdefault(r.condition, []).append(r)
        means = {c: {"calls": sum(r.model_calls for r in rs) / len(rs),
                     "hit": sum(r.tokens.hit for r in rs) / len(rs), "miss": sum(r.tokens.miss for r in rs) / len(rs),
                     "output": sum(r.tokens.output for r in rs) / len(rs), "n": len(rs)} for c, rs in by.items()}
        return means, str(folder)
    return {}, None


def _conversation(prefix_chars: float, calls: int, result_chars: float) -> tuple[float, float, float]:
    """(hit, miss, output) tokens of a loop whose prompt grows by one result and one output per call."""
    hit = miss = 0.0
    prompt = prefix_chars / CHARS_PER_TOKEN
    prev = 0.0
    for i in range(calls):
        hit += prev
        miss += prompt - prev
        prev = prompt
        prompt += OUTPUT_TOKENS + (result_chars / CHARS_PER_TOKEN if i < calls - 1 else 0)
    return hit, miss, calls * OUTPUT_TOKENS


def _from_data(cond: str, cond_cfg, qids: list[str], questions, system_chars: int) -> Row:
    import conditions
    from harness.run.settings import condition_node

    per_question = reads_question(getattr(conditions.load(str(cond_cfg.module)), "forecast", None))
    node = condition_node(cond_cfg)  # typed once: it is the same for every question (2,000 of them in main)
    hit = miss = out = calls_all = 0.0
    histories = False  # `prefix: history` (full) is sized from each question's history too
    for qid in qids:
        q = questions[qid]
        sh = shape(cond_cfg, q, node)
        calls, result, schema = int(sh["calls"]), sh["result_chars"], sh["schema_chars"]
        calls_all += calls
        prefix = system_chars + len(q.question) + schema + int(sh.get("prefix_chars") or 0)
        if sh.get("prefix") == "history":
            histories = True
            prefix += sum(len(t.content) + 40 for s in q.sessions for t in s.turns)
        h, m, o = _conversation(prefix, calls, result)
        hit, miss, out = hit + h, miss + m, out + o
    how = "its questions' histories" if per_question or histories else "typical conversation shape"
    return Row(cond, len(qids), calls_all, hit, miss, out, f"data ({how})")


def forecast(cfg, plan) -> tuple[list[Row], str]:
    """Rows per condition and a line saying where the numbers come from."""
    from harness.data.longmemeval import load
    from harness.run.prompts import system_prompt

    per_cond: dict[str, list[str]] = {}
    for r in plan.runs:
        per_cond.setdefault(r.condition, []).append(r.qid)
    pilot, where = _pilot_means(Path(str(cfg.runs_dir)), str(cfg.model.model)) if plan.stage != "pilot" else ({}, None)
    need_data = [c for c in per_cond if c not in pilot]
    questions = load(plan.source or plan.data["path"], only={q for c in need_data for q in per_cond[c]}) if need_data else {}
    system_chars = len(system_prompt("2023/05/30 (Tue) 23:40", "", org=any(r.variant for r in plan.runs))) + 200
    rows = []
    for cond, qids in sorted(per_cond.items()):
        if cond in pilot:
            m, n = pilot[cond], len(qids)
            rows.append(Row(cond, n, m["calls"] * n, m["hit"] * n, m["miss"] * n, m["output"] * n,
                            f"pilot ({m['n']} runs)"))
        else:
            rows.append(_from_data(cond, cfg.stage.conditions[cond], qids, questions, system_chars))
    sources = Counter(r.source.split(" (")[0] for r in rows)
    said = (f"pilot stage {where}" if where else "") + (" and " if where and sources["data"] else "") + \
        ("the data's prompt sizes, with each question's history for the conditions that read it and typical "
         "conversation shapes for the rest (harness/run/forecast.py)" if sources["data"] else "")
    return rows, said


def render(cfg, plan) -> tuple[str, list[Row]]:
    """The forecast table, and its rows (the power lines of the analysis price each comparison with them)."""
    rows, said = forecast(cfg, plan)
    return render_rows(endpoint_node(cfg.model), rows, said, "judging adds about one short call per run (two for Org private runs) at the "
                                        "judge's prices"), rows


def render_rows(model: EndpointSettings, rows: list[Row], said: str, judging: str) -> str:
    """The forecast table of any study: a row per condition, the total, and what judging adds, at the prices of
    the model's typed node (harness.run.settings.endpoint_node)."""
    prices = dict(model.prices)
    off = model.offpeak
    factor = float(off["factor"]) if off else 1.0
    cur = "USD"
    lines = [f"cost forecast for model {model.model} (list prices per 1M tokens: hit {prices['hit']}, "
             f"miss {prices['miss']}, output {prices['output']}); from {said}",
             f"{'condition':<24}{'runs':>6}{'calls':>9}{'prompt tok':>13}{'output tok':>12}{'list ' + cur:>12}"
             f"{'off-peak ' + cur:>14}  source"]
    tot = Row("total", 0, 0, 0, 0, 0, "")
    for r in rows:
        lines.append(f"{r.condition:<24}{r.runs:>6}{r.calls:>9,.0f}{r.hit + r.miss:>13,.0f}{r.output:>12,.0f}"
                     f"{r.cost(prices):>12.4f}{r.cost(prices, factor):>14.4f}  {r.source}")
        tot = Row("total", tot.runs + r.runs, tot.calls + r.calls, tot.hit + r.hit, tot.miss + r.miss,
                  tot.output + r.output, "")
    lines.append(f"{'total':<24}{tot.runs:>6}{tot.calls:>9,.0f}{tot.hit + tot.miss:>13,.0f}{tot.output:>12,.0f}"
                 f"{tot.cost(prices):>12.4f}{tot.cost(prices, factor):>14.4f}")
    lines.append(judging)
    return "\n".join(lines)


