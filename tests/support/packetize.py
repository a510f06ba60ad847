"""Test helpers: cut a ULog byte string into LOGGING_DATA packets exactly as PX4's logger does.

PX4 (``log_writer_mavlink.cpp``) copies each ULog message into a 249-byte buffer, sets
``first_message_offset`` to where the first message starting in the buffer begins (255 when
none does) and sends the buffer when it is full. The file header and the definitions section
(B, F, I, M, P, Q and the initial A messages) go as LOGGING_DATA_ACKED; leaving that reliable
mode flushes the buffer (a short ACKED packet), and data follows as LOGGING_DATA in full packets.
"""

from __future__ import annotations

import random
import struct
from typing import TYPE_CHECKING

import msgspec

from ulogstream.stream.packets import (
    MAV_COMP_ID_LOG,
    MAX_DATA_LENGTH,
    NO_MESSAGE_START,
    LoggingPacket,
)
from ulogstream.stream.session import DEFAULT_SYSTEM_ID
from ulogstream.ulog.spec import (
    DEFINITION_TYPES,
    HEADER_SIZE,
    MESSAGE_HEADER_SIZE,
    MessageType,
    unpack_message_header,
)
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ulogstream.stream.session import SessionOutput


class Message(msgspec.Struct, frozen=True):
    """One ULog message (or the file header, ``msg_type`` 0) at ``start:end`` of the log."""

    start: int
    end: int
    msg_type: int


def messages(ulog: bytes) -> list[Message]:
    """The file header and every message of ``ulog``, in order (the log must be whole)."""
    found = [Message(0, HEADER_SIZE, 0)]
    position = HEADER_SIZE
    while position < len(ulog):
        size, msg_type = unpack_message_header(ulog, position)
        end = position + MESSAGE_HEADER_SIZE + size
        assert end <= len(ulog), "the log ends inside a message"
        found.append(Message(position, end, msg_type))
        position = end
    return found


def definitions_end(ulog: bytes) -> int:
    """Where PX4 leaves reliable mode: after the definitions and the initial 'A' messages."""
    for message in messages(ulog)[1:]:
        if (
            message.msg_type not in DEFINITION_TYPES
            and message.msg_type != MessageType.ADD_LOGGED_MSG
        ):
            return message.start
    return len(ulog)


def px4_boundaries(ulog: bytes, *, acked_until: int | None = None) -> list[int]:
    """Packet end offsets as PX4 sends them: full packets, and a flush at ``acked_until``."""
    if acked_until is None:
        acked_until = definitions_end(ulog)
    ends = list(range(MAX_DATA_LENGTH, acked_until, MAX_DATA_LENGTH))
    if acked_until:
        ends.append(acked_until)
    ends.extend(range(acked_until + MAX_DATA_LENGTH, len(ulog), MAX_DATA_LENGTH))
    if not ends or ends[-1] != len(ulog):
        ends.append(len(ulog))  # the last partial packet, so that a lossless copy is whole
    return ends


def split(
    ulog: bytes,
    ends: Sequence[int],
    *,
    acked_until: int,
    first_sequence: int = 0,
    system_id: int = 1,
    component_id: int = 1,
    target_system: int = DEFAULT_SYSTEM_ID,
    target_component: int = MAV_COMP_ID_LOG,
) -> list[LoggingPacket]:
    """Cut ``ulog`` at ``ends``; packets starting before ``acked_until`` are ACKED."""
    starts = [m.start for m in messages(ulog)]
    packets = []
    begin = 0
    index = 0
    for number, end in enumerate(ends):
        assert 0 < end - begin <= MAX_DATA_LENGTH, "packets hold 1..249 bytes"
        while index < len(starts) and starts[index] < begin:
            index += 1
        fmo = starts[index] - begin if index < len(starts) and starts[index] < end else 255
        packets.append(
            LoggingPacket(
                sequence=(first_sequence + number) & 0xFFFF,
                first_message_offset=fmo if fmo != 255 else NO_MESSAGE_START,
                data=ulog[begin:end],
                needs_ack=begin < acked_until,
                system_id=system_id,
                component_id=component_id,
                target_system=target_system,
                target_component=target_component,
            )
        )
        begin = end
    return packets


def packetize(
    ulog: bytes, *, acked_until: int | None = None, first_sequence: int = 0
) -> list[LoggingPacket]:
    """The packets PX4 would send for ``ulog`` (see the module docstring)."""
    if acked_until is None:
        acked_until = definitions_end(ulog)
    ends = px4_boundaries(ulog, acked_until=acked_until)
    return split(ulog, ends, acked_until=acked_until, first_sequence=first_sequence)


def random_boundaries(ulog: bytes, rng: random.Random) -> list[int]:
    """Packet ends of random sizes (1..249 bytes; the first holds the 16-byte header)."""
    ends = [rng.randint(HEADER_SIZE, MAX_DATA_LENGTH)]
    while ends[-1] < len(ulog):
        ends.append(ends[-1] + rng.randint(1, MAX_DATA_LENGTH))
    ends[-1] = len(ulog)
    return ends


def written(outputs: Iterable[SessionOutput]) -> bytes:
    """Everything the outputs write, concatenated."""
    from ulogstream.stream.reassembler import WriteUlog  # noqa: PLC0415 - keeps imports light

    return b"".join(o.data for o in outputs if isinstance(o, WriteUlog))


def make_ulog(
    data_messages: int = 400, *, seed: int = 1, big_every: int = 37, timestamp_us: int = 123
) -> bytes:
    """A valid log: definitions, subscriptions, then data of mixed sizes, strings, P changes.

    Every ``big_every``-th data message is larger than a packet, so some packets have no
    message start (``first_message_offset`` 255).
    """
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    writer = ULogWriter(timestamp_us=timestamp_us)
    writer.flag_bits()
    writer.format("small:uint64_t timestamp;float x;")
    writer.format("blob:uint64_t timestamp;uint8_t[600] raw;")
    writer.info("char", "sys_name", "PX4")
    writer.info("char", "ver_hw", "SITL")
    writer.parameter("SDLOG_BACKEND", 3)
    writer.parameter("MC_ROLL_P", 6.5)
    writer.info_multiple("char", "perf_top", "x" * 300)
    small = writer.add_logged_message("small")
    blob = writer.add_logged_message("blob")
    for number in range(data_messages):
        timestamp = 1_000_000 + number * 1000
        if big_every and number % big_every == big_every - 1:
            raw = rng.randbytes(rng.randint(250, 600)).ljust(600, b"\0")
            writer.data(blob, struct.pack("<Q", timestamp) + raw)
        elif number % 53 == 7:
            writer.logging(ord("6"), timestamp, f"message {number}")
        elif number % 97 == 11:
            writer.parameter("MC_ROLL_P", float(number))
        else:
            writer.data(small, struct.pack("<Qf", timestamp, rng.random()))
    return writer.getvalue()
