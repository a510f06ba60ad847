"""systemd integration of ``ulogstream run``: sd_notify messages on a fake ``NOTIFY_SOCKET``.

The test binds the AF_UNIX datagram socket systemd would and starts the daemon with
``NOTIFY_SOCKET`` and a short ``WATCHDOG_USEC``, then reads what arrived.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import pytest
from support.processes import Process, clean_environment, daemon_config, received
from support.waiting import wait_until

from ulogstream.cli.demo import free_udp_port

if TYPE_CHECKING:
    import socket
    from pathlib import Path

WATCHDOG_USEC = "200000"
"""0.2 s: pings every 0.1 s asked for, so each turn of the status loop sends one."""


def start_daemon(
    tmp_path: Path,
    notify: tuple[socket.socket, Path],
    *,
    watchdog_setting: bool = True,
    **environment: str,
) -> tuple[Process, int]:
    port = free_udp_port()
    config = daemon_config(
        tmp_path / "ulogstream.toml",
        connection=f"udpin:127.0.0.1:{port}",
        out_dir=tmp_path / "recordings",
        extra={"systemd": {"watchdog": watchdog_setting}},
    )
    env = clean_environment(NOTIFY_SOCKET=str(notify[1]), **environment)
    daemon = Process(["run", "--config", str(config)], tmp_path, env=env)
    return daemon, port


def test_ready_status_watchdog_and_stopping(
    tmp_path: Path, notify_socket: tuple[socket.socket, Path], processes: list[Process]
) -> None:
    server, _ = notify_socket
    daemon, port = start_daemon(tmp_path, notify_socket, WATCHDOG_USEC=WATCHDOG_USEC)
    processes.append(daemon)
    daemon.wait_for("listening on")
    running: list[bytes] = []

    def pinged_three_times() -> bool:
        running.extend(received(server))
        return running.count(b"WATCHDOG=1") >= 3 and any(d.startswith(b"STATUS=") for d in running)

    wait_until(pinged_three_times, what="three watchdog pings and a status")
    assert daemon.terminate(signal.SIGTERM) == 0
    stopping = received(server)

    assert running[0] == f"READY=1\nSTATUS=recording from udpin:127.0.0.1:{port}".encode()
    statuses = [d for d in running if d.startswith(b"STATUS=")]
    assert statuses, running
    assert b"packets" in statuses[0]
    assert b"\n" not in statuses[0]
    assert stopping[-1].startswith(b"STOPPING=1"), stopping
    assert b"READY=1" not in b"".join(stopping)


@pytest.mark.parametrize(
    ("watchdog_setting", "environment"),
    [
        (False, {"WATCHDOG_USEC": WATCHDOG_USEC}),
        (True, {"WATCHDOG_USEC": WATCHDOG_USEC, "WATCHDOG_PID": "1"}),
        (True, {}),
    ],
    ids=["systemd.watchdog-false", "watchdog-of-another-pid", "no-WatchdogSec"],
)
def test_no_watchdog_pings_unless_asked_and_enabled(
    tmp_path: Path,
    notify_socket: tuple[socket.socket, Path],
    processes: list[Process],
    watchdog_setting: bool,  # noqa: FBT001
    environment: dict[str, str],
) -> None:
    server, _ = notify_socket
    daemon, _ = start_daemon(
        tmp_path, notify_socket, watchdog_setting=watchdog_setting, **environment
    )
    processes.append(daemon)
    daemon.wait_for("listening on")
    messages: list[bytes] = []

    def status_sent() -> bool:
        messages.extend(received(server))
        return any(d.startswith(b"STATUS=") for d in messages)

    # Each turn of the status loop pings the watchdog (when asked to) before it sends STATUS=:
    # the first STATUS= proves a turn ran, so a ping would be here already.
    wait_until(status_sent, what="no status from the status loop")
    assert daemon.terminate(signal.SIGTERM) == 0
    messages += received(server)
    assert messages[0].startswith(b"READY=1")
    assert b"WATCHDOG=1" not in messages
    assert messages[-1].startswith(b"STOPPING=1")
