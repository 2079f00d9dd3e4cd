"""``workers: auto``: the worker axes follow the CPUs a run may use."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from perfgrid.design import planning
from perfgrid.measure import machine
from perfgrid.pipeline import config_errors, configschema, settings
from perfgrid.publish.report import run_facts

from helpers import REPO

BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
#: the worker lists config.yaml had before auto: on 2 CPUs auto must give the same grid
BEFORE = {"file_read": [1, 2, 4, 8, 16], "syscall": [1, 2, 4, 8, 16], "ring": [2, 4, 8]}


def effective(config: dict, cpus: int | None, monkeypatch: pytest.MonkeyPatch) -> dict:
    if cpus is None:
        monkeypatch.delenv(settings.AUTO_CPUS_ENV, raising=False)
    else:
        monkeypatch.setenv(settings.AUTO_CPUS_ENV, str(cpus))
    config = copy.deepcopy(config)
    configschema.validate(config)
    return settings.effective(config, check_disk=False)


def points(cfg: dict) -> dict[str, set]:
    return {e: {tuple(sorted(p.items())) for p in planning.grid(cfg, e)}
            for e in cfg["experiments"]}


def test_auto_follows_the_allowed_cpus_not_cpu_count(monkeypatch):
    monkeypatch.delenv(settings.AUTO_CPUS_ENV, raising=False)
    original = os.sched_getaffinity(0)
    one = min(original)
    os.sched_setaffinity(0, {one})  # as under `taskset -c <one>`
    try:
        assert settings.auto_cpus() == 1
        cfg = effective({"syscall": {"workers": "auto"}, "ring": {"workers": "auto"}}, None,
                        monkeypatch)
    finally:
        os.sched_setaffinity(0, original)
    assert cfg["syscall"]["workers"] == [1, 2]
    assert cfg["ring"]["workers"] == [2]  # a ring needs two members


@pytest.mark.parametrize("cpus, counts, ring, http", [
    (2, [1, 2, 4, 8, 16], [2, 4, 8], [1, 2, 4]),
    (16, [1, 2, 4, 8, 16, 32], [2, 4, 8, 16, 32], [1, 2, 4, 8, 16, 32]),
    (64, [1, 2, 4, 8, 16, 32, 64, 128], [2, 4, 8, 16, 32, 64, 128],
     [1, 2, 4, 8, 16, 32, 64, 128]),
])
def test_auto_beside_counts_in_a_list(monkeypatch, cpus, counts, ring, http):
    cfg = effective(BASE, cpus, monkeypatch)
    assert cfg["file_read"]["workers"] == counts  # [auto, 8, 16]
    assert cfg["syscall"]["workers"] == counts
    assert cfg["ring"]["workers"] == ring  # [auto, 8], from 2
    assert cfg["http"]["extra_grids"][0]["workers"] == http  # auto
    assert cfg["file_read"]["erlang"]["workers"] == [2, 16]  # lists keep working


def test_on_two_cpus_the_full_grid_is_the_one_before_auto(monkeypatch):
    explicit = copy.deepcopy(BASE)
    for name, workers in BEFORE.items():
        explicit[name]["workers"] = workers
    # 1, 2 and 4; the main grid has 1 and 2 at 100,000 requests, this grid one connection
    explicit["http"]["extra_grids"][0]["workers"] = [1, 2, 4]
    assert points(effective(BASE, 2, monkeypatch)) == points(
        effective(explicit, 2, monkeypatch))


def test_the_grid_grows_with_the_cpus(monkeypatch):
    counts = {cpus: sum(map(len, points(effective(BASE, cpus, monkeypatch)).values()))
              for cpus in (2, 16, 64)}
    assert counts[2] < counts[16] < counts[64]


def test_schema_defaults_are_auto(monkeypatch):
    cfg = effective({}, 4, monkeypatch)
    assert cfg["http"]["workers"] == [1, 2, 4, 8]
    assert cfg["ring"]["workers"] == [2, 4, 8]
    assert cfg["syscall"]["workers"] == cfg["file_read"]["workers"] == [1, 2, 4, 8, 16]


def test_the_config_as_used_names_the_counts(monkeypatch):
    monkeypatch.setenv(settings.AUTO_CPUS_ENV, "2")
    config = copy.deepcopy(BASE)
    settings.validated(config, check_disk=False)
    assert config["ring"]["workers"] == [2, 4, 8]  # config.used.yaml: no auto left
    assert config["http"]["extra_grids"][0]["workers"] == [1, 2, 4]


@pytest.mark.parametrize("value", ["0", "many", "-2", "99999", "\u00b2", "\u0663", "+3", "3.0"])
def test_a_bad_cpu_count_names_the_variable(monkeypatch, value):
    """ASCII digits only: '\u00b2' (superscript two) made int() fail without naming the
    variable, and '\u0663' (Arabic-Indic three) counted as 3."""
    monkeypatch.setenv(settings.AUTO_CPUS_ENV, value)
    with pytest.raises(config_errors.ConfigError) as info:
        settings.validated(copy.deepcopy(BASE), check_disk=False)
    assert str(info.value).startswith(f"{settings.AUTO_CPUS_ENV}={value!r} ")
    assert "allowed: a whole number from 1 to 2048 in the digits 0-9, or unset" in str(
        info.value)


# -- what limits the count: the affinity mask, a cgroup CPU quota, the variable ----------

#: a non-contiguous affinity mask: three CPUs, not CPUs 0-2
MASK = {0, 2, 5}


def fake_cgroup(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """(a /proc/self/cgroup, a /sys/fs/cgroup root) holding ``files`` (path -> text)."""
    proc, root = tmp_path / "cgroup", tmp_path / "fs"
    proc.write_text(membership)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return proc, root


@pytest.mark.parametrize("membership, files, cpus, set_by", [
    ("0::/\n", {}, 3, "the affinity mask (CPUs 0,2,5)"),
    ("0::/box\n", {"box/cpu.max": "max 100000"}, 3, "the affinity mask (CPUs 0,2,5)"),
    ("0::/box\n", {"box/cpu.max": "200000 100000"}, 2,
     "the cgroup CPU quota ({root}/box/cpu.max: 200000 100000)"),
    ("0::/box\n", {"box/cpu.max": "150000 100000"}, 2,  # 1.5 CPUs: two run at times
     "the cgroup CPU quota ({root}/box/cpu.max: 150000 100000)"),
    ("0::/box\n", {"box/cpu.max": "400000 100000"}, 3, "the affinity mask (CPUs 0,2,5)"),
    ("0::/box/job\n", {"box/cpu.max": "100000 100000", "box/job/cpu.max": "max 100000"}, 1,
     "the cgroup CPU quota ({root}/box/cpu.max: 100000 100000)"),  # an ancestor's quota
    ("0::/\n", {"cpu.max": "200000 100000"}, 2,  # a container's own cgroup namespace
     "the cgroup CPU quota ({root}/cpu.max: 200000 100000)"),
    ("4:cpu,cpuacct:/box\n", {"cpu,cpuacct/box/cpu.cfs_quota_us": "50000",
                               "cpu,cpuacct/box/cpu.cfs_period_us": "100000"}, 1,
     "the cgroup CPU quota ({root}/cpu,cpuacct/box/cpu.cfs_quota_us: 50000 us per 100000 us)"),
    ("4:cpu,cpuacct:/box\n", {"cpu,cpuacct/box/cpu.cfs_quota_us": "-1",
                               "cpu,cpuacct/box/cpu.cfs_period_us": "100000"}, 3,
     "the affinity mask (CPUs 0,2,5)"),
    ("0::/box\n", {"box/cpu.max": "garbage"}, 3, "the affinity mask (CPUs 0,2,5)"),
])
def test_auto_takes_the_smaller_of_the_mask_and_a_cgroup_quota(tmp_path, membership, files,
                                                                cpus, set_by):
    proc, root = fake_cgroup(tmp_path, membership, files)
    assert settings.auto_cpu_limit({}, MASK, proc, root) == (cpus, set_by.format(root=root))


def test_the_variable_wins_and_travels_with_what_set_it(tmp_path):
    proc, root = fake_cgroup(tmp_path, "0::/\n", {"cpu.max": "100000 100000"})
    environ = {settings.AUTO_CPUS_ENV: "8"}
    assert settings.auto_cpu_limit(environ, MASK, proc, root) == (
        8, f"the {settings.AUTO_CPUS_ENV} variable")
    settings.export_auto_cpus(environ)  # as the workflow does where it parses the config
    assert environ == {settings.AUTO_CPUS_ENV: "8",
                       settings.AUTO_CPUS_SOURCE_ENV: f"the {settings.AUTO_CPUS_ENV} variable"}
    unset: dict[str, str] = {}
    cpus = settings.export_auto_cpus(unset)  # a job's parse then finds both set
    assert unset == {settings.AUTO_CPUS_ENV: str(cpus),
                     settings.AUTO_CPUS_SOURCE_ENV: settings.auto_cpu_limit({})[1]}
    assert settings.auto_cpu_limit(unset) == (cpus, settings.auto_cpu_limit({})[1])


def test_machine_json_and_the_report_say_what_set_the_count(monkeypatch):
    monkeypatch.setenv(settings.AUTO_CPUS_ENV, "2")
    monkeypatch.setenv(settings.AUTO_CPUS_SOURCE_ENV,
                       "the cgroup CPU quota (/sys/fs/cgroup/cpu.max: 200000 100000)")
    snapshot = machine.snapshot()
    assert snapshot["auto_workers"] == {
        "cpus": 2, "counts": [1, 2, 4],
        "set_by": "the cgroup CPU quota (/sys/fs/cgroup/cpu.max: 200000 100000)"}
    text, _ = run_facts.topology_table(snapshot)
    assert ("workers: auto stood for 1, 2, 4 (built for 2 CPU(s), set by the cgroup CPU quota "
            "(/sys/fs/cgroup/cpu.max: 200000 100000); a ring's from 2)") in text


@pytest.mark.parametrize("overrides, needle", [
    ({"workers": "aut"}, "syscall.workers: 'aut' is not allowed; allowed: one of ['auto']"),
    ({"workers": [0]}, "syscall.workers[0]: 0 is less than the minimum of 1"),
    ({"workers": ["auto", "auto"]}, "syscall.workers: ['auto', 'auto'] has non-unique"),
    ({"workers": []}, "syscall.workers: [] should be non-empty"),
    ({"workers": 4}, "syscall.workers: 4 is not allowed; allowed: one of ['auto'] or a list"),
])
def test_bad_worker_axes_name_the_key_and_what_is_allowed(monkeypatch, overrides, needle):
    config = copy.deepcopy(BASE)
    config["syscall"].update(overrides)
    with pytest.raises(config_errors.ConfigError) as info:
        settings.validated(config, check_disk=False)
    assert needle in str(info.value)
