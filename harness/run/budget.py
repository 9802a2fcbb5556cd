"""The spending cap of a stage (`budget_usd=`): agents and judge together, at list price.

The spend is read from the metering ledger — every shard's, everything already spent by
earlier sessions and interrupted attempts included — and kept current as the proxy appends
each response. Once it reaches the cap no new run or judgement starts; those in flight finish.
The cap is not part of a stage's identity, so the same command with a higher cap resumes.
"""

from __future__ import annotations

import threading
from pathlib import Path

from harness.endpoints.pricing import list_cost
from harness.records.ledger import read_ledger


class BudgetReached(RuntimeError):
    exit_code = 4  # harness.failures.BUDGET


def _usd(prices: dict | None, e: dict) -> float:
    if not prices or e.get("event") != "response" or e.get("status") != 200:
        return 0.0
    return list_cost(prices, int(e.get("hit") or 0), int(e.get("miss") or 0), int(e.get("output") or 0)) \
        * float(prices.get("usd_per_currency", 1.0) or 1.0)


class Budget:
    def __init__(self, cap_usd: float | None, model_prices: dict | None, judge_prices: dict | None,
                 ledgers: list[Path]):
        if cap_usd is not None and float(cap_usd) < 0:
            raise ValueError(f"budget_usd must be >= 0, got {cap_usd}")
        self.cap = None if cap_usd is None else float(cap_usd)
        self.model_prices, self.judge_prices = model_prices, judge_prices
        self._lock = threading.Lock()
        lines = [e for p in ledgers for e in read_ledger(p)]
        self.spent = sum(self.cost(e) for e in lines)
        # calls whose usage was estimated (harness.endpoints.usage): the cap counts them, estimated
        self.estimated = sum(bool(e.get("usage_estimated")) for e in lines if e.get("event") == "response")
        self.estimated_usd = sum(self.cost(e) for e in lines if e.get("usage_estimated"))

    def cost(self, e: dict) -> float:
        judge = e.get("role") in ("judge",) or str(e.get("tag") or "").startswith("judge")
        return _usd(self.judge_prices if judge else self.model_prices, e)

    def add(self, e: dict) -> None:
        """Ledger listener: count one appended line."""
        c = self.cost(e)
        with self._lock:
            self.spent += c
            if e.get("event") == "response" and e.get("usage_estimated"):
                self.estimated += 1
                self.estimated_usd += c

    def estimated_line(self) -> str | None:
        """Said at the start of a capped stage when the server's usage is not (all) reported."""
        if self.cap is None or not self.estimated:
            return None
        return (f"  budget: the endpoint's usage is missing or invalid in {self.estimated} call(s) so far: the cap counts "
                f"them at estimated tokens (${self.estimated_usd:.4f} of ${self.spent:.4f}; the model's tokenizer "
                "when model.tokenizer names one, else 4 characters a token), so it is kept only approximately")

    @property
    def exhausted(self) -> bool:
        return self.cap is not None and self.spent >= self.cap

    def stopped(self, recorded: int, planned: int) -> str:
        return f"stopped at budget: ${self.spent:.4f} of ${self.cap:.4f}, {recorded} of {planned} runs recorded"
