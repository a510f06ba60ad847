"""What each viewer of the live view is sent: first rows, quiet topics, and nothing twice.

A real :class:`FoxgloveSink` (foxglove-sdk's server behind the front) fed a log our writer makes,
event by event, with Foxglove's own protocol client (``tests/node/foxglove_client.mjs``) as the
viewers: one connected before anything is advertised, one that subscribes after a quiet topic's
only sample was logged.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

import pytest
from support.foxglove_viewer import Viewer, node_client_installed
from support.waiting import wait_until

from ulogstream.adapters.foxglove_sink import QUIET_NS, FoxgloveSink
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


def events() -> tuple[list[ULogEvent], list[ULogEvent]]:
    """A log's events: up to the quiet topic's only row, and the rest (the active topic's rows)."""
    writer = ULogWriter(timestamp_us=1_000)
    writer.format("quiet_cmd:uint64_t timestamp;uint32_t command;")
    writer.format("active:uint64_t timestamp;float value;")
    quiet = writer.add_logged_message("quiet_cmd")
    active = writer.add_logged_message("active")
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
        sink.log_started()
        sink.policy.log_started(wall_time=1_700_000_000.0, now=now)
        for event in head:  # advertised and logged before the viewer can subscribe
            sink.event(event, now)
        wait_until(lambda: len(first.of_kind("advertise")) >= 4, what="the first subscribed")
        for event in rest[:10]:  # the sink learns of the subscriptions as events come
            now += 0.001
            sink.event(event, now)
        wait_until(
            lambda: len(first.messages("/quiet_cmd")) == 1, what="the first viewer's first row"
        )
        late = Viewer(sink.url)
        wait_until(lambda: len(late.of_kind("advertise")) >= 4, what="the late viewer subscribed")
        time.sleep(0.5)  # its subscriptions reach the server
        for event in rest[10:]:
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
