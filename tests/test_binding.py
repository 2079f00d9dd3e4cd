import os
import threading

import pytest

from perfgrid import binding
from perfgrid.binding import Cpu

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
