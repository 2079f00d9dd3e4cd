"""``perfgrid record``: a run's claims added to the user's records, from which the
between-run component and the within-run priors of later runs are estimated
(perfgrid.analyse.betweenrun).

A record row is a claim of one run: its estimate, its within-run standard error on the
scale it was judged on and that error's df, the method its interval rests on, and what
identifies the run: the digest of its raw files (``run_id``), when it started, the commit,
the machine kind and boot, the design (what its plan measured) and the ledger it was
judged by. The shipped records are package data and never written; a user's go to
``results/records.csv`` (beside the result folders, where the report looks for them) or
``--to``. A run already recorded (the same raw files, or the same start on the same boot)
is refused, whatever its label or folder.
"""

from __future__ import annotations

import datetime
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from perfgrid.analyse import betweenrun
from perfgrid.kit.paths import PACKAGE


def run_id(root: Path) -> str:
    """The digest of a result set's raw files (perfgrid.publish.gallery.run_identity), short:
    the same run read from a folder, its copy or its archive has one id."""
    from perfgrid.publish.gallery import run_identity

    return run_identity(Path(root)).get("raw", "")[:16]


def _package_dir() -> Path:
    return PACKAGE


def rows_of(root: Path, claims: Any) -> Any:
    """A run's claims (a claims.csv frame) as record rows (:data:`betweenrun.COLUMNS`):
    those with an estimate and a within-run standard error; ValueError where the run
    lacks what a record needs."""
    import pandas as pd

    from perfgrid.design.model import design_digest, read
    from perfgrid.kit.paths import Layout

    layout = Layout(Path(root))
    for need, path in (("machine.json", layout.machine), ("run.json", layout.run_record),
                       ("plan.json", layout.plan)):
        if not path.is_file():
            raise ValueError(f"{root}: no {need}; a record needs the run's machine, start "
                             f"and plan")
    missing = [c for c in ("se", "df", "scale") if c not in claims]
    if missing:
        raise ValueError(f"{root}: its claims.csv has no {', '.join(missing)} column(s): "
                         f"written by an older perfgrid, whose intervals cannot be read "
                         f"back exactly; judge it again with this one (perfgrid report)")
    machine = json.loads(layout.machine.read_text())
    run = json.loads(layout.run_record.read_text())
    plan = read(layout.plan)
    started = run.get("started")
    if not isinstance(started, int | float):
        raise ValueError(f"{layout.run_record}: no start time")
    argv = [str(a) for a in run.get("argv", [])]
    config = (argv[argv.index("--configfile") + 1] if "--configfile" in argv
              and argv.index("--configfile") + 1 < len(argv) else "config/config.yaml")
    common = {"run_id": run_id(layout.root), "started": float(started),
              "date": datetime.datetime.fromtimestamp(started, datetime.UTC).date().isoformat(),
              "commit": run.get("commit", ""), "machine_kind": betweenrun.machine_kind(machine),
              "boot_id": machine.get("boot_id", ""), "design": design_digest(plan),
              "ledger": run.get("ledger", ""), "config": Path(config).name}
    if not common["run_id"]:
        raise ValueError(f"{root}: no raw result files to identify the run by")
    rows = []
    for _, c in claims.iterrows():
        value, se, df = (float(c.get(k, math.nan)) for k in ("value", "se", "df"))
        if not (value > 0 and se > 0 and df > 0):
            continue
        scale = str(c.get("scale") or "log")
        rows.append({**common, "experiment": c["experiment"], "runtime": c["runtime"],
                     "hypothesis": c["hypothesis"],
                     "quantity": betweenrun.quantity_of(str(c.get("unit", "")), scale),
                     "scale": scale, "value": value, "se": se, "df": df,
                     "method": str(c.get("basis", "")), "verdict": c["verdict"]})
    return pd.DataFrame(rows, columns=betweenrun.COLUMNS)


def record(run: str, to: str | None = None) -> tuple[str, int]:
    """Add run ``run`` (a ``results/<host>`` folder or an archive) to the records at ``to``
    (default: ``records.csv`` beside its result folder; never inside the installed
    package). Refuses a run already recorded there or shipped. Returns (path, rows)."""
    import pandas as pd

    from perfgrid.kit.atomic import write_text
    from perfgrid.publish import aa, compare

    with tempfile.TemporaryDirectory(prefix="perfgrid-record-") as scratch:
        folder = compare.resolve(run, Path(scratch)) if Path(run).is_file() else Path(run)
        claims = aa.claims_of(str(folder), Path(scratch) / "claims")
        rows = rows_of(folder, claims)
        default = (Path(run).resolve().parent if Path(run).is_dir() else Path.cwd() / "results")
    target = Path(to) if to else default / betweenrun.USER_RECORDS
    if target.resolve().is_relative_to(_package_dir()):
        raise ValueError(f"{target}: inside the installed perfgrid package, whose shipped "
                         f"records are read-only; record under results/ (the default) or "
                         f"name another --to")
    if rows.empty:
        raise ValueError(f"{run}: no claim with an estimate and a within-run error to record")
    first = rows.iloc[0]
    for where in (betweenrun.shipped_path(), target):
        old = pd.read_csv(where, encoding="utf-8-sig") if where.is_file() else pd.DataFrame()
        if old.empty:
            continue
        same = old["run_id"].astype(str) == str(first["run_id"])
        same |= ((old["boot_id"].astype(str) == str(first["boot_id"]))
                 & (pd.to_numeric(old["started"], errors="coerce") == first["started"]))
        if same.any():
            raise ValueError(f"{run}: this run is already recorded in {where} (run "
                             f"{first['run_id']}, started {first['date']}): a run counts "
                             f"once, whatever its label or folder")
    kept = target.read_text(encoding="utf-8-sig") if target.is_file() else ""
    if kept and kept.splitlines()[0].split(",") != betweenrun.COLUMNS:
        raise ValueError(f"{target}: not a perfgrid record (its header is not "
                         f"{','.join(betweenrun.COLUMNS)})")
    body = rows.to_csv(index=False, header=not kept)
    write_text(target, kept + ("" if not kept or kept.endswith("\n") else "\n") + body)
    betweenrun.clear()
    return str(target), len(rows)

