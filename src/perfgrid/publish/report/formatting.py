"""Numbers and tables as a reader sees them: rates in readable units, Markdown tables."""

from __future__ import annotations

from typing import Any

import pandas as pd

#: how a rate unit is shown to a reader: (scale, unit) pairs from large to small
_HUMAN = {
    "bytes/s": [(1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1, "B/s")],
    "calls/s": [(1e6, "M calls/s"), (1e3, "k calls/s"), (1, "calls/s")],
    "spawns/s": [(1e6, "M spawns/s"), (1e3, "k spawns/s"), (1, "spawns/s")],
    "requests/s": [(1e3, "k req/s"), (1, "req/s")],
    "messages/s": [(1e6, "M msg/s"), (1e3, "k msg/s"), (1, "msg/s")],
    "timer events/s": [(1e6, "M events/s"), (1e3, "k events/s"), (1, "events/s")],
}


def human_rate(rate: float, low: float, high: float, unit: str) -> str:
    """``11.2 GB/s [10.9, 11.5]``: a rate and its interval in a readable unit."""
    if not isinstance(rate, int | float) or pd.isna(rate):
        return ""
    scale, label = next(((s, u) for s, u in _HUMAN.get(unit, [(1, unit)]) if abs(rate) >= s),
                        _HUMAN.get(unit, [(1, unit)])[-1])
    text = f"{rate / scale:.3g} {label}"
    if isinstance(low, int | float) and not pd.isna(low) and not pd.isna(high):
        return f"{text} [{low / scale:.3g}, {high / scale:.3g}]"
    return f"{text} [no interval]"


def with_human_rates(table: pd.DataFrame) -> pd.DataFrame:
    """The table with a readable ``rate (95 % interval)`` column; the raw SI columns stay."""
    if table.empty or "rate" not in table:
        return table
    cols = {c: table[c] if c in table else pd.Series(float("nan"), index=table.index)
            for c in ("rate_ci_low", "rate_ci_high", "rate_unit")}
    human = [human_rate(r, lo, hi, str(u)) for r, lo, hi, u in zip(
        table["rate"], cols["rate_ci_low"], cols["rate_ci_high"], cols["rate_unit"],
        strict=True)]
    return table.assign(**{"rate (95 % interval)": human})


def md_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table; header cells escaped as the others are (a column
    may be a host folder's name: ``a|b`` stays one column)."""
    if frame.empty:
        return "_(no rows)_\n"
    cols = list(frame.columns)
    lines = ["| " + " | ".join(_fmt(str(c)) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    """One Markdown table cell: a pipe is escaped and a line break becomes a space, so a
    value (a reason, a path) cannot end its row or add a column."""
    if isinstance(value, float):
        if pd.isna(value):
            return ""
        return f"{value:.4g}"
    return " ".join(str(value).splitlines()).replace("|", "\\|")


def _pct(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _num(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
