"""A real PX4 (SITL, ``../shared/px4-sitl``) for end-to-end tests, and a UDP relay to break.

Tests that use them skip with the reason when the SITL build is absent or does not run here
(a user's clone has no ``../shared``). Each test takes its own instance number: PX4 holds
``/tmp/px4_lock-N`` and the ports of instance N.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

SITL = Path(__file__).resolve().parents[2].parent / "shared" / "px4-sitl" / "px4-sitl"
"""The SITL launcher beside the project (``../shared/px4-sitl``)."""

ONBOARD_PX4_PORT = 14580
"""PX4's own port of the onboard link of instance 0 (instance N: + N)."""
ONBOARD_PEER_PORT = 14540
"""Where PX4 sends the onboard link of instance 0 (instance N: + N)."""


@dataclass
class Px4:
    """A running PX4 SITL instance in ``directory``."""

    directory: Path
    instance: int

    @property
    def onboard_port(self) -> int:
        """The UDP port PX4 sends its onboard link to (a receiver listens there)."""
        return ONBOARD_PEER_PORT + self.instance

    @property
    def px4_port(self) -> int:
        """PX4's own UDP port of the onboard link."""
        return ONBOARD_PX4_PORT + self.instance

    def cmd(self, *words: str) -> str:
        """Run a PX4 shell command (``commander arm``, ``logger status``); its output."""
        done = subprocess.run(
            [str(SITL), "cmd", str(self.directory), *words],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        return done.stdout + done.stderr

    def console(self) -> str:
        """What PX4 printed so far (``px4.log``)."""
        return (self.directory / "px4.log").read_text(encoding="utf-8", errors="replace")

    def sd_logs(self) -> list[Path]:
        """PX4's own SD-card logs, oldest first."""
        return sorted((self.directory / "log").rglob("*.ulg"))


@contextlib.contextmanager
def px4_sitl(
    directory: Path, *, instance: int, log: str = "all", sdlog_mode: int = 1
) -> Iterator[Px4]:
    """Start a PX4 SITL instance in ``directory`` (``instance``, or the next free one up to 9).

    Two suites on one machine (or two tests) may want the same instance: PX4 holds its lock and
    ports, so the next number is tried. Skips the test (with the reason) when the SITL build is
    absent or does not start.
    """
    if not SITL.exists():
        pytest.skip(f"no PX4 SITL at {SITL} (../shared is not beside this clone)")
    if shutil.which("bash") is None:
        pytest.skip("the PX4 SITL launcher needs bash")
    directory.mkdir(parents=True, exist_ok=True)
    said = ""
    for number in range(instance, 10):
        started = subprocess.run(
            [str(SITL), "start", str(directory), "-i", str(number), "--log", log,
             "--sdlog-mode", str(sdlog_mode)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        said = started.stdout + started.stderr
        if started.returncode == 0:
            break
        if "already running" not in said:
            pytest.skip(f"PX4 SITL does not start here: {said[-500:]}")
    else:
        pytest.skip(f"no free PX4 SITL instance from {instance} to 9: {said[-300:]}")
    try:
        yield Px4(directory, number)
    finally:
        subprocess.run(
            [str(SITL), "stop", str(directory)], capture_output=True, check=False, timeout=60
        )


@dataclass
class UdpRelay:
    """Carries datagrams between PX4's onboard link and a receiver, and drops them on cue.

    PX4 sends to ``listen_port`` (its onboard peer); the relay forwards to the receiver at
    ``receiver_port`` from a port of its own, and the receiver's replies back to PX4.

    Args:
        listen_port: Where PX4 sends (instance N's onboard peer port).
        px4_port: PX4's own port, where replies go.
        receiver_port: Where the receiver listens (``udpin:127.0.0.1:PORT``).
        loss: Probability of dropping each datagram, each way.
        seed: The loss pattern's seed.
    """

    listen_port: int
    px4_port: int
    receiver_port: int
    loss: float = 0.0
    seed: int = 0
    blackout_until: float = 0.0
    dropped: int = 0
    carried: int = 0
    _rng: random.Random = field(init=False)
    _px4_side: socket.socket = field(init=False)
    _receiver_side: socket.socket = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)  # noqa: S311 (a test's loss pattern)
        self._px4_side = _udp_socket(self.listen_port)
        self._receiver_side = _udp_socket(0)

    def blackout(self, seconds: float) -> None:
        """Drop everything, both ways, for ``seconds`` from now."""
        self.blackout_until = time.monotonic() + seconds

    def _passes(self) -> bool:
        if time.monotonic() < self.blackout_until or (self.loss and self._rng.random() < self.loss):
            self.dropped += 1
            return False
        self.carried += 1
        return True

    async def run(self) -> None:
        """Relay until cancelled."""
        loop = asyncio.get_running_loop()
        to_receiver = ("127.0.0.1", self.receiver_port)
        to_px4 = ("127.0.0.1", self.px4_port)

        def from_px4() -> None:
            with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                while True:
                    data = self._px4_side.recv(65536)
                    if self._passes():
                        with contextlib.suppress(OSError):
                            self._receiver_side.sendto(data, to_receiver)

        def from_receiver() -> None:
            with contextlib.suppress(BlockingIOError, ConnectionRefusedError):
                while True:
                    data = self._receiver_side.recv(65536)
                    if self._passes():
                        with contextlib.suppress(OSError):
                            self._px4_side.sendto(data, to_px4)

        loop.add_reader(self._px4_side.fileno(), from_px4)
        loop.add_reader(self._receiver_side.fileno(), from_receiver)
        try:
            await asyncio.Event().wait()
        finally:
            loop.remove_reader(self._px4_side.fileno())
            loop.remove_reader(self._receiver_side.fileno())
            self._px4_side.close()
            self._receiver_side.close()


def _udp_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # A log download comes at ~8 MB/s in bursts: room for them, so only the loss asked for
    # loses datagrams (the kernel caps it at net.core.rmem_max).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("127.0.0.1", port))
    sock.setblocking(False)  # noqa: FBT003 (the socket API)
    return sock


async def fly(px4: Px4, *, relay: UdpRelay | None = None, blackout_s: float = 0.0) -> None:
    """Arm, take off to 2.5 m, hover about 9 s, land; return once PX4 has disarmed itself.

    With ``relay``, the link is blacked out for ``blackout_s`` halfway through the hover.
    """
    assert "rejected" not in px4.cmd("commander", "arm").lower()
    await asyncio.sleep(1)
    px4.cmd("commander", "takeoff")
    await asyncio.sleep(4)
    if relay is not None and blackout_s:
        relay.blackout(blackout_s)
    await asyncio.sleep(5)
    px4.cmd("commander", "land")
    for _ in range(60):
        await asyncio.sleep(1)
        if "] Disarmed" in px4.cmd("commander", "status"):
            return
    pytest.fail("PX4 did not disarm within 60 s of landing")
