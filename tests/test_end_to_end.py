"""The shipped entry points end to end, where that is cheap: a dry run of the full config
(every job the plan holds, and nothing else measured), and ``make bench``'s script."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from perfgrid.design import jobs
from perfgrid.design.plan import build
from perfgrid.kit.paths import Layout
from perfgrid.pipeline import settings

from helpers import FULL, REPO, SNAKEMAKE, copy_workflow, job_counts, missing_tools


@pytest.mark.pipeline
def test_a_dry_run_of_the_full_config_lists_every_planned_job(tmp_path: Path):
    """``snakemake -n`` with config/config.yaml, in a copy of the workflow: one job per
    sweep point of each experiment and one per claim block, as perfgrid.design.plan builds them
    here without Snakemake, the programs compiled once each, one report; nothing run."""
    root = copy_workflow(tmp_path, config=None)
    done = subprocess.run([*SNAKEMAKE, "-n", "--cores", "16"], cwd=root, capture_output=True,
                          text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    counts = job_counts(out)
    cfg = settings.validated(copy.deepcopy(FULL), check_disk=False)
    plan = build(cfg, Layout.for_host(cfg["host"], cfg["results"]))
    # a claim block's rounds run as one job of its rule; a sweep point as a job of its own
    expected = Counter(job.rule for job in plan.jobs if job.rule not in plan.blocks)
    expected.update({name: 1 for name in plan.blocks})
    benchmark = {rule: n for rule, n in counts.items() if rule in expected}
    assert benchmark == dict(expected)
    # every experiment measured: by its own rule, or its claim blocks' (ring_round_1, ...)
    assert {rule.split("_round_")[0] for rule in benchmark} == set(cfg["experiments"])
    assert any(re.fullmatch(r"\w+_round_\d+(_part_\d+)?", r) for r in benchmark)
    assert counts["native_program"] == len(jobs.native_sources())
    assert counts["erlang_beam"] == len(jobs.erlang_sources())
    assert counts["table"] == counts["plots"] == len(cfg["experiments"])
    assert (counts["all"], counts["report"], counts["noise_profile"]) == (1, 1, 1)
    total = int(re.search(r"^total\s+(\d+)$", out, re.MULTILINE).group(1))
    assert total == sum(counts.values())
    assert "This was a dry-run" in out
    assert not (root / "results").exists()


@pytest.mark.serial
def test_make_bench_measures_every_fact_and_prints_it_beside_its_target():
    """``make bench``'s script with one dry run for its median (``--runs 1``): every fact
    measured and printed with its target. No speed is asserted: that is the script's
    job, run by hand; this checks that each fact can still be measured."""
    done = subprocess.run([sys.executable, str(REPO / "tests" / "speed_facts.py"), "--runs",
                           "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["fact", "measured", "target", "of", "target", "what"]
    facts = {"syscall harness": "x", "erlang spawn": "/s", "http deadline": "s",
             "dry run": "s"}
    missing = missing_tools("erl", "erlc")
    for name, unit in facts.items():
        [line] = [line for line in lines if line.startswith(name)]
        if name == "erlang spawn" and missing:  # said as an error, counted as missed
            assert " error " in line, line
            continue
        measured = re.match(rf"{name}\s+([\d.e+]+){re.escape(unit)}\s+(<=|>=) ", line)
        assert measured and float(measured.group(1)) > 0, line
