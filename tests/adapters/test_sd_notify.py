"""sd_notify against a real AF_UNIX datagram socket standing in for systemd."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

import pytest

from ulogstream.adapters.sd_notify import Notifier, watchdog_interval

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(name="systemd_socket")
def fixture_systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A path socket like /run/systemd/notify, and the NOTIFY_SOCKET value naming it."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(2)
        yield server, str(path)


def test_ready_status_watchdog_and_stopping_reach_the_socket(
    systemd_socket: tuple[socket.socket, str],
) -> None:
    server, address = systemd_socket
    notifier = Notifier({"NOTIFY_SOCKET": address})

    assert notifier.enabled
    assert notifier.ready()
    assert notifier.ready("recording")
    assert notifier.status("streaming 523 kB/s\nfrom /dev/pixhawk")
    assert notifier.watchdog()
    assert notifier.stopping()
    assert notifier.stopping("sending LOGGING_STOP")
    notifier.close()

    received = [server.recv(4096).decode() for _ in range(6)]
    assert received == [
        "READY=1",
        "READY=1\nSTATUS=recording",
        "STATUS=streaming 523 kB/s from /dev/pixhawk",  # a newline would start a new assignment
        "WATCHDOG=1",
        "STOPPING=1",
        "STOPPING=1\nSTATUS=sending LOGGING_STOP",
    ]
    assert not notifier.watchdog()  # closed


def test_abstract_namespace_address() -> None:
    name = f"ulogstream-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(b"\0" + name.encode())
        server.settimeout(2)
        with Notifier({"NOTIFY_SOCKET": f"@{name}"}) as notifier:
            assert notifier.ready()
            assert server.recv(4096) == b"READY=1"

        assert not notifier.enabled


@pytest.mark.parametrize("environ", [{}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}])
def test_without_a_usable_socket_every_call_is_a_no_op(environ: dict[str, str]) -> None:
    notifier = Notifier(environ)

    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.watchdog()
    notifier.close()


def test_a_vanished_socket_is_reported_not_raised(tmp_path: Path) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")})

    assert notifier.enabled
    assert not notifier.status("systemd went away")
    notifier.close()


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4243"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_the_timeout_for_our_pid(
    environ: dict[str, str], expected: float | None
) -> None:
    assert watchdog_interval(environ, pid=4242) == expected


def test_watchdog_interval_defaults_to_this_process() -> None:
    environ = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(environ) == 1.0
