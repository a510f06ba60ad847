"""The README's commands as a newcomer runs them (issue 14, items 3 to 6).

``sim flight.ulg udpout:...`` into ``record udpin:...`` gives a byte-identical file; the status
line fits an 80-column terminal; Ctrl-C with the vehicle gone says what it waits for and a second
Ctrl-C ends at once; the retained MQTT status left behind names the finished file.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.processes import Process, clean_environment, partial_files, recordings, subscriber
from support.shared_data import shared_ulg
from support.waiting import eventually, wait_until

from ulogstream.cli.demo import free_udp_port
from ulogstream.sim.flightlog import generate_flight_log

if TYPE_CHECKING:
    from support.broker import Broker


COLUMNS = 80
_CSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STATUS = re.compile(r"\r\x1b\[K([^\r\n]*)(?=\r(?!\n))")
"""A status line: drawn after a carriage return and erase, then redrawn over (no newline: the
terminal shows a newline as CR LF)."""


class PtyProcess:
    """``python -m ulogstream ARGS`` with stdout and stderr on an 80x24 pseudo-terminal."""

    def __init__(self, args: list[str], workdir: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, COLUMNS, 0, 0))
        env = clean_environment()
        env.pop("COLUMNS", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ulogstream", *args],
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            cwd=workdir,
            env=env,
        )
        os.close(slave)
        self._master = master
        self._output = bytearray()

    def text(self) -> str:
        """Everything written to the terminal so far."""
        while True:
            ready, _, _ = select.select([self._master], [], [], 0)
            if not ready:
                break
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: the child has exited and closed its side
                break
            if not chunk:
                break
            self._output += chunk
        return self._output.decode("utf-8", "replace")

    def wait_for(self, text: str, limit: float = 30.0) -> None:
        """Block until the terminal shows ``text``."""
        wait_until(lambda: text in self.text(), limit=limit, what=f"{text!r} on the terminal")

    def close(self) -> None:
        """Kill the process if it still runs; close the terminal."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self.text()
        os.close(self._master)


DATA_FLOWING = 100
"""Packets after which the flight's data streams (its header is about 36 packets)."""


def _packets(line: str) -> int:
    """The packet count a status line shows (0 if none)."""
    match = re.search(r"(\d+) packets", line)
    return 0 if match is None else int(match[1])


def status_lines(output: str) -> list[str]:
    """The status lines drawn on the terminal, escape sequences removed."""
    return [_CSI.sub("", line) for line in _STATUS.findall(output)]


def readme_try_it_commands() -> tuple[list[str], list[str]]:
    """The options of the README's "Try it without a vehicle" ``sim`` and ``record`` commands."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    flat = " ".join(readme.split())
    sim = re.search(r"`ulogstream sim flight\.ulg udpout:127\.0\.0\.1:14550 ([^`]*)`", flat)
    record = re.search(r"`ulogstream record udpin:127\.0\.0\.1:14550 ([^`]*)`", flat)
    assert sim is not None, "the README's sim command"
    assert record is not None, "the README's record command"
    return sim[1].split(), record[1].split()


@pytest.fixture(name="flight")
def fixture_flight(tmp_path: Path) -> Path:
    """The README's ``flight.ulg``: a generated 3 s flight."""
    path = tmp_path / "flight.ulg"
    generate_flight_log(path, duration_s=3.0, seed=5)
    return path


@pytest.mark.broker
@pytest.mark.asyncio
async def test_readme_sim_into_record_is_byte_identical_and_leaves_a_true_status(
    tmp_path: Path, flight: Path, mosquitto: Broker
) -> None:
    source = flight.read_bytes()  # noqa: ASYNC240 (before anything runs)
    port = free_udp_port()
    # The commands as the README writes them (port and broker aside).
    sim_args, record_args = readme_try_it_commands()
    assert record_args == ["--mqtt", "mqtt://localhost"]
    record = Process(
        ["record", f"udpin:127.0.0.1:{port}", "--mqtt", mosquitto.url], tmp_path, name="record"
    )
    sim = Process(
        ["sim", "flight.ulg", f"udpout:127.0.0.1:{port}", *sim_args], tmp_path, name="sim"
    )
    try:
        await record.await_line("listening on")
        # The README's commands, as they are written there (port aside): a lossless link.
        await record.await_line("log finished", limit=30)
        await sim.await_line("sent to its end")
        first = recordings(tmp_path / "recordings")[0]
        assert first.read_bytes() == source
        assert "complete; stopped by another client" in record.stderr()

        record.send_signal(signal.SIGINT)  # --repeat streams the flight again: stop it
        assert await record.await_exit(30) == 0
        sim.send_signal(signal.SIGTERM)
        assert await sim.await_exit() == 0
    finally:
        record.kill()
        sim.kill()

    files = recordings(tmp_path / "recordings")
    assert partial_files(tmp_path / "recordings") == []
    summary = record.stdout().splitlines()
    logs = f"{len(files)} log" if len(files) == 1 else f"{len(files)} logs"
    assert summary[0].startswith(f"{logs} recorded (")
    assert [line.strip() for line in summary[1 : 1 + len(files)]] == [
        str(path.relative_to(tmp_path)) for path in files
    ]
    assert summary[-1].startswith("MQTT: ")
    assert " messages published to " in summary[-1]

    # A dashboard connecting later is shown the end of the run, not a recording in progress.
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/+/meta/status") as got:
        await eventually(lambda: bool(got), what="no retained status")
    status = json.loads(got[0].payload)
    assert got[0].retain
    assert status["online"] is False
    assert status["logs"] == len(files)
    assert status["log_file"] == str(files[-1].relative_to(tmp_path))


@pytest.mark.shared
def test_a_real_px4_log_through_sim_and_record_is_byte_identical(tmp_path: Path) -> None:
    source = shared_ulg("pyulog__sample_log_small.ulg")  # ends with post-flight perf data
    port = free_udp_port()
    record = Process(
        ["record", f"udpin:127.0.0.1:{port}", "--once", "--out", "out"], tmp_path, name="record"
    )
    sim = Process(
        ["sim", str(source), f"udpout:127.0.0.1:{port}", "--speed", "max", "--rate", "usb"],
        tmp_path,
        name="sim",
    )
    try:
        record.wait_for("log finished", timeout=60)
        assert sim.wait(30) == 0
    finally:
        record.kill()
        sim.kill()
    (path,) = recordings(tmp_path / "out")
    assert path.read_bytes() == source.read_bytes()


def test_record_status_fits_80_columns_and_a_second_ctrl_c_ends_a_stop_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flight.ulg"
    generate_flight_log(path, duration_s=30.0, seed=8)
    port = free_udp_port()
    record = PtyProcess(["record", f"udpin:127.0.0.1:{port}", "--out", "recordings"], tmp_path)
    sim = Process(["sim", "flight.ulg", f"udpout:127.0.0.1:{port}"], tmp_path, name="sim")
    try:
        record.wait_for("recording ")
        # Past the header (~36 packets): a log ended in its header leaves no file at all.
        wait_until(
            lambda: any(
                line.startswith("streaming: ") and _packets(line) >= DATA_FLOWING
                for line in status_lines(record.text())
            ),
            what="no status line while the log's data streams",
        )
        sim.process.kill()  # the vehicle vanishes mid-flight
        sim.process.wait(5)
        record.process.send_signal(signal.SIGINT)
        record.wait_for("waiting for the vehicle to answer LOGGING_STOP")
        record.process.send_signal(signal.SIGINT)
        assert record.process.wait(10) == 0
        output = record.text()
    finally:
        record.close()
        sim.kill()

    lines = status_lines(output)
    assert lines, output
    too_wide = [line for line in lines if len(line) >= COLUMNS]
    assert too_wide == [], "status lines wrap on an 80-column terminal"
    waiting = [line for line in lines if "waiting for the vehicle to answer" in line]
    assert waiting
    assert "stopping: Ctrl-C again ends at once" in output
    # Ended by the second Ctrl-C, not by the 5 s the stop waits for an answer ("stop timeout").
    assert "stop abandoned" in output
    assert "incomplete: the stream stopped unannounced; abandoned)" in output
    # The .part is finished as incomplete, and the summary says so.
    (recorded,) = recordings(tmp_path / "recordings")
    assert partial_files(tmp_path / "recordings") == []
    assert "incomplete" in output
    assert "1 log recorded (" in output
    assert str(recorded.relative_to(tmp_path)) in output.splitlines()[-1]


def test_demo_view_fits_80_columns_and_redraws_in_place(tmp_path: Path) -> None:
    demo = PtyProcess(
        ["demo", "--duration", "6", "--speed", "3", "--loss", "0", "--out", "recordings"],
        tmp_path,
    )
    try:
        assert demo.process.wait(60) == 0
        output = demo.text()
    finally:
        demo.close()
    frames = re.split(r"\x1b\[(\d+)F", output)
    assert len(frames) >= 5, "the view was not redrawn"
    # frames: [before, n1, frame1, n2, frame2, ...]; each cursor-up climbs the previous frame.
    for index in range(1, len(frames) - 1, 2):
        lines_drawn = frames[index - 1].count("\x1b[2K")
        assert int(frames[index]) == lines_drawn, "the cursor-up does not climb the last frame"
    views = "".join(frame.split("\x1b[J")[0] for frame in frames[2::2])
    for line in _CSI.sub("", views).splitlines():
        assert len(line) < COLUMNS, line
    assert len(recordings(tmp_path / "recordings")) == 1
