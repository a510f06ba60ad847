"""Helpers of the link tests (and of the daemon's serial tests)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.adapters.transport import Transport


def point_symlink(link: Path, target: str) -> None:
    """Point ``link`` at ``target`` atomically, as udev does with ``/dev/pixhawk``."""
    staging = link.with_name(link.name + ".new")
    staging.unlink(missing_ok=True)
    staging.symlink_to(target)
    staging.replace(link)


async def receive_exactly(link: Transport, size: int) -> bytes:
    """Read from ``link`` until ``size`` bytes came (within 5 s); a closed link fails."""
    got = b""
    async with asyncio.timeout(5):
        while len(got) < size:
            data = await link.receive()
            assert data, "link closed early"
            got += data
    return got
