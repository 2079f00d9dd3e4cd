"""The pipeline on a real SLURM cluster, through snakemake-executor-plugin-slurm.

Needs a SLURM whose idle node is this machine (the test's temporary folder
must be visible to the jobs): `.ci/run` starts one with `.ci/slurm-up.sh`
before the tests and stops it with `.ci/slurm-down.sh` after. Without one,
every test here skips and says why; nothing here starts or stops daemons.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from pathlib import Path

import pandas as pd
import pyperf
import pytest

from helpers import SNAKEMAKE, copy_workflow

pytestmark = [pytest.mark.pipeline, pytest.mark.slurm]

CONFIG = {
    "experiments": ["file_read"],
    # measure at once, no noise profile: the point is where, not how fast
    "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
    "measure": {"counters": "none"},  # no counting passes: not what this test is about
    "testfile": {"size": "8MiB", "seed": 3},
    "file_read": {
        "variants": ["read", "pread_parallel"],
        "block_sizes": [65536],
        "parallel_block_sizes": [1048576],
        # two benchmark jobs (read, two parallel readers): each SLURM job costs ~12 s of
        # the plugin's status polling, whatever it runs
        "workers": [2],
        "bindings": ["none"],
        "caches": ["warm"],
        "measure": {"processes": 1, "values": 2, "warmups": 0, "loops": 1, "target_ci": None,
                    "claims": {"target_ci": None, "rounds": 1}},
    },
}
AXES = ["variant", "cache", "binding", "workers", "block_size"]
# No slurmdbd on the CI cluster: poll squeue (slurm-up.sh sets MinJobAge=3600)
# and skip the account guess (it asks sacct).
SLURM_OPTIONS = ["--slurm-status-command", "squeue",
                 "--slurm-init-seconds-before-status-checks", "1", "--slurm-no-account"]


def _idle_local_partition() -> tuple[str | None, str]:
    """(partition with an idle node that is this machine, or None; why not)."""
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        return None, "snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')"
    if shutil.which("sinfo") is None:
        return None, "no sinfo: SLURM is not installed here (as root: bash .ci/slurm-up.sh)"
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%P|%T"], capture_output=True,
                             text=True, timeout=15)
    except subprocess.TimeoutExpired:
        return None, "sinfo did not answer within 15 s (no slurmctld running?)"
    if out.returncode != 0:
        said = "; ".join(out.stderr.split("\n")[:2]).strip()[:200]
        return None, f"sinfo failed, no SLURM controller answers ({said})"
    here = {socket.gethostname().split(".")[0], "localhost"}
    rows = [line.split("|") for line in out.stdout.split()]
    for node, partition, state in rows:
        if node in here and state == "idle":
            return partition.rstrip("*"), ""
    return None, (f"no idle SLURM node on this machine ({sorted(here)}); sinfo says: "
                  f"{out.stdout.strip()[:200] or 'no nodes'}")


@pytest.fixture(scope="module")
def partition() -> str:
    name, why = _idle_local_partition()
    if name is None:
        pytest.skip(why)
    return name


def _command(tree: Path, host: str, *args: str) -> list[str]:
    """Snakemake on the copied workflow's tiny.yaml, its results under ``results/<host>``."""
    return [*SNAKEMAKE, "--configfile", str(tree / "tiny.yaml"), "--config", f"host={host}",
            *args]


def _snakemake(tree: Path, host: str, *args: str, timeout: float = 600
               ) -> subprocess.CompletedProcess:
    return subprocess.run(_command(tree, host, *args), cwd=tree, capture_output=True,
                          text=True, timeout=timeout)


def _resources(partition: str) -> list[str]:
    return ["--default-resources", f"slurm_partition={partition}", "runtime=10", "mem_mb=1000"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory, partition) -> Path:
    """A copy of the workflow after a local run (host `local`) and a SLURM run (host `slurm`)."""
    root = copy_workflow(tmp_path_factory.mktemp("slurmtree"), CONFIG)
    # the local run beside the SLURM run, which mostly waits on the plugin's status polls
    # (their outputs differ, so Snakemake lets both run in one folder)
    local = subprocess.Popen(_command(root, "local", "--cores", "2"), cwd=root,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        slurm = _snakemake(root, "slurm", "--profile", "profiles/slurm",
                           *_resources(partition), *SLURM_OPTIONS)
        said, _ = local.communicate(timeout=600)
    finally:
        local.kill()
    assert local.returncode == 0, said[-4000:]
    output = slurm.stdout + slurm.stderr
    assert slurm.returncode == 0, output[-4000:]
    (root / "slurm.out").write_text(output)
    return root


def _metadata(tree: Path, host: str) -> list[dict]:
    paths = sorted((tree / "results" / host / "raw").rglob("*.json"))
    assert paths, f"no results under results/{host}/raw"
    return [pyperf.Benchmark.load(str(p)).get_metadata() for p in paths]


def test_every_benchmark_job_ran_as_a_slurm_job(tree):
    metas = _metadata(tree, "slurm")
    ids = [m.get("perfgrid_slurm_job_id") for m in metas]
    assert all(i and i.isdigit() for i in ids), ids
    assert len(set(ids)) == len(ids), f"two results from one SLURM job: {ids}"
    for meta in metas:
        assert meta["perfgrid_node"] == meta["hostname"].split(".")[0] or \
            meta["perfgrid_node"] == "localhost"
    # the plugin named each submission; squeue still knows the jobs (MinJobAge) and says
    # each COMPLETED. A job it no longer knows ended in an unknown state: that fails too
    # (no sacct to ask: the CI cluster has no accounting, .ci/slurm-up.sh)
    submitted = set(re.findall(r"submitted with SLURM jobid (\d+)",
                               (tree / "slurm.out").read_text()))
    assert set(ids) <= submitted
    known = subprocess.run(["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i|%T"],
                           capture_output=True, text=True, timeout=15)
    states = dict(line.split("|") for line in known.stdout.split())
    unknown = sorted(set(ids) - set(states))
    assert not unknown, (f"squeue no longer knows jobs {unknown}: how they ended is unknown "
                         f"({known.stderr.strip()[:200]})")
    assert {states[i] for i in ids} == {"COMPLETED"}, states
    # a local run records no SLURM job
    assert not any("perfgrid_slurm_job_id" in m for m in _metadata(tree, "local"))


def test_benchmark_jobs_never_overlapped(tree):
    spans = sorted((m["perfgrid_started"], m["perfgrid_finished"])
                   for m in _metadata(tree, "slurm"))
    assert len(spans) == 2
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end


def test_report_has_the_same_structure_as_a_local_run(tree):
    local = pd.read_csv(tree / "results/local/tables/file_read.csv")
    slurm = pd.read_csv(tree / "results/slurm/tables/file_read.csv")
    assert list(slurm.columns) == list(local.columns) + ["node", "slurm_job_id"] or \
        set(slurm.columns) == set(local.columns) | {"node", "slurm_job_id"}
    grid = {tuple(r) for r in slurm[AXES].itertuples(index=False)}
    assert grid == {tuple(r) for r in local[AXES].itertuples(index=False)}
    assert (slurm["rate"] > 0).all()

    def claims(host: str) -> list[list[str]]:
        md = (tree / "results" / host / "report.md").read_text()
        rows = [line.split("|")[1:4] for line in md.splitlines()
                if line.startswith("| file_read |")]
        return [[cell.strip() for cell in row] for row in rows]

    assert claims("slurm") == claims("local")
    assert len(claims("slurm")) >= 1


def test_unknown_partition_fails_before_anything_is_submitted(tree):
    result = _snakemake(tree, "badpartition", "--profile", "profiles/slurm",
                        *_resources("no_such_partition"), *SLURM_OPTIONS, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Invalid partition name specified" in output, output[-3000:]
    assert "submitted with SLURM jobid" not in output
    run_id = re.search(r"SLURM run ID: (\S+)", output).group(1)
    listed = subprocess.run(["squeue", "-h", "--states=all", "--name", run_id],
                            capture_output=True, text=True, timeout=15)
    assert listed.stdout.strip() == ""
    assert not (tree / "results/badpartition/raw").exists()


def test_missing_jobs_setting_fails_before_anything_is_submitted(tree):
    result = _snakemake(tree, "nojobs", "--executor", "slurm", *SLURM_OPTIONS, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "--jobs" in output, output[-3000:]
    assert "SLURM run ID" not in output
    assert not [p for p in (tree / "results").rglob("*") if "nojobs" in p.parts and p.is_file()]
