"""Compare two result sets (two hosts, or two archives) point by point.

For every grid point present in both, the ratio of rates and whether the
difference is significant by pyperf's own two-sample t-test over the raw
values; points with a single value on a side are marked "not testable".
"""

from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402
import pyperf  # noqa: E402
import seaborn as sns  # noqa: E402
from pyperf._utils import is_significant  # noqa: E402  (pyperf's compare_to test)

from perfgrid import archive, experiments  # noqa: E402
from perfgrid.analysis import save  # noqa: E402
from perfgrid.atomic import write_text  # noqa: E402
from perfgrid.report import md_table  # noqa: E402


def resolve(source: str, scratch: Path) -> Path:
    """A result folder (``results/<host>``) from a folder or an archive.

    An archive is read only through ``archive.extract``, which checks every member
    against the manifest first: one that fails ``perfgrid verify`` is refused here.
    """
    path = Path(source)
    if path.is_file() and path.name.endswith(".tar.gz"):
        top = archive.extract(path, scratch / path.name.removesuffix(".tar.gz"))
        results = top / "results"
        hosts = [p for p in results.iterdir() if p.is_dir()] if results.is_dir() else []
        if len(hosts) != 1:
            raise ValueError(f"{source}: expected one host under results/, "
                             f"found {[h.name for h in hosts]}")
        return hosts[0]
    if not (path / "tables").is_dir():
        raise ValueError(f"{source}: not a result folder (no tables/ inside)")
    return path


def _significance(a: str, b: str) -> tuple[str, float]:
    va = pyperf.Benchmark.load(a).get_values()
    vb = pyperf.Benchmark.load(b).get_values()
    if len(va) < 2 or len(vb) < 2:
        return "not testable", float("nan")
    if sorted(va) == sorted(vb):  # identical samples: the t-test would divide by zero
        return "not significant", 0.0
    try:
        significant, t_score = is_significant(va, vb)
    except ZeroDivisionError:  # both samples constant, but different
        return "not testable", float("nan")
    return ("significant" if significant else "not significant"), t_score


def compare_experiment(name: str, a: Path, b: Path) -> pd.DataFrame:
    """One row per grid point measured in both result sets."""
    axes = list(experiments.get(name).axes)
    ta = pd.read_csv(a / "tables" / f"{name}.csv")
    tb = pd.read_csv(b / "tables" / f"{name}.csv")
    keep = axes + ["runtime", "rate", "rate_unit", "cv", "result_file"]
    merged = ta[keep].merge(tb[keep], on=axes + ["runtime", "rate_unit"], suffixes=("_a", "_b"))
    rows = []
    for _, row in merged.iterrows():
        verdict, t_score = _significance(_local(a, row["result_file_a"]),
                                         _local(b, row["result_file_b"]))
        rows.append({**{k: row[k] for k in axes + ["runtime"]},
                     "rate_a": row["rate_a"], "rate_b": row["rate_b"],
                     "ratio_b_over_a": row["rate_b"] / row["rate_a"],
                     "significance": verdict, "t_score": t_score, "rate_unit": row["rate_unit"]})
    return pd.DataFrame(rows)


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
    """Write ``compare.md``, ``compare.html`` and one plot per experiment to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        a = resolve(a_src, Path(scratch) / "a")
        b = resolve(b_src, Path(scratch) / "b")
        names = [n for n in experiments.available()
                 if (a / "tables" / f"{n}.csv").exists() and (b / "tables" / f"{n}.csv").exists()]
        tables = {n: compare_experiment(n, a, b) for n in names}
    label_a, label_b = a.name, b.name
    lines = [f"# perfgrid comparison: {label_b} over {label_a}\n",
             "ratio_b_over_a > 1 means B is faster. Significance: pyperf's two-sample t-test "
             "(95%) over the raw values; \"not testable\" where a side has one value.\n"]
    html_parts = [f"<h1>perfgrid comparison: {label_b} over {label_a}</h1>"]
    for name, table in tables.items():
        lines += [f"## {name}\n", md_table(table)]
        html_parts += [f"<h2>{name}</h2>", table.to_html(index=False, float_format="%.4g")]
        if not table.empty:
            sns.set_theme(style="whitegrid", context="paper")
            grid = sns.catplot(data=table, x="variant", y="ratio_b_over_a", hue="runtime",
                               kind="strip", height=3.2, aspect=2)
            grid.refline(y=1.0)
            grid.set(yscale="log", ylabel=f"rate {label_b} / {label_a}")
            save(grid.figure, out_dir, f"{name}_ratio")
    write_text(out_dir / "compare.md", "\n".join(lines))
    write_text(out_dir / "compare.html",
               "<!doctype html><meta charset='utf-8'><title>perfgrid comparison</title>"
               + "\n".join(html_parts))
    return tables


def summary(roots: list[str], md_path: str, html_path: str) -> None:
    """One cross-machine table per experiment: the rate of every point on every host."""
    lines = ["# perfgrid: every host side by side\n"]
    html_parts = ["<h1>perfgrid: every host side by side</h1>"]
    for name in experiments.available():
        frames = []
        for root in roots:
            table_path = Path(root) / "tables" / f"{name}.csv"
            if table_path.exists():
                table = pd.read_csv(table_path)
                table["host"] = Path(root).name
                frames.append(table)
        if not frames:
            continue
        axes = [a for a in experiments.get(name).axes if a in frames[0]] + ["runtime"]
        wide = pd.concat(frames).pivot_table(index=axes, columns="host", values="rate",
                                             aggfunc="max").reset_index()
        lines += [f"## {name} (rate in {frames[0]['rate_unit'].iloc[0]})\n", md_table(wide)]
        html_parts += [f"<h2>{name}</h2>", wide.to_html(index=False, float_format="%.4g")]
    write_text(md_path, "\n".join(lines))
    write_text(html_path, "<!doctype html><meta charset='utf-8'><title>perfgrid hosts</title>"
               + "\n".join(html_parts))
