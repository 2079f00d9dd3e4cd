"""Command-line entry points: what the Snakemake rules run, and ``perfgrid`` for users."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfgrid.kit.atomic import write_json, write_text


def _machine(args: argparse.Namespace) -> None:
    from perfgrid.measure import machine

    write_json(args.output, machine.snapshot(dict(args.fixture)))


def _table(args: argparse.Namespace) -> None:
    from perfgrid.analyse import aggregate

    table = aggregate.build_table(args.experiment, args.results)
    aggregate.write_table(table, args.output)  # and its side tables beside it
    print(f"{args.experiment}: {len(table)} rows -> {args.output}")


def _plots(args: argparse.Namespace) -> None:
    from perfgrid.publish.plots import write_plots

    out = Path(args.out_dir)
    written = write_plots(args.experiment, Path(args.table), out)
    print(f"{args.experiment}: {len(written)} figures -> {out}")


def _report(args: argparse.Namespace) -> None:
    """Two forms: ``report ARCHIVE -o DIR`` (from an archive alone) and the pipeline's
    ``report --root ... --experiments ... --html ... --md ...``."""
    if args.archive is not None:
        from perfgrid.pipeline import rerender

        given = [f"--{k.replace('_', '-')}" for k in ("root", "experiments", "html", "md")
                 if getattr(args, k) is not None]
        if given or args.out is None:
            raise ValueError(f"report ARCHIVE takes -o DIR and none of {', '.join(given)}"
                             if given else "report ARCHIVE needs -o DIR (a new or empty "
                             "folder for the tables, plots and report)")
        rerender.from_archive(Path(args.archive), Path(args.out))
        return
    from perfgrid.publish import report

    missing = [f"--{k}" for k in ("root", "experiments", "html", "md")
               if getattr(args, k) is None]
    if missing or args.out is not None:
        raise ValueError(f"report needs {', '.join(missing)} (or: report ARCHIVE -o DIR)"
                         if missing else "-o DIR goes with an archive: report ARCHIVE -o DIR")
    report.main(Path(args.root), args.experiments, args.html, args.md, args.cv_threshold,
                dict(args.fixture_facts), args.noise_profile)


def _noise(args: argparse.Namespace) -> None:
    import yaml

    from perfgrid.design import model, plan
    from perfgrid.kit.paths import REPO, Layout
    from perfgrid.measure import noiseprofile as measuring
    from perfgrid.pipeline import config_errors, noiseprofile, settings

    if args.config_json:
        where, raw = "--config-json", json.loads(args.config_json)
    else:
        where = Path(args.config or REPO / "config" / "config.yaml")
        raw = yaml.safe_load(where.read_text())
    try:
        cfg = settings.validated(raw or {}, check_disk=False)
    except config_errors.ConfigError as err:
        raise ValueError(f"{where}: {err}") from None
    blocks = cfg["noise"]["profile"]["blocks"] if args.blocks is None else args.blocks
    if blocks == 0:
        raise ValueError(f"{where}: noise.profile.blocks is 0 (no profile); pass --blocks N")
    layout = Layout.for_host(cfg["host"], cfg.get("results", "results"))
    # the plan's pairs (rule noise_profile passes plan.json's noise entry), else planned here
    planned = (model.noise_from_json(json.loads(args.pairs)) if args.pairs
               else plan.noise_pairs(cfg, layout))
    noiseprofile.main(cfg, args.out or str(layout.noise_profile), blocks, planned,
                      values=measuring.VALUES if args.values is None else args.values,
                      warmups=measuring.WARMUPS if args.warmups is None else args.warmups,
                      seed=args.seed,
                      lock=args.lock or str(layout.bench_lock))


def _archive(args: argparse.Namespace) -> None:
    from perfgrid.publish import archive

    out = archive.create(Path(args.root), Path(args.output))
    print(f"archive: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    # the line to quote in a paper, also in <archive>.sha256 (sha256sum -c reads it)
    print(f"archive: sha256 {archive.sidecar(out).read_text().split()[0]} "
          f"(written to {archive.sidecar(out)})")


def _verify(args: argparse.Namespace) -> None:
    from perfgrid.publish import archive

    raise SystemExit(archive.main_verify(args.archives))


def _extract(args: argparse.Namespace) -> None:
    from perfgrid.publish import archive

    print(archive.extract(Path(args.archive), Path(args.target)))


def _compare(args: argparse.Namespace) -> None:
    from perfgrid.publish import compare

    result = compare.compare(args.a, args.b, Path(args.out))
    for name, table in result["tables"].items():
        print(f"{name}: {len(table)} points compared")
    print(f"{result['significant']} of {result['testable']} testable points significant "
          f"(BH q <= {compare.Q}); {len(result['changes'])} claims changed verdict")
    print(f"comparison written to {args.out}")


def _gallery(args: argparse.Namespace) -> None:
    from perfgrid.publish import gallery

    data = gallery.gallery(args.sources, Path(args.out))
    print(f"gallery: {len(data['claims'])} claims on {len(data['hosts'])} machines "
          f"({', '.join(data['hosts'])}) -> {Path(args.out) / 'index.html'}")


def _aa(args: argparse.Namespace) -> None:
    """Run one config twice under two labels and compare: the machine's noise floor."""
    import subprocess

    from perfgrid.kit import lifetime
    from perfgrid.publish import compare

    results = Path(args.results)
    for side in ("a", "b"):
        cmd = [sys.executable, "-m", "snakemake", "--cores", str(args.cores),
               "--config", f"host={args.label}-{side}", f"results={args.results}"]
        if args.configfile:
            cmd[3:3] = ["--configfile", args.configfile]
        print("perfgrid aa: " + " ".join(cmd), flush=True)
        done = subprocess.run(lifetime.command(cmd + list(args.snakemake_args)), check=False)
        if done.returncode != 0:
            raise SystemExit(f"perfgrid aa: run {side} failed (snakemake exit "
                             f"{done.returncode}); nothing compared")
    out = Path(args.out or results / "compare" / f"aa-{args.label}")
    result = compare.compare(str(results / f"{args.label}-a"), str(results / f"{args.label}-b"),
                             out)
    if not result["testable"]:  # a share of nothing is no noise floor: say why, exit 1
        why = ("no grid point has a table row in both runs" if not result["points"] else
               f"each of the {result['points']} points compared has a side with one value "
               f"(one process of one value); measure more processes or values")
        raise SystemExit(f"perfgrid aa: no testable points: {why}; written to {out}")
    share = result["significant"] / result["testable"]
    print(f"A/A: {result['significant']} of {result['testable']} testable points "
          f"({share:.1%}) significant after Benjamini-Hochberg at q = {compare.Q}; "
          f"{len(result['changes'])} claims changed verdict; written to {out}")
    for _, change in result["changes"].iterrows():
        print(f"  {change['experiment']} [{change['runtime']}] {change['hypothesis']}: "
              f"{change['verdict_a']} -> {change['verdict_b']}")


def _aa_judge(args: argparse.Namespace) -> None:
    """``aa RUN_A RUN_B``: two runs judged claim by claim on their estimates (perfgrid.publish.aa).
    Exit status 0 whatever it finds: the judging is information, not a test."""
    from perfgrid.publish import aa
    from perfgrid.publish.gallery import SameRun

    a, b = args.snakemake_args
    out = Path(args.out or Path(args.results) / "compare" / f"aa-{aa.label(a)}-{aa.label(b)}")
    try:
        result = aa.main(a, b, out)
    except SameRun as err:  # a run against itself: a usage error, exit 2
        print(f"perfgrid aa: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"perfgrid aa: A = {a} ({result['claims'][0]} claims), "
          f"B = {b} ({result['claims'][1]} claims)")
    print(result["text"])
    print(f"table written to {result['path']}")


def _aa_command(args: argparse.Namespace) -> None:
    """``aa RUN_A RUN_B`` judges two result sets; ``aa [options] [-- snakemake args]``
    runs the config twice first (:func:`_aa`)."""
    runs = args.snakemake_args
    run_options = (args.configfile is not None or args.label != "aa" or args.cores != 2)
    if len(runs) == 2 and not any(r.startswith("-") for r in runs) and not run_options:
        _aa_judge(args)
    else:
        _aa(args)


def _pool(args: argparse.Namespace) -> None:
    """``pool RUN RUN ...``: several runs of one machine pooled per claim
    (perfgrid.publish.pooling).
    Exit 2 where two sources are one run, 1 for another error."""
    from perfgrid.publish import pooling
    from perfgrid.publish.gallery import SameRun

    try:
        result = pooling.main(args.runs, Path(args.out))
    except ValueError as err:
        print(f"perfgrid pool: {err}", file=sys.stderr)
        raise SystemExit(2 if isinstance(err, SameRun) else 1) from None
    counts = ", ".join(f"{n} {v}" for v, n in sorted(result["counts"].items()))
    print(f"perfgrid pool: {len(args.runs)} runs, {len(result['table'])} claims "
          f"(seed and project: {counts}); written to {result['path']}")


def _record(args: argparse.Namespace) -> None:
    """``record RUN``: a run's claims added to the user's records (perfgrid.publish.recording)."""
    from perfgrid.publish import recording

    try:
        path, rows = recording.record(args.run, args.to)
    except (OSError, ValueError) as err:
        raise SystemExit(f"perfgrid record: {err}") from None
    print(f"perfgrid record: {rows} claims of {args.run} added to {path}")


def _summary(args: argparse.Namespace) -> None:
    from perfgrid.publish import compare

    roots = compare.hosts_with_tables(args.results)
    compare.summary(roots, args.out_md, args.out_html)
    print(f"summary: {len(roots)} hosts -> {args.out_md}, {args.out_html}")


def _used_config(args: argparse.Namespace) -> None:
    import yaml

    write_text(args.output, yaml.safe_dump(json.loads(args.config), sort_keys=True))


def _skipped(args: argparse.Namespace) -> None:
    import yaml

    from perfgrid.design import planning
    from perfgrid.pipeline import settings

    cfg = settings.effective(yaml.safe_load(Path(args.config).read_text()), check_disk=False)
    points = planning.skipped(cfg)
    write_json(args.output, points)
    print(f"skipped: {len(points)} points -> {args.output}")


def _name_value(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as a pair (a fixture's name and its path)."""
    name, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> None:
    from perfgrid.measure import fixtures

    parser = argparse.ArgumentParser(prog="perfgrid", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    for fixture in fixtures.all_kinds():  # each fixture's maker (perfgrid.measure.fixtures)
        p = sub.add_parser(fixture.name, help=fixture.help)
        fixture.add_arguments(p)
        p.set_defaults(func=fixture.make)

    p = sub.add_parser("machine", help="write a psutil snapshot of this machine")
    p.add_argument("output")
    p.add_argument("--fixture", type=_name_value, action="append", default=[],
                   metavar="NAME=PATH", help="a fixture's path: its file system is recorded")
    p.set_defaults(func=_machine)

    p = sub.add_parser("table", help="aggregate raw pyperf results into one table")
    p.add_argument("experiment")
    p.add_argument("output")
    p.add_argument("results", nargs="*")
    p.set_defaults(func=_table)

    p = sub.add_parser("plots", help="draw an experiment's figures from its table")
    p.add_argument("experiment")
    p.add_argument("table")
    p.add_argument("out_dir")
    p.set_defaults(func=_plots)

    p = sub.add_parser("report", help="write report.html and report.md: from an archive "
                       "alone (report ARCHIVE -o DIR), or the pipeline's (--root ...)")
    p.add_argument("archive", nargs="?", help="an archive (perfgrid archive): verified, then "
                   "its tables, plots and report rebuilt from its raw results into -o DIR")
    p.add_argument("-o", "--out", help="with ARCHIVE: a new or empty folder")
    p.add_argument("--root", help="the pipeline's form: results/<host>")
    p.add_argument("--experiments", nargs="+")
    p.add_argument("--html")
    p.add_argument("--md")
    p.add_argument("--cv-threshold", type=float, default=0.05)
    p.add_argument("--fixture-facts", type=_name_value, action="append", default=[],
                   metavar="NAME=PATH", help="a fixture's sidecar JSON (perfgrid.measure.fixtures)")
    p.add_argument("--noise-profile", default="none",
                   help="the run's noise.json (perfgrid noise); none: not measured")
    p.set_defaults(func=_report)

    p = sub.add_parser("noise", help="measure this machine's noise level by level on "
                       "pairs of points the claims compare (perfgrid.pipeline.noiseprofile)")
    p.add_argument("--config", help="the run's config: its experiments' pairs, their "
                   "options and results/<host>/ (default config/config.yaml)")
    p.add_argument("--config-json", help="the run's config as JSON text, in place of --config")
    p.add_argument("--pairs", help="the plan's noise entry as JSON text (plan.json's noise; "
                   "default: planned from the config)")
    p.add_argument("--blocks", type=int, help="blocks, each both sides of each pair in "
                   "fresh processes, at least 2 (default: the config's noise.profile.blocks)")
    p.add_argument("--values", type=int, help="values per process, at least 2 (default 5)")
    p.add_argument("--warmups", type=int, help="warm-up values per process (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the order within blocks")
    p.add_argument("--out", help="the JSON to write (default results/<host>/noise.json)")
    p.add_argument("--lock", help="held while measuring, as benchmark jobs hold it "
                   "(default results/<host>/.bench.lock)")
    p.set_defaults(func=_noise)

    p = sub.add_parser("archive", help="pack a result set with code, config and a manifest")
    p.add_argument("root", help="results/<host>")
    p.add_argument("output", help="the .tar.gz to write")
    p.set_defaults(func=_archive)

    p = sub.add_parser("verify", help="check archives against their SHA-256 manifest")
    p.add_argument("archives", nargs="+")
    p.set_defaults(func=_verify)

    p = sub.add_parser("extract", help="extract an archive safely into a folder")
    p.add_argument("archive")
    p.add_argument("target")
    p.set_defaults(func=_extract)

    p = sub.add_parser("compare", help="compare two result sets (folders or archives)")
    p.add_argument("a", help="results/<host> or an archive")
    p.add_argument("b", help="results/<host> or an archive")
    p.add_argument("--out", default="results/compare", help="output folder")
    p.set_defaults(func=_compare)

    p = sub.add_parser("gallery", help="one static site for two or more machines: every "
                       "claim on every machine, pooled over them (folders or archives)")
    p.add_argument("sources", nargs="+", help="results/<host> folders or archives")
    p.add_argument("-o", "--out", required=True, help="the site's folder (new, empty, or an "
                   "earlier gallery)")
    p.set_defaults(func=_gallery)

    p = sub.add_parser("pool", help="pool two or more runs of one machine into one verdict per "
                       "claim, runs as the unit (random effects; perfgrid.publish.pooling)")
    p.add_argument("runs", nargs="+", help="results/<host> folders or archives, one per run")
    p.add_argument("--out", default="results/compare/pool", help="folder for pooled.csv")
    p.set_defaults(func=_pool)

    p = sub.add_parser("aa", help="judge two runs of one commit claim by claim on their "
                       "estimates (aa RUN_A RUN_B, perfgrid.publish.aa); or run one config twice "
                       "and compare (aa [--label ...]): the noise floor of this machine",
                       description="With two result sets (RUN_A RUN_B: results/<host> folders "
                       "holding claims.csv, or archives), judge them claim by claim: Welch's t on "
                       "the difference of the estimates (log, or logit for shares) against "
                       "both runs' within-run errors and the between-run component, "
                       "Benjamini-Hochberg at q = 0.05 over the seed and project claims "
                       "(sanity checks apart), readings that flip (contradiction or "
                       "neighbour); writes <out>/aa.csv and exits 0; a run against itself or "
                       "its copy is refused (exit 2). Without them, run the config twice "
                       "under two labels and compare the runs.")
    p.add_argument("--configfile", help="config to run (default: config/config.yaml)")
    p.add_argument("--label", default="aa", help="results land in <results>/<label>-a and -b")
    p.add_argument("--results", default="results", help="the config's results folder")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--out", help="comparison folder (default <results>/compare/aa-<label>; "
                   "with RUN_A RUN_B: <results>/compare/aa-<A>-<B>, holding aa.csv)")
    p.add_argument("snakemake_args", nargs="*", metavar="RUN_A RUN_B | SNAKEMAKE_ARG",
                   help="two result sets to judge (folders or archives); or, after --, "
                   "arguments passed on to snakemake")
    p.set_defaults(func=_aa_command)

    p = sub.add_parser("record", help="add a run's claims to your records, from which the "
                       "between-run component of later runs of its machine kind and design "
                       "is estimated (perfgrid.publish.recording)")
    p.add_argument("run", help="a results/<host> folder or an archive of a run")
    p.add_argument("--to", help="the record file to add to (default: records.csv beside the "
                   "result folder, results/records.csv; never the installed package)")
    p.set_defaults(func=_record)

    p = sub.add_parser("summary", help="every host's rates side by side")
    p.add_argument("results", help="the results folder: every <host> in it that has a table")
    p.add_argument("--out-md", required=True)
    p.add_argument("--out-html", required=True)
    p.set_defaults(func=_summary)

    p = sub.add_parser("used-config", help="write the config as used (YAML), for provenance")
    p.add_argument("output", help="config.used.yaml")
    p.add_argument("--config", required=True, help="the config after validation, as JSON")
    p.set_defaults(func=_used_config)

    p = sub.add_parser("skipped", help="write the grid points this machine cannot run, "
                       "each with the reason")
    p.add_argument("config", help="the config as used (config.used.yaml)")
    p.add_argument("output", help="skipped.json")
    p.set_defaults(func=_skipped)

    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (ValueError, OSError, json.JSONDecodeError) as err:
        from perfgrid.publish.archive import printable  # a name in the message is shown, not obeyed

        print(f"perfgrid {args.command}: {printable(str(err))}", file=sys.stderr)
        raise SystemExit(1) from err


if __name__ == "__main__":
    main()
