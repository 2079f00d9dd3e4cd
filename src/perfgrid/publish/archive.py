"""Archives of a result set for papers: create, verify, extract safely.

An archive is a ``.tar.gz`` whose single top folder is a runnable copy of
the workflow (Snakefile, workflow/, src/, config/, profiles/ from git) with
``results/<host>/`` inside it (raw pyperf JSON, tables, plots, reports,
machine.json; not the regenerable test file), the config as used, the
installed package list, an RO-Crate (``ro-crate-metadata.json``, :mod:`perfgrid.publish.crate`)
and ``MANIFEST.sha256`` over every other member, the crate included. Only
regular files are archived: a symlink or special file in the result set is
left out and named in ``LEFT_OUT.txt``.
Member mtimes are kept, so Snakemake in an extracted copy plans nothing.

Two checks, both in :func:`verify` (and so in :func:`extract`): the manifest against
the bytes of every member, and the crate's ``sha256`` and ``contentSize`` of every file
against the file (the crate lists every file but itself and the manifest, which hashes
it). An archive made before the crate has none and is checked on its manifest alone.
The archive's own SHA-256 goes beside it (``<archive>.sha256``, as ``sha256sum`` writes).

The manifest and the crate travel inside the archive: whoever rewrites the data can
rewrite them too. So where ``<archive>.sha256`` stands beside the archive, the bytes read
are hashed as they are checked and must match it, or the archive is refused; without it
the two checks show only that the archive agrees with itself (``perfgrid verify`` says so
and prints the digest, to compare with the one published).

Every problem names members as :func:`printable` shows them: a name holding terminal
escape codes or line breaks cannot rewrite what is printed around it.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from perfgrid.kit import lifetime
from perfgrid.kit.atomic import write_text
from perfgrid.kit.paths import REPO
from perfgrid.publish import crate, gitinfo
from perfgrid.publish.gitinfo import git

MANIFEST = "MANIFEST.sha256"
#: in an archive whose result set held symlinks or special files: each one left out, and why
LEFT_OUT = "LEFT_OUT.txt"
CODE_PATHS = ("Snakefile", "workflow", "src", "config", "profiles", "pyproject.toml",
              "environment.yml", "README.md", "CITATION.cff", "Makefile")
#: files of a result set that are not archived: regenerable or huge
SKIP_SUFFIXES = (".bin", ".lock", ".sqlite", ".sqlite-wal", ".sqlite-shm")


def host_folder(top: Path, source: str | Path) -> Path:
    """The one result folder (``results/<host>``) of an extracted archive's top folder;
    ValueError naming ``source`` where there is none or more than one."""
    results = top / "results"
    hosts = [p for p in results.iterdir() if p.is_dir()] if results.is_dir() else []
    if len(hosts) != 1:
        raise ValueError(f"{source}: expected one host under results/, found "
                         f"{sorted(h.name for h in hosts)}")
    return hosts[0]


def archive_name(host: str, when: float | None = None) -> str:
    """``perfgrid-<host>-<UTC date>-<short commit>``."""
    date = time.strftime("%Y%m%d", time.gmtime(when))
    commit = git("rev-parse", "--short=10", "HEAD") or "nogit"
    return f"perfgrid-{host}-{date}-{commit}"


def code_files() -> list[Path]:
    """The workflow's source files: what git tracks, as in the working tree."""
    listed = git("ls-files", "--", *CODE_PATHS)
    if listed:
        return [REPO / line for line in listed.splitlines() if (REPO / line).is_file()]
    out = []
    for name in CODE_PATHS:
        path = REPO / name
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            out += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return out


def _kind(mode: int) -> str:
    """What a file that is not archived is, in words."""
    for test, word in ((stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return word
    return "not a regular file"


def result_set(root: Path) -> tuple[list[Path], list[Path], list[tuple[Path, str]]]:
    """(folders, regular files, left out with why) of a result set, walked without following.

    Only what the pipeline wrote goes into an archive for publication: a symlink (to a
    file or a folder, inside the set or not) is never followed, so bytes from outside
    cannot slip in, and it and any special file (FIFO, socket, device) are left out and
    named. Hidden and regenerable files (:data:`SKIP_SUFFIXES`) are skipped as before.
    """
    folders, files, left_out = [root], [], []

    def walk(folder: Path) -> None:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            path = Path(entry.path)
            if entry.name.startswith("."):
                continue
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                folders.append(path)
                walk(path)
            elif not stat.S_ISREG(mode):
                left_out.append((path, _kind(mode)))
            elif not entry.name.endswith(SKIP_SUFFIXES):
                files.append(path)

    walk(root)
    return folders, files, left_out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(mtime)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def installed_packages() -> str:
    proc = subprocess.run(lifetime.command([sys.executable, "-m", "pip", "freeze", "--all"]),
                          capture_output=True, text=True, check=False)
    return proc.stdout


class _Hashing:
    """A file as tarfile reads it, hashed on the way: the manifest states the bytes archived,
    and verify checks the archive's digest of the very bytes it checked. A seek (tarfile
    never makes one reading a .tar.gz front to back) marks the digest as not sequential."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle, self.digest, self.sequential = handle, hashlib.sha256(), True
        self.count = 0  # bytes read: how much of a .tar.gz a member was inflated from

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        self.count += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.sequential = False
        return self.handle.seek(offset, whence)

    def tell(self) -> int:
        return self.handle.tell()


def _add_file(tar: tarfile.TarFile, path: Path, arcname: str) -> tuple[str, int]:
    """Add one regular file, never through a symlink: (its SHA-256, its size), or
    (why it was left out, -1).

    Opened with ``O_NOFOLLOW`` and checked on the open file, so a file swapped for a
    link or a FIFO after the walk is left out too (returned as ``"left out: ..."``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "left out: symlink", -1
        raise
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return f"left out: {_kind(mode)}", -1
        os.set_blocking(fd, True)
        info = tar.gettarinfo(str(path), arcname, handle)  # fstat: the file opened
        reader = _Hashing(handle)
        tar.addfile(info, reader)  # type: ignore[arg-type]  # tarfile only calls read()
        return reader.digest.hexdigest(), info.size


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sidecar(archive: Path) -> Path:
    """``<archive>.sha256``: the archive's SHA-256 in ``sha256sum`` format, to quote."""
    return archive.with_name(f"{archive.name}.sha256")


def printable(text: str) -> str:
    """``text`` with every character a terminal acts on or hides (control and format
    characters, line breaks, undecodable bytes) written as its escape (``\\x1b``,
    ``\\u202e``): an archive member's name is shown, never obeyed."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def sealed_digest(archive: Path) -> str | None:
    """The SHA-256 that ``<archive>.sha256`` states (the first word of its one line, as
    ``sha256sum`` writes it), or None where there is no such file; ValueError where it is
    unreadable or not a SHA-256. The name after the digest is not compared: a renamed pair
    is still one archive and its digest."""
    path = sidecar(archive)
    if not path.exists():
        return None
    try:
        words = path.read_text().split()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path.name}: unreadable ({err})") from None
    digest = words[0].lower() if words else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"{path.name}: not a sha256sum line (64 hex digits, then the "
                         f"archive's name)")
    return digest


def create(results_root: Path, output: Path) -> Path:
    """Write the archive of ``results_root`` (``results/<host>``) to ``output``, and its
    SHA-256 beside it (:func:`sidecar`).

    Regular files only: symlinks and special files are left out, printed, and listed
    in :data:`LEFT_OUT` inside the archive (see :func:`result_set`). The crate
    describes the files as archived (their sizes and hashes taken on the way in).
    """
    top = output.name.removesuffix(".tar.gz")
    host = results_root.name
    folders, files, skipped = result_set(results_root)
    entries: list[tuple[str, Path]] = [(str(p.relative_to(REPO)), p) for p in code_files()]
    entries += [(f"results/{host}/{p.relative_to(results_root)}", p) for p in files]
    left_out = [f"results/{host}/{p.relative_to(results_root)} ({why})" for p, why in skipped]
    now = time.time()
    facts = gitinfo.facts()
    generated = {
        "packages.txt": installed_packages().encode(),
        "GIT": f"commit {facts['commit']}\ndirty {facts['dirty']}\n".encode(),
    }
    lines = []
    facts_of: dict[str, tuple[str, int]] = {}
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        # dereference: a hardlinked file is archived as its contents, never as a hardlink
        # member, which verify refuses; symlinks never get this far (result_set, _add_file)
        with tarfile.open(tmp, "w:gz", dereference=True) as tar:
            # folders too, so that their mtimes come back (a plot folder is an output)
            for path in folders:
                name = f"results/{host}/{path.relative_to(results_root)}".removesuffix("/.")
                tar.add(path, arcname=f"{top}/{name}", recursive=False)
            for name, path in entries:
                digest, size = _add_file(tar, path, f"{top}/{name}")
                if digest.startswith("left out: "):
                    left_out.append(f"{name} ({digest.removeprefix('left out: ')})")
                else:
                    lines.append(f"{digest}  {name}")
                    facts_of[name] = (digest, size)
            if left_out:
                generated[LEFT_OUT] = "".join(f"{item}\n" for item in left_out).encode()
            for name, data in generated.items():
                facts_of[name] = (_sha256(data), len(data))
            # the crate describes every file above; the manifest then covers the crate too
            generated[crate.NAME] = crate.build(facts_of, results_root, host, REPO, now)
            for name, data in generated.items():
                _add_bytes(tar, f"{top}/{name}", data, now)
                lines.append(f"{_sha256(data)}  {name}")
            _add_bytes(tar, f"{top}/{MANIFEST}", ("\n".join(lines) + "\n").encode(), now)
        digest = file_sha256(tmp)
        # an older sidecar never stands beside a newer archive, even after a crash here
        sidecar(output).unlink(missing_ok=True)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    write_text(sidecar(output), f"{digest}  {output.name}\n")
    for item in left_out:
        print(f"archive: left out {printable(item)}")
    return output


class ArchiveError(ValueError):
    """An archive refused: one line that names what is wrong."""


class _Refused(Exception):
    """Stops the walk at once: reading further would be unsafe or pointless."""


#: what a walk accepts before it stops: an archive is refused rather than read past these
MAX_BYTES = 32 << 30  # total size of the regular files
#: a compression bomb ends here: past BOMB_FLOOR bytes of one member (or of the padding
#: after the last), more than MAX_RATIO bytes out per byte of .tar.gz read is refused.
#: Results, logs and tables compress 3 to 20-fold; gzip's limit is about 1030-fold
MAX_RATIO = 200
BOMB_FLOOR = 64 << 20
MAX_MEMBERS = 200_000  # tarfile keeps one header object per member in memory
MAX_MANIFEST = 64 << 20  # the manifest and the crate are the members read whole
MAX_HEADER = 1 << 20  # pax and GNU long-name headers, which tarfile reads whole
CHUNK = 1 << 20
MAX_MTIME = 1 << 40  # year 36812: any later mtime is made up, and utime may overflow


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses extended headers so large that tarfile would read them whole into memory."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                         tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) and self.size > MAX_HEADER:
            raise _Refused(f"extended header of {self.size} bytes (over {MAX_HEADER}): "
                           f"{self.name}")
        return super()._proc_member(tar)


_KINDS = {tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.FIFOTYPE: "FIFO",
          tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device",
          tarfile.GNUTYPE_SPARSE: "sparse file"}


def _member_problem(member: tarfile.TarInfo) -> str | None:
    """Why this member cannot be extracted as it is hashed, or None."""
    if member.isdir() or (member.isfile() and not member.issparse()):
        return None
    kind = _KINDS.get(member.type, f"member of type {member.type!r}")
    target = f" -> {member.linkname}" if member.issym() or member.islnk() else ""
    return f"{kind}, not a regular file or folder: {member.name}{target}"


def _parse_manifest(data: bytes) -> tuple[dict[str, str], list[str]]:
    """Name -> SHA-256 from ``MANIFEST.sha256``, and what is malformed in it."""
    manifest: dict[str, str] = {}
    problems: list[str] = []
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return manifest, [f"{MANIFEST} is not UTF-8"]
    for number, line in enumerate(text.splitlines(), 1):
        digest, sep, name = line.partition("  ")
        if not sep or not name or len(digest) != 64:
            problems.append(f"{MANIFEST} line {number} malformed: {line[:80]!r}")
        elif name in manifest:
            problems.append(f"{MANIFEST} lists twice: {name}")
        else:
            manifest[name] = digest
    return manifest, problems


def _inflated(chunks: Iterable[bytes], source: _Hashing, what: str) -> Iterator[bytes]:
    """``chunks`` as they come, refused (:data:`MAX_RATIO`) once they outgrow the .tar.gz
    bytes read for them so far that they can only be a compression bomb: it is neither
    inflated in full nor written to disk."""
    start, out = source.count, 0
    for chunk in chunks:
        out += len(chunk)
        if out > BOMB_FLOOR and out > MAX_RATIO * (source.count - start):
            raise _Refused(f"a compression bomb: {out} bytes from {source.count - start} of "
                           f"the .tar.gz (over {MAX_RATIO}-fold) in {what}")
        yield chunk


def _hashed(handle: IO[bytes], digest: Any, keep: list[bytes] | None) -> Iterator[bytes]:
    """A member's data in chunks, hashed on the way: never held whole (a bomb stays small)."""
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
        if keep is not None:
            keep.append(chunk)
        yield chunk


def _write(path: Path, chunks: Iterable[bytes], member: tarfile.TarInfo) -> None:
    """One checked regular file of the copy, mode (no setuid, no group write) and mtime kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with open(os.open(path, flags, 0o600), "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        os.chmod(path, (member.mode & 0o755) | 0o600)
        os.utime(path, (member.mtime, member.mtime))
    except OSError as err:  # disk full, say: the copy is unusable, not the archive
        raise _Refused(f"cannot write {path}: {err}") from err


def _walk(source: _Hashing, archive: Path,
          into: Path | None = None) -> tuple[list[str], str | None]:
    """Check every member of ``archive`` (read from ``source``) in one streaming pass; the
    problems and the top folder.

    The one check behind both ``verify`` and ``extract``, so that they cannot disagree:
    only regular files and folders, safe names, one top folder, no duplicates, every
    file listed in the manifest with its hash and every listed file present. With
    ``into`` (an empty folder) the checked files and folders are written there as they
    are hashed, modes and mtimes kept; the caller throws it away when problems are found.
    """
    problems: list[str] = []
    hashes: dict[str, str] = {}
    sizes: dict[str, int] = {}
    manifest: dict[str, str] | None = None
    crate_data: bytes | None = None
    top: str | None = None
    seen: set[str] = set()
    files: set[str] = set()
    folders: set[str] = set()
    times: list[tuple[Path, int, float]] = []  # folders: set last, writing files changes them
    total = members = 0
    try:
        with tarfile.open(str(archive), "r:gz", source,  # type: ignore[arg-type]
                          tarinfo=_BoundedTarInfo) as tar:
            while (member := tar.next()) is not None:
                members += 1
                if members > MAX_MEMBERS:
                    raise _Refused(f"more than {MAX_MEMBERS} members")
                path = PurePosixPath(member.name)
                name = str(path)
                if path.is_absolute() or ".." in path.parts or name == ".":
                    problems.append(f"unsafe path, would land outside the target folder: "
                                    f"{member.name}")
                    continue
                if (why := _member_problem(member)) is not None:
                    problems.append(why)
                    continue
                if not 0 <= member.mtime < MAX_MTIME or member.size < 0:
                    # extract could not set it (utime overflows): refused by verify too
                    problems.append(f"mtime {member.mtime!r} or size {member.size} out of "
                                    f"range: {member.name}")
                    continue
                if top is None:
                    top = path.parts[0]
                if path.parts[0] != top:
                    problems.append(f"second top folder {path.parts[0]!r} (first {top!r}): "
                                    f"{member.name}")
                    continue
                if name in seen:
                    problems.append(f"duplicate member: {member.name}")
                    continue
                seen.add(name)
                parents = [str(p) for p in path.parents][:-1]  # without "."
                if any(p in files for p in parents) or (member.isdir() and name in files) \
                        or (member.isfile() and name in folders):
                    problems.append(f"both a file and a folder: {member.name}")
                    continue
                folders.update(parents)
                if member.isdir():
                    folders.add(name)
                    if into is not None:
                        try:
                            (into / name).mkdir(parents=True, exist_ok=True)
                        except OSError as err:
                            raise _Refused(f"cannot write {into / name}: {err}") from err
                        times.append((into / name, (member.mode & 0o755) | 0o700, member.mtime))
                    continue
                files.add(name)
                if len(path.parts) < 2:
                    problems.append(f"file outside any top folder: {member.name}")
                    continue
                total += member.size
                if total > MAX_BYTES:
                    raise _Refused(f"files add up to more than {MAX_BYTES} bytes at: "
                                   f"{member.name} ({member.size} bytes)")
                relative = "/".join(path.parts[1:])
                whole = relative in (MANIFEST, crate.NAME)  # read whole: bounded
                if whole and member.size > MAX_MANIFEST:
                    raise _Refused(f"{relative} of {member.size} bytes: {member.name}")
                handle = tar.extractfile(member)
                assert handle is not None  # a regular file always has a reader
                digest = hashlib.sha256()
                kept: list[bytes] = []
                stream = _inflated(_hashed(handle, digest, kept if whole else None), source,
                                   member.name)
                if into is None:
                    for _ in stream:
                        pass
                else:
                    _write(into / name, stream, member)
                if relative == MANIFEST:
                    manifest, malformed = _parse_manifest(b"".join(kept))
                    problems += malformed
                else:
                    hashes[relative] = digest.hexdigest()
                    sizes[relative] = member.size
                    if relative == crate.NAME:
                        crate_data = b"".join(kept)
            # the rest of the stream: the gzip checksum, and nothing hidden after the end
            tail = 0
            rest = iter(lambda: tar.fileobj.read(CHUNK), b"")
            for chunk in _inflated(rest, source, "the padding after the last member"):
                tail += len(chunk)
                if chunk.strip(b"\0"):
                    raise _Refused("data after the end of the archive")
                if tail > MAX_BYTES:
                    raise _Refused(f"more than {MAX_BYTES} bytes after the end of the archive")
    except _Refused as err:
        return [*problems, f"refused: {err}"], top
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        return [*problems, f"not a readable .tar.gz: {str(err) or type(err).__name__}"], top
    if top is None:
        return [*problems, "empty archive: no members"], top
    if manifest is None:
        return [*problems, f"no {MANIFEST} in {top}/"], top
    for name, digest in sorted(manifest.items()):
        if name not in hashes:
            problems.append(f"missing: {name}")
        elif hashes[name] != digest:
            problems.append(f"changed: {name}")
    problems += [f"not in manifest: {name}" for name in sorted(set(hashes) - set(manifest))]
    if crate_data is not None:
        described = {name: (digest, sizes[name]) for name, digest in hashes.items()
                     if name != crate.NAME}
        changed = {name for name, digest in manifest.items() if hashes.get(name, digest)
                   != digest}
        problems += crate.problems(crate_data, described, changed)
    if into is not None and not problems:
        for folder, mode, mtime in sorted(times, reverse=True):  # deepest first
            os.chmod(folder, mode)
            os.utime(folder, (mtime, mtime))
    return problems, top


@dataclass(frozen=True)
class Checked:
    """What checking an archive found: its ``problems`` (empty: intact, each
    :func:`printable`), its top folder, the SHA-256 of the bytes checked (empty where the
    file could not be opened) and the one its ``.sha256`` states (None: no such file)."""

    problems: list[str]
    top: str | None
    digest: str
    sealed: str | None


def _check(archive: Path, into: Path | None = None) -> Checked:
    """:func:`_walk` over the archive's bytes, hashed as they are read, then that digest
    against ``<archive>.sha256`` where it exists: its problem comes first."""
    try:
        with open(archive, "rb") as handle:
            reader = _Hashing(handle)
            problems, top = _walk(reader, archive, into)
            while reader.read(CHUNK):  # the bytes after a refusal: the digest is of the file
                pass
            digest = reader.digest.hexdigest() if reader.sequential else file_sha256(archive)
    except OSError as err:  # opening it, or reading past where the walk stopped
        return Checked([printable(f"not a readable .tar.gz: {err}")], None, "", None)
    seal: list[str] = []
    try:
        sealed = sealed_digest(archive)
    except ValueError as err:
        sealed, seal = None, [str(err)]
    if sealed is not None and sealed != digest:
        seal = [f"sha256 {digest} is not the {sealed} that {sidecar(archive).name} states: "
                f"not the archive published with it (altered, its data and checksums "
                f"perhaps rewritten together)"]
    return Checked([printable(p) for p in [*seal, *problems]], top, digest, sealed)


def verify(archive: Path) -> list[str]:
    """Problems found checking ``archive`` against its ``.sha256`` (where it has one), its
    manifest and its RO-Crate (empty: intact).

    Exactly what ``extract`` checks, so an archive that verifies extracts to the
    data its manifest names, and one that does not is refused by both.
    """
    return _check(Path(archive)).problems


def extract(archive: Path, target: Path) -> Path:
    """Extract into ``target`` (never outside it) after checking it; return the top folder.

    Written into a temporary folder beside the destination and renamed into place,
    so a refused archive (``ArchiveError``, the same problems as ``verify``) leaves
    nothing behind. ``target`` may exist (the top folder goes inside it) or not.
    """
    archive, target = Path(archive), Path(target)
    if target.exists() and not target.is_dir():
        raise ArchiveError(f"{target} exists and is not a folder")
    beside = target if target.is_dir() else target.parent
    beside.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.extract-", dir=beside))
    try:
        checked = _check(archive, tmp)
        problems, top = checked.problems, checked.top
        if problems or top is None:
            more = f" (and {len(problems) - 1} more; see perfgrid verify)" \
                if len(problems) > 1 else ""
            raise ArchiveError(f"{archive}: refused, nothing extracted: {problems[0]}{more}")
        if beside == target:
            if (target / top).exists():
                raise ArchiveError(f"{target / top} already exists")
            os.rename(tmp / top, target / top)
        else:
            os.chmod(tmp, 0o755)
            os.rename(tmp, target)
        return target / top
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def seal_words(archive: Path, checked: Checked) -> str:
    """What the archive's digest vouches for, in words, for ``perfgrid verify`` to print
    (a digest unlike the ``.sha256``'s is the first problem, with both digests)."""
    name = printable(sidecar(archive).name)
    if not checked.digest:
        return "sha256: none (the file could not be read)"
    if checked.sealed == checked.digest:
        return (f"sha256 {checked.digest}: as {name} states, so the archive published with "
                f"it")
    if checked.problems:  # failed on its own: what a .sha256 could add is beside the point
        return f"sha256 {checked.digest}"
    return (f"sha256 {checked.digest}: no {name} beside it, so only internal checksums "
            f"were checked; they travel inside the archive and cannot vouch against data "
            f"and checksums rewritten together: compare this digest with the one published "
            f"with the archive")


def main_verify(paths: Iterable[str]) -> int:
    status = 0
    for path in paths:
        started = time.perf_counter()
        checked = _check(Path(path))
        elapsed = time.perf_counter() - started
        shown = printable(path)
        if checked.problems:
            status = 1
            print(f"{shown}: FAILED ({len(checked.problems)} problems)")
            if checked.sealed in (None, checked.digest):  # else the first problem says it
                print(f"  {seal_words(Path(path), checked)}")
            for problem in checked.problems[:50]:
                print(f"  {problem}")
        else:
            print(f"{shown}: OK ({elapsed:.1f} s)")
            print(f"  {seal_words(Path(path), checked)}")
    return status
