"""The http experiment's counter: one SQLite write transaction per request.

Each request opens a write transaction on one database file shared by all
worker processes (WAL mode, ``BEGIN IMMEDIATE``), reads the counter, writes
counter+1, commits and answers the previous value. So the benchmark stresses a
cross-process write lock besides the event loop, like the seed's mnesia
transaction.

perfgrid resets the counter before every load, so it uses only a database it
created itself, as it does the test file (:mod:`perfgrid.kit.testfile`): one
with perfgrid's SQLite ``application_id`` whose sidecar JSON (``<path>.perfgrid.json``)
records that very file (device and inode). Anything else at the path, a
user's database, an empty file, a symlink, a pipe, a folder, is refused
before any job and left as it is; a free path gets a new database, made
under a temporary name and linked into place only if nothing is there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

from perfgrid.kit.atomic import write_json
from perfgrid.kit.testfile import kind_of, link_new, read_json_sidecar

#: how long a worker's SQLite waits for the shared write lock before a 503
BUSY_TIMEOUT_MS = 5000
#: the SQLite ``application_id`` of perfgrid's counter databases (b"pgrd")
APPLICATION_ID = 0x70677264
#: an SQLite file's first bytes, and where its header keeps the application_id (big-endian)
SQLITE_MAGIC = b"SQLite format 3\x00"
APPLICATION_ID_OFFSET = 68
#: files SQLite keeps beside a database: one already there would be taken for a new
#: database's journal (and SQLite deletes a WAL it has checkpointed)
COMPANIONS = ("-wal", "-shm", "-journal")
#: keys of perfgrid's database sidecar; a JSON file without them is not perfgrid's
SIDECAR_KEYS = ("creator", "application_id", "dev", "ino")
KEY = "http.database"


def connect(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN ourselves), WAL, busy timeout.

    ``synchronous=NORMAL``: in WAL mode a commit writes the log without an
    fsync (the checkpoint syncs), so the benchmark measures the transaction's
    locking, not the disk's flush latency.
    """
    conn = sqlite3.connect(os.fspath(path), timeout=BUSY_TIMEOUT_MS / 1000,
                           isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def sidecar_of(path: str | os.PathLike[str]) -> Path:
    """The sidecar JSON beside a database perfgrid created: ``<path>.perfgrid.json``."""
    return Path(f"{path}.perfgrid.json")


def read_sidecar(sidecar: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The facts of a perfgrid database sidecar, or None if absent or not perfgrid's."""
    facts = read_json_sidecar(sidecar, SIDECAR_KEYS, 1 << 16)
    if facts is None or facts["creator"] != "perfgrid" or facts["application_id"] != APPLICATION_ID:
        return None
    return facts


def _header(path: str | os.PathLike[str]) -> tuple[os.stat_result, bytes]:
    """The file's stat and first 100 bytes, read without SQLite (which could write a
    journal) and without following a link or waiting on a pipe swapped in meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        return info, os.read(fd, 100) if stat.S_ISREG(info.st_mode) else b""
    finally:
        os.close(fd)


def check_database(path: str | os.PathLike[str], key: str = KEY) -> bool:
    """Whether ``path`` holds perfgrid's own database (True) or nothing yet (False).

    Raises ValueError, naming ``key``, the path and what differs, for anything
    else. Writes nothing and reads only the header and the sidecar, so a dry run
    can afford it.
    """
    sidecar = sidecar_of(path)
    leave = (f"perfgrid never alters a file it did not create: move it away or set {key} "
             f"to a free path (perfgrid then creates its own database there)")
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if os.path.lexists(sidecar) and read_sidecar(sidecar) is None:
            raise ValueError(f"{key}: {sidecar} exists and is not a perfgrid sidecar; "
                             f"{leave}") from None
        stray = [f"{path}{end}" for end in COMPANIONS if os.path.lexists(f"{path}{end}")]
        if stray:
            raise ValueError(f"{key}: {path} does not exist but {', '.join(stray)} does, "
                             f"which SQLite would take for the new database's journal; "
                             f"{leave}") from None
        return False
    except OSError as err:  # a parent that is a file, a folder perfgrid may not search
        raise ValueError(f"{key}: cannot write the SQLite file {path}: {err}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{key}: {path} is {kind_of(info.st_mode)}; the database must be a "
                         f"regular file that perfgrid created. {leave}")
    try:
        info, header = _header(path)
    except OSError as err:
        raise ValueError(f"{key}: cannot read {path} to see whether perfgrid created it: "
                         f"{err}") from None
    if not header.startswith(SQLITE_MAGIC) or len(header) < 100:
        what = "an empty file" if info.st_size == 0 else f"{info.st_size:,} bytes"
        raise ValueError(f"{key}: {path} is not an SQLite database ({what}), so perfgrid did "
                         f"not create it; {leave}")
    found = int.from_bytes(header[APPLICATION_ID_OFFSET:APPLICATION_ID_OFFSET + 4], "big",
                           signed=True)
    if found != APPLICATION_ID:
        raise ValueError(f"{key}: {path} is an SQLite database with application_id {found}, "
                         f"not perfgrid's {APPLICATION_ID}, so perfgrid did not create it; "
                         f"{leave}")
    facts = read_sidecar(sidecar)
    if facts is None:
        raise ValueError(f"{key}: {path} has perfgrid's application_id but no perfgrid "
                         f"sidecar ({sidecar}); {leave}")
    if (facts["dev"], facts["ino"]) != (info.st_dev, info.st_ino):
        raise ValueError(f"{key}: {path} is not the file its sidecar {sidecar} records "
                         f"(device {facts['dev']} inode {facts['ino']} there, device "
                         f"{info.st_dev} inode {info.st_ino} here: a copy, or replaced); "
                         f"{leave}")
    return True


def create_database(path: str | os.PathLike[str], key: str = KEY) -> None:
    """A new counter database at ``path`` (counter 0, WAL), marked as perfgrid's.

    Made under a temporary name beside ``path`` and linked into place only if
    nothing is there; then the sidecar records its device and inode.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    with open(tmp, "xb"):  # exclusive: a stray file of that name is neither used nor removed
        pass
    try:
        conn = sqlite3.connect(os.fspath(tmp), isolation_level=None)
        try:
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
            conn.execute("INSERT INTO counter (id, value) VALUES (1, 0)")
            conn.execute("PRAGMA journal_mode=WAL")
        finally:
            conn.close()
        link_new(tmp, target, "perfgrid created its database")
        info = os.lstat(target)
        sidecar = sidecar_of(target)
        if os.path.lexists(sidecar) and read_sidecar(sidecar) is None:
            raise ValueError(f"{key}: {sidecar} appeared and is not a perfgrid sidecar; "
                             f"perfgrid leaves it as it is")
        write_json(sidecar, {
            "creator": "perfgrid", "application_id": APPLICATION_ID,
            "what": "the http experiment's counter database; perfgrid resets its counter "
                    "before every load, and uses no other database at this path",
            "path": os.path.abspath(target), "dev": info.st_dev, "ino": info.st_ino,
            "created_at": time.time(), "host": socket.gethostname(), "pid": os.getpid()})
    finally:
        for end in ("", *COMPANIONS):
            Path(f"{tmp}{end}").unlink(missing_ok=True)


def init_database(path: str | os.PathLike[str], value: int = 0) -> None:
    """Set the counter of perfgrid's own database at ``path`` to ``value``, creating the
    database if nothing is there.

    Raises ValueError naming ``http.database`` if anything else is at ``path``
    (:func:`check_database`) or the file cannot be written.
    """
    path = Path(path)
    try:
        if not check_database(path):
            create_database(path)
        conn = connect(path)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":
                raise sqlite3.OperationalError(f"journal_mode is {mode}, WAL refused")
            conn.execute("INSERT INTO counter (id, value) VALUES (1, ?) "
                         "ON CONFLICT(id) DO UPDATE SET value = excluded.value", (value,))
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as err:
        raise ValueError(f"{KEY}: cannot write the SQLite file {path}: {err}") from None


def read_counter(path: str | os.PathLike[str]) -> int:
    """The counter's current value."""
    conn = connect(path)
    try:
        return int(conn.execute("SELECT value FROM counter WHERE id = 1").fetchone()[0])
    finally:
        conn.close()


class Counter:
    """One worker's connection; ``increment()`` is one write transaction."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.conn = connect(path)

    def increment(self) -> int:
        """Counter+1 in one IMMEDIATE transaction; returns the previous value."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            value = conn.execute("SELECT value FROM counter WHERE id = 1").fetchone()[0]
            conn.execute("UPDATE counter SET value = ? WHERE id = 1", (value + 1,))
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return int(value)

    def close(self) -> None:
        self.conn.close()
