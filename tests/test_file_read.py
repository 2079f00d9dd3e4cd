import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest

from perfgrid.analyse import stats
from perfgrid.experiments import file_read, get
from perfgrid.experiments.file_read import analysis as fr_analysis
from perfgrid.kit import binding, pagecache, testfile

from helpers import REPO, needs
from synthetic import LEVELS, expected_verdict, named_claims, row

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
    """The aligned buffer starts on a page every time. A plain bytearray lands where the
    allocator puts it: past a page boundary as a rule (glibc's mmap header), yet one taken
    from its heap can start on a page by chance (about 1 in 256), which the variant then
    records. So five are taken: all five on a page would be no chance."""
    files = {"testfile": str(small_file)}
    aligned = EXP.prepare(point("readinto", block_size=1 << 20), files)
    unaligned = [EXP.prepare(point("readinto_unaligned", block_size=1 << 20), files)
                 for _ in range(5)]
    try:
        assert aligned.metadata["perfgrid_buffer_page_offset"] == 0
        offsets = [u.metadata["perfgrid_buffer_page_offset"] for u in unaligned]
        assert any(offset != 0 for offset in offsets), offsets
    finally:
        aligned.close()
        for u in unaligned:
            u.close()


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


#: file systems whose files live in the page cache itself: it cannot drop them
IN_MEMORY = {"tmpfs", "ramfs"}


def file_system_of(path: Path) -> str:
    """The type of the file system ``path`` lies on: its longest mount point (the last
    mounted, where one is mounted over another)."""
    path = path.resolve()
    mounts = [m for m in psutil.disk_partitions(all=True)
              if path.is_relative_to(m.mountpoint)]
    return max(reversed(mounts), key=lambda m: len(m.mountpoint)).fstype


def test_file_system_of_names_the_mount_a_path_lies_on():
    assert file_system_of(Path("/proc/self/status")) == "proc"
    assert file_system_of(Path("/sys/kernel")) == "sysfs"
    assert file_system_of(Path("/")) == next(
        m.fstype for m in reversed(psutil.disk_partitions(all=True)) if m.mountpoint == "/")


@pytest.fixture
def memory_file():
    """A 1 MiB file on a tmpfs (/dev/shm), removed afterwards."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or file_system_of(shm) not in IN_MEMORY:
        pytest.skip("no tmpfs at /dev/shm")
    yield from _seeded_file(shm, "perfgrid-", 1 << 20)


def test_a_file_the_page_cache_cannot_drop_is_measured_and_flagged_not_cold(memory_file):
    """The limitation where a file lies on a tmpfs: its pages are the file, no drop evicts
    them. A cold point there still runs, and says that it never was cold."""
    assert pagecache.evict(str(memory_file)) == 1.0
    _, seconds, seen = run_case(point("read", cache="cold"), memory_file, loops=1)
    assert seconds > 0
    assert seen == {**seen, "perfgrid_cache_reached": 0, "perfgrid_resident_fraction": 1.0}


@pytest.fixture
def disk_file():
    """A 4 MiB seeded file on the repository's own file system, removed afterwards.

    Not under /tmp: where /tmp is a tmpfs (Debian 13's default) a file's pages are the
    file itself, and no page-cache drop can evict them. The scratch folder sits in the
    repository's (git-ignored) .pytest_cache, on the disk the checkout is on."""
    parent = REPO / ".pytest_cache"
    parent.mkdir(exist_ok=True)
    kind = file_system_of(parent)
    if kind in IN_MEMORY:
        pytest.skip(f"the repository itself is on a {kind}: no disk-backed folder to "
                    f"evict a file from")
    yield from _seeded_file(parent, "cold-cache-", 4 << 20)


def _seeded_file(parent: Path, prefix: str, size: int):
    """A seeded random file of ``size`` bytes in a new folder under ``parent``; the folder
    removed afterwards (a fixture's body: ``yield from``)."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        path = scratch / "small.bin"
        testfile.generate(path, size, seed=7)
        yield path
    finally:
        shutil.rmtree(scratch)


def test_cold_cache_is_evicted_and_verified(disk_file):
    small_file = disk_file
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


def test_cold_rows_take_the_cold_sub_sections_lists():
    """``cold: {bindings: [none]}``: the disk-bound rows keep to one placement, the warm
    rows keep every binding."""
    section = {"variants": ["read", "pread_parallel"], "block_sizes": [4096],
               "parallel_block_sizes": [1 << 20], "workers": [1, 2],
               "bindings": ["none", "single"], "caches": ["warm", "cold"],
               "cold": {"bindings": ["none"]}}
    pts = EXP.points(section, {"testfile": {"size_bytes": 1 << 30}})
    parallel = [p for p in pts if p["variant"] == "pread_parallel"]
    assert {p["binding"] for p in parallel if p["cache"] == "warm"} == {"none", "single"}
    assert {p["binding"] for p in parallel if p["cache"] == "cold"} == {"none"}
    assert len([p for p in pts if p["variant"] == "read"]) == 2


def test_missing_fio_is_a_skip_reason(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "fio not found" in EXP.unavailable(point("fio"))
    assert EXP.unavailable(point("read")) is None


# -- claims, each at, below and above its threshold ------------------------------------
MIB = 1 << 20
#: each claim of analysis.claims in order: (threshold, op, runtime, spec, what `measured`
#: says after the interval)
FILE_READ_CLAIMS = {
    "readinto_as_dd": (fr_analysis.AS_FAST_AS_DD, "~", "python", ".2f", "dd ("),
    "parallel_beats_dd": (1.0, ">", "python", ".2f", "dd (best: 2 workers, none, block 1048576)"),
    "small_blocks_slow": (10.0, ">=", "python", ".1f", "us per 1 KiB call)"),
    "two_readers": (1.5, ">=", "python", ".2f", "dd"),
    "aligned_faster": (1.5, ">=", "python", ".2f", "faster (aligned over unaligned)"),
    "erlang_as_dd": (fr_analysis.AS_FAST_AS_DD, "~", "erlang", ".2f", "dd ("),
    "erlang_parallel": (1.0, ">", "erlang", ".2f", "dd (best: 4 workers, spread, block"),
    "erlang_small_blocks": (10.0, ">=", "erlang", ".1f", "us per 1 KiB call, single)"),
}
CLAIM_NAMES = list(FILE_READ_CLAIMS)
#: claims that compare the same rows, so a knob of one moves the other
COUPLED = {"parallel_beats_dd": {"two_readers"}, "two_readers": {"parallel_beats_dd"}}
DD = 4e9  # dd at 1 MiB, warm: bytes/s


def file_read_rows(**q: float) -> list[dict]:
    """Warm rows whose compared quantities are ``q`` (claim name -> value), all reproduced
    by default, plus a cold dd row ten times faster that no claim may read."""
    q = {"readinto_as_dd": 1.0, "parallel_beats_dd": 1.8, "small_blocks_slow": 40.0,
         "aligned_faster": 2.0, "erlang_as_dd": 0.95, "erlang_parallel": 1.3,
         "erlang_small_blocks": 60.0, **q}
    q.setdefault("two_readers", q["parallel_beats_dd"])  # the same 2-worker row
    readinto = DD * q["readinto_as_dd"]
    erl = DD * q["erlang_as_dd"]
    specs = [  # variant, runtime, block, workers, binding, cache, rate
        ("dd", "native", MIB, 1, "none", "warm", DD),
        ("dd", "native", MIB, 1, "none", "cold", DD * 10),
        ("readinto", "python", MIB, 1, "none", "warm", readinto),
        ("readinto_unaligned", "python", MIB, 1, "none", "warm",
         readinto / q["aligned_faster"]),
        ("read", "python", MIB, 1, "none", "warm", 3e9),
        ("read", "python", 1024, 1, "none", "warm", 3e9 / q["small_blocks_slow"]),
        ("pread_parallel", "python", MIB, 2, "none", "warm", DD * q["two_readers"]),
        ("erlang_read", "erlang", MIB, 1, "none", "warm", erl),
        # unbound 1 KiB reads: a placement's luck (perfgrid.experiments.file_read
        # .PINNED_ERLANG_READ), read by no claim; the per-call claim reads the pinned pair,
        # whose 1 MiB row (faster here) the claim against dd must not read either
        ("erlang_read", "erlang", 1024, 1, "none", "warm", erl / 3),
        ("erlang_read", "erlang", MIB, 1, "single", "warm", erl * 1.3),
        ("erlang_read", "erlang", 1024, 1, "single", "warm",
         erl * 1.3 / q["erlang_small_blocks"]),
        ("erlang_pread_parallel", "erlang", 64 * MIB, 4, "spread", "warm",
         DD * q["erlang_parallel"]),
        # one worker: not among the parallel readers the claim compares
        ("erlang_pread_parallel", "erlang", MIB, 1, "none", "warm", DD * 5),
    ]
    return [row(rate, seed=i, variant=variant, runtime=runtime, block_size=block,
                workers=workers, binding=bind, cache=cache)
            for i, (variant, runtime, block, workers, bind, cache, rate) in enumerate(specs)]


def file_read_claims(rows: list[dict]) -> dict:
    names = CLAIM_NAMES if any(r["runtime"] == "erlang" for r in rows) else CLAIM_NAMES[:5]
    return named_claims(fr_analysis, rows, names)


def expected(op: str, level: str) -> tuple[str, str]:
    """(verdict, what the reason says) of a claim ``op threshold`` at ``level``; an "about"
    claim (``~``, a margin of 0.25) is reproduced at it and not reproduced 0.7x or 1.4x
    from it (:data:`ABOUT_LEVELS`)."""
    if op == "~":
        return (("reproduced", "lies within") if level == "at"
                else ("not reproduced", "lies wholly outside"))
    if level == "at":
        return expected_verdict("above", level)
    if (level == "above") == op.startswith(">"):
        return "reproduced", "lies wholly " + ("above" if op == ">" else "at or above")
    return "not reproduced", "lies wholly on the other side of"


#: an "about" claim's values below, at and above its band (a margin of 0.25: 0.8x is its edge)
ABOUT_LEVELS = {"below": 0.7, "at": 1.0, "above": 1.4}


def test_default_file_read_table_reproduces_every_claim():
    claims = file_read_claims(file_read_rows())
    assert {c.verdict for c in claims.values()} == {"reproduced"}, [
        c.reason for c in claims.values()]
    assert [c.runtime for c in claims.values()] == [
        FILE_READ_CLAIMS[n][2] for n in CLAIM_NAMES]


@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_each_file_read_claim_is_decided_by_its_interval(claim, level):
    threshold, op, runtime, spec, detail = FILE_READ_CLAIMS[claim]
    value = threshold * (ABOUT_LEVELS if op == "~" else LEVELS)[level]
    claims = file_read_claims(file_read_rows(**{claim: value}))
    got = claims[claim]
    verdict, words = expected(op, level)
    assert got.verdict == verdict, (got.measured, got.reason)
    assert (got.op, got.threshold, got.runtime, got.unit) == (op, threshold, runtime, "x")
    assert got.value == pytest.approx(value)
    assert got.ci_low < value < got.ci_high
    assert got.measured.startswith(f"{got.value:{spec}}x [{got.ci_low:{spec}}, "
                                   f"{got.ci_high:{spec}}]"), got.measured
    assert detail in got.measured, got.measured
    if level == "at" or op == "~":
        assert words in got.reason and "% interval" in got.reason, got.reason
    else:
        assert got.reason == (f"95% interval {got.ci_low:{spec}}-{got.ci_high:{spec}}x "
                              f"{words} {threshold:g}x"), got.reason
    others = {name: c.verdict for name, c in claims.items()
              if name != claim and name not in COUPLED.get(claim, ())}
    assert set(others.values()) == {"reproduced"}, others  # each knob moves its own claim


#: for each claim, rows to drop (variant, block_size or None for all) and the reason
FILE_READ_MISSING = {
    "readinto_as_dd": (("readinto", MIB), "no warm readinto or dd row at 1 MiB"),
    "parallel_beats_dd": (("pread_parallel", None), "no warm pread_parallel or dd 1 MiB row"),
    "small_blocks_slow": (("read", 1024), "no warm read rows at 1 KiB and 1 MiB"),
    "two_readers": (("pread_parallel", None), "no 2-worker 1 MiB warm pread_parallel row"),
    "aligned_faster": (("readinto_unaligned", MIB),
                       "no readinto/readinto_unaligned 1 MiB rows"),
    "erlang_as_dd": (("erlang_read", MIB), "no warm erlang_read or dd row at 1 MiB"),
    "erlang_parallel": (("erlang_pread_parallel", None),
                        "no warm erlang_pread_parallel (2+ workers) or dd 1 MiB row"),
    "erlang_small_blocks": (("erlang_read", 1024),
                            "no warm single erlang_read rows at 1 KiB and 1 MiB"),
}


def _own(r: dict, claim: str) -> bool:
    variant, block = FILE_READ_MISSING[claim][0]
    return r["variant"] == variant and block in (None, r["block_size"]) and r["cache"] == "warm"


@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_each_file_read_claim_without_its_rows_is_inconclusive(claim):
    got = file_read_claims([r for r in file_read_rows() if not _own(r, claim)])[claim]
    assert got.verdict == "inconclusive"
    assert got.reason == FILE_READ_MISSING[claim][1] and got.measured == "n/a"


def test_erlangs_per_call_claim_reads_only_its_pinned_reader():
    """Unbound, a 1 KiB read's cost follows where the VM's threads land; the claim
    compares the pinned pair, and without it stays inconclusive beside unbound rows."""
    rows = file_read_rows()
    assert file_read_claims(rows)["erlang_small_blocks"].value == pytest.approx(60.0)
    unpinned = [r for r in rows if not (r["variant"] == "erlang_read"
                                        and r["binding"] == "single")]
    got = file_read_claims(unpinned)["erlang_small_blocks"]
    assert got.verdict == "inconclusive" and got.measured == "n/a"
    assert file_read_claims(unpinned)["erlang_as_dd"].value == pytest.approx(0.95)


@pytest.mark.parametrize("claim", CLAIM_NAMES)
def test_a_nan_rate_makes_its_file_read_claim_inconclusive(claim):
    """A point that measured nothing (NaN rate) is no evidence either way."""
    rows = file_read_rows()
    for r in rows:
        if _own(r, claim):
            r.update(rate=float("nan"), process_values=json.dumps([[float("nan")] * 5] * 4))
    got = file_read_claims(rows)[claim]
    assert got.verdict == "inconclusive", (got.measured, got.reason)
    assert got.reason == "no estimate (missing or NaN rate)"


def test_dd_missing_leaves_every_claim_that_needs_it_inconclusive():
    claims = file_read_claims([r for r in file_read_rows() if r["variant"] != "dd"])
    needs_dd = {"readinto_as_dd", "parallel_beats_dd", "two_readers", "erlang_as_dd",
                "erlang_parallel"}
    assert {n for n, c in claims.items() if c.verdict == "inconclusive"} == needs_dd


def test_without_erlang_rows_only_the_python_claims_are_made():
    rows = [r for r in file_read_rows() if r["runtime"] != "erlang"]
    assert [c.runtime for c in file_read_claims(rows).values()] == ["python"] * 5


def _rounds_row(variant: str, binding: str, seconds: list[float], **axes) -> dict:
    """A warm 1 MiB row measured in one process per round, a second per value."""
    return {"experiment": "file_read", "runtime": "python", "cache": "warm",
            "variant": variant, "binding": binding, "block_size": MIB, "workers": 1,
            "work_per_loop": 1.0, "rate": 1.0 / float(np.mean(seconds)),
            "process_values": json.dumps([[s] for s in seconds]),
            "process_rounds": json.dumps(list(range(1, len(seconds) + 1))), **axes}


def test_a_best_of_rows_over_dd_is_paired_with_dd_round_by_round() -> None:
    """Four bindings of the two readers, each round slowed with dd by the run's drift
    (up to 40 %): each row's ratio to dd is paired round by round before the best-of
    (analysis.best_ratio), so the drift cancels and the claim decides; the best rate
    divided by dd after the best-of loses the pairing, and its interval straddles."""
    from perfgrid.analyse.analysis import best_ratio, rate_at, rate_estimates, rows_where

    drift = [1.0, 1.4, 0.8, 1.2, 0.9, 1.3]
    rows = [_rounds_row("dd", "none", [d * (1 + 0.01 * (i % 2)) for i, d in enumerate(drift)])]
    for k, bound in enumerate(("none", "single", "compact", "spread")):
        rows.append(_rounds_row("pread_parallel", bound,
                                [d / (1.8 + 0.05 * k) * (1 + 0.01 * ((i + k) % 3))
                                 for i, d in enumerate(drift)], workers=2))
    table = pd.DataFrame(rows)
    dd = rate_at(table, variant="dd")
    two = rows_where(table, variant="pread_parallel")
    paired_first = best_ratio(two, dd)
    after = stats.reduce(rate_estimates(two), np.max) / dd
    low, high = paired_first.interval()
    assert low > 1.5 and high < 2.2
    assert after.interval()[0] < 1.5 < after.interval()[1]
