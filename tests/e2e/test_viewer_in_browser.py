"""A real viewer in a real browser draws the live view: Foxglove Studio in headless chromium.

``ulogstream demo --foxglove`` (the simulated PX4 flying a generated flight in real time, again
and again) serves the live view; Foxglove Studio 1.48's web build, from npm as published
(``tests/viewer``: the package's own bundle in a page, with a layout of a Plot panel on
``/vehicle_local_position.z`` in its "header stamp" mode and a Raw Messages panel), connects the
way a user's does: its Foxglove WebSocket data source, subprotocol ``foxglove.websocket.v1``.
Debian's chromium runs it, driven by playwright-core (``tests/viewer/drive.mjs``).

Checked as a user would see it: the Problems tab says "No problems found"; the Plot panel's own
CSV download (what it drew) has its points at the samples' own times, each one a row of the
recorded log (pyulog) with its value; the server's time the viewer keeps follows them. The
screenshot is kept (``tests/viewer/artifacts/``) and is the README's picture. Then the same with
``--foxglove-encoding cdr``: ROS 2 channels, which Studio decodes with arrays as arrays, the plot
on receive time (the server's time, the samples' own: the ROS 2 types have no header).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import json
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from decimal import Decimal
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from pyulog import ULog
from support.foxglove_viewer import npm_packages

if TYPE_CHECKING:
    from collections.abc import Iterator

VIEWER_DIR = Path(__file__).resolve().parents[1] / "viewer"
ARTIFACTS = VIEWER_DIR / "artifacts"
PLOT_TOPIC = "/vehicle_local_position"
PLOT_FIELD = "z"
WATCH_S = 5
"""Seconds the viewer plots after its first message, before the checks."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def viewer_installed() -> Path:
    """Debian's chromium and the npm packages of ``tests/viewer``; skip with the reason if not."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is needed for the browser test (.ci/test installs it)")
    npm_packages(VIEWER_DIR, "@foxglove/studio-base", "the browser test")
    return Path(chromium)


@contextlib.contextmanager
def page_server() -> Iterator[int]:
    """A real HTTP server on 127.0.0.1 serving ``tests/viewer`` (the page and its packages)."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
            del format, args

    handler = functools.partial(Quiet, directory=str(VIEWER_DIR))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            thread.join(timeout=10)


def free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Seen:
    """What the viewer showed, and the logs the demo recorded meanwhile."""

    def __init__(self, encoding: str, report: dict[str, object], recordings: list[Path]) -> None:
        self.encoding = encoding
        self.report = report
        self.recordings = recordings
        with Path(str(report["csv"])).open(newline="") as f:
            self.rows = list(csv.DictReader(f))


@pytest.fixture(scope="module", name="seen", params=["json", "cdr"])
def fixture_seen(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Seen]:
    encoding: str = request.param
    chromium = viewer_installed()
    tmp = tmp_path_factory.mktemp("browser")
    port = free_tcp_port()
    out = tmp / "rec"
    demo_err = tmp / "demo.err"
    with demo_err.open("w") as err:
        demo = subprocess.Popen(
            [
                *(sys.executable, "-m", "ulogstream", "demo"),
                *("--foxglove", f"127.0.0.1:{port}", "--foxglove-encoding", encoding),
                *("--duration", "90", "--loss", "0"),
                *("--out", str(out)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        artifacts = ARTIFACTS if encoding == "json" else ARTIFACTS / encoding
        artifacts.mkdir(parents=True, exist_ok=True)
        stamp = "header" if encoding == "json" else "receive"
        with page_server() as http_port:
            page = (
                f"http://127.0.0.1:{http_port}/index.html?ds=foxglove-websocket"
                f"&ds.url=ws://127.0.0.1:{port}&plot={PLOT_TOPIC}.{PLOT_FIELD}&stamp={stamp}"
            )
            node = shutil.which("node")
            assert node is not None
            driven = subprocess.run(
                [node, str(VIEWER_DIR / "drive.mjs"), page, str(artifacts), str(WATCH_S)],
                capture_output=True,
                text=True,
                check=False,
                timeout=240,
                env={"CHROMIUM": str(chromium), "PATH": "/usr/bin:/bin"},
            )
        assert driven.returncode == 0, driven.stderr[-2000:]
        report = json.loads(driven.stdout.strip().splitlines()[-1])
        assert demo.poll() is None, demo_err.read_text()  # still flying
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 0, demo_err.read_text()
        recordings = sorted(out.rglob("*.ulg"))
        yield Seen(encoding, report, recordings)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def test_the_viewer_lists_no_problems(seen: Seen) -> None:
    """Issue 22: "Failed to parse channel schema" on 109 of 133 channels; none now."""
    assert seen.report["problems"] == "No problems found"
    assert seen.report["errors"] == []


def test_the_raw_messages_panel_shows_the_sample(seen: Seen) -> None:
    """JSON: flat fields behind a header.stamp; ROS 2: arrays as arrays, no header."""
    text = str(seen.report["rawMessages"]).replace("\xa0", " ")  # the panel's spaces
    schema = (
        "vehicle_local_position" if seen.encoding == "json" else "px4_ulog/msg/VehicleLocalPosition"
    )
    assert text.startswith(f"{schema} @ ")  # the panel names the schema
    for field in ("timestamp", "x", "y", "z", "vx", "heading"):
        assert f"\n{field} " in text, field
    if seen.encoding == "json":
        assert "\nstamp " in text
        assert "\ndelta_xy[0] " in text
    else:
        assert "\nstamp " not in text
        assert "\ndelta_xy " in text  # one array field, its items below it
        assert "delta_xy[0]" not in text


@pytest.mark.parametrize("seen", ["json"], indirect=True)  # ROS 2 types have no header.stamp
def test_the_plot_has_every_point_at_its_samples_own_time(seen: Seen) -> None:
    """The Plot panel's CSV: each point is a recorded row, at its ``header.stamp``.

    Each point's ``header.stamp`` minus the row's vehicle time (``timestamp``) is one offset,
    the flight's GPS time (UTC) against its boot time, the same for every point: the plot puts
    the samples where they were sampled, not where the browser received them.
    """
    rows = [row for row in seen.rows if row["topic"] == f"{PLOT_TOPIC}.{PLOT_FIELD}"]
    assert len(rows) >= 5 * WATCH_S  # the demo's default rate cap (10 Hz) for WATCH_S s
    recorded = recorded_rows(seen)
    by_value: dict[float, list[int]] = {}
    for stamp_us, value in recorded.items():
        by_value.setdefault(value, []).append(stamp_us)
    stamps_ns = [int(Decimal(row["header.stamp"]) * 10**9) for row in rows]
    offsets = [
        stamp_ns - stamp_us * 1000
        for row, stamp_ns in zip(rows, stamps_ns, strict=True)
        for stamp_us in by_value.get(float32(row["value"]), [])
    ]
    offset = statistics.median_low(offsets)
    for row, stamp_ns in zip(rows, stamps_ns, strict=True):
        stamp_us = round((stamp_ns - offset) / 1000)
        near = [recorded.get(stamp_us + d) for d in (-1, 0, 1)]  # t has microseconds
        # On failure: where the value was recorded (an offset off, or a row never recorded?).
        where = by_value.get(float32(row["value"]), [])
        assert float32(row["value"]) in near, (row, stamp_us, offset, where[:5])
    # The offset is the flight's GPS time (2024), far from this machine's clock.
    assert abs(offset / 1e9 - time.time()) > 86_400


def test_the_viewers_clock_follows_the_samples(seen: Seen) -> None:
    """The server's ``time``: the viewer's receive times are the newest sample's time.

    JSON: against each point's header.stamp. ROS 2: every plotted value is a recorded row's
    and its receive time is within the clock's steps of that row's vehicle time, at one offset
    (the flight's GPS time, far from this machine's clock).
    """
    rows = [row for row in seen.rows if row["topic"] == f"{PLOT_TOPIC}.{PLOT_FIELD}"]
    assert len(rows) >= 5 * WATCH_S
    if seen.encoding == "json":
        lags = [abs(Decimal(row["receive time"]) - Decimal(row["header.stamp"])) for row in rows]
        assert statistics.median(lags) < Decimal("0.2"), statistics.median(lags)
        assert max(lags) < Decimal(2), max(lags)
        return
    recorded = recorded_rows(seen)
    by_value: dict[float, list[int]] = {}
    for stamp_us, value in recorded.items():
        by_value.setdefault(value, []).append(stamp_us)
    received_s = [Decimal(row["receive time"]) for row in rows]
    for row in rows:
        assert float32(row["value"]) in by_value, row  # a recorded sample's value
    offsets = [
        float(received) - stamp_us / 1e6
        for row, received in zip(rows, received_s, strict=True)
        for stamp_us in by_value[float32(row["value"])]
    ]
    offset = statistics.median(offsets)
    near = [
        min(
            abs(float(received) - stamp_us / 1e6 - offset)
            for stamp_us in by_value[float32(row["value"])]
        )
        for row, received in zip(rows, received_s, strict=True)
    ]
    assert statistics.median(near) < 0.05, statistics.median(near)
    assert max(near) < 1.0, max(near)
    assert abs(offset - time.time()) > 86_400


def recorded_rows(seen: Seen) -> dict[int, float]:
    """The recorded logs' plotted field by vehicle time (us), as the viewer prints float32."""
    recorded: dict[int, float] = {}
    for path in seen.recordings:
        (data,) = [d for d in ULog(str(path)).data_list if d.name == PLOT_TOPIC.removeprefix("/")]
        for stamp_us, z in zip(data.data["timestamp"], data.data[PLOT_FIELD], strict=True):
            recorded[int(stamp_us)] = float32(z)
    return recorded


def float32(value: object) -> float:
    """``value`` as the float32 it is (JSON prints it shortest, CDR as a double's digits)."""
    return float(np.float32(value))  # type: ignore[arg-type]


def test_the_screenshot_is_kept(seen: Seen) -> None:
    shot = Path(str(seen.report["screenshot"]))
    assert shot.parent == (ARTIFACTS if seen.encoding == "json" else ARTIFACTS / seen.encoding)
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert shot.stat().st_size > 20_000  # panels drawn, not a blank page
