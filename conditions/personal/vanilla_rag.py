"""vanilla_rag (second seed paper): retrieval over the raw text of the user's messages, by the query.

The messages are cut into sentences, embedded with the stage's encoder, and the `k`
sentences closest to the query (cosine) go into the prompt as they are: no writers, no
structure, no kernel. The vague query sits closer to task sentences, so profile
sentences tend to be dropped (the paper's Section 4.4 reading).
"""

from __future__ import annotations

import re
import time

from dataclasses import dataclass, field

from harness.personal.method import Injected, Method, RunCtx


@dataclass
class Settings:
    """The message sources chunked into sentences and how many are retrieved (conf/condition/vanilla_rag.yaml)."""

    sources: list = field(default_factory=lambda: ["profile", "task", "conversation"])
    k: int = 3

HEADER = "Retrieved context:"


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


class VanillaRag(Method):
    def __init__(self, cfg: Settings, ctx: RunCtx):
        self.cfg, self.ctx = cfg, ctx

    def inject(self) -> Injected:
        t = self.ctx.trial
        chunks = [(src, s) for src in self.cfg.sources for s in sentences(t["messages"][str(src)])]
        t0 = time.perf_counter()
        enc = self.ctx.shared.encoder
        vecs = enc.embed([s for _, s in chunks], progress=False)
        q = enc.embed_query(t["query"])
        scores = vecs @ q
        order = sorted(range(len(chunks)), key=lambda i: (-float(scores[i]), i))[: int(self.cfg.k)]
        dt = time.perf_counter() - t0
        picked = [{"source": chunks[i][0], "text": chunks[i][1], "score": round(float(scores[i]), 6)} for i in order]
        block = HEADER + "\n" + "\n".join(f"- {p['text']}" for p in picked)
        return Injected(block, picked, retrieval_s=dt,
                        log={"chunks": len(chunks), "k": int(self.cfg.k),
                             "sources_injected": sorted({p["source"] for p in picked})})


build = VanillaRag
