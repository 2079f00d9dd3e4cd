"""What one benchmark job needs, asked of its experiment: its input files and options.

The rule files know no experiment: workflow/rules/benchmark.smk makes one rule of the
same shape for each registered experiment, and its input and params functions
(perfgrid.pipeline.glue) call these. "The C program only for native points, the Erlang modules
only for erlang points" is decided here, once, from what the experiment declares.

The programs run besides Python are built each on its own (rules/programs.smk), so that
editing one experiment's program reruns that experiment's jobs only: an experiment names
its C program (``native_program``) and Erlang module (``erlang_module``), whose sources
lie in its package (``experiments/<name>/native/``, ``experiments/<name>/erlang/``); a
native or erlang point's job takes them as input and gets them as ``--option
binary=PATH`` and ``--option beams=DIR``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from perfgrid import experiments
from perfgrid.design.codeinputs import code_inputs
from perfgrid.experiments.base import Experiment, Point
from perfgrid.kit.paths import ERLANG_SOURCES, NATIVE_SOURCES, PACKAGE, Layout

#: the Erlang module every experiment's module uses
ERLANG_UTIL = "pg_util"
#: the header every C program includes, under ``src/perfgrid/``
NATIVE_HEADER = f"{NATIVE_SOURCES}/perfgrid.h"

F = TypeVar("F", bound=Callable[..., Any])


def native_program(experiment: Experiment, point: Point) -> str | None:
    """The C program that runs ``point`` (a native point of an experiment that has one)."""
    if experiment.native_program and experiment.runtime(point) == "native":
        return experiment.native_program
    return None


def erlang_modules(experiment: Experiment, point: Point) -> list[str]:
    """The Erlang modules ``point`` loads (an erlang point of an experiment that has one)."""
    if experiment.erlang_module and experiment.runtime(point) == "erlang":
        return [ERLANG_UTIL, experiment.erlang_module]
    return []


def native_sources() -> dict[str, str]:
    """Each C program's source under ``src/perfgrid/``, found in its experiment's package
    (rule native_program builds them)."""
    found = (experiments.get(name) for name in experiments.available())
    return {exp.native_program: source for exp in found
            if exp.native_program and (source := exp.native_source())}


def erlang_sources() -> dict[str, str]:
    """Each Erlang module's source under ``src/perfgrid/``: the shared ``pg_util``, then each
    experiment's module, found in its package (rule erlang_beam compiles them)."""
    found = (experiments.get(name) for name in experiments.available())
    return {ERLANG_UTIL: f"{ERLANG_SOURCES}/{ERLANG_UTIL}.erl",
            **{exp.erlang_module: source for exp in found
               if exp.erlang_module and (source := exp.erlang_source())}}


def native_command(compiler: str, source: str, output: str) -> list[str]:
    """The command that builds one C program as rule native_program does: the shared
    header's folder on the include path (``-I``)."""
    return [compiler, "-O2", "-Wall", "-pthread", "-I", str(PACKAGE / NATIVE_SOURCES),
            "-o", output, source]


def inputs(experiment: Experiment, point: Point, config: dict[str, Any], layout: Layout,
           src: str) -> dict[str, list[str]]:
    """Named input files of ``point``'s job: what it declares, its code, program and modules.

    ``src`` is the path of ``src/perfgrid`` as the workflow sees it.
    """
    out = {name: [str(path)] for name, path in
           experiment.extra_inputs(point, config, layout).items()}
    out["workload"] = workload(experiment, src)
    program = native_program(experiment, point)
    out["binary"] = [str(layout.native_binary(program))] if program else []
    out["beams"] = [f"{layout.erlang_beams}/{m}.beam" for m in erlang_modules(experiment, point)]
    return out


def workload(experiment: Experiment, src: str) -> list[str]:
    """The code a benchmark job of ``experiment`` runs (perfgrid.design.codeinputs): the harness
    (perfgrid.measure.bench), the counting pass and every module of the experiment's package but
    its analysis (some run as processes of their own, ``python -m``), with all they import
    and the data files they name."""
    return list(_workload(experiment.name, src))


@functools.cache
def _workload(name: str, src: str) -> tuple[str, ...]:
    """:func:`workload`, once per experiment: Snakemake asks it for each of ~1,000 jobs."""
    modules = [f"perfgrid.{path.removesuffix('.py').removesuffix('/__init__').replace('/', '.')}"
               for path in experiments.get(name).sources()]
    # the counting pass runs as a process of its own (counters.PASS_MODULE): no import
    # leads to it
    return tuple(code_inputs(src, "perfgrid.measure.bench", "perfgrid.measure.counting_pass",
                             *modules))


def merged_inputs(points: Iterable[tuple[Experiment, Point]], config: dict[str, Any],
                  layout: Layout, src: str) -> dict[str, list[str]]:
    """The named inputs of several points' jobs as one job's (a claim block, the noise
    profile): each name's files in the order first met, each file once."""
    out: dict[str, dict[str, None]] = {}
    for experiment, point in points:
        for name, files in inputs(experiment, point, config, layout, src).items():
            out.setdefault(name, {}).update(dict.fromkeys(files))
    return {name: list(files) for name, files in out.items()}


def options(experiment: Experiment, point: Point, config: dict[str, Any],
            layout: Layout) -> dict[str, str]:
    """``point``'s ``--option`` values: the experiment's, then its program and modules."""
    out = dict(experiment.job_options(point, config.get(experiment.name) or {}, config, layout))
    program = native_program(experiment, point)
    if program:
        out["binary"] = str(layout.native_binary(program))
    if erlang_modules(experiment, point):
        out["beams"] = str(layout.erlang_beams)
    return out


def signature_once(func: F) -> F:
    """``func`` (an input or params function) with its parameters recorded on it once.

    Snakemake looks a function's signature up (``inspect.signature``) each time it
    calls it: some 7,500 look-ups for the full config's ~950 benchmark jobs, about
    0.1 s of an up-to-date dry run. Its ``overwrite_function_params`` records the
    same parameters on the function once instead. Where Snakemake lacks it, ``func``
    is returned untouched.
    """
    try:
        from snakemake.common import overwrite_function_params
    except ImportError:
        return func
    overwrite_function_params(func, inspect.signature(func).parameters)
    return func
