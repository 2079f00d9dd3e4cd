"""http (seed E5 a): the counter server, both load clients, the checks, bad input, cleanup."""

from __future__ import annotations

import contextlib
import copy
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from perfgrid.experiments import get
from perfgrid.experiments import http as http_mod
from perfgrid.experiments.http import CorrectnessError, analysis, check_load
from perfgrid.experiments.http import counter as sqlite_counter
from perfgrid.experiments.http import load as http_load
from perfgrid.experiments.http import server as http_server
from perfgrid.experiments.http.supervisor import ServerGroup
from perfgrid.kit import binding
from perfgrid.pipeline import config_errors, configschema, settings

from helpers import REPO, full_config, gone, needs, snakemake, write_config
from synthetic import LEVELS, expected_verdict, row, single

EXP = get("http")
CLIENTS = ["builtin", pytest.param("ab", marks=needs("ab"))]


def point(variant="asyncio", client="builtin", keepalive="off", bind="none", workers=1,
          concurrency=4):
    return {"variant": variant, "client": client, "keepalive": keepalive, "binding": bind,
            "workers": workers, "concurrency": concurrency}


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "counter.sqlite"
    sqlite_counter.init_database(path)
    return path


# --- the database and the request handler ----------------------------------------


def test_increment_is_one_transaction_returning_the_previous_value(db):
    counter = sqlite_counter.Counter(db)
    try:
        assert [counter.increment() for _ in range(3)] == [0, 1, 2]
    finally:
        counter.close()
    assert sqlite_counter.read_counter(db) == 3
    sqlite_counter.init_database(db)
    assert sqlite_counter.read_counter(db) == 0
    conn = sqlite_counter.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


@pytest.mark.parametrize("head, keep", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", True),
])
def test_keepalive_follows_the_http_version_and_header(head, keep):
    assert http_server.wants_keepalive(head) is keep


def test_answers_have_a_fixed_length_and_only_get_counts(db):
    counter = sqlite_counter.Counter(db)
    try:
        first, _ = http_server.answer(b"GET / HTTP/1.0\r\n\r\n", counter)
        for _ in range(9):
            http_server.answer(b"GET / HTTP/1.0\r\n\r\n", counter)
        tenth, _ = http_server.answer(b"GET / HTTP/1.0\r\n\r\n", counter)
        assert len(first) == len(tenth)  # ab counts a length change as a failed request
        assert tenth.endswith(b"%020d\n" % 10)
        post, _ = http_server.answer(b"POST / HTTP/1.1\r\n\r\n", counter)
        bad, keep = http_server.answer(b"nonsense\r\n\r\n", counter)
        assert post.startswith(b"HTTP/1.1 405") and bad.startswith(b"HTTP/1.1 400") and not keep
    finally:
        counter.close()
    assert sqlite_counter.read_counter(db) == 11


# --- servers and loads --------------------------------------------------------------


@pytest.mark.parametrize("keepalive", [False, True])
def test_builtin_load_every_value_once(db, keepalive):
    with ServerGroup("asyncio", db, binding.plan("none", 2)) as group:
        result = http_load.run_builtin(group.port, 300, 8, keepalive, deadline_s=30)
        counter = sqlite_counter.read_counter(db)
    assert (result.ok, result.errors, result.non2xx, result.unanswered) == (300, 0, 0, 0)
    assert counter == 300
    assert sorted(result.values) == list(range(300))
    check_load(result, counter)
    assert result.latency_p50_ms <= result.latency_p99_ms


@needs("ab")
@pytest.mark.parametrize("keepalive", [False, True])
def test_ab_load_counter_matches_completed(db, keepalive):
    with ServerGroup("asyncio", db, binding.plan("none", 2)) as group:
        result = http_load.run_ab(group.port, 400, 10, keepalive, deadline_s=30)
        counter = sqlite_counter.read_counter(db)
    assert (result.ok, result.errors, result.non2xx) == (400, 0, 0)
    assert counter == 400
    assert result.detail["keepalive_requests"] == (400 if keepalive else 0)
    assert result.wall_s > 0 and result.latency_p99_ms >= result.latency_p50_ms > 0
    check_load(result, counter)


def test_uvloop_server_serves(db):
    with ServerGroup("uvloop", db, binding.plan("none", 1)) as group:
        result = http_load.run_builtin(group.port, 100, 4, True, deadline_s=30)
    assert result.ok == 100 == sqlite_counter.read_counter(db)


def test_workers_listen_on_loopback_only_and_are_pinned(db):
    plan = binding.plan("single", 3)
    with ServerGroup("asyncio", db, plan) as group:
        listening = []
        for pid in group.pids:
            proc = psutil.Process(pid)
            assert sorted(proc.cpu_affinity()) == plan[0]
            listening += [c for c in proc.net_connections("inet") if c.status == "LISTEN"]
        assert group.actual_cpus == plan
    assert len(listening) == 3
    assert {(c.laddr.ip, c.laddr.port) for c in listening} == {("127.0.0.1", group.port)}
    assert gone(group.pids)


def test_case_runs_checks_and_leaves_nothing_running(tmp_path):
    before = descendants()
    options = {"requests": "200", "database": str(tmp_path / "c.sqlite")}
    case = EXP.prepare(point(workers=2, bind="spread", keepalive="on"), options)
    pids = [p.pid for p in psutil.Process().children() if p.pid not in before]
    try:
        assert len(pids) == 2
        assert case.time(2) > 0
        seen = case.observed()
    finally:
        case.close()
    assert case.work_per_loop == 200
    assert seen["perfgrid_loads"] == 2 and seen["perfgrid_ok"] == 400
    assert seen["perfgrid_errors"] == 0 and seen["perfgrid_non2xx"] == 0
    assert seen["perfgrid_server_cpu_s"] > 0 and seen["perfgrid_client_cpu_s"] > 0
    assert seen["perfgrid_worker_cpus"] == binding.describe(binding.plan("spread", 2))
    assert gone(pids) and descendants() <= before


def test_lost_or_doubled_increments_fail_with_the_numbers():
    def result(ok, values=None, completed=None):
        return http_load.LoadResult("builtin", 3, 1, False, 1.0, completed or ok, ok, 0, 0,
                                   1.0, 1.0, 1.0, 0.1, values=values)

    check_load(result(3, [0, 1, 2]), 3)
    with pytest.raises(CorrectnessError, match="counter went up by 2 but 3"):
        check_load(result(3, [0, 1, 1]), 2)
    with pytest.raises(CorrectnessError, match="handed out twice"):
        check_load(result(3, [0, 1, 1]), 3)
    with pytest.raises(CorrectnessError, match="deadline"):
        check_load(result(2, [0, 1]), 2)


def test_any_failed_request_fails_the_load_with_the_numbers():
    """The issue's case: 2,844 of 4,000 requests failed, the counter agreed with the rest."""
    def result(ok, errors=0, non2xx=0):
        return http_load.LoadResult("builtin", 4000, 4, False, 1.0, ok + non2xx, ok, non2xx,
                                   errors, 1.0, 1.0, 1.0, 0.1, values=list(range(ok)),
                                   detail={"error_ConnectionRefusedError": errors})

    check_load(result(4000), 4000)
    with pytest.raises(CorrectnessError, match="2844 errors and 0 non-2xx answers: 1156 of "
                                               "4000 requests succeeded"):
        check_load(result(1156, errors=2844), 1156)
    with pytest.raises(CorrectnessError, match="0 errors and 3 non-2xx answers: 3997 of"):
        check_load(result(3997, non2xx=3), 3997)


#: requests of the kill test's load. The builtin client kills from inside the load, at its
#: 100th answer, so 4,000 always leaves requests after the kill. ab loads from another
#: process while a thread here waits for the 100th increment: 200,000 requests keep a
#: Python server busy for tens of seconds even on a fast machine, so the kill lands
#: mid-load however late that thread runs; after it, the refused rest goes by in seconds
KILL_LOADS = {"builtin": 4000, "ab": 200_000}


@pytest.mark.parametrize("client", CLIENTS)
def test_killing_the_only_server_worker_mid_load_fails_the_point(tmp_path, client,
                                                                   monkeypatch):
    """Kill the one worker mid-load: the case raises with the numbers, so no rate is
    recorded for it (a rate counts only loads whose every request succeeded). The kill
    waits for the load's 100th answer, never for the clock, and the load cannot end first."""
    database = tmp_path / "k.sqlite"
    requests = KILL_LOADS[client]
    before = descendants()
    case = EXP.prepare(point(client=client, workers=1, concurrency=4),
                       {"requests": str(requests), "database": str(database),
                        "timeout_s": "60"})
    (worker,) = [p for p in psutil.Process().children() if p.pid not in before]
    killed = threading.Event()

    def kill() -> None:
        if not killed.is_set():
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
            killed.set()

    def kill_after_100() -> None:  # ab: it answers in another process; watch the counter
        deadline = time.monotonic() + 30  # only stops a hung load: it cannot end before
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # the database is being reset
                if sqlite_counter.read_counter(database) >= 100:
                    break
            time.sleep(0.005)
        kill()

    if client == "builtin":  # in this process: kill right after the 100th answer
        answer = http_load.Tally._answer

        def answer_then_kill(self, status: int, body: bytes) -> None:
            answer(self, status, body)
            if self.ok == 100:
                kill()

        monkeypatch.setattr(http_load.Tally, "_answer", answer_then_kill)
    killer = threading.Thread(target=kill_after_100)
    if client == "ab":
        killer.start()
    try:
        with pytest.raises((CorrectnessError, RuntimeError)) as info:
            case.time(1)
    finally:
        if killer.is_alive():
            killer.join()
        killed_in_the_load = killed.is_set()
        kill()  # a failed test must not leave the worker running
        case.close()
    assert killed_in_the_load
    message = str(info.value)
    if isinstance(info.value, CorrectnessError):  # the load ran to its end, with errors
        assert re.search(rf"[1-9]\d* errors and \d+ non-2xx answers: \d+ of {requests} "
                         r"requests succeeded", message), message
        if client == "builtin":  # ab's count of successes is only a lower bound
            ok = int(re.search(r"(\d+) of \d+ requests succeeded", message).group(1))
            assert 100 <= ok < requests
    else:  # ab gave up on refused connections
        assert re.search(rf"ab exited with \d+ after \d+ of {requests} requests",
                         message), message
    assert gone([worker.pid]) and descendants() <= before


def test_errors_are_counted_not_dropped(db):
    """Requests to a server that is gone are errors, counted by kind; all-failed fails."""
    with ServerGroup("asyncio", db, binding.plan("none", 1)) as group:
        port = group.port
    result = http_load.run_builtin(port, 20, 2, False, deadline_s=10)
    assert result.errors == 20 and result.ok == 0
    assert result.detail  # error kinds, e.g. error_ConnectionRefusedError
    with pytest.raises(CorrectnessError, match="20 errors and 0 non-2xx answers: 0 of 20"):
        check_load(result, 0)


def test_ab_report_is_parsed():
    text = textwrap.dedent("""\
        Concurrency Level:      10
        Time taken for tests:   1.234 seconds
        Complete requests:      1000
        Failed requests:        3
           (Connect: 1, Receive: 0, Length: 2, Exceptions: 0)
        Non-2xx responses:      5
        Keep-Alive requests:    990
        Time per request:       12.340 [ms] (mean)
        Time per request:       1.234 [ms] (mean, across all concurrent requests)
        """)
    figures = http_load.parse_ab(text)
    assert figures["wall_s"] == 1.234 and figures["completed"] == 1000
    assert figures["failed"] == 3 and figures["non2xx"] == 5 and figures["mean_ms"] == 12.34
    assert figures["fail_length"] == 2 and figures["keepalive_requests"] == 990


# --- dying with the job ---------------------------------------------------------------

_JOB = """
import sys
from perfgrid.experiments import get
case = get("http").prepare(
    {"variant": "asyncio", "client": sys.argv[2], "keepalive": "off", "binding": "none",
     "workers": 2, "concurrency": 5},
    {"requests": "10000000", "database": sys.argv[1], "timeout_s": "60"})
case.time(1)
"""


@pytest.mark.parametrize("client", CLIENTS)
def test_sigkill_of_the_job_kills_servers_and_load(tmp_path, client):
    job = subprocess.Popen([sys.executable, "-c", _JOB, str(tmp_path / "k.sqlite"), client])
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 20
        want = 3 if client == "ab" else 2
        while len(kids := psutil.Process(job.pid).children()) < want:
            assert job.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        while sqlite_counter.read_counter(tmp_path / "k.sqlite") == 0:  # the load is running
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pids = [k.pid for k in kids]
        os.kill(job.pid, signal.SIGKILL)
        job.wait(5)
        assert gone(pids), [psutil.Process(p).cmdline() for p in pids if psutil.pid_exists(p)]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        for pid in pids:  # a failed test must not leave its servers behind either
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()


# --- bad input: a clear error, nothing left running -----------------------------------


def test_concurrency_above_requests_is_refused(tmp_path):
    section = {"servers": ["asyncio"], "clients": ["ab"], "keepalive": ["off"],
               "bindings": ["none"], "workers": [1], "concurrency": [10, 1000],
               "requests": 500}
    with pytest.raises(ValueError, match=r"http.concurrency: \[1000\] above requests"):
        EXP.points(section, {})
    extra = {**section, "concurrency": [10], "extra_grids": [{"requests": 5}]}
    with pytest.raises(ValueError, match=r"extra_grids\[0\].concurrency"):
        EXP.points(extra, {})
    before = descendants()
    with pytest.raises(ValueError, match="exceeds http.requests"):
        EXP.prepare(point(concurrency=50), {"requests": "10", "database": str(tmp_path / "d")})
    assert descendants() == before


def test_zero_workers_is_refused(tmp_path):
    with pytest.raises(ValueError, match="http.workers"):
        EXP.prepare(point(workers=0), {"database": str(tmp_path / "d")})
    with pytest.raises(ValueError, match="http.workers"):
        ServerGroup("asyncio", tmp_path / "d", [])


def test_taken_port_is_refused_and_nothing_is_left(tmp_path):
    taker = socket.socket()
    taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # would share it silently
    taker.bind(("127.0.0.1", 0))
    taker.listen()
    before = descendants()
    try:
        with pytest.raises(ValueError, match=r"http.port: 127.0.0.1:\d+ is already in use"):
            EXP.prepare(point(workers=2), {"port": str(taker.getsockname()[1]),
                                           "database": str(tmp_path / "d")})
    finally:
        taker.close()
    assert descendants() == before


def test_unwritable_database_is_refused_and_nothing_is_left(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    before = descendants()
    with pytest.raises(ValueError, match="http.database: cannot write"):
        EXP.prepare(point(), {"database": str(blocker / "counter.sqlite")})
    assert descendants() == before


def test_fixed_port_can_be_reused_right_after_a_run(db):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for _ in range(2):  # the first run leaves TIME_WAIT connections on the port
        with ServerGroup("asyncio", db, binding.plan("none", 1), port=port) as group:
            assert http_load.run_builtin(group.port, 50, 5, False, 10).ok == 50


# --- the database: perfgrid uses only one it created -----------------------------------


def users_database(path: Path) -> bytes:
    """A user's SQLite file like the one the review found altered: a ``counter`` table
    whose row 1 is 424242 and a ``notes`` table, in rollback (delete) journal mode."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
    conn.execute("INSERT INTO counter VALUES (1, 424242)")
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('mine')")
    conn.commit()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    return path.read_bytes()


def http_config(tmp_path: Path, database: Path | None) -> dict:
    """A config of the http experiment alone, results under ``tmp_path`` (host ``h``)."""
    return {"experiments": ["http"], "results": str(tmp_path / "results"), "host": "h",
            "http": {"database": None if database is None else str(database)}}


def tree_of(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, or what else it is."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() and not p.is_symlink()
            else "link" if p.is_symlink() else "other" for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("where", ["http.database", "default path"])
def test_a_users_database_is_refused_before_any_job_and_left_as_it_was(tmp_path, where):
    database = (tmp_path / "mine.db" if where == "http.database"
                else tmp_path / "results" / "h" / "data" / "http.sqlite")
    database.parent.mkdir(parents=True, exist_ok=True)
    before = users_database(database)
    listing = tree_of(tmp_path)
    config = http_config(tmp_path, database if where == "http.database" else None)
    with pytest.raises(config_errors.ConfigError) as info:  # the workflow's check, dry runs too
        settings.validated(config)
    assert str(info.value).startswith(f"http.database: {database} is an SQLite database "
                                      f"with application_id 0, not perfgrid's")
    with pytest.raises(ValueError, match="application_id 0"):  # and the job's own
        EXP.prepare(point(), {"database": str(database), "requests": "10"})
    assert database.read_bytes() == before and tree_of(tmp_path) == listing


def test_an_empty_file_is_refused_and_stays_empty(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(config_errors.ConfigError, match=re.escape(
            f"http.database: {empty} is not an SQLite database (an empty file)")):
        settings.validated(http_config(tmp_path, empty))
    with pytest.raises(ValueError, match="not an SQLite database"):
        sqlite_counter.init_database(empty)
    assert empty.stat().st_size == 0 and sorted(os.listdir(tmp_path)) == ["empty.db"]


def _symlink_to_own(path: Path) -> None:
    sqlite_counter.init_database(path.with_name("own.db"))
    path.symlink_to("own.db")


def _copy_of_own(path: Path) -> None:
    own = path.with_name("own.db")
    sqlite_counter.init_database(own)
    path.write_bytes(own.read_bytes())  # perfgrid's application_id, another inode
    sqlite_counter.sidecar_of(path).write_bytes(sqlite_counter.sidecar_of(own).read_bytes())


def _own_without_sidecar(path: Path) -> None:
    sqlite_counter.init_database(path)
    sqlite_counter.sidecar_of(path).unlink()


#: (how the path is set up, what the message says)
NOT_PERFGRIDS = [
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: os.mkfifo(p), "is a named pipe"),
    (_symlink_to_own, "is a symbolic link"),
    (lambda p: p.write_text("notes\n"), "is not an SQLite database (6 bytes)"),
    (_own_without_sidecar, "has perfgrid's application_id but no perfgrid sidecar"),
    (_copy_of_own, "is not the file its sidecar"),
    (lambda p: Path(f"{p}-wal").write_text("mine"), "-wal does, which SQLite would take"),
    (lambda p: sqlite_counter.sidecar_of(p).write_text("{}"), "is not a perfgrid sidecar"),
]


@pytest.mark.parametrize("make, says", NOT_PERFGRIDS, ids=[s for _, s in NOT_PERFGRIDS])
def test_anything_perfgrid_did_not_create_is_refused_naming_what_differs(tmp_path, make, says):
    database = tmp_path / "x.db"
    make(database)
    listing = tree_of(tmp_path)
    with pytest.raises(config_errors.ConfigError) as info:
        settings.validated(http_config(tmp_path, database))
    assert str(info.value).startswith("http.database: ") and says in str(info.value)
    assert str(database) in str(info.value)
    with pytest.raises(ValueError, match=re.escape(says)):
        sqlite_counter.init_database(database)
    assert tree_of(tmp_path) == listing


@pytest.mark.parametrize("where", ["http.database", "default path"])
def test_perfgrids_own_database_is_used_again_and_reset(tmp_path, where):
    database = (tmp_path / "db" / "counter.sqlite" if where == "http.database"
                else tmp_path / "results" / "h" / "data" / "http.sqlite")
    config = http_config(tmp_path, database if where == "http.database" else None)
    settings.validated(copy.deepcopy(config))  # nothing there yet: perfgrid will create it
    assert not database.parent.exists()  # and the check wrote nothing
    sqlite_counter.init_database(database)  # the first job creates it
    sidecar = sqlite_counter.sidecar_of(database).read_text()
    counter = sqlite_counter.Counter(database)
    try:
        assert [counter.increment() for _ in range(3)] == [0, 1, 2]
    finally:
        counter.close()
    settings.validated(copy.deepcopy(config))  # a second run accepts it
    sqlite_counter.init_database(database)  # and resets it
    assert sqlite_counter.read_counter(database) == 0
    assert sqlite_counter.check_database(database)
    assert sqlite_counter.sidecar_of(database).read_text() == sidecar
    conn = sqlite_counter.connect(database)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == sqlite_counter.APPLICATION_ID
    conn.close()


@pytest.mark.pipeline
def test_a_dry_run_refuses_a_users_database(tmp_path):
    database = tmp_path / "mine.db"
    before = users_database(database)
    config = write_config(tmp_path, http_config(tmp_path, database))
    result = snakemake(tmp_path, "-n", config=config, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"invalid config: http.database: {database} is an SQLite database" in out, out[-3000:]
    assert database.read_bytes() == before and not (tmp_path / "results").exists()


# --- the grid and the schema ------------------------------------------------------------

BASE = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def full_section() -> dict:
    config = copy.deepcopy(BASE)
    configschema.validate(config)
    return settings.effective(config, check_disk=False)["http"]


def test_full_grid_holds_the_seed_points():
    section = full_section()
    points = EXP.points(section, {})
    assert len(points) == len({tuple(p.values()) for p in points})
    seed = [p for p in points if p["client"] == "ab" and p["keepalive"] == "off"
            and p["variant"] == "asyncio" and p["binding"] == "none" and p["workers"] == 1]
    assert sorted(p["concurrency"] for p in seed) == [1, 10, 100, 500, 1000]
    # the seed's loads at 100,000 requests; one connection, which no claim compares, at
    # 20,000 (ab at -c 1 serves ~2,000 requests/s here: 50 s a load at the seed's count)
    assert {p["concurrency"]: EXP.requests_for(section, p) for p in seed} == {
        1: 20000, 10: 100000, 100: 100000, 500: 100000, 1000: 100000}


def test_bare_yaml_keepalive_words_mean_off_and_on():
    section = {"servers": ["asyncio"], "clients": ["builtin"], "keepalive": [False, True],
               "bindings": ["none"], "workers": [1], "concurrency": [1], "requests": 10}
    assert sorted(p["keepalive"] for p in EXP.points(section, {})) == ["off", "on"]
    assert yaml.safe_load("[off, on]") == [False, True]


def test_unavailable_names_the_missing_tool(monkeypatch):
    monkeypatch.setattr(http_mod, "uvloop_missing", lambda: "uvloop cannot be imported")
    assert "uvloop" in EXP.unavailable(point(variant="uvloop"))
    monkeypatch.setattr("shutil.which", lambda tool: None)
    assert "apache2-utils" in EXP.unavailable(point(client="ab"))
    assert EXP.unavailable(point(client="builtin")) is None


# --- analysis: verdicts come from the data ----------------------------------------------


def table(rates: dict[tuple, float]) -> pd.DataFrame:
    """Rows (variant, binding, workers, concurrency) -> rate, loaded like the seed."""
    return pd.DataFrame([
        {"variant": v, "client": "ab", "keepalive": "off", "binding": b, "workers": w,
         "concurrency": c, "rate": r, "server_cpus": 0.9, "client_cpus": 0.4, "ok": 100,
         "errors": 0, "non2xx": 0, "latency_p99_ms": 5.0}
        for (v, b, w, c), r in rates.items()])


def verdicts(frame) -> list[str]:
    return [c.verdict for c in analysis.claims(frame, get("http"))]


#: the knobs of :func:`grid`, each the ratio one claim compares, all reproduced
GOOD = {"workers": 1.5, "binding": 1.2, "drop": 0.5}
#: claim index, knob, threshold, and whether the claim asks for the ratio to be above
CASES = [(0, "workers", analysis.MORE_WORKERS_HELP, True),
         (1, "binding", analysis.HELPS, True),
         (2, "drop", analysis.STEEP, False)]
MISSING = [(0, {"workers": 1}, "no point measured with both 1 worker and more"),
           (1, {"binding": "spread"}, "no bound and unbound rows"),
           (2, {"concurrency": 1000}, "lacks concurrency 500 and 1000")]


def grid(runtime="python", skip=None, nan=None, one=None, client="ab", **knobs):
    """Synthetic rows of one runtime over binding x workers x concurrency, each rate the
    product of the knobs that apply, so every ratio a claim takes is exactly its knob.
    ``skip``: leave out the rows matching it; ``nan``/``one``: that row NaN / one value."""
    k = {**GOOD, **knobs}
    variant = "erlang" if runtime == "erlang" else "asyncio"
    rows, seed = [], 0
    for b in ("none", "spread"):
        for w in (1, 2):
            for c in (500, 1000):
                seed += 1
                point = {"binding": b, "workers": w, "concurrency": c}
                if skip and all(point[a] == v for a, v in skip.items()):
                    continue
                rate = (1000.0 * (k["workers"] if w == 2 else 1)
                        * (k["binding"] if b == "spread" else 1) * (k["drop"] if c == 1000 else 1))
                columns = {"variant": variant, "runtime": runtime, "client": client,
                           "keepalive": "off", **point, "server_cpus": 0.9,
                           "client_cpus": 0.4, "ok": 100, "errors": 0, "non2xx": 0,
                           "latency_p99_ms": 5.0}
                if point == nan:
                    rows.append(row(float("nan"), seed=seed, **columns))
                elif point == one:
                    rows.append(single(rate, **columns))
                else:
                    rows.append(row(rate, seed=seed + (100 if runtime == "erlang" else 0),
                                    **columns))
    return pd.DataFrame(rows)


def both(erlang: dict | None = None, python: dict | None = None) -> pd.DataFrame:
    """Python rows and Erlang rows, each with its own knobs (all reproduced by default)."""
    return pd.concat([grid("python", **(python or {})), grid("erlang", **(erlang or {}))],
                     ignore_index=True)


def test_all_http_claims_reproduce_on_clear_data():
    found = analysis.claims(both(), get("http"))
    assert [c.verdict for c in found] == ["reproduced"] * 6
    assert [c.runtime for c in found] == ["python"] * 3 + ["erlang"] * 3
    assert all("[" in c.measured and "wholly" in c.reason for c in found)
    assert all(c.ci_low < c.value < c.ci_high for c in found)
    assert len(analysis.claims(grid("python"), get("http"))) == 3


@pytest.mark.parametrize("runtime", ["python", "erlang"])
@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("index, knob, threshold, above", CASES, ids=[k for _, k, _, _ in CASES])
def test_http_claim_verdict_follows_its_interval(index, knob, threshold, above, level, runtime):
    knobs = {knob: threshold * LEVELS[level]}
    found = analysis.claims(both(**{runtime: knobs}), get("http"))
    at = index + (3 if runtime == "erlang" else 0)
    claim = found[at]
    expected, word = expected_verdict("above" if above else "below", level)
    assert claim.verdict == expected, (claim.measured, claim.reason)
    assert word in claim.reason
    assert claim.runtime == runtime
    assert "[" in claim.measured and "no interval" not in claim.measured
    assert claim.value == pytest.approx(threshold * LEVELS[level])
    assert [c.verdict for i, c in enumerate(found) if i != at] == ["reproduced"] * 5


@pytest.mark.parametrize("runtime", ["python", "erlang"])
@pytest.mark.parametrize("index, skip, reason", MISSING, ids=[r[:20] for _, _, r in MISSING])
def test_http_claim_without_its_data_is_inconclusive(index, skip, reason, runtime):
    found = analysis.claims(both(**{runtime: {"skip": skip}}), get("http"))
    at = index + (3 if runtime == "erlang" else 0)
    assert found[at].verdict == "inconclusive" and reason in found[at].reason
    assert found[at].runtime == runtime
    assert [c.verdict for i, c in enumerate(found) if i != at] == ["reproduced"] * 5


@pytest.mark.parametrize("runtime", ["python", "erlang"])
@pytest.mark.parametrize("how", ["nan", "one"])
def test_http_nan_rate_or_one_value_is_inconclusive(how, runtime):
    # every point of the grid is in a ratio of each claim: all three of its runtime's claims
    found = analysis.claims(both(**{runtime: {how: {"binding": "none", "workers": 1,
                                                    "concurrency": 500}}}), get("http"))
    mine = found[3:] if runtime == "erlang" else found[:3]
    want = "no interval: one value" if how == "one" else "no estimate (missing or NaN rate)"
    assert [c.verdict for c in mine] == ["inconclusive"] * 3
    assert all(want in c.reason for c in mine), [c.reason for c in mine]
    assert [c.verdict for c in found if c not in mine] == ["reproduced"] * 3


@pytest.mark.parametrize("how", ["nan", "one"])
def test_http_nan_or_one_value_at_one_worker_count_is_inconclusive(how):
    """A 4-worker row at one point is only in the workers claim: that claim alone."""
    frame = grid("python")
    columns = {"variant": "asyncio", "runtime": "python", "client": "ab", "keepalive": "off",
               "binding": "none", "workers": 4, "concurrency": 500}
    extra = row(float("nan"), seed=77, **columns) if how == "nan" else single(3000.0, **columns)
    found = analysis.claims(pd.concat([frame, pd.DataFrame([extra])], ignore_index=True),
                            get("http"))
    assert found[0].verdict == "inconclusive"
    assert ("no estimate" if how == "nan" else "no interval: one value") in found[0].reason
    assert [c.verdict for c in found[1:]] == ["reproduced"] * 2


def test_http_more_workers_takes_the_best_worker_count():
    low = grid("python", workers=0.8)  # 2 workers: 0.8x the rate of 1 ...
    four = [row(r / 0.8 * 1.5, seed=50 + i, **{**rec, "workers": 4})  # ... 4 workers: 1.5x
            for i, (r, rec) in enumerate(zip(
                low["rate"], low.drop(columns=["rate", "work_per_loop", "process_values",
                                               "n_processes", "n_values"]).to_dict("records"),
                strict=True)) if rec["workers"] == 2]
    claim = analysis.claims(pd.concat([low, pd.DataFrame(four)], ignore_index=True),
                            get("http"))[0]
    assert claim.verdict == "reproduced", claim.reason
    assert claim.value == pytest.approx(1.5)
    assert "2 workers / 1: geometric mean 0.80x [" in claim.measured
    assert "4 workers / 1: geometric mean 1.50x [" in claim.measured
    assert analysis.claims(low, get("http"))[0].verdict == "not reproduced"


def test_http_hand_made_rows_and_other_loads_are_inconclusive_with_a_note():
    frame = grid("python").drop(columns=["process_values"])
    found = analysis.claims(frame, get("http"))
    assert [c.verdict for c in found] == ["inconclusive"] * 3
    assert all("no interval: no raw values" in c.reason for c in found)
    found = analysis.claims(grid("python", client="builtin"), get("http"))
    assert [c.verdict for c in found] == ["reproduced"] * 3
    assert all("all loads used" in c.reason for c in found)


def test_plots_and_notes_are_written(tmp_path):
    frame = table({("asyncio", "none", 1, 10): 4000, ("uvloop", "none", 1, 10): 5000,
                   ("asyncio", "spread", 2, 100): 4500})
    written = analysis.plot(frame, tmp_path, get("http"))
    assert {p.stem for p in written} == {"rate_by_concurrency", "latency_p99_by_concurrency",
                                         "cpu_by_concurrency"}
    assert all(p.stat().st_size > 0 for p in written)
    notes = analysis.notes(frame, get("http"))
    assert analysis.SEED_ROWS == [] and "no figures" in notes[0]
    assert any("uvloop over asyncio: median 1.25x" in n for n in notes)


def test_a_load_stops_at_its_deadline(db):
    """The builtin client stops at its deadline with requests unanswered (how long the stop
    takes is a benchmark fact: ``make bench``)."""
    with ServerGroup("asyncio", db, binding.plan("none", 1)) as group:
        result = http_load.run_builtin(group.port, 10_000_000, 4, True, deadline_s=0.3)
    assert result.timed_out and result.unanswered > 0
    assert result.ok < result.requests
    with pytest.raises(CorrectnessError, match="deadline"):
        check_load(result, sqlite_counter.read_counter(db))


@needs("ab")
def test_an_ab_load_stops_at_its_deadline(db):
    with ServerGroup("asyncio", db, binding.plan("none", 1)) as group:
        capped = http_load.run_ab(group.port, 10_000_000, 4, True, deadline_s=1)
    assert capped.timed_out and capped.completed < capped.requests


def test_claims_compare_the_seed_loads_of_more_than_one_connection():
    """One connection is one request at a time: its points are measured once, for the
    plots, and the claims leave them out (their rows would have no rounds to pair)."""
    from perfgrid.experiments.http import EXPERIMENT

    seed_load = {"variant": "asyncio", "client": "ab", "keepalive": "off", "binding": "none",
                 "workers": 2}
    assert not EXPERIMENT.used_by_claims({**seed_load, "concurrency": 1})
    assert EXPERIMENT.used_by_claims({**seed_load, "concurrency": 10})
    assert not EXPERIMENT.used_by_claims({**seed_load, "concurrency": 10, "keepalive": "on"})
    assert EXPERIMENT.counted_by_default({**seed_load, "concurrency": 1})


@pytest.mark.parametrize(("variant", "binding", "rounds"), [
    ("asyncio", "none", 3), ("asyncio", "spread", 3), ("erlang", "none", None),
    ("uvloop", "none", 1), ("asyncio", "single", 1)])
def test_the_full_run_gives_erlangs_short_loads_more_rounds_than_pythons(variant, binding,
                                                                         rounds):
    """Python's claim points keep the seed's three runs of ab; Erlang's ~3 s loads get
    the design's claims.rounds (None here: read from the config); uvloop and the
    single-CPU binding, which no claim reads, run once."""
    from perfgrid.design import planning

    point = {"variant": variant, "client": "ab", "keepalive": "off", "binding": binding,
             "workers": 2, "concurrency": 100}
    cfg = full_config()
    design = cfg["http"]["measure"]["claims"]["rounds"]
    assert planning.rounds_of(cfg, "http", point) == (design if rounds is None else rounds)
