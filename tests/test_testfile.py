import hashlib
import os
import re
import time

import pytest

from perfgrid import testfile


@pytest.mark.parametrize("text, size", [
    (4096, 4096), ("1GiB", 1 << 30), ("64MiB", 64 << 20), (" 2 KiB ", 2048), ("1GB", 10**9),
    ("512", 512),
])
def test_parse_size(text, size):
    assert testfile.parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "1 GiBs", "-1", "1.5GiB", "GiB", 0, True, "0MiB"])
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
        path = __import__("pathlib").Path("/dev/null")
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
    record = tmp_path / "record.json"
    started = time.time()
    path = tmp_path / "t.bin"
    testfile.prepare(str(path), 8192, 5, str(tmp_path / "ready.json"), str(record))
    assert not testfile.remove_generated(record, since=time.time() + 10)  # an older run's
    assert path.exists()
    path.unlink()  # replaced by another file of the same name: not ours
    path.write_bytes(b"x" * 8192)
    assert not testfile.remove_generated(record, since=started)
    assert path.exists() and not record.exists()
    path.unlink()
    testfile.prepare(str(path), 8192, 5, str(tmp_path / "ready.json"), str(record))
    assert testfile.remove_generated(record, since=started)
    assert not path.exists() and (tmp_path / "t.bin.json").exists()
