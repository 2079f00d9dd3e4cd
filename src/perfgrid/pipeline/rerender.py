"""A report from an archive alone: ``perfgrid report ARCHIVE -o DIR``.

For a reader who never ran the benchmarks. The archive is checked and extracted by
``archive.extract`` (the very checks of ``perfgrid verify``; a refused archive leaves
nothing behind), then only the extracted copy is read: its raw results, machine.json,
config.used.yaml, skipped.json, run.json and noise.json. The archived tables, plots and
report are set aside unread; the code that rebuilds them is THIS perfgrid's (not the
archive's own copy of the workflow, which ``perfgrid extract`` gives for that), and the
report says so in its provenance. Each table is rebuilt from every raw result of its
experiment under the paths the run gave them (``config.used.yaml``'s ``results``), so
its bootstrap seeds, and so its intervals and verdicts, are the run's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from perfgrid.analyse import aggregate
from perfgrid.kit.paths import Layout
from perfgrid.measure import fixtures
from perfgrid.pipeline import config_errors, settings
from perfgrid.publish import archive, gitinfo, report

#: what the pipeline derives from the raw results: set aside, made again, and what DIR gets
DERIVED = ("tables", "plots", "report.md", "report.html", "claims.png", "claims.svg")


def _run_git(top: Path) -> dict[str, str]:
    """The run's commit and dirtiness from the archive's GIT file."""
    facts = {"commit": "unknown", "dirty": "unknown"}
    path = top / "GIT"
    if path.is_file():
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key in facts and value:
                facts[key] = value
    return facts


def _config(root: Path) -> dict[str, Any]:
    """The archived config as used, derived values filled in by this perfgrid's rules."""
    path = root / "config.used.yaml"
    if not path.is_file():
        raise ValueError(f"{path.name}: not in the archive ({root.name}): no config to "
                         f"render the report with")
    used = yaml.safe_load(path.read_text()) or {}
    used["host"] = root.name  # null in the config: the run's hostname, this folder's name
    try:
        return settings.effective(used, check_disk=False)
    except config_errors.ConfigError as err:
        raise ValueError(f"the archive's config.used.yaml: {err}") from None


def rebuild(root: Path, cfg: dict[str, Any], tabulated: set[str]) -> list[str]:
    """Tables and plots of ``root`` (an extracted ``results/<host>``) from its raw results;
    the experiments rebuilt: those the run ``tabulated``, in the config's order."""
    from perfgrid.publish.plots import write_plots

    recorded = Layout.for_host(root.name, cfg["results"]).root
    names = []
    for name in cfg["experiments"]:
        if name not in tabulated:
            continue  # not run (an experiment this perfgrid added since, say)
        raw = root / "raw" / name
        paths = sorted(str(p) for p in raw.rglob("*.json")) if raw.is_dir() else []
        table = aggregate.build_table(
            name, paths, recorded_as=lambda p: str(recorded / Path(p).relative_to(root)))
        layout = Layout(root)
        aggregate.write_table(table, layout.table(name))  # and its side tables
        (root / "plots").mkdir(exist_ok=True)
        write_plots(name, layout.table(name), layout.plot_dir(name))
        names.append(name)
    return names


def from_archive(path: Path, out: Path) -> Path:
    """Verify ``path``, then write its tables, plots and report into ``out`` (new or empty).

    Everything is made in a scratch folder beside ``out`` and moved into place at the
    end: a refused archive or a failure leaves ``out`` as it was.
    """
    path, out = Path(path), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: exists and is not an empty folder; the report goes into a "
                         f"new one (nothing there is overwritten)")
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = archive.file_sha256(path) if path.is_file() else ""
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.report-", dir=out.parent))
    try:
        top = archive.extract(path, scratch / "archive")
        root = archive.host_folder(top, top.name)
        cfg = _config(root)
        aside = scratch / "set-aside"  # the archived outputs: only their names are read
        aside.mkdir()
        for name in DERIVED:
            if (root / name).exists():
                os.rename(root / name, aside / name)
        names = rebuild(root, cfg, {p.stem for p in Layout(aside).tables()})
        run_root = Layout.for_host(root.name, cfg["results"]).root
        facts = {}  # the fixtures' sidecars the archive holds (those under results/<host>)
        for fixture in fixtures.needed(cfg):
            sidecar = Path(fixtures.facts_file(cfg, fixture))
            if sidecar.is_relative_to(run_root):
                facts[fixture.name] = str(root / sidecar.relative_to(run_root))
        noise = root / "noise.json"
        blocks = cfg.get("noise", {}).get("profile", {}).get("blocks", 0)
        this = gitinfo.facts()
        notes = {"rendered_from": (
            f"archive {path.name} (sha256 {digest}) by perfgrid commit {this['commit'][:12]} "
            f"(dirty: {this['dirty']}), not the archive's own code: tables rebuilt from the "
            f"archive's raw results, with its machine.json and config.used.yaml")}
        report.main(root, names, str(root / "report.html"), str(root / "report.md"),
                    float(cfg["noise"]["cv_threshold"]), facts,
                    str(noise) if blocks and noise.exists() else "none",
                    git=_run_git(top), notes=notes)
        stage = scratch / "out"
        stage.mkdir()
        for name in DERIVED:
            if (root / name).exists():
                os.rename(root / name, stage / name)
        if out.exists():  # an empty folder the caller made: filled, never replaced
            for child in sorted(stage.iterdir()):
                os.rename(child, out / child.name)
        else:
            os.rename(stage, out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"report: {path} verified; tables, plots and report rebuilt from its raw results "
          f"by this perfgrid (commit {this['commit'][:12]}), not the archive's own code")
    print(f"report: {len(names)} experiments -> {out}")
    return out
