"""Git facts of this checkout, for the report's provenance and the archive's name and GIT file."""

from __future__ import annotations

import subprocess

from perfgrid.kit import lifetime
from perfgrid.kit.paths import REPO


def git(*args: str) -> str:
    """``git ARGS`` in the repository, stripped; "" where git or the repository is missing."""
    try:
        return subprocess.run(lifetime.command(["git", *args]), cwd=REPO, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def facts() -> dict[str, str]:
    """The commit (``unknown`` outside git) and whether tracked files differ from it."""
    return {"commit": git("rev-parse", "HEAD") or "unknown",
            "dirty": "yes" if git("status", "--porcelain", "--untracked-files=no") else "no"}
