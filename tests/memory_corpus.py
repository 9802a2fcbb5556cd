"""Generated corpora for the memory tests: vectors are synthetic where the encoder is not under test."""

from __future__ import annotations

import numpy as np


def unit_vectors(n: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def clustered_corpus(n_agents: int, per_agent: int, *, org: str = "bench", public_share: float = 0.0,
                     noise: float = 1.5, dim: int = 384, seed: int = 0):
    """Units of many agents whose vectors cluster by agent (an agent's memory is about its own topics),
    like real embeddings; returns (units, vectors, agent centres)."""
    from harness.memory.units import Unit

    rng = np.random.default_rng(seed)
    centres = unit_vectors(n_agents, dim, seed + 1)
    n_public = int(round(public_share * n_agents))
    units, vecs = [], []
    for a in range(n_agents):
        agent = f"ag{a:03d}"
        vis = "public" if a < n_public else "private"
        for i in range(per_agent):
            v = centres[a] + noise * rng.standard_normal(dim).astype(np.float32) / np.sqrt(dim)
            vecs.append(v / np.linalg.norm(v))
            units.append(Unit(org, agent, vis, 1.6e9 + a * 1000 + i * 60, f"s{a:03d}{i // 5:03d}", i % 5 + 1, 0,
                              f"agent {agent} note {i}"))
    return units, np.asarray(vecs, dtype=np.float32), centres
