"""Flight Review upload targets: the Python server (``POST /upload``) and the Rust server.

Both take the log as ``multipart/form-data``:

- ``plot_app`` (the current server): ``POST {url}/upload``, the file in part ``filearg`` with the
  form fields ``type``, ``description``, ``feedback``, ``email``, ``allowForAnalysis``,
  ``obfuscated``, ``source`` (and ``public``), plus ``windSpeed``, ``rating`` and ``videoUrl`` for
  ``type=flightreport`` (the server answers 500 without them). Success is ``302`` with
  ``Location: /plot_app?log=<id>``.
- ``api`` (the Rust server): ``POST {url}/api/upload``, the file in part ``file``; success is a
  JSON object with ``id`` and ``delete_token``.

``400`` (and other 4xx but 408 and 429) raise :class:`~ulogstream.errors.UploadRejectedError`:
retrying cannot help. 5xx, connection errors and timeouts raise ``UploadError``/``OSError``/
``TimeoutError`` and are retried by :class:`~ulogstream.upload.shipper.LogShipper`.

The exchange is ``http.client`` in a thread, the file streamed from disk in chunks (a 100 MB
log is never held in memory); a cancelled or timed-out upload shuts the socket down, so the
thread ends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import socket
import ssl
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from ulogstream.errors import UploadError, UploadRejectedError

if TYPE_CHECKING:
    from pathlib import Path

    from ulogstream.config.sections import FlightReviewSettings
    from ulogstream.upload.info import FinishedLogInfo

logger = logging.getLogger(__name__)

SOURCE = "ulogstream"
"""The ``source`` form field: who uploaded the log."""
PLOT_APP_PART = "filearg"
"""The file's part name for the Python server."""
API_PART = "file"
"""The file's part name for the Rust server."""
_CHUNK = 1 << 16
_MAX_ANSWER = 1 << 16
_RETRYABLE_4XX = frozenset({408, 429})
"""Request timeout and too many requests: the only 4xx answers worth another try."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered: status, ``Location`` header and (the start of) the body."""

    status: int
    location: str | None
    body: bytes

    def said(self) -> str:
        """The body as one short line, for error messages ("" when empty)."""
        text = " ".join(self.body.decode(errors="replace").split())
        return f": {text[:200]}" if text else ""


class MultipartPost:
    """One ``multipart/form-data`` POST of a file and form fields (blocking; see :meth:`send`).

    Args:
        url: The full URL to post to (``http://`` or ``https://``).
        fields: The form fields, in order, before the file.
        part: The file's part name.
        path: The file.
        timeout_s: Socket timeout of every connect, send and receive.
    """

    def __init__(
        self, url: str, fields: dict[str, str], part: str, path: Path, *, timeout_s: float
    ) -> None:
        self.url = url
        self.fields = fields
        self.part = part
        self.path = path
        self.timeout_s = timeout_s
        self.boundary = f"ulogstream-{uuid.uuid4().hex}"
        self._connection: http.client.HTTPConnection | None = None
        self._aborted = False

    def head_and_tail(self) -> tuple[bytes, bytes]:
        """The bytes before the file (fields and the file's part header) and after it."""
        lines: list[bytes] = []
        for name, value in self.fields.items():
            lines += [
                f"--{self.boundary}\r\n".encode(),
                f'Content-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'.encode(),
                value.encode() + b"\r\n",
            ]
        lines += [
            f"--{self.boundary}\r\n".encode(),
            (
                f'Content-Disposition: form-data; name="{_quoted(self.part)}"; '
                f'filename="{_quoted(self.path.name)}"\r\n'
            ).encode(),
            b"Content-Type: application/octet-stream\r\n\r\n",
        ]
        return b"".join(lines), f"\r\n--{self.boundary}--\r\n".encode()

    def send(self) -> Answer:
        """Post, streaming the file from disk, and read the answer (blocking: in a thread).

        Raises:
            OSError: The file cannot be read, or the connection failed or was aborted.
            http.client.HTTPException: The server's answer is not HTTP.
        """
        parts = urlsplit(self.url)
        host, port = parts.hostname or "", parts.port
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            context = ssl.create_default_context()
            connection = http.client.HTTPSConnection(
                host, port, timeout=self.timeout_s, context=context
            )
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self.timeout_s)
        self._connection = connection
        head, tail = self.head_and_tail()
        target = parts.path or "/"
        try:
            with self.path.open("rb") as file:
                size = self.path.stat().st_size
                if self._aborted:
                    raise ConnectionAbortedError
                connection.putrequest("POST", target)
                connection.putheader(
                    "Content-Type", f"multipart/form-data; boundary={self.boundary}"
                )
                connection.putheader("Content-Length", str(len(head) + size + len(tail)))
                connection.putheader("Accept", "application/json, text/html;q=0.5")
                connection.putheader("User-Agent", SOURCE)
                connection.endheaders()
                connection.send(head)
                left = size
                while left > 0:
                    if self._aborted:  # aborted before the socket existed to be shut down
                        raise ConnectionAbortedError
                    chunk = file.read(min(_CHUNK, left))
                    if not chunk:  # shrank under us: pad, so the length stays right
                        chunk = bytes(min(_CHUNK, left))
                    connection.send(chunk)
                    left -= len(chunk)
                connection.send(tail)
            response = connection.getresponse()
            body = response.read(_MAX_ANSWER)
            return Answer(response.status, response.getheader("Location"), body)
        finally:
            connection.close()

    def abort(self) -> None:
        """Make a :meth:`send` in another thread fail now (a cancelled or timed-out upload)."""
        self._aborted = True
        connection = self._connection
        sock = None if connection is None else connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _quoted(text: str) -> str:
    """``text`` safe inside a quoted Content-Disposition parameter."""
    return text.replace("\\", "\\\\").replace('"', "%22").replace("\r", "").replace("\n", "")


async def post(request: MultipartPost, timeout_s: float) -> Answer:
    """Run ``request`` in a thread, aborted when cancelled or after ``timeout_s``.

    Raises:
        TimeoutError: The exchange took longer than ``timeout_s``.
        UploadError: The connection failed or the answer is not HTTP.
    """
    try:
        async with asyncio.timeout(timeout_s):
            return await asyncio.to_thread(request.send)
    except TimeoutError:
        request.abort()
        msg = f"{request.url} did not answer within {timeout_s:g} s"
        raise TimeoutError(msg) from None
    except asyncio.CancelledError:
        request.abort()
        raise
    except (OSError, http.client.HTTPException) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        msg = f"cannot post to {request.url}: {why or type(err).__name__}"
        raise UploadError(msg) from None


def _failure(answer: Answer, url: str) -> UploadRejectedError | UploadError:
    """The error of an answer that is not a success: a refusal for good, or one to retry.

    Returns:
        UploadRejectedError for 4xx but 408/429 (retrying cannot help), else UploadError (5xx,
        408, 429, an unexpected success: retried).
    """
    if 400 <= answer.status < 500 and answer.status not in _RETRYABLE_4XX:  # noqa: PLR2004
        hint = "" if answer.status == 400 else " (is upload.flight_review.url right?)"  # noqa: PLR2004
        return UploadRejectedError(
            f"{url} refused the log with HTTP {answer.status}{answer.said()}{hint}"
        )
    return UploadError(f"{url} answered HTTP {answer.status}{answer.said()}")


class FlightReviewTarget:
    """Uploads to a Flight Review server of either generation (``upload.flight_review.api``).

    Args:
        settings: The ``[upload.flight_review]`` settings.
        timeout_s: Longest time one upload may take (``upload.timeout_s``).
    """

    def __init__(self, settings: FlightReviewSettings, *, timeout_s: float) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self.base = settings.url.rstrip("/")
        self.name = f"Flight Review {self.base}"
        if settings.api == "plot_app":
            self.endpoint, self.part = f"{self.base}/upload", PLOT_APP_PART
        else:
            self.endpoint, self.part = f"{self.base}/api/upload", API_PART

    def form_fields(self, info: FinishedLogInfo) -> dict[str, str]:
        """The form fields sent with the log (none for the Rust server: the file alone)."""
        settings = self.settings
        if settings.api == "api":
            return {}
        description = settings.description.format_map(
            {
                "vehicle": info.vehicle,
                "date": info.date,
                "name": info.path.name,
                "stem": info.path.stem,
                "sys_uuid": info.sys_uuid or "",
            }
        )
        fields = {
            "type": settings.type,
            "description": description,
            "feedback": "",
            "email": settings.email,
            "allowForAnalysis": _flag(settings.allow_for_analysis),
            "obfuscated": "false",
            "source": SOURCE,
        }
        if settings.type == "flightreport":  # the server answers 500 without these three
            fields |= {
                "windSpeed": str(settings.wind_speed),
                "rating": settings.rating,
                "videoUrl": settings.video_url,
                "public": _flag(settings.public),
            }
        return fields

    async def upload(self, info: FinishedLogInfo) -> str:
        """Post the log once.

        Returns:
            The log's page on the server.

        Raises:
            UploadRejectedError: The server refused the log (HTTP 400; other 4xx).
            UploadError: A 5xx answer, a failed connection or an answer that is not understood.
            TimeoutError: No answer within ``upload.timeout_s``.
        """
        request = MultipartPost(
            self.endpoint, self.form_fields(info), self.part, info.path, timeout_s=self.timeout_s
        )
        answer = await post(request, self.timeout_s)
        if self.settings.api == "plot_app":
            return self._plot_app_page(answer)
        return self._api_page(answer, info)

    def _plot_app_page(self, answer: Answer) -> str:
        if answer.status in {301, 302, 303} and answer.location:
            return urljoin(f"{self.base}/", answer.location)
        if answer.status < 400:  # noqa: PLR2004
            msg = f"{self.endpoint} answered HTTP {answer.status} without a Location{answer.said()}"
            raise UploadError(msg)
        raise _failure(answer, self.endpoint)

    def _api_page(self, answer: Answer, info: FinishedLogInfo) -> str:
        if not 200 <= answer.status < 300:  # noqa: PLR2004
            raise _failure(answer, self.endpoint)
        try:
            value: object = json.loads(answer.body)
        except ValueError:
            value = None
        if not isinstance(value, dict) or not isinstance(value.get("id"), str | int):
            msg = f"{self.endpoint} answered without a log id{answer.said()}"
            raise UploadError(msg)
        log_id = str(value["id"])
        page = value.get("url")
        if not isinstance(page, str) or not page:
            page = f"{self.base}/plot_app?log={log_id}"
        else:
            page = urljoin(f"{self.base}/", page)
        token = value.get("delete_token")
        logger.info(
            "Flight Review log %s (%s) is %s; delete token %s (keep it: it deletes the log)",
            log_id,
            info.path.name,
            page,
            token if isinstance(token, str) and token else "none given",
        )
        return page


def _flag(value: bool) -> str:  # noqa: FBT001
    return "true" if value else "false"
