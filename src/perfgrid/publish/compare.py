"""Compare two result sets (two hosts, two runs, or two archives) point by point.

For every grid point present in both: the rate ratio B/A with its 95 %
interval (the two sides' hierarchical bootstraps, :mod:`perfgrid.analyse.stats`),
and whether the difference is significant after correcting for the many
points compared at once.

The test is Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) on
the logarithms of the per-process mean times: the worker process is the
unit of replication (values inside one process are not independent), the
logarithm makes a ratio symmetric, and Welch does not assume that two
machines are equally noisy. Mann-Whitney U was not chosen: with two or three
processes per side it cannot reach p < 0.05 at all. Where a side has one
process, its values are used instead (within-process noise only: said in
the ``test`` column); a side with a single value is "not testable". The
p-values of every testable point of every experiment are then adjusted by
Benjamini-Hochberg (``scipy.stats.false_discovery_control``): a point is
"significant" when its adjusted p (q) is at most ``Q``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import pandas as pd
import pyperf
from scipy import stats as sps

from perfgrid import experiments
from perfgrid.analyse import aggregate, analysis, stats
from perfgrid.analyse.analysis import literal, plot_setup, save
from perfgrid.kit import formats
from perfgrid.kit.atomic import write_text
from perfgrid.kit.paths import Layout, every_table
from perfgrid.publish import archive
from perfgrid.publish.report.formatting import md_table
from perfgrid.publish.report.pages import html_page


def resolve(source: str, scratch: Path) -> Path:
    """A result folder (``results/<host>``) from a folder or an archive.

    An archive is read only through ``archive.extract``, which checks it against its
    ``.sha256`` and every member against the manifest first: one that fails
    ``perfgrid verify`` is refused here.
    """
    path = Path(source)
    if path.is_file() and path.name.endswith(".tar.gz"):
        top = archive.extract(path, scratch / path.name.removesuffix(".tar.gz"))
        return archive.host_folder(top, source)
    if not (path / "tables").is_dir():
        raise ValueError(f"{source}: not a result folder (no tables/ inside)")
    return path


#: the false-discovery rate controlled over all the points compared at once
Q = 0.05


def welch(groups_a: list[list[float]], groups_b: list[list[float]]) -> tuple[float, str]:
    """(two-sided p-value, what was tested) for two points' per-process times."""
    def units(groups: list[list[float]]) -> tuple[np.ndarray, bool]:
        groups = [g for g in groups if len(g)]
        if len(groups) >= 2:
            return np.log([np.mean(g) for g in groups]), True
        return np.log(np.concatenate([np.asarray(g, float) for g in groups] or [[]])), False

    ua, per_process_a = units(groups_a)
    ub, per_process_b = units(groups_b)
    if len(ua) < 2 or len(ub) < 2:
        return float("nan"), "not testable (a side has one value)"
    what = ("Welch t, log process means" if per_process_a and per_process_b
            else "Welch t, log values (one process: within-process noise only)")
    if np.ptp(ua) == 0 and np.ptp(ub) == 0:
        return (1.0 if ua[0] == ub[0] else 0.0), what + " (no spread)"
    return float(sps.ttest_ind(ub, ua, equal_var=False).pvalue), what


def _load(file: Path) -> pyperf.Benchmark:
    """One round's pyperf result; a file that is not one is an error naming it and why."""
    try:
        return pyperf.Benchmark.load(str(file))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        cause = str(err) or type(err).__name__
        raise ValueError(f"{file}: not a readable pyperf result ({cause})") from None


def _is_note(file: Path) -> bool:
    """Whether ``file`` is the note of a round a format-1 run let go (by a look or the time
    budget, :func:`perfgrid.kit.formats.not_measured`) where its result would be."""
    try:
        return formats.not_measured(file) is not None
    except (OSError, ValueError) as err:
        raise ValueError(f"{file}: cannot be read ({err})") from None


def _groups(path: str, let_go: list[str] | None = None) -> tuple[list[list[float]], float]:
    """Per-process times of one point: its result file, or its folder of rounds.

    Rounds that were let go left a note in their result's place: those are not results,
    and are left out (appended to ``let_go``), as the table that lists the point left
    them out. A point whose every file is such a note is an error naming it.
    """
    files = sorted(Path(path).glob("round=*.json")) if Path(path).is_dir() else [Path(path)]
    if not files:
        raise ValueError(f"{path}: no round=*.json results in this point's folder")
    notes = [file for file in files if _is_note(file)]
    measured = [file for file in files if file not in notes]
    if not measured:
        raise ValueError(f"{path}: every round of this point was let go (not measured), "
                         f"yet a table lists it as measured")
    if let_go is not None:
        let_go += [str(file) for file in notes]
    groups: list[list[float]] = []
    for file in measured:
        bench = _load(file)
        groups += aggregate.process_values(bench)
    work = bench.get_metadata().get("perfgrid_work_per_loop")
    if work is None:
        raise ValueError(f"{measured[-1]}: no perfgrid_work_per_loop in its metadata "
                         f"(not a perfgrid result)")
    return groups, float(work)


def table_columns(name: str) -> list[str]:
    """The columns of an experiment's table that compare reads: refused without them."""
    return [*experiments.get(name).axes, "runtime", "rate", "rate_unit", "result_file"]


def read_table(root: Path, name: str) -> pd.DataFrame:
    """An experiment's table of one result set, checked (:func:`aggregate.check_table`)."""
    return aggregate.read_table(Layout(root).table(name), experiments.get(name).axes,
                                table_columns(name))


def compare_experiment(name: str, a: Path, b: Path,
                       tables: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                       let_go: dict[str, list[str]] | None = None) -> pd.DataFrame:
    """One row per grid point measured in both result sets (q filled in by :func:`adjust`).

    Rate, interval and p-value all come from the raw results; a table whose ``rate`` is
    not the one those give is refused, naming the table and the point. The notes of
    rounds let go, left out, are appended to ``let_go["a"]`` and ``let_go["b"]``.
    """
    let_go = let_go if let_go is not None else {"a": [], "b": []}
    axes = list(experiments.get(name).axes)
    ta, tb = tables or (read_table(a, name), read_table(b, name))
    keep = table_columns(name)
    merged = ta[keep].merge(tb[keep], on=axes + ["runtime", "rate_unit"], suffixes=("_a", "_b"))
    rows = []
    for _, row in merged.iterrows():
        path_a, path_b = _local(a, row["result_file_a"]), _local(b, row["result_file_b"])
        groups_a, work_a = _groups(path_a, let_go.setdefault("a", []))
        groups_b, work_b = _groups(path_b, let_go.setdefault("b", []))
        point = aggregate.point_name(row, axes + ["runtime"])
        for root, side, groups, work in ((a, "a", groups_a, work_a), (b, "b", groups_b, work_b)):
            aggregate.check_rate(row[f"rate_{side}"], groups, work,
                                 f"{Layout(root).table(name)}: point {point}")
        rate_a = stats.rate(groups_a, work_a, stats.seed_for(path_a))
        rate_b = stats.rate(groups_b, work_b, stats.seed_for(path_b))
        ratio = rate_b / rate_a
        bounds = ratio.interval() or (float("nan"), float("nan"))
        p_value, test = welch(groups_a, groups_b)
        rows.append({**{k: row[k] for k in axes + ["runtime"]},
                     "rate_a": rate_a.value, "rate_b": rate_b.value,
                     "ratio_b_over_a": ratio.value,
                     "ratio_ci_low": bounds[0], "ratio_ci_high": bounds[1],
                     "p": p_value, "test": test, "rate_unit": row["rate_unit"]})
    return pd.DataFrame(rows)


def adjust(tables: dict[str, pd.DataFrame], q: float = Q) -> dict[str, pd.DataFrame]:
    """Benjamini-Hochberg over every testable point of all tables: adds q and significance."""
    frames = {n: t.copy() for n, t in tables.items()}
    pvals = [(n, i, p) for n, t in frames.items() if "p" in t for i, p in t["p"].items()
             if np.isfinite(p)]
    adjusted = sps.false_discovery_control([p for _, _, p in pvals]) if pvals else []
    for frame in frames.values():
        if len(frame):
            frame["q"] = np.nan
            frame["significance"] = "not testable"
    for (name, index, _), q_value in zip(pvals, adjusted, strict=True):
        frames[name].loc[index, "q"] = q_value
        frames[name].loc[index, "significance"] = (
            "significant" if q_value <= q else "not significant")
    return frames


def _claims(root: Path, run: Any, name: str, table: pd.DataFrame
            ) -> dict[tuple[str, str], Any]:
    """An experiment's claims on one result set's table, by (runtime, hypothesis), judged
    for its run (betweenrun.run_of)."""
    from perfgrid.analyse import betweenrun

    try:
        with betweenrun.judging(run):
            claims = analysis.claims_of(name, table)
    except KeyError as err:  # a hand-made or cut-down table
        raise ValueError(f"{Layout(root).table(name)}: missing column {err}, which "
                         f"the {name} claims need") from None
    return {(c.runtime, c.hypothesis): c for c in claims}


def verdict_changes(a: Path, b: Path, names: list[str],
                    tables: dict[str, tuple[pd.DataFrame, pd.DataFrame]] | None = None
                    ) -> pd.DataFrame:
    """The claims whose verdict differs between the two result sets."""
    from perfgrid.analyse import betweenrun

    rows = []
    run_a, run_b = betweenrun.run_of(a), betweenrun.run_of(b)  # once per set, not per name
    for name in names:
        ta, tb = (tables or {}).get(name) or (read_table(a, name), read_table(b, name))
        ca, cb = _claims(a, run_a, name, ta), _claims(b, run_b, name, tb)
        for key in ca.keys() & cb.keys():
            if ca[key].verdict != cb[key].verdict:
                rows.append({"experiment": name, "runtime": key[0], "hypothesis": key[1],
                             "verdict_a": ca[key].verdict, "measured_a": ca[key].measured,
                             "verdict_b": cb[key].verdict, "measured_b": cb[key].measured})
    return pd.DataFrame(rows, columns=["experiment", "runtime", "hypothesis", "verdict_a",
                                       "measured_a", "verdict_b", "measured_b"])


def _local(root: Path, recorded: Any) -> str:
    """A result file recorded in a table, found inside this result folder's ``raw/``.

    Tables record paths as the run saw them; only the part after ``raw/`` is kept, and
    one that would leave the folder (absolute, ``..``, no ``raw/``) is an error, so a
    table cannot make ``compare`` read files that are not part of its inputs.
    """
    marker = "/raw/"
    if isinstance(recorded, str) and marker in f"/{recorded}":
        inside = PurePosixPath(f"/{recorded}".rsplit(marker, 1)[1])
        if inside.parts and not inside.is_absolute() and ".." not in inside.parts:
            return str(root / "raw" / inside)
    raise ValueError(f"{root}: result_file {recorded!r} in a table points outside "
                     f"{root / 'raw'}")


def compare(a_src: str, b_src: str, out_dir: Path) -> dict[str, Any]:
    """Write ``compare.md``, ``compare.html``, ``points.csv`` and one plot per experiment."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        a = resolve(a_src, Path(scratch) / "a")
        b = resolve(b_src, Path(scratch) / "b")
        names = [n for n in experiments.available()
                 if Layout(a).table(n).exists() and Layout(b).table(n).exists()]
        read = {n: (read_table(a, n), read_table(b, n)) for n in names}
        let_go: dict[str, list[str]] = {"a": [], "b": []}
        tables = adjust({n: compare_experiment(n, a, b, read[n], let_go) for n in names})
        changes = verdict_changes(a, b, names, read)
    label_a, label_b = a.name, b.name
    points = pd.concat([t.assign(experiment=n) for n, t in tables.items() if len(t)]) \
        if any(len(t) for t in tables.values()) else pd.DataFrame()
    n_sig = int((points["significance"] == "significant").sum()) if len(points) else 0
    n_test = int((points["significance"] != "not testable").sum()) if len(points) else 0
    headline = (f"{n_sig} of {n_test} testable points differ significantly "
                f"(Benjamini-Hochberg q <= {Q}); {len(points)} points compared; "
                f"{len(changes)} claims changed verdict.")
    if let_go["a"] or let_go["b"]:
        headline += (f" Rounds an earlier perfgrid let go (not measured) left out: "
                     f"{len(let_go['a'])} in {label_a}, {len(let_go['b'])} in {label_b}.")
    intro = ("ratio_b_over_a > 1 means B is faster; [ratio_ci_low, ratio_ci_high] is its 95 % "
             "interval. Test: Welch's t on log per-process mean times (log values where a side "
             "has one process), p-values adjusted over all points by Benjamini-Hochberg.")
    lines = [f"# perfgrid comparison: {label_b} over {label_a}\n", headline + "\n", intro + "\n",
             "## Claims whose verdict changed\n",
             md_table(changes) if len(changes) else "None.\n"]
    for name, table in tables.items():
        lines += [f"## {name}\n", md_table(table)]
        if not table.empty:
            written = _ratio_plot(table, label_a, label_b)
            save(written, out_dir, f"{name}_ratio")
    if len(points):
        points.to_csv(out_dir / "points.csv", index=False)
    write_text(out_dir / "compare.md", "\n".join(lines))
    write_text(out_dir / "compare.html", html_page(
        "compare.html.j2", label_a=label_a, label_b=label_b, headline=headline, intro=intro,
        changes=changes, tables=list(tables.items())))
    return {"tables": tables, "changes": changes, "significant": n_sig, "testable": n_test,
            "points": len(points), "not_measured": {k: len(v) for k, v in let_go.items()}}


def _ratio_plot(table: pd.DataFrame, label_a: str, label_b: str):
    """Each point's ratio B/A with its interval, by variant; significant points filled."""
    plot_setup(table)
    import matplotlib.pyplot as plt

    data = table.reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7, 0.25 * len(data) + 1.5))
    ypos = np.arange(len(data))
    lo = (data["ratio_b_over_a"] - data["ratio_ci_low"]).clip(lower=0).fillna(0)
    hi = (data["ratio_ci_high"] - data["ratio_b_over_a"]).clip(lower=0).fillna(0)
    colours = ["tab:red" if s == "significant" else "tab:grey" for s in data["significance"]]
    ax.errorbar(data["ratio_b_over_a"], ypos, xerr=[lo, hi], fmt="none", ecolor="0.6")
    ax.scatter(data["ratio_b_over_a"], ypos, c=colours, zorder=3, s=14)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_yticks(ypos, [literal(f"{r.runtime} {r.variant}") if "variant" in data else str(i)
                         for i, r in data.iterrows()], fontsize=6)
    ax.set_xlabel(literal(f"rate {label_b} / {label_a} (95 % interval; red: significant)"))
    return fig


def hosts_with_tables(results: str | Path) -> list[Path]:
    """The result sets (``<results>/<host>``) under ``results`` that have a table."""
    return sorted({table.parent.parent for table in every_table(results)})


def summary(roots: list[str | Path], md_path: str, html_path: str) -> None:
    """One cross-machine table per experiment: the rate of every point on every host."""
    lines = ["# perfgrid: every host side by side\n"]
    sections = []
    for name in experiments.available():
        frames = []
        for root in roots:
            table_path = Layout(Path(root)).table(name)
            if table_path.exists():
                table = aggregate.read_table(table_path, experiments.get(name).axes,
                                             ["runtime", "rate", "rate_unit"])
                table["host"] = Path(root).name
                frames.append(table)
        if not frames:
            continue
        axes = [a for a in experiments.get(name).axes if a in frames[0]] + ["runtime"]
        wide = pd.concat(frames).pivot_table(index=axes, columns="host", values="rate",
                                             aggfunc="max").reset_index()
        lines += [f"## {name} (rate in {frames[0]['rate_unit'].iloc[0]})\n", md_table(wide)]
        sections.append((name, wide))
    write_text(md_path, "\n".join(lines))
    write_text(html_path, html_page("summary.html.j2", sections=sections))
