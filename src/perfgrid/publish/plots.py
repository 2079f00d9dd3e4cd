"""An experiment's figures from its table: its analysis module's plots and the scaling fits.

The plots rule (``perfgrid.pipeline.cli plots``) draws them, and so does a report rendered again
from an archive (perfgrid.pipeline.rerender).
"""

from __future__ import annotations

from pathlib import Path


def write_plots(experiment: str, table_path: Path, out: Path) -> list[Path]:
    """Draw an experiment's figures from its table into the folder ``out`` (written whole,
    then renamed into place): the plots rule's work, and perfgrid.pipeline.rerender's."""
    from perfgrid.analyse.aggregate import load_table
    from perfgrid.analyse.analysis import module

    table = load_table(table_path)  # its side tables' lists joined back
    tmp = out.with_name(f".{out.name}.tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    from perfgrid import experiments
    from perfgrid.analyse import scaling

    declared = experiments.get(experiment)
    # an experiment whose every point was skipped has an empty table, and no figures
    written = [] if table.empty else module(experiment).plot(table, tmp, declared)
    # every experiment with a worker axis: Amdahl and USL fits (scaling.csv) and their figure,
    # up to the CPUs the run's jobs recorded (not this machine's: plots may run elsewhere)
    written += scaling.write(table, declared.axes, tmp, experiment,
                             cpus=scaling.recorded_cpus(table))
    tmp.rename(out)
    return written
