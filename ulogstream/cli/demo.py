"""``ulogstream demo``: a simulated PX4 streams a generated flight over UDP; we record it.

No vehicle, broker or files are needed: the flight log is generated with our own writer, the
simulated PX4 streams it exactly as PX4's logger does (with a little packet loss), and the
recorder (the same one ``ulogstream run`` uses) records and decodes it live. A live view shows
the topics with their rates; at the end a summary says what was recovered and how to open it.

With ``--loop`` (the default with ``--foxglove``) the flight is flown again and again in real
time, one recording each, until Ctrl-C: time to open a viewer and build a layout.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import msgspec

from ulogstream.adapters.ulog_file import read
from ulogstream.cli.terminal import error_words, fit_line, terminal_width
from ulogstream.config.sections import (
    FoxgloveSettings,
    LinkSettings,
    MqttSettings,
    RecordingSettings,
    Settings,
)
from ulogstream.config.values import SettingError, parse_listen
from ulogstream.errors import ConfigError
from ulogstream.recorder.recorder import Recorder
from ulogstream.recorder.wiring import recorder_parts
from ulogstream.sim import USB_LINK_RATE
from ulogstream.sim.faults import FaultConfig
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.sim.runner import run_vehicle
from ulogstream.sim.vehicle import VehicleConfig

if TYPE_CHECKING:
    from ulogstream.config.sections import FoxgloveEncoding
    from ulogstream.recorder.status import RecorderStatus
    from ulogstream.sim.runner import SimSummary

VIEW_INTERVAL_S = 0.5
"""Refresh period of the live view."""

QUIET_BEFORE_STOP_S = 1.0
"""Once the simulated PX4 has sent its whole log and nothing arrived for this long, stop."""

PLAIN_PROGRESS_INTERVAL_S = 2.0
"""Period of the progress lines printed when the output is not a terminal."""

MAX_TOPIC_ROWS = 18
"""Topic instances shown in the live view (most samples first)."""


class DemoOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What ``ulogstream demo`` takes.

    Attributes:
        out_dir: Where the recording goes (``{out}/demo/{YYYY-MM-DD}/{HH_MM_SS}.ulg``).
        duration_s: Length of the generated flight.
        speed: Replay speed of the flight's time (3 streams a 30 s flight in about 10 s).
        loss: Probability that the link loses a LOGGING_DATA packet.
        seed: Seeds the flight and the losses: equal options give equal runs.
        mqtt_url: Also publish live to this broker (``mqtt://HOST[:PORT]``).
        foxglove_listen: Also serve a Foxglove live view at this ``[HOST:]PORT``.
        foxglove_encoding: Its channels: ``json`` or ``cdr`` (ROS 2, for PlotJuggler).
        loop: Fly the flight again and again (a new log each time) until stopped (Ctrl-C).
    """

    out_dir: Path = Path("recordings")
    duration_s: float = 30.0
    speed: float = 3.0
    loss: float = 0.01
    seed: int = 1
    mqtt_url: str | None = None
    foxglove_listen: str | None = None
    foxglove_encoding: FoxgloveEncoding = "json"
    loop: bool = False


LOOP_IDLE_TIMEOUT_S = 1.0
"""With ``loop``: a flight's log ends 1 s after its last data, and the next flight starts."""

LOOP_MAX_LOGS = 10
"""With ``loop``: the recordings kept (the oldest of this demo's own are deleted)."""


def foxglove_hint(listen: str) -> str:
    """How to watch the demo in Foxglove, for ``--foxglove [HOST:]PORT``.

    Raises:
        ConfigError: ``listen`` is not ``[HOST:]PORT``.
    """
    from ulogstream.adapters.foxglove_sink import foxglove_url  # noqa: PLC0415 (the SDK: Foxglove only)

    try:
        address = parse_listen(listen, "--foxglove")
    except SettingError as err:
        raise ConfigError(str(err)) from None
    return (
        f"Watch it live in Foxglove: Open connection > Foxglove WebSocket > "
        f"{foxglove_url(address, tls=False)}"
    )


class DemoResult(msgspec.Struct, frozen=True):
    """What the demo recorded, measured against what the simulated PX4 streamed."""

    recording: Path | None
    source: Path
    source_samples: int
    recorded_samples: int
    flight_s: float
    flights: int
    """Recordings finished (one per flight; more than one with ``loop``)."""
    status: RecorderStatus
    sim: SimSummary | None
    mqtt_error: str | None = None
    """Why the last connection to the broker failed (``--mqtt``), if it did."""


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def run_demo(options: DemoOptions, *, view: TextIO | None) -> DemoResult:
    """Generate, stream, record and decode a flight; ``view`` gets the live view (a terminal).

    Raises:
        UlogstreamError: The recording could not be made (a clear message says why).
    """
    with tempfile.TemporaryDirectory(prefix="ulogstream-demo-") as tmp:
        source = Path(tmp) / "simulated-flight.ulg"
        flight = generate_flight_log(source, duration_s=options.duration_s, seed=options.seed)
        port = free_udp_port()
        recording_settings = RecordingSettings(out_dir=options.out_dir, min_free_mb=50)
        if options.loop:
            recording_settings = msgspec.structs.replace(
                recording_settings, idle_timeout_s=LOOP_IDLE_TIMEOUT_S, max_logs=LOOP_MAX_LOGS
            )
        settings = Settings(
            link=LinkSettings(connection=f"udpin:127.0.0.1:{port}"),
            recording=recording_settings,
            mqtt=MqttSettings(url=options.mqtt_url, vehicle_id="demo"),
            foxglove=FoxgloveSettings(
                enabled=options.foxglove_listen is not None,
                listen=options.foxglove_listen or FoxgloveSettings().listen,
                encoding=options.foxglove_encoding,
            ),
        )
        once = not options.loop
        recorder = Recorder(recorder_parts(settings, once=once), once=once, count_topics=True)
        recorder_task = asyncio.create_task(recorder.run())
        sim_stop = asyncio.Event()
        sim_task = asyncio.create_task(
            run_vehicle(
                source,
                f"udpout:127.0.0.1:{port}",
                config=VehicleConfig(link_rate=USB_LINK_RATE, speed=options.speed),
                faults=FaultConfig(loss=options.loss, seed=options.seed),
                keep_deliveries=False,
                stop_event=sim_stop,
                repeat=options.loop,
            )
        )
        started = time.monotonic()
        await _watch(recorder, recorder_task, view, options, started)
        await recorder_task
        sim_stop.set()
        sim: SimSummary | None = None
        with contextlib.suppress(TimeoutError):
            sim = await asyncio.wait_for(sim_task, 5.0)
        finished = recorder.status.finished
        recording = finished[-1].path if finished else None
        recorded = 0
        if recording is not None:
            recorded = sum(len(topic.data) for topic in read(recording).topics.values())
        return DemoResult(
            recording=recording,
            source=source,
            source_samples=sum(flight.data_counts.values()),
            recorded_samples=recorded,
            flight_s=flight.duration_s,
            flights=len(finished),
            status=recorder.status,
            sim=sim,
            mqtt_error=next(
                (p.sink.last_error for p in recorder.publishers.values() if p.sink.last_error), None
            ),
        )


async def _watch(
    recorder: Recorder,
    recorder_task: asyncio.Task[int],
    view: TextIO | None,
    options: DemoOptions,
    started: float,
) -> None:
    """Draw the live view until the log is streamed, then stop the recorder with the handshake."""
    drawn = 0
    next_line = started
    last_packets, quiet_since = -1, time.monotonic()
    while not recorder_task.done():
        await asyncio.sleep(VIEW_INTERVAL_S)
        status = recorder.status
        if recorder.pipeline is not None:
            recorder.pipeline.refresh_status()
        now = time.monotonic()
        if status.packets != last_packets:
            last_packets, quiet_since = status.packets, now
        elif status.packets and now - quiet_since >= QUIET_BEFORE_STOP_S and not options.loop:
            recorder.request_stop()
        if view is not None:
            lines = view_lines(recorder, options, now - started)
            drawn = _redraw(view, fit_lines(lines, terminal_width(view)), drawn)
        elif now >= next_line:
            # Not a terminal (a pipe, CI): a plain progress line every few seconds.
            sys.stdout.write(f"{now - started:5.1f} s  {recorder.status_text()}\n")
            sys.stdout.flush()
            next_line = now + PLAIN_PROGRESS_INTERVAL_S


def view_lines(recorder: Recorder, options: DemoOptions, elapsed_s: float) -> list[str]:
    """The live view: link, file, counters, then topic instances with their logged rates."""
    status = recorder.status
    ending = "   Ctrl-C stops" if options.loop else ""
    lines = [
        (
            f"ulogstream demo: simulated PX4 -> UDP loopback ({options.loss:.0%} loss) -> recorder"
            f"   {elapsed_s:5.1f} s{ending}"
        ),
        recorder.status_text(),
        "",
        f"{'topic':<32}{'inst':>5}{'samples':>10}{'rate Hz':>10}",
    ]
    ranked = sorted(status.topics.items(), key=lambda item: -item[1].samples)
    for (name, multi_id), stats in ranked[:MAX_TOPIC_ROWS]:
        span_s = (stats.last_timestamp_us - stats.first_timestamp_us) / 1e6
        rate = (stats.samples - 1) / span_s if span_s > 0 else 0.0
        lines.append(f"{name:<32}{multi_id:>5}{stats.samples:>10}{rate:>10.1f}")
    if len(ranked) > MAX_TOPIC_ROWS:
        lines.append(f"... and {len(ranked) - MAX_TOPIC_ROWS} more topic instances")
    return lines


def fit_lines(lines: list[str], width: int) -> list[str]:
    """``lines`` cut to ``width`` columns, so that none wraps and the redraw stays in place."""
    return [fit_line(line, width) for line in lines]


def _redraw(view: TextIO, lines: list[str], drawn: int) -> int:
    """Draw ``lines`` over the ``drawn`` lines of the last call (each one row: see fit_lines)."""
    if drawn:
        view.write(f"\x1b[{drawn}F")
    view.write("".join(f"\x1b[2K{line}\n" for line in lines))
    view.write("\x1b[J")
    view.flush()
    return len(lines)


def summary_lines(result: DemoResult, options: DemoOptions) -> list[str]:
    """The closing summary: the file, what was recovered, and how to open it."""
    status = result.status
    if result.recording is None:
        return [f"nothing was recorded: {status.error or 'the simulated PX4 sent no log'}"]
    size_mb = result.recording.stat().st_size / 1e6
    share = result.recorded_samples / result.source_samples if result.source_samples else 0.0
    path = result.recording
    lines = [
        f"Recorded {path} ({size_mb:.2f} MB, {result.flight_s:.0f} s of flight).",
        (
            f"  {status.packets} packets received; {status.packets_lost} lost in "
            f"{status.gaps} gaps, marked by {status.dropouts} measured dropouts."
        ),
    ]
    if options.loop:
        lines[0] = (
            f"Recorded {result.flights} flights of {result.flight_s:.0f} s into "
            f"{options.out_dir}; the last, {path} ({size_mb:.2f} MB), may end where Ctrl-C came."
        )
    else:
        lines.append(
            f"  {result.recorded_samples} of {result.source_samples} samples recovered"
            f" ({share:.1%}): all that arrived whole."
        )
    lines += [
        "Open it:",
        f"  ulogstream info {path}",
        f"  PlotJuggler: plotjuggler -d {path}   (or File > Load Data)",
        "  Foxglove: open the .ulg in Foxglove (desktop app or web)",
    ]
    if options.mqtt_url is None:
        lines += [
            "See the topics live on MQTT: start a broker (e.g. mosquitto) and run",
            "  ulogstream demo --mqtt mqtt://localhost",
            "  mosquitto_sub -t 'ulogstream/demo/#' -v",
        ]
    elif status.mqtt_published:
        lines.append(
            f"Published {status.mqtt_published} MQTT messages to {options.mqtt_url}"
            f" ({status.mqtt_dropped} dropped) under ulogstream/demo/."
        )
    else:
        why = f" ({error_words(result.mqtt_error)})" if result.mqtt_error else ""
        lines.append(
            f"MQTT: the broker at {options.mqtt_url} was never reached{why}: nothing was"
            " published (is it running? check the URL)."
        )
    return lines
