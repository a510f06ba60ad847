"""The wiring is the one path from settings to parts: every setting reaches it, under its name.

A new setting is two edits (its section, and recorder/wiring.py); these tests fail when the
second is forgotten, or when a part renames what it is given.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import ulogstream.recorder.wiring as wiring_module
from ulogstream.config.sections import (
    FoxgloveSettings,
    LinkSettings,
    MqttSettings,
    RecordingSettings,
    Settings,
)
from ulogstream.recorder.wiring import mqtt_sink, publish_policy, recorder_parts

if TYPE_CHECKING:
    import msgspec

WIRING = ast.parse(Path(wiring_module.__file__).read_text(encoding="utf-8"))

READ_ELSEWHERE = {
    ("mqtt", "url"): "MqttSettings.broker_urls() joins url and urls for the wiring",
    ("mqtt", "urls"): "MqttSettings.broker_urls()",
    ("mqtt", "vehicle_id"): "the identity (recorder/identity.py) fills the template in",
    ("mqtt", "client_id"): "the identity fills the template in",
    ("foxglove", "listen"): "FoxgloveSettings.address() parses it for the wiring",
}
"""Settings a section method or the identity reads for the wiring (said why)."""


SECTIONS = {"link", "recording", "mqtt", "foxglove", "upload"}
"""The local names the wiring gives the sections of the settings."""


def _used(section: str) -> set[str]:
    """The attributes of ``section`` (a local name in the wiring) that the wiring reads."""
    return {
        node.attr
        for node in ast.walk(WIRING)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == section
    }


@pytest.mark.parametrize(
    ("section", "settings"),
    [
        ("mqtt", MqttSettings),
        ("recording", RecordingSettings),
        ("link", LinkSettings),
        ("foxglove", FoxgloveSettings),
    ],
)
def test_every_setting_of_the_recorders_sections_reaches_the_wiring(
    section: str, settings: type[msgspec.Struct]
) -> None:
    fields = set(settings.__struct_fields__)
    used = _used(section) | {key for s, key in READ_ELSEWHERE if s == section}
    assert fields - used == set(), f"[{section}] keys the wiring never reads"


@pytest.mark.parametrize("part", ["MqttSink", "UlgFileSink", "PublishPolicy", "FoxgloveSink"])
def test_parts_take_their_settings_under_the_toml_keys_names(part: str) -> None:
    calls = [
        node
        for node in ast.walk(WIRING)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == part
    ]
    assert calls, f"the wiring builds no {part}"
    for call in calls:
        for keyword in call.keywords:
            value = keyword.value
            if (
                isinstance(value, ast.Attribute)
                and isinstance(value.value, ast.Name)
                and value.value.id in SECTIONS
            ):
                given = f"{part}({keyword.arg}={value.value.id}.{value.attr})"
                assert keyword.arg == value.attr, given


def test_the_parts_carry_the_values_given(tmp_path: Path) -> None:
    settings = Settings(
        link=LinkSettings(connection="udpin:127.0.0.1:14550", sysid=200, compid=191),
        recording=RecordingSettings(out_dir=tmp_path, min_free_mb=7, max_logs=3),
        mqtt=MqttSettings(
            url="mqtt://127.0.0.1:1",
            root="fleet",
            default_rate_hz=2.5,
            keepalive_s=11,
            outbox_size=33,
            max_messages_per_s=100.0,
        ),
    )
    parts = recorder_parts(settings)
    assert parts.connection.host == "127.0.0.1"
    assert parts.connection.port == 14550
    codec = parts.codec()
    assert (codec.system_id, codec.component_id) == (200, 191)
    sink = parts.files(1, "v1")
    assert sink.folder == tmp_path / "v1"
    policy = publish_policy(settings.mqtt, "v2")
    assert policy.status_topic == "fleet/v2/meta/status"
    assert policy.settings.rate_for("any_topic") == 2.5
    assert parts.publisher is not None
    mqtt = mqtt_sink(settings.mqtt, client_id="c")
    assert (mqtt.urls, mqtt.client_id, mqtt.outbox.cap is not None) == (
        ("mqtt://127.0.0.1:1",),
        "c",
        True,
    )
