"""Cost of a model call at list price and at the price charged (off-peak windows, SPEC 5).

Prices are per million tokens from the model config: cache hit, cache miss, output.
A provider may halve every price inside an off-peak window given in UTC; the
window may wrap past midnight.
"""

from __future__ import annotations

from datetime import datetime, time, timezone


def list_cost(prices, hit: int, miss: int, output: int) -> float:
    """A price that is not known (null) counts as 0; `unknown_prices` names it for the preflight."""
    p = {k: float(prices.get(k) or 0.0) for k in ("hit", "miss", "output")}
    return (hit * p["hit"] + miss * p["miss"] + output * p["output"]) / 1e6


def unknown_prices(prices) -> list[str]:
    """The prices a config leaves null (not known)."""
    return [k for k in ("hit", "miss", "output") if not prices or prices.get(k) is None]


def _parse(hhmm: str) -> time:
    h, m = hhmm.split(":")
    return time(int(h), int(m))


def offpeak_factor(offpeak, when: datetime) -> float:
    """The factor applied to list prices for a call made at `when` (a naive time is read as UTC;
    an aware one is converted to UTC first, since the window is given in UTC)."""
    if not offpeak:
        return 1.0
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    start, end, t = _parse(offpeak["start_utc"]), _parse(offpeak["end_utc"]), when.time()
    inside = (start <= t < end) if start < end else (t >= start or t < end)
    return float(offpeak["factor"]) if inside else 1.0


def paid_cost(prices, offpeak, hit: int, miss: int, output: int, when: datetime) -> float:
    return list_cost(prices, hit, miss, output) * offpeak_factor(offpeak, when)
