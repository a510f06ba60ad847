"""PUBLISH packets framed by ulogstream, held byte for byte against paho's own framing.

The MQTT sink queues these on paho's connection instead of calling ``publish`` for each sample;
a real broker takes them in tests/adapters/test_mqtt_sink.py.
"""

from __future__ import annotations

from typing import cast

import pytest
from paho.mqtt import client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ulogstream.live import mqtt_packets
from ulogstream.live.mqtt_packets import (
    publish_packet,
    publish_properties,
    variable_byte_integer,
)

UserProperties = tuple[tuple[str, str], ...]


class _Unwritable:
    """A connected socket that takes nothing yet: paho keeps the packet it queued."""

    def send(self, data: bytes) -> int:  # noqa: ARG002 (a socket's signature)
        raise BlockingIOError

    def close(self) -> None:
        pass


def paho_packet(
    protocol: MQTTProtocolVersion,
    topic: str,
    payload: bytes,
    *,
    retain: bool,
    content_type: str | None,
    user_properties: UserProperties,
) -> bytes:
    """The packet paho's ``publish`` queues for this QoS 0 message."""
    paho = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=protocol)
    paho._sock = _Unwritable()  # type: ignore[assignment]
    properties = None
    if content_type is not None or user_properties:
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        if content_type is not None:
            properties.ContentType = content_type
        if user_properties:
            properties.UserProperty = list(user_properties)
    info = paho.publish(topic, payload, qos=0, retain=retain, properties=properties)
    assert info.rc == mqtt.MQTT_ERR_SUCCESS
    (queued,) = paho._out_packet
    return bytes(cast("bytes", queued["packet"]))


PROPERTIES: list[tuple[str | None, UserProperties]] = [
    (None, ()),
    ("application/json", ()),
    (None, (("ulog_format", "vehicle_attitude"),)),
    ("application/octet-stream", (("ulog_format", "sensor_combined"), ("ulog_schema", "ü/é"))),
]


@pytest.mark.parametrize("size", [0, 1, 90, 125, 126, 200, 16_379, 16_380, 20_000, 2_100_000])
@pytest.mark.parametrize("retain", [False, True])
def test_a_publish_is_framed_as_paho_frames_it(size: int, *, retain: bool) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    v311, v5 = MQTTProtocolVersion.MQTTv311, MQTTProtocolVersion.MQTTv5
    cases = [(v311, None, ()), *((v5, kind, extra) for kind, extra in PROPERTIES)]
    for topic in ("ulog/px4/1/json/vehicle_attitude/0", "t/é"):
        for protocol, content_type, user_properties in cases:
            block = None if protocol is v311 else publish_properties(content_type, user_properties)
            ours = publish_packet(topic, payload, retain=retain, properties=block)
            assert ours == paho_packet(
                protocol,
                topic,
                payload,
                retain=retain,
                content_type=content_type,
                user_properties=user_properties,
            )


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (16_383, b"\xff\x7f"),
        (16_384, b"\x80\x80\x01"),
        (2_097_151, b"\xff\xff\x7f"),
        (2_097_152, b"\x80\x80\x80\x01"),
        (268_435_455, b"\xff\xff\xff\x7f"),
    ],
)
def test_variable_byte_integers_are_mqtts_examples(value: int, encoded: bytes) -> None:
    # MQTT 3.1.1 table 2.4 and MQTT 5.0 section 1.5.5: the edges of one to four bytes.
    assert variable_byte_integer(value) == encoded


def test_a_publish_longer_than_mqtt_allows_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mqtt_packets, "MAX_REMAINING_LENGTH", 100)  # not 256 MB of payload
    assert publish_packet("t/0", bytes(95), retain=False, properties=None)
    with pytest.raises(ValueError, match="longer than MQTT allows"):
        publish_packet("t/0", bytes(96), retain=False, properties=None)
