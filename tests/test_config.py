"""Bad configs stop the run before any job, naming the key; nothing is written."""

from __future__ import annotations

import copy

import pytest
import yaml
from snakemake.utils import validate

from perfgrid import settings

from helpers import REPO, snakemake, write_config

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
#: ~300 bytes of YAML that expand to 2 x 9**7 (9.6 million) values
BOMB = """\
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
host: [*g, *g]
"""
BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def check(overrides: dict) -> dict:
    config = copy.deepcopy(BASE)
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return settings.validated(config, check_disk=False)


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
    # integers given as whole floats pass JSON schema ("2.0 is an integer") and crash later
    ({"measure.processes": 2.0}, "measure.processes"),
    ({"file_read.measure": {"values": 3.0}}, "file_read.measure.values"),
    ({"testfile.seed": 5.0}, "testfile.seed"),
    ({"testfile.size": 8388608.0}, "testfile.size"),
    ({"http.port": 8080.0}, "http.port"),
    ({"http.requests": 1000.0}, "http.requests"),
    ({"file_read.block_sizes": [4096.0]}, "file_read.block_sizes[0]"),
    ({"file_read.workers": [1, 2.0]}, "file_read.workers[1]"),
    ({"timers.tasks": [10.0]}, "timers.tasks[0]"),
    # NaN passes every bound; infinities pass one-sided ones
    ({"noise.busy_share": float("nan")}, "noise.busy_share"),
    ({"noise.cv_threshold": float("nan")}, "noise.cv_threshold"),
    ({"noise.cv_threshold": float("inf")}, "noise.cv_threshold"),
    ({"http.timeout_s": float("nan")}, "http.timeout_s"),
    ({"http.timeout_s": float("inf")}, "http.timeout_s"),
    ({"timers.progress_s": float("nan")}, "timers.progress_s"),
    ({"timers.progress_s": float("inf")}, "timers.progress_s"),
    ({"timers.max_sleep": [float("nan")]}, "timers.max_sleep[0]"),
    # Python's $ matches before a final newline: results/host\n/ was created
    ({"host": "tiny\n"}, "host"),
    ({"results": "results\n"}, "results"),
    ({"testfile.path": "t.bin\n"}, "testfile.path"),
    ({"http.database": "db.sqlite\n"}, "http.database"),
    # below the documented 4,096-byte minimum
    ({"testfile.size": "1KiB"}, "testfile.size"),
    ({"testfile.size": "4095"}, "testfile.size"),
    ({"testfile.size": "4095 B"}, "testfile.size"),
    # read as an option on a command line
    ({"results": "-rf"}, "results"),
    ({"testfile.path": "-x.bin"}, "testfile.path"),
    ({"http.database": "--db"}, "http.database"),
    # inside (or holding) the repository's source folders
    ({"results": str(REPO / "src" / "out")}, "results: "),
    ({"results": str(REPO / "workflow")}, "results: "),
    ({"results": str(REPO / ".git")}, "results: "),
    ({"results": str(REPO / "tests")}, "results: "),
    ({"results": str(REPO / "config")}, "results: "),
    ({"results": str(REPO / "profiles" / "x")}, "results: "),
    ({"results": str(REPO.parent), "host": REPO.name}, "results: "),
    ({"testfile.path": str(REPO / ".git" / "t.bin")}, "testfile.path"),
    # a folder the pipeline itself uses under results/
    ({"host": "archive"}, "host"),
    ({"host": "compare"}, "host"),
    # a progress line every nanosecond floods the log
    ({"timers.progress_s": 1e-9}, "timers.progress_s"),
    ({"timers.progress_s": 0.1}, "timers.progress_s"),
    # found only when the grid is expanded, after the schema
    ({"experiments": ["http"], "http.concurrency": [10], "http.requests": 5},
     "http.concurrency"),
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
    assert len(text) < 3 * settings.MAX_MESSAGE


#: what the message says is allowed, for the new classes of bad input
ALLOWED = [
    ({"http.port": 8080.0}, "write a whole number (8080)"),
    ({"http.port": 8080.0}, ">= 0 and <= 65535"),
    ({"noise.busy_share": float("nan")}, "nan is not a finite number"),
    ({"noise.busy_share": float("nan")}, "a finite number >= 0 and <= 1"),
    ({"timers.progress_s": 1e-9}, ">= 0.5"),
    ({"host": "tiny\n"}, "as a whole"),
    ({"host": "tiny\n"}, "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"),
    ({"host": "archive"}, "archive, compare"),
    ({"testfile.size": "1KiB"}, "at least 4,096 bytes"),
    ({"results": "-rf"}, "not beginning with '-'"),
    ({"file_read.bindings": ["loose"]}, "['none', 'single', 'compact', 'spread']"),
]


@pytest.mark.parametrize("overrides, allowed", ALLOWED, ids=[a for _, a in ALLOWED])
def test_errors_say_what_is_allowed(overrides, allowed):
    with pytest.raises(Exception) as info:
        check(overrides)
    text = str(info.value) + "".join(str(a) for a in getattr(info.value, "args", ()))
    assert allowed in text


def test_alias_bomb_fails_fast_with_a_short_message():
    """The shape check stops at the first path past the limit, before walking the rest."""
    bomb = yaml.safe_load(BOMB)
    with pytest.raises(settings.ConfigError) as info:
        settings.check_shape(bomb)
    assert "20,000 values" in str(info.value) and len(str(info.value)) < 300


def test_long_messages_are_cut():
    assert len(settings.brief("x" * 10**6)) < settings.MAX_MESSAGE + 100


def test_whole_floats_where_floats_belong_still_pass():
    check({"http.timeout_s": 300.0, "timers.max_sleep": [1.0], "noise.busy_share": 1})


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


# (config file text, text the one message must contain); each through `snakemake`
CLI_BAD = [
    (BOMB, "host[1]"),
    ("host: \"tiny\\n\"\n", "host"),
    ("measure: {processes: 2.0}\n", "measure.processes"),
    ("noise: {busy_share: .nan}\n", "noise.busy_share"),
    ("experiments: [http]\nhttp: {concurrency: [10], requests: 5}\n", "http.concurrency"),
    ("host: archive\n", "host"),
    ("results: -out\n", "results"),
]


@pytest.mark.pipeline
@pytest.mark.parametrize("text, needle", CLI_BAD, ids=[t[:20] for t, _ in CLI_BAD])
def test_cli_gives_one_short_message_and_writes_nothing(tmp_path, text, needle):
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = snakemake(tmp_path, "--cores", "1", config=config, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"invalid config: {needle}" in out, out[-3000:]
    assert len(out) < 4 * settings.MAX_MESSAGE, out[-3000:]
    assert "Traceback" not in out and "settings.py" not in out and "http.py" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [".snakemake", "bad.yaml"]


@pytest.mark.pipeline
def test_a_dry_run_writes_nothing(tmp_path):
    """Not even results/<host>/ of a results folder outside the working directory."""
    outside = tmp_path / "elsewhere" / "results"
    work = tmp_path / "work"
    work.mkdir()
    config = write_config(tmp_path, {"host": "tiny", "results": str(outside),
                                     "experiments": ["file_read"]})
    result = snakemake(work, "-n", config=config, timeout=120)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert not (tmp_path / "elsewhere").exists()
    assert [p.name for p in work.iterdir()] in ([], [".snakemake"])
