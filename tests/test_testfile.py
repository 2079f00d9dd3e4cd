import hashlib
import json
import os
import pathlib
import re

import pytest

from perfgrid.kit import testfile


@pytest.mark.parametrize("text, size", [
    (4096, 4096), ("1GiB", 1 << 30), ("64MiB", 64 << 20), (" 2 KiB ", 2048), ("1GB", 10**9),
    ("512", 512),
])
def test_parse_size(text, size):
    assert testfile.parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "1 GiBs", "-1", "1.5GiB", "GiB", 0, True, "0MiB",
                                 "8MiB\n", "\n8MiB", "8\u2003MiB"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError, match="testfile.size"):
        testfile.parse_size(bad, "testfile.size")


def test_seeded_content_is_identical_and_hash_matches(tmp_path):
    a = testfile.generate(tmp_path / "a.bin", (1 << 20) + 3, seed=11)
    b = testfile.generate(tmp_path / "b.bin", (1 << 20) + 3, seed=11)
    c = testfile.generate(tmp_path / "c.bin", (1 << 20) + 3, seed=12)
    assert a["sha256"] == b["sha256"] != c["sha256"]
    data = (tmp_path / "a.bin").read_bytes()
    assert len(data) == (1 << 20) + 3
    assert hashlib.sha256(data).hexdigest() == a["sha256"]


def test_seed_stream_is_pinned_across_versions(tmp_path):
    """The first bytes of seed 20130214 never change: results stay comparable."""
    testfile.generate(tmp_path / "f.bin", 4096, seed=20130214)
    import numpy as np

    expected = np.random.SFC64(20130214).random_raw(512).astype("<u8").tobytes()
    assert (tmp_path / "f.bin").read_bytes() == expected


def test_os_random_source(tmp_path):
    facts = testfile.generate(tmp_path / "r.bin", 8192, seed=None)
    assert facts["source"] == "os.urandom"
    assert (tmp_path / "r.bin").stat().st_size == 8192


def test_no_room_fails_before_writing(tmp_path):
    with pytest.raises(ValueError, match=r"needs .* bytes .* free"):
        testfile.generate(tmp_path / "huge.bin", 1 << 60, seed=1)
    assert list(tmp_path.iterdir()) == []


def test_failure_half_way_leaves_nothing(tmp_path, monkeypatch):
    def broken(size, seed):
        yield b"x" * 1024
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(testfile, "_chunks", broken)
    with pytest.raises(OSError):
        testfile.generate(tmp_path / "t.bin", 4096, seed=1)
    assert list(tmp_path.iterdir()) == []


# --- a file already at the test file's path: never deleted, truncated or overwritten ---

def _perfgrid_file(folder, size=8192, seed=5):
    """A test file with its sidecar, as rule testfile leaves them."""
    path = folder / "t.bin"
    testfile.prepare(str(path), size, seed, str(folder / "ready.json"))
    return path


def _snapshot(path):
    info = path.lstat()
    return path.read_bytes(), info.st_ino, info.st_mtime_ns


def test_a_users_file_is_refused_and_left_byte_identical(tmp_path):
    user = tmp_path / "mine.bin"
    user.write_bytes(b"precious" * 1024)
    before = _snapshot(user)
    with pytest.raises(ValueError, match=r"testfile.path: .*mine.bin.* no perfgrid sidecar"):
        testfile.check_existing(user, 8192, 5)
    with pytest.raises(ValueError, match="mine.bin"):
        testfile.prepare(str(user), 8192, 5, str(tmp_path / "ready.json"))
    assert _snapshot(user) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.bin"]


@pytest.mark.parametrize("kind", ["directory", "device", "fifo", "symlink"])
def test_anything_but_a_regular_file_is_refused(tmp_path, kind):
    path = tmp_path / "t.bin"
    if kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = pathlib.Path("/dev/null")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "real.bin").write_bytes(b"x" * 8192)
        path.symlink_to(tmp_path / "real.bin")
    with pytest.raises(ValueError, match=r"testfile.path: .* is (a|an) "):
        testfile.check_existing(path, 8192, 5)
    assert os.path.lexists(path)


def test_a_perfgrid_file_is_used_after_checking_its_hash(tmp_path):
    path = _perfgrid_file(tmp_path)
    before = _snapshot(path)
    assert testfile.check_existing(path, 8192, 5)["size"] == 8192
    facts, generated = testfile.prepare(str(path), 8192, 5, str(tmp_path / "ready2.json"))
    assert not generated and facts["seed"] == 5
    assert _snapshot(path) == before


@pytest.mark.parametrize("size, seed, needle", [
    (16384, 5, "size 8,192 bytes in the sidecar, 16,384 in the config"),
    (8192, 6, "seed 5 in the sidecar, 6 in the config"),
    (8192, None, "seed 5 in the sidecar, None in the config"),
])
def test_a_perfgrid_file_of_another_config_is_refused(tmp_path, size, seed, needle):
    path = _perfgrid_file(tmp_path)
    before = _snapshot(path)
    with pytest.raises(ValueError, match=re.escape(needle)):
        testfile.check_existing(path, size, seed)
    assert _snapshot(path) == before


def test_a_changed_file_is_refused_by_its_hash_and_left(tmp_path):
    path = _perfgrid_file(tmp_path)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    before = _snapshot(path)
    testfile.check_existing(path, 8192, 5)  # size and sidecar agree: only the hash tells
    with pytest.raises(ValueError, match="SHA-256"):
        testfile.prepare(str(path), 8192, 5, str(tmp_path / "ready2.json"))
    assert _snapshot(path) == before


def test_a_truncated_file_is_refused_at_once(tmp_path):
    path = _perfgrid_file(tmp_path)
    with open(path, "r+b") as handle:
        handle.truncate(4096)
    with pytest.raises(ValueError, match="the file has 4,096 bytes, the sidecar says 8,192"):
        testfile.check_existing(path, 8192, 5)


def test_a_foreign_sidecar_is_refused_and_left(tmp_path):
    sidecar = tmp_path / "t.bin.json"
    sidecar.write_text('{"my": "notes"}')
    with pytest.raises(ValueError, match="not a perfgrid sidecar"):
        testfile.check_existing(tmp_path / "t.bin", 8192, 5)
    assert sidecar.read_text() == '{"my": "notes"}'


def test_generation_never_replaces_a_file_that_appears_meanwhile(tmp_path, monkeypatch):
    target = tmp_path / "t.bin"
    real = testfile._chunks

    def racing(size, seed):
        yield from real(size, seed)
        target.write_bytes(b"someone else's")

    monkeypatch.setattr(testfile, "_chunks", racing)
    with pytest.raises(ValueError, match="appeared"):
        testfile.generate(target, 8192, seed=1)
    assert target.read_bytes() == b"someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.bin"]


def test_only_the_file_generated_in_this_run_is_removed(tmp_path):
    """The run's start is compared with the time the record notes, never with the clock
    now; the other file takes the name while the generated one still exists elsewhere, so
    it cannot get its inode (nor, made within one clock tick, its mtime)."""
    record = tmp_path / "record.json"
    path = tmp_path / "t.bin"
    testfile.prepare(str(path), 8192, 5, str(tmp_path / "ready.json"), str(record))
    generated_at = json.loads(record.read_text())["generated_at"]
    # a run that started after the file was generated: an older run's file
    assert not testfile.remove_generated(record, since=generated_at + 1)
    assert path.exists()
    path.rename(tmp_path / "moved.bin")  # replaced by another file of the same name: not ours
    path.write_bytes((tmp_path / "moved.bin").read_bytes())
    assert not testfile.remove_generated(record, since=generated_at)
    assert path.exists() and not record.exists()
    path.unlink()
    testfile.prepare(str(path), 8192, 5, str(tmp_path / "ready.json"), str(record))
    since = json.loads(record.read_text())["generated_at"]  # this run started as it wrote
    assert testfile.remove_generated(record, since=since)
    assert not path.exists() and (tmp_path / "t.bin.json").exists()
    assert (tmp_path / "moved.bin").exists()  # nor was the moved file touched


# --- through Snakemake ---------------------------------------------------------------

TINY = {"host": "tiny", "experiments": ["file_read"],
        "noise": {"busy_share": 1.0, "profile": {"blocks": 0}},
        "testfile": {"size": "64KiB", "seed": 3},
        "file_read": {"variants": ["whole"], "caches": ["warm"], "runtimes": ["python"],
                      "measure": {"processes": 1, "values": 1, "warmups": 0, "loops": 1,
                                  "target_ci": None, "claims": {"target_ci": None, "rounds": 1}}}}


def _tiny(folder, **testfile_keys):
    from helpers import write_config

    return write_config(folder, {**TINY, "testfile": {**TINY["testfile"], **testfile_keys}})


@pytest.mark.pipeline
@pytest.mark.parametrize("kind, needle", [
    ("user_file", "no perfgrid sidecar"),
    ("directory", "is a directory"),
    ("dev_null", "is a character device"),
    ("other_seed", "seed 4 in the sidecar, 3 in the config"),
])
def test_cli_refuses_what_is_at_testfile_path_and_leaves_it(tmp_path, kind, needle):
    from helpers import snakemake

    path = tmp_path / "data" / "t.bin"
    path.parent.mkdir()
    if kind == "user_file":
        path.write_bytes(b"precious" * 8192)
    elif kind == "directory":
        path.mkdir()
        (path / "inside.txt").write_text("mine")
    elif kind == "dev_null":
        path = pathlib.Path("/dev/null")
    else:
        testfile.prepare(str(path), 64 << 10, 4, str(tmp_path / "ready.json"))
    before = sorted((p, p.lstat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
                    for p in tmp_path.rglob("*"))
    result = snakemake(tmp_path, "--cores", "1", config=_tiny(tmp_path, path=str(path)),
                       timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"invalid config: testfile.path: {path}" in out and needle in out, out[-3000:]
    assert not (tmp_path / "results").exists()
    after = sorted((p, p.lstat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
                   for p in tmp_path.rglob("*") if ".snakemake" not in p.parts
                   and p.name != "config.yaml")
    assert after == [b for b in before if b[0].name != "config.yaml"]
    if kind == "dev_null":
        assert path.is_char_device()


@pytest.mark.pipeline
def test_a_changed_file_stops_the_run_before_any_benchmark_and_stays(tmp_path):
    from helpers import snakemake

    path = tmp_path / "t.bin"
    testfile.prepare(str(path), 64 << 10, 3, str(tmp_path / "ready.json"))
    data = bytearray(path.read_bytes())
    data[7] ^= 1
    path.write_bytes(bytes(data))
    result = snakemake(tmp_path, "--cores", "1", config=_tiny(tmp_path, path=str(path)),
                       timeout=300)
    assert result.returncode != 0
    assert "SHA-256" in (tmp_path / "results/tiny/logs/testfile.log").read_text()
    assert path.read_bytes() == bytes(data)
    assert not (tmp_path / "results/tiny/raw").exists()


@pytest.mark.pipeline
def test_a_perfgrid_file_is_used_and_kept_and_only_the_generated_one_removed(tmp_path):
    """The rule: perfgrid removes only the test file it generated at the default path
    (results/<host>/data/) in this run; a file it found (even its own) stays. (Both runs
    stop at the table: the file's last reader; plots and report never read it.)"""
    from helpers import snakemake

    path = tmp_path / "kept" / "t.bin"
    path.parent.mkdir()
    testfile.prepare(str(path), 64 << 10, 3, str(tmp_path / "ready.json"))
    before = _snapshot(path)
    result = snakemake(tmp_path, "--cores", "1", "--until", "table",
                       config=_tiny(tmp_path, path=str(path)), timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert _snapshot(path) == before
    assert "generated earlier by perfgrid" in (
        tmp_path / "results/tiny/logs/testfile.log").read_text()
    assert len((tmp_path / "results/tiny/tables/file_read.csv").read_text().splitlines()) == 2

    result = snakemake(tmp_path, "--cores", "1", "--until", "table", config=_tiny(tmp_path),
                       timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    data = tmp_path / "results/tiny/data"
    assert "wrote" in (tmp_path / "results/tiny/logs/testfile.log").read_text()
    assert sorted(p.name for p in data.iterdir()) == ["testfile.bin.json"]
    assert _snapshot(path) == before
