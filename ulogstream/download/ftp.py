"""A log's bytes over MAVLink FTP, and where the vehicle keeps its logs, sans-IO.

MAVLink FTP (https://mavlink.io/en/services/ftp.html) as PX4's ``mavlink_ftp`` serves it: one
session; a request is answered by one ACK or NAK whose ``seq`` is the request's plus one, and a
request sent again with the same ``seq`` gets the last short answer again (so a lost answer is
asked for by resending; see :data:`SEQ_STEP`). ``BurstReadFile`` streams the file from an
offset in 239-byte ACKs until it has sent 35 kB (the last one says ``burst_complete``) or
reaches the end (a NAK ``EOF``).

:class:`FtpListing` finds the ULog files under the log folder (``/fs/microsd/log`` on a board,
``/log`` on SITL): their paths and sizes. :class:`FtpTransfer` reads one file: it opens it,
sweeps it in bursts, asks for what the link lost (a short hole with ``ReadFile``, a long one
with another burst), and closes the session. It speaks the outputs of
:class:`~ulogstream.download.transfer.LogTransfer` (:class:`WriteLogData`, :class:`TransferDone`,
:class:`TransferFailed`), so a shell runs either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec

from ulogstream.download.packets import FTP_DATA_MAX, FtpError, FtpMessage, FtpOpcode, LogEntry
from ulogstream.download.transfer import (
    REQUEST_TRIES,
    RESPONSE_TIMEOUT_S,
    ByteRanges,
    TransferDone,
    TransferFailed,
    WriteLogData,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

LOG_ROOTS: Final = ("/fs/microsd/log", "/log")
"""Where PX4 keeps its logs, as MAVLink FTP names them: a board's SD card, then SITL's."""

BURST_IDLE_S: Final = 0.3
"""Silence mid-burst after which the burst counts as over (its answers were lost)."""

RESPONSE_FLOOR_S: Final = 0.25
"""The shortest wait for an answer once round trips are measured (five of them, at least this):
a lost request or reply costs this, not a radio's worst case."""

SEQ_STEP: Final = 256
"""How far each new request's ``seq`` moves on. PX4 takes a request whose ``seq`` + 1 is its
last short reply's for a resend and answers that reply again; a burst's last reply (its EOF
NAK) carries the burst's ``seq`` + up to 148, so a step of 2 could make the next request look
like a resend of it."""

READ_HOLE_MAX: Final = 4 * FTP_DATA_MAX
"""Holes up to this long are asked for with ``ReadFile`` (a burst would resend up to 35 kB)."""


class FtpFile(msgspec.Struct, frozen=True):
    """A ULog file on the vehicle: its MAVLink FTP path and size."""

    path: str
    size: int


class FtpListingDone(msgspec.Struct, frozen=True):
    """The log folder's ULog files, in the vehicle's listing order (empty: none, or no folder)."""

    files: tuple[FtpFile, ...]


class FtpUnsupported(msgspec.Struct, frozen=True):
    """The vehicle does not serve MAVLink FTP: it refused (``UnknownCommand``) or never answered."""

    reason: str


FtpListingOutput = FtpMessage | FtpListingDone | FtpUnsupported
FtpTransferOutput = FtpMessage | WriteLogData | TransferDone | TransferFailed


class _Requests:
    """One request at a time: its ``seq``, when it is due again, and how often it was sent."""

    def __init__(self, response_timeout_s: float, tries: int) -> None:
        self.response_timeout_s = response_timeout_s
        self.tries_allowed = tries
        self.seq = 0
        self.pending: FtpMessage | None = None
        self.sent_at = 0.0
        self.deadline: float | None = None
        self.tries = 0
        self.sent = 0
        """Requests sent (resent ones included)."""

    def new(
        self, opcode: FtpOpcode, now: float, *, data: bytes = b"", offset: int = 0, size: int = 0
    ) -> FtpMessage:
        self.seq = (self.seq + SEQ_STEP) & 0xFFFF  # its burst's replies count on from seq + 1
        request = FtpMessage(self.seq, 0, opcode, offset=offset, data=data, size=size or None)
        self.pending = request
        self.tries = 0
        return self.send(now)

    def renew(self, now: float) -> FtpMessage:
        """The pending request again under a new ``seq`` (counted as another try)."""
        assert self.pending is not None  # noqa: S101 (a request is pending)
        self.seq = (self.seq + SEQ_STEP) & 0xFFFF
        self.pending = msgspec.structs.replace(self.pending, seq=self.seq)
        return self.send(now)

    def send(self, now: float) -> FtpMessage:
        assert self.pending is not None  # noqa: S101 (a request is pending)
        self.sent_at = now
        self.deadline = now + self.response_timeout_s
        self.tries += 1
        self.sent += 1
        return self.pending

    def answers(self, reply: FtpMessage) -> bool:
        """Whether ``reply`` answers the pending request (not a burst's packets)."""
        pending = self.pending
        return (
            pending is not None
            and reply.opcode in {FtpOpcode.ACK, FtpOpcode.NAK}
            and reply.req_opcode == pending.opcode
            and reply.seq == (pending.seq + 1) & 0xFFFF
        )

    def exhausted(self) -> bool:
        return self.tries >= self.tries_allowed


def _error_name(reply: FtpMessage) -> str:
    try:
        name = FtpError(reply.error).name
    except ValueError:
        name = f"error {reply.error}"
    if reply.error == FtpError.FAIL_ERRNO and len(reply.data) > 1:
        name += f" (errno {reply.data[1]})"
    return name


class FtpListing:
    """Lists the ULog files under the first log folder the vehicle has.

    Args:
        roots: Log folders to try, in order.
        response_timeout_s: Wait for an answer before asking again.
        tries: Requests in a row without an answer before :class:`FtpUnsupported`.
    """

    def __init__(
        self,
        *,
        roots: Iterable[str] = LOG_ROOTS,
        response_timeout_s: float = RESPONSE_TIMEOUT_S,
        tries: int = REQUEST_TRIES,
    ) -> None:
        self._roots = list(roots)
        self._requests = _Requests(response_timeout_s, tries)
        self._folders: list[str] = []  # still to list, the one being listed first
        self._offset = 0
        self._files: list[FtpFile] = []
        self._root: str | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether the last output (done, or failed) was given."""
        return self._finished

    def start(self, now: float) -> list[FtpListingOutput]:
        """List the first log folder."""
        return self._next_root(now)

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (None: finished)."""
        return None if self._finished else self._requests.deadline

    def handle_timer(self, now: float) -> list[FtpListingOutput]:
        """An unanswered request: ask again, or give up after the tries."""
        requests = self._requests
        if self._finished or requests.deadline is None or now < requests.deadline:
            return []
        if requests.exhausted():
            return self._finish(FtpUnsupported(f"no answer to {requests.tries} FTP requests"))
        return [requests.send(now)]  # the same seq: the vehicle answers it again

    def receive(self, reply: FtpMessage, now: float) -> list[FtpListingOutput]:
        """Take one FTP reply: the next page, folder or root, or the end."""
        if self._finished or not self._requests.answers(reply):
            return []
        if reply.opcode == FtpOpcode.NAK:
            if reply.error == FtpError.UNKNOWN_COMMAND:
                return self._finish(FtpUnsupported("it answers ListDirectory with UnknownCommand"))
            if reply.error == FtpError.EOF or self._root is not None:
                return self._next_folder(now)  # this folder is done (or gone meanwhile)
            return self._next_root(now)  # no such root: the next one
        folder = self._folders[0]
        self._root = self._root or folder
        entries = reply.data.split(b"\0")
        count = 0
        for raw in entries:
            if not raw:
                continue
            count += 1
            kind, text = raw[:1], raw[1:].decode("utf-8", "replace")
            if kind == b"D":
                self._folders.append(f"{folder}/{text}")
            elif kind == b"F":
                name, _, size = text.partition("\t")
                if name.endswith(".ulg") and size.isdigit():
                    self._files.append(FtpFile(f"{folder}/{name}", int(size)))
        if not count:
            return self._next_folder(now)
        self._offset += count
        return [self._list(now)]

    def _list(self, now: float) -> FtpMessage:
        return self._requests.new(
            FtpOpcode.LIST_DIRECTORY, now, data=self._folders[0].encode(), offset=self._offset
        )

    def _next_root(self, now: float) -> list[FtpListingOutput]:
        if not self._roots:
            return self._finish(FtpListingDone(()))
        self._folders = [self._roots.pop(0)]
        self._offset = 0
        return [self._list(now)]

    def _next_folder(self, now: float) -> list[FtpListingOutput]:
        self._folders.pop(0)
        self._offset = 0
        if not self._folders:
            return self._finish(FtpListingDone(tuple(self._files)))
        return [self._list(now)]

    def _finish(self, output: FtpListingDone | FtpUnsupported) -> list[FtpListingOutput]:
        self._finished = True
        self._requests.deadline = None
        return [output]


class FtpTransfer:
    """Reads the file at ``path`` of ``size`` bytes; holds which bytes came, asks for the rest.

    Args:
        path: The file's MAVLink FTP path.
        size: Its size (from the listing; the vehicle's open must say the same).
        held: Ranges already on disk (a resumed download): never asked for.
        response_timeout_s: Wait for a request's first answer before asking again.
        tries: Requests in a row without an answer before :class:`TransferFailed`.
    """

    def __init__(
        self,
        *,
        path: str,
        size: int,
        held: Iterable[tuple[int, int]] = (),
        response_timeout_s: float = RESPONSE_TIMEOUT_S,
        tries: int = REQUEST_TRIES,
    ) -> None:
        self.path = path
        self.size = size
        self.held = ByteRanges((a, min(b, size)) for a, b in held if a < size)
        self._requests = _Requests(response_timeout_s, tries)
        self.received = 0
        """Bytes of file data received (resent and duplicate bytes included)."""
        self.rate = 0.0
        """Received bytes per second since the first data (0 until measured)."""
        self.round_trip_s = 0.0
        """A request to its answer, averaged (0 until measured)."""
        self._response_timeout_s = response_timeout_s
        self._first_data_at: float | None = None
        self._last_data_at = 0.0
        self._open = False
        self._reset = False
        self._cursor = 0  # where the sweep goes on
        self._burst_at: float | None = None  # a burst runs: when its last packet came
        self._finished = False

    @property
    def requests(self) -> int:
        """FTP requests sent."""
        return self._requests.sent

    @property
    def finished(self) -> bool:
        """Whether the last output (done, or failed) was given."""
        return self._finished

    def start(self, now: float) -> list[FtpTransferOutput]:
        """Open the file (or finish at once: everything is held)."""
        if not self.held.total < self.size:
            return self._finish(TransferDone(self.size))
        return [self._requests.new(FtpOpcode.OPEN_FILE_RO, now, data=self.path.encode())]

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (None: finished)."""
        if self._finished:
            return None
        if self._burst_at is not None:
            return self._burst_at + BURST_IDLE_S
        return self._requests.deadline

    def handle_timer(self, now: float) -> list[FtpTransferOutput]:
        """A burst or request went silent: go on, ask again, or give up after the tries."""
        deadline = self.next_deadline()
        if deadline is None or now < deadline:
            return []
        if self._burst_at is not None:
            return self._next_read(now)  # the burst went silent after its data: go on
        requests = self._requests
        if requests.exhausted():
            return self._finish(self._failed(f"no answer to {requests.tries} FTP requests"))
        pending = requests.pending
        if pending is not None and pending.opcode == FtpOpcode.BURST_READ_FILE:
            return [requests.renew(now)]  # a burst sent again must not look like a duplicate
        return [requests.send(now)]  # the same seq: the vehicle answers it again

    def receive(self, reply: FtpMessage, now: float) -> list[FtpTransferOutput]:
        """Take one FTP reply: new bytes to write, then the next request when one is due."""
        if self._finished:
            return []
        if reply.req_opcode == FtpOpcode.BURST_READ_FILE and self._open:
            return self._burst_reply(reply, now)
        requests = self._requests
        if not requests.answers(reply):
            return []
        pending = requests.pending
        assert pending is not None  # noqa: S101 (answers() checked it)
        requests.deadline = None
        if requests.tries == 1:  # a round trip of its own: wait a few of them, not 1.5 s
            sample = now - requests.sent_at
            rtt = sample if not self.round_trip_s else 0.75 * self.round_trip_s + 0.25 * sample
            self.round_trip_s = rtt
            requests.response_timeout_s = min(
                self._response_timeout_s, max(RESPONSE_FLOOR_S, 5 * rtt)
            )
        if pending.opcode == FtpOpcode.RESET_SESSIONS:
            return [requests.new(FtpOpcode.OPEN_FILE_RO, now, data=self.path.encode())]
        if pending.opcode == FtpOpcode.OPEN_FILE_RO:
            return self._opened(reply, now)
        if reply.opcode == FtpOpcode.NAK:
            if reply.error == FtpError.EOF:
                self._cursor = 0
                return self._next_read(now)
            return self._finish(
                self._failed(f"the vehicle refused to read it: {_error_name(reply)}")
            )
        return [*self._take(reply.offset, reply.data, now), *self._next_read(now)]

    def _opened(self, reply: FtpMessage, now: float) -> list[FtpTransferOutput]:
        if reply.opcode == FtpOpcode.NAK:
            if reply.error == FtpError.NO_SESSIONS_AVAILABLE and not self._reset:
                self._reset = True  # a session left open (a killed client): PX4 has one
                return [self._requests.new(FtpOpcode.RESET_SESSIONS, now)]
            return self._finish(self._failed(f"the vehicle cannot open it: {_error_name(reply)}"))
        size = int.from_bytes(reply.data[:4], "little") if len(reply.data) >= 4 else -1  # noqa: PLR2004
        if size < self.size:  # a log still written has grown since: its listed bytes are read
            return self._finish(self._failed(f"it has {size} bytes, not the {self.size} listed"))
        self._open = True
        return self._next_read(now)

    def _burst_reply(self, reply: FtpMessage, now: float) -> list[FtpTransferOutput]:
        if reply.opcode == FtpOpcode.NAK:
            self._burst_at = None
            if reply.error != FtpError.EOF:
                return self._finish(self._failed(f"the burst failed: {_error_name(reply)}"))
            self._cursor = 0  # the sweep reached the end: the holes, from the start
            return self._next_read(now)
        self._requests.deadline = None
        self._requests.tries = 0
        self._burst_at = now
        out = self._take(reply.offset, reply.data, now)
        self._cursor = max(self._cursor, reply.offset + len(reply.data))
        if reply.burst_complete or self._cursor >= self.size:
            self._burst_at = None
            out += self._next_read(now)
        return out

    def _take(self, ofs: int, data: bytes, now: float) -> list[FtpTransferOutput]:
        end = min(ofs + len(data), self.size)
        if end <= ofs:
            return []
        self.received += end - ofs
        if self._first_data_at is None:
            self._first_data_at = now
        elif now > self._first_data_at:
            self.rate = self.received / (now - self._first_data_at)
        self._last_data_at = now
        return [WriteLogData(s, data[s - ofs : e - ofs]) for s, e in self.held.add(ofs, end)]

    def _next_read(self, now: float) -> list[FtpTransferOutput]:
        """Ask for the next missing bytes: on from the sweep's cursor, then the holes."""
        self._burst_at = None
        hole = next(self.held.missing(self.size, self._cursor), None)
        if hole is None and self._cursor:
            self._cursor = 0
            hole = next(self.held.missing(self.size), None)
        if hole is None:
            close = self._requests.new(FtpOpcode.TERMINATE_SESSION, now)
            self._open = False
            return [close, *self._finish(TransferDone(self.size))]
        start, end = hole
        self._cursor = start
        if end - start <= READ_HOLE_MAX:
            want = min(FTP_DATA_MAX, end - start)
            return [self._requests.new(FtpOpcode.READ_FILE, now, offset=start, size=want)]
        return [self._requests.new(FtpOpcode.BURST_READ_FILE, now, offset=start, size=FTP_DATA_MAX)]

    def _failed(self, reason: str) -> TransferFailed:
        ofs, _ = next(self.held.missing(self.size), (self.size, 0))
        return TransferFailed(ofs, self.size - self.held.total, self._requests.tries, reason)

    def _finish(self, output: TransferDone | TransferFailed) -> list[FtpTransferOutput]:
        self._finished = True
        self._burst_at = None
        self._requests.deadline = None
        return [output]


def files_for_entries(entries: Iterable[LogEntry], files: Iterable[FtpFile]) -> dict[int, FtpFile]:
    """Each LOG_ENTRY's file over MAVLink FTP, by entry id.

    PX4 gives LOG_ENTRY no name: a log is known by its size. Entries and files of the same size
    are paired in time order (entries by their time, files by their dated path); an entry with
    no file of its size has none.
    """
    by_size: dict[int, list[FtpFile]] = {}
    for file in sorted(files, key=lambda file: file.path):
        by_size.setdefault(file.size, []).append(file)
    out: dict[int, FtpFile] = {}
    for entry in sorted(entries, key=lambda entry: (entry.time_utc, entry.id)):
        same = by_size.get(entry.size)
        if same:
            out[entry.id] = same.pop(0)
    return out
