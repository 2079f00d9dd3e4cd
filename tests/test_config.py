"""Bad configs stop the run before any job, naming the key; nothing is written."""

from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.utils import validate

from perfgrid import settings

from conftest import REPO, snakemake, write_config

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def check(overrides: dict) -> dict:
    config = copy.deepcopy(BASE)
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    validate(config, SCHEMA)
    return settings.effective(config, check_disk=False)


# (override, text the message must contain: the key or the offending value)
BAD = [
    ({"file_read.bindings": ["loose"]}, "bindings"),
    ({"file_read.bindings": []}, "bindings"),
    ({"file_read.variants": ["mmap"]}, "variants"),
    ({"file_read.variants": []}, "variants"),
    ({"file_read.block_sizes": [0]}, "block_sizes"),
    ({"file_read.block_sizes": [4096.5]}, "block_sizes"),
    ({"file_read.block_sizes": ["4K"]}, "block_sizes"),
    ({"file_read.block_sizes": [-512]}, "block_sizes"),
    ({"file_read.parallel_block_sizes": [1 << 31]}, "parallel_block_sizes"),
    ({"file_read.workers": [-1]}, "workers"),
    ({"file_read.workers": [0]}, "workers"),
    ({"file_read.workers": [100000]}, "workers"),
    ({"file_read.workers": [2, 2]}, "workers"),
    ({"file_read.caches": ["lukewarm"]}, "caches"),
    ({"file_read.colour": "blue"}, "colour"),
    ({"file_read.measure": {"values": 0}}, "values"),
    ({"file_read.measure": {"runs": 3}}, "runs"),
    ({"measure": {"processes": "two"}}, "processes"),
    ({"unknown_key": 1}, "unknown_key"),
    ({"experiments": ["file_read", "teleport"]}, "teleport"),
    ({"experiments": []}, "experiments"),
    ({"testfile.size": "1.5GiB"}, "size"),
    ({"testfile.size": "lots"}, "size"),
    ({"testfile.size": 0}, "size"),
    ({"testfile.size": "1 GiBs"}, "size"),
    ({"testfile.seed": -3}, "seed"),
    ({"testfile.seed": "abc"}, "seed"),
    ({"testfile.path": "src/perfgrid/testfile.bin"}, "testfile.path"),
    ({"testfile.path": "workflow/data.bin"}, "testfile.path"),
    ({"testfile.path": "a;rm -rf ~"}, "path"),
    ({"host": "my host"}, "host"),
    ({"host": "héte"}, "host"),
    ({"host": "$(reboot)"}, "host"),
    ({"host": "../escape"}, "host"),
    ({"noise": {"busy_share": 2}}, "busy_share"),
    ({"noise": {"cv_threshold": 0}}, "cv_threshold"),
]


@pytest.mark.parametrize("overrides, needle", BAD, ids=[str(o) for o, _ in BAD])
def test_bad_config_is_rejected_naming_the_key(overrides, needle):
    with pytest.raises(Exception) as info:
        check(overrides)
    text = str(info.value)
    if info.value.__cause__ is not None:
        text += str(info.value.__cause__)
    for arg in getattr(info.value, "args", ()):
        text += str(arg)
    assert needle in text


def test_good_configs_pass():
    for path in (REPO / "config").glob("*.yaml"):
        config = yaml.safe_load(path.read_text())
        merged = {**BASE, **config}
        validate(merged, SCHEMA)
        settings.effective(merged, check_disk=False)


def test_defaults_fill_a_minimal_config():
    config = {}
    validate(config, SCHEMA)
    cfg = settings.effective(config, check_disk=False)
    assert cfg["file_read"]["block_sizes"] == [512, 1024, 4096, 65536, 1048576]
    assert cfg["testfile"]["size_bytes"] == 1 << 30


@pytest.mark.pipeline
@pytest.mark.parametrize("bad", [
    {"file_read": {"bindings": ["loose"]}},
    {"file_read": {"block_sizes": [0]}},
    {"testfile": {"size": "1PiB"}},
    {"testfile": {"size": "1000TB"}},
])
def test_cli_stops_before_any_job_and_writes_nothing(tmp_path, bad):
    result = snakemake(tmp_path, "--cores", "1", config=write_config(tmp_path, bad))
    assert result.returncode != 0
    text = result.stdout + result.stderr
    key = next(iter(bad[next(iter(bad))]))
    assert key in text or "size" in text
    assert not (tmp_path / "results").exists()
