import hashlib

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
