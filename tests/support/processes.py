"""Helpers of the daemon tests: ``ulogstream`` subprocesses, configuration files and oracles.

The daemon runs as a real process (``python -m ulogstream run --config FILE``); its stderr goes
to a file the tests poll for log lines. Recordings are checked against the generated source
log with our reader, pyulog and a byte-level message comparison.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import deque
from functools import cached_property
from typing import TYPE_CHECKING

import aiomqtt
import msgspec
from pyulog import ULog

from ulogstream.adapters.ulog_file import read
from ulogstream.sim.flightlog import INFO, generate_flight_log
from ulogstream.sim.runner import run_vehicle
from ulogstream.sim.vehicle import (
    SendLoggingData,
    SimVehicle,
    VehicleConfig,
    VehicleOutput,
    split_log,
)
from ulogstream.stream.packets import MAV_CMD_LOGGING_START, CommandLong, LoggingAck
from ulogstream.ulog.spec import MessageType

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncIterator
    from pathlib import Path

    from ulogstream.adapters.transport import Transport
    from ulogstream.sim.runner import SimSummary

START_TIMEOUT = 20.0
"""Seconds a subprocess may take to get somewhere on a loaded 2-core machine."""

_SYSTEMD_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM")


def clean_environment(**extra: str) -> dict[str, str]:
    """Our environment without systemd's variables (pytest may itself run under systemd)."""
    env = {key: value for key, value in os.environ.items() if key not in _SYSTEMD_VARIABLES}
    env.update(extra)
    return env


def received(server: socket.socket) -> list[bytes]:
    """Every datagram waiting on the non-blocking ``server``."""
    datagrams: list[bytes] = []
    while True:
        try:
            datagrams.append(server.recv(4096))
        except BlockingIOError:
            return datagrams


def toml_text(value: str | float | bool | list[str]) -> str:  # noqa: FBT001
    """``value`` as a TOML literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(item) for item in value) + "]"
    return repr(value)


def write_config(
    path: Path,
    sections: dict[str, dict[str, str | float | bool | list[str]]],
) -> Path:
    """Write ``sections`` (``{"link": {"connection": ...}, ...}``) as a TOML file at ``path``."""
    lines: list[str] = []
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {toml_text(value)}" for key, value in values.items())
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def daemon_config(
    path: Path,
    *,
    connection: str,
    out_dir: Path,
    idle_timeout_s: float = 1.0,
    mqtt: dict[str, str | float | bool | list[str]] | None = None,
    extra: dict[str, dict[str, str | float | bool | list[str]]] | None = None,
) -> Path:
    """A daemon configuration: ``connection``, recordings in ``out_dir``, optional MQTT."""
    sections: dict[str, dict[str, str | float | bool | list[str]]] = {
        "link": {"connection": connection},
        "recording": {
            "out_dir": str(out_dir),
            "min_free_mb": 10,
            "idle_timeout_s": idle_timeout_s,
        },
        "log": {"level": "info"},
    }
    if mqtt is not None:
        sections["mqtt"] = mqtt
    for section, values in (extra or {}).items():
        sections.setdefault(section, {}).update(values)
    return write_config(path, sections)


class Process:
    """A ``python -m ulogstream ...`` subprocess with stdout and stderr in files.

    Args:
        args: The arguments after ``ulogstream``.
        workdir: Where the output files go (and the working directory).
        name: Stem of the output files.
        env: The environment (default: ours without systemd's variables).
    """

    def __init__(
        self,
        args: list[str],
        workdir: Path,
        *,
        name: str = "daemon",
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = args
        self.stdout_path = workdir / f"{name}.stdout"
        self.stderr_path = workdir / f"{name}.stderr"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ulogstream", *args],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                cwd=workdir,
                env=env if env is not None else clean_environment(),
            )

    @property
    def pid(self) -> int:
        """The process id."""
        return self.process.pid

    def stderr(self) -> str:
        """Everything written to stderr so far."""
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stdout(self) -> str:
        """Everything written to stdout so far."""
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def _check_line(self, text: str, count: int) -> bool:
        found = self.stderr().count(text) >= count
        if not found and self.process.poll() is not None:
            msg = (
                f"ulogstream {' '.join(self.args)} exited with {self.process.returncode} "
                f"before writing {text!r} ({count}x); stderr:\n{self.stderr()[-3000:]}"
            )
            raise AssertionError(msg)
        return found

    def wait_for(self, text: str, *, count: int = 1, timeout: float = START_TIMEOUT) -> None:
        """Block until stderr holds ``text`` ``count`` times.

        Raises:
            AssertionError: It did not in ``timeout`` seconds, or the process exited.
        """
        deadline = time.monotonic() + timeout
        while not self._check_line(text, count):
            if time.monotonic() > deadline:
                msg = f"no {text!r} ({count}x) in {timeout} s; stderr:\n{self.stderr()[-3000:]}"
                raise AssertionError(msg)
            time.sleep(0.05)

    async def await_line(self, text: str, *, count: int = 1, limit: float = START_TIMEOUT) -> None:
        """:meth:`wait_for` for async tests: the event loop keeps running meanwhile."""
        deadline = time.monotonic() + limit
        while not self._check_line(text, count):
            if time.monotonic() > deadline:
                msg = f"no {text!r} ({count}x) in {limit} s; stderr:\n{self.stderr()[-3000:]}"
                raise AssertionError(msg)
            await asyncio.sleep(0.05)

    def send_signal(self, signum: int = signal.SIGTERM) -> None:
        """Send ``signum`` to the process."""
        self.process.send_signal(signum)

    def wait(self, timeout: float = START_TIMEOUT) -> int:
        """Wait for the exit status."""
        return self.process.wait(timeout=timeout)

    async def await_exit(self, limit: float = START_TIMEOUT) -> int:
        """:meth:`wait` for async tests."""
        deadline = time.monotonic() + limit
        while (code := self.process.poll()) is None:
            if time.monotonic() > deadline:
                msg = f"ulogstream {' '.join(self.args)} did not exit in {limit} s"
                raise AssertionError(msg)
            await asyncio.sleep(0.05)
        return code

    def terminate(self, signum: int = signal.SIGTERM, timeout: float = START_TIMEOUT) -> int:
        """Send ``signum`` and wait for the exit status."""
        self.send_signal(signum)
        return self.wait(timeout)

    def kill(self) -> None:
        """Kill the process if it still runs (test cleanup)."""
        if self.process.poll() is None:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


class Flight(msgspec.Struct, frozen=True, dict=True):
    """A generated flight log on disk and in memory."""

    path: Path
    data: bytes

    @cached_property
    def boundaries(self) -> frozenset[int]:
        """Offsets in :attr:`data` where a message ends (a recording may end there)."""
        ends: list[int] = []
        position = 0
        for message in messages_of(self.data):
            position += len(message)
            ends.append(position)
        return frozenset(ends)

    @cached_property
    def streamed(self) -> bytes:
        """What a log holds when the vehicle was not stopped (ended by the idle timeout).

        PX4 sends only full packets until LOGGING_STOP flushes the last one, so such a
        recording ends before the last, partial packet.
        """
        sent = streamed_until_stop(self.data)
        end = max(offset for offset in self.boundaries if offset <= len(sent))
        return self.data[:end]

    @cached_property
    def tail(self) -> bytes:
        """The post-flight perf messages at the end, which PX4 sends only after LOGGING_STOP."""
        log = split_log(self.data)
        return b"".join(message.data for message in log.messages[log.tail_start :])

    def is_stopped_log(self, recording: bytes) -> bool:
        """True for a log we stopped: the flight's start to a message boundary, then its tail.

        LOGGING_STOP makes PX4 skip the rest of the flight and send the post-flight tail.
        """
        if not recording.endswith(self.tail):
            return False
        body = recording[: len(recording) - len(self.tail)]
        return len(body) in self.boundaries and self.data.startswith(body)


_RECEIVER = {"system_id": 254, "component_id": 155, "target_system": 1, "target_component": 1}


def streamed_until_stop(log: bytes) -> bytes:
    """The bytes the pure vehicle model sends for ``log`` until it waits for LOGGING_STOP."""
    vehicle = SimVehicle(
        log, now=0.0, config=VehicleConfig(link_rate=None, speed=None, stop_accept_delay=0.0)
    )
    start = CommandLong(command=MAV_CMD_LOGGING_START, param1=0.0, **_RECEIVER)
    pending: deque[VehicleOutput] = deque(vehicle.receive(start, 0.0))
    sent = bytearray()
    now = 0.0
    while True:
        while pending:
            output = pending.popleft()
            if isinstance(output, SendLoggingData):
                packet = output.packet
                sent += packet.data
                if packet.needs_ack:
                    ack = LoggingAck(sequence=packet.sequence, **_RECEIVER)
                    pending.extend(vehicle.receive(ack, now))
        if vehicle.waiting_for_stop:
            return bytes(sent)
        deadline = vehicle.next_deadline()
        now = now if deadline is None else max(now, deadline)
        pending.extend(vehicle.handle_timer(now))


def make_flight(directory: Path, *, duration_s: float, seed: int = 0) -> Flight:
    """Generate a flight log of ``duration_s`` seconds into ``directory/flight-SEED.ulg``."""
    out = io.BytesIO()
    generate_flight_log(out, duration_s=duration_s, seed=seed)
    path = directory / f"flight-{seed}.ulg"
    path.write_bytes(out.getvalue())
    return Flight(path, out.getvalue())


SIM_SYS_UUID = {key: value for _, key, value in INFO}["sys_uuid"]
"""The ``sys_uuid`` in every generated flight log (the info PX4 writes)."""


def with_sys_uuid(log: bytes, sys_uuid: str) -> bytes:
    """``log`` as another autopilot's: its ``sys_uuid`` information replaced (same length)."""
    old = str(SIM_SYS_UUID).encode()
    new = sys_uuid.encode()
    assert len(new) == len(old), f"a sys_uuid of {len(old)} characters keeps the message sizes"
    assert log.count(old) == 1, "the sys_uuid appears once, in its 'I' message"
    return log.replace(old, new)


def recordings(out_dir: Path) -> list[Path]:
    """The finished ``.ulg`` files under ``out_dir``, oldest first (by name: UTC times)."""
    return sorted(out_dir.rglob("*.ulg"))


def partial_files(out_dir: Path) -> list[Path]:
    """Leftover ``.part`` files under ``out_dir``."""
    return sorted(out_dir.rglob("*.part"))


def assert_valid_ulog(path: Path) -> None:
    """Our reader and pyulog both read ``path`` without corruption or truncation."""
    data = read(path)
    assert not data.corruption, f"our reader found corruption in {path}: {data.corruption}"
    assert data.truncated is None, f"our reader found {path} truncated"
    assert data.topics, f"{path} has no topic data"
    ulog = ULog(str(path))
    assert not ulog.file_corruption, f"pyulog found corruption in {path}"
    assert ulog.data_list, f"pyulog read no topic data from {path}"


def messages_of(log: bytes) -> list[bytes]:
    """The file header and every message of ``log``, as bytes, in order."""
    return [message.data for message in split_log(log).messages]


def assert_subsequence_of_source(recording: bytes, source: bytes) -> int:
    """Every message of ``recording`` but dropouts appears in ``source``, in the same order.

    Returns:
        The number of dropout ('O') messages in ``recording``.
    """
    dropouts = 0
    wanted = iter(messages_of(source))
    for index, message in enumerate(messages_of(recording)):
        if message[2:3] == bytes([MessageType.DROPOUT]) and index > 0:
            dropouts += 1
            continue
        # Consume the source until this message turns up; it must, in order.
        assert any(candidate == message for candidate in wanted), (
            f"recorded message {index} ({message[:16]!r}...) is not in the source after "
            "the previous one"
        )
    return dropouts


class Received(msgspec.Struct, frozen=True):
    """One message a test subscriber got."""

    topic: str
    payload: bytes
    retain: bool


@contextlib.asynccontextmanager
async def subscriber(host: str, port: int, topic: str) -> AsyncIterator[list[Received]]:
    """Subscribe to ``topic`` on the broker; the list fills as messages arrive."""
    messages: list[Received] = []
    async with aiomqtt.Client(host, port) as client:
        await client.subscribe(topic)

        async def collect() -> None:
            async for message in client.messages:
                payload = message.payload
                assert isinstance(payload, bytes)
                messages.append(Received(str(message.topic), payload, message.retain))

        task = asyncio.create_task(collect())
        try:
            yield messages
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def json_samples(messages: list[Received], prefix: str) -> dict[str, list[dict[str, object]]]:
    """Decoded JSON samples per topic under ``prefix`` (e.g. ``ulogstream/v1/json/``)."""
    samples: dict[str, list[dict[str, object]]] = {}
    for message in messages:
        if message.topic.startswith(prefix):
            value = json.loads(message.payload)
            assert isinstance(value, dict)
            samples.setdefault(message.topic[len(prefix) :], []).append(value)
    return samples


def start_vehicle(
    log: bytes,
    link: Transport | str,
    *,
    config: VehicleConfig,
    stop_event: asyncio.Event | None = None,
) -> tuple[asyncio.Task[SimSummary], asyncio.Event]:
    """Stream ``log`` from a simulated PX4; the event is set once all its data was delivered."""
    delivered = asyncio.Event()
    task = asyncio.create_task(
        run_vehicle(
            log,
            link,
            config=config,
            keep_deliveries=False,
            stop_event=stop_event,
            on_log_delivered=lambda _index: delivered.set(),
        )
    )
    return task, delivered
