"""Bad configs stop the run before any job, naming the key; nothing is written."""

from __future__ import annotations

import copy
import socket
from pathlib import Path

import pytest
import yaml

from perfgrid import experiments
from perfgrid.design import planning
from perfgrid.kit import testfile
from perfgrid.pipeline import config_errors, configschema, settings

from helpers import REPO, snakemake, write_config

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
    """The validated config: the full config with ``overrides`` (dotted keys) applied.

    Both are copied, so validation (which fills defaults in) cannot change a test table."""
    config = copy.deepcopy(BASE)
    for key, value in copy.deepcopy(overrides).items():
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return settings.validated(config, check_disk=False)


#: every config the checks refuse, from every experiment's section: (overrides, the key
#: the message begins with, what it says is allowed). One table, so each rejection is
#: asserted the same way: the exact exception type, the key, the allowed values.
#: the allowed parts of messages that several rejections share
WORKER = "allowed: a whole number without a decimal point >= 1 and <= 4096 or one of ['auto']"
RING_MEMBER = "allowed: a whole number without a decimal point >= 2 and <= 4096 or one of ['auto']"
WORKER_LIST = ("allowed: one of ['auto'] or a list of (a whole number without a decimal point "
               ">= 1 and <=")
RING_LIST = ("allowed: one of ['auto'] or a list of (a whole number without a decimal point "
             ">= 2 and <=")
#: the experiments, as the registry lists them, and the config's top-level keys (theirs
#: among them): a seventh experiment changes these messages, not this table
EXPERIMENTS = list(experiments.available())
TOP_KEYS = sorted(configschema.schema()["properties"])
MEASURE_KEYS = ("allowed keys: ['claims', 'counters', 'loops', 'max_seconds', 'processes', "
                "'rounds', 'target_ci', 'values', 'warmups']")
REJECTED = [
    ({'measure.counters': 'some'},
     'measure.counters', "allowed: one of ['claims', 'all', 'none']"),
    ({'file_read.bindings': ['loose']},
     'file_read.bindings[0]', "allowed: one of ['none', 'single', 'compact', 'spread']"),
    ({'file_read.bindings': []},
     'file_read.bindings', "allowed: a list of one of ['none', 'single', 'compact', 'spread']"),
    ({'file_read.variants': ['mmap']},
     'file_read.variants[0]',
     "allowed: one of ['read', 'readinto', 'readinto_unaligned', 'whole', '"),
    ({'file_read.variants': []},
     'file_read.variants', "allowed: a list of one of ['read', 'readinto', 'readinto_unaligned', "),
    ({'file_read.block_sizes': [0]},
     'file_read.block_sizes[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 107374182'),
    ({'file_read.block_sizes': [4096.5]},
     'file_read.block_sizes[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 107374182'),
    ({'file_read.block_sizes': ['4K']},
     'file_read.block_sizes[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 107374182'),
    ({'file_read.block_sizes': [-512]},
     'file_read.block_sizes[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 107374182'),
    ({'file_read.parallel_block_sizes': [2147483648]},
     'file_read.parallel_block_sizes[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 107374182'),
    ({'file_read.workers': [-1]},
     'file_read.workers[0]', WORKER),
    ({'file_read.workers': [0]},
     'file_read.workers[0]', WORKER),
    ({'file_read.workers': [100000]},
     'file_read.workers[0]', WORKER),
    ({'file_read.workers': [2, 2]},
     'file_read.workers', WORKER_LIST),
    ({'file_read.caches': ['lukewarm']},
     'file_read.caches[0]', "allowed: one of ['warm', 'cold']"),
    ({'file_read.colour': 'blue'},
     'file_read',
     "allowed keys: ['bindings', 'block_sizes', 'caches', 'cold', 'erlang', 'measure', '"),
    ({'file_read.measure': {'values': 0}},
     'file_read.measure.values',
     'allowed: a whole number without a decimal point >= 1 and <= 1000'),
    ({'file_read.measure': {'runs': 3}},
     'file_read.measure', MEASURE_KEYS),
    ({'measure': {'processes': 'two'}},
     'measure.processes', 'allowed: a whole number without a decimal point >= 1 and <= 100'),
    ({'unknown_key': 1},
     'config', f"allowed keys: {TOP_KEYS}"),
    ({'experiments': ['file_read', 'teleport']},
     'experiments[1]', f"allowed: one of {EXPERIMENTS}"),
    ({'experiments': []},
     'experiments', f"allowed: a list of one of {EXPERIMENTS}"),
    ({'testfile.size': '1.5GiB'},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'testfile.size': 'lots'},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'testfile.size': 0},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'testfile.size': '1 GiBs'},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'testfile.size': '8MiB\n'},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'testfile.size': '8\tMiB'},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'testfile.seed': -3},
     'testfile.seed', 'allowed: a whole number without a decimal point >= 0 or null (integer'),
    ({'testfile.seed': 'abc'},
     'testfile.seed', 'allowed: a whole number without a decimal point >= 0 or null (integer'),
    ({'testfile.path': 'src/perfgrid/testfile.bin'},
     'testfile.path', 'put generated data under results/ or outside the repository'),
    ({'testfile.path': 'workflow/data.bin'},
     'testfile.path', 'put generated data under results/ or outside the repository'),
    ({'testfile.path': 'a;rm -rf ~'},
     'testfile.path', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ or null ('),
    ({'host': 'my host'},
     'host', 'allowed: a string matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ or null '),
    ({'host': 'héte'},
     'host', 'allowed: a string matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ or null '),
    ({'host': '$(reboot)'},
     'host', 'allowed: a string matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ or null '),
    ({'host': '../escape'},
     'host', 'allowed: a string matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ or null '),
    ({'noise': {'busy_share': 2}},
     'noise.busy_share', 'allowed: a finite number >= 0 and <= 1 (flag a point if other process'),
    ({'noise': {'cv_threshold': 0}},
     'noise.cv_threshold', 'allowed: a finite number > 0 (flag a point whose coefficient of varia'),
    ({'measure.processes': 2.0},
     'measure.processes', 'allowed: a whole number without a decimal point >= 1 and <= 100'),
    ({'file_read.measure': {'values': 3.0}},
     'file_read.measure.values',
     'allowed: a whole number without a decimal point >= 1 and <= 1000'),
    ({'testfile.seed': 5.0},
     'testfile.seed', 'allowed: a whole number without a decimal point >= 0 or null (integer'),
    ({'testfile.size': 8388608.0},
     'testfile.size', 'allowed: a whole number without a decimal point >= 4096 or a string m'),
    ({'http.port': 8080.0},
     'http.port', 'allowed: a whole number without a decimal point >= 0 and <= 65535 (TC'),
    ({'http.requests': 1000.0},
     'http.requests', 'allowed: a whole number without a decimal point >= 1 and <= 100000000'),
    ({'file_read.block_sizes': [4096.0]},
     'file_read.block_sizes[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 107374182'),
    ({'file_read.workers': [1, 2.0]},
     'file_read.workers[1]', WORKER),
    ({'timers.tasks': [10.0]},
     'timers.tasks[0]', 'allowed: a whole number without a decimal point >= 1 and <= 1000000'),
    ({'noise.busy_share': float("nan")},
     'noise.busy_share', 'allowed: a finite number >= 0 and <= 1 (flag a point if other process'),
    ({'noise.cv_threshold': float("nan")},
     'noise.cv_threshold', 'allowed: a finite number > 0 (flag a point whose coefficient of varia'),
    ({'noise.cv_threshold': float("inf")},
     'noise.cv_threshold', 'allowed: a finite number > 0 (flag a point whose coefficient of varia'),
    ({'http.timeout_s': float("nan")},
     'http.timeout_s', 'allowed: a finite number > 0 and <= 86400 (seconds one load may take;'),
    ({'http.timeout_s': float("inf")},
     'http.timeout_s', 'allowed: a finite number > 0 and <= 86400 (seconds one load may take;'),
    ({'timers.progress_s': float("nan")},
     'timers.progress_s', 'allowed: a finite number >= 0.5 and <= 86400 (seconds between progres'),
    ({'timers.progress_s': float("inf")},
     'timers.progress_s', 'allowed: a finite number >= 0.5 and <= 86400 (seconds between progres'),
    ({'timers.max_sleep': [float("nan")]},
     'timers.max_sleep[0]', 'allowed: a finite number >= 0.001 and <= 60'),
    ({'host': 'tiny\n'},
     'host', 'allowed: a string matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$ or null '),
    ({'results': 'results\n'},
     'results', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ (folder h'),
    ({'testfile.path': 't.bin\n'},
     'testfile.path', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ or null ('),
    ({'http.database': 'db.sqlite\n'},
     'http.database', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ or null ('),
    ({'testfile.size': '1KiB'},
     'testfile.size', 'allowed: at least 4,096 bytes (4KiB)'),
    ({'testfile.size': '4095'},
     'testfile.size', 'allowed: at least 4,096 bytes (4KiB)'),
    ({'testfile.size': '4095 B'},
     'testfile.size', 'allowed: at least 4,096 bytes (4KiB)'),
    ({'results': '-rf'},
     'results', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ (folder h'),
    ({'testfile.path': '-x.bin'},
     'testfile.path', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ or null ('),
    ({'http.database': '--db'},
     'http.database', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ or null ('),
    ({'results': str(REPO / 'src' / 'out')},
     'results', 'put generated data under results/ or outside the repository'),
    ({'results': str(REPO / 'workflow')},
     'results', 'put generated data under results/ or outside the repository'),
    ({'results': str(REPO / '.git')},
     'results', 'put generated data under results/ or outside the repository'),
    ({'results': str(REPO / 'tests')},
     'results', 'put generated data under results/ or outside the repository'),
    ({'results': str(REPO / 'config')},
     'results', 'put generated data under results/ or outside the repository'),
    ({'results': str(REPO / 'profiles' / 'x')},
     'results', 'put generated data under results/ or outside the repository'),
    ({'results': str(REPO.parent), 'host': REPO.name},
     'results', 'put generated data under results/ or outside the repository'),
    ({'testfile.path': str(REPO / '.git' / 't.bin')},
     'testfile.path', 'put generated data under results/ or outside the repository'),
    ({'host': 'archive'},
     'host', '(archive, compare); choose another name'),
    ({'host': 'compare'},
     'host', '(archive, compare); choose another name'),
    ({'timers.progress_s': 1e-09},
     'timers.progress_s', 'allowed: a finite number >= 0.5 and <= 86400 (seconds between progres'),
    ({'timers.progress_s': 0.1},
     'timers.progress_s', 'allowed: a finite number >= 0.5 and <= 86400 (seconds between progres'),
    ({'experiments': ['http'], 'http.concurrency': [10], 'http.requests': 5},
     'http.concurrency', 'above requests (5); ab refuses a concurrency above its request count'),
    ({'ring.workers': [1]},
     'ring.workers[0]', RING_MEMBER),
    ({'ring.workers': []},
     'ring.workers', RING_LIST),
    ({'ring.bindings': ['loose']},
     'ring.bindings[0]', "allowed: one of ['none', 'single', 'compact', 'spread']"),
    ({'ring.variants': ['mpi']},
     'ring.variants[0]', "allowed: one of ['asyncio', 'uvloop', 'thread', 'process_pipe', 'nati"),
    ({'ring.rings': 0},
     'ring.rings', 'allowed: a whole number without a decimal point >= 1 and <= 100000 (r'),
    ({'ring.size': 1},
     'ring.size', 'allowed: a whole number without a decimal point >= 2 and <= 100000 (t'),
    ({'ring.rounds': 2.5},
     'ring.rounds', 'allowed: a whole number without a decimal point >= 1 and <= 1000000 ('),
    ({'ring.worker_rounds': 0},
     'ring.worker_rounds', 'allowed: a whole number without a decimal point >= 1 and <= 100000000'),
    ({'ring.measure': {'warmups': -1}},
     'ring.measure.warmups', 'allowed: a whole number without a decimal point >= 0 and <= 100'),
    ({'ring.processes': 4},
     'ring', "allowed keys: ['bindings', 'erlang', 'measure', 'rings', 'rounds', 'runtim"),
    ({'spawn.totals': {'fork': 0}},
     'spawn.totals.fork', 'allowed: a whole number without a decimal point >= 1 and <= 100000000'),
    ({'spawn.totals': {'fork': -5}},
     'spawn.totals.fork', 'allowed: a whole number without a decimal point >= 1 and <= 100000000'),
    ({'spawn.totals': {'clone': 5}},
     'spawn.totals', "allowed keys: ['asyncio_task', 'erlang', 'fork', 'mp_fork', 'native_fork',"),
    ({'spawn.primitives': ['vfork']},
     'spawn.primitives[0]',
     "allowed: one of ['asyncio_task', 'thread', 'fork', 'mp_fork', 'posix_"),
    ({'spawn.primitives': []},
     'spawn.primitives', "allowed: a list of one of ['asyncio_task', 'thread', 'fork', 'mp_fork"),
    ({'spawn.chains': [0]},
     'spawn.chains[0]', 'allowed: a whole number without a decimal point >= 1 and <= 10000'),
    ({'spawn.chains': [1.5]},
     'spawn.chains[0]', 'allowed: a whole number without a decimal point >= 1 and <= 10000'),
    ({'spawn.bindings': ['loose']},
     'spawn.bindings[0]', "allowed: one of ['none', 'single', 'compact', 'spread']"),
    ({'spawn.measure': {'values': 0}},
     'spawn.measure.values', 'allowed: a whole number without a decimal point >= 1 and <= 1000'),
    ({'syscall.workers': [0]},
     'syscall.workers[0]', WORKER),
    ({'syscall.workers': [-2]},
     'syscall.workers[0]', WORKER),
    ({'syscall.workers': []},
     'syscall.workers', WORKER_LIST),
    ({'syscall.calls': ['getpid']},
     'syscall.calls[0]', "allowed: one of ['getuid', 'getppid', 'clock_gettime']"),
    ({'syscall.calls': []},
     'syscall.calls', "allowed: a list of one of ['getuid', 'getppid', 'clock_gettime'] (get"),
    ({'syscall.variants': ['java']},
     'syscall.variants[0]', "allowed: one of ['python', 'native', 'erlang']"),
    ({'syscall.bindings': ['loose']},
     'syscall.bindings[0]', "allowed: one of ['none', 'single', 'compact', 'spread']"),
    ({'syscall.measure': {'loops': 0}},
     'syscall.measure.loops',
     'allowed: a whole number without a decimal point >= 1 or null (loops p'),
    ({'syscall.colour': 'blue'},
     'syscall', "allowed keys: ['bindings', 'calls', 'measure', 'runtimes', 'variants', 'wo"),
    ({'timers.gc': ['maybe']},
     'timers.gc[0]', "allowed: one of ['on', 'off', True, False]"),
    ({'timers.variants': ['trio']},
     'timers.variants[0]', "allowed: one of ['asyncio', 'uvloop', 'erlang', 'erlang_smp']"),
    ({'timers.variants': []},
     'timers.variants', "allowed: a list of one of ['asyncio', 'uvloop', 'erlang', 'erlang_smp"),
    ({'timers.seeding': ['shared']},
     'timers.seeding[0]', "allowed: one of ['independent', 'identical']"),
    ({'timers.tasks': [0]},
     'timers.tasks[0]', 'allowed: a whole number without a decimal point >= 1 and <= 1000000'),
    ({'timers.tasks': [5000000]},
     'timers.tasks[0]', 'allowed: a whole number without a decimal point >= 1 and <= 1000000'),
    ({'timers.rounds': [1.5]},
     'timers.rounds[0]', 'allowed: a whole number without a decimal point >= 1 and <= 1000'),
    ({'timers.max_sleep': [0]},
     'timers.max_sleep[0]', 'allowed: a finite number >= 0.001 and <= 60'),
    ({'timers.max_sleep': ['10s']},
     'timers.max_sleep[0]', 'allowed: a finite number >= 0.001 and <= 60'),
    ({'timers.extra_grids': [{}]},
     'timers.extra_grids[0]',
     "allowed: a mapping of ['gc', 'max_sleep', 'rounds', 'seeding', 'tasks"),
    ({'timers.extra_grids': [{'colour': ['blue']}]},
     'timers.extra_grids[0]',
     "allowed keys: ['gc', 'max_sleep', 'rounds', 'seeding', 'tasks', 'variants'"),
    ({'timers.extra_grids': [{'tasks': [-1]}]},
     'timers.extra_grids[0].tasks[0]',
     'allowed: a whole number without a decimal point >= 1 and <= 1000000'),
    ({'timers.measure': {'values': 0}},
     'timers.measure.values', 'allowed: a whole number without a decimal point >= 1 and <= 1000'),
    ({'timers.progress_s': 0},
     'timers.progress_s', 'allowed: a finite number >= 0.5 and <= 86400 (seconds between progres'),
    ({'timers.loops': ['asyncio']},
     'timers', "allowed keys: ['extra_grids', 'gc', 'max_sleep', 'measure', 'progress_s', "),
    ({'http.workers': [0]},
     'http.workers[0]', WORKER),
    ({'http.servers': ['tornado']},
     'http.servers[0]', "allowed: one of ['asyncio', 'uvloop', 'erlang']"),
    ({'http.clients': ['wrk']},
     'http.clients[0]', "allowed: one of ['ab', 'builtin', 'openloop']"),
    ({'http.keepalive': ['maybe']},
     'http.keepalive[0]', "allowed: one of ['off', 'on', False, True]"),
    ({'http.concurrency': [0]},
     'http.concurrency[0]', 'allowed: a whole number without a decimal point >= 1 and <= 10000'),
    ({'http.requests': 0},
     'http.requests', 'allowed: a whole number without a decimal point >= 1 and <= 100000000'),
    ({'http.port': 70000},
     'http.port', 'allowed: a whole number without a decimal point >= 0 and <= 65535 (TC'),
    ({'http.bindings': ['loose']},
     'http.bindings[0]', "allowed: one of ['none', 'single', 'compact', 'spread']"),
    ({'http.timeout_s': 0},
     'http.timeout_s', 'allowed: a finite number > 0 and <= 86400 (seconds one load may take;'),
    ({'http.extra_grids': [{'colour': 'blue'}]},
     'http.extra_grids[0]',
     "allowed keys: ['bindings', 'clients', 'concurrency', 'keepalive', 'request"),
    ({'http.extra_grids': [{'workers': [0]}]},
     'http.extra_grids[0].workers[0]',
     WORKER),
    ({'http.extra_grids': [{}]},
     'http.extra_grids[0]',
     "allowed: a mapping of ['bindings', 'clients', 'concurrency', 'keepali"),
    ({'http.colour': 'blue'},
     'http', "allowed keys: ['bindings', 'clients', 'concurrency', 'database', 'extra_gr"),
    ({'http.database': 'a;b'},
     'http.database', 'allowed: a string matching ^[A-Za-z0-9_./][A-Za-z0-9_./-]*$ or null ('),
    ({'file_read.runtimes': ['java']},
     'file_read.runtimes[0]', "allowed: one of ['python', 'native', 'erlang']"),
    ({'ring.runtimes': []},
     'ring.runtimes', "allowed: a list of one of ['python', 'native', 'erlang'] (which runti"),
    ({'timers.variants': ['erlang_hipe']},
     'timers.variants[0]', "allowed: one of ['asyncio', 'uvloop', 'erlang', 'erlang_smp']"),
]


@pytest.mark.parametrize("overrides, key, allowed", REJECTED,
                         ids=[f"{o}"[:60] for o, _, _ in REJECTED])
def test_bad_config_is_rejected_naming_the_key_and_what_is_allowed(overrides, key, allowed):
    with pytest.raises(config_errors.ConfigError) as info:
        check(overrides)
    assert type(info.value) is config_errors.ConfigError
    message = str(info.value)
    assert message.startswith(f"{key}: "), message
    assert allowed in message, message
    assert len(message) <= config_errors.MAX_MESSAGE + 100


def test_alias_bomb_fails_fast_with_a_short_message():
    """The shape check stops at the first path past the limit, before walking the rest."""
    bomb = yaml.safe_load(BOMB)
    with pytest.raises(config_errors.ConfigError) as info:
        config_errors.check_shape(bomb)
    assert "20,000 values" in str(info.value) and len(str(info.value)) < 300


def test_long_messages_are_cut():
    assert len(config_errors.brief("x" * 10**6)) < config_errors.MAX_MESSAGE + 100


def test_whole_floats_where_floats_belong_still_pass():
    """A number key keeps 300.0 and 1 as written; the same whole float is refused only
    where a whole number belongs."""
    cfg = check({"http.timeout_s": 300.0, "timers.max_sleep": [1.0], "noise.busy_share": 1})
    assert cfg["http"]["timeout_s"] == 300.0
    assert cfg["noise"]["busy_share"] == 1
    assert cfg["timers"]["max_sleep"] == [1.0]
    assert 1.0 in {p["max_sleep"] for p in planning.grid(cfg, "timers")}
    with pytest.raises(config_errors.ConfigError,
                       match=r"^file_read\.block_sizes\[0\]: 4096\.0 is a float"):
        check({"file_read.block_sizes": [4096.0]})


CONFIGS = sorted((REPO / "config").glob("*.yaml"))
#: the seed's experiments, which ``experiments: null`` runs (among any added later)
SIX = {"file_read", "http", "timers", "ring", "syscall", "spawn"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_good_configs_pass(path):
    """Each shipped config passes, and means what it says: its host, its test file, its
    experiments (null: all of them), each with a grid."""
    assert {p.name for p in CONFIGS} >= {"config.yaml", "quick.yaml"}
    config = yaml.safe_load(path.read_text())
    merged = {**BASE, **config}
    configschema.validate(merged)
    cfg = settings.effective(merged, check_disk=False)
    if config.get("host") is None:  # null: this machine's short hostname
        assert cfg["host"] == socket.gethostname().split(".")[0]
    else:
        assert cfg["host"] == config["host"]
    assert cfg["testfile"]["size_bytes"] == testfile.parse_size(config["testfile"]["size"])
    if config.get("experiments") is None:  # null: every experiment found, the seed's six too
        assert cfg["experiments"] == list(experiments.available())
        assert set(cfg["experiments"]) >= SIX
    else:  # a list: those, in its order
        assert cfg["experiments"] == config["experiments"]
    for name in cfg["experiments"]:
        assert planning.grid(cfg, name), f"{path.name}: {name} has no grid point"


def test_defaults_fill_a_minimal_config():
    config = {}
    configschema.validate(config)
    cfg = settings.effective(config, check_disk=False)
    assert cfg["file_read"]["block_sizes"] == [512, 1024, 4096, 65536, 1048576]
    assert cfg["testfile"]["size_bytes"] == 1 << 30


def refusal(folder: Path, config_file: Path) -> str:
    """What the workflow says of ``snakemake --configfile CONFIG_FILE`` run in ``folder``
    (which has no config/config.yaml, so Snakemake's config is that file's alone): the
    check workflow/rules/common.smk runs, in this process; empty where it passes."""
    from snakemake.utils import update_config

    config: dict = {}
    update_config(config, yaml.safe_load(config_file.read_text()))
    before = sorted(folder.iterdir())
    try:
        settings.validated(config)
    except config_errors.ConfigError as err:
        return config_errors.brief(f"invalid config: {err}")
    finally:
        assert sorted(folder.iterdir()) == before  # nothing written
    return ""


@pytest.mark.parametrize("bad, said", [
    ({"file_read": {"bindings": ["loose"]}},
     ["invalid config: file_read.bindings[0]: 'loose' is not one of ['none', 'single', "]),
    ({"file_read": {"block_sizes": [0]}},
     ["invalid config: file_read.block_sizes[0]: 0 is less than the minimum of 1"]),
    ({"testfile": {"size": "1PiB"}},  # no such unit
     ["invalid config: testfile.size: '1PiB' does not match"]),
    ({"testfile": {"size": "1000TB"}},  # a size, but no room for it
     ["invalid config: testfile.size: ", " needs 1,000,000,000,000,000 bytes but the file "
      "system at ", " bytes free"]),
], ids=["binding", "block-size", "unit", "no-room"])
def test_a_bad_config_is_refused_before_any_job_and_writes_nothing(tmp_path, monkeypatch,
                                                                    bad, said):
    monkeypatch.chdir(tmp_path)  # where the test file and results would go
    said_here = refusal(tmp_path, write_config(tmp_path, bad))
    for part in said:
        assert part in said_here, said_here


# (config file text, text the one message must contain)
BAD_TEXT = [
    (BOMB, "host[1]"),
    ("host: \"tiny\\n\"\n", "host"),
    ("measure: {processes: 2.0}\n", "measure.processes"),
    ("noise: {busy_share: .nan}\n", "noise.busy_share"),
    ("experiments: [http]\nhttp: {concurrency: [10], requests: 5}\n", "http.concurrency"),
    ("host: archive\n", "host"),
    ("results: -out\n", "results"),
]


@pytest.mark.parametrize("text, needle", BAD_TEXT, ids=[t[:20] for t, _ in BAD_TEXT])
def test_a_bad_config_gets_one_short_message_naming_the_key(tmp_path, monkeypatch, text,
                                                            needle):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    said = refusal(tmp_path, config)
    assert said.startswith(f"invalid config: {needle}"), said
    assert len(said) <= config_errors.MAX_MESSAGE + 100, said


@pytest.mark.pipeline
def test_the_cli_refuses_a_bad_config_with_one_short_message_and_writes_nothing(tmp_path):
    """The one refusal through ``snakemake`` itself (the others call the same check in
    this process): Snakemake's own YAML reading of an alias bomb, its message as printed,
    no traceback, nothing written."""
    config = tmp_path / "bad.yaml"
    config.write_text(BOMB)
    result = snakemake(tmp_path, "--cores", "1", config=config, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "invalid config: host[1]" in out, out[-3000:]
    assert len(out) < 4 * config_errors.MAX_MESSAGE, out[-3000:]
    assert "Traceback" not in out and "http.py" not in out
    assert not any(f"{name}.py" in out for name in ("settings", "config_errors", "planning"))
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


def test_the_used_config_and_skipped_jobs_write_what_the_workflow_decided(tmp_path):
    """Rules used_config and skipped run ``perfgrid used-config`` and ``perfgrid skipped``:
    the config as validated goes in as JSON and comes back as YAML, and the skipped points
    worked out again from that YAML are the ones the workflow's grid skips."""
    import json

    from perfgrid.pipeline import cli

    config = copy.deepcopy(BASE)
    cfg = settings.validated(config, check_disk=False)
    used, skipped = tmp_path / "config.used.yaml", tmp_path / "skipped.json"
    cli.main(["used-config", "--config", json.dumps(config), str(used)])
    assert yaml.safe_load(used.read_text()) == config
    cli.main(["skipped", str(used), str(skipped)])
    listed = json.loads(skipped.read_text())
    # on every machine: Erlang has no BIF for a bare getuid, so its syscall point is skipped
    erlang = [s for s in listed if s["experiment"] == "syscall" and s["variant"] == "erlang"]
    assert len(erlang) == 1 and "getuid" in erlang[0]["reason"], listed
    # and exactly the grid points each experiment says this machine cannot run, in the
    # grid's order, each with the experiment's own reason
    expected = [{"experiment": name, **point, "reason": experiments.get(name).unavailable(point)}
                for name in cfg["experiments"] for point in planning.grid(cfg, name)
                if experiments.get(name).unavailable(point)]
    assert listed == expected
