"""The noise profile as the pipeline runs it (``perfgrid noise``, rule noise_profile): the
plan's pairs (perfgrid.design.plan.noise_pairs, plan.json's ``noise``) less those whose
files are missing now, C programs the run has not built compiled first, measured
(perfgrid.measure.noiseprofile), summed up (perfgrid.analyse.noisestats) and written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from perfgrid import experiments
from perfgrid.analyse import noisestats
from perfgrid.design import jobs
from perfgrid.design.model import NoisePair, NoiseSide
from perfgrid.experiments.base import Experiment, Point
from perfgrid.kit import lifetime
from perfgrid.kit.atomic import write_json
from perfgrid.kit.paths import PACKAGE, Layout
from perfgrid.measure import fixtures
from perfgrid.measure import noiseprofile as measuring


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


def _with_program(side: NoiseSide, path: str) -> NoiseSide:
    """``side`` running the C program at ``path`` in place of the planned one."""
    return dataclasses.replace(side, words=tuple(
        f"binary={path}" if word.startswith("binary=") else word for word in side.words))


def runnable(pairs: dict[str, NoisePair], skipped: dict[str, str], config: dict[str, Any],
             layout: Layout, programs: dict[str, str] | None = None,
             ) -> tuple[list[NoisePair], dict[str, str]]:
    """The plan's pairs that this machine can measure now (``programs``: C programs built
    elsewhere, by name, which their sides then run), and why each other pair is skipped."""
    out, skipped = [], dict(skipped)
    programs = programs or {}
    for pair in pairs.values():
        sides = []
        for side in (pair.a, pair.b):
            exp = experiments.get(side.experiment)
            program = jobs.native_program(exp, side.point)
            if program in programs:
                sides.append(_with_program(side, programs[program]))
            elif why := missing_file(exp, side.point, config, layout):
                skipped[pair.name] = why
                break
            else:
                sides.append(side)
        if pair.name not in skipped:
            out.append(dataclasses.replace(pair, a=sides[0], b=sides[1]))
    return out, skipped


def build_programs(pairs: dict[str, NoisePair], layout: Layout,
                   folder: Path) -> dict[str, str]:
    """The C programs of ``pairs`` that are not built yet, compiled into ``folder`` as rule
    native_program does (``perfgrid noise`` run alone, before any pipeline); none without
    a C compiler (the pairs then say so)."""
    compiler = os.environ.get("CC") or "cc"
    built: dict[str, str] = {}
    if not shutil.which(compiler):
        return built
    for side in (s for pair in pairs.values() for s in (pair.a, pair.b)):
        program = jobs.native_program(experiments.get(side.experiment), side.point)
        if (not program or program in built
                or os.access(layout.native_binary(program), os.X_OK)):
            continue
        out = folder / program
        cmd = jobs.native_command(compiler, str(PACKAGE / jobs.native_sources()[program]),
                                  str(out))
        subprocess.run(lifetime.command(cmd), check=True)
        built[program] = str(out)
    return built


def main(config: dict[str, Any], out: str, blocks: int,
         planned: tuple[dict[str, NoisePair], dict[str, str]],
         values: int = measuring.VALUES, warmups: int = measuring.WARMUPS, seed: int = 0,
         lock: str | None = None) -> dict[str, Any]:
    """Measure the ``planned`` pairs (and skipped ones: plan.json's ``noise``) under the
    benchmarks' lock, so that no job measures beside them; write ``out``. ``config``
    (validated, :func:`perfgrid.pipeline.settings.validated`) says where the fixtures'
    files and C programs are.

    C programs the pairs need and the run has not built are compiled into a temporary
    folder first.
    """
    measuring.check_counts(blocks, values)
    lifetime.watch_snakemake()
    layout = Layout.for_host(config["host"], config.get("results", "results"))
    with tempfile.TemporaryDirectory(prefix="perfgrid-noise-bin-") as tmp:
        programs = build_programs(planned[0], layout, Path(tmp))
        pairs, skipped = runnable(*planned, config, layout, programs)
        measured = measuring.measure_all(pairs, blocks, values, warmups, seed, lock)
    data = noisestats.summary(measured, pairs, skipped)
    write_json(out, data)
    for line in noisestats.describe(data):
        print(line)
    return data
