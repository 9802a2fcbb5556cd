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


NUMBERS = ("hit", "miss", "output", "usd_per_currency", "cny_per_usd")  # the prices' keys the cost reads as numbers


def check_prices(prices, offpeak) -> None:
    """A price the cost reads must be a number or null, an off-peak window start_utc/end_utc as HH:MM and a
    numeric factor: a ValueError naming the key (`prices.hit: ...`). WHY: both are open nodes of the typed
    endpoint node, so `model.prices.hit=abc` passed the check and died in the forecast or the first call."""
    _closed_keys("prices", prices, PRICE_KEYS)
    _closed_keys("offpeak", offpeak, OFFPEAK_KEYS)
    for k in NUMBERS:
        v = (prices or {}).get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError(f"prices.{k}: {v!r} is not a number (per million tokens) or null")
    if not offpeak:
        return
    for k in ("start_utc", "end_utc"):
        try:
            _parse(str(offpeak[k]))
        except (KeyError, ValueError):
            raise ValueError(f"offpeak.{k}: {offpeak.get(k)!r} is not a time HH:MM (UTC); an off-peak window takes "
                             f"start_utc, end_utc and factor") from None
    f = offpeak.get("factor")
    if isinstance(f, bool) or not isinstance(f, (int, float)):
        raise ValueError(f"offpeak.factor: {f!r} is not a number (the factor applied to list prices)")


PRICE_KEYS = ("currency", *NUMBERS)
OFFPEAK_KEYS = ("start_utc", "end_utc", "factor")


def _edits(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _closed_keys(where: str, node, allowed: tuple[str, ...]) -> None:
    """The prices and the off-peak window are closed: a key the cost does not read (`offpeak.factr`) is a typo
    whose value would be ignored, refused naming the nearest key (fewest edits)."""
    for k in (node or {}):
        if str(k) not in allowed:
            near = min(allowed, key=lambda a: (_edits(str(k), a), a))
            raise ValueError(f"{where}.{k}: no such setting (did you mean {where}.{near}?); {where} takes: "
                             + ", ".join(allowed))


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
