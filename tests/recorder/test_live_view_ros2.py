"""ROS 2 channels of the live view, subscribed as PlotJuggler subscribes: every row, decoded.

``ulogstream record --foxglove --foxglove-encoding cdr`` at rate 0, fed a shared real PX4 log
by ``ulogstream sim`` (twice, at USB speed). The viewer connects as PlotJuggler's Foxglove
WebSocket client does (subprotocol ``foxglove.sdk.v1``, only channels with encoding ``cdr`` and
schema encoding ``ros2msg``) and decodes each message with ``@foxglove/rosmsg2-serialization``
against the advertised schema. The oracle is pyulog reading the recorded files.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec
import pytest
from pyulog import ULog
from support.foxglove_viewer import (
    SITL_SAMPLE,
    LiveRecording,
    Viewer,
    node_client_installed,
    pyulog_rows,
    same_value,
)
from support.shared_data import shared_ulg
from support.waiting import wait_until

from ulogstream.export.rosnames import ros2_field_name, ros_topic

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LOGS = 2

pytestmark = [pytest.mark.shared, pytest.mark.slow, pytest.mark.timeout(240)]


class Run(msgspec.Struct):
    source: Path
    recordings: list[Path]
    viewer: Viewer
    log: str


@pytest.fixture(scope="module", name="run")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    source = shared_ulg(SITL_SAMPLE)
    node_client_installed()
    live = LiveRecording(
        tmp_path_factory.mktemp("ros2"), "--foxglove-rate", "0", "--foxglove-encoding", "cdr"
    )
    viewer: Viewer | None = None
    try:
        viewer = Viewer(live.url(), ("foxglove.sdk.v1",), ros2_only=True)
        wait_until(lambda: bool(viewer.of_kind("open")), what="the viewer connected")
        live.stream(source)
        wait_until(
            lambda: live.log().count("log finished:") >= LOGS, limit=90, what="logs finished"
        )
        live.stop()
        wait_until(lambda: bool(viewer.of_kind("close")), what="the viewer saw the end")
        yield Run(source, live.recordings(), viewer, live.log())
    finally:
        if viewer is not None:
            viewer.close()
        live.close()


def flat(value: object, key: str = "") -> dict[str, object]:
    """A decoded ROS 2 message as pyulog's flat keys (``q[0]``, ``esc[1].rpm``)."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for name, item in value.items():
            out.update(flat(item, f"{key}.{name}" if key else name))
        return out
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(flat(item, f"{key}[{index}]"))
        return out
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return {key: int(value)}  # 64-bit integers come as strings
    return {key: value}


def ros2_key(pyulog_key: str) -> str:
    """A pyulog flat key with each field name as the ROS 2 schema names it."""
    return re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda m: ros2_field_name(m.group(0)), pyulog_key)


def test_every_instance_is_a_ros2_channel_plotjuggler_keeps(run: Run) -> None:
    advertised = {str(a["topic"]): a for a in run.viewer.of_kind("advertise")}
    names = {ros_topic(d.name, d.multi_id): d.name for d in ULog(str(run.source)).data_list}
    for topic, name in names.items():
        channel = advertised[topic]
        assert (channel["encoding"], channel["schemaEncoding"]) == ("cdr", "ros2msg")
        assert channel["schemaName"] == f"px4_ulog/msg/{name.title().replace('_', '')}"


def test_every_row_arrives_with_pyulogs_values(run: Run) -> None:
    """Each log's rows, in order, decoded from CDR with the advertised schema.

    No viewer subscribes later, so no quiet topic's sample is sent again: exactly the rows.
    """
    expected = pyulog_rows(run.recordings)
    last_log = pyulog_rows(run.recordings[-1:])
    assert len(run.recordings) >= LOGS  # a next log may have begun before the stop
    for topic, rows in expected.items():
        messages = run.viewer.messages(topic)
        decoded = [flat(m["data"]) for m in messages]
        # the first rows too: they waited for the subscription (issue 22); the stopped last
        # log may end short
        assert 0 <= len(rows) - len(decoded) <= len(last_log.get(topic, [])), topic
        for message, got, row in zip(messages, decoded, rows, strict=False):
            assert got.keys() == {ros2_key(k) for k in row}, topic
            for key, value in row.items():
                assert same_value(got[ros2_key(key)], value), (topic, key, got[ros2_key(key)])
            assert int(str(message["logTime"])) > 0


def test_no_error_lines(run: Run) -> None:
    assert [line for line in run.log.splitlines() if " ERROR " in line] == []
