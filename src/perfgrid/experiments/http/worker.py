"""One http server worker process: ``python -m perfgrid.experiments.http.worker``.

Pins itself, opens the counter, listens on the shared port, prints one JSON line
(its pid, CPUs and port) once it listens, and serves until SIGTERM. Nothing in
the package imports this module, so running it with ``-m`` loads it once.
"""

from __future__ import annotations

import argparse
import os

from perfgrid.experiments.http.counter import Counter
from perfgrid.experiments.http.server import SERVERS, listening_socket, serve
from perfgrid.kit import binding


def main(argv: list[str] | None = None) -> None:
    """One server worker: pin, open the database, listen, report ready, serve."""
    parser = argparse.ArgumentParser(prog="python -m perfgrid.experiments.http.worker")
    parser.add_argument("--server", choices=SERVERS, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--cpus", default="", help="comma-separated CPUs to pin to")
    args = parser.parse_args(argv)
    cpus = binding.pin([int(c) for c in args.cpus.split(",")]) if args.cpus else sorted(
        os.sched_getaffinity(0))
    counter = Counter(args.database)
    sock = listening_socket(args.port)
    try:
        serve(args.server, sock, counter,
              {"pid": os.getpid(), "cpus": cpus, "port": sock.getsockname()[1]})
    finally:
        counter.close()


if __name__ == "__main__":
    main()
