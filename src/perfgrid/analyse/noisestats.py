"""The noise profile's statistics (perfgrid.measure.noiseprofile measures it): per pair and
side, the spread of values inside a process and of process means over blocks, and what a
process costs; per pair, the paired and unpaired spread of the log-ratio and the blocks a
ratio needs for a 95 % interval of +/-5 %. The formulas are the measuring module's
docstring's (Kalibera and Jones, ISMM 2013).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfgrid.analyse import stats
from perfgrid.design.model import NoisePair

#: the interval the blocks are sized for: 95 %, +/-5 % on a ratio
LEVEL = 0.95
HALF_WIDTH = 0.05


def _var(x: np.ndarray) -> float:
    return float(np.var(x, ddof=1)) if len(x) > 1 else float("nan")


def side_stats(logs: np.ndarray, process_seconds: Sequence[float],
               value_seconds: Sequence[float], warmups: int) -> dict[str, Any]:
    """One side's levels from ``logs`` (blocks x values, log rates) and its costs."""
    logs = np.asarray(logs, float)
    values = logs.shape[1]
    s1 = float(np.mean(np.var(logs, axis=1, ddof=1))) if values > 1 else float("nan")
    s2 = _var(logs.mean(axis=1))
    t2 = s2 - s1 / values
    c_process = float(np.mean(process_seconds))
    c_value = float(np.mean(value_seconds))
    startup = max(c_process - (values + warmups) * c_value, 0.0)
    optimal = (math.sqrt(startup / c_value * s1 / t2)
               if t2 > 0 and c_value > 0 and math.isfinite(s1) else None)
    return {
        "processes": int(logs.shape[0]), "values": values,
        "within_cv": math.sqrt(s1), "between_cv": math.sqrt(s2),
        "between_component_cv": math.sqrt(max(t2, 0.0)) if math.isfinite(t2) else None,
        "within_var": s1, "between_var": t2, "process_mean_var": s2,
        "process_seconds": c_process, "value_seconds": c_value, "startup_seconds": startup,
        "optimal_values": optimal,
    }


def blocks_needed(var: float, df_per_block: float = 1.0, level: float = LEVEL,
                  half_width: float = HALF_WIDTH) -> int | None:
    """Least ``n >= 2`` with ``t(df) * sqrt(var / n) <= ln(1 + half_width)``, where
    ``df = df_per_block * (n - 1)`` (stats.blocks_needed, at this profile's level and
    width); None if ``var`` is unknown or over stats.MAX_BLOCKS."""
    return stats.blocks_needed(var, df_per_block, level, half_width)


def pair_stats(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """A pair's ratio from ``a`` and ``b`` (blocks x values, log rates of its two sides)."""
    ma, mb = np.asarray(a, float).mean(axis=1), np.asarray(b, float).mean(axis=1)
    va, vb = _var(ma), _var(mb)
    paired = _var(ma - mb)
    unpaired = va + vb
    corr = (float(np.corrcoef(ma, mb)[0, 1]) if len(ma) >= 3 and va > 0 and vb > 0
            else None)
    welch = unpaired ** 2 / (va ** 2 + vb ** 2) if va > 0 or vb > 0 else 1.0
    return {
        "blocks": len(ma), "ratio": float(np.exp(np.mean(ma - mb))),
        "paired_sd": math.sqrt(paired) if math.isfinite(paired) else None,
        "unpaired_sd": math.sqrt(unpaired) if math.isfinite(unpaired) else None,
        "correlation": corr,
        "blocks_needed_paired": blocks_needed(paired),
        "blocks_needed_unpaired": blocks_needed(unpaired, welch),
    }


def summarise(pair: NoisePair, records: list[dict[str, Any]], warmups: int,
              error: str | None = None) -> dict[str, Any]:
    """A pair's statistics from its blocks (``run_blocks``), or why it has none; a pair
    that failed part-way keeps its blocks and says so (``error``) beside its figures."""
    out: dict[str, Any] = {"claim": pair.claim, "a": pair.a.label, "b": pair.b.label,
                           "points": {"a": pair.a.point, "b": pair.b.point}}
    if error:
        out["error"] = error
    if len(records) < 2:
        out.setdefault("error", f"{len(records)} block(s) measured; a spread needs two")
        return {**out, "records": records}
    logs = {key: np.log([r[key]["rates"] for r in records]) for key in ("a", "b")}
    for key in ("a", "b"):
        out[key + "_stats"] = side_stats(logs[key], [r[key]["seconds"] for r in records],
                                         [r[key]["value_seconds"] for r in records], warmups)
    out.update(pair_stats(logs["a"], logs["b"]))
    out["records"] = records
    return out


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity as None: strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def summary(measured: dict[str, Any], pairs: Sequence[NoisePair],
            skipped: dict[str, str]) -> dict[str, Any]:
    """The whole profile as strict-JSON-ready data, from what
    perfgrid.measure.noiseprofile.measure_all measured (pairs skipped say why)."""
    warmups = measured["warmups"]
    return _finite({
        **{k: measured[k] for k in ("blocks", "values", "warmups", "seed")},
        "level": LEVEL, "half_width": HALF_WIDTH,
        "started": measured["started"], "seconds": measured["seconds"],
        "pairs": {pair.name: summarise(pair, measured["records"][pair.name], warmups,
                                       measured["failed"].get(pair.name)) for pair in pairs},
        "skipped": skipped,
    })


def describe(data: dict[str, Any]) -> list[str]:
    """A few lines on the profile, for the log."""
    lines = [f"noise profile: {data['blocks']} blocks of {data['values']} values a process, "
             f"{data['seconds']:.0f} s"]
    for name, pair in data["pairs"].items():
        if "error" in pair:
            lines.append(f"  {name}: {pair['error']}")
        if "a_stats" not in pair:
            continue
        a, b = pair["a_stats"], pair["b_stats"]
        lines.append(
            f"  {name}: within {a['within_cv']:.1%} / {b['within_cv']:.1%}, between "
            f"{a['between_cv']:.1%} / {b['between_cv']:.1%}, log-ratio sd paired "
            f"{_show(pair['paired_sd'], '.1%')} unpaired {_show(pair['unpaired_sd'], '.1%')}, "
            f"correlation {_show(pair['correlation'], '.2f')}, "
            f"{a['process_seconds']:.2f} / {b['process_seconds']:.2f} s a process, blocks "
            f"for +/-5 %: {_show(pair['blocks_needed_paired'], 'd')} paired, "
            f"{_show(pair['blocks_needed_unpaired'], 'd')} unpaired")
    lines += [f"  {name}: skipped: {why}" for name, why in data["skipped"].items()]
    return lines


def _show(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A written profile (strict JSON)."""
    return json.loads(Path(path).read_text())
