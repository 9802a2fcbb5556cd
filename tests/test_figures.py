"""What the figures draw: 95% intervals, a legend instead of labels that can collide, readable
log ticks, and "not measured" that does not look like zero."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer

from analysis import figures


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The closed form of the Wilson score interval, in %."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) * 100, (centre + half) * 100


def bars(ax) -> list[tuple[float, float, float]]:
    """(x, low end, high end) of every vertical error bar on the axes."""
    out = []
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            for seg in c.lines[2][0].get_segments():
                out.append((float(seg[0][0]), float(seg[0][1]), float(seg[1][1])))
    return sorted(out)


def flat(rows) -> list[float]:
    return [float(v) for row in sorted(rows) for v in row]


def visible_tick_labels(ax, axis: str) -> list[str]:
    ax.figure.canvas.draw()
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    lo, hi = ax.get_xlim() if axis == "x" else ax.get_ylim()
    return [t.get_text() for t in ticks if t.get_text() and lo <= (t.get_position()[0 if axis == "x" else 1]) <= hi]


def t1() -> pd.DataFrame:
    return pd.DataFrame({"folder": "main/main", "condition": ["a", "b", "c", "d"],
                         "mean_tokens": [1000.0, 1000.0, 120.0, 9000.0], "accuracy_pct": [50.0, 50.0, 80.0, 100.0],
                         "n_judged": [10, 10, 20, 7]})


def test_figure3_gives_each_accuracy_its_wilson_interval_and_names_conditions_in_a_legend():
    fig = figures.draw_figure3(t1(), "main/main")
    (ax,) = fig.axes
    got = bars(ax)
    want = sorted([(1000.0, *wilson(5, 10)), (1000.0, *wilson(5, 10)), (120.0, *wilson(16, 20)), (9000.0, *wilson(7, 7))])
    assert flat(got) == pytest.approx(flat(want), abs=1e-9)
    # two conditions at the same point: both named, in the legend, and no text drawn on the plot
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a (n=10)", "b (n=10)", "c (n=20)", "d (n=7)"]
    assert list(ax.texts) == []
    assert ax.get_xscale() == "log" and len(visible_tick_labels(ax, "x")) >= 4


def test_figure5_log_axis_over_less_than_a_decade_has_readable_ticks_and_intervals():
    scale = pd.DataFrame({"folder_s": "main/main", "folder_m": "scale/scale", "condition": ["x", "y"],
                          "n_paired": 12, "n_judged_both": 12, "accuracy_s_pct": [50.0, 75.0],
                          "accuracy_m_pct": [25.0, 75.0], "mean_tokens_s": [1000.0, 1100.0],
                          "mean_tokens_m": [1800.0, 1500.0], "tokens_growth": [1.8, 1.36],
                          "tokens_growth_lo": [1.6, 1.2], "tokens_growth_hi": [2.0, 1.5]})
    fig = figures.draw_figure5(scale)
    a1, a2 = fig.axes
    assert flat(bars(a1)) == pytest.approx(flat([(0.0, *wilson(6, 12)), (1.0, *wilson(3, 12)), (0.0, *wilson(9, 12)),
                                                 (1.0, *wilson(9, 12))]), abs=1e-9)
    labels = visible_tick_labels(a2, "y")
    assert a2.get_yscale() == "log" and len(labels) >= 3 and "1,000" in labels
    assert [t.get_text() for t in a2.get_legend().get_texts()] == ["x: x1.80 [1.60, 2.00]", "y: x1.36 [1.20, 1.50]"]


def test_figure6_draws_not_measured_apart_from_a_measured_zero():
    t2 = pd.DataFrame({"folder": "org/org", "variant": ["public", "private", "private"],
                       "condition": ["shared", "shared", "no_view"], "mean_tokens": [500.0, 400.0, 600.0],
                       "accuracy_pct": [60.0, 90.0, 40.0], "n_judged": [10, 10, 10], "n_questions": [10, 10, 10],
                       "leaks": [math.nan, 0, 3], "leak_judged": [math.nan, 10, 10],
                       "exposed_runs": [math.nan, 0, math.nan]})
    fig = figures.draw_figure6(t2, "org/org")
    a1, a2 = fig.axes
    assert flat(bars(a1)) == pytest.approx(flat([(500.0, *wilson(6, 10))]), abs=1e-9)
    filled = [p for p in a2.patches if p.get_fill()]
    outlined = [p for p in a2.patches if not p.get_fill()]
    # declined x2, leaks x2, exposed x1 measured (a zero: a filled bar of height 0); no_view's exposure not measured
    assert len(filled) == 5 and sorted(p.get_height() for p in filled)[0] == 0.0
    assert len(outlined) == 1 and outlined[0].get_hatch() == "//"
    assert [t.get_text() for t in a2.texts] == ["not measured"]
    assert "not measured" in [t.get_text() for t in a2.get_legend().get_texts()]
    ends = [(lo, hi) for _, lo, hi in bars(a2)]
    for k in (9, 4, 0, 3):  # declined 9/10 and 4/10, leaks 0/10 and 3/10
        assert any(list(e) == pytest.approx(list(wilson(k, 10)), abs=1e-9) for e in ends), k
    assert any(list(e) == pytest.approx(list(wilson(0, 10)), abs=1e-9) for e in ends)  # the measured zero exposure


def test_unjudged_conditions_on_a_log_axis_draw_no_point_and_say_so():
    d = t1().assign(accuracy_pct=[math.nan, 50.0, math.nan, math.nan])
    fig = figures.draw_figure3(d, "main/main")
    (ax,) = fig.axes
    fig.canvas.draw()  # the log axis must find ticks although most points have no accuracy
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "a (not judged)", "b (n=10)", "c (not judged)", "d (not judged)"]
    assert flat(bars(ax)) == pytest.approx(flat([(1000.0, *wilson(5, 10))]), abs=1e-9)
