"""Hostile archives: whatever ``verify`` passes, ``extract`` writes, and nothing else.

Every archive here is built with tarfile in tmp_path. Each hostile one must fail
``verify`` with the offending member named, be refused by ``extract`` in one line
with nothing left behind, and do the same through the ``perfgrid`` command line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import pyperf
import pytest
import yaml

from perfgrid.publish import archive, crate

from helpers import need

TOP = "perfgrid-h-20260101-abc"
FILES = {
    "Snakefile": b"include: 'workflow/rules/common.smk'\n",
    "results/h/tables/file_read.csv": b"variant,rate\nread,1.5\n",
    "results/h/raw/file_read/variant=read.json": b'{"benchmarks": []}\n',
    "GIT": b"commit abc\ndirty no\n",
}
TABLE = "results/h/tables/file_read.csv"
MTIME = 1_700_000_000

Member = tuple[tarfile.TarInfo, bytes | None]


def regular(name: str, data: bytes, mtime: float = MTIME) -> Member:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    return info, data


def special(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime = kind, linkname, MTIME
    return info, None


def folder(name: str) -> Member:
    return special(name, tarfile.DIRTYPE)


def manifest(files: dict[str, bytes], top: str = TOP) -> Member:
    lines = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items())
    return regular(f"{top}/{archive.MANIFEST}", lines.encode())


def good_members(files: dict[str, bytes] = FILES) -> list[Member]:
    return [folder(f"{TOP}/results/h"),
            *(regular(f"{TOP}/{n}", d) for n, d in files.items()), manifest(files)]


def write(path: Path, members: list[Member], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def replaced(name: str, by: Member) -> list[Member]:
    """The good archive with member ``TOP/name`` swapped for ``by``; manifest unchanged."""
    return [by if info.name == f"{TOP}/{name}" else (info, data)
            for info, data in good_members()]


def altered(data: bytes) -> bytes:
    return data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]


def good_bytes(tmp: Path) -> bytes:
    return write(tmp / "good.src", good_members()).read_bytes()


# name -> (builds the hostile archive at the path given, text the problem must contain)
HOSTILE: dict[str, tuple[Callable[[Path], object], str]] = {
    "symlink replacing a hashed file": (
        lambda p: write(p, replaced(TABLE, special(f"{TOP}/{TABLE}", tarfile.SYMTYPE,
                                                   "/etc/passwd"))),
        f"symlink, not a regular file or folder: {TOP}/{TABLE}"),
    "hardlink replacing a hashed file": (
        lambda p: write(p, replaced(TABLE, special(f"{TOP}/{TABLE}", tarfile.LNKTYPE,
                                                   f"{TOP}/Snakefile"))),
        f"hardlink, not a regular file or folder: {TOP}/{TABLE}"),
    "FIFO": (
        lambda p: write(p, [*good_members(), special(f"{TOP}/results/h/pipe", tarfile.FIFOTYPE)]),
        f"FIFO, not a regular file or folder: {TOP}/results/h/pipe"),
    "character device": (
        lambda p: write(p, [*good_members(), special(f"{TOP}/dev/null", tarfile.CHRTYPE)]),
        f"character device, not a regular file or folder: {TOP}/dev/null"),
    "block device": (
        lambda p: write(p, [*good_members(), special(f"{TOP}/dev/sda", tarfile.BLKTYPE)]),
        f"block device, not a regular file or folder: {TOP}/dev/sda"),
    "member not in the manifest": (
        lambda p: write(p, [*good_members(), regular(f"{TOP}/results/h/extra.csv", b"x\n")]),
        "not in manifest: results/h/extra.csv"),
    "manifest entry missing": (
        lambda p: write(p, [m for m in good_members() if not m[0].name.endswith(TABLE)]),
        f"missing: {TABLE}"),
    "second top folder with altered copies": (
        lambda p: write(p, [*good_members(), *(
            regular(f"{TOP[:-1]}0/{n}", altered(d)) for n, d in FILES.items()),
            manifest({n: altered(d) for n, d in FILES.items()}, top=f"{TOP[:-1]}0")]),
        f"second top folder '{TOP[:-1]}0'"),
    "no manifest": (
        lambda p: write(p, good_members()[:-1]),
        f"no {archive.MANIFEST}"),
    "tampered byte": (
        lambda p: write(p, replaced(TABLE, regular(f"{TOP}/{TABLE}", altered(FILES[TABLE])))),
        f"changed: {TABLE}"),
    "absolute path": (
        lambda p: write(p, [*good_members(), regular("/tmp/perfgrid-evil.txt", b"x")]),
        "unsafe path, would land outside the target folder: /tmp/perfgrid-evil.txt"),
    "dot-dot path": (
        lambda p: write(p, [*good_members(), regular(f"{TOP}/../../escaped.txt", b"x")]),
        f"unsafe path, would land outside the target folder: {TOP}/../../escaped.txt"),
    "duplicate member, altered copy first": (
        lambda p: write(p, [regular(f"{TOP}/{TABLE}", altered(FILES[TABLE])),
                            *good_members()]),
        f"duplicate member: {TOP}/{TABLE}"),
    "a file where a folder must be": (
        lambda p: write(p, good_members({"results": b"x", **FILES})[1:]),
        f"both a file and a folder: {TOP}/results/h/tables/file_read.csv"),
    "a second archive hidden after the end": (
        lambda p: p.write_bytes(gzip.compress(
            gzip.decompress(good_bytes(p.parent))
            + gzip.decompress(write(p.parent / "evil.src", [
                regular(f"{TOP}/{TABLE}", altered(FILES[TABLE]))]).read_bytes()))),
        "data after the end of the archive"),
    "mtime no file system can hold": (
        lambda p: write(p, [*good_members()[:-1],
                            regular(f"{TOP}/results/h/late.csv", b"x\n", mtime=1e300),
                            manifest({**FILES, "results/h/late.csv": b"x\n"})]),
        f"out of range: {TOP}/results/h/late.csv"),
    "empty file": (lambda p: p.write_bytes(b""), "not a readable .tar.gz"),
    "not gzip (a plain tar)": (
        lambda p: write(p, good_members(), mode="w"), "not a readable .tar.gz"),
    "not gzip (text)": (
        lambda p: p.write_text("this is not an archive\n"), "not a readable .tar.gz"),
    "gzip of something that is not a tar": (
        lambda p: p.write_bytes(gzip.compress(b"hello\n" * 100)), "not a readable .tar.gz"),
    "truncated gzip (half)": (
        lambda p: p.write_bytes(good_bytes(p.parent)[: len(good_bytes(p.parent)) // 2]),
        "not a readable .tar.gz"),
    "truncated gzip (checksum cut)": (
        lambda p: p.write_bytes(good_bytes(p.parent)[:-4]), "not a readable .tar.gz"),
    "garbage after the gzip stream": (
        lambda p: p.write_bytes(good_bytes(p.parent) + b"garbage!" * 4),
        "not a readable .tar.gz"),
}


def leftovers(folder: Path, archive_path: Path) -> list[str]:
    """What exists in ``folder`` besides the archive and the builder's scratch files."""
    return sorted(p.name for p in folder.iterdir()
                  if p != archive_path and not p.name.endswith(".src"))


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfgrid.pipeline.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_a_good_archive_verifies_and_extracts_to_its_data(tmp_path):
    path = write(tmp_path / "good.tar.gz", good_members())
    assert archive.verify(path) == []
    top = archive.extract(path, tmp_path / "out")
    assert top == tmp_path / "out" / TOP
    for name, data in FILES.items():
        assert (top / name).read_bytes() == data
        assert (top / name).stat().st_mtime == MTIME
    assert (top / "results/h").stat().st_mtime == MTIME
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [TOP]
    # into a folder that exists: the top folder goes inside it, nothing else
    (tmp_path / "there").mkdir()
    assert archive.extract(path, tmp_path / "there") == tmp_path / "there" / TOP
    assert sorted(p.name for p in (tmp_path / "there").iterdir()) == [TOP]
    with pytest.raises(archive.ArchiveError, match="already exists"):
        archive.extract(path, tmp_path / "there")
    done = cli("verify", str(path))
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_fails_verify_and_extract(tmp_path, case):
    build, expected = HOSTILE[case]
    path = tmp_path / "hostile.tar.gz"
    build(path)

    problems = archive.verify(path)
    assert problems, f"{case}: verify passed"
    assert any(expected in p for p in problems), problems

    dest = tmp_path / "dest"
    with pytest.raises(archive.ArchiveError) as refused:
        archive.extract(path, dest)
    message = str(refused.value)
    assert "\n" not in message and "refused" in message and expected in message
    assert not dest.exists()
    assert leftovers(tmp_path, path) == []
    assert not Path("/tmp/perfgrid-evil.txt").exists()

    done = cli("verify", str(path))
    assert done.returncode == 1 and "FAILED" in done.stdout and expected in done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    done = cli("extract", str(path), str(dest))
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and expected in done.stderr, done.stderr
    assert not dest.exists() and leftovers(tmp_path, path) == []


def test_a_missing_archive_is_one_line_too(tmp_path):
    for command in (["verify"], ["extract"]):
        done = cli(*command, str(tmp_path / "absent.tar.gz"), *(
            [str(tmp_path / "dest")] if command == ["extract"] else []))
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "absent.tar.gz" in done.stdout + done.stderr
    assert leftovers(tmp_path, tmp_path) == []


class Zeros(io.RawIOBase):
    """``size`` zero bytes, produced as read: the bomb never exists whole in the test."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def test_a_gzip_bomb_is_hashed_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_RATIO", 10**6)  # not refused as a bomb: read through
    size = 200 << 20
    bomb = tmp_path / "bomb.tar.gz"
    info = tarfile.TarInfo(f"{TOP}/results/h/bomb.bin")
    info.size = size
    files = {**FILES, "results/h/bomb.bin": b"not these bytes"}  # the manifest disagrees
    with tarfile.open(bomb, "w:gz", compresslevel=6) as tar:
        for member, data in good_members():
            if member.name.endswith(archive.MANIFEST):
                tar.addfile(info, io.BufferedReader(Zeros(size)))
                member, data = manifest(files)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    assert bomb.stat().st_size < size / 100

    tracemalloc.start()
    try:
        problems = archive.verify(bomb)
        _, verify_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with pytest.raises(archive.ArchiveError, match="changed: results/h/bomb.bin"):
            archive.extract(bomb, tmp_path / "dest")
        _, extract_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert problems == ["changed: results/h/bomb.bin"]
    assert verify_peak < size / 20 and extract_peak < size / 20, (verify_peak, extract_peak)
    assert not (tmp_path / "dest").exists() and leftovers(tmp_path, bomb) == []


def test_a_huge_extended_header_is_refused_unread(tmp_path):
    """A pax header tarfile would read whole into memory: refused from its declared size."""
    size = 64 << 20
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, size
    raw = header.tobuf(tarfile.USTAR_FORMAT)
    path = tmp_path / "pax.tar.gz"
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(raw)
        for _ in range(size >> 20):
            out.write(bytes(1 << 20))
        out.write(bytes(1024))
    tracemalloc.start()
    try:
        problems = archive.verify(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert any("extended header" in p for p in problems), problems
    assert peak < size / 8, peak


@pytest.mark.parametrize("limit, value, expected", [
    ("MAX_BYTES", 30, "files add up to more than 30 bytes at: "),
    ("MAX_MEMBERS", 3, "more than 3 members"),
])
def test_the_size_and_member_caps_refuse_with_a_clear_message(tmp_path, monkeypatch,
                                                              limit, value, expected):
    path = write(tmp_path / "big.tar.gz", good_members())
    monkeypatch.setattr(archive, limit, value)
    problems = archive.verify(path)
    assert any(expected in p for p in problems), problems
    with pytest.raises(archive.ArchiveError, match=expected):
        archive.extract(path, tmp_path / "dest")
    assert not (tmp_path / "dest").exists() and leftovers(tmp_path, path) == []


# compare: never reads an archive that fails verify, nor a file outside its inputs

AXES = {"variant": "read", "cache": "warm", "binding": "none", "workers": 1,
        "block_size": 65536}


def result_folder(root: Path, result_file: str) -> Path:
    """``results/<host>`` with a file_read table of one row whose result is ``result_file``."""
    (root / "tables").mkdir(parents=True)
    raw = root / "raw/file_read/variant=read.json"
    raw.parent.mkdir(parents=True)
    bench = pyperf.Benchmark([pyperf.Run([1.0, 1.1], metadata={"name": "x"},
                                         collect_metadata=False)])
    bench.dump(str(raw))
    pd.DataFrame([{**AXES, "runtime": "python", "rate": 1.0, "rate_unit": "bytes/s",
                   "cv": 0.05, "result_file": result_file}]).to_csv(
        root / "tables/file_read.csv", index=False)
    return root


def test_compare_refuses_an_archive_that_fails_verify(tmp_path):
    from perfgrid.publish import compare

    a = result_folder(tmp_path / "a", "results/a/raw/file_read/variant=read.json")
    bad = write(tmp_path / "b.tar.gz", replaced(TABLE, special(
        f"{TOP}/{TABLE}", tarfile.SYMTYPE, str(a / "tables/file_read.csv"))))
    with pytest.raises(ValueError, match=f"symlink.*{TABLE}"):
        compare.compare(str(a), str(bad), tmp_path / "out")
    assert not (tmp_path / "out" / "compare.md").exists()
    done = cli("compare", str(a), str(bad), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "symlink" in done.stderr, done.stderr


@pytest.mark.parametrize("recorded", [
    "{outside}",                           # absolute, elsewhere
    "../outside.json",                     # relative to where compare runs
    "results/b/raw/../../outside.json",    # under raw/, then out of it
    "/etc/passwd",
])
def test_compare_never_opens_a_result_file_outside_its_inputs(tmp_path, monkeypatch,
                                                              recorded):
    from perfgrid.publish import compare

    a = result_folder(tmp_path / "a", "results/a/raw/file_read/variant=read.json")
    outside = tmp_path / "outside.json"  # valid pyperf JSON: only the path is wrong
    shutil.copy(a / "raw/file_read/variant=read.json", outside)
    recorded = recorded.format(outside=outside)
    b = result_folder(tmp_path / "b", recorded)
    monkeypatch.chdir(b)
    with pytest.raises(ValueError, match="result_file") as refused:
        compare.compare(str(a), str(b), tmp_path / "out")
    assert recorded in str(refused.value)
    assert not (tmp_path / "out" / "compare.md").exists()
    assert os.path.exists(outside)


def test_create_writes_what_verify_accepts_even_with_links(tmp_path):
    """A result set with hardlinked files archives as plain file contents."""
    root = tmp_path / "results" / "h"
    (root / "raw").mkdir(parents=True)
    (root / "raw/a.json").write_text('{"a": 1}\n')
    os.link(root / "raw/a.json", root / "raw/b.json")
    made = archive.create(root, tmp_path / "out" / "perfgrid-h-test.tar.gz")
    assert archive.verify(made) == []
    top = archive.extract(made, tmp_path / "x")
    for name in ("raw/a.json", "raw/b.json"):
        path = top / "results/h" / name
        assert path.is_file() and not path.is_symlink() and path.stat().st_nlink == 1
        assert path.read_text() == '{"a": 1}\n'
    assert not (top / archive.LEFT_OUT).exists()


def test_create_never_follows_a_symlink_and_names_what_it_left_out(tmp_path, capsys):
    """Symlinks (to a file or a folder outside, or inside) and a FIFO are left out, printed
    and listed in LEFT_OUT.txt: no byte from outside the result set reaches the tarball."""
    secret = tmp_path / "private"
    (secret / "keys").mkdir(parents=True)
    (secret / "id.txt").write_text("SECRET-BYTES-1\n")
    (secret / "keys/key.txt").write_text("SECRET-BYTES-2\n")
    root = tmp_path / "results" / "h"
    (root / "tables").mkdir(parents=True)
    (root / "tables/file_read.csv").write_text("variant,rate\nread,1.5\n")
    (root / "tables/outside.csv").symlink_to(secret / "id.txt")
    (root / "tables/inside.csv").symlink_to(root / "tables/file_read.csv")
    (root / "keys").symlink_to(secret / "keys")
    os.mkfifo(root / "tables/pipe")
    made = archive.create(root, tmp_path / "out" / "perfgrid-h-test.tar.gz")

    assert b"SECRET-BYTES" not in gzip.decompress(made.read_bytes())
    with tarfile.open(made) as tar:
        members = tar.getmembers()
    assert all(m.isfile() or m.isdir() for m in members)
    names = {m.name.split("/", 1)[1] for m in members}
    assert "results/h/tables/file_read.csv" in names
    assert not names & {"results/h/tables/outside.csv", "results/h/tables/inside.csv",
                        "results/h/keys", "results/h/keys/key.txt", "results/h/tables/pipe"}
    expected = ["results/h/keys (symlink)", "results/h/tables/inside.csv (symlink)",
                "results/h/tables/outside.csv (symlink)", "results/h/tables/pipe (FIFO)"]
    printed = [line.removeprefix("archive: left out ")
               for line in capsys.readouterr().out.splitlines()]
    assert sorted(printed) == expected
    assert archive.verify(made) == []  # the list is in the manifest like any member
    top = archive.extract(made, tmp_path / "x")
    assert sorted((top / archive.LEFT_OUT).read_text().splitlines()) == expected


# the RO-Crate inside an archive, the archive's own SHA-256, and a report from an archive

RUN_START = 1_700_000_000.0
MACHINE = {"python": "3.99.1", "python_implementation": "CPython", "kernel": "9.9.9-recorded",
           "cpu_model": "Recorded CPU", "cpus_logical": 2,
           "packages": {"snakemake": "9.99.0", "pyperf": "2.99.0"},
           "tools": {"cc": "cc (recorded) 99.1", "dd": "dd (coreutils) 99.2", "fio": None,
                     "erl": "99 (erts 1.2)", "ab": None, "perf": None}}
CRATE_TABLE = "results/h/tables/file_read.csv"
CRATE_RAW = "results/h/raw/file_read/variant=read.json"


def crate_result_set(root: Path) -> Path:
    """``results/h`` as the pipeline leaves it, in miniature, with versions no machine has."""
    files = {
        "machine.json": json.dumps(MACHINE),
        "run.json": json.dumps({"started": RUN_START, "snakemake": "9.99.0"}),
        "config.used.yaml": "host: h\n",
        "tables/file_read.csv": f"variant,started,finished\nread,{RUN_START + 100},"
                                f"{RUN_START + 200}\n",
        "raw/file_read/variant=read.json": '{"benchmarks": []}\n',
        "report.md": "# perfgrid report: h\n",
        "logs/machine.log": "machine: ok\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """An archive made by ``perfgrid archive`` (the command line) of a miniature result set."""
    tmp = tmp_path_factory.mktemp("crate")
    root = crate_result_set(tmp / "results" / "h")
    out = tmp / "out" / "perfgrid-h-test.tar.gz"
    done = cli("archive", str(root), str(out))
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"archive: sha256 {digest}" in done.stdout
    return out


def test_the_sha256_beside_the_archive_is_what_sha256sum_says(made):
    need("sha256sum")
    assert archive.sidecar(made) == made.with_name(made.name + ".sha256")
    printed = subprocess.run(["sha256sum", made.name], cwd=made.parent, capture_output=True,
                             text=True, check=True).stdout
    assert archive.sidecar(made).read_text() == printed
    check = subprocess.run(["sha256sum", "-c", archive.sidecar(made).name], cwd=made.parent,
                           capture_output=True, text=True)
    assert check.returncode == 0 and f"{made.name}: OK" in check.stdout


def ids(value) -> set[str]:
    """The ids a property refers to: entities of the crate, or ids it does not describe."""
    items = value if isinstance(value, list) else [value]
    return {e if isinstance(e, str) else e["@id"] if isinstance(e, dict) else e.id
            for e in items}


def test_the_crate_reads_back_with_the_profiles_entities_and_every_files_hash(made, tmp_path):
    from rocrate.rocrate import ROCrate

    assert archive.verify(made) == []
    top = archive.extract(made, tmp_path / "x")
    ro = ROCrate(top)
    # the profiles: Process Run, Workflow Run (0.5) and Workflow RO-Crate
    assert ids(ro.root_dataset["conformsTo"]) >= {crate.PROCESS_RUN, crate.WORKFLOW_RUN,
                                                  crate.WORKFLOW_RO_CRATE}
    assert "https://w3id.org/ro/crate/1.1" in ids(ro.metadata["conformsTo"])
    # the main entity: the Snakefile, a ComputationalWorkflow with its rules as parts
    workflow = ro.mainEntity
    assert workflow.id == "Snakefile"
    assert {"File", "SoftwareSourceCode", "ComputationalWorkflow"} <= set(workflow.type)
    assert "workflow/rules/archive.smk" in ids(workflow["hasPart"])
    assert workflow["programmingLanguage"]["version"] == "9.99.0"
    # one run: instrument, object (config, host label), result (raw, tables, report)
    (action,) = ro.get_by_type("CreateAction")
    assert ids(ro.root_dataset["mentions"]) == {action.id}
    assert action["instrument"].id == "Snakefile"
    assert "results/h/config.used.yaml" in ids(action["object"])
    assert any(getattr(o, "get", lambda k: None)("value") == "h" for o in action["object"])
    results = ids(action["result"])
    assert {"results/h/tables/file_read.csv", "results/h/report.md",
            "results/h/raw/file_read/variant%3Dread.json"} <= results
    assert "results/h/machine.json" not in results
    assert ro.get("results/h/machine.json")["about"].id == action.id
    assert action["startTime"] == "2023-11-14T22:13:20+00:00"  # run.json's start
    assert action["endTime"] >= action["startTime"]
    # the software that ran, as the result set recorded it (no machine has these versions)
    versions = {app["name"]: app["softwareVersion"] for app in workflow["softwareRequirements"]}
    assert versions["Python (CPython)"] == "3.99.1"
    assert versions["Linux kernel"] == "9.9.9-recorded"
    assert versions["snakemake"] == "9.99.0" and versions["pyperf"] == "2.99.0"
    assert versions["C compiler (cc)"] == "cc (recorded) 99.1"
    assert versions["dd"] == "dd (coreutils) 99.2" and versions["Erlang/OTP"] == "99 (erts 1.2)"
    assert "fio" not in versions  # not on PATH where it ran
    # licence and authors from CITATION.cff
    cff = yaml.safe_load((archive.REPO / "CITATION.cff").read_text())
    assert ro.root_dataset["license"].id == f"https://spdx.org/licenses/{cff['license']}"
    assert [a["name"] for a in ro.root_dataset["author"]] == [
        a.get("name") or f"{a['given-names']} {a['family-names']}" for a in cff["authors"]]
    # every file: in the crate with its size and SHA-256, and every File entity a file
    on_disk = {str(p.relative_to(top)) for p in top.rglob("*") if p.is_file()}
    listed = {}
    for entity in ro.get_by_type("File"):
        name = unquote(entity.id)
        data = (top / name).read_bytes()
        assert entity["sha256"] == hashlib.sha256(data).hexdigest(), name
        assert int(entity["contentSize"]) == len(data), name
        listed[name] = entity
    assert set(listed) == on_disk - {crate.NAME, archive.MANIFEST}
    # the manifest covers the crate
    assert f"  {crate.NAME}" in (top / archive.MANIFEST).read_text()


def rewritten(made: Path, dest: Path, edit=None, crate_bytes: bytes | None = None,
              extra: dict[str, bytes] | None = None, rehash: bool = True) -> Path:
    """``made`` with its crate edited (``edit(graph)``) or replaced, and ``extra`` files
    added; the manifest updated to match (``rehash``), so only the crate check can tell."""
    with tarfile.open(made) as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src]
    top = members[0][0].name.split("/")[0]
    out = []
    lines = None
    for info, data in members:
        relative = info.name.split("/", 1)[-1]
        if relative == crate.NAME:
            if crate_bytes is None:
                doc = json.loads(data)
                edit(doc["@graph"])
                crate_bytes = json.dumps(doc, indent=2).encode()
            data, info.size = crate_bytes, len(crate_bytes)
        if relative == archive.MANIFEST:
            lines = data.decode().splitlines()
            continue
        out.append((info, data))
    assert lines is not None
    if rehash:
        lines = [f"{hashlib.sha256(crate_bytes).hexdigest()}  {crate.NAME}"
                 if line.endswith(f"  {crate.NAME}") else line for line in lines]
    for name, data in (extra or {}).items():
        out.append(regular(f"{top}/{name}", data))
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {name}")
    out.append(regular(f"{top}/{archive.MANIFEST}", ("\n".join(lines) + "\n").encode()))
    return write(dest, out)


def entity(graph: list, name: str) -> dict:
    (found,) = [e for e in graph if unquote(e["@id"]) == name]
    return found


def _set(graph, name, key, value):
    entity(graph, name)[key] = value


# name -> (rewrites the made archive at the path given, the problems verify must find)
CRATE_CASES: dict[str, tuple[Callable[[Path, Path], object], list[str]]] = {
    "a checksum in the crate altered": (
        lambda m, p: rewritten(m, p, lambda g: _set(g, CRATE_TABLE, "sha256", "0" * 64)),
        [f"{crate.NAME} sha256 disagrees with the file: {CRATE_TABLE}"]),
    "a size in the crate altered": (
        lambda m, p: rewritten(m, p, lambda g: _set(g, CRATE_TABLE, "contentSize", "999")),
        [f"{crate.NAME} contentSize '999' disagrees with the file (56 bytes): {CRATE_TABLE}"]),
    "a file in the crate, not in the archive": (
        lambda m, p: rewritten(m, p, lambda g: g.append(
            {"@id": "results/h/tables/ghost.csv", "@type": "File", "contentSize": "1",
             "sha256": "0" * 64})),
        [f"in {crate.NAME}, not in the archive: results/h/tables/ghost.csv"]),
    "an archived file left out of the crate": (
        lambda m, p: rewritten(m, p, lambda g: g.remove(entity(g, CRATE_RAW))),
        [f"in the archive, not in {crate.NAME}: {CRATE_RAW}"]),
    "a file added to the archive and its manifest, not to the crate": (
        lambda m, p: rewritten(m, p, lambda g: None, extra={"results/h/tables/x.csv": b"x\n"}),
        [f"in the archive, not in {crate.NAME}: results/h/tables/x.csv"]),
    "a crate file outside the archive": (
        lambda m, p: rewritten(m, p, lambda g: g.append(
            {"@id": "../outside.txt", "@type": "File"})),
        [f"{crate.NAME} lists a file outside the archive: ../outside.txt"]),
    "a crate that is not JSON": (
        lambda m, p: rewritten(m, p, crate_bytes=b"{not json"),
        [f"{crate.NAME}: not RO-Crate JSON-LD (JSONDecodeError: Expecting property name "
         f"enclosed in double quotes: line 1 column 2 (char 1))"]),
    "a crate altered, its manifest line not": (
        lambda m, p: rewritten(m, p, lambda g: _set(g, CRATE_TABLE, "sha256", "0" * 64),
                               rehash=False),
        [f"changed: {crate.NAME}", f"{crate.NAME} sha256 disagrees with the file: "
                                   f"{CRATE_TABLE}"]),
    # the bytes altered, manifest and crate as made: said once, by the manifest
    "a table's byte altered": (
        lambda m, p: write(p, [(info, altered(data) if info.name.endswith(CRATE_TABLE) else data)
                               for info, data in _members(m)]),
        [f"changed: {CRATE_TABLE}"]),
}


def _members(path: Path) -> list[Member]:
    with tarfile.open(path) as src:
        return [(m, src.extractfile(m).read() if m.isfile() else None) for m in src]


@pytest.mark.parametrize("case", sorted(CRATE_CASES))
def test_a_crate_that_disagrees_with_the_files_fails_verify_and_extract(made, tmp_path, case):
    build, expected = CRATE_CASES[case]
    path = build(made, tmp_path / "bad.tar.gz")
    assert archive.verify(path) == expected
    with pytest.raises(archive.ArchiveError, match="refused, nothing extracted"):
        archive.extract(path, tmp_path / "dest")
    assert not (tmp_path / "dest").exists() and leftovers(tmp_path, path) == []
    done = cli("verify", str(path))
    assert done.returncode == 1 and "FAILED" in done.stdout and expected[0] in done.stdout


def test_report_from_an_archive_refuses_before_writing_anything(made, tmp_path):
    bad = CRATE_CASES["a checksum in the crate altered"][0](made, tmp_path / "bad.tar.gz")
    done = cli("report", str(bad), "-o", str(tmp_path / "out"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "sha256 disagrees" in done.stderr
    assert leftovers(tmp_path, bad) == []
    # into a folder that holds something: refused, the folder as it was
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "report.md").write_text("mine\n")
    done = cli("report", str(made), "-o", str(tmp_path / "full"))
    assert done.returncode == 1 and "not an empty folder" in done.stderr
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["report.md"]
    assert (tmp_path / "full" / "report.md").read_text() == "mine\n"
    # the two forms do not mix, and each says what it needs
    for args, said in ((["report", str(made)], "needs -o DIR"),
                       (["report", str(made), "-o", "x", "--root", "r"], "--root"),
                       (["report", "--root", "r"], "--experiments"),
                       (["report", "-o", "x"], "--root")):
        done = cli(*args)
        assert done.returncode == 1 and said in done.stderr, (args, done.stderr)
        assert len(done.stderr.splitlines()) == 1
    assert leftovers(tmp_path, bad) == ["full"]


# The community validator (roc-validator) at the profiles the crate declares, offline.
#: the crate's profiles (its root's conformsTo) -> the validator's identifier for each
VALIDATOR_PROFILES = {crate.PROCESS_RUN: "process-run-crate-0.5",
                      crate.WORKFLOW_RUN: "workflow-run-crate-0.5",
                      crate.WORKFLOW_RO_CRATE: "workflow-ro-crate-1.0"}
#: the profile each validation runs at -> the declared profiles whose checks it runs. A Workflow
#: Run Crate inherits every check of Workflow RO-Crate (a third run repeated them, ~2.6 s a crate)
#: and of Process Run Crate but the two it overrides, so Process Run Crate gets a run of its own.
VALIDATED_AT = {"process-run-crate-0.5": {"process-run-crate-0.5"},
                "workflow-run-crate-0.5": {"workflow-run-crate-0.5", "workflow-ro-crate-1.0"}}
RO_CRATE_CONTEXT = "https://w3id.org/ro/crate/1.1/context"
WFRUN = "https://w3id.org/ro/terms/workflow-run#"


def offline_contexts() -> dict[str, dict]:
    """The two JSON-LD contexts the crate names, from what is installed: the validator
    parses the crate as RDF and so must resolve them, and this machine has no network.

    RO-Crate 1.1's context is the ``rocrate`` library's bundled one (RO-Crate 1.3, a
    superset with the same schema.org IRIs) with the four Bioschemas terms set back to
    their 1.1 IRIs, the ones the validator's shapes use (its ``bioschemas`` and
    ``bioschemas-cw`` prefixes). The workflow-run context maps its terms into the
    ``wfrun`` namespace (the crate uses ``sha256`` of them).
    """
    from importlib.resources import files

    bundled = json.loads((files("rocrate") / "data" / "ro-crate.jsonld").read_text())
    terms = {**bundled["@context"],
             "ComputationalWorkflow": "https://bioschemas.org/ComputationalWorkflow",
             "FormalParameter": "https://bioschemas.org/FormalParameter",
             "input": "https://bioschemas.org/ComputationalWorkflow#input",
             "output": "https://bioschemas.org/ComputationalWorkflow#output"}
    run_terms = ("sha256", "sha1", "sha512", "md5", "containerImage", "environment",
                 "resourceUsage", "registry", "tag")
    return {RO_CRATE_CONTEXT: {"@context": terms},
            crate.RUN_CONTEXT: {"@context": {t: WFRUN + t for t in run_terms}}}


@pytest.fixture(scope="module")
def validator_cache(tmp_path_factory) -> Path:
    """An HTTP cache (the validator's own, requests-cache) holding the crate's contexts,
    for the validator's offline mode: it then reads only this cache, and anything not in
    it fails the check that needed it (a context missing fails RO-Crate 1.1's 3.1)."""
    pytest.importorskip("rocrate_validator", reason="roc-validator not installed (dev extra)")
    import requests
    import requests_cache
    import urllib3
    from rocrate_validator.utils.document_loader import uninstall_document_loader

    docs = offline_contexts()

    class Local(requests.adapters.HTTPAdapter):
        """Answers from ``docs``: never the network."""

        def send(self, request, **kwargs):
            body = json.dumps(docs[request.url]).encode() if request.url in docs else b""
            raw = urllib3.HTTPResponse(
                body=io.BytesIO(body), status=200 if request.url in docs else 404,
                headers={"Content-Type": "application/ld+json"}, preload_content=False,
                request_url=request.url)
            return self.build_response(request, raw)

    path = tmp_path_factory.mktemp("validator") / "http_cache"
    with requests_cache.CachedSession(cache_name=str(path), backend="sqlite",
                                      expire_after=-1, allowable_codes=(200,)) as session:
        session.mount("https://", Local())
        session.mount("http://", Local())
        for url in docs:
            assert session.get(url, headers={"Accept": "application/ld+json"}).ok, url
    yield path
    uninstall_document_loader()  # the validator patches rdflib's JSON-LD loader


def validated(top: Path, profile: str, cache: Path):
    """The validator's result for the crate in ``top`` at ``profile`` (and the profiles it
    inherits), REQUIRED checks, offline."""
    from rocrate_validator import models, services

    return services.validate(models.ValidationSettings(
        rocrate_uri=str(top), profile_identifier=profile, requirement_severity="REQUIRED",
        offline=True, cache_path=cache))


def required_issues(result) -> list[str]:
    from rocrate_validator.models import Severity

    return [f"{i.check.identifier}: {i.message}"
            for i in result.get_issues(min_severity=Severity.REQUIRED)]


def passes_the_validator(made: Path, scratch: Path, cache: Path) -> None:
    """The archive ``made`` extracted into ``scratch``: its crate declares the profiles of
    :data:`VALIDATOR_PROFILES` and passes every REQUIRED check of each and of RO-Crate 1.1,
    run at the profiles of :data:`VALIDATED_AT` (tests/test_quick_commands.py checks the
    quick run's archive so)."""
    top = archive.extract(made, scratch)
    graph = json.loads((top / crate.NAME).read_text())["@graph"]
    declared = ids(entity(graph, "./")["conformsTo"])
    assert declared == set(VALIDATOR_PROFILES)
    checked = set()
    for profile, covers in VALIDATED_AT.items():
        result = validated(top, profile, cache)
        assert required_issues(result) == [], profile
        assert result.passed(), profile
        # not a pass by default: the checks of each profile it stands for ran, and RO-Crate 1.1's
        ran = {check.identifier.rsplit("_", 1)[0] for check in result.executed_checks}
        assert {*covers, "ro-crate-1.1"} <= ran, (profile, sorted(ran))
        checked |= covers
    assert checked == set(VALIDATOR_PROFILES.values())


def test_the_crate_passes_the_community_validator_at_every_profile_it_declares(
        made, tmp_path, validator_cache):
    passes_the_validator(made, tmp_path / "x", validator_cache)


def _drop(graph: list, kind: str, key: str) -> None:
    (found,) = [e for e in graph if kind in crate._as_list(e.get("@type"))]
    del found[key]


# name -> (edits the crate's graph, the profile whose REQUIRED check must fail, its text)
BROKEN_PROFILE_CASES = {
    "the run without its instrument": (
        lambda g: _drop(g, "CreateAction", "instrument"),
        "process-run-crate-0.5", "instrument"),
    "the main workflow not a ComputationalWorkflow": (
        lambda g: _set(g, "Snakefile", "@type", ["File", "SoftwareSourceCode"]),
        "workflow-ro-crate-1.0", "ComputationalWorkflow"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_PROFILE_CASES))
def test_a_crate_that_breaks_a_declared_profile_fails_the_community_validator(
        made, tmp_path, validator_cache, case):
    edit, profile, said = BROKEN_PROFILE_CASES[case]
    path = rewritten(made, tmp_path / "broken.tar.gz", edit)
    assert archive.verify(path) == []  # the files and hashes agree: only the profile broke
    top = archive.extract(path, tmp_path / "x")
    # checked through the profile that inherits both, as a reader of a Workflow Run Crate is
    result = validated(top, VALIDATOR_PROFILES[crate.WORKFLOW_RUN], validator_cache)
    assert not result.passed()
    issues = required_issues(result)
    assert any(i.startswith(f"{profile}_") and said in i for i in issues), issues


# The archive's own digest: what the manifest and crate cannot vouch for

def forged(made: Path, dest: Path) -> Path:
    """``made`` with a table's rate halved and its manifest and crate rewritten to match,
    at ``dest``: every internal checksum agrees, only the archive's digest differs."""
    members = _members(made)
    table = next(data for info, data in members if info.name.endswith(CRATE_TABLE))
    lines = table.decode().splitlines()
    lines[1] = lines[1].replace("read,", "read,0.5*", 1)  # one number rewritten
    table = ("\n".join(lines) + "\n").encode()
    out, manifest_lines, crate_at = [], [], None
    for info, data in members:
        relative = info.name.split("/", 1)[-1]
        if relative == CRATE_TABLE:
            data = table
            info.size = len(data)
        if relative == archive.MANIFEST:
            manifest_lines = data.decode().splitlines()
            continue
        if relative == crate.NAME:
            crate_at = len(out)
        out.append((info, data))
    info, data = out[crate_at]
    doc = json.loads(data)
    _set(doc["@graph"], CRATE_TABLE, "sha256", hashlib.sha256(table).hexdigest())
    _set(doc["@graph"], CRATE_TABLE, "contentSize", str(len(table)))
    data = json.dumps(doc, indent=2).encode()
    info.size = len(data)
    out[crate_at] = (info, data)
    new = {CRATE_TABLE: table, crate.NAME: data}
    manifest_lines = [f"{hashlib.sha256(new[n]).hexdigest()}  {n}" if (n := line[66:]) in new
                      else line for line in manifest_lines]
    top = members[0][0].name.split("/")[0]
    out.append(regular(f"{top}/{archive.MANIFEST}", ("\n".join(manifest_lines) + "\n").encode()))
    return write(dest, out)


def test_verify_checks_the_archives_own_digest_against_its_sha256(made, tmp_path):
    """Issue 60: data, MANIFEST and RO-Crate rewritten together passed verify (rc 0) and
    report rebuilt from the forged data; with the .sha256 kept beside it, both refuse."""
    need("sha256sum")
    path = forged(made, tmp_path / made.name)
    shutil.copyfile(archive.sidecar(made), archive.sidecar(path))
    assert subprocess.run(["sha256sum", "-c", archive.sidecar(path).name], cwd=tmp_path,
                          capture_output=True).returncode != 0  # the forgery is real
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sealed = archive.sidecar(made).read_text().split()[0]
    problems = archive.verify(path)
    assert problems == [f"sha256 {digest} is not the {sealed} that {path.name}.sha256 states: "
                        f"not the archive published with it (altered, its data and "
                        f"checksums perhaps rewritten together)"]
    done = cli("verify", str(path))
    assert done.returncode == 1 and "FAILED (1 problems)" in done.stdout, done.stdout
    assert f"  {problems[0]}" in done.stdout
    done = cli("report", str(path), "-o", str(tmp_path / "report"))
    assert done.returncode == 1 and f"is not the {sealed}" in done.stderr, done.stderr
    assert not (tmp_path / "report").exists()
    with pytest.raises(archive.ArchiveError, match="refused, nothing extracted: sha256 "):
        archive.extract(path, tmp_path / "x")
    # without the .sha256 it agrees with itself: OK, and said plainly what that is worth
    archive.sidecar(path).unlink()
    assert archive.verify(path) == []
    done = cli("verify", str(path))
    assert done.returncode == 0 and f"sha256 {digest}: no {path.name}.sha256 beside it" \
        in done.stdout and "cannot vouch against data and checksums rewritten together" \
        in done.stdout, done.stdout
    # the archive as made: its digest printed, as its .sha256 states
    done = cli("verify", str(made))
    assert done.returncode == 0 and f"sha256 {sealed}: as {made.name}.sha256 states" \
        in done.stdout, done.stdout


def test_a_sha256_file_that_is_not_one_fails_verify(made, tmp_path):
    path = tmp_path / made.name
    shutil.copyfile(made, path)
    archive.sidecar(path).write_text("not a digest\n")
    assert archive.verify(path) == [f"{path.name}.sha256: not a sha256sum line (64 hex "
                                    f"digits, then the archive's name)"]


def test_member_names_are_printed_escaped(tmp_path):
    """Issue 60: escape codes in a symlink member's name erased the FAILED line on screen."""
    evil = f"{TOP}/results/h/\x1b[2K\x1b[1A\x1b[2Kx\rOK\u202e"
    path = write(tmp_path / "esc.tar.gz", [*good_members(), special(
        evil, tarfile.SYMTYPE, "/etc/passwd\x1b[2J")])
    shown = f"{TOP}/results/h/\\x1b[2K\\x1b[1A\\x1b[2Kx\\rOK\\u202e -> /etc/passwd\\x1b[2J"
    assert archive.verify(path) == [f"symlink, not a regular file or folder: {shown}"]
    done = cli("verify", str(path))
    assert done.returncode == 1 and "FAILED (1 problems)" in done.stdout
    assert shown in done.stdout and not any(c in done.stdout for c in "\x1b\r\u202e")
    done = cli("extract", str(path), str(tmp_path / "dest"))
    assert done.returncode == 1 and shown in done.stderr
    assert not any(c in done.stderr for c in "\x1b\r\u202e"), done.stderr


def test_a_compression_bomb_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    """A member that inflates more than MAX_RATIO-fold past BOMB_FLOOR is refused, its
    manifest line right or not: verify stops reading, extract writes none of it. Before,
    a 2 MB archive of 2 GiB of zeros verified OK (13 s) and extract wrote 2.1 GiB."""
    monkeypatch.setattr(archive, "BOMB_FLOOR", 1 << 20)
    size = 64 << 20
    zeros = hashlib.sha256(bytes(size)).hexdigest()
    bomb = tmp_path / "bomb.tar.gz"
    info = tarfile.TarInfo(f"{TOP}/results/h/bomb.json")
    info.size = size
    with tarfile.open(bomb, "w:gz", compresslevel=9) as tar:
        for member, data in good_members():
            if member.name.endswith(archive.MANIFEST):
                tar.addfile(info, io.BufferedReader(Zeros(size)))
                data += f"{zeros}  results/h/bomb.json\n".encode()
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    assert bomb.stat().st_size < size / 500
    problems = archive.verify(bomb)
    assert len(problems) == 1 and problems[0].startswith("refused: a compression bomb: ") \
        and f"-fold) in {TOP}/results/h/bomb.json" in problems[0], problems
    with pytest.raises(archive.ArchiveError, match="a compression bomb"):
        archive.extract(bomb, tmp_path / "dest")
    assert not (tmp_path / "dest").exists() and leftovers(tmp_path, bomb) == []
    # under the ratio it is read through, and its manifest line is right
    monkeypatch.setattr(archive, "MAX_RATIO", 10**6)
    assert archive.verify(bomb) == []


def test_zeros_padded_after_the_end_are_a_bomb_too(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "BOMB_FLOOR", 1 << 20)
    raw = gzip.decompress(good_bytes(tmp_path)) + bytes(64 << 20)
    path = tmp_path / "padded.tar.gz"
    path.write_bytes(gzip.compress(raw, compresslevel=9))
    problems = archive.verify(path)
    assert problems and "a compression bomb" in problems[-1] \
        and "in the padding after the last member" in problems[-1], problems
