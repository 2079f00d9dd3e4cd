import os
import threading

import pytest

from perfgrid import binding, pagecache
from perfgrid.experiments import file_read, get

from helpers import needs

EXP = get("file_read")


def point(variant, cache="warm", bind="none", workers=1, block_size=65536):
    return {"variant": variant, "cache": cache, "binding": bind, "workers": workers,
            "block_size": block_size}


def run_case(pt, path, loops=2):
    case = EXP.prepare(pt, {"testfile": str(path)})
    try:
        seconds = case.time(loops)
        return case, seconds, case.observed()
    finally:
        case.close()


@pytest.mark.parametrize("variant", ["read", "readinto", "readinto_unaligned", "whole"])
@pytest.mark.parametrize("block_size", [1000, 4096, 1 << 20])
def test_single_reader_reads_exactly_the_file(small_file, variant, block_size):
    fd = os.open(small_file, os.O_RDONLY)
    try:
        if variant == "read":
            assert file_read.read_loop(fd, block_size) == small_file.stat().st_size
        elif variant == "whole":
            assert file_read.read_whole(fd, small_file.stat().st_size) == small_file.stat().st_size
        else:
            buf = file_read._aligned(block_size) if variant == "readinto" else bytearray(block_size)
            assert file_read.readinto_loop(fd, buf) == small_file.stat().st_size
    finally:
        os.close(fd)


@pytest.mark.parametrize("variant", ["read", "readinto", "readinto_unaligned", "whole"])
def test_case_times_and_records_cache_state(small_file, variant):
    case, seconds, seen = run_case(point(variant), small_file)
    assert seconds > 0
    assert case.work_per_loop == small_file.stat().st_size
    assert seen["perfgrid_cache_reached"] == 1
    assert seen["perfgrid_resident_fraction"] == 1.0


def test_aligned_buffer_starts_on_a_page_and_bytearray_does_not(small_file):
    aligned = EXP.prepare(point("readinto", block_size=1 << 20), {"testfile": str(small_file)})
    unaligned = EXP.prepare(point("readinto_unaligned", block_size=1 << 20),
                            {"testfile": str(small_file)})
    try:
        assert aligned.metadata["perfgrid_buffer_page_offset"] == 0
        assert unaligned.metadata["perfgrid_buffer_page_offset"] != 0
    finally:
        aligned.close()
        unaligned.close()


@pytest.mark.parametrize("workers", [1, 2, 3, 5])
def test_parallel_readers_cover_the_file_once(small_file, workers):
    shares = file_read._shares(small_file.stat().st_size, workers)
    assert sum(length for _, length in shares) == small_file.stat().st_size
    readers = file_read.ParallelReaders(str(small_file), 65536, binding.plan("none", workers))
    try:
        assert readers.run() == small_file.stat().st_size
        assert readers.run() == small_file.stat().st_size
    finally:
        readers.close()


@pytest.mark.parametrize("bind", ["single", "compact", "spread"])
def test_parallel_readers_are_pinned_as_planned(small_file, bind):
    plan = binding.plan(bind, 2)
    before = threading.active_count()
    case, _, seen = run_case(point("pread_parallel", bind=bind, workers=2), small_file)
    assert seen["perfgrid_worker_cpus"] == binding.describe(plan)
    assert case.metadata["perfgrid_binding_plan"] == binding.describe(plan)
    assert threading.active_count() == before  # no reader thread outlives the case


def test_cold_cache_is_evicted_and_verified(small_file):
    pagecache.warm(str(small_file))
    assert pagecache.resident_fraction(str(small_file)) == 1.0
    assert pagecache.evict(str(small_file)) <= 0.01
    _, _, seen = run_case(point("read", cache="cold"), small_file, loops=1)
    assert seen["perfgrid_cache_reached"] == 1
    assert seen["perfgrid_resident_fraction"] <= 0.01


def test_warm_state_not_reached_is_flagged(small_file, monkeypatch):
    monkeypatch.setattr(pagecache, "resident_fraction", lambda path: 0.5)
    monkeypatch.setattr(pagecache, "warm", lambda path: 0.5)
    state = pagecache.CacheState(str(small_file), "warm")
    state.prepare()
    assert state.metadata() == {"perfgrid_resident_fraction": 0.5, "perfgrid_cache_reached": 0}


@needs("dd")
def test_dd_reports_its_own_time(small_file):
    assert file_read.dd_seconds(str(small_file), 65536) > 0


def test_fio_json_is_found_after_warnings():
    text = 'fio: some warning\nnote: more\n{"jobs": [{"read": {"io_bytes": 10, "bw_bytes": 5}}]}\n'
    assert file_read.parse_fio_json(text)["jobs"][0]["read"]["io_bytes"] == 10
    with pytest.raises(ValueError, match="no JSON"):
        file_read.parse_fio_json("fio: failed\n")


@needs("fio")
def test_fio_reads_the_whole_file(small_file):
    cmd = file_read.fio_command(str(small_file), 65536, 2, "spread", binding.plan("spread", 2))
    seconds, done = file_read.fio_seconds(cmd)
    assert done == small_file.stat().st_size and seconds > 0


def test_grid_multiplies_only_the_axes_that_apply():
    section = {"variants": ["read", "whole", "pread_parallel"], "block_sizes": [512, 4096],
               "parallel_block_sizes": [1 << 20], "workers": [1, 2, 4],
               "bindings": ["none", "single"], "caches": ["warm"]}
    pts = EXP.points(section, {"testfile": {"size_bytes": 1 << 30}})
    by_variant = {v: [p for p in pts if p["variant"] == v] for v in section["variants"]}
    assert len(by_variant["read"]) == 2
    assert by_variant["whole"] == [point("whole", block_size=1 << 30)]
    assert len(by_variant["pread_parallel"]) == 1 * 3 * 2


def test_missing_fio_is_a_skip_reason(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "fio not found" in EXP.unavailable(point("fio"))
    assert EXP.unavailable(point("read")) is None
