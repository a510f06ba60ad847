"""Flight Review upload targets: the Python server (``POST /upload``) and the Rust server.

Both take the log as ``multipart/form-data``:

As each generation's upload handler reads them (PX4/flight_review's ``upload.py``,
PX4/flight-review-rs's ``api/upload.rs``):

- ``plot_app`` (v1, the Python server): ``POST {url}/upload``, the file in part ``filearg``.
  ``description`` and ``email`` are required (500 without: the handler's KeyError); ``type``,
  ``feedback``, ``allowForAnalysis``, ``obfuscated``, ``source``, and for a flight report
  ``windSpeed``, ``rating``, ``videoUrl``, ``public`` and ``vehicleName`` are read when sent.
  Success is ``302`` with ``Location: /plot_app?log=<id>``. The server stores the log, then
  parses it (seconds) before it answers, and has no idempotency key nor a way to find a private
  log again: an upload cut after its body was sent has landed, and its retry lands again.
  So the transfer and the answer are timed apart: ``upload.timeout_s`` for the transfer, then
  :data:`ANSWER_WAIT_S` for the answer. v1 is at-least-once.
- ``api`` (v2, the Rust server): ``POST {url}/api/upload``, the file in part ``file`` and the
  fields ``is_public``, ``description``, ``vehicle_name``, ``source``, ``rating`` (1-5),
  ``wind_speed`` (``calm``...``storm``), ``video_url``, ``feedback``, ``tags``, ``pilot_name``,
  ``location_name``, ``mission_type``. Success is a JSON object with ``id`` and
  ``delete_token``; the log's page is ``/log/<id>``. A log it cannot convert: 500 ``conversion
  error``, which no retry changes.

``400``, ``413`` (too large for this server) and other 4xx but 408 and 429 raise
:class:`~ulogstream.errors.UploadRejectedError`: retrying cannot help; so does a server that
closed the connection with a 4xx before the whole body was sent (Tornado's body size limit).
5xx, connection errors and timeouts raise ``UploadError``/``OSError``/``TimeoutError`` and are
retried by :class:`~ulogstream.upload.shipper.LogShipper`.

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
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urljoin, urlsplit

import msgspec

from ulogstream.errors import UploadError, UploadRejectedError
from ulogstream.upload.targets import Uploaded

if TYPE_CHECKING:
    from collections.abc import Callable
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
ANSWER_WAIT_S = 300.0
"""Once the whole log is sent, how long the server may take to answer: v1 parses the log first
(2.6-7 s measured for flight logs), and an upload given up then has landed all the same."""
_TOO_LARGE = 413
_V2_WIND = {0: "calm", 5: "breeze", 8: "gale", 10: "storm"}
"""v1's wind speed categories (``upload.flight_review.wind_speed``) in v2's words."""
_V2_RATING = {"crash_pilot": 1, "crash_sw_hw": 1, "unsatisfactory": 2, "good": 4, "great": 5}
"""v1's ratings as v2's 1-5 (``notset``: none sent)."""


class Answer(msgspec.Struct, frozen=True):
    """What the server answered: status, ``Location`` header and (the start of) the body.

    ``body_sent`` is False for an answer given before the whole body was sent (a refusal from
    the request's headers: its size).
    """

    status: int
    location: str | None
    body: bytes
    body_sent: bool = True

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
        timeout_s: Socket timeout of every connect and send.
        answer_timeout_s: Socket timeout of the answer, once the whole body is sent.
    """

    def __init__(
        self,
        url: str,
        fields: dict[str, str],
        part: str,
        path: Path,
        *,
        timeout_s: float,
        answer_timeout_s: float = ANSWER_WAIT_S,
    ) -> None:
        self.url = url
        self.fields = fields
        self.part = part
        self.path = path
        self.timeout_s = timeout_s
        self.answer_timeout_s = answer_timeout_s
        self.body_sent: Callable[[], None] | None = None
        """Called (in the sending thread) once the whole body is sent."""
        self.sent = 0
        """Bytes of the body sent so far."""
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
                try:
                    self._send_body(connection, file, head, size, tail)
                except OSError:
                    early = self._early_answer(connection)
                    if early is None:
                        raise
                    return early  # refused from its headers (413: too large), body unsent
            if connection.sock is not None:
                connection.sock.settimeout(self.answer_timeout_s)
            if self.body_sent is not None:
                self.body_sent()
            response = connection.getresponse()
            body = response.read(_MAX_ANSWER)
            return Answer(response.status, response.getheader("Location"), body)
        finally:
            connection.close()

    def _send_body(
        self,
        connection: http.client.HTTPConnection,
        file: BinaryIO,
        head: bytes,
        size: int,
        tail: bytes,
    ) -> None:
        connection.send(head)
        self.sent = len(head)
        left = size
        while left > 0:
            if self._aborted:  # aborted before the socket existed to be shut down
                raise ConnectionAbortedError
            chunk = file.read(min(_CHUNK, left))
            if not chunk:  # shrank under us: pad, so the length stays right
                chunk = bytes(min(_CHUNK, left))
            connection.send(chunk)
            left -= len(chunk)
            self.sent += len(chunk)
        connection.send(tail)
        self.sent += len(tail)

    def _early_answer(self, connection: http.client.HTTPConnection) -> Answer | None:
        """What a server that stopped reading the body answered before it closed, if anything.

        nginx answers a body over ``client_max_body_size`` with 413 and Tornado one over
        ``max_body_size`` with 400, from the headers alone, then close the connection: the
        upload's send fails, but the answer may be waiting.
        """
        if self._aborted or connection.sock is None:
            return None
        try:
            connection.sock.settimeout(1.0)
            response = connection.getresponse()
            body = response.read(_MAX_ANSWER)
        except (OSError, http.client.HTTPException):
            return None
        if response.status < 400:  # noqa: PLR2004
            return None
        return Answer(response.status, response.getheader("Location"), body, body_sent=False)

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
    """Run ``request`` in a thread, aborted when cancelled or after its time.

    The transfer has ``timeout_s``; once the whole body is sent the server has
    ``request.answer_timeout_s`` more to answer (v1 parses the log first, and cutting it off then
    would not undo the upload).

    Raises:
        TimeoutError: The transfer took longer than ``timeout_s``, or the answer longer than
            ``request.answer_timeout_s``.
        UploadError: The connection failed or the answer is not HTTP.
    """
    loop = asyncio.get_running_loop()
    sent_at: list[float] = []
    try:
        async with asyncio.timeout(timeout_s) as deadline:

            def answer_time() -> None:
                sent_at.append(loop.time())
                answer_by = loop.time() + request.answer_timeout_s
                deadline.reschedule(max(deadline.when() or answer_by, answer_by))

            def body_sent() -> None:  # in the sending thread
                loop.call_soon_threadsafe(answer_time)

            request.body_sent = body_sent
            return await asyncio.to_thread(request.send)
    except TimeoutError:
        request.abort()
        if sent_at:
            wait = request.answer_timeout_s
            msg = f"{request.url} got the whole log but did not answer within {wait:g} s"
        else:
            msg = f"{request.url} did not take the log within {timeout_s:g} s"
        raise TimeoutError(msg) from None
    except asyncio.CancelledError:
        request.abort()
        raise
    except (OSError, http.client.HTTPException) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        msg = f"cannot post to {request.url}: {why or type(err).__name__}"
        raise UploadError(msg) from None


def _failure(answer: Answer, url: str, size: int) -> UploadRejectedError | UploadError:
    """The error of an answer that is not a success: a refusal for good, or one to retry.

    Returns:
        UploadRejectedError for 4xx but 408/429 (retrying cannot help), else UploadError (5xx,
        408, 429, an unexpected success: retried).
    """
    if answer.status == _TOO_LARGE or (400 <= answer.status < 500 and not answer.body_sent):  # noqa: PLR2004
        return UploadRejectedError(
            f"the log ({size / 1e6:.1f} MB) is too large for this server: {url} refused it "
            f"with HTTP {answer.status} before it was sent{answer.said()}"
        )
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
        """The form fields sent with the log, as the server's generation reads them."""
        settings = self.settings
        description = settings.description.format_map(
            {
                "vehicle": info.vehicle,
                "date": info.date,
                "name": info.path.name,
                "stem": info.path.stem,
                "sys_uuid": info.sys_uuid or "",
            }
        )
        if settings.api == "api":
            return self._v2_fields(description, info)
        fields = {
            "type": settings.type,
            "description": description,  # required by v1, as is email
            "feedback": settings.feedback,
            "email": settings.email,
            "allowForAnalysis": _flag(settings.allow_for_analysis),
            "obfuscated": "false",
            "source": SOURCE,
        }
        if settings.type == "flightreport":
            fields |= {
                "windSpeed": str(settings.wind_speed),
                "rating": settings.rating,
                "videoUrl": settings.video_url,
                "public": _flag(settings.public),
                "vehicleName": info.vehicle,
            }
        return fields

    def _v2_fields(self, description: str, info: FinishedLogInfo) -> dict[str, str]:
        """v2's fields: only those set (v2 stores what it gets, empty text included)."""
        settings = self.settings
        rating = settings.rating
        fields = {
            "is_public": _flag(settings.public),
            "description": description,
            "vehicle_name": info.vehicle,
            "source": SOURCE,
        }
        optional = {
            "rating": str(_V2_RATING.get(rating, rating)) if rating != "notset" else "",
            "wind_speed": _V2_WIND.get(settings.wind_speed, ""),
            "video_url": settings.video_url,
            "feedback": settings.feedback,
            "tags": settings.tags,
            "pilot_name": settings.pilot_name,
            "location_name": settings.location_name,
            "mission_type": settings.mission_type,
        }
        return fields | {name: value for name, value in optional.items() if value}

    async def upload(self, info: FinishedLogInfo) -> Uploaded:
        """Post the log once.

        Returns:
            The log's page on the server (and v2's delete token).

        Raises:
            UploadRejectedError: The server refused the log (HTTP 400, 413, other 4xx; v2: a
                log it cannot convert).
            UploadError: A 5xx answer, a failed connection or an answer that is not understood.
            TimeoutError: The transfer outlasted ``upload.timeout_s``, or the answer
                :data:`ANSWER_WAIT_S`.
        """
        request = MultipartPost(
            self.endpoint,
            self.form_fields(info),
            self.part,
            info.path,
            timeout_s=self.timeout_s,
            answer_timeout_s=ANSWER_WAIT_S,
        )
        answer = await post(request, self.timeout_s)
        if self.settings.api == "plot_app":
            return Uploaded(self._plot_app_page(answer, info))
        return self._api_page(answer, info)

    def _plot_app_page(self, answer: Answer, info: FinishedLogInfo) -> str:
        if answer.status in {301, 302, 303} and answer.location:
            return urljoin(f"{self.base}/", answer.location)
        if answer.status < 400:  # noqa: PLR2004
            msg = f"{self.endpoint} answered HTTP {answer.status} without a Location{answer.said()}"
            raise UploadError(msg)
        raise _failure(answer, self.endpoint, info.size)

    def _api_page(self, answer: Answer, info: FinishedLogInfo) -> Uploaded:
        if b"conversion error" in answer.body and answer.status >= 500:  # noqa: PLR2004
            msg = f"{self.endpoint} cannot convert {info.path.name}{answer.said()}; not retried"
            raise UploadRejectedError(msg)
        if not 200 <= answer.status < 300:  # noqa: PLR2004
            raise _failure(answer, self.endpoint, info.size)
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
            page = f"{self.base}/log/{log_id}"
        else:
            page = urljoin(f"{self.base}/", page)
        token = value.get("delete_token")
        return Uploaded(page, token if isinstance(token, str) and token else None)


def _flag(value: bool) -> str:  # noqa: FBT001
    return "true" if value else "false"
