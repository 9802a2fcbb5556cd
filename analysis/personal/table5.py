"""Table 5 (Appendix A.4): output length in words per model x method, kernel_shared vs naive_concat on words
(Welch's t), and within each method the correlation of words with latency (Pearson r).

Latency is the paper's: the assistant's answer call (`answer_s`). Successful runs only (a
failed run has no reply). mem0_default stays in the CSV; the paper leaves it out of its
table (short, generic replies: no meaningful comparison), and so does the report's.
"""

from __future__ import annotations

import pandas as pd
from scipy import stats

from analysis.markdown import md_table, pval
from analysis.personal import Table, register

from .common import KERNEL, mean_sd, method_order

CONCAT = "naive_concat"
COLUMNS = ("model", "condition", "n", "words_mean", "words_sd", "latency_mean", "r_words_latency", "r_p",
           "words_diff_vs_concat", "welch_t", "welch_p")


def build(st) -> pd.DataFrame:
    ok = st.study[st.study.status == "ok"]
    rows = []
    for model, g in ok.groupby("model", sort=True):
        for cond in method_order(g.condition):
            c = g[g.condition == cond]
            row = {"model": model, "condition": cond, "n": len(c), "words_mean": c.words.mean(),
                   "words_sd": c.words.std(ddof=1), "latency_mean": c.answer_s.mean()}
            if len(c) >= 3 and c.words.nunique() > 1 and c.answer_s.nunique() > 1:
                r = stats.pearsonr(c.words, c.answer_s)
                row["r_words_latency"], row["r_p"] = float(r.statistic), float(r.pvalue)
            if cond == KERNEL:
                a, b = c.words.astype(float), g.loc[g.condition == CONCAT, "words"].astype(float)
                if len(a) >= 2 and len(b) >= 2:
                    w = stats.ttest_ind(a, b, equal_var=False)
                    row.update(words_diff_vs_concat=a.mean() - b.mean(), welch_t=float(w.statistic),
                               welch_p=float(w.pvalue))
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def section(st) -> str:
    t = st.table("table5")
    ok = st.study[st.study.status == "ok"]
    shown = t[t.condition != "mem0_default"]
    body = []
    for r in shown.itertuples():
        words = mean_sd(ok.loc[(ok.model == r.model) & (ok.condition == r.condition), "words"])
        test = "" if pd.isna(r.welch_p) else f"{r.words_diff_vs_concat:+.0f} (t {r.welch_t:.2f}, p {pval(r.welch_p)})"
        body.append([r.model, r.condition, r.n, words, "–" if pd.isna(r.r_words_latency) else
                     f"{r.r_words_latency:.2f} (p {pval(r.r_p)})", test])
    return ("## Table 5: output length (words) by method and model\n\n[`table5_words.csv`](table5_words.csv); "
            f"r(words, latency) within each method, latency = the assistant's answer call; {KERNEL} - naive_concat "
            "words with Welch's t. mem0_default is left out of the table, as in the paper (in the CSV).\n\n"
            + (md_table(["model", "method", "n", "words (mean ± SD)", "r(words, latency)",
                         f"{KERNEL} - naive_concat words"], body) if body else "(no successful runs)") + "\n")


register(Table("table5", "table5_words.csv", build, section, order=50, columns=COLUMNS))
