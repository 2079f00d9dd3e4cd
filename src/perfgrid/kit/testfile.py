"""The random test file, a fixture (perfgrid.measure.fixtures; file_read reads it), and its
sidecar facts.

With an integer seed the content is the raw output of numpy's SFC64 bit
generator (bit generators' raw streams are stable across numpy versions and
machines, so the SHA-256 is the same everywhere, and SFC64 makes ~2.7 GB/s
here against PCG64's ~0.4); with no seed it comes from the OS's random
source, as the seed experiment's ``dd if=/dev/urandom`` did. Hashing and
writing one chunk overlap with generating the next.

perfgrid never deletes, truncates or overwrites a file it did not create:
a file already at the test file's path is used only if its sidecar (written
by :func:`generate`) matches the config and the file itself (size at parse
time, SHA-256 in the job before any benchmark); a new file is written under
a temporary name and linked into place only if nothing is there.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from perfgrid.kit.atomic import write_json

CHUNK = 64 << 20
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
#: spaces only, not ``\s``: that would let a newline, a tab or a Unicode space through
SIZE_PATTERN = r"^ *[0-9]+ *(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)? *$"
#: the smallest test file: one page, so that every block size and cache check makes sense
MIN_SIZE = 4096
#: keys of perfgrid's sidecar; a JSON file without them is not perfgrid's
FACT_KEYS = ("size", "seed", "sha256", "source")


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
        size = int(re.match(r" *([0-9]+)", str(value)).group(1)) * _UNITS[match.group(1) or ""]
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


def sidecar_of(path: str | os.PathLike[str]) -> Path:
    """The sidecar JSON beside a test file: ``<path>.json``."""
    return Path(f"{path}.json")


def read_json_sidecar(sidecar: str | os.PathLike[str], keys: tuple[str, ...],
                 limit: int = 1 << 20) -> dict[str, Any] | None:
    """A sidecar's JSON object if it is a regular file (a link is not followed) of at most
    ``limit`` bytes read holding every one of ``keys``; else None."""
    try:
        if not stat.S_ISREG(os.lstat(sidecar).st_mode):
            return None
        with open(sidecar, encoding="utf-8") as handle:
            facts = json.loads(handle.read(limit))
    except (OSError, ValueError):
        return None
    if not isinstance(facts, dict) or any(k not in facts for k in keys):
        return None
    return facts


def read_facts(sidecar: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The facts of a perfgrid sidecar, or None if ``sidecar`` is absent or not perfgrid's."""
    facts = read_json_sidecar(sidecar, FACT_KEYS)
    if facts is None:
        return None
    if not isinstance(facts["size"], int) or not isinstance(facts["sha256"], str):
        return None
    return facts


def kind_of(mode: int) -> str:
    """``a directory``, ``a named pipe``, ...: what a path that is no regular file is."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_existing(path: str | os.PathLike[str], size: int, seed: int | None,
                   key: str = "testfile.path") -> dict[str, Any] | None:
    """Decide, without reading the data, whether ``path`` may serve as the test file.

    Returns None when nothing is there (perfgrid will generate it), the
    sidecar's facts when a file perfgrid generated with this size and seed is
    there, and raises ValueError (naming the path and what differs) for
    anything else: a user's file, a directory, a device, a stale file.
    Cheap enough for a dry run; :func:`verify` checks the SHA-256 later.
    """
    sidecar = sidecar_of(path)
    leave = (f"perfgrid never deletes or overwrites a file it did not create: move it "
             f"away or set {key} to a free path")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if os.path.lexists(sidecar) and read_facts(sidecar) is None:
            raise ValueError(f"{key}: {sidecar} exists and is not a perfgrid sidecar; "
                             f"{leave}") from None
        return None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{key}: {path} is {kind_of(info.st_mode)}; the test file must be a "
                         f"regular file that perfgrid generated. {leave}")
    facts = read_facts(sidecar)
    if facts is None:
        raise ValueError(f"{key}: {path} exists but has no perfgrid sidecar ({sidecar}), so "
                         f"perfgrid did not generate it; {leave}")
    differs = []
    if facts["size"] != size:
        differs.append(f"size {facts['size']:,} bytes in the sidecar, {size:,} in the config")
    if facts["seed"] != seed:
        differs.append(f"seed {facts['seed']} in the sidecar, {seed} in the config")
    if info.st_size != facts["size"]:
        differs.append(f"the file has {info.st_size:,} bytes, the sidecar says "
                       f"{facts['size']:,}")
    if differs:
        raise ValueError(f"{key}: {path} does not match the config: {'; '.join(differs)}. "
                         f"{leave}")
    return facts


def verify(path: str | os.PathLike[str], facts: dict[str, Any],
           key: str = "testfile.path") -> None:
    """Raise ValueError unless the file's size and SHA-256 are the sidecar's."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size != facts["size"]:
            raise ValueError(f"{key}: {path} has {size:,} bytes, its sidecar says "
                             f"{facts['size']:,}; perfgrid leaves it as it is")
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    if digest != facts["sha256"]:
        raise ValueError(f"{key}: {path} has SHA-256 {digest}, its sidecar says "
                         f"{facts['sha256']}: the file changed since perfgrid wrote it; "
                         f"perfgrid leaves it as it is")


def link_new(tmp: Path, target: Path, what: str = "the test file was generated") -> None:
    """Put ``tmp`` at ``target`` only if nothing is there (never replaces a file)."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise ValueError(f"{target} appeared while {what}; perfgrid leaves it as it "
                         f"is") from None
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(target):  # no hard links here: check, then rename
            raise ValueError(f"{target} appeared while {what}; perfgrid leaves it as it "
                             f"is") from None
        os.rename(tmp, target)


def generate(path: str | os.PathLike[str], size: int, seed: int | None) -> dict[str, Any]:
    """Write the test file and return its sidecar facts.

    The data goes to a temporary name beside ``path`` and is linked into
    place only if nothing is at ``path``: an existing file is never replaced.
    """
    target = Path(path)
    if os.path.lexists(target):
        raise ValueError(f"{target} already exists; perfgrid leaves it as it is")
    check_free_space(path, size)
    digest = hashlib.sha256()
    started = time.perf_counter()
    pending: list = []
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "xb") as out, ThreadPoolExecutor(2) as pool:
            for chunk in _chunks(size, seed):
                for future in pending:
                    future.result()
                pending = [pool.submit(out.write, chunk), pool.submit(digest.update, chunk)]
            for future in pending:
                future.result()
            out.flush()
            elapsed = time.perf_counter() - started
            os.fsync(out.fileno())
        link_new(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
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


def prepare(path: str, size: int, seed: int | None, ready: str,
            record: str | None = None) -> tuple[dict[str, Any], bool]:
    """Make the test file ready for the benchmarks and write ``ready`` (facts, and how).

    Nothing at ``path``: generate it and its sidecar. A file perfgrid made
    there before: check its sidecar and SHA-256, and use it. Anything else:
    raise, leaving it untouched. ``record`` (only for the default path under
    results/) notes the generated file's identity, so that only that very
    file is ever removed (see :func:`remove_generated`).
    """
    facts = check_existing(path, size, seed)
    if facts is None:
        sidecar = sidecar_of(path)
        facts = generate(path, size, seed)
        if os.path.lexists(sidecar) and read_facts(sidecar) is None:
            raise ValueError(f"{sidecar} appeared and is not a perfgrid sidecar; perfgrid "
                             f"leaves it as it is")
        write_json(sidecar, facts)
        generated = True
        if record:
            info = os.stat(path)
            write_json(record, {"path": os.path.abspath(path), "dev": info.st_dev,
                                "ino": info.st_ino, "size": info.st_size,
                                "mtime_ns": info.st_mtime_ns, "generated_at": time.time()})
    else:
        verify(path, facts)
        generated = False
    write_json(ready, {**facts, "path": str(path), "generated": generated})
    return facts, generated


def remove_generated(record: str | os.PathLike[str], since: float) -> bool:
    """Remove the test file generated since ``since``, if it is still that very file.

    Identity is the device, inode, size and mtime noted at generation; a
    file perfgrid did not generate in this run is never removed.
    """
    try:
        with open(record, encoding="utf-8") as handle:
            noted = json.load(handle)
        if noted["generated_at"] < since:
            return False
        info = os.lstat(noted["path"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    same = (stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino, info.st_size,
            info.st_mtime_ns) == (noted["dev"], noted["ino"], noted["size"], noted["mtime_ns"]))
    if same:
        os.unlink(noted["path"])
    Path(record).unlink(missing_ok=True)
    return same


def main(path: str, ready: str, size: int, seed: int | None, record: str | None = None) -> None:
    facts, generated = prepare(path, size, seed, ready, record)
    if generated:
        print(f"wrote {path}: {size:,} bytes at {facts['bytes_per_s'] / 1e9:.2f} GB/s, "
              f"sha256 {facts['sha256']}")
    else:
        print(f"using {path}, generated earlier by perfgrid: {size:,} bytes, "
              f"sha256 {facts['sha256']} as its sidecar says")


class TestFile:
    """The fixture (a :class:`perfgrid.measure.fixtures.Fixture`): config section ``testfile``
    (``size``, ``seed``, ``path``)."""

    __test__ = False  # not a pytest class
    name = "testfile"
    title = "test file"
    file_name = "testfile.bin"
    provenance_key = "test_file"
    help = ("write the random test file and its sidecar JSON, or check the one perfgrid "
            "wrote there before")
    schema_file = Path(__file__).with_name("testfile.schema.yaml")

    def settle(self, section: dict[str, Any], default_path: Path) -> None:
        section["size_bytes"] = parse_size(section.get("size", "1GiB"), "testfile.size")
        if section["size_bytes"] < MIN_SIZE:
            raise ValueError(f"testfile.size: {section.get('size')!r} is "
                             f"{section['size_bytes']:,} bytes; allowed: at least "
                             f"{MIN_SIZE:,} bytes (4KiB)")
        section["path"] = section.get("path") or str(default_path)

    def check(self, section: dict[str, Any]) -> None:
        check_existing(section["path"], section["size_bytes"], section.get("seed"))
        check_free_space(section["path"], section["size_bytes"])

    def make_args(self, section: dict[str, Any]) -> str:
        return f"--size {section['size_bytes']} --seed {section['seed']}"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("path")
        parser.add_argument("ready", help="JSON written once the file is ready (facts, "
                            "generated or not)")
        parser.add_argument("--size", type=int, required=True)
        parser.add_argument("--seed", default="none")
        parser.add_argument("--record", help="note the generated file's identity here "
                            "(default path only), so that only that very file is removed "
                            "after the run")

    def make(self, args: argparse.Namespace) -> None:
        seed = None if args.seed.lower() in ("none", "null") else int(args.seed)
        main(args.path, args.ready, args.size, seed, args.record)

    def remove_generated(self, record: Path, since: float) -> bool:
        return remove_generated(record, since)

    def provenance(self, facts: dict[str, Any]) -> str:
        return (f"{facts['size']:,} bytes, seed {facts['seed']}, sha256 {facts['sha256']}, "
                f"generated at {facts['bytes_per_s'] / 1e9:.2f} GB/s")


FIXTURE = TestFile()
