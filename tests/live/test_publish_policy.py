"""PublishPolicy: topics, payloads, metadata and rate caps, with an injected clock (no broker)."""

from __future__ import annotations

import json
import math
import struct

import msgpack
import msgspec
import numpy as np
import pytest

from ulogstream.config.sections import MqttSettings
from ulogstream.live.outbox import MqttMessage, valid_topic, valid_topic_level
from ulogstream.live.policy import PARAMS_PER_FLUSH, PublishPolicy, TopicChoice
from ulogstream.ulog.events import DataRows, Dropout, Parameter, Subscription, ULogEvent
from ulogstream.ulog.parser import ULogParser
from ulogstream.ulog.writer import ULogWriter

WALL = 1_732_200_000.0
HEADER_US = 1_000_000
VEC_FORMAT = "vec:float x;float y;"
SAMPLE_FORMAT = (
    "sample:uint64_t timestamp;float[2] q;vec[2] v;char[6] name;bool ok;int16_t n;"
    "double d;uint8_t[1] _padding0;"
)


def pack_sample(stamp: int, q0: float, *, name: bytes = b"abc", n: int = -3) -> bytes:
    # Trailing padding is left out of 'D' as PX4 does.
    floats = (q0, math.nan, 1.5, -2.0, 0.25, 1e-3)
    return struct.pack("<Q2f4f6s?hd", stamp, *floats, name, True, n, 0.1)  # noqa: FBT003


def strict_json(payload: bytes) -> dict[str, object]:
    def refuse(name: str) -> None:
        msg = f"invalid JSON constant {name}"
        raise ValueError(msg)

    obj: dict[str, object] = json.loads(payload, parse_constant=refuse)
    return obj


def events_of(data: bytes) -> list[ULogEvent]:
    parser = ULogParser()
    return [*parser.receive_bytes(data), *parser.close()]


def definitions(writer: ULogWriter) -> dict[str, int]:
    writer.flag_bits()
    writer.format(VEC_FORMAT)
    writer.format(SAMPLE_FORMAT)
    writer.format("fast:uint64_t timestamp;float x;")
    writer.info("char", "sys_name", "PX4")
    writer.info("uint32_t", "ver_sw_release", 0x010E0000)
    writer.info_multiple("char", "perf_top", "part one, ")
    writer.info_multiple("char", "perf_top", "part two", is_continued=True)
    writer.parameter("MC_ROLL_P", 6.5)
    writer.parameter("SYS_AUTOSTART", 4001)
    return {
        "sample0": writer.add_logged_message("sample", 0),
        "sample1": writer.add_logged_message("sample", 1),
        "fast": writer.add_logged_message("fast", 0),
    }


def run(policy: PublishPolicy, events: list[ULogEvent], now: float = 0.0) -> list[MqttMessage]:
    """What ``events`` publish at ``now``, with what falls due meanwhile (as the recorder runs)."""
    out = policy.log_started(wall_time=WALL, now=now)
    for event in events:
        out += policy.select(event, now)
        for _ in range(100):
            due = policy.next_deadline()
            if due is None or due > now:
                break
            out += policy.flush_due(now)
    return out


def by_topic(messages: list[MqttMessage], topic: str) -> list[MqttMessage]:
    return [m for m in messages if m.topic == topic]


def test_every_sample_becomes_flat_json_with_pyulog_names_and_null_for_nan() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    ids = definitions(writer)
    writer.data(ids["sample1"], pack_sample(HEADER_US + 500_000, 0.13436425, name=b"x\0yz"))
    policy = PublishPolicy(vehicle_id="v1", default_rate_hz=0)
    out = run(policy, events_of(writer.getvalue()))

    [message] = by_topic(out, "ulogstream/v1/json/sample/1")
    assert not message.retain
    assert message.content_type == "application/json"
    obj = strict_json(message.payload)
    assert list(obj) == [
        "t", "timestamp", "q[0]", "q[1]", "v[0].x", "v[0].y", "v[1].x", "v[1].y",
        "name", "ok", "n", "d",
    ]  # fmt: skip
    assert obj["t"] == pytest.approx(WALL + 0.5, abs=1e-6)
    assert obj["timestamp"] == HEADER_US + 500_000
    assert obj["q[1]"] is None
    assert obj["name"] == "x"
    assert obj["ok"] is True
    assert obj["n"] == -3
    assert obj["d"] == 0.1
    # float32 in its shortest round-trip form, not the double expansion
    assert b'"q[0]":0.13436425,' in message.payload
    assert b'"v[1].y":0.001,' in message.payload


def test_topic_instances_keep_the_multi_id_level_also_for_zero() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    ids = definitions(writer)
    writer.data(ids["sample0"], pack_sample(HEADER_US + 1, 1.0))
    writer.data(ids["sample1"], pack_sample(HEADER_US + 2, 2.0))
    out = run(PublishPolicy(vehicle_id="v1", default_rate_hz=0), events_of(writer.getvalue()))
    json_topics = sorted(m.topic for m in out if "/json/" in m.topic)
    assert json_topics == ["ulogstream/v1/json/sample/0", "ulogstream/v1/json/sample/1"]


def test_msgpack_and_raw_subtrees_carry_the_same_sample() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    ids = definitions(writer)
    payload = pack_sample(HEADER_US + 7, 0.5)
    writer.data(ids["sample0"], payload)
    settings = TopicChoice(
        vehicle_id="v1", root="r", default_rate_hz=0, encodings=("json", "msgpack", "ulog")
    )
    out = run(PublishPolicy(**msgspec.structs.asdict(settings)), events_of(writer.getvalue()))

    [packed] = by_topic(out, "r/v1/msgpack/sample/0")
    obj = msgpack.unpackb(packed.payload)
    assert obj["timestamp"] == HEADER_US + 7
    assert obj["q[0]"] == 0.5
    assert obj["q[1]"] is None
    assert obj["name"] == "abc"
    assert packed.content_type == "application/msgpack"

    [raw] = by_topic(out, "r/v1/ulog/sample/0")
    assert raw.payload == payload  # the 'D' payload as logged, trailing padding left out
    assert ("ulog_format", "sample") in raw.user_properties


def test_schema_is_retained_once_per_topic_with_nested_formats_and_fields() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    out = run(PublishPolicy(vehicle_id="v1"), events_of(writer.getvalue()))
    [schema] = by_topic(out, "ulogstream/v1/schema/sample")
    assert schema.retain
    obj = strict_json(schema.payload)
    assert obj["format"] == SAMPLE_FORMAT
    assert obj["formats"] == {"sample": SAMPLE_FORMAT, "vec": VEC_FORMAT}
    fields = obj["fields"]
    assert isinstance(fields, list)
    assert ["v[1].y", "float"] in fields
    assert ["name", "char[6]"] in fields
    assert not any(name.startswith("_padding") for name, _ in fields)


def test_metadata_is_retained_after_the_definitions() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    out = run(PublishPolicy(vehicle_id="v1"), events_of(writer.getvalue()))

    [info] = by_topic(out, "ulogstream/v1/meta/info")
    assert info.retain
    assert strict_json(info.payload) == {
        "sys_name": "PX4",
        "ver_sw_release": 0x010E0000,
        "perf_top": ["part one, part two"],
    }
    [roll] = by_topic(out, "ulogstream/v1/param/MC_ROLL_P")
    assert roll.retain
    assert roll.payload == b"6.5"
    assert by_topic(out, "ulogstream/v1/param/SYS_AUTOSTART")[0].payload == b"4001"
    [params] = by_topic(out, "ulogstream/v1/params")
    assert strict_json(params.payload) == {"MC_ROLL_P": 6.5, "SYS_AUTOSTART": 4001}


def test_a_parameter_change_publishes_its_topic_and_the_object_at_the_next_flush() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    writer.parameter("MC_ROLL_P", 0.1)
    policy = PublishPolicy(vehicle_id="v1")
    events = events_of(writer.getvalue())
    out = run(policy, events[:-1])
    assert by_topic(out, "ulogstream/v1/param/MC_ROLL_P")[0].payload == b"6.5"

    [change] = policy.select(events[-1], 1.0)
    assert change.topic == "ulogstream/v1/param/MC_ROLL_P"
    assert change.payload == b"0.1"  # float32 0.1, shortest form
    assert policy.next_deadline() is not None
    [params] = policy.flush_due(1.0)
    assert strict_json(params.payload) == {"MC_ROLL_P": 0.1, "SYS_AUTOSTART": 4001}
    assert policy.flush_due(2.0) == []


def test_info_logged_mid_log_is_published_once_per_interval_not_per_message() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    for piece in range(35):  # post-flight perf data: many 'M' pieces in a burst
        writer.info_multiple("char", "perf_counter", f"line {piece}\n", is_continued=piece > 0)
    policy = PublishPolicy(vehicle_id="v1", status_interval_s=1.0)
    out = run(policy, events_of(writer.getvalue()), now=5.0)
    [info] = by_topic(out, "ulogstream/v1/meta/info")  # at the end of the definitions only
    assert "perf_counter" not in strict_json(info.payload)
    assert policy.next_deadline() == 6.0
    assert by_topic(policy.flush_due(5.5), "ulogstream/v1/meta/info") == []
    [update] = by_topic(policy.flush_due(6.0), "ulogstream/v1/meta/info")
    lines = "".join(f"line {piece}\n" for piece in range(35))
    assert strict_json(update.payload)["perf_counter"] == [lines]
    assert by_topic(policy.flush_due(9.0), "ulogstream/v1/meta/info") == []


def test_per_parameter_topics_can_be_turned_off_the_params_object_stays() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    writer.parameter("MC_ROLL_P", 0.1)
    policy = PublishPolicy(vehicle_id="v1", param_topics=False)
    events = events_of(writer.getvalue())
    out = run(policy, events[:-1])
    assert [m.topic for m in out if "/param/" in m.topic] == []
    [params] = by_topic(out, "ulogstream/v1/params")
    assert strict_json(params.payload) == {"MC_ROLL_P": 6.5, "SYS_AUTOSTART": 4001}
    assert policy.select(events[-1], 1.0) == []
    [params] = policy.flush_due(1.0)
    assert strict_json(params.payload) == {"MC_ROLL_P": 0.1, "SYS_AUTOSTART": 4001}


def test_logged_strings_go_to_the_log_topic() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    writer.logging(ord("4"), HEADER_US + 2_000_000, "battery low")
    writer.logging_tagged(ord("6"), 7, HEADER_US + 3_000_000, "tagged")
    out = run(PublishPolicy(vehicle_id="v1"), events_of(writer.getvalue()))
    logs = [strict_json(m.payload) for m in by_topic(out, "ulogstream/v1/log")]
    assert logs == [
        {
            "t": pytest.approx(WALL + 2.0),
            "timestamp": HEADER_US + 2_000_000,
            "level": 4,
            "level_name": "WARNING",
            "tag": None,
            "text": "battery low",
        },
        {
            "t": pytest.approx(WALL + 3.0),
            "timestamp": HEADER_US + 3_000_000,
            "level": 6,
            "level_name": "INFO",
            "tag": 7,
            "text": "tagged",
        },
    ]


def fast_instance() -> tuple[PublishPolicy, Subscription, list[MqttMessage]]:
    writer = ULogWriter(timestamp_us=HEADER_US)
    definitions(writer)
    policy = PublishPolicy(vehicle_id="v1", default_rate_hz=10)
    events = events_of(writer.getvalue())
    out = run(policy, events)
    [sub] = [e for e in events if isinstance(e, Subscription) and e.name == "fast"]
    return policy, sub, out


def fast_batch(sub: Subscription, stamps_us: list[int]) -> DataRows:
    rows = np.zeros(len(stamps_us), dtype=sub.dtype)
    rows["timestamp"] = stamps_us
    rows["x"] = [s / 1e6 for s in stamps_us]
    return DataRows(sub, rows, np.array(stamps_us, dtype=np.uint64))


def sample_times(messages: list[MqttMessage]) -> list[int]:
    return [int(strict_json(m.payload)["timestamp"]) for m in messages]  # type: ignore[call-overload]


def drive(policy: PublishPolicy, sub: Subscription, seconds: float, hz: int) -> list[MqttMessage]:
    """Feed one-row batches at ``hz`` and flush whenever a deadline passes, like the daemon."""
    out: list[MqttMessage] = []
    for i in range(int(seconds * hz)):
        now = i / hz
        deadline = policy.next_deadline()
        if deadline is not None and deadline <= now:
            out += policy.flush_due(now)
        out += policy.select(fast_batch(sub, [int(now * 1e6)]), now)
    return [m for m in out if "/json/" in m.topic]


def test_rate_cap_publishes_ten_per_second_from_a_hundred() -> None:
    policy, sub, _ = fast_instance()
    published = drive(policy, sub, seconds=2.0, hz=100)
    assert 19 <= len(published) <= 21
    stamps = sample_times(published)
    assert stamps == sorted(stamps)
    assert max(np.diff(stamps)) <= 110_000
    assert policy.skipped_samples >= 200 - 21


def test_a_skipped_sample_is_held_and_published_when_the_topic_pauses() -> None:
    policy, sub, _ = fast_instance()
    [first] = policy.select(fast_batch(sub, [1_000]), now=0.0)
    assert sample_times([first]) == [1_000]
    assert policy.select(fast_batch(sub, [2_000, 3_000]), now=0.01) == []
    assert policy.select(fast_batch(sub, [4_000]), now=0.02) == []  # replaces the held one
    assert policy.next_deadline() == pytest.approx(0.2)  # slot opens at 0.1, one period of grace
    assert policy.flush_due(0.19) == []
    held = policy.flush_due(0.2)
    assert sample_times(held) == [4_000]  # the latest value, not an intermediate one
    assert policy.flush_due(10.0) == []
    assert policy.skipped_samples == 2


def test_an_arrival_after_the_slot_opens_is_published_at_once_and_supersedes_the_held_one() -> None:
    policy, sub, _ = fast_instance()
    policy.select(fast_batch(sub, [1_000]), now=0.0)
    assert policy.select(fast_batch(sub, [2_000]), now=0.05) == []  # held
    fresh = policy.select(fast_batch(sub, [3_000]), now=0.11)
    assert sample_times(fresh) == [3_000]  # no wait for a timer: latency is the pipeline's
    assert policy.flush_due(1.0) == []  # the held 2_000 was superseded, never sent late
    assert policy.skipped_samples == 1


def test_a_superseded_held_row_sets_no_deadline() -> None:
    # The recorder's timer sleeps until next_deadline: a stale one would wake it for nothing.
    policy, sub, _ = fast_instance()
    policy.select(fast_batch(sub, [1_000]), now=0.0)
    policy.select(fast_batch(sub, [2_000]), now=0.05)  # held, due at 0.2
    assert policy.next_deadline() == pytest.approx(0.2)
    policy.select(fast_batch(sub, [3_000]), now=0.11)  # published: the held row is gone
    assert policy.next_deadline() is None
    policy.select(fast_batch(sub, [4_000]), now=0.15)  # held: its slot opens at 0.2
    due = policy.next_deadline()
    assert due is not None
    assert due == pytest.approx(0.3)
    assert sample_times(policy.flush_due(due)) == [4_000]


def test_a_batch_arriving_when_the_slot_is_open_publishes_only_its_newest_row() -> None:
    policy, sub, _ = fast_instance()
    out = policy.select(fast_batch(sub, [1_000, 2_000, 3_000]), now=5.0)
    assert sample_times(out) == [3_000]
    assert policy.next_deadline() is None


def test_per_topic_rates_and_include_exclude_patterns() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    ids = definitions(writer)
    for i in range(10):
        writer.data(ids["fast"], struct.pack("<Qf", HEADER_US + i, float(i)))
        writer.data(ids["sample0"], pack_sample(HEADER_US + i, float(i)))
        writer.data(ids["sample1"], pack_sample(HEADER_US + i, float(i)))
    events = events_of(writer.getvalue())

    def json_counts(settings: TopicChoice) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in run(PublishPolicy(**msgspec.structs.asdict(settings)), events):
            if "/json/" in m.topic:
                counts[m.topic.split("/json/")[1]] = counts.get(m.topic.split("/json/")[1], 0) + 1
        return counts

    rates = TopicChoice(vehicle_id="v", rates={"fa*": 0, "sample": 5})
    assert json_counts(rates) == {"fast/0": 10, "sample/0": 1, "sample/1": 1}
    only = TopicChoice(vehicle_id="v", default_rate_hz=0, include=("sam*",), exclude=("none",))
    assert json_counts(only) == {"sample/0": 10, "sample/1": 10}
    without = TopicChoice(vehicle_id="v", default_rate_hz=0, exclude=("sample",))
    assert json_counts(without) == {"fast/0": 10}
    assert TopicChoice(vehicle_id="v", rates={"f*": 1, "fast": 3}).rate_for("fast") == 3


def test_wall_clock_comes_from_the_receiver_then_from_gps_utc() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    writer.format("vehicle_gps_position:uint64_t timestamp;uint64_t time_utc_usec;")
    fast = definitions(writer)["fast"]
    gps = writer.add_logged_message("vehicle_gps_position", 0)
    parser = ULogParser()
    events = parser.receive_bytes(writer.getvalue())
    utc_us = 1_700_000_000_000_000
    for msg_id, payload in [
        (fast, struct.pack("<Qf", HEADER_US + 1_000_000, 1.0)),
        (gps, struct.pack("<QQ", HEADER_US + 2_000_000, 0)),  # no fix yet: ignored
        (gps, struct.pack("<QQ", HEADER_US + 3_000_000, utc_us)),
        (fast, struct.pack("<Qf", HEADER_US + 4_000_000, 2.0)),
    ]:
        start = writer.size
        writer.data(msg_id, payload)
        events += parser.receive_bytes(writer.getvalue()[start:])
    policy = PublishPolicy(vehicle_id="v1", default_rate_hz=0)
    out = run(policy, events)

    first, last = (strict_json(m.payload) for m in by_topic(out, "ulogstream/v1/json/fast/0"))
    assert first["t"] == pytest.approx(WALL + 1.0, abs=1e-6)
    assert last["t"] == pytest.approx(utc_us / 1e6 + 1.0, abs=1e-6)
    statuses = [strict_json(m.payload) for m in policy.flush_due(10.0)]
    assert statuses[-1]["time_source"] == "gps"


def test_status_counts_dropouts_but_is_published_at_most_once_per_interval() -> None:
    policy = PublishPolicy(vehicle_id="v1", status_interval_s=1.0)
    [status] = policy.log_started(wall_time=WALL, now=0.0, log_file="a.ulg")
    assert strict_json(status.payload)["log_file"] == "a.ulg"
    assert status.topic == policy.status_topic == "ulogstream/v1/meta/status"
    for now in (0.1, 0.2):
        assert policy.select(Dropout(duration_ms=30, timestamp_us=None), now) == []
    assert policy.flush_due(0.5) == []
    assert policy.next_deadline() == pytest.approx(1.0)
    [update] = policy.flush_due(1.0)
    obj = strict_json(update.payload)
    assert (obj["online"], obj["dropouts"], obj["dropout_ms"]) == (True, 2, 60)
    assert strict_json(policy.last_will().payload) == {"online": False}
    assert policy.last_will().retain


@pytest.mark.parametrize(
    "name",
    ["BAD#NAME", "A+B", "a/b", "", "nul\0", "tab\tname", "\x7f", "\ufffe", "x" * 0x10000],
)
def test_names_that_cannot_be_a_topic_level_are_refused(name: str) -> None:
    assert not valid_topic_level(name)


@pytest.mark.parametrize("name", ["MC_ROLL_P", "vehicle_attitude", "größe", "a.b-c", "x" * 0xFFFF])
def test_names_that_can_be_a_topic_level_are_accepted(name: str) -> None:
    assert valid_topic_level(name)


def test_a_topic_may_have_levels_but_no_wildcard_or_control_character() -> None:
    assert valid_topic("ulogstream/v1/param/MC_ROLL_P")
    assert valid_topic("a//b")  # an empty level is legal MQTT; our own names never make one
    assert not valid_topic("ulogstream/v1/param/#")
    assert not valid_topic("a/\x00")
    assert not valid_topic("")


def test_a_parameter_or_topic_named_with_a_wildcard_is_skipped_and_counted() -> None:
    writer = ULogWriter(timestamp_us=HEADER_US)
    ids = definitions(writer)
    writer.parameter("BAD#NAME", 1.0)
    writer.data(ids["fast"], struct.pack("<Qf", HEADER_US + 2, 2.0))
    writer.parameter("BAD#NAME", 2.0)  # a change in flight is refused too
    events = events_of(writer.getvalue())
    # The parser refuses such format names; the policy does not rely on that.
    dtype = np.dtype([("timestamp", "<u8"), ("x", "<f4")])
    odd = Subscription(msg_id=9, multi_id=0, name="odd+topic", dtype=dtype)
    rows = np.array([(HEADER_US + 1, 1.0)], dtype=dtype)
    events += [odd, DataRows(odd, rows, rows["timestamp"])]
    policy = PublishPolicy(vehicle_id="v1", default_rate_hz=0)

    out = run(policy, events)

    topics = {m.topic for m in out}
    assert all(valid_topic(t) for t in topics)
    assert not any("BAD" in t or "odd" in t for t in topics)
    assert {"ulogstream/v1/param/MC_ROLL_P", "ulogstream/v1/json/fast/0"} <= topics
    assert policy.skipped_topics == 3  # the parameter twice, the subscription once
    assert policy.skipped_samples == 1  # the row of the refused topic
    flushed = policy.flush_due(10.0)
    [status] = by_topic(flushed, "ulogstream/v1/meta/status")
    assert strict_json(status.payload)["skipped_topics"] == 3
    # the object of all parameters is a JSON payload: any name may be a key there
    params = by_topic(out + flushed, "ulogstream/v1/params")[-1]
    assert strict_json(params.payload)["BAD#NAME"] == 2.0


def test_the_root_may_have_levels_as_the_settings_allow() -> None:
    mqtt = MqttSettings(url="mqtt://h", root="site/fleet", vehicle_id="v1")
    policy = PublishPolicy(vehicle_id="v1", root=mqtt.root)
    assert policy.status_topic == "site/fleet/v1/meta/status"


def test_a_logs_parameters_go_out_in_pieces_and_a_change_in_flight_is_never_overtaken() -> None:
    # ~1,000 parameters take ~10 ms to become messages, while the subscriptions that follow the
    # definitions wait for their acks: they leave from flush_due, PARAMS_PER_FLUSH at a time.
    writer = ULogWriter(timestamp_us=HEADER_US)
    writer.flag_bits()
    writer.format("fast:uint64_t timestamp;float x;")
    for i in range(1000):
        writer.parameter(f"P_{i:04d}", float(i) + 0.5)
    writer.add_logged_message("fast", 0)
    events = events_of(writer.getvalue())
    policy = PublishPolicy(vehicle_id="v1")
    out = policy.log_started(wall_time=WALL, now=0.0)
    for event in events:
        out += policy.select(event, 0.0)
    assert by_topic(out, "ulogstream/v1/meta/info")
    assert not [m for m in out if "/param" in m.topic]
    assert policy.next_deadline() == -math.inf  # due at once, in pieces
    pieces = []
    while (due := policy.next_deadline()) is not None and due <= 0.0:
        piece = policy.flush_due(0.0)
        pieces.append([m for m in piece if "/param/" in m.topic])
        if len(pieces) == 3:  # a change in flight, while P_0900 still waits
            pieces.append(policy.select(Parameter("P_0900", 7.0, 5), 0.0))
        out += piece
    assert max(len(piece) for piece in pieces) == PARAMS_PER_FLUSH
    sent = [m for piece in pieces for m in piece]
    values = {m.topic.rsplit("/", 1)[1]: json.loads(m.payload) for m in sent}
    assert len(values) == 1000
    assert values == {f"P_{i:04d}": 7.0 if i == 900 else i + 0.5 for i in range(1000)}
    assert sum(m.topic.endswith("/P_0900") for m in sent) == 1  # never the old value after
    params = by_topic(out, "ulogstream/v1/params")[-1]
    assert strict_json(params.payload)["P_0900"] == 7.0
    assert len(strict_json(params.payload)) == 1000
