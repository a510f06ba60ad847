"""The Foxglove live view with a real viewer: Foxglove's own protocol client (Node) on a real log.

``ulogstream sim`` streams a shared real PX4 log over UDP at USB speed, again and again
(``--repeat``; the recorder ends each log after 1 s without data and asks for the next), into
``ulogstream record --foxglove`` at rate 0. Viewers are ``tests/node/foxglove_client.mjs`` built
on ``@foxglove/ws-protocol``: one connected from the start, one connecting in the middle, and one
killed while data flows. The oracle is pyulog reading the recorded files.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
from typing import TYPE_CHECKING

import msgspec
import numpy as np
import pytest
from pyulog import ULog
from support.foxglove_schema import foxglove_schema_problems
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

from ulogstream.cli.demo import free_udp_port
from ulogstream.export.rosnames import ros_topic

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

LOGS = 3
"""Logs streamed before the recorder is stopped."""

pytestmark = [pytest.mark.shared, pytest.mark.slow, pytest.mark.timeout(240)]


class Run(msgspec.Struct):
    """What one recorder run with its viewers produced."""

    source: Path
    recordings: list[Path]
    first: Viewer
    late: Viewer
    killed_while_receiving: int
    parameters: list[dict[str, object]] = msgspec.field(default_factory=list)
    log: str = ""
    """The recorder's log (stderr)."""


@pytest.fixture(scope="module", name="run")
def fixture_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    source = shared_ulg(SITL_SAMPLE)
    node_client_installed()
    live = LiveRecording(tmp_path_factory.mktemp("foxglove"), "--foxglove-rate", "0")
    viewers: list[Viewer] = []
    try:
        url = live.url()
        first = Viewer(url)
        viewers.append(first)
        wait_until(lambda: bool(first.of_kind("open")), what="the first viewer connected")
        live.stream(source)
        wait_until(
            # "recording into <folder>" comes first, at first contact: count the logs' files
            lambda: live.log().count(": recording /") >= 2,
            limit=60,
            what="the second log opened",
        )
        late = Viewer(url, ("foxglove.websocket.v1",))  # as Foxglove Studio 1.x offers
        viewers.append(late)
        doomed = Viewer(url)
        viewers.append(doomed)
        wait_until(
            lambda: len(doomed.of_kind("message")) > 100, what="the third viewer receiving data"
        )
        doomed.process.kill()  # vanishes mid-stream, without closing
        received = len(doomed.of_kind("message"))
        wait_until(lambda: live.log().count("log finished:") >= LOGS, limit=90, what=f"{LOGS} logs")
        first.command("params")
        wait_until(lambda: bool(first.of_kind("parameters")), what="the parameters answered")
        live.stop()
        wait_until(lambda: bool(first.of_kind("close")), what="the first viewer saw the end")
        parameters = first.of_kind("parameters")[0]["parameters"]
        assert isinstance(parameters, list)
        yield Run(source, live.recordings(), first, late, received, parameters, live.log())
    finally:
        for viewer in viewers:
            viewer.close()
        live.close()


# -- oracles ------------------------------------------------------------------------------------


def matches_schema(value: object, schema: dict[str, object]) -> bool:
    """The checks of the JSON Schema keywords the sink uses (type, properties, required).

    A ``number`` may be null: NaN and infinities are sent as null, as each float field's
    description says (a type list would make Foxglove's viewers refuse the channel).
    """
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if kinds == ["number"]:
        kinds = ["number", "null"]
    checks = {
        "object": lambda v: isinstance(v, dict),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "string": lambda v: isinstance(v, str),
        "null": lambda v: v is None,
    }
    assert isinstance(kinds, list)
    if not any(checks[k](value) for k in kinds):
        return False
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        assert isinstance(properties, dict)
        required = schema.get("required", [])
        assert isinstance(required, list)
        if set(value) != set(properties) or not set(required) <= set(value):
            return False
        return all(matches_schema(value[k], properties[k]) for k in value)
    return True


# -- tests --------------------------------------------------------------------------------------


def test_every_topic_instance_is_advertised_with_a_valid_json_schema(run: Run) -> None:
    advertised = {str(a["topic"]): a for a in run.first.of_kind("advertise")}
    names = {ros_topic(d.name, d.multi_id): d.name for d in ULog(str(run.source)).data_list}
    assert set(names) <= set(advertised)
    for topic, name in names.items():
        channel = advertised[topic]
        assert (channel["encoding"], channel["schemaEncoding"]) == ("json", "jsonschema")
        schema = json.loads(str(channel["schema"]))
        assert foxglove_schema_problems(schema) == [], topic
        assert (channel["schemaName"], schema["title"]) == (name, name)
        for message in run.first.messages(topic):
            assert matches_schema(message["data"], schema), (topic, message)


def test_every_advertised_channel_parses_in_foxglove_viewers(run: Run) -> None:
    """Issue 22: 109 of 133 channels were "Failed to parse channel schema" (type lists)."""
    advertised = list(run.first.of_kind("advertise"))
    assert {"/ulogstream/status", "/rosout"} <= {str(a["topic"]) for a in advertised}
    for channel in advertised:
        assert channel["schemaEncoding"] == "jsonschema", channel["topic"]
        schema = json.loads(str(channel["schema"]))
        assert foxglove_schema_problems(schema) == [], channel["topic"]


def test_viewers_stamp_each_sample_with_its_own_time(run: Run) -> None:
    """The ``time`` capability: the server's time follows the newest sample, only forward.

    A Foxglove-lineage viewer stamps each message with the server's latest time (its own clock
    without the capability), so a plot shows a sample where that time is. The flight streams at
    ``--speed max``: its samples' times run far ahead of the wall clock, so arrival times would
    be seconds off; the viewer's stamps must be the samples' own.
    """
    (info,) = run.first.of_kind("serverInfo")
    capabilities = info["capabilities"]
    assert isinstance(capabilities, list)
    assert "time" in capabilities
    times = [int(str(line["time"])) for line in run.first.of_kind("time")]
    assert len(times) > 100
    # Back only when the samples' wall clock is anchored anew (a viewer drops what it buffered
    # when the time goes back): on the receiver's clock as each log starts (a new log may start
    # behind the last one's: this flight streams faster than real time), then on a first GPS
    # fix with UTC (this SITL log has none). Never back otherwise.
    backs = sum(later < earlier for earlier, later in itertools.pairwise(times))
    assert 1 <= backs <= 2 * len(run.recordings)
    instance_topics = {ros_topic(d.name, d.multi_id) for d in ULog(str(run.source)).data_list}
    clock: int | None = None
    by_clock: list[int] = []
    by_arrival: list[int] = []
    first_log: list[tuple[int, int]] = []  # (sample time, arrival) until the time first goes back
    went_back = False
    for line in list(run.first.lines):
        if line["kind"] == "time":
            time_ns = int(str(line["time"]))
            went_back = went_back or (clock is not None and time_ns < clock)
            clock = time_ns
        elif line["kind"] == "message" and line["topic"] in instance_topics and clock is not None:
            own = int(str(line["logTime"]))
            data = line["data"]
            assert isinstance(data, dict)
            stamp = data["header"]["stamp"]  # the Plot panel's "header stamp" mode: exact
            assert stamp["sec"] * 1_000_000_000 + stamp["nsec"] == own
            arrival = int(str(line["receiveTime"]))
            by_clock.append(abs(clock - own))
            by_arrival.append(abs(arrival - own))
            if not went_back:
                first_log.append((own, arrival))
    assert len(by_clock) > 1000
    clock_median, arrival_median = statistics.median(by_clock), statistics.median(by_arrival)
    # Stamped on arrival, as without the capability, a sample would be seconds off.
    assert arrival_median > 10 * clock_median, (arrival_median, clock_median)
    # The server's time is the newest sample's: a sample that reaches the viewer after a newer
    # one of another topic is stamped that much late (the log's own order: PX4's logger writes
    # each topic's queue in turn; the parser's batches, a topic at a time). The flight streams
    # many times faster than real time, so each millisecond of the way from the server to the
    # viewer counts as many milliseconds of sample time: the bound is in the flight's own pace,
    # the live path's 20 ms (its arrival-to-publish budget). Measured: 3-4 ms of it, at 24x.
    owns, arrivals = (sorted(times) for times in zip(*first_log, strict=True))
    tenth = len(first_log) // 10  # the middle 80 %: a resent quiet topic's old sample is no pace
    speed = (owns[-tenth] - owns[tenth]) / (arrivals[-tenth] - arrivals[tenth])
    assert speed > 2, speed  # the premise: faster than real time
    assert clock_median <= speed * 20_000_000, (clock_median, speed)


def test_handled_viewer_events_log_no_error(run: Run) -> None:
    """Viewers joining mid-log and one killed mid-stream are handled: not an ERROR line."""
    errors = [line for line in run.log.splitlines() if " ERROR " in line]
    assert errors == []


def test_at_rate_0_every_row_arrives_with_pyulog_values(run: Run) -> None:
    """Each viewer's messages are every row of the recorded logs, in order, with their values.

    The viewer connected before the first log: each channel's first rows, logged before its
    subscription reached the server, wait for it (issue 22: 1-21 rows were lost per topic).
    A quiet topic's newest sample is sent again when the late viewer subscribes: such a repeat
    (the same sample, at the same time) is the only other message.
    """
    recorded = [pyulog_rows([path]) for path in run.recordings]
    logs = [distinct_rows(log) for log in recorded]
    twice_logged = sum(
        len(rows) - len(distinct[topic])
        for log, distinct in zip(recorded, logs, strict=True)
        for topic, rows in log.items()
    )
    repeats = 0
    for topic in logs[0]:
        rows = [row for log in logs for row in log.get(topic, [])]
        messages = run.first.messages(topic)
        unique = distinct_messages(messages)
        repeats += len(messages) - len(unique)
        stopped_last = len(rows) - len(unique)  # the stopped last log may end short
        assert 0 <= stopped_last <= len(logs[-1].get(topic, [])), topic
        for message, row in zip(unique, rows, strict=False):
            data = message["data"]
            assert isinstance(data, dict)
            assert data.keys() - {"t", "header"} == row.keys(), topic
            for key, value in row.items():
                assert same_value(data[key], value), (topic, key, data[key], value)
            assert int(str(message["logTime"])) == round(data["t"] * 1e9)
    statuses = [m["data"] for m in run.first.messages("/ulogstream/status")]
    resent = statuses[-1]["foxglove_resent"]  # type: ignore[index]
    assert 0 <= repeats - twice_logged <= resent, (repeats, twice_logged, resent)


def distinct_messages(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    """``messages`` without repeats: exact copies of an earlier message, time and all."""
    seen: set[str] = set()
    unique = []
    for message in messages:
        key = json.dumps([message["logTime"], message["data"]], sort_keys=True)
        if key not in seen:
            seen.add(key)
            unique.append(message)
    return unique


def distinct_rows(rows: dict[str, list[dict[str, object]]]) -> dict[str, list[dict[str, object]]]:
    """One log's rows without exact repeats (PX4 logs some rows twice: one message each)."""
    out: dict[str, list[dict[str, object]]] = {}
    for topic, topic_rows in rows.items():
        seen: set[str] = set()
        kept = out.setdefault(topic, [])
        for row in topic_rows:
            key = repr(sorted(row.items()))
            if key not in seen:
                seen.add(key)
                kept.append(row)
    return out


def test_every_whole_log_counts_exactly_pyulogs_rows(run: Run) -> None:
    source = distinct_rows(pyulog_rows([run.source]))
    counts = {topic: len(distinct_messages(run.first.messages(topic))) for topic in source}
    whole_logs = len(run.recordings) - 1  # the last may miss its end (stopped)
    assert whole_logs >= 1
    for topic, rows in source.items():
        assert counts[topic] >= whole_logs * len(rows), topic
        assert counts[topic] <= len(run.recordings) * len(rows), topic


def test_logged_strings_arrive_on_the_log_channel_with_levels(run: Run) -> None:
    [channel] = [a for a in run.first.of_kind("advertise") if a["topic"] == "/rosout"]
    assert channel["schemaName"] == "foxglove.Log"
    ulog = ULog(str(run.source))
    expected = [(m.message, m.log_level) for m in ulog.logged_messages]
    received = [m["data"] for m in run.first.messages("/rosout")]
    texts = [(d["message"], d["level"]) for d in received]  # type: ignore[index]
    px4_to_foxglove = {ord("3"): 4, ord("4"): 3, ord("6"): 2, ord("7"): 1}  # syslog digits
    one_log = [(text, px4_to_foxglove[level]) for text, level in expected]
    assert texts[-len(one_log) :] == one_log or texts[: len(one_log)] == one_log
    assert len(texts) >= (len(run.recordings) - 1) * len(one_log)


def test_status_channel_shows_the_recorder_counters(run: Run) -> None:
    statuses = [m["data"] for m in run.first.messages("/ulogstream/status")]
    assert statuses
    last = statuses[-1]
    assert isinstance(last, dict)
    assert {"state", "log_file", "log_bytes", "packets", "gaps", "dropouts"} <= last.keys()
    assert {"foxglove_sent", "foxglove_channels_replaced", "foxglove_viewers"} <= last.keys()
    assert {"foxglove_resent", "foxglove_outbox_full"} <= last.keys()
    assert any(isinstance(s, dict) and s.get("packets", 0) > 0 for s in statuses)


def test_parameters_are_served_through_the_parameter_capability(run: Run) -> None:
    ulog = ULog(str(run.source))
    served = {str(p["name"]): p["value"] for p in run.parameters}
    assert served.keys() == ulog.initial_parameters.keys()
    for name, value in ulog.initial_parameters.items():
        assert isinstance(served[name], int | float), name
        assert np.float32(served[name]) == np.float32(value), name  # type: ignore[arg-type]


def test_a_viewer_connecting_mid_log_receives_the_channels(run: Run) -> None:
    topics = {a["topic"] for a in run.late.of_kind("advertise")}
    assert set(pyulog_rows([run.source])) | {"/rosout", "/ulogstream/status"} <= topics
    assert run.late.of_kind("message")


def test_a_viewer_connecting_mid_log_sees_every_topic_at_once(run: Run) -> None:
    """Issue 22: a late viewer never saw the topics that logged nothing after it joined.

    Quiet topics' newest samples are sent again as it subscribes, so each topic instance has a
    message for it before the second log's next one.
    """
    instances = set(pyulog_rows([run.source]))
    seen = {m["topic"] for m in run.late.of_kind("message")}
    assert instances <= seen, instances - seen


def test_a_viewer_killed_mid_stream_changes_nothing_in_the_recording(run: Run) -> None:
    """The viewer is killed during the second log: it is byte for byte the first and the third."""
    assert run.killed_while_receiving > 0
    complete = run.recordings[:LOGS]
    assert len(complete) == LOGS
    first = complete[0].read_bytes()
    for recording in complete[1:]:
        assert recording.read_bytes() == first, recording
    assert ULog(str(complete[1])).data_list  # a whole log, not an empty one


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    node_client_installed()
    with contextlib.closing(__import__("socket").socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "ulogstream",
                "record",
                f"udpin:127.0.0.1:{free_udp_port()}",
                "--out",
                str(tmp_path),
                "--foxglove",
                f"127.0.0.1:{port}",
                "--no-status",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"ulogstream: error: foxglove.listen 127.0.0.1:{port}:")
    assert "Traceback" not in result.stderr
