"""The event loops the asyncio experiments compare: the standard one and uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

LOOPS = ("asyncio", "uvloop")


def uvloop_missing() -> str | None:
    """Why uvloop cannot run here (a skip reason), or None."""
    try:
        import uvloop  # noqa: F401
    except ImportError as err:
        return f"uvloop cannot be imported ({err}; pip install uvloop)"
    return None


def loop_factory(variant: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a fresh event loop of ``variant`` (for ``asyncio.Runner``)."""
    if variant == "asyncio":
        return asyncio.new_event_loop
    if variant == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    raise ValueError(f"variant: {variant!r} is not one of {', '.join(LOOPS)}")
