"""Flight Review contract servers for the tests, one per generation, from the documented contract.

As PX4/flight_review's ``tornado_handlers/upload.py`` and PX4/flight-review-rs's
``api/upload.rs`` read them:

- ``plot_app`` (the Python server): ``POST /upload``, ``multipart/form-data`` with the file in
  part ``filearg``. ``description`` and ``email`` are required (without them: 500, the
  handler's KeyError); ``type``, ``feedback``, ``allowForAnalysis``, ``obfuscated``,
  ``source`` are optional, and for ``type=flightreport`` so are ``windSpeed``, ``rating``,
  ``videoUrl``, ``public`` and ``vehicleName``. A file without the ULog header: 400. It stores
  the log, then parses it before it answers (``parse_s``): a client gone meanwhile leaves the
  entry. Success: 302 with ``Location: /plot_app?log=<id>``. Behind nginx (``max_body``) a
  larger body gets 413 from its headers, before it is sent.
- ``api`` (the Rust server): ``POST /api/upload`` with the file in part ``file`` and the
  optional fields ``is_public``, ``description``, ``wind_speed``, ``rating`` (an integer),
  ``feedback``, ``video_url``, ``source``, ``pilot_name``, ``vehicle_name``, ``tags``,
  ``location_name``, ``mission_type``; a file that does not convert: 500 ``conversion error``.
  Success: 200 with a JSON object holding ``id`` and ``delete_token``.

The multipart body is parsed with the standard library's ``email`` parser, not with the code
under test. ``answers`` queues statuses (500, 400, 0 for "never answer") given, in turn, to the
next well-formed uploads instead of a success.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import email.policy
import json
import uuid
from http import HTTPStatus
from typing import TYPE_CHECKING, Literal, Self

import msgspec

if TYPE_CHECKING:
    from types import TracebackType

PLOT_APP_REQUIRED = ("description", "email")
"""What v1's handler reads without a default (``form_data['email']``): 500 without."""
ULOG_MAGIC = b"ULog\x01\x12\x35"
HANG = 0
"""An entry of ``answers``: read the upload, then never answer."""


class Upload(msgspec.Struct):
    """One request the server read: its path, form fields and files (part -> name, bytes)."""

    path: str
    fields: dict[str, str] = msgspec.field(default_factory=dict)
    files: dict[str, tuple[str, bytes]] = msgspec.field(default_factory=dict)
    status: int = 0


class ReviewServer(msgspec.Struct):
    """A Flight Review server of one generation on 127.0.0.1 (a free port); use ``async with``."""

    api: Literal["plot_app", "api"]
    answers: list[int] = msgspec.field(default_factory=list)
    parse_s: float = 0.0
    """``plot_app``: seconds spent parsing a stored log before answering (real: 2.6-7 s)."""
    max_body: int | None = None
    """A body larger than this gets 413 from its headers alone (nginx's client_max_body_size)."""
    body_limit: int | None = None
    """A body larger than this gets Tornado's answer to its ``max_body_size``: ``400 Bad
    Request`` from the headers alone, then the connection is closed unread (a reset)."""
    received: list[Upload] = msgspec.field(default_factory=list)
    """Every request read, with the status it got."""
    stored: dict[str, bytes] = msgspec.field(default_factory=dict)
    """Logs accepted: id -> the file's bytes."""
    tokens: dict[str, str] = msgspec.field(default_factory=dict)
    """``api``: id -> delete token handed out."""
    port: int = 0
    _server: asyncio.Server | None = None
    _hanging: list[asyncio.StreamWriter] = msgspec.field(default_factory=list)

    @property
    def url(self) -> str:
        """The server's base URL (what ``upload.flight_review.url`` names)."""
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._hanging:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in header_lines if line)
            }
            length = int(headers.get("content-length", "0"))
            if self.body_limit is not None and length > self.body_limit:
                self.received.append(Upload(path, status=400))
                with contextlib.suppress(ConnectionError):
                    writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                    await writer.drain()
                writer.transport.abort()  # unread body: the peer sees a reset
                return
            if self.max_body is not None and length > self.max_body:
                self.received.append(Upload(path, status=413))
                await self._reply(writer, 413, {}, b"<html>413 Request Entity Too Large</html>")
                return
            body = await reader.readexactly(length)
        except (asyncio.IncompleteReadError, ValueError, ConnectionError):
            writer.close()
            return
        upload = Upload(path)
        self.received.append(upload)
        status, extra, payload = self._answer(method, headers, body, upload)
        if status in {301, 302, 303} and self.parse_s:
            await asyncio.sleep(self.parse_s)  # stored already: parsing, then the answer
        upload.status = status
        if status == HANG:
            self._hanging.append(writer)
            return
        await self._reply(writer, status, extra, payload)

    @staticmethod
    async def _reply(
        writer: asyncio.StreamWriter, status: int, extra: dict[str, str], payload: bytes
    ) -> None:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
        lines += [f"{name}: {value}" for name, value in extra.items()]
        lines += [f"Content-Length: {len(payload)}", "Connection: close", "", ""]
        with contextlib.suppress(ConnectionError):
            writer.write("\r\n".join(lines).encode("latin-1") + payload)
            await writer.drain()
        writer.close()

    def _answer(
        self, method: str, headers: dict[str, str], body: bytes, upload: Upload
    ) -> tuple[int, dict[str, str], bytes]:
        endpoint = "/upload" if self.api == "plot_app" else "/api/upload"
        if method != "POST" or upload.path != endpoint:
            return 404, {}, b"Not Found"
        kind = headers.get("content-type", "")
        if not kind.startswith("multipart/form-data"):
            return 400, {}, b"expected multipart/form-data"
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {kind}\r\n\r\n".encode("latin-1") + body
        )
        if not message.is_multipart():
            return 400, {}, b"a multipart body without parts"
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            data = part.get_payload(decode=True)
            if not isinstance(name, str) or not isinstance(data, bytes):
                return 400, {}, b"a part without a name"
            filename = part.get_filename()
            if filename is None:
                upload.fields[name] = data.decode()
            else:
                upload.files[name] = (filename, data)
        if self.api == "plot_app":
            return self._plot_app(upload)
        return self._rust_api(upload)

    def _plot_app(self, upload: Upload) -> tuple[int, dict[str, str], bytes]:
        if any(name not in upload.fields for name in PLOT_APP_REQUIRED):
            return 500, {}, b"<html><title>500: Internal Server Error</title></html>"
        if "filearg" not in upload.files:
            return 500, {}, b"<html><title>500: Internal Server Error</title></html>"
        if not upload.files["filearg"][1].startswith(ULOG_MAGIC[:4]):
            return 400, {}, b"Invalid File"
        if self.answers:
            return self.answers.pop(0), {}, b"forced answer"
        log_id = str(uuid.uuid4())
        self.stored[log_id] = upload.files["filearg"][1]
        return 302, {"Location": f"/plot_app?log={log_id}"}, b""

    def _rust_api(self, upload: Upload) -> tuple[int, dict[str, str], bytes]:
        if set(upload.files) != {"file"}:
            return 400, {"Content-Type": "application/json"}, b'{"error": "no part file"}'
        if self.answers:
            return self.answers.pop(0), {}, b'{"error": "forced answer"}'
        if not upload.files["file"][1].startswith(ULOG_MAGIC[:4]):
            error = b'{"error": "conversion error: invalid ULog file header"}'
            return 500, {"Content-Type": "application/json"}, error
        log_id, token = str(uuid.uuid4()), uuid.uuid4().hex
        self.stored[log_id] = upload.files["file"][1]
        self.tokens[log_id] = token
        answer = json.dumps({"id": log_id, "delete_token": token}).encode()
        return 200, {"Content-Type": "application/json"}, answer
