"""The simulated vehicle's SD card: its logs, served to LOG_REQUEST_LIST / _DATA / _END, sans-IO.

As PX4's ``mavlink_log_handler``: LOG_REQUEST_LIST answers one LOG_ENTRY per log (ids from 0,
the file's time and size); LOG_REQUEST_DATA streams the range asked for in 90-byte LOG_DATA
messages, in order, and replaces the range in progress; a message past the log's end carries 0
bytes; LOG_REQUEST_END stops it. The link loses LOG_DATA as the faults say. Sending is paced at
``bytes_per_s`` (PX4 sends as fast as its MAVLink instance's buffer drains: about 8 MB/s on
SITL's loopback, the link's rate on a radio).
"""

from __future__ import annotations

import struct
import time
from typing import Final

import msgspec

from ulogstream.download.packets import (
    FTP_DATA_MAX,
    LOG_DATA_CHUNK,
    FtpError,
    FtpMessage,
    FtpOpcode,
    LogData,
    LogEntry,
    LogRequestData,
    LogRequestEnd,
    LogRequestList,
)
from ulogstream.errors import ULogFormatError
from ulogstream.sim.faults import NO_FAULTS, Draw, FaultConfig, FaultRng
from ulogstream.ulog.spec import DEFINITION_TYPES, HEADER_SIZE, MAGIC, MessageType, iter_messages

TICK_S: Final = 0.005
"""The card sends what its rate allows every tick (PX4's MAVLink loop runs at a few ms)."""

DEFAULT_BYTES_PER_S: Final = 2_000_000
"""Wire bytes per second when the link sets no rate."""

LOG_DATA_FRAME: Final = 10 + 97 + 2
"""Wire bytes of one full LOG_DATA frame (MAVLink 2 header, payload, checksum)."""


class SdLog(msgspec.Struct, frozen=True):
    """One log file on the card: its bytes and its time (UTC seconds)."""

    data: bytes
    time_utc: int

    @property
    def ftp_path(self) -> str:
        """The log's path over MAVLink FTP."""
        day, clock = time.strftime("%Y-%m-%d %H_%M_%S", time.gmtime(self.time_utc)).split()
        return f"{LOG_ROOT}/{day}/{clock}.ulg"


SdCardOutput = LogEntry | LogData | FtpMessage

FTP_FRAME: Final = 10 + 3 + 12 + FTP_DATA_MAX + 2
"""Wire bytes of one full FTP burst reply (MAVLink 2 header, targets, FTP header, data, crc)."""

FTP_BURST_BYTES: Final = 35_000
"""PX4's ``mavlink_ftp`` ends a burst (``burst_complete``) once it sent more than this."""

LOG_ROOT: Final = "/log"
"""Where the card's logs are seen over MAVLink FTP (PX4 SITL's; a board's is
``/fs/microsd/log``): ``/log/YYYY-MM-DD/HH_MM_SS.ulg``, named by the log's time (UTC)."""

_ENOENT: Final = 2

LOGGER_STALL_S: Final = 1.5
"""What PX4's logger loses from its SD log at a stream's start: it waits while the stream's
header and definitions are acked (measured on PX4 SITL at full rate; 32-34 s over a 5760 B/s
radio)."""

_DEFINITIONS: Final = frozenset(t.value for t in DEFINITION_TYPES)
_D: Final = MessageType.DATA.value
_A: Final = MessageType.ADD_LOGGED_MSG.value
_unpack_stamp: Final = struct.Struct("<Q").unpack_from
_STAMPED: Final = 2 + 8
"""A data message's msg_id and the timestamp its topic starts with."""


def split_at_stream_start(
    log: bytes, lead_s: float, stall_s: float = LOGGER_STALL_S
) -> tuple[bytes, bytes]:
    """The log a stream started ``lead_s`` into the flight gets, and the SD log of that flight.

    As PX4's logger with both backends: the SD log runs from the flight's start; the stream
    starts ``lead_s`` seconds later, and while its header and definitions are acked the logger
    waits, so neither log has the ``stall_s`` seconds after the stream's start. Both keep every
    subscription ('A'); the stream has its own copy of the header and definitions. After the
    stall both hold the same bytes.

    Returns:
        ``(streamed, on_card)``.

    Raises:
        ULogFormatError: ``log`` is not a ULog file.
    """
    if not log.startswith(MAGIC):
        msg = "not a ULog file: its magic bytes are missing"
        raise ULogFormatError(msg, offset=0)
    data_start: int | None = None
    first_us: int | None = None
    request: int | None = None
    resume = len(log)
    for offset, size, kind in iter_messages(log, HEADER_SIZE):
        if data_start is None:
            if kind in _DEFINITIONS:
                continue
            data_start = offset
        if kind != _D or size < _STAMPED:
            continue
        stamp: int = _unpack_stamp(log, offset + 5)[0]
        if first_us is None:
            first_us = stamp
        if request is None and stamp >= first_us + lead_s * 1e6:
            request = offset
        if request is not None and stamp >= first_us + (lead_s + stall_s) * 1e6:
            resume = offset
            break
    if data_start is None:
        return log, log
    if request is None:  # the stream starts after the flight: only its definitions
        request = len(log)
    lead = log[data_start:request]
    stall = log[request:resume]
    lead_subscriptions = _subscriptions(lead)
    stall_subscriptions = _subscriptions(stall)
    head = log[:data_start]
    rest = log[resume:]
    streamed = head + lead_subscriptions + stall_subscriptions + rest
    on_card = head + lead + stall_subscriptions + rest
    return streamed, on_card


def _subscriptions(data: bytes) -> bytes:
    """The 'A' messages of ``data`` (whole messages), in order."""
    return b"".join(
        data[offset : offset + 3 + size]
        for offset, size, kind in iter_messages(data, 0)
        if kind == _A
    )


class SdCard:
    """The logs on the simulated vehicle's card, and the one download in progress.

    Args:
        system_id: The vehicle's system id (put in the outputs for the shell).
        bytes_per_s: Wire bytes (whole LOG_DATA frames) sent per second at most: a radio's rate.
        faults: Its ``loss`` (and ``seed``) also loses LOG_DATA messages on the link.
        ftp: Answer MAVLink FTP as PX4's ``mavlink_ftp`` does (False: UNKNOWN_COMMAND, as a
            vehicle without it).
    """

    def __init__(
        self,
        *,
        system_id: int = 1,
        bytes_per_s: float = DEFAULT_BYTES_PER_S,
        faults: FaultConfig = NO_FAULTS,
        ftp: bool = True,
    ) -> None:
        self.system_id = system_id
        self._loss = faults.loss
        self._rng = FaultRng(faults.seed)
        self._sent = 0
        self.lost = 0
        """LOG_DATA messages the link lost (``faults.loss``)."""
        self.logs: list[SdLog] = []
        self._bytes_per_s = bytes_per_s
        self._entries: list[int] = []  # log indexes still to list
        self._sending: tuple[int, int, int] | None = None  # (log id, next ofs, end)
        self._next_tick: float | None = None
        self._credit = 0.0
        self.requests = 0
        """LOG_REQUEST_* and MAVLink FTP requests received."""
        self.ftp = ftp
        self._ftp_replies: list[FtpMessage] = []
        self._ftp_file: SdLog | None = None  # the open session's file
        self._burst: tuple[int, int, int] | None = None  # (next ofs, bytes sent, next seq)
        self._last_reply: FtpMessage | None = None  # kept for a resent request, as PX4 does
        self._burst_to = 0

    def add(self, log: SdLog) -> int:
        """Put ``log`` on the card; returns its id."""
        self.logs.append(log)
        return len(self.logs) - 1

    def receive(
        self, request: LogRequestList | LogRequestData | LogRequestEnd, now: float
    ) -> list[SdCardOutput]:
        """Take one request; the answers leave from :meth:`handle_timer`."""
        self.requests += 1
        match request:
            case LogRequestList(start, end):
                last = min(end, len(self.logs) - 1)
                self._entries = list(range(start, last + 1)) if self.logs else [-1]
                self._sending = None
            case LogRequestData(log_id, ofs, count) if 0 <= log_id < len(self.logs):
                size = len(self.logs[log_id].data)
                self._sending = (log_id, ofs, min(size, ofs + count))
                self._entries = []
            case LogRequestData():
                return []  # no such log: PX4 ignores it
            case _:
                self._entries = []
                self._sending = None
        if self._next_tick is None:
            self._next_tick = now
            self._credit = LOG_DATA_FRAME  # the first message leaves at once
        return []

    def receive_ftp(self, request: FtpMessage, now: float) -> None:
        """Take one MAVLink FTP request (one session, as PX4); answers leave from the timer."""
        self.requests += 1
        self._burst_to = request.system_id
        last = self._last_reply
        if last is not None and (request.seq + 1) & 0xFFFF == last.seq:
            self._ftp_replies.append(last)  # PX4 takes it for a resend: its answer again
        else:
            self._last_reply = None
            reply = self._ftp_reply(request)
            if reply is not None:
                self._ftp_replies.append(reply)
                self._keep_if_short(reply)
        if self._next_tick is None:
            self._next_tick = now
            self._credit = FTP_FRAME

    def _keep_if_short(self, reply: FtpMessage) -> None:
        """PX4 keeps its last reply of 4 data bytes or fewer (ACKs, NAKs, an open's size)."""
        if len(reply.data) <= 4:  # noqa: PLR2004 (PX4's sizeof(uint32_t))
            self._last_reply = reply

    def _ftp_reply(self, request: FtpMessage) -> FtpMessage | None:
        opcode = request.opcode
        if not self.ftp:
            return _nak(request, FtpError.UNKNOWN_COMMAND)
        if opcode == FtpOpcode.LIST_DIRECTORY:
            return self._list(request)
        if opcode == FtpOpcode.OPEN_FILE_RO:
            if self._ftp_file is not None:
                return _nak(request, FtpError.NO_SESSIONS_AVAILABLE)
            path = request.data.split(b"\0")[0].decode("utf-8", "replace")
            found = next((log for log in self.logs if log.ftp_path == path), None)
            if found is None:
                return _nak(request, FtpError.FAIL_ERRNO, _ENOENT)
            self._ftp_file = found
            return _ack(request, len(found.data).to_bytes(4, "little"))
        if opcode in {FtpOpcode.TERMINATE_SESSION, FtpOpcode.RESET_SESSIONS}:
            self._ftp_file = None
            self._burst = None
            return _ack(request)
        file = self._ftp_file
        if file is None or request.session != 0:
            return _nak(request, FtpError.INVALID_SESSION)
        if opcode == FtpOpcode.READ_FILE:
            if request.offset >= len(file.data):
                return _nak(request, FtpError.EOF)
            want = min(FTP_DATA_MAX, request.size or FTP_DATA_MAX)
            return _ack(request, file.data[request.offset : request.offset + want])
        if opcode == FtpOpcode.BURST_READ_FILE:
            self._burst = (request.offset, 0, request.seq + 1)
            return None  # the burst's packets are the answer
        return _nak(request, FtpError.UNKNOWN_COMMAND)

    def _list(self, request: FtpMessage) -> FtpMessage:
        path = request.data.split(b"\0")[0].decode("utf-8", "replace").rstrip("/") or "/"
        paths = [log.ftp_path for log in self.logs]
        if path == "/":
            names = [f"D{LOG_ROOT[1:]}"]
        elif path == LOG_ROOT:
            names = [f"D{day}" for day in sorted({p.split("/")[2] for p in paths})]
        else:
            names = [
                f"F{log.ftp_path.rsplit('/', 1)[1]}\t{len(log.data)}"
                for log in self.logs
                if log.ftp_path.rsplit("/", 1)[0] == path
            ]
            if not names and not path.startswith(LOG_ROOT + "/"):
                return _nak(request, FtpError.FAIL_ERRNO, _ENOENT)
        if request.offset and request.offset >= len(names):
            return _nak(request, FtpError.EOF)
        data = b""
        for name in names[request.offset :]:
            entry = name.encode() + b"\0"
            if len(data) + len(entry) > FTP_DATA_MAX:
                break
            data += entry
        return _ack(request, data)

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (None: nothing to send)."""
        busy = self._entries or self._sending or self._ftp_replies or self._burst
        return self._next_tick if busy else None

    def handle_timer(self, now: float) -> list[SdCardOutput]:
        """Send what the rate allows since the last tick."""
        if self._next_tick is None or now < self._next_tick:
            return []
        out: list[SdCardOutput] = []
        count = len(self.logs)
        for index in self._entries:
            if index < 0:
                out.append(LogEntry(0, 0, 0, 0, 0, system_id=self.system_id))
            else:
                log = self.logs[index]
                out.append(
                    LogEntry(
                        index,
                        count,
                        count - 1,
                        log.time_utc,
                        len(log.data),
                        system_id=self.system_id,
                    )
                )
        self._entries = []
        out += self._ftp_replies
        self._ftp_replies = []
        self._credit = min(self._credit + self._bytes_per_s * TICK_S, self._bytes_per_s)
        if self._burst is not None:
            out += self._send_burst()
        if self._sending is not None:
            log_id, ofs, end = self._sending
            data = self.logs[log_id].data
            while self._credit >= LOG_DATA_FRAME:
                chunk = data[ofs : min(ofs + LOG_DATA_CHUNK, end)]
                self._sent += 1
                if self._rng.chance(self._loss, Draw.LOG_DATA_LOSS, self._sent):
                    self.lost += 1
                else:
                    out.append(LogData(log_id, ofs, chunk, system_id=self.system_id))
                self._credit -= LOG_DATA_FRAME
                ofs += len(chunk)
                if len(chunk) < LOG_DATA_CHUNK or ofs >= end:
                    self._sending = None
                    break
            else:
                self._sending = (log_id, ofs, end)
        busy = self._entries or self._sending or self._ftp_replies or self._burst
        self._next_tick = now + TICK_S if busy else None
        return out

    def _send_burst(self) -> list[SdCardOutput]:
        """The burst's packets the rate allows: 239 bytes each, to its end or 35 kB."""
        assert self._burst is not None  # noqa: S101 (called while a burst runs)
        file = self._ftp_file
        ofs, sent, seq = self._burst
        out: list[SdCardOutput] = []
        while self._credit >= FTP_FRAME:
            self._credit -= FTP_FRAME
            if file is None or ofs >= len(file.data):
                self._burst = None
                eof = FtpMessage(seq, 0, FtpOpcode.NAK, FtpOpcode.BURST_READ_FILE, offset=ofs,
                                 data=bytes((FtpError.EOF,)), system_id=self.system_id)  # fmt: skip
                self._keep_if_short(eof)
                return [*out, eof]
            chunk = file.data[ofs : ofs + FTP_DATA_MAX]
            sent += len(chunk)
            complete = sent > FTP_BURST_BYTES
            reply = FtpMessage(
                seq, 0, FtpOpcode.ACK, FtpOpcode.BURST_READ_FILE, complete, ofs, chunk,
                system_id=self.system_id,
            )  # fmt: skip
            self._sent += 1
            if self._rng.chance(self._loss, Draw.LOG_DATA_LOSS, self._sent):
                self.lost += 1
            else:
                out.append(reply)
            ofs += len(chunk)
            seq = (seq + 1) & 0xFFFF
            if complete:
                self._burst = None
                return out
        self._burst = (ofs, sent, seq)
        return out

    @property
    def ftp_target(self) -> int:
        """The system id of the last MAVLink FTP request's sender (the replies' target)."""
        return self._burst_to


def _ack(request: FtpMessage, data: bytes = b"") -> FtpMessage:
    return FtpMessage(
        (request.seq + 1) & 0xFFFF, request.session, FtpOpcode.ACK, request.opcode,
        offset=request.offset, data=data,
    )  # fmt: skip


def _nak(request: FtpMessage, error: FtpError, errno: int | None = None) -> FtpMessage:
    data = bytes((error,)) if errno is None else bytes((error, errno))
    return FtpMessage(
        (request.seq + 1) & 0xFFFF, request.session, FtpOpcode.NAK, request.opcode,
        offset=request.offset, data=data,
    )  # fmt: skip
