"""This machine's noise level by level, measured on two pairs of points the claims compare.

The claims compare points as ratios (Python ``readinto`` over ``dd`` at 1 MiB blocks,
Python over C ``getuid``). How many repetitions such a ratio needs, and at which level
(values inside a process, processes, pairs of processes measured back to back), depends
on how noisy each level is here and what a repetition at it costs (Kalibera and Jones,
"Rigorous benchmarking in reasonable time", ISMM 2013). So each run starts with a short
profile: ``blocks`` blocks, each measuring a pair's two points A and B back to back in a
random order, each in a fresh harness process (``python -m perfgrid.measure.bench``, as a
benchmark job runs it, with the plan's words for its point: plan.json's ``noise``,
perfgrid.design.plan.noise_pairs) of ``warmups`` + ``values`` values. This module
measures; perfgrid.analyse.noisestats sums the blocks up, and perfgrid.pipeline.noiseprofile
runs both and writes noise.json. Per pair and side it holds:

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
experiments, as the plan has them; it needs what a benchmark job of each of their points
needs (the test file's ready note, the workload's code, the C program), so it is measured
again when those are made again or change, or when its own code, blocks or words change.
``noise.profile.blocks: 0`` leaves it out of the run.

Spreads are standard deviations of natural logarithms of rates: for spreads of a few
per cent they equal the coefficient of variation, and a ratio's spread is a difference's.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perfgrid.design.model import NoisePair, NoiseSide
from perfgrid.kit import lifetime

#: values and warm-ups of each process (blocks: the config's noise.profile.blocks; on a
#: 2-CPU VM a block of both pairs takes 6.5-7.5 s with a 1 GiB test file: file_read's
#: processes 1.4-3.5 s each, syscall's 1.1-1.3 s)
VALUES = 5
WARMUPS = 1
#: no harness process of the profile may take longer (a hung point fails the profile)
PROCESS_TIMEOUT_S = 300


def command(side: NoiseSide, values: int, warmups: int, result: Path) -> list[str]:
    """The harness command line of one side: a benchmark job's words for its point and
    options (the plan's), one process of ``values`` values after ``warmups``."""
    return [sys.executable, "-m", "perfgrid.measure.bench", side.experiment, *side.words,
            "--processes", "1", "--values", str(values), "--warmups", str(warmups),
            "--loops", str(side.loops), "--result", str(result)]


def measure(side: NoiseSide, values: int, warmups: int, folder: Path) -> dict[str, Any]:
    """One fresh harness process: its rates (work per second, one per value), its wall time
    and one value's time. Raises RuntimeError with the tail of its log if it failed."""
    import pyperf

    result = folder / f"{side.experiment}-{side.label}.json"
    result.unlink(missing_ok=True)
    started = time.monotonic()
    done = subprocess.run(lifetime.command(command(side, values, warmups, result)),
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


def run_blocks(pairs: Sequence[NoisePair], blocks: int, values: int, warmups: int, seed: int,
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




def check_counts(blocks: int, values: int) -> None:
    """Refuse fewer than 2 blocks or values: a spread over blocks and one within a process
    need at least 2 of each."""
    if blocks < 2 or values < 2:
        raise ValueError(f"blocks {blocks}, values {values}: a spread over blocks and one "
                         f"within a process need at least 2 of each")


def measure_all(pairs: Sequence[NoisePair], blocks: int, values: int = VALUES,
                warmups: int = WARMUPS, seed: int = 0, lock: str | None = None,
                ) -> dict[str, Any]:
    """``blocks`` blocks of ``pairs`` (:func:`run_blocks`) under the benchmarks' lock, so
    that no job measures beside them: each pair's records, each failed pair's error, and
    when and how long (perfgrid.analyse.noisestats sums them up)."""
    from perfgrid.measure.bench import exclusive

    check_counts(blocks, values)
    started = time.time()
    with exclusive(lock), tempfile.TemporaryDirectory(prefix="perfgrid-noise-") as tmp:
        records, failed = run_blocks(pairs, blocks, values, warmups, seed, Path(tmp))
    return {"blocks": blocks, "values": values, "warmups": warmups, "seed": seed,
            "started": started, "seconds": round(time.time() - started, 2),
            "records": records, "failed": failed}
