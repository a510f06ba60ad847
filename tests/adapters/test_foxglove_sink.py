"""The Foxglove sink's pure parts, its settings and command-line errors, and TLS."""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from typing import TYPE_CHECKING

import numpy as np
import pytest
from support.end_to_end import flight_log
from support.foxglove_schema import foxglove_schema_problems
from support.shared_data import shared_ulg
from support.waiting import wait_until

from ulogstream.adapters.foxglove_sink import (
    LOG_SCHEMA,
    SDK_CLIENT_LOGGER,
    STATUS_SCHEMA,
    FoxgloveSink,
    _SdkLogWatch,
    foxglove_log,
    stamped,
    stamped_schema,
)
from ulogstream.adapters.ulog_file import read
from ulogstream.cli import main
from ulogstream.config.loader import load_settings
from ulogstream.config.sections import FoxgloveSettings
from ulogstream.config.values import parse_listen
from ulogstream.errors import ConfigError
from ulogstream.live.encode import RowEncoder, json_sample_time, row_json_schema
from ulogstream.recorder.wiring import foxglove_view

if TYPE_CHECKING:
    from pathlib import Path

DTYPE = np.dtype(
    [
        ("timestamp", "<u8"),
        ("q[0]", "<f4"),
        ("q[1]", "<f4"),
        ("v.x", "<f8"),
        ("name", "S4"),
        ("ok", "?"),
        ("n", "<i2"),
    ]
)


def test_json_schema_describes_exactly_the_json_sample_objects() -> None:
    rows = np.zeros(2, dtype=DTYPE)
    rows["timestamp"] = [1_000, 2_000]
    rows["q[0]"] = [0.5, np.nan]
    rows["name"] = [b"ab\0c", b"xyz"]
    rows["ok"] = [True, False]
    rows["n"] = [-3, 7]
    payloads = RowEncoder(DTYPE).json_payloads(rows, [1_000, 2_000], ["10.5", "11.25"])
    schema = row_json_schema("sample", DTYPE)

    assert schema["title"] == "sample"
    properties = schema["properties"]
    assert isinstance(properties, dict)
    types = {key: value["type"] for key, value in properties.items() if isinstance(value, dict)}
    assert types == {
        "t": "number",
        "timestamp": "integer",
        "q[0]": "number",
        "q[1]": "number",
        "v.x": "number",
        "name": "string",
        "ok": "boolean",
        "n": "integer",
    }
    assert schema["required"] == list(types)
    objects = [json.loads(p) for p in payloads]
    assert [list(o) for o in objects] == [list(types)] * 2
    assert objects[1]["q[0]"] is None  # NaN: null, as each float field's description says
    float_field = properties["q[0]"]
    assert isinstance(float_field, dict)
    assert "null" in str(float_field["description"])
    assert [json_sample_time(p) for p in payloads] == [10.5, 11.25]


def test_a_schema_with_a_type_list_is_what_foxglove_viewers_refuse() -> None:
    # The check itself, on the schema issue 22 measured as "Failed to parse channel schema".
    refused = {"type": "object", "properties": {"x": {"type": ["number", "null"]}}}
    assert foxglove_schema_problems(refused) == ["x: unsupported type ['number', 'null']"]
    nested = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "null"}}}}
    assert foxglove_schema_problems(nested) == ["a[]: unsupported type 'null'"]
    assert foxglove_schema_problems({"type": "array"}) != []


def test_every_schema_the_sink_advertises_parses_in_foxglove_viewers(tmp_path: Path) -> None:
    assert foxglove_schema_problems(LOG_SCHEMA) == []
    assert foxglove_schema_problems(STATUS_SCHEMA) == []
    assert foxglove_schema_problems(row_json_schema("sample", DTYPE)) == []
    path = tmp_path / "flight.ulg"
    path.write_bytes(flight_log(2.0, seed=4))
    for topic in read(path).topics.values():
        schema = row_json_schema(topic.name, topic.dtype)
        assert foxglove_schema_problems(schema) == [], topic.name


@pytest.mark.shared
@pytest.mark.parametrize(
    "name",
    [
        "px4-ulog-rs__corrupt_format_not_utf8.ulg",
        "pyulog__sample_logging_tagged_and_default_params.ulg",
    ],
)
def test_every_instance_of_a_real_px4_log_has_a_schema_foxglove_viewers_parse(name: str) -> None:
    for topic in read(shared_ulg(name)).topics.values():
        schema = row_json_schema(topic.name, topic.dtype)
        assert foxglove_schema_problems(schema) == [], topic.name


def test_a_sample_for_viewers_carries_its_own_time_as_header_stamp() -> None:
    rows = np.zeros(1, dtype=DTYPE)
    (payload,) = RowEncoder(DTYPE).json_payloads(rows, [1_000], ["1714557599.887053"])
    time_ns = round(json_sample_time(payload) * 1e9)
    sample = json.loads(stamped(payload, time_ns))
    assert list(sample)[:2] == ["header", "t"]
    assert sample["header"] == {"stamp": {"sec": 1714557599, "nsec": 887053056}}
    assert {k: v for k, v in sample.items() if k != "header"} == json.loads(payload)
    schema = stamped_schema(row_json_schema("sample", DTYPE))
    assert foxglove_schema_problems(schema) == []
    assert list(schema["properties"]) == list(sample)  # type: ignore[arg-type]
    assert schema["required"] == list(sample)


def test_json_sample_time_refuses_other_payloads() -> None:
    with pytest.raises(ValueError, match="not a JSON sample"):
        json_sample_time(b'{"online": true}')


@pytest.mark.parametrize(
    ("px4_level", "foxglove_level"),
    [(0, 5), (2, 5), (3, 4), (4, 3), (5, 2), (6, 2), (7, 1), (ord("x"), 0)],
)
def test_logged_string_levels_map_to_foxglove_log_levels(
    px4_level: int, foxglove_level: int
) -> None:
    entry, time_ns = foxglove_log({"t": 12.5, "level": px4_level, "tag": None, "text": "hi"})
    assert entry["level"] == foxglove_level
    assert entry["timestamp"] == {"sec": 12, "nsec": 500_000_000}
    assert time_ns == 12_500_000_000
    assert (entry["message"], entry["name"]) == ("hi", "px4")


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("8765", "127.0.0.1", 8765),
        ("0.0.0.0:9000", "0.0.0.0", 9000),  # noqa: S104 (parsing, not binding)
        ("[::1]:8765", "::1", 8765),
        ("localhost:0", "localhost", 0),
    ],
)
def test_listen_addresses(text: str, host: str, port: int) -> None:
    address = parse_listen(text)
    assert (address.host, address.port) == (host, port)


def test_foxglove_is_off_by_default_and_listens_on_loopback() -> None:
    settings = load_settings(None)
    assert not settings.foxglove.enabled
    assert settings.foxglove.listen == "127.0.0.1:8765"
    assert foxglove_view(settings.foxglove) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"foxglove.listen": "127.0.0.1:99999"}, "foxglove.listen must be [HOST:]PORT"),
        ({"foxglove.listen": "here:"}, "foxglove.listen must be [HOST:]PORT"),
        ({"foxglove.tls_cert_file": "/c.pem"}, "foxglove.tls_cert_file needs foxglove.tls_key"),
        ({"foxglove.tls_key_file": "/k.pem"}, "foxglove.tls_key_file needs foxglove.tls_cert"),
        ({"foxglove.default_rate_hz": -1}, "foxglove.default_rate_hz must be >= 0"),
        ({"foxglove.backlog": 0}, "foxglove.backlog must be >= 1"),
        ({"foxglove.encoding": "protobuf"}, "foxglove.encoding must be one of 'json', 'cdr'"),
    ],
)
def test_bad_foxglove_settings_name_the_key(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^command line: {re.escape(message)}"):
        load_settings(None, overrides)


def test_a_bad_foxglove_address_on_the_command_line_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["record", "udpin:127.0.0.1:14550", "--out", str(tmp_path), "--foxglove", "x:y"]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("ulogstream: error: command line: foxglove.listen must be [HOST:]PORT")


def test_an_unknown_host_is_one_error_naming_the_setting() -> None:
    sink = foxglove_view(FoxgloveSettings(enabled=True, listen="no-such-host.invalid:8765"))
    assert sink is not None
    with pytest.raises(ConfigError, match=r"^foxglove.listen no-such-host.invalid:8765: "):
        sink.start()


def test_tls_serves_wss_with_the_configured_certificate(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is needed to make a test certificate (Debian package 'openssl')")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    settings = FoxgloveSettings(
        enabled=True, listen="127.0.0.1:0", tls_cert_file=cert, tls_key_file=key
    )
    sink = foxglove_view(settings)
    assert isinstance(sink, FoxgloveSink)
    sink.start()
    try:
        assert sink.url.startswith("wss://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        with (
            socket.create_connection(("127.0.0.1", sink.address.port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.version() is not None  # the handshake verified our certificate
    finally:
        sink.stop()


def test_an_unreadable_tls_file_is_one_error(tmp_path: Path) -> None:
    settings = FoxgloveSettings(
        enabled=True,
        listen="127.0.0.1:0",
        tls_cert_file=tmp_path / "missing.pem",
        tls_key_file=tmp_path / "missing.key",
    )
    sink = foxglove_view(settings)
    assert sink is not None
    with pytest.raises(ConfigError, match=r"^foxglove.tls_cert_file .*missing.pem cannot be"):
        sink.start()


def test_demo_with_foxglove_flies_again_and_again_until_ctrl_c(tmp_path: Path) -> None:
    """Issue 22: ``demo --foxglove`` lasted 14 s, too short to open a viewer and build a layout."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "ulogstream", "demo", "--foxglove", f"127.0.0.1:{port}"]
    fast = ["--duration", "2", "--speed", "20", "--loss", "0", "--out", str(tmp_path)]
    with subprocess.Popen(
        [*command, *fast], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as demo:
        wait_until(lambda: len(list(tmp_path.rglob("*.ulg"))) >= 3, limit=60, what="three flights")
        assert demo.poll() is None  # still flying
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    assert demo.returncode == 0, err
    assert f"Open connection > Foxglove WebSocket > ws://127.0.0.1:{port}" in out
    assert "again and again until Ctrl-C" in out
    flights = int(re.findall(r"Recorded (\d+) flights of 2 s", out)[0])
    assert flights == len(list(tmp_path.rglob("*.ulg"))) >= 3
    for path in tmp_path.rglob("*.ulg"):
        assert read(path).topics  # every flight a whole, readable log


def test_demo_flies_once_in_real_time_with_no_loop(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run(
        [
            *(sys.executable, "-m", "ulogstream", "demo", "--foxglove", f"127.0.0.1:{port}"),
            *("--no-loop", "--duration", "2", "--speed", "20", "--out", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert len(list(tmp_path.rglob("*.ulg"))) == 1
    assert "samples recovered" in result.stdout


def test_handled_viewer_events_are_no_error_lines() -> None:
    readvertise: set[int] = set()
    sink = foxglove_view(FoxgloveSettings(enabled=True))
    assert isinstance(sink, FoxgloveSink)
    watch = _SdkLogWatch(readvertise, sink)

    def record(text: str) -> logging.LogRecord:
        return logging.LogRecord(SDK_CLIENT_LOGGER, logging.ERROR, "", 0, text, None, None)

    raced = record("Client 127.0.0.1:41406 attempted to subscribe to unknown channel: 8")
    assert watch.filter(raced)
    assert (raced.levelno, raced.levelname, readvertise) == (logging.DEBUG, "DEBUG", {8})
    for text in (
        # what the SDK's poller logged for a killed viewer in CI:
        "Error receiving from client 127.0.0.1:52088: IO error: Connection reset by peer",
        "Connection reset without closing handshake",
    ):
        gone = record(text)
        assert watch.filter(gone)
        assert (gone.levelno, gone.levelname) == (logging.INFO, "INFO")
    assert not watch.filter(record("Error sending message to client 127.0.0.1:1: closed"))
    other = record("something the SDK could not do")
    assert watch.filter(other)
    assert other.levelno == logging.ERROR
