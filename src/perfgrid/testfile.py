"""The random test file that file_read reads, and its sidecar facts.

With an integer seed the content is the raw output of numpy's SFC64 bit
generator (bit generators' raw streams are stable across numpy versions and
machines, so the SHA-256 is the same everywhere, and SFC64 makes ~2.7 GB/s
here against PCG64's ~0.4); with no seed it comes from the OS's random
source, as the seed experiment's ``dd if=/dev/urandom`` did. Hashing and
writing one chunk overlap with generating the next.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from perfgrid.atomic import atomic_path, write_json

CHUNK = 64 << 20
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
SIZE_PATTERN = r"^\s*[0-9]+\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$"


def parse_size(value: int | str, key: str = "size") -> int:
    """Bytes from an int or a string like ``1GiB``, ``64MiB``, ``4096``."""
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected a size, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = re.fullmatch(SIZE_PATTERN, str(value))
        if not match:
            raise ValueError(
                f"{key}: {value!r} is not a size; use bytes or a number with one of "
                f"{', '.join(u for u in _UNITS if u)}"
            )
        size = int(re.match(r"\s*([0-9]+)", str(value)).group(1)) * _UNITS[match.group(1) or ""]
    if size <= 0:
        raise ValueError(f"{key}: must be positive, got {value!r}")
    return size


def check_free_space(path: str | os.PathLike[str], size: int, key: str = "testfile.size") -> None:
    """Raise if the file system that will hold ``path`` lacks ``size`` bytes."""
    target = Path(path).absolute()
    existing = target.stat().st_size if target.exists() else 0
    probe = target.parent
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if size - existing > free:
        raise ValueError(
            f"{key}: {path} needs {size:,} bytes but the file system at {probe} has "
            f"{free:,} bytes free"
        )


def _chunks(size: int, seed: int | None):
    if seed is None:
        done = 0
        while done < size:
            n = min(CHUNK, size - done)
            yield os.urandom(n)
            done += n
        return
    bits = np.random.SFC64(seed)
    done = 0
    while done < size:
        n = min(CHUNK, size - done)
        words = bits.random_raw((n + 7) // 8).astype("<u8", copy=False)
        yield memoryview(words).cast("B")[:n]
        done += n


def generate(path: str | os.PathLike[str], size: int, seed: int | None) -> dict[str, Any]:
    """Write the test file atomically and return its sidecar facts."""
    check_free_space(path, size)
    digest = hashlib.sha256()
    started = time.perf_counter()
    pending: list = []
    with atomic_path(path) as tmp, open(tmp, "wb") as out, ThreadPoolExecutor(2) as pool:
        for chunk in _chunks(size, seed):
            for future in pending:
                future.result()
            pending = [pool.submit(out.write, chunk), pool.submit(digest.update, chunk)]
        for future in pending:
            future.result()
        out.flush()
        elapsed = time.perf_counter() - started
    return {
        "path": str(path),
        "size": size,
        "seed": seed,
        "source": "os.urandom" if seed is None else "numpy SFC64 random_raw",
        "sha256": digest.hexdigest(),
        "seconds": round(elapsed, 4),
        "note": "seconds and bytes_per_s cover generating, hashing and writing, not the fsync",
        "bytes_per_s": size / elapsed,
    }


def main(path: str, sidecar: str, size: int, seed: int | None) -> None:
    facts = generate(path, size, seed)
    write_json(sidecar, facts)
    print(f"wrote {path}: {size:,} bytes at {facts['bytes_per_s'] / 1e9:.2f} GB/s, "
          f"sha256 {facts['sha256']}")
