"""Our own small sd_notify(3): readiness, status and watchdog messages to systemd.

Outside systemd (``$NOTIFY_SOCKET`` unset) every call does nothing, so the daemon can call them
unconditionally. The protocol is one datagram of newline-separated ``KEY=VALUE`` assignments on an
``AF_UNIX`` socket; a leading ``@`` in the address means Linux's abstract namespace.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from collections.abc import Mapping

NOTIFY_SOCKET = "NOTIFY_SOCKET"
WATCHDOG_USEC = "WATCHDOG_USEC"
WATCHDOG_PID = "WATCHDOG_PID"


class Notifier:
    """Sends sd_notify messages to ``$NOTIFY_SOCKET``; a no-op when it is unset.

    Args:
        environ: Where to read ``NOTIFY_SOCKET`` (the process environment by default).
    """

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        address = environ.get(NOTIFY_SOCKET, "")
        self._address: str | bytes | None = None
        self._socket: socket.socket | None = None
        if address.startswith("@"):
            self._address = b"\0" + address[1:].encode()
        elif address.startswith("/"):
            self._address = address
        # Anything else (unset, or vsock: of newer systemd) is not ours to speak: stay silent.
        if self._address is not None:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._socket.setblocking(False)  # noqa: FBT003 (socket API)

    @property
    def enabled(self) -> bool:
        """True when there is a systemd socket to talk to."""
        return self._socket is not None

    def notify(self, **assignments: str) -> bool:
        """Send ``KEY=VALUE`` assignments in one datagram, e.g. ``notify(READY="1")``.

        Returns:
            True when systemd got the message; False outside systemd or when sending failed
            (systemd notifications are advisory: a failure must not stop recording).
        """
        if self._socket is None or self._address is None:
            return False
        lines = (f"{key}={_one_line(value)}" for key, value in assignments.items())
        try:
            self._socket.sendto("\n".join(lines).encode(), self._address)
        except OSError:
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd start-up is complete (``Type=notify``), optionally with a status line."""
        if status is None:
            return self.notify(READY="1")
        return self.notify(READY="1", STATUS=status)

    def status(self, text: str) -> bool:
        """Set the one-line status ``systemctl status`` shows."""
        return self.notify(STATUS=text)

    def watchdog(self) -> bool:
        """Keep the ``WatchdogSec`` timer from firing; call every :func:`watchdog_interval`."""
        return self.notify(WATCHDOG="1")

    def stopping(self, status: str | None = None) -> bool:
        """Tell systemd shutdown has begun."""
        if status is None:
            return self.notify(STOPPING="1")
        return self.notify(STOPPING="1", STATUS=status)

    def close(self) -> None:
        """Close the socket; later calls do nothing."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def watchdog_interval(
    environ: Mapping[str, str] = os.environ, pid: int | None = None
) -> float | None:
    """How often to send WATCHDOG=1, in seconds: half of ``$WATCHDOG_USEC``, as systemd advises.

    Args:
        environ: Where to read ``WATCHDOG_USEC`` and ``WATCHDOG_PID``.
        pid: Our process id (``os.getpid()`` by default); a ``WATCHDOG_PID`` naming another
            process means the watchdog is not ours.

    Returns:
        The interval, or None when systemd does not watch this process.
    """
    usec = environ.get(WATCHDOG_USEC, "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    watched_pid = environ.get(WATCHDOG_PID, "")
    if watched_pid and watched_pid != str(os.getpid() if pid is None else pid):
        return None
    return int(usec) / 2_000_000


def _one_line(value: str) -> str:
    # A newline would start a new assignment: systemd would read the rest as another KEY=VALUE.
    return value.replace("\r", " ").replace("\n", " ")
