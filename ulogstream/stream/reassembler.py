"""Turns LOGGING_DATA packets into acks and a framed, gap-marked ULog byte stream.

The reassembler keeps the theoretical maximum of a lossy stream and nothing else:

- A log starts only at a packet with sequence 0, ``first_message_offset`` 0 and the ULog magic;
  until then nothing is written (protocol.md, "Per packet" 4). A copy of the current log's
  packet 0 is a duplicate (our ack was lost); any other such packet ends the current log
  (:class:`LogEnded`, reason NEW_LOG) and starts the next one.
- Sequence numbers follow :mod:`ulogstream.stream.sequence`: duplicates and older packets are
  dropped (after their ack). A packet ahead of the next expected one is held in a bounded reorder
  window (``reorder_packets`` packets or ``reorder_time`` seconds, whichever ends first) in case
  the missing ones arrive late (UDP over Wi-Fi, LTE or IP radios reorders); a gap is declared
  (:class:`PacketsLost`) only when the window runs out without them. Held packets are framed
  with their own receive time, so a reordered stream gives exactly the bytes of the ordered one.
- Bytes are appended to one buffer that always begins at a message boundary; only whole
  messages leave it (a message's end is known from its uint16 size).
- After a sequence gap the partial message is dropped, packets where no message starts
  (``first_message_offset`` 255) are skipped, and framing resumes at the next packet's offset.
- Every offset PX4 declares is checked against the sizes: a pending message must end exactly
  there. If not, the pending bytes are dropped, framing resyncs at the offset, and
  :class:`FramingMismatch` reports it (none of the existing receivers has this guard).
- A dropout ('O') message goes before the first whole message written after a loss, once the
  definitions section is over. Its duration is measured from receive times: from the packet
  that completed the last message written before the loss to the packet that completes the
  first one after it, i.e. the span in which the loss kept us from writing. Packets that PX4
  dropped itself, or the host dropped, leave a sequence jump without an arrival gap; then the
  duration is the packets missing times the recent time per sequence number (measured over
  about a second of the stream), whichever is longer. ULog timestamps are not used: where a
  'D' message keeps its timestamp depends on its format, which is the parser's knowledge, and
  a gap need not be bracketed by 'D' messages at all. A dropout longer than a uint16 of
  milliseconds is written as several.
- The log's head (file header, definitions section, and every subscription 'A'/'R' since) is
  kept while the log is open. A log ended by the outage timeout (:meth:`end_log` with
  ``resumable``) may go on: when data of the same stream comes back (no new packet 0), the log
  continues in a new file that starts with the head, then a dropout for the time away
  (:class:`LogStarted` with ``continued``). The shell also uses the head to go on in a new
  file after a disk was full (:attr:`LogStreamReassembler.head`).
- After an outage (:meth:`resync`) the next packet is taken whatever its distance: the stream
  went on while nothing arrived, so a jump past half the sequence circle is a long gap, not a
  late copy.

The buffer holds at most one partial message (a uint16 size, so below 64 KiB) plus one packet;
the reorder window at most ``reorder_packets`` packets; the head at most
:data:`MAX_HEAD_BYTES`.
"""

from __future__ import annotations

import enum
from typing import Protocol

import msgspec

from ulogstream.errors import StreamProtocolError
from ulogstream.stream.packets import MAX_DATA_LENGTH, NO_MESSAGE_START, LoggingPacket
from ulogstream.stream.sequence import NEWER_LIMIT, next_sequence, sequence_distance
from ulogstream.ulog.spec import (
    DEFINITION_TYPES,
    HEADER_SIZE,
    MAGIC,
    MESSAGE_HEADER_SIZE,
    MessageType,
    encode_dropouts,
    unpack_file_header,
    unpack_message_header,
)

DATA_SECTION_TYPES = frozenset(MessageType) - DEFINITION_TYPES
"""Known types that exist only in the data section: 'A' or 'L' end the definitions (spec);
'D', 'C', 'R', 'S' and 'O' prove it ended when a loss took the first 'A' with it."""

_SUBSCRIPTION_TYPES = (MessageType.ADD_LOGGED_MSG.value, MessageType.REMOVE_LOGGED_MSG.value)
"""Data-section messages a continued log's head needs: 'D' rows are decoded by their 'A'."""

MAX_HEAD_BYTES = 8 << 20
"""Most bytes of a log's head kept for a continuation (real PX4 heads are 0.1-0.4 MB)."""

RATE_WINDOW_S = 1.0
"""Time over which the time per sequence number is measured for dropout estimates."""

_RATE_MIN_PACKETS = 16
"""Least packets in a window for its time per sequence number to count (not an outage)."""


class SendAck(msgspec.Struct, frozen=True):
    """Send LOGGING_ACK for ``sequence`` to the packet's sender, before any other output.

    PX4 resends a LOGGING_DATA_ACKED every 50 ms and tears the stream down after 50 tries, so
    every copy is acked (duplicates too), in every state.
    """

    sequence: int
    target_system: int
    target_component: int


class WriteUlog(msgspec.Struct, frozen=True):
    """Append ``data`` to the log file and feed the same bytes to the parser.

    ``data`` holds whole ULog messages only; the first chunk of a log begins with the file header.
    """

    data: bytes


class PacketsLost(msgspec.Struct, frozen=True):
    """``count`` packets are missing right before packet ``sequence``."""

    sequence: int
    count: int


class LogStarted(msgspec.Struct, frozen=True):
    """A new log began (packet 0 with the ULog magic): open a new file before the next write.

    ``timestamp_us`` is the file header's start time (vehicle clock). ``continued``: not a new
    log, but the one the outage timeout ended going on (its stream came back): the next write
    is its head again, so the new file is a valid log of its own.
    """

    timestamp_us: int
    continued: bool = False


class LogEndReason(enum.StrEnum):
    """Why a log ended."""

    STOPPED = "stopped"
    """Our LOGGING_STOP was answered."""
    STOP_TIMEOUT = "stop timeout"
    """Our LOGGING_STOP was never answered."""
    STOPPED_BY_OTHER_CLIENT = "stopped by another client"
    """Another client's LOGGING_STOP ended the vehicle's only stream (ours)."""
    NEW_LOG = "new log"
    """Packet 0 of another log arrived (vehicle reboot, or a STOP/START we did not send)."""
    DATA_TIMEOUT = "data timeout"
    """No data of the open log within the outage grace period (or PX4 began a new log)."""
    STREAM_GONE = "the vehicle's stream ended during a link outage"
    """After an outage, LOGGING_START was accepted: the vehicle had stopped streaming the log."""
    ABANDONED = "abandoned"
    """The user ended a stop before the vehicle finished sending the log."""


class LogEnded(msgspec.Struct, frozen=True):
    """The current log is over: flush, fsync and close its file.

    ``complete`` is True when the vehicle confirmed the end (LOGGING_STOP answered), False when
    the stream just stopped arriving or was replaced, so the log's tail may be missing.
    """

    reason: LogEndReason
    complete: bool


class FramingMismatch(msgspec.Struct, frozen=True):
    """Packet ``sequence`` declared a message start where no message ends.

    ``dropped_bytes`` of the pending message were discarded; framing resumed at the next message
    start PX4 declared, after a dropout.
    """

    sequence: int
    dropped_bytes: int

    def error(self) -> StreamProtocolError:
        """The report as an exception value, for the shell to log."""
        msg = (
            f"first_message_offset disagrees with the ULog message sizes; "
            f"{self.dropped_bytes} pending bytes dropped"
        )
        return StreamProtocolError(msg, sequence=self.sequence)


ReassemblerOutput = SendAck | WriteUlog | PacketsLost | LogStarted | LogEnded | FramingMismatch
"""Everything :meth:`LogStreamReassembler.receive_packet` returns."""


class OutputSink(Protocol):
    """Where outputs are appended (a ``list`` of these or of a wider union)."""

    def append(self, item: ReassemblerOutput, /) -> None:
        """Take one output."""


class StreamCounters(msgspec.Struct):
    """Running totals for a status line; every copy of every packet counts."""

    packets: int = 0
    """Valid packets from the autopilot addressed to us."""
    acked: int = 0
    """LOGGING_ACKs requested (one per LOGGING_DATA_ACKED copy)."""
    duplicates: int = 0
    packets_late: int = 0
    """Packets that arrived after a successor and were put back in order (not lost)."""
    stale: int = 0
    """Older packets arriving after their gap was declared (dropped)."""
    ignored: int = 0
    """Packets outside any log (before its packet 0), dropped."""
    invalid: int = 0
    """Packets with a bad length or first_message_offset, dropped unacked."""
    filtered: int = 0
    """Logging packets not from the autopilot or not addressed to us."""
    gaps: int = 0
    packets_lost: int = 0
    dropouts: int = 0
    """Dropout ('O') messages written."""
    mismatches: int = 0
    """Framing resyncs (see :class:`FramingMismatch`)."""
    bytes_written: int = 0
    logs_started: int = 0
    """Logs started."""


PACKET0_COPY_WINDOW = 16
"""A packet 0 equal to the open log's is a resent copy only while fewer than this many packets of
the log have been taken; later it starts a new log (counted per log, so a sequence wrap cannot
make an old log look young)."""

DEFAULT_REORDER_PACKETS = 256
"""Default size of the reorder window in packets: 120 ms of data at the USB ceiling."""

DEFAULT_REORDER_TIME = 0.1
"""Default longest wait (seconds) for a missing packet: covers 30 ms of jitter with room."""


def _dropout_ms(seconds: float) -> int:
    return round(seconds * 1000.0)


class LogStreamReassembler:
    """Acks, orders and frames the LOGGING_DATA packets of one vehicle's stream.

    Packets must already come from the autopilot and be addressed to us (the session filters).

    Args:
        counters: Where to count; a fresh :class:`StreamCounters` when None.
        reorder_packets: Most packets held while waiting for a missing one (0: no reordering,
            a gap is declared at once).
        reorder_time: Longest seconds a packet is held while waiting for a missing one.

    Raises:
        ValueError: A reorder bound is negative.
    """

    __slots__ = (
        "_buffer",
        "_data_section",
        "_dropout_floor",
        "_dropout_pending",
        "_first_packet",
        "_head",
        "_held",
        "_held_deadline",
        "_last_sequence",
        "_last_write_time",
        "_log_packets",
        "_rate_mark_sequences",
        "_rate_mark_time",
        "_reorder_packets",
        "_reorder_time",
        "_resumable",
        "_resync",
        "_sequence_interval",
        "_synced",
        "accept_new_logs",
        "counters",
        "log_open",
    )

    def __init__(
        self,
        *,
        counters: StreamCounters | None = None,
        reorder_packets: int = DEFAULT_REORDER_PACKETS,
        reorder_time: float = DEFAULT_REORDER_TIME,
    ) -> None:
        if reorder_packets < 0 or not reorder_time >= 0:
            msg = (
                f"reorder window must not be negative: {reorder_packets} packets, {reorder_time} s"
            )
            raise ValueError(msg)
        self._reorder_packets = reorder_packets
        self._reorder_time = reorder_time
        self._held: dict[int, tuple[LoggingPacket, float]] = {}
        """Packets ahead of the next expected one, by sequence, with their receive time."""
        self._held_deadline = 0.0
        self._log_packets = 0
        self.counters = StreamCounters() if counters is None else counters
        self.accept_new_logs = True
        """Open a log at packet 0 (the session clears this while no stream of ours may run)."""
        self.log_open = False
        """True between :class:`LogStarted` and :class:`LogEnded` (read-only for callers)."""
        self._buffer = bytearray()
        self._first_packet = b""
        self._head: bytearray | None = bytearray()
        """Header, definitions and subscriptions of the log (None: over MAX_HEAD_BYTES)."""
        self._resumable = False
        self._resync = False
        self._last_sequence = 0
        self._synced = False
        self._data_section = False
        self._dropout_pending = False
        self._dropout_floor = 0.0
        """Seconds the packets declared lost since the last write stood for."""
        self._last_write_time = 0.0
        self._sequence_interval = 0.0
        """Recent seconds per sequence number (0 until measured)."""
        self._rate_mark_time = 0.0
        self._rate_mark_sequences = 0

    @property
    def resumable(self) -> bool:
        """Whether the last log, ended by the outage timeout, may go on in a new file."""
        return self._resumable

    @property
    def head(self) -> bytes | None:
        """The open log's head, once its data section began (None: not yet, or too large).

        A new file that starts with it, then a dropout, is a valid log in which the data that
        follows can be read.
        """
        if not self.log_open or not self._data_section or self._head is None:
            return None
        return bytes(self._head)

    def resync(self) -> None:
        """The stream was away (an outage): take its next packet whatever its sequence number."""
        self._resync = True

    def resync_done(self) -> None:
        """The stream is back: sequence numbers are compared as usual again."""
        self._resync = False

    def forget_resumable(self) -> None:
        """The last log will not go on (its stream does not reach us): drop its head."""
        if self._resumable:
            self._resumable = False
            self._head = bytearray()

    def receive_packet(self, packet: LoggingPacket, now: float) -> list[ReassemblerOutput]:
        """Take one packet received at ``now``; return the outputs in the order to carry out."""
        out: list[ReassemblerOutput] = []
        self.receive_packet_into(packet, now, out)
        return out

    def receive_packet_into(self, packet: LoggingPacket, now: float, out: OutputSink) -> None:
        """Like :meth:`receive_packet`, appending to ``out`` (the session's list)."""
        data = packet.data
        length = len(data)
        offset = packet.first_message_offset
        counters = self.counters
        if length > MAX_DATA_LENGTH or (offset != NO_MESSAGE_START and offset >= length):
            counters.invalid += 1
            return
        sequence = packet.sequence
        if packet.needs_ack:
            # Before the duplicate test and any write: our previous ack may have been lost.
            out.append(SendAck(sequence, packet.system_id, packet.component_id))
            counters.acked += 1
        counters.packets += 1
        if sequence == 0 and offset == 0 and length >= HEADER_SIZE and data.startswith(MAGIC):
            self._receive_log_start(data, now, out)
            return
        if not self.log_open:
            if self._resumable:  # data of the log the outage timeout ended: it goes on
                self._resume(packet, now, out)
            else:
                counters.ignored += 1
            return
        if not self._held and sequence_distance(self._last_sequence, sequence) == 1:
            self._take(packet, now, out)  # the common case: the next packet, nothing held
            return
        self._reorder(packet, now, out)

    def receive_next(self, sequence: int, offset: int, data: bytes, now: float) -> bytes | None:
        """The data phase's common case in one call: the next plain LOGGING_DATA of the open log.

        Taken when nothing is held, the packet follows the last one taken, the stream is in
        step (framed, in the data section) and the packet's
        ``first_message_offset`` agrees with the bytes held. Its effect is then exactly
        :meth:`receive_packet_into`'s for that packet (``needs_ack`` False), with no output
        objects: the bytes to write are returned (whole messages; b"" when none is complete).

        Returns:
            The bytes to write, or None: nothing was done (hand the packet to
            :meth:`receive_packet_into`).
        """
        buffer = self._buffer
        held = len(buffer)
        length = len(data)
        if (
            not self.log_open
            or self._held
            or not self._synced
            or not self._data_section
            or sequence != (self._last_sequence + 1) & 0xFFFF
            or length > MAX_DATA_LENGTH
        ):
            return None
        if held:
            # The pending message's end, its size's two bytes perhaps split over two packets.
            if held > 1:
                end = MESSAGE_HEADER_SIZE + (buffer[0] | buffer[1] << 8)
            elif length:
                end = MESSAGE_HEADER_SIZE + (buffer[0] | data[0] << 8)
            else:
                return None
            if offset == NO_MESSAGE_START:
                # It goes on through this packet and must not end inside it.
                if held + length < MESSAGE_HEADER_SIZE or end < held + length:
                    return None
                whole = end == held + length
            elif offset >= length or end != held + offset:
                return None  # invalid, or a message starts where the pending one does not end
            else:
                whole = True
        elif offset:
            return None  # the last packet ended on a message boundary: one must start at 0
        else:
            whole = length > 0
        self.counters.packets += 1
        self._last_sequence = sequence
        self._log_packets += 1
        if now - self._rate_mark_time >= RATE_WINDOW_S:
            self._measure_rate(now)
        buffer += data
        return self._cut(0, now) if whole else b""

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run to declare a gap the window gave up on, or None."""
        return self._held_deadline if self._held else None

    def handle_timer(self, now: float, out: OutputSink) -> None:
        """Declare the gaps whose reorder window has run out by ``now``; write what follows."""
        while self._held and now >= self._held_deadline:
            self._release_next_held(out)

    def _reorder(self, packet: LoggingPacket, now: float, out: OutputSink) -> None:
        """A packet out of order, or any packet while others are held."""
        counters = self.counters
        sequence = packet.sequence
        distance = sequence_distance(self._last_sequence, sequence)
        held = self._held
        if distance == 0 or sequence in held:
            counters.duplicates += 1
        elif self._resync and not held:
            # The first packet after an outage: the stream went on meanwhile, so any jump is a
            # gap (past half the circle too: a late copy cannot trail by a whole outage).
            self._resync = False
            self._lose(sequence, distance - 1, out)
            self._take(packet, now, out)
        elif distance >= NEWER_LIMIT:
            counters.stale += 1  # its gap was declared already: the bytes around it are gone
        elif distance == 1:
            # the missing packet, after its successors: put back in order
            counters.packets_late += 1
            self._take(packet, max(now, self._last_write_time), out)
            self._take_held_in_order(out)
            if held:  # what is still held waits for another gap: from its own arrival
                self._held_deadline = min(time for _, time in held.values()) + self._reorder_time
        else:
            if not held:
                self._held_deadline = now + self._reorder_time
            held[sequence] = (packet, now)
            if len(held) > self._reorder_packets:
                self._release_next_held(out)
        if held and now >= self._held_deadline:
            self.handle_timer(now, out)

    def _release_next_held(self, out: OutputSink) -> None:
        """Give up on the missing packets before the oldest held one: declare them lost."""
        last = self._last_sequence
        held = self._held
        sequence = min(held, key=lambda held_sequence: sequence_distance(last, held_sequence))
        packet, received = held.pop(sequence)
        self._lose(sequence, sequence_distance(last, sequence) - 1, out)
        self._take(packet, max(received, self._last_write_time), out)
        self._take_held_in_order(out)
        if held:
            self._held_deadline = min(time for _, time in held.values()) + self._reorder_time

    def _take_held_in_order(self, out: OutputSink) -> None:
        """Take the held packets that now follow the last one taken."""
        held = self._held
        while held:
            entry = held.pop(next_sequence(self._last_sequence), None)
            if entry is None:
                return
            packet, received = entry
            self._take(packet, max(received, self._last_write_time), out)

    def _take(self, packet: LoggingPacket, now: float, out: OutputSink) -> None:
        """Append the next packet in sequence to the buffer and write the whole messages."""
        self._last_sequence = sequence = packet.sequence
        self._log_packets += 1
        if now - self._rate_mark_time >= RATE_WINDOW_S:
            self._measure_rate(now)
        data = packet.data
        length = len(data)
        offset = packet.first_message_offset
        buffer = self._buffer
        if offset == NO_MESSAGE_START:
            if not self._synced:
                return  # the message spanning this packet began in a lost one
            if not buffer:
                if length:
                    # The last packet ended on a message boundary, yet no message starts here.
                    self._mismatch(sequence, length, out)
                    self._synced = False
                return
            buffer += data
            if len(buffer) < MESSAGE_HEADER_SIZE:
                return
            end = MESSAGE_HEADER_SIZE + (buffer[0] | buffer[1] << 8)
            if end < len(buffer):
                # The pending message ends inside a packet in which no message starts.
                self._mismatch(sequence, len(buffer), out)
                buffer.clear()
                self._synced = False
            elif end == len(buffer):
                self._frame(0, now, out)
            return
        if self._synced:
            boundary = len(buffer) + offset
            buffer += data
            if boundary and (
                boundary < MESSAGE_HEADER_SIZE
                or MESSAGE_HEADER_SIZE + (buffer[0] | buffer[1] << 8) != boundary
            ):
                self._mismatch(sequence, boundary, out)
                del buffer[:boundary]
        else:
            buffer += data
            del buffer[:offset]
            self._synced = True
        self._frame(0, now, out)

    def end_log(
        self, reason: LogEndReason, *, complete: bool, out: OutputSink, resumable: bool = False
    ) -> None:
        """End the open log (if any): drop its partial message and append :class:`LogEnded`.

        Args:
            reason: Why it ended.
            complete: Whether the vehicle confirmed the end.
            out: Where the outputs go.
            resumable: The stream may come back with more of this log (an outage): keep its
                head, and continue it in a new file if its data arrives (see
                :class:`LogStarted`).
        """
        if not self.log_open:
            if not resumable:
                self.forget_resumable()
            return
        while self._held:  # what arrived beyond a gap still belongs to this log
            self._release_next_held(out)
        self.log_open = False
        self._first_packet = b""
        # At a message boundary, a continuation that misses no packet misses nothing.
        self._synced = self._synced and not self._buffer
        self._buffer.clear()
        self._resumable = resumable and self._data_section and self._head is not None
        if not self._resumable:
            self._head = bytearray()
        out.append(LogEnded(reason, complete))

    def _resume(self, packet: LoggingPacket, now: float, out: OutputSink) -> None:
        """Data of the log the outage timeout ended: go on with it in a new file."""
        head = self._head
        assert head is not None  # noqa: S101 (resumable only with a head)
        self._resumable = False
        self._resync = False
        self.log_open = True
        self._buffer.clear()
        out.append(LogStarted(unpack_file_header(head, 0)[2], continued=True))
        self.counters.bytes_written += len(head)
        out.append(WriteUlog(bytes(head)))
        distance = sequence_distance(self._last_sequence, packet.sequence)
        if distance == 0:  # the last packet taken, once more: nothing new yet
            self.counters.duplicates += 1
        elif distance != 1 or not self._synced:
            self._lose(packet.sequence, distance - 1, out)
        if distance:
            self._take(packet, now, out)

    def _measure_rate(self, now: float) -> None:
        """Time per sequence number over the last window (skipped across an outage)."""
        sequences = self._log_packets + self.counters.packets_lost
        advanced = sequences - self._rate_mark_sequences
        if advanced >= _RATE_MIN_PACKETS and now - self._rate_mark_time < 2 * RATE_WINDOW_S:
            self._sequence_interval = (now - self._rate_mark_time) / advanced
        self._rate_mark_time = now
        self._rate_mark_sequences = sequences

    def _receive_log_start(self, data: bytes, now: float, out: OutputSink) -> None:
        if self.log_open:
            if data == self._first_packet and self._log_packets < PACKET0_COPY_WINDOW:
                # A copy of this log's packet 0, resent because our ack was late or lost. The
                # definitions go stop-and-wait, so such a copy trails its log by a packet or
                # two at most; further on, an identical packet 0 is a new log (a SITL reboot in
                # lockstep repeats the header and definitions byte for byte).
                self.counters.duplicates += 1
                return
            self.end_log(LogEndReason.NEW_LOG, complete=False, out=out)
        if not self.accept_new_logs:
            self.counters.ignored += 1
            return
        self.log_open = True
        self._first_packet = data
        self._head = bytearray()
        self._resumable = False
        self._resync = False
        self._last_sequence = 0
        self._log_packets = 1
        self._synced = True
        self._data_section = False
        self._dropout_pending = False
        self._dropout_floor = 0.0
        self._last_write_time = now
        self._sequence_interval = 0.0
        self._rate_mark_time = now
        self._rate_mark_sequences = 1 + self.counters.packets_lost
        self._buffer.clear()
        self._buffer += data
        self.counters.logs_started += 1
        out.append(LogStarted(unpack_file_header(data, 0)[2]))
        self._frame(HEADER_SIZE, now, out)

    def _lose(self, sequence: int, count: int, out: OutputSink) -> None:
        if count:
            self.counters.gaps += 1
            self.counters.packets_lost += count
            out.append(PacketsLost(sequence, count))
            # The missing packets stood for this long of the log, however fast the next came.
            self._dropout_floor += count * self._sequence_interval
        self._buffer.clear()  # its partial message continued in a lost packet
        self._synced = False
        self._dropout_pending = True

    def _mismatch(self, sequence: int, dropped: int, out: OutputSink) -> None:
        self.counters.mismatches += 1
        self._dropout_pending = True
        out.append(FramingMismatch(sequence, dropped))

    def _frame(self, start: int, now: float, out: OutputSink) -> None:
        """Write every whole message from the buffer's beginning (``start`` skips the header)."""
        chunk = self._cut(start, now)
        if chunk:
            out.append(WriteUlog(chunk))

    def _cut(self, start: int, now: float) -> bytes:
        """Cut every whole message from the buffer's beginning: the bytes to write (b"": none).

        ``start`` skips the file header. A dropout waiting for the data section goes first.
        """
        buffer = self._buffer
        size = len(buffer)
        position = start
        head = self._head
        if self._data_section:
            while position + MESSAGE_HEADER_SIZE <= size:
                end = (
                    position + MESSAGE_HEADER_SIZE + (buffer[position] | buffer[position + 1] << 8)
                )
                if end > size:
                    break
                if buffer[position + 2] in _SUBSCRIPTION_TYPES and head is not None:
                    head += buffer[position:end]
                position = end
            data_section = True
        else:
            # Until the definitions section is over, look at each type to see where it ends;
            # everything before it is the head, as are the subscriptions after it.
            data_section = False
            while position + MESSAGE_HEADER_SIZE <= size:
                msg_size, msg_type = unpack_message_header(buffer, position)
                end = position + MESSAGE_HEADER_SIZE + msg_size
                if end > size:
                    break
                if not self._data_section and msg_type in DATA_SECTION_TYPES:
                    self._data_section = True
                    if head is not None:
                        head += buffer[:position]
                if self._data_section and msg_type in _SUBSCRIPTION_TYPES and head is not None:
                    head += buffer[position:end]
                position = end
            if not self._data_section and head is not None:
                head += buffer[:position]
        if head is not None and len(head) > MAX_HEAD_BYTES:
            self._head = None  # no continuation for this log: memory stays bounded
        if not position:
            return b""
        chunk = bytes(buffer[:position])
        del buffer[:position]
        if self._dropout_pending:
            self._dropout_pending = False
            if data_section:  # the definitions section has no place for a dropout
                lost = max(now - self._last_write_time, self._dropout_floor)
                dropouts = encode_dropouts(_dropout_ms(lost))
                chunk = dropouts + chunk
                self.counters.dropouts += len(dropouts) // _DROPOUT_SIZE
            self._dropout_floor = 0.0
        self._last_write_time = now
        self.counters.bytes_written += len(chunk)
        return chunk


_DROPOUT_SIZE = len(encode_dropouts(0))
"""Bytes of one 'O' message."""
