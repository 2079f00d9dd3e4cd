"""Topology from synthetic sysfs trees of four real shapes, and the plans on each.

The expected plans are written out by hand from each shape's numbering
(tests/topology_trees.py writes them and says how Linux numbers them), for 1, 2, N/2, N and 2N
workers, N the shape's logical CPUs.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from perfgrid.kit import binding, topology

import topology_trees


@functools.cache
def trees() -> Path:
    """The four trees, written once per test session into a temporary folder."""
    base = Path(tempfile.mkdtemp(prefix="perfgrid-topology-"))
    atexit.register(shutil.rmtree, base, True)
    return topology_trees.build(base)


def shape(name: str, allowed: list[int] | None = None) -> topology.Topology:
    root = trees() / name
    if allowed is None:
        allowed = topology.online_cpus(root)
    return topology.read(root, allowed=allowed)


def flatten(plan: list[list[int]]) -> list[int]:
    assert all(len(cpus) == 1 for cpus in plan), plan
    return [cpus[0] for cpus in plan]


# --- hand-computed orders -------------------------------------------------------------
# vm2_nosmt: CPUs 0 and 1, two cores, one L3
VM2 = {"compact": [0, 1], "spread": [0, 1]}
# desktop_8c16t: core c holds CPUs c and c + 8
DESKTOP = {"compact": [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15],
           "spread": list(range(16))}
# server_2s16c_smt: socket 0 = CPUs 0-15 (+ siblings 32-47), socket 1 = 16-31 (+ 48-63)
SERVER_SOCKET0 = [x for i in range(16) for x in (i, i + 32)]
SERVER_SOCKET1 = [x for i in range(16, 32) for x in (i, i + 32)]
SERVER = {"compact": SERVER_SOCKET0 + SERVER_SOCKET1,
          "spread": [x for i in range(16) for x in (i, i + 16)]
          + [x for i in range(32, 48) for x in (i, i + 16)]}
# epyc_64c_8l3: L3 group g = CPUs 8g..8g+7; spread takes one core of each group in turn
EPYC = {"compact": list(range(64)),
        "spread": [8 * g + k for k in range(8) for g in range(8)]}

SHAPES = {"vm2_nosmt": (2, VM2), "desktop_8c16t": (16, DESKTOP),
          "server_2s16c_smt": (64, SERVER), "epyc_64c_8l3": (64, EPYC)}

# the plans' CPUs for 1, 2, N/2, N, 2N workers, spelled out for the small counts
EXPECTED_TWO = {
    "vm2_nosmt": {"compact": [0, 1], "spread": [0, 1]},
    "desktop_8c16t": {"compact": [0, 8], "spread": [0, 1]},         # siblings / two cores
    "server_2s16c_smt": {"compact": [0, 32], "spread": [0, 16]},    # one core / two sockets
    "epyc_64c_8l3": {"compact": [0, 1], "spread": [0, 8]},          # one L3 / two L3s
}
EXPECTED_HALF = {
    "vm2_nosmt": {"compact": [0], "spread": [0]},
    "desktop_8c16t": {"compact": [0, 8, 1, 9, 2, 10, 3, 11], "spread": list(range(8))},
    "server_2s16c_smt": {"compact": SERVER_SOCKET0,  # all of socket 0, siblings included
                         "spread": [x for i in range(16) for x in (i, i + 16)]},  # every core
    "epyc_64c_8l3": {"compact": list(range(32)),  # four L3 groups filled
                     "spread": [8 * g + k for k in range(4) for g in range(8)]},  # 4 per L3
}


@pytest.mark.parametrize("name", SHAPES)
def test_plans_for_1_2_half_n_and_2n_workers(name):
    n, orders = SHAPES[name]
    topo = shape(name).usable()
    assert len(topo) == n
    everything = list(range(n))
    for bind in ("compact", "spread"):
        order = orders[bind]
        assert sorted(order) == everything
        assert flatten(binding.plan(bind, 1, topo)) == [0]
        assert flatten(binding.plan(bind, 2, topo)) == EXPECTED_TWO[name][bind]
        assert flatten(binding.plan(bind, max(n // 2, 1), topo)) == EXPECTED_HALF[name][bind]
        assert flatten(binding.plan(bind, n, topo)) == order
        assert flatten(binding.plan(bind, 2 * n, topo)) == order + order  # wraps around
    for workers in (1, 2, max(n // 2, 1), n, 2 * n):
        assert binding.plan("single", workers, topo) == [[0]] * workers
        assert binding.plan("none", workers, topo) == [everything] * workers


@pytest.mark.parametrize("name, counts", [
    ("vm2_nosmt", {"packages": 1, "dies": 1, "cores": 2, "threads_per_core": 1,
                   "l3_groups": ["0-1"], "numa_nodes": {"0": "0-1"}}),
    ("desktop_8c16t", {"packages": 1, "dies": 1, "cores": 8, "threads_per_core": 2,
                       "l3_groups": ["0-15"], "numa_nodes": {"0": "0-15"}}),
    ("server_2s16c_smt", {"packages": 2, "dies": 2, "cores": 32, "threads_per_core": 2,
                          "l3_groups": ["0-15,32-47", "16-31,48-63"],
                          "numa_nodes": {"0": "0-15,32-47", "1": "16-31,48-63"}}),
    # core_id restarts in each die: 64 cores, not 8
    ("epyc_64c_8l3", {"packages": 1, "dies": 8, "cores": 64, "threads_per_core": 1,
                      "l3_groups": [f"{8 * g}-{8 * g + 7}" for g in range(8)],
                      "numa_nodes": {"0": "0-63"}}),
])
def test_summary_counts_each_level(name, counts):
    summary = shape(name).summary()
    assert {k: summary[k] for k in counts} == counts


@pytest.mark.parametrize("name, bind, expected", [
    ("server_2s16c_smt", "compact", {"shares_core": True, "shares_l3": True,
                                     "shares_node": True}),
    ("server_2s16c_smt", "spread", {"shares_core": False, "shares_l3": False,
                                    "shares_node": False}),
    ("desktop_8c16t", "spread", {"shares_core": False, "shares_l3": True,
                                 "shares_node": True}),
    ("epyc_64c_8l3", "compact", {"shares_core": False, "shares_l3": True,
                                 "shares_node": True}),
    ("epyc_64c_8l3", "spread", {"shares_core": False, "shares_l3": False,
                                "shares_node": True}),
    ("vm2_nosmt", "none", {"shares_core": True, "shares_l3": True, "shares_node": True}),
])
def test_placement_of_two_workers(name, bind, expected):
    topo = shape(name).usable()
    assert binding.placement(binding.plan(bind, 2, topo), topo) == expected


def test_one_worker_shares_nothing():
    topo = shape("server_2s16c_smt").usable()
    assert not any(binding.placement(binding.plan("none", 1, topo), topo).values())


def test_a_restricted_set_plans_only_its_cpus():
    # as under `taskset -c 0,16,32` on the two-socket server
    topo = shape("server_2s16c_smt", allowed=[0, 16, 32])
    usable = topo.usable()
    assert [c.cpu for c in usable] == [0, 16, 32]
    assert flatten(binding.plan("compact", 3, usable)) == [0, 32, 16]
    assert flatten(binding.plan("spread", 3, usable)) == [0, 16, 32]
    assert binding.plan("none", 2, usable) == [[0, 16, 32]] * 2
    summary = topo.summary()
    assert summary["allowed"] == [0, 16, 32] and len(summary["online"]) == 64
    assert summary["allowed_cores"] == 2 and summary["allowed_numa_nodes"] == 2


def test_restriction_names_what_restricts(tmp_path):
    topo = shape("desktop_8c16t", allowed=[1])
    (tmp_path / "cgroup").write_text("0::/job\n")
    (tmp_path / "fs/job").mkdir(parents=True)
    (tmp_path / "fs/job/cpuset.cpus.effective").write_text("1\n")
    said = topology.restriction(topo, {"SLURM_JOB_ID": "42", "SLURM_CPUS_ON_NODE": "1"},
                                tmp_path / "cgroup", tmp_path / "fs")
    assert said["restricted"] and said["allowed"] == 1 and said["online"] == 16
    assert said["by"] == ["cpuset cgroup (1)", "SLURM job 42 (1 CPUs on this node)"]
    free = topology.restriction(shape("desktop_8c16t"), {}, tmp_path / "none", tmp_path)
    assert free == {"restricted": False, "allowed": 16, "online": 16,
                    "allowed_list": "0-15", "by": []}
    masked = topology.restriction(topo, {}, tmp_path / "none", tmp_path)
    assert masked["by"] == ["affinity mask (taskset, numactl or a parent's sched_setaffinity)"]


def test_core_ids_that_repeat_without_being_siblings_are_distinct_cores(tmp_path):
    # some VMs report core_id 0 for every vCPU, each its own sibling list
    for cpu in range(4):
        folder = tmp_path / f"devices/system/cpu/cpu{cpu}/topology"
        folder.mkdir(parents=True)
        (folder / "core_id").write_text("0\n")
        (folder / "physical_package_id").write_text("0\n")
        (folder / "core_cpus_list").write_text(f"{cpu}\n")
    (tmp_path / "devices/system/cpu/online").write_text("0-3\n")
    topo = topology.read(tmp_path, allowed=[0, 1, 2, 3])
    assert topo.summary()["cores"] == 4
    assert binding.placement([[0], [1]], topo.usable())["shares_core"] is False


def test_missing_files_fall_back_to_one_core_per_cpu(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))  # nothing under this "sysfs": these are online
    topo = topology.read(tmp_path, allowed=cpus)
    assert [c.cpu for c in topo.usable()] == cpus
    assert topo.summary()["cores"] == len(cpus)
    assert flatten(binding.plan("spread", 2, topo.usable())) == (cpus * 2)[:2]


@pytest.mark.parametrize("text, cpus", [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
                                        ("5", [5]), ("", [])])
def test_cpu_list_format_round_trips(text, cpus):
    assert topology.parse_cpu_list(text) == cpus
    assert topology.format_cpu_list(cpus) == text


def test_this_machine_reads():
    topo = topology.read()
    assert set(topo.allowed) <= {c.cpu for c in topo.cpus}
    assert topo.summary()["cores"] >= 1


# -- the CPU limit of workers: auto (topology.cpu_limit; perfgrid.pipeline.settings words its
# errors)


def test_the_cpu_limit_lives_beside_the_topology_and_settings_words_its_error(tmp_path):
    """topology.cpu_limit is the whole answer (tests/test_auto_workers.py checks it through
    settings); a bad variable is a ValueError here, the same message as a ConfigError
    there, and a long value is cut."""
    from perfgrid.pipeline import config_errors, settings

    proc, root = tmp_path / "cgroup", tmp_path / "fs"
    proc.write_text("0::/\n")
    assert topology.cpu_limit({}, {0, 2, 5}, proc, root) == (
        3, "the affinity mask (CPUs 0,2,5)")
    assert topology.cpu_limit({}, {0, 2, 5}, proc, root) == settings.auto_cpu_limit(
        {}, {0, 2, 5}, proc, root)
    assert settings.AUTO_CPUS_ENV == topology.AUTO_CPUS_ENV == "PERFGRID_AUTO_CPUS"
    bad = {topology.AUTO_CPUS_ENV: "9" * 400}
    with pytest.raises(ValueError) as plain:
        topology.cpu_limit(bad)
    assert type(plain.value) is ValueError
    assert plain.value.args[0].endswith("more characters left out)")
    with pytest.raises(config_errors.ConfigError) as worded:
        settings.auto_cpu_limit(bad)
    assert str(worded.value) == str(plain.value)
