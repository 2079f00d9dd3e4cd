import os
import threading

import pytest

from perfgrid.kit import binding
from perfgrid.kit.binding import Cpu

# two packages, two cores each, two SMT threads per core
TOPO = [Cpu(package=p, core=c, cpu=p * 4 + c + t * 8) for p in (0, 1) for c in (0, 1)
        for t in (0, 1)]


def test_compact_fills_siblings_first():
    assert binding.plan("compact", 4, TOPO) == [[0], [8], [1], [9]]


def test_spread_takes_one_per_core_across_packages_then_siblings():
    assert binding.plan("spread", 8, TOPO) == [[0], [4], [1], [5], [8], [12], [9], [13]]


def test_single_and_none():
    everything = sorted(c.cpu for c in TOPO)
    assert binding.plan("single", 3, TOPO) == [[0], [0], [0]]
    assert binding.plan("none", 2, TOPO) == [everything, everything]


def test_more_workers_than_cpus_wrap_around():
    topo = [Cpu(0, 0, 0), Cpu(0, 1, 1)]
    assert binding.plan("spread", 5, topo) == [[0], [1], [0], [1], [0]]


@pytest.mark.parametrize("bad, workers", [("loose", 1), ("single", 0)])
def test_bad_plan_names_the_key(bad, workers):
    with pytest.raises(ValueError, match="binding|workers"):
        binding.plan(bad, workers, TOPO)


def test_topology_comes_from_allowed_cpus():
    topo = binding.topology()
    assert sorted(c.cpu for c in topo) == sorted(os.sched_getaffinity(0))


def test_pin_in_a_thread_reads_back_its_own_cpu():
    cpu = binding.allowed_cpus()[-1]
    seen: list[list[int]] = []
    thread = threading.Thread(target=lambda: seen.append(binding.pin([cpu])))
    thread.start()
    thread.join()
    assert seen == [[cpu]]
    # the pin stayed with the thread: this one still has every CPU
    assert len(os.sched_getaffinity(0)) == len(binding.allowed_cpus())


@pytest.mark.parametrize("cpus, minimum, counts", [
    (1, 1, [1, 2]), (2, 1, [1, 2, 4]), (6, 1, [1, 2, 4, 6, 12]),
    (16, 1, [1, 2, 4, 8, 16, 32]), (64, 1, [1, 2, 4, 8, 16, 32, 64, 128]),
    (2, 2, [2, 4]), (1, 2, [2]), (12, 2, [2, 4, 8, 12, 24]),
])
def test_auto_workers_double_up_to_the_cpus_then_twice_them(cpus, minimum, counts):
    assert binding.auto_workers(cpus, minimum) == counts


def meta(plan: str, seen: str, runtime: str = "python", key: str = "perfgrid_worker_cpus"):
    return {"perfgrid_binding_plan": plan, key: seen, "perfgrid_runtime": runtime,
            "perfgrid_binding": "spread"}


def test_a_read_back_that_differs_from_the_plan_fails_the_point():
    topo = [Cpu(0, 0, 0), Cpu(0, 1, 1)]
    assert binding.checked_placement(meta("0|1", "0|1"), topo) == {
        "shares_core": False, "shares_l3": True, "shares_node": True}
    with pytest.raises(binding.PlacementError, match="worker 1: planned 1, ran on 0,1"):
        binding.checked_placement(meta("0|1", "0|0,1"), topo)


def test_no_per_worker_read_back_is_not_checked():
    topo = [Cpu(0, 0, 0), Cpu(0, 1, 1)]
    # the Erlang VM binds its own schedulers; fio pins its own threads (one list back)
    assert binding.checked_placement(meta("0|1", "0,1", runtime="erlang"), topo) == {}
    assert binding.checked_placement(meta("0|1|0", "0,1"), topo) == {}
    assert binding.checked_placement({"perfgrid_runtime": "python"}, topo) == {}


def test_a_shortened_read_back_is_checked_as_far_as_it_goes():
    topo = [Cpu(0, 0, 0), Cpu(0, 1, 1)]
    plan = "0|1|0|1|0|1|0|1|... (100 chains)"
    assert binding.checked_placement(meta(plan, plan, key="perfgrid_chain_cpus"), topo) == {
        "shares_core": True, "shares_l3": True, "shares_node": True}
    with pytest.raises(binding.PlacementError):
        binding.checked_placement(meta(plan, "1|1|... (100 chains)",
                                       key="perfgrid_chain_cpus"), topo)


def test_the_harness_hook_adds_placement_columns_and_fails_a_mismatch():
    from perfgrid.experiments.base import Case
    from perfgrid.measure.bench import _ObservationHook

    cpu = binding.allowed_cpus()[0]
    readback = {"perfgrid_worker_cpus": f"{cpu}|{cpu}"}
    _ObservationHook.case = Case(time=lambda loops: 0.0, work_per_loop=1,
                                 observed=lambda: dict(readback))
    try:
        metadata = {"perfgrid_binding_plan": f"{cpu}|{cpu}", "perfgrid_runtime": "python"}
        _ObservationHook().teardown(metadata)
        assert metadata["perfgrid_shares_core"] is True
        readback["perfgrid_worker_cpus"] = f"{cpu}|{cpu + 1}"
        with pytest.raises(binding.PlacementError):
            _ObservationHook().teardown({"perfgrid_binding_plan": f"{cpu}|{cpu}",
                                         "perfgrid_runtime": "python"})
    finally:
        _ObservationHook.case = None
