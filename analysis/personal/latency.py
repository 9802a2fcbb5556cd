"""Section 4.5: end-to-end latency per model x method, and its reduction against the reference baseline, in percent.

Latency is the assistant's answer call (`answer_s`), as the paper measures it, alone: the
time it waited for an endpoint slot (`queue_s`) is beside it, never inside it; the
method's retrieval (`retrieval_s`) and the write barrier's wait are reported beside it,
never added, and so is `wall_s` (write acceptance to answer, which adds the writers'
extraction for the memory methods). Tokens per call and list-price cost come from every
model call of the run (writers, Mem0's own, the assistant). Successful runs only for the
times; every run for the counts and costs.
"""

from __future__ import annotations

import pandas as pd

from analysis.markdown import estimated, estimated_calls, estimated_note, md_table, money
from analysis.personal import Table, register


COLUMNS = ("model", "condition", "n", "failed", "answer_s_mean", "answer_s_sd", "answer_s_median",
           "reduction_vs_concat_pct", "queue_s_mean", "retrieval_s_mean", "barrier_wait_s_mean", "wall_s_mean",
           "assistant_prompt_tokens", "assistant_output_tokens", "tokens_per_call", "calls_per_run", "cost_list",
           "usage_estimated_calls", "calls_cut_length")


def build(st) -> pd.DataFrame:
    runs, who = st.study, st.roles
    rows = []
    for model, g in runs.groupby("model", sort=True):
        ok = g[g.status == "ok"]
        concat = ok.loc[ok.condition == who.reference, "answer_s"].mean()  # the column keeps its paper name
        for cond in who.order(g.condition):
            c, o = g[g.condition == cond], ok[ok.condition == cond]
            calls = c.calls.sum()
            lat = o.answer_s.mean()
            rows.append({"model": model, "condition": cond, "n": len(c), "failed": int((c.status != "ok").sum()),
                         "answer_s_mean": lat, "answer_s_sd": o.answer_s.std(ddof=1),
                         "answer_s_median": o.answer_s.median(),
                         "reduction_vs_concat_pct": 100 * (concat - lat) / concat if concat and concat > 0 else None,
                         "queue_s_mean": pd.to_numeric(o["queue_s"], errors="coerce").mean()
                         if "queue_s" in o else None,
                         "retrieval_s_mean": o.retrieval_s.mean(),
                         "barrier_wait_s_mean": pd.to_numeric(o.barrier_wait_s, errors="coerce").mean(),
                         "wall_s_mean": o.wall_s.mean(), "assistant_prompt_tokens": c.assistant_prompt.mean(),
                         "assistant_output_tokens": c.assistant_output.mean(),
                         "tokens_per_call": (c.tokens_prompt.sum() + c.tokens_output.sum()) / calls if calls else None,
                         "calls_per_run": c.calls.mean(), "cost_list": c.cost_list.sum(),
                         "usage_estimated_calls": int(c.usage_estimated_calls.sum())
                         if "usage_estimated_calls" in c else 0,
                         # replies that ended at their token limit (finish_reason length): answers cut short
                         "calls_cut_length": int(c.calls_cut_length.sum()) if "calls_cut_length" in c else 0})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _s(x, nd=1) -> str:
    return "–" if pd.isna(x) else f"{x:.{nd}f}"


def section(st) -> str:
    t, who = st.table("latency"), st.roles
    lines = []
    for model, g in t.groupby("model", sort=True):
        k, c = g[g.condition == who.under_test], g[g.condition == who.reference]
        if len(k) and len(c) and not pd.isna(k.answer_s_mean.iloc[0]) and not pd.isna(c.answer_s_mean.iloc[0]):
            lines.append(f"- {model}: {who.under_test} {k.answer_s_mean.iloc[0]:.1f} s vs {who.reference} "
                         f"{c.answer_s_mean.iloc[0]:.1f} s ({_s(k.reduction_vs_concat_pct.iloc[0], 0)}% lower)")
    body = [[r.model, r.condition, r.n, _s(r.answer_s_mean, 2), _s(r.reduction_vs_concat_pct, 0),
             _s(r.queue_s_mean, 2), _s(r.retrieval_s_mean, 3), _s(r.barrier_wait_s_mean, 3), _s(r.wall_s_mean, 2),
             estimated(_s(r.assistant_prompt_tokens, 0), r.usage_estimated_calls),
             estimated(_s(r.tokens_per_call, 0), r.usage_estimated_calls),
             estimated(money(r.cost_list), r.usage_estimated_calls), r.calls_cut_length] for r in t.itertuples()]
    return ("## Section 4.5: latency (the assistant's answer call) and tokens\n\n[`latency_tokens.csv`]"
            f"(latency_tokens.csv); reduction = ({who.reference} - method) / {who.reference}. The wait for an "
            "endpoint slot (queued), retrieval and the barrier's wait are beside the latency, not in it; wall = write "
            "acceptance to answer; cut at length: model calls whose reply ended at its token limit (finish_reason "
            "length).\n\n"
            + ("\n".join(lines) + "\n\n" if lines else "")
            + (md_table(["model", "method", "n", "latency s", "reduction %", "queued s", "retrieval s",
                         "barrier wait s",
                         "wall s", "assistant prompt tokens", "tokens / call", "cost (list)", "cut at length"], body)
               if body else "(no runs)") + "\n" + estimated_note(estimated_calls(t)))


register(Table("latency", "latency_tokens.csv", build, section, order=55, columns=COLUMNS))
