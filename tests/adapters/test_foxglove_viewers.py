"""What each viewer of the live view is sent: first rows, quiet topics, and nothing twice.

A real :class:`FoxgloveSink` (foxglove-sdk's server behind the front) fed a log our writer makes,
event by event, with Foxglove's own protocol client (``tests/node/foxglove_client.mjs``) as the
viewers: connected before anything is advertised, or subscribing after a quiet topic's only
sample was logged.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import struct
import time
from functools import partial
from typing import TYPE_CHECKING

import pytest
from support.foxglove_viewer import Viewer, node_client_installed
from support.waiting import wait_until

from ulogstream.adapters.foxglove_sink import QUIET_NS, VIEWERS_GRACE_S, FoxgloveSink
from ulogstream.config.sections import FoxgloveSettings
from ulogstream.recorder.wiring import foxglove_view
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ulogstream.ulog.events import ULogEvent

ACTIVE_ROWS = 400
"""Rows of the active topic, 10 ms apart: 4 s of sample time."""

pytestmark = pytest.mark.timeout(120)


def _quiet_and_active(*formats: str) -> tuple[ULogWriter, int, int]:
    """A log's writer with ``quiet_cmd`` and ``active`` subscribed (their msg_ids after it).

    ``formats`` are defined too, for the caller to subscribe.
    """
    writer = ULogWriter(timestamp_us=1_000)
    writer.format("quiet_cmd:uint64_t timestamp;uint32_t command;")
    writer.format("active:uint64_t timestamp;float value;")
    for definition in formats:
        writer.format(definition)
    return writer, writer.add_logged_message("quiet_cmd"), writer.add_logged_message("active")


def events() -> tuple[list[ULogEvent], list[ULogEvent]]:
    """A log's events: up to the quiet topic's only row, and the rest (the active topic's rows)."""
    writer, quiet, active = _quiet_and_active()
    writer.data(quiet, struct.pack("<QI", 5_000, 176))
    head = len(writer.getvalue())
    for i in range(ACTIVE_ROWS):
        writer.data(active, struct.pack("<Qf", 10_000 + i * 10_000, float(i)))
    data = writer.getvalue()
    parser = ULogParser()
    first = parser.receive_bytes(data[:head])
    rest: list[ULogEvent] = []
    for start in range(head, len(data), 100):  # a few rows an event, as a stream brings them
        rest += parser.receive_bytes(data[start : start + 100])
    return first, rest + parser.close()


@pytest.fixture(name="sink")
def fixture_sink() -> Iterator[FoxgloveSink]:
    node_client_installed()
    sink = foxglove_view(FoxgloveSettings(enabled=True, listen="127.0.0.1:0", default_rate_hz=0))
    assert isinstance(sink, FoxgloveSink)
    sink.start()
    yield sink
    sink.stop()


def test_first_rows_wait_for_the_first_viewer_and_quiet_topics_reach_a_late_one(
    sink: FoxgloveSink,
) -> None:
    first = Viewer(sink.url)
    late: Viewer | None = None
    try:
        wait_until(lambda: bool(first.of_kind("open")), what="the first viewer connected")
        head, rest = events()
        now = 100.0
        sink.policy.log_started(wall_time=1_700_000_000.0, now=now)
        for event in head:  # advertised and logged before the viewer can subscribe
            sink.event(event, now)
        wait_until(lambda: len(first.of_kind("advertise")) >= 4, what="the first subscribed")
        fed = 0
        while not first.messages("/quiet_cmd"):  # the sink learns of subscriptions as events come
            assert fed < 20, "the first viewer never got the quiet topic's row"
            time.sleep(0.2)
            now += 0.2  # the kept rows go out VIEWERS_GRACE_S after the first subscription
            sink.event(rest[fed], now)
            fed += 1
        assert fed * 0.2 > VIEWERS_GRACE_S
        late = Viewer(sink.url)
        _subscribed(late, 4)
        for event in rest[fed:]:
            now += 0.001
            sink.event(event, now)
        wait_until(lambda: len(first.messages("/active")) == ACTIVE_ROWS, what="every active row")
        wait_until(lambda: bool(late.messages("/quiet_cmd")), what="the quiet topic, late")
    finally:
        first.close()
        if late is not None:
            late.close()
    # the late viewer subscribed after the quiet topic's only row: it is sent again once the
    # topic stayed quiet for QUIET_NS of sample time, to both viewers (they share the channel)
    (again,) = late.messages("/quiet_cmd")
    assert again["data"]["command"] == 176  # type: ignore[index]
    assert [m["data"] for m in first.messages("/quiet_cmd")] == [again["data"]] * 2
    assert sink.counters()["foxglove_resent"] == 1
    # the active topic logs all the time: never sent again; the first viewer has every row
    values = [m["data"]["value"] for m in first.messages("/active")]  # type: ignore[index]
    assert values == [float(i) for i in range(ACTIVE_ROWS)]
    assert ACTIVE_ROWS * 10_000_000 > 2 * QUIET_NS  # the run is long enough to tell


def test_viewers_connected_as_a_log_starts_each_get_every_row(sink: FoxgloveSink) -> None:
    """Two viewers subscribe to a new channel moments apart: the rows kept for it reach both.

    The SDK logs a message to the viewers subscribed at that moment; the kept rows used to go
    at the first subscription, so the second viewer missed each topic's first rows.
    """
    slow = VIEWERS_GRACE_S / 3  # a viewer that sets up its panels before it subscribes
    viewers = [
        Viewer(sink.url),
        Viewer(sink.url, ("foxglove.websocket.v1",), subscribe_delay_s=slow),
    ]
    try:
        for viewer in viewers:
            wait_until(partial(_opened, viewer), what="a viewer connected")
        head, rest = events()
        sink.policy.log_started(wall_time=1_700_000_000.0, now=time.monotonic())
        for event in head:  # advertised and logged before the viewers can subscribe
            sink.event(event, time.monotonic())
        for event in rest:  # the rows stream in over about two grace periods, as PX4 sends them
            time.sleep(2 * VIEWERS_GRACE_S / len(rest))
            sink.event(event, time.monotonic())
        for viewer in viewers:
            wait_until(partial(_has_every_active_row, viewer), what="every active row, each viewer")
    finally:
        for viewer in viewers:
            viewer.close()
    for viewer in viewers:
        (quiet,) = viewer.messages("/quiet_cmd")  # logged before anyone subscribed
        assert quiet["data"]["command"] == 176  # type: ignore[index]
        values = [m["data"]["value"] for m in viewer.messages("/active")]  # type: ignore[index]
        assert values == [float(i) for i in range(ACTIVE_ROWS)]  # each once, in order
    assert sink.counters()["foxglove_resent"] == 0


def test_a_quiet_topic_of_the_last_log_is_not_sent_again_in_the_next(sink: FoxgloveSink) -> None:
    """A topic logged at the end of one log is not that quiet topic's newest in the next.

    Seen in CI: a viewer subscribed as the second log began; ``sensor_preflight`` (first row
    2.4 s into PX4's log) stayed quiet for a second, and the first log's last row was sent
    again, stamped on the second log's clock: a point that never happened.
    """
    log = _quiet_topic_last_log()
    first = Viewer(sink.url)
    late: Viewer | None = None
    try:
        wait_until(lambda: bool(first.of_kind("open")), what="the first viewer connected")
        _stream(sink, log, wall_time=1_700_000_000.0)
        wait_until(lambda: bool(first.messages("/quiet_cmd")), what="the first log's quiet row")
        late = Viewer(sink.url)
        _subscribed(late, 4)
        _stream(sink, log, wall_time=1_700_000_100.0)
        wait_until(lambda: len(first.messages("/quiet_cmd")) >= 2, what="the second log's row")
        wait_until(lambda: bool(late.messages("/quiet_cmd")), what="the late viewer's row")
    finally:
        first.close()
        if late is not None:
            late.close()
    assert sink.counters()["foxglove_resent"] == 0
    first_log, second_log = (m["data"]["t"] for m in first.messages("/quiet_cmd"))  # type: ignore[index]
    assert second_log - first_log == pytest.approx(100.0)
    assert [m["data"]["t"] for m in late.messages("/quiet_cmd")] == [second_log]  # type: ignore[index]


def test_the_first_viewer_of_an_unwatched_log_waits_for_quiet_topics_only(
    sink: FoxgloveSink,
) -> None:
    """A viewer of a log nobody watched waits for a quiet topic like any late viewer.

    Nothing was sent before it subscribed, so the server's time was unknown: the wait starts
    at the first sample sent, and an active topic's newest is not sent again.
    """
    head, rest = events()
    sink.policy.log_started(wall_time=1_700_000_000.0, now=time.monotonic())
    for event in head:  # advertised and logged with nobody watching
        sink.event(event, time.monotonic())
    viewer = Viewer(sink.url)
    try:
        _subscribed(viewer, 4)
        for event in rest:
            sink.event(event, time.monotonic())
        wait_until(lambda: bool(viewer.messages("/quiet_cmd")), what="the quiet topic")
        wait_until(lambda: len(viewer.messages("/active")) >= 100, what="the active topic")
    finally:
        viewer.close()
    (again,) = viewer.messages("/quiet_cmd")
    assert again["data"]["command"] == 176  # type: ignore[index]
    assert sink.counters()["foxglove_resent"] == 1
    values = [m["data"]["value"] for m in viewer.messages("/active")]  # type: ignore[index]
    assert values == sorted(set(values))  # each once, in order
    arrived = viewer.of_kind("message")
    ahead = [m for m in arrived[: arrived.index(again)] if m["topic"] == "/active"]
    before = [m["data"]["value"] for m in ahead]  # type: ignore[index]
    assert before, "the quiet topic came before any active row"
    assert (before[-1] - before[0]) * 10_000_000 >= QUIET_NS  # quiet for QUIET_NS of its time


def test_a_quiet_topic_reaches_a_late_viewer_after_the_clock_goes_back_to_gps_time(
    sink: FoxgloveSink,
) -> None:
    """A GPS fix that puts the server's time back restarts the wait for a quiet topic.

    With a receiver clock years ahead, the late viewer gets the quiet topic's newest sample a
    second later, not when the GPS time has caught up with the receiver's clock (years later).
    """
    gps_utc_s = 1_600_000_000
    writer, quiet, active = _quiet_and_active(
        "vehicle_gps_position:uint64_t timestamp;uint64_t time_utc_usec;"
    )
    gps = writer.add_logged_message("vehicle_gps_position")
    writer.data(quiet, struct.pack("<QI", 5_000, 176))
    head = 0
    for i in range(ACTIVE_ROWS):
        if i == 100:  # split here: the late viewer subscribes, then the GPS fix comes
            head = len(writer.getvalue())
            writer.data(gps, struct.pack("<QQ", 10_000 + i * 10_000, gps_utc_s * 1_000_000))
        writer.data(active, struct.pack("<Qf", 10_000 + i * 10_000, float(i)))
    log = writer.getvalue()
    parser = ULogParser()
    first = Viewer(sink.url)
    late: Viewer | None = None
    try:
        wait_until(lambda: bool(first.of_kind("open")), what="the first viewer connected")
        sink.policy.log_started(wall_time=1_700_000_000.0, now=time.monotonic())
        _feed(sink, parser, log[:head])  # on the receiver's clock, the server's time known
        wait_until(lambda: bool(first.messages("/quiet_cmd")), what="the quiet row")
        late = Viewer(sink.url)
        _subscribed(late, 5)
        _feed(sink, parser, log[head:])
        wait_until(lambda: bool(late.messages("/quiet_cmd")), what="the quiet topic, late")
    finally:
        first.close()
        if late is not None:
            late.close()
    (again,) = late.messages("/quiet_cmd")
    assert again["data"]["command"] == 176  # type: ignore[index]
    assert again["data"]["t"] < gps_utc_s + 5  # type: ignore[index] # on the GPS clock
    assert [m["data"]["t"] for m in first.messages("/quiet_cmd")][1:] == [again["data"]["t"]]  # type: ignore[index]
    assert sink.counters()["foxglove_resent"] == 1  # the active topic is never quiet


def _quiet_topic_last_log() -> bytes:
    """A log whose ``quiet_cmd`` logs once, after ``ACTIVE_ROWS`` of ``active`` (4 s)."""
    writer, quiet, active = _quiet_and_active()
    for i in range(ACTIVE_ROWS):
        writer.data(active, struct.pack("<Qf", 10_000 + i * 10_000, float(i)))
    writer.data(quiet, struct.pack("<QI", 10_000 + ACTIVE_ROWS * 10_000, 176))
    return writer.getvalue()


def _subscribed(viewer: Viewer, channels: int) -> None:
    """Wait until ``viewer`` was told of ``channels`` channels and its subscriptions arrived."""
    wait_until(lambda: len(viewer.of_kind("advertise")) >= channels, what="a viewer subscribed")
    time.sleep(0.5)  # its subscriptions reach the server (the sink learns of them at events)


def _stream(sink: FoxgloveSink, log: bytes, *, wall_time: float) -> None:
    """Feed ``log`` to ``sink`` as one log (see :func:`_feed`)."""
    sink.policy.log_started(wall_time=wall_time, now=time.monotonic())
    parser = ULogParser()
    _feed(sink, parser, log)
    for event in parser.close():
        sink.event(event, time.monotonic())


def _feed(sink: FoxgloveSink, parser: ULogParser, data: bytes) -> None:
    """Feed ``data`` to ``sink`` through ``parser``, a few rows an event, over about two seconds.

    The sink learns of subscriptions, and sends kept rows, as events come.
    """
    chunks = range(0, len(data), 100)
    for offset in chunks:
        for event in parser.receive_bytes(data[offset : offset + 100]):
            sink.event(event, time.monotonic())
        time.sleep(2.0 / len(chunks))


def _opened(viewer: Viewer) -> bool:
    return bool(viewer.of_kind("open"))


def _has_every_active_row(viewer: Viewer) -> bool:
    return len(viewer.messages("/active")) >= ACTIVE_ROWS


def test_a_viewer_that_falls_behind_is_one_warning_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A viewer whose outbox is full loses the oldest messages: one WARNING names it.

    The SDK says so once, at INFO, naming the front's connection; the sink names the viewer
    and counts it.
    """
    settings = FoxgloveSettings(enabled=True, listen="127.0.0.1:0", backlog=8, default_rate_hz=0)
    sink = foxglove_view(settings)
    assert isinstance(sink, FoxgloveSink)
    sink.start()
    viewer = socket.create_connection(("127.0.0.1", sink.address.port), timeout=10)
    viewer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        writer = ULogWriter(timestamp_us=1_000)
        writer.format("wide:uint64_t timestamp;float[250] v;")
        wide = writer.add_logged_message("wide")
        head = len(writer.getvalue())
        parser = ULogParser()
        events_ = parser.receive_bytes(writer.getvalue())
        now = 1.0
        sink.policy.log_started(wall_time=1_700_000_000.0, now=now)
        for event in events_:
            sink.event(event, now)
        channel = _handshake_and_find(viewer, "/wide")
        _send_text(viewer, {"op": "subscribe", "subscriptions": [{"id": 1, "channelId": channel}]})
        time.sleep(0.5)
        assert sink.counters()["foxglove_viewers"] == 1
        for i in range(20000):  # about 30 MB as JSON, which the viewer never reads
            writer.data(wide, struct.pack("<Q", 10_000 + i * 1000) + bytes(1000))
        data = writer.getvalue()
        with caplog.at_level(logging.WARNING):  # the daemon's usual level: still told
            for start in range(head, len(data), 16_384):
                for event in parser.receive_bytes(data[start : start + 16_384]):
                    now += 0.001
                    sink.event(event, now)
                if sink.counters()["foxglove_outbox_full"]:
                    break
            wait_until(lambda: sink.counters()["foxglove_outbox_full"] >= 1, what="an overflow")
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        (warning,) = [r for r in warnings if "falls behind" in r.getMessage()]
        local = viewer.getsockname()
        assert f"{local[0]}:{local[1]}" in warning.getMessage()
        assert "foxglove.backlog = 8" in warning.getMessage()
        assert not [r for r in caplog.records if "outbox for client" in r.getMessage()]
    finally:
        viewer.close()
        sink.stop()


def _send_text(sock: socket.socket, obj: object) -> None:
    """One masked text frame, as a browser sends."""
    payload = json.dumps(obj).encode()
    mask = os.urandom(4)
    assert len(payload) < 126
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)


def _handshake_and_find(sock: socket.socket, topic: str) -> int:
    """Upgrade ``sock`` and read the server's frames until ``topic`` is advertised: its id."""
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n\r\n"
        ).encode()
    )
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    data = data.split(b"\r\n\r\n", 1)[1]
    while True:
        while len(data) < 2:
            data += sock.recv(4096)
        size, start = data[1] & 0x7F, 2
        if size == 126:
            size, start = int.from_bytes(data[2:4], "big"), 4
        elif size == 127:
            size, start = int.from_bytes(data[2:10], "big"), 10
        while len(data) < start + size:
            data += sock.recv(65536)
        frame, data = data[start : start + size], data[start + size :]
        message = json.loads(frame) if frame[:1] == b"{" else {}
        for channel in message.get("channels", []):
            if channel["topic"] == topic:
                return int(channel["id"])
