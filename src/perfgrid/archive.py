"""Archives of a result set for papers: create, verify, extract safely.

An archive is a ``.tar.gz`` whose single top folder is a runnable copy of
the workflow (Snakefile, workflow/, src/, config/, profiles/ from git) with
``results/<host>/`` inside it (raw pyperf JSON, tables, plots, reports,
machine.json; not the regenerable test file), the config as used, the
installed package list, and ``MANIFEST.sha256`` over every other member.
Member mtimes are kept, so Snakemake in an extracted copy plans nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from perfgrid import lifetime
from perfgrid.paths import REPO

MANIFEST = "MANIFEST.sha256"
CODE_PATHS = ("Snakefile", "workflow", "src", "config", "profiles", "pyproject.toml",
              "environment.yml", "README.md", "CITATION.cff", "Makefile")
#: files of a result set that are not archived: regenerable or huge
SKIP_SUFFIXES = (".bin", ".lock", ".sqlite", ".sqlite-wal", ".sqlite-shm")


def _git(*args: str) -> str:
    try:
        return subprocess.run(lifetime.command(["git", *args]), cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def archive_name(host: str, when: float | None = None) -> str:
    """``perfgrid-<host>-<UTC date>-<short commit>``."""
    date = time.strftime("%Y%m%d", time.gmtime(when))
    commit = _git("rev-parse", "--short=10", "HEAD") or "nogit"
    return f"perfgrid-{host}-{date}-{commit}"


def code_files() -> list[Path]:
    """The workflow's source files: what git tracks, as in the working tree."""
    listed = _git("ls-files", "--", *CODE_PATHS)
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


def result_files(root: Path) -> list[Path]:
    """Every file of a result set worth keeping (hidden and regenerable ones left out)."""
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not p.name.endswith(SKIP_SUFFIXES)
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def _sha256(data: bytes | Path) -> str:
    if isinstance(data, Path):
        with open(data, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
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


def create(results_root: Path, output: Path) -> Path:
    """Write the archive of ``results_root`` (``results/<host>``) to ``output``."""
    top = output.name.removesuffix(".tar.gz")
    host = results_root.name
    entries: list[tuple[str, Path]] = [(str(p.relative_to(REPO)), p) for p in code_files()]
    entries += [(f"results/{host}/{p.relative_to(results_root)}", p)
                for p in result_files(results_root)]
    now = time.time()
    dirty = "yes" if _git("status", "--porcelain", "--untracked-files=no") else "no"
    generated = {
        "packages.txt": installed_packages().encode(),
        "GIT": f"commit {_git('rev-parse', 'HEAD') or 'unknown'}\ndirty {dirty}\n".encode(),
    }
    lines = [f"{_sha256(path)}  {name}" for name, path in entries]
    lines += [f"{_sha256(data)}  {name}" for name, data in generated.items()]
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    try:
        # folders too, so that their mtimes come back (a plot folder is an output)
        folders = [path for path in [results_root, *sorted(results_root.rglob("*"))]
                   if path.is_dir() and not any(part.startswith(".") for part in
                                                path.relative_to(results_root).parts)]
        with tarfile.open(tmp, "w:gz") as tar:
            for path in folders:
                name = f"results/{host}/{path.relative_to(results_root)}".removesuffix("/.")
                tar.add(path, arcname=f"{top}/{name}", recursive=False)
            for name, path in entries:
                tar.add(path, arcname=f"{top}/{name}", recursive=False)
            for name, data in generated.items():
                _add_bytes(tar, f"{top}/{name}", data, now)
            _add_bytes(tar, f"{top}/{MANIFEST}", ("\n".join(lines) + "\n").encode(), now)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    return output


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"archive member {name!r} would land outside the target folder")
    return path


def verify(archive: Path) -> list[str]:
    """Problems found checking ``archive`` against its manifest (empty: intact)."""
    problems: list[str] = []
    hashes: dict[str, str] = {}
    manifest: dict[str, str] | None = None
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            _safe_name(member.name)
            if not member.isfile():
                continue
            relative = "/".join(PurePosixPath(member.name).parts[1:])
            data = tar.extractfile(member).read()
            if relative == MANIFEST:
                manifest = {}
                for line in data.decode().splitlines():
                    digest, _, name = line.partition("  ")
                    manifest[name] = digest
            else:
                hashes[relative] = _sha256(data)
    if manifest is None:
        return [f"{archive}: no {MANIFEST}"]
    for name, digest in sorted(manifest.items()):
        if name not in hashes:
            problems.append(f"missing: {name}")
        elif hashes[name] != digest:
            problems.append(f"changed: {name}")
    problems += [f"not in manifest: {name}" for name in sorted(set(hashes) - set(manifest))]
    return problems


def extract(archive: Path, target: Path) -> Path:
    """Extract into ``target`` (never outside it); return the top folder."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        for member in members:
            _safe_name(member.name)
        tar.extractall(target, members=members, filter="data")
    tops = {PurePosixPath(m.name).parts[0] for m in members}
    return target / sorted(tops)[0]


def main_verify(paths: Iterable[str]) -> int:
    status = 0
    for path in paths:
        started = time.perf_counter()
        problems = verify(Path(path))
        elapsed = time.perf_counter() - started
        if problems:
            status = 1
            print(f"{path}: FAILED ({len(problems)} problems)")
            for problem in problems[:50]:
                print(f"  {problem}")
        else:
            print(f"{path}: OK ({elapsed:.1f} s)")
    return status
