"""The spending cap of a stage (`budget_usd=`): agents and judge together, at list price.

The metering proxy is the one place money is decided (harness.endpoints.proxy calls `admit` before
it forwards a call). The spend is read live from every ledger of the stage folder — each shard's,
the judge's, earlier sessions' and interrupted attempts' — at each call, under a lock file every
shard of the folder shares, so two drivers never both pass the last dollar. A call counts:

* answered (a `response` line with status 200): its usage at its party's prices (agent or judge);
* billed but not received (no `response` line yet: in flight, or its driver was killed; or a
  response the proxy marked `unanswered`: a timeout or a reset after the request was sent): its
  worst case, the request's prompt estimate plus its `max_tokens` (the `worst` of its request line),
  until the ledger knows better;
* refused by the upstream (any other status): nothing.

A call whose worst case would take the spend past the cap is not forwarded: the proxy answers
`budget_reached`, the run (or judgement) that asked stays unrecorded and the stage stops with exit
4, over the cap by at most what the calls already in flight bill beyond their worst case. The cap is
not part of a stage's identity, so the same command with a higher cap resumes.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path
from typing import Callable, Iterable

from harness.endpoints.pricing import list_cost


class BudgetReached(RuntimeError):
    exit_code = 4  # harness.failures.BUDGET


def _usd(prices: dict | None, hit: int, miss: int, output: int) -> float:
    if not prices:
        return 0.0
    return list_cost(prices, hit, miss, output) * float(prices.get("usd_per_currency", 1.0) or 1.0)


def _int(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0


class Budget:
    """`ledgers`: the stage's ledger files, or a callable naming them (read again at every call, so a shard
    that starts later is counted: harness.records.RunDir.ledger_paths)."""

    def __init__(self, cap_usd: float | None, model_prices: dict | None, judge_prices: dict | None,
                 ledgers: Iterable[Path] | Callable[[], Iterable[Path]]):
        if cap_usd is not None and float(cap_usd) < 0:
            raise ValueError(f"budget_usd must be >= 0, got {cap_usd}")
        self.cap = None if cap_usd is None else float(cap_usd)
        self.model_prices, self.judge_prices = model_prices, judge_prices
        self._paths = ledgers if callable(ledgers) else (lambda fixed=[Path(p) for p in ledgers]: fixed)
        self._watched: set[Path] = set()  # ledgers the proxies append to (counted even outside `ledgers`)
        self._lock = threading.RLock()
        self._offset: dict[Path, int] = {}
        self._open: dict[str, float] = {}  # call id -> worst case, for requests not answered yet
        self._answered = 0.0  # answered calls, refused calls nothing, unanswered ones at their worst
        self.estimated = 0  # calls whose usage was estimated (harness.endpoints.usage): the cap counts them, estimated
        self.estimated_usd = 0.0
        self.refused = 0  # calls the cap kept from being sent (this process)
        self.refresh()

    # -------------------------------------------------------------------------------- reading the ledgers

    def paths(self) -> list[Path]:
        return sorted({Path(p) for p in self._paths()} | self._watched)

    def watch(self, path: Path) -> None:
        with self._lock:
            self._watched.add(Path(path))

    def prices(self, e: dict) -> dict | None:
        judge = e.get("role") in ("judge",) or str(e.get("tag") or "").startswith("judge")
        return self.judge_prices if judge else self.model_prices

    def worst(self, e: dict) -> float:
        """A request line's worst case: its prompt estimate and max_tokens, all at the miss and output prices."""
        w = e.get("worst") if isinstance(e.get("worst"), dict) else {}
        return _usd(self.prices(e), 0, _int(w.get("prompt")), _int(w.get("output")))

    def cost(self, e: dict) -> float:
        """What an answered call (a `response` line with status 200) cost at list price."""
        if e.get("event") != "response" or e.get("status") != 200:
            return 0.0
        return _usd(self.prices(e), _int(e.get("hit")), _int(e.get("miss")), _int(e.get("output")))

    def _take(self, e: dict) -> None:
        event, call = e.get("event"), e.get("call")
        if event == "request":
            if call and self.worst(e):
                self._open[call] = self.worst(e)
            return
        if event != "response":
            return
        worst = self._open.pop(call, 0.0) if call else 0.0
        if e.get("unanswered"):  # billed, maybe, but never received: its worst case
            self._answered += worst
            return
        c = self.cost(e)
        self._answered += c
        if e.get("usage_estimated"):
            self.estimated += 1
            self.estimated_usd += c

    def refresh(self) -> None:
        """Read what every ledger gained since the last look (whole lines only: a line being written is
        read next time)."""
        with self._lock:
            for p in self.paths():
                start = self._offset.get(p, 0)
                try:
                    with open(p, "rb") as f:
                        f.seek(start)
                        chunk = f.read()
                except FileNotFoundError:
                    continue
                end = chunk.rfind(b"\n") + 1
                self._offset[p] = start + end
                for line in chunk[:end].splitlines():
                    try:
                        e = json.loads(line)
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        continue  # a torn or corrupted line is the analysis's to report (harness.records.ledger)
                    if isinstance(e, dict):
                        self._take(e)

    @property
    def spent(self) -> float:
        """Answered calls at their cost, calls not answered yet (or never received) at their worst case."""
        with self._lock:
            self.refresh()
            return self._answered + sum(self._open.values())

    @property
    def exhausted(self) -> bool:
        return self.cap is not None and self.spent >= self.cap

    # -------------------------------------------------------------------------------- the gate

    def admit(self, ledger, line: dict) -> str | None:
        """The proxy's gate: append the call's `request` line to `ledger` and return None when the spend plus
        this call's worst case stays within the cap; else append nothing and return why it was refused."""
        if self.cap is None:
            ledger.append(line)
            return None
        self.watch(ledger.path)
        with self._lock, _StageLock(self._lockfile(ledger.path)):
            now, worst = self.spent, self.worst(line)
            if now + worst > self.cap + 1e-12:
                self.refused += 1
                return (f"stopped at budget: ${now:.4f} of ${self.cap:.4f} spent or in flight, and this call could "
                        f"cost ${worst:.4f} more (its prompt and max_tokens at list price)")
            ledger.append(line)
            return None

    def _lockfile(self, ledger_path: Path) -> Path:
        """One lock for the stage folder: the top ledger's folder (a shard's ledger is <root>/shards/IofN/)."""
        folder = Path(ledger_path).parent
        if folder.parent.name == "shards":
            folder = folder.parent.parent
        return folder / "budget.lock"

    def estimated_line(self) -> str | None:
        """Said at the start of a capped stage when the server's usage is not (all) reported."""
        spent = self.spent  # read the ledgers first
        if self.cap is None or not self.estimated:
            return None
        return (f"  budget: the endpoint's usage is missing or invalid in {self.estimated} call(s) so far: the cap counts "
                f"them at estimated tokens (${self.estimated_usd:.4f} of ${spent:.4f}; the model's tokenizer "
                "when model.tokenizer names one, else 4 characters a token), so it is kept only approximately")

    def stopped(self, recorded: int, planned: int) -> str:
        return f"stopped at budget: ${self.spent:.4f} of ${self.cap:.4f}, {recorded} of {planned} runs recorded"


class _StageLock:
    """An exclusive flock on the stage's budget.lock while one call is admitted (every shard's driver and
    judge takes the same one, so the check and the request line are one step across processes)."""

    def __init__(self, path: Path):
        self.path, self.fd = Path(path), None

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing drops the lock
