"""This machine's noise level by level, measured on two pairs of points the claims compare.

The claims compare points as ratios (Python ``readinto`` over ``dd`` at 1 MiB blocks,
Python over C ``getuid``). How many repetitions such a ratio needs, and at which level
(values inside a process, processes, pairs of processes measured back to back), depends
on how noisy each level is here and what a repetition at it costs (Kalibera and Jones,
"Rigorous benchmarking in reasonable time", ISMM 2013). So each run starts with a short
profile: ``blocks`` blocks, each measuring a pair's two points A and B back to back in a
random order, each in a fresh harness process (``python -m perfgrid.measure.bench``, as a
benchmark job runs it) of ``warmups`` + ``values`` values. Per pair and side it writes:

- ``within_cv``: the spread of values inside one process, pooled over processes
  (``S1^2``, the mean of the processes' sample variances);
- ``between_cv``: the spread of process means over blocks (``S2^2``, their sample
  variance). Kalibera and Jones: ``S2^2 = T2^2 + S1^2 / values``, where ``T2^2`` is the
  between-process component (``between_component_cv``; negative estimates read 0);
- ``process_seconds``: a fresh process's wall time (start-up, warm-ups and values), the
  time of one value, and the start-up left over (``startup_seconds``, the cost ``c2`` of a
  process beyond its values, ``c1`` being a value's);
- ``optimal_values``: Kalibera and Jones' values per process that minimise the cost of a
  given precision, ``sqrt(c2 / c1 * T1^2 / T2^2)`` with ``T1^2 = S1^2`` (libkalibera's
  ``optimalreps``, not rounded; None where no between-process component was seen).

and per pair, on the block means ``a_b``, ``b_b`` (log rates): the spread of the paired
log-ratio ``sd(a_b - b_b)`` beside the unpaired one ``sqrt(var(a) + var(b))`` (what a
ratio of points measured apart would see), their correlation over blocks, and the blocks
a ratio needs for a 95 % interval of +/-5 %: the least ``n >= 2`` with
``t(0.975, df) * s / sqrt(n) <= ln(1.05)``, the interval being ``ratio * exp(+/-h)``;
paired ``s = sd(a_b - b_b)``, ``df = n - 1``; unpaired ``s^2 = var(a) + var(b)`` with
Welch's ``df = (n - 1) (var(a) + var(b))^2 / (var(a)^2 + var(b)^2)``.

In the workflow (rule noise_profile) it runs before the benchmarks: like a benchmark job
it holds the bench resource and the harness's lock, so nothing measures beside it, and the
highest priority. Its pairs are the experiments' own (``noise_pair``), those of this run's
experiments; it needs what a benchmark job of each of their points needs (the test file's
ready note, the workload's code, the C program), so it is measured again when those are
made again or change, or when its own code or blocks change. ``noise.profile.blocks: 0``
leaves it out of the run.

Spreads are standard deviations of natural logarithms of rates: for spreads of a few
per cent they equal the coefficient of variation, and a ratio's spread is a difference's.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfgrid import experiments
from perfgrid.design import jobs
from perfgrid.experiments.base import Experiment, NoisePair, Point
from perfgrid.kit import lifetime
from perfgrid.kit.atomic import write_json
from perfgrid.kit.paths import PACKAGE, Layout
from perfgrid.measure import fixtures, jobargs

#: values and warm-ups of each process (blocks: the config's noise.profile.blocks; on a
#: 2-CPU VM a block of both pairs takes 6.5-7.5 s with a 1 GiB test file: file_read's
#: processes 1.4-3.5 s each, syscall's 1.1-1.3 s)
VALUES = 5
WARMUPS = 1
#: the interval the blocks are sized for: 95 %, +/-5 % on a ratio
LEVEL = 0.95
HALF_WIDTH = 0.05
#: no harness process of the profile may take longer (a hung point fails the profile)
PROCESS_TIMEOUT_S = 300


@dataclass(frozen=True)
class Side:
    """One point of a pair, as the harness is told to measure it."""

    label: str
    experiment: str
    point: dict[str, Any]
    loops: int
    options: dict[str, str] = field(default_factory=dict)

    def command(self, values: int, warmups: int, result: Path) -> list[str]:
        """The harness command line, as a benchmark job's (perfgrid.design.plan.bench_words)."""
        words = [sys.executable, "-m", "perfgrid.measure.bench", self.experiment]
        for axis, value in self.point.items():
            words += ["--point", f"{axis}={value}"]
        words += jobargs.option_words(self.options)
        words += ["--processes", "1", "--values", str(values), "--warmups", str(warmups),
                  "--loops", str(self.loops), "--result", str(result)]
        return words


@dataclass(frozen=True)
class Pair:
    """Two points a claim compares as the ratio ``A / B`` of their rates."""

    name: str
    claim: str
    a: Side
    b: Side


def declared() -> list[tuple[Experiment, NoisePair]]:
    """Each experiment's noise pair (:attr:`Experiment.noise_pair`), in report order."""
    found = [experiments.get(name) for name in experiments.available()]
    return [(exp, exp.noise_pair) for exp in found if exp.noise_pair is not None]


def _label(point: Point, other: Point) -> str:
    """What sets ``point`` apart from ``other``: the values of the axes they differ on."""
    return ",".join(str(value) for axis, value in point.items() if other.get(axis) != value)


def missing_file(experiment: Experiment, point: Point, config: dict[str, Any],
                 layout: Layout) -> str | None:
    """Why ``point``'s job could not run now for want of a file, or None: a fixture's file,
    or the C program it runs (a caller may build that one, :func:`build_programs`)."""
    for fixture in map(fixtures.get, experiment.fixtures):
        path = config[fixture.name]["path"]
        if not os.path.isfile(path):
            return f"no {fixture.title} at {path} (rule {fixture.name} makes it)"
    program = jobs.native_program(experiment, point)
    if program and not os.access(layout.native_binary(program), os.X_OK):
        return (f"no native program at {layout.native_binary(program)} (rule native_program "
                f"builds it)")
    return None


def plan(config: dict[str, Any], layout: Layout, programs: dict[str, str] | None = None,
         ) -> tuple[list[Pair], dict[str, str]]:
    """The pairs of this run's experiments that this machine can measure now, each side with
    the options a benchmark job of its point gets (``programs``: C programs built elsewhere,
    by name), and why each other pair is skipped."""
    pairs, skipped = [], {}
    programs = programs or {}
    for exp, spec in declared():
        why = None
        if exp.name not in config["experiments"]:
            why = f"{exp.name} is not among this run's experiments"
        for point in (spec.a, spec.b):
            program = jobs.native_program(exp, point)
            why = (why or exp.unavailable(point)
                   or (None if program in programs
                       else missing_file(exp, point, config, layout)))
        if why:
            skipped[spec.name] = why
            continue
        sides = []
        for point, other in ((spec.a, spec.b), (spec.b, spec.a)):
            options = jobs.options(exp, point, config, layout)
            program = jobs.native_program(exp, point)
            if program in programs:
                options["binary"] = programs[program]
            sides.append(Side(_label(point, other), exp.name, point, spec.loops, options))
        pairs.append(Pair(spec.name, spec.claim, *sides))
    return pairs, skipped


def build_programs(config: dict[str, Any], layout: Layout, folder: Path) -> dict[str, str]:
    """The C programs of this run's pairs that are not built yet, compiled into ``folder``
    as rule native_program does (``perfgrid noise`` run alone, before any pipeline); none
    without a C compiler (the pairs then say so)."""
    compiler = os.environ.get("CC") or "cc"
    built: dict[str, str] = {}
    if not shutil.which(compiler):
        return built
    for exp, spec in declared():
        for point in (spec.a, spec.b):
            program = jobs.native_program(exp, point)
            if (not program or program in built or exp.name not in config["experiments"]
                    or os.access(layout.native_binary(program), os.X_OK)):
                continue
            out = folder / program
            cmd = jobs.native_command(compiler, str(PACKAGE / jobs.native_sources()[program]),
                                      str(out))
            subprocess.run(lifetime.command(cmd), check=True)
            built[program] = str(out)
    return built


# -- measuring -------------------------------------------------------------------------------
def measure(side: Side, values: int, warmups: int, folder: Path) -> dict[str, Any]:
    """One fresh harness process: its rates (work per second, one per value), its wall time
    and one value's time. Raises RuntimeError with the tail of its log if it failed."""
    import pyperf

    result = folder / f"{side.experiment}-{side.label}.json"
    result.unlink(missing_ok=True)
    started = time.monotonic()
    done = subprocess.run(lifetime.command(side.command(values, warmups, result)),
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S,
                          check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0 or not result.exists():
        raise RuntimeError(f"{side.experiment} {side.label}: the harness exited "
                           f"{done.returncode}: {done.stderr.strip()[-800:]}")
    bench = pyperf.Benchmark.load(str(result))
    (run,) = [r for r in bench.get_runs() if r.values]
    meta = run.get_metadata()
    work = float(meta["perfgrid_work_per_loop"])
    loops = run.get_total_loops()
    return {"seconds": round(seconds, 4),
            "rates": [work / value for value in run.values],
            "value_seconds": float(np.mean(run.values)) * loops,
            "busy_share": bench.get_metadata().get("perfgrid_busy_share")}


def run_blocks(pairs: Sequence[Pair], blocks: int, values: int, warmups: int, seed: int,
               folder: Path, log: Any = sys.stderr,
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """``blocks`` blocks: each pair's two sides back to back in an order drawn from
    ``seed``, the pairs in a drawn order too. A pair whose process fails is measured no
    more and the others go on. Returns each pair's blocks, and each failed pair's error."""
    rng = random.Random(seed)
    out: dict[str, list[dict[str, Any]]] = {pair.name: [] for pair in pairs}
    failed: dict[str, str] = {}
    for block in range(1, blocks + 1):
        for pair in rng.sample(list(pairs), len(pairs)):
            order = rng.sample(["a", "b"], 2)
            if pair.name in failed:
                continue
            record: dict[str, Any] = {"block": block, "order": order}
            try:
                for key in order:
                    record[key] = measure(getattr(pair, key), values, warmups, folder)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                failed[pair.name] = str(err)
                print(f"perfgrid noise: {pair.name}: {err}", file=log, flush=True)
                continue
            out[pair.name].append(record)
        print(f"perfgrid noise: block {block} of {blocks} done", file=log, flush=True)
    return out, failed


# -- statistics -------------------------------------------------------------------------------
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
    from perfgrid.analyse import stats  # here, not at the top: the Snakefile imports this module,
    # and scipy (stats) would add ~0.1 s to every dry run
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


def summarise(pair: Pair, records: list[dict[str, Any]], warmups: int,
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


def profile(blocks: int, pairs: Sequence[Pair], skipped: dict[str, str],
            values: int = VALUES, warmups: int = WARMUPS, seed: int = 0) -> dict[str, Any]:
    """The whole profile as strict-JSON-ready data (pairs skipped say why)."""
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="perfgrid-noise-") as tmp:
        measured, failed = run_blocks(pairs, blocks, values, warmups, seed, Path(tmp))
    return _finite({
        "blocks": blocks, "values": values, "warmups": warmups, "seed": seed,
        "level": LEVEL, "half_width": HALF_WIDTH,
        "started": started, "seconds": round(time.time() - started, 2),
        "pairs": {pair.name: summarise(pair, measured[pair.name], warmups,
                                       failed.get(pair.name)) for pair in pairs},
        "skipped": skipped,
    })


def main(config: dict[str, Any], out: str, blocks: int, values: int = VALUES,
         warmups: int = WARMUPS, seed: int = 0, lock: str | None = None) -> dict[str, Any]:
    """Measure the pairs of ``config`` (validated, :func:`perfgrid.pipeline.settings.validated`)
    under the benchmarks' lock, so that no job measures beside it; write ``out``.

    C programs the pairs need and the run has not built are compiled into a temporary
    folder first.
    """
    from perfgrid.measure.bench import exclusive

    if blocks < 2 or values < 2:
        raise ValueError(f"blocks {blocks}, values {values}: a spread over blocks and one "
                         f"within a process need at least 2 of each")
    lifetime.watch_snakemake()
    layout = Layout.for_host(config["host"], config.get("results", "results"))
    with tempfile.TemporaryDirectory(prefix="perfgrid-noise-bin-") as tmp:
        pairs, skipped = plan(config, layout, build_programs(config, layout, Path(tmp)))
        with exclusive(lock):
            data = profile(blocks, pairs, skipped, values, warmups, seed)
    write_json(out, data)
    for line in describe(data):
        print(line)
    return data


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
