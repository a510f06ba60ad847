from __future__ import annotations

import pytest

from ulogstream.config.values import ConnectionSpec, LinkKind, parse_connection
from ulogstream.errors import ConfigError

ANY = "0.0.0.0"  # noqa: S104 - parsed, never bound


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("udpin:0.0.0.0:14550", ConnectionSpec(LinkKind.UDP_IN, host=ANY, port=14550)),
        ("udp:127.0.0.1:14540", ConnectionSpec(LinkKind.UDP_IN, host="127.0.0.1", port=14540)),
        ("UDPIN:localhost:0", ConnectionSpec(LinkKind.UDP_IN, host="localhost", port=0)),
        ("udpout:10.0.0.2:14556", ConnectionSpec(LinkKind.UDP_OUT, host="10.0.0.2", port=14556)),
        ("udpin:[::1]:14550", ConnectionSpec(LinkKind.UDP_IN, host="::1", port=14550)),
        ("tcp:127.0.0.1:5760", ConnectionSpec(LinkKind.TCP, host="127.0.0.1", port=5760)),
        ("tcpin:0.0.0.0:5760", ConnectionSpec(LinkKind.TCP_IN, host=ANY, port=5760)),
        ("/dev/ttyACM0", ConnectionSpec(LinkKind.SERIAL, device="/dev/ttyACM0", baud=921600)),
        (
            "/dev/ttyUSB0:921600",
            ConnectionSpec(LinkKind.SERIAL, device="/dev/ttyUSB0", baud=921600),
        ),
        (
            "/dev/ttyUSB0,921600",
            ConnectionSpec(LinkKind.SERIAL, device="/dev/ttyUSB0", baud=921600),
        ),
        (" /dev/ttyS1:115200 ", ConnectionSpec(LinkKind.SERIAL, device="/dev/ttyS1", baud=115200)),
        (
            "/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0",
            ConnectionSpec(
                LinkKind.SERIAL,
                device="/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0",
                baud=921600,
            ),
        ),
        (
            "/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0:921600",
            ConnectionSpec(
                LinkKind.SERIAL,
                device="/dev/serial/by-path/pci-0000:00:14.0-usb-0:2:1.0",
                baud=921600,
            ),
        ),
    ],
)
def test_valid_connection_strings_parse(text: str, spec: ConnectionSpec) -> None:
    assert parse_connection(text) == spec


@pytest.mark.parametrize(
    ("text", "baud"),
    [("/dev/ttyUSB0", 57600), ("/dev/ttyUSB0:115200", 115200), ("/dev/ttyUSB0,460800", 460800)],
)
def test_the_configured_baud_applies_unless_the_string_names_one(text: str, baud: int) -> None:
    assert parse_connection(text, default_baud=57600).baud == baud


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no link type or device path"),
        ("ttyACM0", "no link type or device path"),
        ("COM3", "no link type or device path"),
        ("serial:/dev/ttyACM0", "unknown link type 'serial'"),
        ("udpinn:0.0.0.0:14550", "unknown link type 'udpinn'"),
        ("udpin:14550", "HOST:PORT is missing"),
        ("udpin::14550", "the host is empty"),
        ("udpin:0.0.0.0:port", "port 'port' is not a number"),
        ("udpin:0.0.0.0:", "port '' is not a number"),
        ("udpin:0.0.0.0:-1", "port '-1' is not a number"),
        ("udpin:0.0.0.0:70000", "port 70000 is outside 0-65535"),
        ("udpout:10.0.0.2:0", "port 0 is outside 1-65535"),
        ("tcp:127.0.0.1:0", "port 0 is outside 1-65535"),
        ("/dev/ttyUSB0,fast", "baud rate 'fast' is not a number"),
        ("/dev/ttyUSB0,", "the baud rate after ',' is missing"),
        ("/dev/ttyUSB0:0", "baud rate 0 must be positive"),
        ("/", "'/' is not a device path"),
        ("/dev/", "'/dev/' is not a device path"),
    ],
)
def test_invalid_connection_strings_name_the_string_and_the_expected_forms(
    text: str, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_connection(text)
    message = str(info.value)
    assert message.startswith(f"connection {text!r} is not valid ({problem}")
    assert "expected udpin:HOST:PORT" in message
    assert "/dev/ttyUSB0:921600" in message


@pytest.mark.parametrize(
    "text",
    [
        "udpin:0.0.0.0:14550",
        "udpout:[::1]:14556",
        "tcp:h:1",
        "tcpin:0.0.0.0:5760",
        "/dev/ttyACM0:57600",
    ],
)
def test_str_gives_back_a_parseable_canonical_string(text: str) -> None:
    spec = parse_connection(text)
    assert str(spec) == text
    assert parse_connection(str(spec)) == spec
