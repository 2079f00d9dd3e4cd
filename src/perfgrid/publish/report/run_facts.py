"""Where and how the results came to be: the run, the CPUs it could use, the noise."""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd

from perfgrid.kit.paths import Layout
from perfgrid.kit.topology import format_cpu_list, parse_cpu_list
from perfgrid.publish.report.formatting import _num, _pct


def provenance(layout: Layout, sections: list[dict[str, Any]]) -> dict[str, Any]:
    """How this result set came to be: command, times, config as used."""
    run = json.loads(layout.run_record.read_text()) if layout.run_record.exists() else {}
    walls = {}
    first, last = float("inf"), 0.0
    for sec in sections:
        table = sec["table"]
        if {"started", "finished"} <= set(table.columns) and len(table):
            spans = (table["job_seconds"] if "job_seconds" in table
                     else table["finished"] - table["started"])
            walls[sec["name"]] = float(spans.sum())
            first = min(first, float(table["started"].min()))
            last = max(last, float(table["finished"].max()))
    stamp = "%Y-%m-%d %H:%M:%S UTC"
    return {
        "command": " ".join(run.get("argv", [])) or "unknown",
        "snakemake": run.get("snakemake", "unknown"),
        "run_started": time.strftime(stamp, time.gmtime(run["started"])) if run else "unknown",
        "first_measurement": time.strftime(stamp, time.gmtime(first)) if walls else "n/a",
        "last_measurement": time.strftime(stamp, time.gmtime(last)) if walls else "n/a",
        "report_written": time.strftime(stamp, time.gmtime()),
        "benchmark_seconds": {k: round(v, 1) for k, v in walls.items()},
        "benchmark_seconds_total": round(sum(walls.values()), 1),
        "job_order": (f"shuffled, seed {run['order']['seed']}" if run.get("order", {}).get(
            "shuffle") else "sorted (grid order)") if run.get("order") else "unknown",
        "config": layout.used_config.read_text() if layout.used_config.exists() else "",
    }


def topology_table(machine: dict[str, Any]) -> tuple[str, pd.DataFrame]:
    """A sentence on the CPUs this run could use, and one row per package, NUMA node and
    L3 group: its CPUs, cores, threads per core and the CPUs of it the run was allowed."""
    topo, limit = machine.get("topology"), machine.get("restriction") or {}
    if not isinstance(topo, dict):  # machine.json of an older perfgrid
        return "", pd.DataFrame()
    groups: dict[tuple, list[dict]] = {}
    for c in topo["cpus"]:
        groups.setdefault((c["package"], c["node"], c["l3"]), []).append(c)
    allowed = set(topo["allowed"])
    rows = [{"package": package, "NUMA node": node,
             "L3 group (CPUs)": format_cpu_list(c["cpu"] for c in cpus),
             "cores": len({(c["die"], c["core_id"]) for c in cpus}),
             "threads per core": max(len(parse_cpu_list(c["siblings"])) for c in cpus),
             "allowed CPUs": format_cpu_list(c["cpu"] for c in cpus if c["cpu"] in allowed)
             or "none"}
            for (package, node, _), cpus in sorted(groups.items(), key=lambda g: (
                g[0][0], g[0][1], min(c["cpu"] for c in g[1])))]
    text = (f"{topo['packages']} package(s), {topo['cores']} cores, {topo['threads_per_core']} "
            f"thread(s) per core, {len(topo['l3_groups'])} L3 group(s), "
            f"{len(topo['numa_nodes'])} NUMA node(s) (from {topo['source']}). ")
    if limit.get("restricted"):
        text += (f"This run was restricted to {limit['allowed']} of {limit['online']} online "
                 f"CPUs ({limit['allowed_list']}) by {', '.join(limit['by'])}: auto worker "
                 f"counts and binding plans use only these.")
    else:
        text += f"This run could use every online CPU ({len(topo['online'])})."
    auto = machine.get("auto_workers")
    if isinstance(auto, dict):
        set_by = f", set by {auto['set_by']}" if auto.get("set_by") else ""
        text += (f" workers: auto stood for {', '.join(map(str, auto['counts']))} (built for "
                 f"{auto['cpus']} CPU(s){set_by}; a ring's from 2).")
    return text, pd.DataFrame(rows)


def noise_table(profile: dict[str, Any] | None) -> tuple[str, pd.DataFrame]:
    """A sentence on the noise profile (perfgrid.pipeline.noiseprofile) and one row per pair, each
    cell ``A / B`` where it is per side; without a profile, why there is none."""
    if profile is None:
        return ("Not measured (noise.profile.blocks: 0).", pd.DataFrame())
    text = (f"Before the benchmarks, {profile['blocks']} blocks each measured both points "
            f"of each pair back to back in a random order, each in a fresh process of "
            f"{profile['values']} values after {profile['warmups']} warm-up(s) "
            f"({profile['seconds']:.0f} s in all; noise.json has every figure). {NOISE_TEXT}")
    rows = []
    for name, pair in profile["pairs"].items():
        if "a_stats" not in pair:
            rows.append({"pair": name, "A / B": f"{pair['a']} / {pair['b']}",
                         "note": pair.get("error", "")})
            continue
        a, b = pair["a_stats"], pair["b_stats"]
        rows.append({
            "pair": name, "A / B": f"{pair['a']} / {pair['b']}",
            "within-process CV": f"{_pct(a['within_cv'])} / {_pct(b['within_cv'])}",
            "between-process CV": f"{_pct(a['between_cv'])} / {_pct(b['between_cv'])}",
            "s per process": f"{a['process_seconds']:.2f} / {b['process_seconds']:.2f}",
            "KJ values per process": (f"{_num(a['optimal_values'], '.1f')} / "
                                      f"{_num(b['optimal_values'], '.1f')}"),
            "log-ratio SD paired / unpaired": (f"{_pct(pair['paired_sd'])} / "
                                               f"{_pct(pair['unpaired_sd'])}"),
            "correlation": _num(pair["correlation"], ".2f"),
            "blocks for +/-5 % paired / unpaired": (
                f"{_num(pair['blocks_needed_paired'], 'd')} / "
                f"{_num(pair['blocks_needed_unpaired'], 'd')}"),
            "note": pair.get("error", ""),
        })
    rows += [{"pair": name, "note": f"skipped: {why}"}
             for name, why in profile["skipped"].items()]
    frame = pd.DataFrame(rows).fillna("")
    if not frame["note"].astype(bool).any():
        frame = frame.drop(columns="note")
    return text, frame


NOISE_TEXT = ("Spreads are standard deviations of log rates (for a few per cent, the "
              "coefficient of variation). Between-process: of process means over blocks. "
              "Log-ratio SD paired: of each block's A-over-B log-ratio; unpaired: what a "
              "ratio of points measured apart would see. Correlation: of A and B over blocks. "
              "KJ values per process: Kalibera and Jones' optimal count, from the spreads "
              "and the cost of a value and of a process's start-up (n/a: no "
              "between-process component seen). Blocks for +/-5 %: paired blocks (or "
              "unpaired processes per side) a ratio needs for a 95 % interval of +/-5 % "
              "(t-based).")
