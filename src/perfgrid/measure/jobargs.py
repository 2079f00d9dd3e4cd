"""The harness's words for a job's point and options: ``--point AXIS=VALUE`` and
``--option KEY=VALUE``, written by the workflow and read back by the harness
(perfgrid.measure.bench) and by its counting pass (perfgrid.measure.counting_pass), which
imports nothing of the harness.
"""

from __future__ import annotations


def option_words(values: dict[str, str]) -> list[str]:
    """``--option KEY=VALUE`` words of the harness command line."""
    return [word for key, value in values.items() for word in ("--option", f"{key}={value}")]


def pairs(items: list[str], flag: str) -> dict[str, str]:
    """``{KEY: VALUE}`` from repeated ``KEY=VALUE`` words of ``flag``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag}: expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out
