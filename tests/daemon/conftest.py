"""Fixtures of the daemon tests: the MQTT tests' real mosquitto, a fake systemd socket, cleanup."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from mqtt.conftest import Broker, fixture_mosquitto

if TYPE_CHECKING:
    from collections.abc import Iterator

    from daemon.support import Process

__all__ = ["Broker", "fixture_mosquitto", "fixture_notify_socket", "fixture_processes"]


@pytest.fixture(name="notify_socket")
def fixture_notify_socket() -> Iterator[tuple[socket.socket, Path]]:
    """A bound AF_UNIX datagram socket standing in for systemd's (a short path: 108 bytes max)."""
    with tempfile.TemporaryDirectory(prefix="uls-") as directory:
        path = Path(directory) / "notify"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        server.bind(str(path))
        server.setblocking(False)  # noqa: FBT003 (socket API)
        try:
            yield server, path
        finally:
            server.close()


@pytest.fixture(name="processes")
def fixture_processes() -> Iterator[list[Process]]:
    """Processes a test starts; killed at the end if still running."""
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()
