"""The live view's front: viewers of either Foxglove subprotocol reach the SDK's server.

Real sockets on 127.0.0.1 against a real :class:`FoxgloveSink` (foxglove-sdk's server behind the
front): a WebSocket upgrade written by hand, as a browser sends it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import socket
from typing import TYPE_CHECKING

import pytest

from ulogstream.adapters.foxglove_front import upgrade_answer, upgrade_request
from ulogstream.adapters.foxglove_sink import FoxgloveSink
from ulogstream.config.sections import FoxgloveSettings
from ulogstream.errors import ConfigError
from ulogstream.recorder.wiring import foxglove_view

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455's constant for Sec-WebSocket-Accept."""


def _request(offered: str | None, key: bytes) -> bytes:
    protocol = f"Sec-WebSocket-Protocol: {offered}\r\n" if offered else ""
    return (
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key.decode()}\r\nSec-WebSocket-Version: 13\r\n{protocol}\r\n"
    ).encode()


def test_a_legacy_offer_reaches_the_sdk_as_its_own_subprotocol() -> None:
    head = _request("foxglove.websocket.v1", b"a2V5a2V5a2V5a2V5a2V5aw==")
    request, chosen = upgrade_request(head)
    assert chosen == "foxglove.websocket.v1"
    assert b"Sec-WebSocket-Protocol: foxglove.sdk.v1\r\n\r\n" in request
    assert b"foxglove.websocket.v1" not in request
    assert request.endswith(b"\r\n\r\n")
    assert request.replace(b"foxglove.sdk.v1", b"foxglove.websocket.v1") == head


def test_an_offer_of_both_chooses_the_sdks_and_other_requests_pass_unchanged() -> None:
    both = _request("foxglove.websocket.v1, foxglove.sdk.v1", b"k")
    assert upgrade_request(both)[1] == "foxglove.sdk.v1"
    for head in (_request("other.v1", b"k"), _request(None, b"k"), b"GET / HTTP/1.1\r\n\r\n"):
        assert upgrade_request(head) == (head, None)


def test_the_answer_names_the_viewers_own_subprotocol() -> None:
    answer = (
        b"HTTP/1.1 101 Switching Protocols\r\nsec-websocket-protocol: foxglove.sdk.v1\r\n"
        b"Sec-WebSocket-Accept: x\r\n\r\n"
    )
    legacy = upgrade_answer(answer, "foxglove.websocket.v1")
    assert b"Sec-WebSocket-Protocol: foxglove.websocket.v1\r\n" in legacy
    assert b"foxglove.sdk.v1" not in legacy
    assert upgrade_answer(answer, "foxglove.sdk.v1") == answer
    assert upgrade_answer(answer, None) == answer


@pytest.fixture(name="sink")
def fixture_sink() -> Iterator[FoxgloveSink]:
    sink = foxglove_view(FoxgloveSettings(enabled=True, listen="127.0.0.1:0"))
    assert isinstance(sink, FoxgloveSink)
    sink.start()
    yield sink
    sink.stop()


def _handshake(port: int, offered: str | None) -> tuple[bytes, bytes, socket.socket]:
    key = base64.b64encode(os.urandom(16))
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(_request(offered, key))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    accept = base64.b64encode(hashlib.sha1(key + WS_GUID).digest()).lower()  # noqa: S324 (RFC 6455)
    assert head.startswith(b"HTTP/1.1 101") == (b"sec-websocket-accept: " + accept in head.lower())
    return head, rest, sock


@pytest.mark.parametrize("offered", ["foxglove.websocket.v1", "foxglove.sdk.v1"])
def test_a_viewer_of_either_subprotocol_is_served(sink: FoxgloveSink, offered: str) -> None:
    head, rest, sock = _handshake(sink.address.port, offered)
    with sock:
        assert head.startswith(b"HTTP/1.1 101"), head
        assert f"sec-websocket-protocol: {offered}".encode() in head.lower()
        # the server speaks first: its serverInfo text frame (opcode 1, unmasked)
        while len(rest) < 2:
            rest += sock.recv(4096)
        assert rest[0] & 0x0F == 1


def test_a_viewer_offering_no_foxglove_subprotocol_is_refused_with_a_warning(
    sink: FoxgloveSink, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ulogstream"):
        head, _, sock = _handshake(sink.address.port, "ros.bridge.v2")
        sock.close()
    assert head.startswith(b"HTTP/1.1 400"), head
    (record,) = [r for r in caplog.records if "refused" in r.getMessage()]
    assert "ros.bridge.v2" in record.getMessage()
    assert "foxglove.sdk.v1 and foxglove.websocket.v1" in record.getMessage()


def test_stopping_cuts_connected_viewers(sink: FoxgloveSink) -> None:
    _, _, sock = _handshake(sink.address.port, "foxglove.websocket.v1")
    with sock:
        sink.stop()
        sock.settimeout(10)
        while sock.recv(4096):
            pass  # the end of the stream: the server closed it


def test_garbage_instead_of_a_handshake_is_dropped_and_the_next_viewer_served(
    sink: FoxgloveSink, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="ulogstream"):
        with socket.create_connection(("127.0.0.1", sink.address.port), timeout=10) as junk:
            junk.sendall(os.urandom(20_000))  # no HTTP head end within 16 KiB
            junk.settimeout(10)
            with contextlib.suppress(ConnectionResetError):
                while junk.recv(4096):
                    pass  # the front closes it
        head, _, sock = _handshake(sink.address.port, "foxglove.websocket.v1")
        sock.close()
    assert head.startswith(b"HTTP/1.1 101"), head
    assert any("ended before it began" in r.getMessage() for r in caplog.records)


def test_a_tls_key_that_is_no_pem_is_one_error_naming_both_files(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("not a certificate\n")
    key.write_text("not a key\n")
    view = foxglove_view(
        FoxgloveSettings(enabled=True, listen="127.0.0.1:0", tls_cert_file=cert, tls_key_file=key)
    )
    assert view is not None
    with pytest.raises(ConfigError, match=r"^foxglove\.tls_cert_file .*cert\.pem and foxglove"):
        view.start()
