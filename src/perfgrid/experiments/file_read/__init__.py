"""file_read (seed E2): read a 1 GiB random file from the page cache.

Stresses the fixed cost of one read call against the copy itself: by block
size, by destination buffer (fresh bytes, page-aligned, unaligned), and by
parallel readers, beside ``dd`` and ``fio`` on the same file, and beside
the seed's own runtime: Erlang's raw-mode ``file:read`` loop, ``file:read_file``
and parallel ``file:pread`` (``erlang_*`` variants, erlang/pg_file_read.erl here).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import re
import subprocess
import threading
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from pyperf import perf_counter

from perfgrid.experiments.base import (
    Case,
    Experiment,
    NoisePair,
    Point,
    Tool,
    matches_any,
    missing_tool,
    version_line,
)
from perfgrid.kit import binding, erlang, lifetime
from perfgrid.kit.pagecache import CACHES, CacheState

if TYPE_CHECKING:
    from perfgrid.kit.paths import Layout

SINGLE = ("read", "readinto", "readinto_unaligned", "dd", "erlang_read")
PARALLEL = ("pread_parallel", "fio", "erlang_pread_parallel")
WHOLE = ("whole", "erlang_whole")
NATIVE = ("dd", "fio")
#: Erlang variant -> pg_file_read's mode
ERLANG = {"erlang_read": "read", "erlang_whole": "whole", "erlang_pread_parallel": "pread"}
#: the 1 KiB block size, and the rounds Erlang's pinned reads of it keep to (~18 s a
#: round, 3 % apart), whatever ``measure.claims.rounds`` gives the cheaper points
SMALL = 1024
SMALL_ERLANG_ROUNDS = 3
MIB = 1 << 20
#: Erlang's one reader, also pinned (one scheduler on one CPU, its dirty I/O threads on the
#: same CPU), at the block sizes its per-call claim compares: unbound, a 1 KiB read's
#: hand-off from the scheduler to a dirty I/O thread costs whatever the placement gives it
#: (1 GiB in 2.4-35 s from one process to the next on 2 vCPUs, a spinning thread on the
#: other CPU is quick); pinned, every hand-off is a switch on one CPU (17-19 s)
PINNED_ERLANG_READ = {"variant": "erlang_read", "binding": "single",
                      "block_size": [SMALL, MIB], "cache": "warm"}
#: dirty I/O schedulers run the raw file calls since OTP 21 (the default is 10); the
#: parallel readers get at least one each
DIRTY_IO = 10


def _aligned(size: int) -> mmap.mmap:
    """A page-aligned anonymous buffer of ``size`` bytes (an mmap starts on a page)."""
    return mmap.mmap(-1, size)


def _shares(size: int, workers: int) -> list[tuple[int, int]]:
    """(offset, length) of each worker's contiguous share, page-aligned."""
    share = -(-size // workers)
    share = -(-share // mmap.PAGESIZE) * mmap.PAGESIZE
    out = []
    for i in range(workers):
        start = min(i * share, size)
        out.append((start, min(share, size - start)))
    return out


def read_loop(fd: int, block_size: int) -> int:
    """``read(block_size)`` until EOF, a new bytes object per call."""
    os.lseek(fd, 0, os.SEEK_SET)
    total = 0
    read = os.read
    while chunk := read(fd, block_size):
        total += len(chunk)
    return total


def readinto_loop(fd: int, buffer: Any) -> int:
    """``readv`` into one reused buffer until EOF."""
    os.lseek(fd, 0, os.SEEK_SET)
    total = 0
    readv = os.readv
    bufs = [buffer]
    while n := readv(fd, bufs):
        total += n
    return total


def read_whole(fd: int, size: int) -> int:
    """One read of the whole file into a fresh bytes object."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = os.read(fd, size)
    total = len(data)
    while total < size and (more := os.read(fd, size - total)):
        total += len(more)
    return total


class ParallelReaders:
    """``workers`` pinned threads, each ``preadv``-ing its own share into its own
    aligned buffer; started once, released together for every timed pass."""

    def __init__(self, path: str, block_size: int, cpu_plan: list[list[int]]) -> None:
        self.size = os.path.getsize(path)
        self.fd = os.open(path, os.O_RDONLY)
        self.block_size = block_size
        self.shares = _shares(self.size, len(cpu_plan))
        self.start = threading.Barrier(len(cpu_plan) + 1)
        self.done = threading.Barrier(len(cpu_plan) + 1)
        self.counts = [0] * len(cpu_plan)
        self.actual: list[list[int]] = [[] for _ in cpu_plan]
        self.stopping = False
        self.threads = [
            threading.Thread(target=self._worker, args=(i, cpus), daemon=True)
            for i, cpus in enumerate(cpu_plan)
        ]
        for thread in self.threads:
            thread.start()

    def _worker(self, index: int, cpus: list[int]) -> None:
        self.actual[index] = binding.pin(cpus)
        offset, length = self.shares[index]
        buffer = _aligned(min(self.block_size, max(length, 1)))
        view = memoryview(buffer)
        try:
            while True:
                self.start.wait()
                if self.stopping:
                    return
                done = 0
                while done < length:
                    want = min(len(view), length - done)
                    n = os.preadv(self.fd, [view[:want]], offset + done)
                    if n == 0:
                        break
                    done += n
                self.counts[index] = done
                self.done.wait()
        finally:
            view.release()
            buffer.close()

    def run(self) -> int:
        self.start.wait()
        self.done.wait()
        return sum(self.counts)

    def close(self) -> None:
        self.stopping = True
        self.start.wait()
        for thread in self.threads:
            thread.join()
        os.close(self.fd)


def dd_seconds(path: str, block_size: int) -> float:
    """Run dd over the file and return its own reported copy time."""
    proc = subprocess.run(
        lifetime.command(["dd", f"if={path}", "of=/dev/null", f"bs={block_size}"]),
        capture_output=True, text=True, check=True, env={**os.environ, "LC_ALL": "C"},
    )
    match = re.search(r"copied, ([0-9.eE+-]+) s", proc.stderr)
    if not match:
        raise RuntimeError(f"dd printed no timing: {proc.stderr!r}")
    return float(match.group(1))


def parse_fio_json(text: str) -> dict[str, Any]:
    """fio's JSON report, skipping any warning text printed before it."""
    start = text.find("{")
    if start < 0:
        raise ValueError(f"fio printed no JSON: {text[:200]!r}")
    report, _ = json.JSONDecoder().raw_decode(text[start:])
    return report


def fio_command(path: str, block_size: int, workers: int, bind: str,
                cpu_plan: list[list[int]]) -> list[str]:
    """The fio command line for one point (page-cache reads by ``workers`` jobs).

    ``--thread``: the jobs are threads of the fio process (like ``pread_parallel``'s
    readers), not forked processes, which would outlive a killed fio.
    """
    size = os.path.getsize(path)
    share = _shares(size, workers)[0][1]
    cmd = [
        "fio", "--name=perfgrid", f"--filename={path}", "--thread", "--ioengine=psync",
        "--iomem=mmap",
        "--invalidate=0", "--rw=read", f"--bs={block_size}", f"--numjobs={workers}",
        f"--size={share}", f"--offset_increment={share}", "--group_reporting",
        "--output-format=json",
    ]
    if bind != "none":
        cpus = sorted({c for cpus in cpu_plan for c in cpus})
        cmd += [f"--cpus_allowed={','.join(map(str, cpus))}", "--cpus_allowed_policy=split"]
    return cmd


def fio_seconds(cmd: list[str]) -> tuple[float, int]:
    """Run fio; return (seconds the jobs ran, bytes read) from its JSON report."""
    proc = subprocess.run(lifetime.command(cmd), capture_output=True, text=True, check=True)
    job = parse_fio_json(proc.stdout)["jobs"][0]
    read = job["read"]
    if not read.get("bw_bytes"):
        raise RuntimeError(f"fio reported no read bandwidth: {read}")
    return read["io_bytes"] / read["bw_bytes"], read["io_bytes"]


class FileRead(Experiment):
    name = "file_read"
    report_position = 20
    axes = ("variant", "cache", "binding", "workers", "block_size")
    int_axes = frozenset({"workers", "block_size"})
    work_unit = "bytes"
    rate_unit = "bytes/s"
    native_variants = NATIVE
    erlang_variants = tuple(ERLANG)
    erlang_module = "pg_file_read"
    fixtures = ("testfile",)
    axis_patterns = {"cache": "|".join(CACHES)}
    #: every experiment's table has block_size and cache columns (empty but here)
    common_columns = {"block_size": "variant", "cache": "binding"}
    reference_variants = ("dd",)
    reference_axes = ("cache", "block_size")
    fallback_axes = ("cache",)
    #: analysis.py's claims: single readers at 1 KiB and 1 MiB (Erlang's per-call claim on
    #: its pinned reader, its claim against dd at 1 MiB on the unbound one), and the
    #: parallel readers (the best of them is compared), all warm
    claim_points = (
        {"variant": ["dd", "read", "readinto", "readinto_unaligned"],
         "block_size": [SMALL, MIB], "cache": "warm"},
        {"variant": "erlang_read", "binding": "none", "block_size": MIB, "cache": "warm"},
        PINNED_ERLANG_READ,
        {"variant": ["pread_parallel", "erlang_pread_parallel"], "cache": "warm"},
    )
    #: counted (perfgrid.measure.counters): the claim points, and the whole-file read whose page
    #: faults the report's note explains
    counter_points = (*claim_points, {"variant": "whole", "cache": "warm"})
    #: the noise profile's pair: Python readinto and dd reading the warm file in 1 MiB blocks
    noise_pair = NoisePair(
        "file_read 1 MiB warm", "Python readinto vs dd, 1 MiB blocks, warm",
        {"variant": "readinto", "cache": "warm", "binding": "none", "workers": 1,
         "block_size": MIB},
        {"variant": "dd", "cache": "warm", "binding": "none", "workers": 1,
         "block_size": MIB}, 1)

    def claim_rounds(self, point: Point, rounds: int) -> int:
        """Erlang's 1 KiB reads take ~18 s a round: at most SMALL_ERLANG_ROUNDS rounds."""
        if point["variant"] == "erlang_read" and point["block_size"] == SMALL:
            return min(rounds, SMALL_ERLANG_ROUNDS)
        return rounds

    def claim_group(self, point: Point) -> Hashable | None:
        """The points one claim compares run back to back: dd, readinto (aligned or not)
        and two parallel readers at 1 MiB; read at 1 KiB and 1 MiB; erlang_read likewise.
        The other claim points (the best of many parallel rows) are shuffled alone."""
        variant, one_mib = point["variant"], point["block_size"] == MIB
        if one_mib and (variant in ("dd", "readinto", "readinto_unaligned") or (
                variant == "pread_parallel" and point["workers"] == 2)):
            return "1 MiB"
        if variant == "erlang_read":
            return variant, point["binding"]
        return variant if variant == "read" else None

    def points(self, section: dict[str, Any], config: dict[str, Any]) -> list[Point]:
        """Single readers by block size, ``whole`` once, parallel readers by block
        size x workers x binding, each by cache state; the Erlang variants take
        the lists of the ``erlang`` sub-section where it sets them, the cold-cache rows
        those of the ``cold`` sub-section."""
        out: list[Point] = []
        size = config["testfile"]["size_bytes"]
        erlang_lists = {**section, **(section.get("erlang") or {})}
        for variant in section["variants"]:
            by_variant = erlang_lists if variant in ERLANG else section
            for cache in by_variant["caches"]:
                lists = ({**by_variant, **(section.get("cold") or {})} if cache == "cold"
                         else by_variant)
                if variant in WHOLE:
                    out.append(self._point(variant, cache, "none", 1, size))
                elif variant in SINGLE:
                    out += [p for bs in lists["block_sizes"]
                            for p in self._single_reader(variant, cache, bs)]
                else:
                    out += [self._point(variant, cache, b, w, bs)
                            for bs in lists["parallel_block_sizes"]
                            for w in lists["workers"]
                            for b in lists["bindings"]]
        return self.keep_runtimes(out, section)

    def _single_reader(self, variant: str, cache: str, block_size: int) -> list[Point]:
        """A single reader's points: unbound, and pinned too where Erlang's per-call claim
        reads it (PINNED_ERLANG_READ)."""
        unbound = self._point(variant, cache, "none", 1, block_size)
        pinned = {**unbound, "binding": PINNED_ERLANG_READ["binding"]}
        return [unbound, pinned] if matches_any(pinned, (PINNED_ERLANG_READ,)) else [unbound]

    @staticmethod
    def _point(variant: str, cache: str, bind: str, workers: int, block_size: int) -> Point:
        return {"variant": variant, "cache": cache, "binding": bind,
                "workers": workers, "block_size": block_size}

    def job_mem_mb(self, config: dict[str, Any]) -> int | None:
        """The test file twice, plus 1000 MiB for the harness: once in the page cache (a
        cgroup counts it against the job) and once in a buffer (variant ``whole``)."""
        return 1000 + 2 * math.ceil(config["testfile"]["size_bytes"] / 2**20)

    def extra_inputs(self, point: Point, config: dict[str, Any],
                     layout: Layout) -> dict[str, str]:
        """The test file's ready note: rule testfile generated or checked the file."""
        return {"ready": str(layout.fixture_ready("testfile"))}

    def job_options(self, point: Point, section: dict[str, Any], config: dict[str, Any],
                    layout: Layout) -> dict[str, str]:
        return {"testfile": str(config["testfile"]["path"])}

    def tools(self) -> dict[str, Tool]:
        """dd and fio, the native variants (their versions: the first line of --version)."""
        return {
            "dd": Tool(lambda: missing_tool("dd", "coreutils"), lambda: version_line("dd"),
                       "dd", "the native rows reading the test file",
                       "https://www.gnu.org/software/coreutils/"),
            "fio": Tool(lambda: missing_tool("fio", "Debian package fio"),
                        lambda: version_line("fio"), "fio",
                        "the native rows reading the test file in parallel",
                        "https://github.com/axboe/fio"),
        }

    def unavailable(self, point: Point) -> str | None:
        if point["variant"] in ERLANG:
            return erlang.missing()
        if point["variant"] in NATIVE:
            return self.tools()[point["variant"]].missing()
        return None

    def prepare(self, point: Point, options: dict[str, str]) -> Case:
        path = options["testfile"]
        size = os.path.getsize(path)
        variant, bs, workers = point["variant"], point["block_size"], point["workers"]
        state = CacheState(path, point["cache"])
        plan = binding.plan(point["binding"], workers)
        meta: dict[str, str | int | float] = {
            "perfgrid_file_size": size,
            "perfgrid_binding_plan": binding.describe(plan),
        }
        closers: list = []

        if variant in ERLANG:
            return self._erlang_case(point, options, state, plan, meta)
        if variant == "dd":
            def one_pass() -> float:
                return dd_seconds(path, bs)
        elif variant == "fio":
            cmd = fio_command(path, bs, workers, point["binding"], plan)
            meta["perfgrid_command"] = " ".join(cmd)

            def one_pass() -> float:
                seconds, done = fio_seconds(cmd)
                _check(done, size)
                return seconds
        else:
            if variant == "pread_parallel":
                readers = ParallelReaders(path, bs, plan)
                closers.append(readers.close)
                run = readers.run
            else:
                if point["binding"] != "none":
                    binding.pin(plan[0])
                fd = os.open(path, os.O_RDONLY)
                closers.append(lambda: os.close(fd))
                if variant == "read":
                    def run() -> int:
                        return read_loop(fd, bs)
                elif variant == "whole":
                    def run() -> int:
                        return read_whole(fd, size)
                else:
                    buffer = _aligned(bs) if variant == "readinto" else bytearray(bs)
                    meta["perfgrid_buffer_page_offset"] = _page_offset(buffer)

                    def run() -> int:
                        return readinto_loop(fd, buffer)

            def one_pass() -> float:
                started = perf_counter()
                done = run()
                elapsed = perf_counter() - started
                _check(done, size)
                return elapsed

        def time_loops(loops: int) -> float:
            total = 0.0
            for _ in range(loops):
                state.prepare()
                total += one_pass()
            return total

        def observed() -> dict[str, str | int | float]:
            extra = state.metadata()
            if variant == "pread_parallel":
                extra["perfgrid_worker_cpus"] = binding.describe(readers.actual)
            elif variant not in NATIVE:
                extra["perfgrid_worker_cpus"] = binding.describe([sorted(os.sched_getaffinity(0))])
            return extra

        def close() -> None:
            for closer in reversed(closers):
                closer()

        return Case(time=time_loops, work_per_loop=size, metadata=meta, close=close,
                    observed=observed)


    @staticmethod
    def _erlang_case(point: Point, options: dict[str, str], state: CacheState,
                     plan: list[list[int]], meta: dict[str, str | int | float]) -> Case:
        """One VM per pass (after the cache is prepared); the program times its reading."""
        path = options["testfile"]
        size, workers = int(meta["perfgrid_file_size"]), point["workers"]
        extra = ["+SDio", str(max(DIRTY_IO, workers))]
        vm = erlang.vm_for(point["binding"], extra=extra)
        args = {"path": os.path.abspath(path), "mode": ERLANG[point["variant"]],
                "block_size": point["block_size"], "workers": workers}
        cmd = erlang.command("pg_file_read", args, erlang.beam_dir(options), vm)
        timeout = float(options.get("erlang_timeout_s", erlang.DEFAULT_TIMEOUT_S))
        meta.update({"perfgrid_vm_flags": vm.describe(), "perfgrid_otp": erlang.otp_release(),
                     "perfgrid_command": " ".join(cmd)})
        runs: list[erlang.Result] = []

        def time_loops(loops: int) -> float:
            total = 0.0
            for _ in range(loops):
                state.prepare()
                result = erlang.run(cmd, timeout, vm.cpus)
                _check(int(result.report["bytes"]), size)
                runs.append(result)
                total += float(result.report["seconds"])
            return total

        def observed() -> dict[str, str | int | float]:
            extra_meta = state.metadata()
            if runs:
                last = runs[-1].report
                extra_meta.update({
                    "perfgrid_worker_cpus": last["scheduler_bindings"]
                    if point["binding"] not in ("none", "single")
                    else binding.describe([vm.cpus or binding.allowed_cpus()]),
                    "perfgrid_scheduler_bindings": last["scheduler_bindings"],
                    "perfgrid_schedulers": int(last["schedulers"]),
                    "perfgrid_user_s": sum(float(r.report["user_s"]) for r in runs) / len(runs),
                    "perfgrid_sys_s": sum(float(r.report["sys_s"]) for r in runs) / len(runs),
                    "perfgrid_vm_peak_rss_mib": max(r.maxrss_mib for r in runs),
                })
            return extra_meta

        return Case(time=time_loops, work_per_loop=size, metadata=meta, observed=observed)


def _check(done: int, size: int) -> None:
    if done != size:
        raise RuntimeError(f"read {done:,} bytes of a {size:,}-byte file")


def _page_offset(buffer: Any) -> int:
    """Offset of the buffer's first byte past a page boundary."""
    import ctypes

    address = ctypes.addressof(ctypes.c_char.from_buffer(buffer))
    return address % mmap.PAGESIZE


EXPERIMENT = FileRead()
