"""A link as the user configures it: the rate a serial port is set to, and hints when it is wrong.

On serial links the recorder runs as a real process on the slave of a real pseudo-terminal; the
test reads the rate the port was set to with ``termios`` and plays the device on the master side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import termios
from typing import TYPE_CHECKING

import pytest
from support.end_to_end import PtyPair
from support.processes import Process, daemon_config

from ulogstream.cli.demo import free_udp_port
from ulogstream.config.sections import LinkSettings, RecordingSettings, Settings
from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.recorder.wiring import build_recorder

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

HINT_AFTER = "0.3"
"""Seconds without valid MAVLink before the hint (5 s by default), short for the tests."""


@pytest.fixture(name="pair")
def fixture_pair() -> Iterator[PtyPair]:
    pair = PtyPair.open()
    yield pair
    pair.close()


def port_speeds(pair: PtyPair) -> tuple[int, int]:
    """The input and output rates the port is set to (``termios`` ``B*`` constants)."""
    attributes = termios.tcgetattr(pair.slave)
    return attributes[4], attributes[5]


def speed_of(rate: int) -> int:
    """The ``termios`` constant of a baud rate."""
    speed: int = getattr(termios, f"B{rate}")
    return speed


@pytest.mark.parametrize(
    ("connection", "options", "rate"),
    [
        ("{device}", ["--baud", "57600"], 57600),
        ("{device}", [], 921600),
        ("{device}:230400", ["--baud", "57600"], 230400),
    ],
    ids=["baud-option", "default", "connection-string-wins"],
)
@pytest.mark.asyncio
async def test_record_opens_the_port_at_the_configured_rate_and_hints_at_silence(
    tmp_path: Path,
    processes: list[Process],
    pair: PtyPair,
    *,
    connection: str,
    options: list[str],
    rate: int,
) -> None:
    record = Process(
        [
            "record", connection.format(device=pair.device), *options,
            "--out", str(tmp_path / "recordings"), "--set", f"link.hint_after_s={HINT_AFTER}",
        ],
        tmp_path,
        name="record",
    )  # fmt: skip
    processes.append(record)
    await record.await_line("listening on")
    assert port_speeds(pair) == (speed_of(rate), speed_of(rate))
    await record.await_line(
        f"nothing arrives on {pair.device}:{rate} "
        "(wrong port? is PX4's MAV_x_CONFIG set for this port?)"
    )
    assert record.terminate() == 0
    text = record.stderr()
    assert text.count("nothing arrives") == 1
    assert "no valid MAVLink" not in text


@pytest.mark.asyncio
async def test_run_opens_the_port_at_the_toml_rate_and_hints_at_a_wrong_one(
    tmp_path: Path, processes: list[Process], pair: PtyPair
) -> None:
    config = daemon_config(
        tmp_path / "ulogstream.toml",
        connection=pair.device,
        out_dir=tmp_path / "recordings",
        extra={"link": {"baud": 115200, "hint_after_s": float(HINT_AFTER)}},
    )
    daemon = Process(["run", "--config", str(config)], tmp_path)
    processes.append(daemon)
    await daemon.await_line("listening on")
    assert port_speeds(pair) == (speed_of(115200), speed_of(115200))

    # What a device at another rate looks like: a steady stream of bytes that never frame.
    noise = random.Random(16)  # noqa: S311 - reproducible test data
    hint = (
        f"bytes arrive on {pair.device}:115200 but no valid MAVLink "
        "(wrong baud rate? try 921600 or 57600"
    )

    async def device() -> None:
        os.set_blocking(pair.master, False)
        while True:
            with contextlib.suppress(BlockingIOError):
                os.write(pair.master, noise.randbytes(512))
            await asyncio.sleep(0.02)

    writer = asyncio.create_task(device())
    try:
        await daemon.await_line(hint)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
    assert daemon.terminate() == 0
    text = daemon.stderr()
    assert text.count("no valid MAVLink") == 1
    assert "nothing arrives" not in text


class LineWaiter(logging.Handler):
    """Sets :attr:`seen` when a log line starting with ``prefix`` is emitted."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.prefix):
            self.seen.set()


@pytest.mark.asyncio
async def test_a_silent_udp_link_gets_the_network_hint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ulogstream")
    connection = f"udpin:127.0.0.1:{free_udp_port()}"
    settings = Settings(
        link=LinkSettings(connection=connection, hint_after_s=float(HINT_AFTER)),
        recording=RecordingSettings(out_dir=tmp_path, min_free_mb=10),
    )
    recorder = build_recorder(settings)
    waiter = LineWaiter(
        f"nothing arrives on {connection} (wrong address or port? is a PX4 MAVLink instance"
    )
    logging.getLogger("ulogstream").addHandler(waiter)
    running = asyncio.create_task(recorder.run())
    try:
        async with asyncio.timeout(10):
            await waiter.seen.wait()
    finally:
        logging.getLogger("ulogstream").removeHandler(waiter)
        recorder.request_stop()
        async with asyncio.timeout(10):
            assert await running == 0
    assert sum("arrive" in r.getMessage() for r in caplog.records) == 1


def test_hints_name_the_likely_cause_and_stay_quiet_once_mavlink_arrives(tmp_path: Path) -> None:
    key_file = tmp_path / "signing.key"
    key_file.write_text("ab" * 32)
    link = LinkSettings(connection="udpin:127.0.0.1:14550", signing_key_file=key_file)
    recorder = build_recorder(Settings(link=link, recording=RecordingSettings(out_dir=tmp_path)))
    codec = MavlinkCodec(system_id=254, component_id=155, signing_key=bytes.fromhex("ab" * 32))
    unsigned = MavlinkCodec(system_id=1, component_id=1).encode_heartbeat()
    codec.decode(unsigned)  # rejected: a key is configured and the frame is not signed
    assert recorder.link_hint(codec) == (
        "bytes arrive on udpin:127.0.0.1:14550 but no valid MAVLink (is the signing key PX4's?)"
    )
    plain = MavlinkCodec(system_id=254, component_id=155)
    plain.decode(b"not MAVLink at all")
    assert recorder.link_hint(plain) == (
        "bytes arrive on udpin:127.0.0.1:14550 but no valid MAVLink "
        "(is it another program's port? does the sender speak MAVLink 2?)"
    )
    plain.decode(unsigned)
    assert recorder.link_hint(plain) is None
