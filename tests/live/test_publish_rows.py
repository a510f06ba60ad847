"""Decoding only the rows the policy can publish changes nothing that is published."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
import subprocess
import sys
from collections import defaultdict
from typing import TYPE_CHECKING

import msgspec
import numpy as np
import pytest
from pyulog import ULog
from support.shared_data import shared_ulg

from ulogstream.live.policy import PublishPolicy, TopicChoice
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.events import Subscription
from ulogstream.ulog.parser import RowSelection, ULogParser

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.live.outbox import MqttMessage

WALL = 1_732_200_000.0
REAL_LOGS = (
    "pyulog__sample_logging_tagged_and_default_params.ulg",
    "px4-ulog-rs__corrupt_format_not_utf8.ulg",
)


def flight() -> bytes:
    out = io.BytesIO()
    generate_flight_log(out, duration_s=6.0, seed=11)
    return out.getvalue()


def publish(log: bytes, settings: TopicChoice, *, select_rows: bool) -> list[MqttMessage]:
    """Everything the policy publishes for ``log`` streamed in datagram-sized pieces.

    The receive clock advances 2 ms a piece (about the USB ceiling's rate), with held samples
    flushed as the daemon does.
    """
    policy = PublishPolicy(**msgspec.structs.asdict(settings))
    parser = ULogParser(rows=policy.rows_for if select_rows else None)
    out = policy.log_started(wall_time=WALL, now=0.0)
    rng = random.Random(5)  # noqa: S311 (reproducible cuts, not secrets)
    now = 0.0
    pos = 0
    while pos < len(log):
        size = rng.randint(100, 4000)  # the backlog of one or many datagrams
        now += 0.002 * size / 249
        for event in parser.receive_bytes(log[pos : pos + size]):
            out.extend(policy.select(event, now))
        out.extend(policy.flush_due(now))
        pos += size
    for event in parser.close():
        out.extend(policy.select(event, now))
    out.extend(policy.flush_due(math.inf))
    return out


SETTINGS = (
    TopicChoice(vehicle_id="v"),
    TopicChoice(
        vehicle_id="v",
        default_rate_hz=2.0,
        rates={"vehicle_attitude": 0.0, "sensor_*": 50.0},
        exclude=("actuator_*",),
        encodings=("json", "msgpack", "ulog"),
    ),
    TopicChoice(vehicle_id="v", default_rate_hz=0.0, include=("vehicle_*", "sensor_gps")),
)


@pytest.mark.parametrize("settings", SETTINGS, ids=["default", "mixed", "rate0"])
def test_selected_rows_publish_the_same_messages_on_a_flight(settings: TopicChoice) -> None:
    log = flight()
    assert publish(log, settings, select_rows=True) == publish(log, settings, select_rows=False)


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize("name", REAL_LOGS)
def test_selected_rows_publish_the_same_messages_on_real_logs(name: str) -> None:
    log = shared_ulg(name).read_bytes()
    for settings in SETTINGS[:2]:
        selected = publish(log, settings, select_rows=True)
        assert selected == publish(log, settings, select_rows=False)
        assert any("/json/" in message.topic for message in selected)


def test_rows_for_follows_the_rates_and_patterns() -> None:
    policy = PublishPolicy(**msgspec.structs.asdict(SETTINGS[1]))
    dtype = np.dtype([("timestamp", "<u8")])

    def rows(name: str) -> RowSelection:
        return policy.rows_for(Subscription(1, 0, name, dtype))

    assert rows("vehicle_attitude") is RowSelection.ALL  # rate 0: every row
    assert rows("sensor_gps") is RowSelection.NEWEST  # capped: the fix is read from the bytes
    assert rows("sensor_accel") is RowSelection.NEWEST  # capped
    assert rows("battery_status") is RowSelection.NEWEST
    assert rows("actuator_outputs") is RowSelection.NONE  # excluded
    assert rows("bad+name") is RowSelection.NONE  # never a topic


def pyulog_rows(ulog: ULog) -> dict[str, list[dict[str, object]]]:
    """The rows pyulog reads, per ``name/multi_id``, padding fields left out."""
    out: dict[str, list[dict[str, object]]] = {}
    for data in ulog.data_list:
        keys = [k for k in data.data if not any(p.startswith("_padding") for p in k.split("."))]
        columns = [data.data[k].tolist() for k in keys]
        out[f"{data.name}/{data.multi_id}"] = [
            dict(zip(keys, values, strict=True)) for values in zip(*columns, strict=True)
        ]
    return out


def same_value(ours: object, theirs: object) -> bool:
    if ours is None:  # NaN or Inf
        return isinstance(theirs, float) and not math.isfinite(theirs)
    if isinstance(ours, bool):
        return ours == bool(theirs)
    if isinstance(ours, float) and isinstance(theirs, float):
        return float(np.float32(ours)) == float(np.float32(theirs)) or ours == theirs
    return ours == theirs


@pytest.mark.slow
@pytest.mark.shared
def test_every_row_published_at_rate_0_equals_pyulogs() -> None:
    """At rate 0 the JSON samples, topic by topic, are pyulog's rows with the same values."""
    path = shared_ulg("pyulog__sample_logging_tagged_and_default_params.ulg")
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = pyulog_rows(ULog(str(path)))
    settings = TopicChoice(vehicle_id="v", default_rate_hz=0.0)
    ours: dict[str, list[dict[str, object]]] = defaultdict(list)
    prefix = "ulogstream/v/json/"
    for message in publish(path.read_bytes(), settings, select_rows=True):
        if message.topic.startswith(prefix):
            ours[message.topic[len(prefix) :]].append(json.loads(message.payload))
    assert set(ours) == {topic for topic, rows in theirs.items() if rows}
    char_split = re.compile(r"^(.*)\[\d+\]$")
    for topic, rows in ours.items():
        expected = theirs[topic]
        assert len(rows) == len(expected), topic
        for row, other in zip(rows, expected, strict=True):
            for key, value in other.items():
                if key not in row:  # a char[N] field: one string here, N int8 columns there
                    base = char_split.match(key)
                    assert base is not None, (topic, key)
                    assert isinstance(row[base.group(1)], str), (topic, key)
                    continue
                assert same_value(row[key], value), (topic, key, row[key], value)


DEFAULT_PATH_SCRIPT = """
import sys
from pathlib import Path

from ulogstream.live.policy import PublishPolicy
from ulogstream.ulog.parser import ULogParser

log = Path(sys.argv[1]).read_bytes()
policy = PublishPolicy(vehicle_id="v")
parser = ULogParser(rows=policy.rows_for)
messages = policy.log_started(wall_time=1.7e9, now=0.0)
now = 0.0
for start in range(0, len(log), 1000):
    now += 0.008
    for event in parser.receive_bytes(log[start : start + 1000]):
        messages += policy.select(event, now)
    messages += policy.flush_due(now)
for event in parser.close():
    messages += policy.select(event, now)
samples = [m for m in messages if "/json/" in m.topic]
print(
    len(samples), len({m.topic for m in samples}), policy.anchors,
    "numpy" in sys.modules, "msgpack" in sys.modules,
)
"""


def test_the_default_json_path_publishes_a_flight_without_numpy(tmp_path: Path) -> None:
    """JSON at 10 Hz, the default: rows encoded from their bytes, the GPS fix read from them.

    numpy's import was a tenth of ``record --mqtt``'s CPU on a real log, msgpack's 15 ms of its
    start-up (issue 25): neither loads for JSON.
    """
    path = tmp_path / "flight.ulg"
    path.write_bytes(flight())
    done = subprocess.run(
        [sys.executable, "-c", DEFAULT_PATH_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    samples, topics, anchors, numpy_loaded, msgpack_loaded = done.stdout.split()
    assert numpy_loaded == "False"
    assert msgpack_loaded == "False"
    assert anchors == "2"  # the receiver's clock at the start, then the flight's GPS fix
    with contextlib.redirect_stdout(io.StringIO()):
        logged = {(d.name, d.multi_id) for d in ULog(str(path)).data_list}
    assert int(topics) == len(logged)
    assert int(samples) > 10 * int(topics)  # 6 s of flight at up to 10 Hz a topic
