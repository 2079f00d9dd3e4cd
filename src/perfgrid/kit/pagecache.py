"""Page-cache state of a file: measure it, warm it, evict it.

The kernel here reclaims page cache that sits idle for about a minute, so a
warm measurement verifies residency right before it runs instead of
assuming it.
"""

from __future__ import annotations

import ctypes
import mmap
import os

CACHES = ("warm", "cold")
PAGE = mmap.PAGESIZE
# the C library this interpreter already has loaded, as kit/lifetime opens it:
# ctypes.util.find_library runs ldconfig -p (2-3 ms) in every process importing this
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value
_CHUNK = 256 << 20  # map and query 256 MiB at a time


def resident_fraction(path: str) -> float:
    """Fraction (0..1) of the file's pages that are in the page cache (mincore)."""
    size = os.path.getsize(path)
    if size == 0:
        return 1.0
    resident = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset in range(0, size, _CHUNK):
            length = min(_CHUNK, size - offset)
            addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr == _MAP_FAILED:
                raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
            try:
                pages = (length + PAGE - 1) // PAGE
                vec = (ctypes.c_ubyte * pages)()
                if _libc.mincore(addr, length, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
                resident += sum(b & 1 for b in bytes(vec))
            finally:
                _libc.munmap(addr, length)
    finally:
        os.close(fd)
    return resident / ((size + PAGE - 1) // PAGE)


def warm(path: str) -> float:
    """Read the file through the page cache; return the resident fraction after."""
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = mmap.mmap(-1, 1 << 20)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            while os.readv(fd, [buf]):
                pass
        finally:
            buf.close()
    finally:
        os.close(fd)
    return resident_fraction(path)


def evict(path: str) -> float:
    """Drop the file from the page cache (no root needed); return what stays resident."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return resident_fraction(path)


class CacheState:
    """Brings a file into one cache state before each timed loop and records
    the worst residency seen, so a point whose state was not reached is flagged.
    """

    def __init__(self, path: str, cache: str) -> None:
        if cache not in CACHES:
            raise ValueError(f"cache: {cache!r} is not one of {', '.join(CACHES)}")
        self.path = path
        self.cache = cache
        self.worst: float | None = None

    def prepare(self) -> float:
        """Reach the state (warming at most twice); return the resident fraction."""
        if self.cache == "warm":
            fraction = resident_fraction(self.path)
            for _ in range(2):
                if fraction >= 1.0:
                    break
                fraction = warm(self.path)
            self.worst = fraction if self.worst is None else min(self.worst, fraction)
        else:
            fraction = evict(self.path)
            self.worst = fraction if self.worst is None else max(self.worst, fraction)
        return fraction

    @property
    def reached(self) -> bool:
        """Whether every loop ran in the intended state."""
        if self.worst is None:
            return False
        return self.worst >= 1.0 if self.cache == "warm" else self.worst <= 0.01

    def metadata(self) -> dict[str, str | int | float]:
        return {
            "perfgrid_resident_fraction": -1.0 if self.worst is None else round(self.worst, 6),
            "perfgrid_cache_reached": int(self.reached),
        }
