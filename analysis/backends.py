"""The backend study's folder (stage kind `backends`): its tables, Figures 2 and 7, and the paper beside us.

Reads only the stage folder the study wrote (stage.json, recall.csv, survivors.csv, fanout.csv,
footprint.csv, delta.csv, diagnostics.json). Figures are drawn only when the corpus diagnostics are in the
realistic range calibrated with the folder's own encoder (nearest-neighbour cosine, distinct queries,
unfiltered HNSW recall; the thresholds and the encoder id they were calibrated with are in
diagnostics.json); otherwise the report says why there is no figure. The paper's Section 5.4
values sit in one table beside ours, marked as the paper's, with our encoder and engines.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.figures import _fresh, _legend, _log_ticks, _save, _style  # noqa: E402

# Section 5.4 of the first paper (122,942 chunks of 180 S histories, bge-small-en-v1.5, Redis 8 /
# RediSearch / vector sets, PostgreSQL + pgvector): (what, paper value, our file, selector, column)
PAPER = [
    ("pgvector default, one agent: recall@10", 0.291, "recall.csv", {"config": "pgvector_off", "case": "one"}, "recall_at_10"),
    ("pgvector default, one agent: short lists (of 180)", 163, "recall.csv", {"config": "pgvector_off", "case": "one"}, "short_lists"),
    ("pgvector default, 10% view: recall@10", 0.634, "recall.csv", {"config": "pgvector_off", "case": "public10"}, "recall_at_10"),
    ("pgvector default, 10% view: short lists", 125, "recall.csv", {"config": "pgvector_off", "case": "public10"}, "short_lists"),
    ("pgvector relaxed order, one agent: recall@10", 0.992, "recall.csv", {"config": "pgvector_relaxed", "case": "one"}, "recall_at_10"),
    ("pgvector relaxed order, one agent: p50 ms", 6.52, "recall.csv", {"config": "pgvector_relaxed", "case": "one"}, "p50_ms"),
    ("pgvector strict order, one agent: recall@10", 0.961, "recall.csv", {"config": "pgvector_strict", "case": "one"}, "recall_at_10"),
    ("pgvector + owner b-tree, one agent: recall@10", 0.999, "recall.csv", {"config": "pgvector_off_btree", "case": "one"}, "recall_at_10"),
    ("pgvector default, all: recall@10", 0.963, "recall.csv", {"config": "pgvector_off", "case": "all"}, "recall_at_10"),
    ("Redis EF 10, one agent: recall@10", 0.999, "recall.csv", {"config": "redis_ef10", "case": "one"}, "recall_at_10"),
    ("Redis EF 10, no filter: recall@10", 0.808, "recall.csv", {"config": "redis_ef10", "case": "unfiltered"}, "recall_at_10"),
    ("Redis EF 100, broad view: recall@10", 0.986, "recall.csv", {"config": "redis_ef100", "case": "all"}, "recall_at_10"),
    ("Redis EF 100, broad view: p50 ms", 1.20, "recall.csv", {"config": "redis_ef100", "case": "all"}, "p50_ms"),
    ("fan-out over runtime stores, 1 store: p50 ms", 26.6, "fanout.csv", {"agents": "1"}, "runtime_stores_p50_ms"),
    ("fan-out over runtime stores, all stores: p50 ms", 215.2, "fanout.csv", {"agents": "max"}, "runtime_stores_p50_ms"),
    ("Redis TAG list, 1 agent: p50 ms", 1.91, "fanout.csv", {"agents": "1"}, "redis_tag_list_p50_ms"),
    ("Redis TAG list, all agents: p50 ms", 21.67, "fanout.csv", {"agents": "max"}, "redis_tag_list_p50_ms"),
    ("FTS5 owner column, 1 agent: p50 ms", 27.47, "fanout.csv", {"agents": "1"}, "fts5_owner_in_p50_ms"),
    ("FTS5 owner column, all agents: p50 ms", 55.08, "fanout.csv", {"agents": "max"}, "fts5_owner_in_p50_ms"),
    ("write-path delta p50 ms (Redis)", 56.9, "delta.csv", {"backend": "redis_qe"}, "delta_p50_ms"),
    ("Redis HNSW vector index MiB", 222, "footprint.csv", {"backend": "redis_qe"}, "vector_index_bytes"),
    ("pgvector HNSW index MiB (disk)", 216.8, "footprint.csv", {"backend": "pgvector"}, "hnsw_index_bytes"),
    ("vector sets Q8 MiB", 130, "footprint.csv", {"backend": 'vectorset:{"quant": "Q8"}'}, "memory_bytes"),
    ("vector sets fp32 MiB", 265, "footprint.csv", {"backend": 'vectorset:{"quant": "NOQUANT"}'}, "memory_bytes"),
]
PAPER_SETUP = "paper: 122,942 chunks, 180 agents, bge-small-en-v1.5, Redis 8 + RediSearch, PostgreSQL + pgvector"


def is_backends(folder) -> bool:
    return folder.info.get("kind") == "backends"


def read(folder) -> dict:
    out = {}
    for name in ("recall.csv", "survivors.csv", "fanout.csv", "footprint.csv", "delta.csv", "lexical.csv"):
        p = Path(folder.path) / name
        out[name] = pd.read_csv(p, dtype=str, keep_default_na=False) if p.exists() else pd.DataFrame()
    p = Path(folder.path) / "diagnostics.json"
    out["diagnostics"] = json.loads(p.read_text()) if p.exists() else None
    return out


def _ours(files: dict, source: str, sel: dict, col: str):
    df = files.get(source)
    if df is None or df.empty or col not in df.columns:
        return None
    m = pd.Series(True, index=df.index)
    for k, v in sel.items():
        if k not in df.columns:
            return None
        if v == "max":
            v = str(df[k].astype(int).max())
        m &= df[k] == v
    vals = df.loc[m, col]
    if vals.empty or vals.iloc[0] == "":
        return None
    x = float(vals.iloc[0])
    return x / 2**20 if col.endswith("_bytes") else x


def paper_table(folders) -> pd.DataFrame:
    rows = []
    for f in folders:
        files = read(f)
        v = f.info.get("versions") or {}
        ours = (f"{f.info['data'].get('chunks')} chunks, {f.info['data'].get('histories')} agents, encoder "
                f"{v.get('encoder')}; Redis {v.get('redis_server')} + RediSearch {v.get('redisearch')}, "
                f"PostgreSQL {v.get('postgresql')} + pgvector {v.get('pgvector')}, SQLite {v.get('sqlite')}")
        for what, paper, source, sel, col in PAPER:
            rows.append({"folder": f.name, "quantity": what, "paper (Section 5.4)": paper,
                         "ours": _ours(files, source, sel, col), "source": source, "paper_setup": PAPER_SETUP,
                         "our_setup": ours})
    return pd.DataFrame(rows, columns=["folder", "quantity", "paper (Section 5.4)", "ours", "source", "paper_setup",
                                       "our_setup"])


def recall_table(folders) -> pd.DataFrame:
    frames = []
    for f in folders:
        df = read(f)["recall.csv"]
        if not df.empty:
            frames.append(df.assign(folder=f.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


SURVIVOR_COLUMNS = ["folder", "config", "case", "selectivity", "k_prime", "survivors", "local_pred", "global_pred",
                    "survivors_minus_local", "survivors_over_local", "local_over_global", "filter", "engine"]


def survivors_table(folders) -> pd.DataFrame:
    """Proposition 2 per configuration and case: the filter's survivors before truncation (post-filters
    only; other engines show how they filter, e.g. "pre-filter", instead of a number they do not have)
    beside the local prediction (admitted among the exact K' nearest) and the global one (K's)."""
    frames = []
    for f in folders:
        df = read(f)["survivors.csv"]
        if df.empty:
            continue
        df = df.assign(folder=f.name)
        mode = df["filter"].str.replace(r" x\d+", "", regex=True)
        df["survivors"] = df["survivors"].where(df["survivors"] != "", mode)
        frames.append(df[[c for c in SURVIVOR_COLUMNS if c in df.columns]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SURVIVOR_COLUMNS)


def realistic(folder) -> tuple[bool, str]:
    """Whether the folder's corpus diagnostics are in the realistic range of the folder's encoder.

    The checks are recomputed from the recorded measures and thresholds; thresholds calibrated with
    another encoder than the one that embedded the corpus never count. A folder from before the
    per-encoder ranges (no `thresholds_encoder`) was checked against MiniLM's range, which holds only
    for a MiniLM folder."""
    from bench.backends.diagnostics import realism_checks, unchecked

    d = read(folder)["diagnostics"]
    if d is None:
        return False, "no diagnostics.json: the corpus was never checked"
    enc = (d.get("encoder") or {}).get("encoder_id")
    calibrated = d.get("thresholds_encoder")
    if calibrated is None:
        if not str(enc).startswith("minilm:"):
            return False, (f"corpus checked against MiniLM's realistic range, not one calibrated with this folder's "
                           f"encoder {enc}: rerun the stage (its range is per encoder)")
        calibrated = enc
    if calibrated != enc:
        return False, f"realistic range calibrated with encoder {calibrated}, not this folder's encoder {enc}"
    checks = realism_checks(d, d.get("thresholds") or {})
    if not checks:
        return False, "no realistic range recorded: the corpus was never checked"
    if all(v is True for v in checks.values()):
        skipped = unchecked(d, d.get("thresholds") or {})
        return True, (f"corpus diagnostics in the realistic range of encoder {enc}"
                      + (f"; not checked: {', '.join(skipped)}" if skipped else ""))
    return False, f"corpus diagnostics outside the realistic range of encoder {enc}: {checks}"


def figure2(folder, path: Path) -> Path | None:
    """Recall@10 (mean over builds, range as error bar) and p50 latency by view selectivity, per configuration."""
    df = read(folder)["recall.csv"]
    if df.empty:
        return None
    for c in ("selectivity", "recall_at_10", "recall_min", "recall_max", "p50_ms"):
        df[c] = df[c].astype(float)
    _fresh()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12.0, 4.6))
    for i, (cfg, d) in enumerate(df.groupby("config", sort=False)):
        d = d.sort_values("selectivity", kind="mergesort")
        st = _style(i)
        err = np.array([(d["recall_at_10"] - d["recall_min"]).clip(lower=0), (d["recall_max"] - d["recall_at_10"]).clip(lower=0)])
        a1.errorbar(d["selectivity"], d["recall_at_10"], yerr=err, capsize=2, markersize=4, linewidth=0.8,
                    label=cfg, **st)
        a2.plot(d["selectivity"], d["p50_ms"], markersize=4, linewidth=0.8, label=cfg, **st)
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xlabel("view selectivity s (share of the corpus the view admits)")
        ax.grid(True, alpha=0.3)
    a1.set_ylabel("recall@10 against exact (mean over builds, bar: min-max)")
    a1.set_ylim(-0.03, 1.03)
    a2.set_yscale("log")
    _log_ticks(a2.yaxis, df["p50_ms"].tolist())
    a2.set_ylabel("p50 latency of the index call (ms, client)")
    _legend(a2, ncol=1)
    info = folder.info
    fig.suptitle(f"Figure 2: {folder.name}, {info['data'].get('chunks')} chunks, {info['data'].get('histories')} agents, "
                 f"{info['plan'].get('builds')} builds; encoder {(info.get('versions') or {}).get('encoder')}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


FAN_SERIES = [("runtime_stores_p50_ms", "lexical: per-agent runtime stores, one by one"),
              ("fts5_owner_in_p50_ms", "lexical: one FTS5 index, owner IN (...)"),
              ("redis_per_agent_p50_ms", "dense: per-agent HNSW indexes, one by one"),
              ("redis_tag_list_p50_ms", "dense: one Redis index, TAG list")]


def figure7(folder, path: Path) -> Path | None:
    """Fan-out latency over 1/10%/50%/all stores against one shared index, lexical and dense."""
    df = read(folder)["fanout.csv"]
    if df.empty:
        return None
    x = df["agents"].astype(int)
    _fresh()
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    drawn = []
    for i, (col, label) in enumerate(FAN_SERIES):
        if col not in df.columns or (df[col] == "").all():
            continue
        y = pd.to_numeric(df[col], errors="coerce")
        ax.plot(x, y, label=label, markersize=5, linestyle="--" if "per" in col or "runtime" in col else "-", **_style(i))
        drawn += list(y.dropna())
    ax.set_xscale("log")
    ax.set_yscale("log")
    _log_ticks(ax.xaxis, list(x))
    _log_ticks(ax.yaxis, drawn)
    ax.set_xlabel("agents whose memory the query covers")
    ax.set_ylabel("p50 latency per query (ms)")
    ax.grid(True, alpha=0.3)
    _legend(ax)
    fig.suptitle(f"Figure 7: fan-out vs one shared index, {folder.name}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
