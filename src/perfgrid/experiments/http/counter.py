"""The http experiment's counter: one SQLite write transaction per request.

Each request opens a write transaction on one database file shared by all
worker processes (WAL mode, ``BEGIN IMMEDIATE``), reads the counter, writes
counter+1, commits and answers the previous value. So the benchmark stresses a
cross-process write lock besides the event loop, like the seed's mnesia
transaction.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

#: how long a worker's SQLite waits for the shared write lock before a 503
BUSY_TIMEOUT_MS = 5000


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


def init_database(path: str | os.PathLike[str], value: int = 0) -> None:
    """Create the counter table (if needed) and set the counter to ``value``.

    Raises ValueError naming ``http.database`` if the file cannot be written.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = connect(path)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() != "wal":
                raise sqlite3.OperationalError(f"journal_mode is {mode}, WAL refused")
            conn.execute("CREATE TABLE IF NOT EXISTS counter "
                         "(id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
            conn.execute("INSERT INTO counter (id, value) VALUES (1, ?) "
                         "ON CONFLICT(id) DO UPDATE SET value = excluded.value", (value,))
        finally:
            conn.close()
    except (OSError, sqlite3.Error) as err:
        raise ValueError(f"http.database: cannot write the SQLite file {path}: {err}") from None


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
