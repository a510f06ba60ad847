"""ULog wire constants and struct unpackers, named as in the ULog file format specification."""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterator

MAGIC = b"ULog\x01\x12\x35"
"""The 7 magic bytes every ULog file starts with."""

HEADER_SIZE = 16
"""File header: magic (7 B), version (1 B), uint64 timestamp in microseconds."""

MESSAGE_HEADER_SIZE = 3
"""Every message: uint16 msg_size (payload bytes, header excluded) and uint8 msg_type."""

SUPPORTED_VERSION = 1
"""The newest file format version this parser knows; newer ones are parsed with a warning."""

SYNC_MAGIC = b"\x2f\x73\x13\x20\x25\x0c\xbb\x12"
"""Payload of an 'S' (synchronization) message: a reader resyncs on it after corruption."""

FLAG_BITS_SIZE = 40
"""Payload size of 'B' as of version 1; longer messages are accepted and the rest ignored."""

COMPAT_DEFAULT_PARAMETERS = 0x01
"""compat_flags[0] bit 0: the log contains default parameters ('Q')."""

INCOMPAT_DATA_APPENDED = 0x01
"""incompat_flags[0] bit 0: data was appended at one of the ``appended_offsets``."""

MAX_MESSAGE_SIZE = 0xFFFF
"""Largest payload a uint16 ``msg_size`` can announce."""


@enum.unique
class MessageType(enum.IntEnum):
    """The ``msg_type`` byte of each ULog message."""

    FLAG_BITS = ord("B")
    FORMAT = ord("F")
    INFO = ord("I")
    INFO_MULTIPLE = ord("M")
    PARAMETER = ord("P")
    PARAMETER_DEFAULT = ord("Q")
    ADD_LOGGED_MSG = ord("A")
    REMOVE_LOGGED_MSG = ord("R")
    DATA = ord("D")
    LOGGING = ord("L")
    LOGGING_TAGGED = ord("C")
    SYNC = ord("S")
    DROPOUT = ord("O")


DEFINITION_TYPES = frozenset(
    {
        MessageType.FLAG_BITS,
        MessageType.FORMAT,
        MessageType.INFO,
        MessageType.INFO_MULTIPLE,
        MessageType.PARAMETER,
        MessageType.PARAMETER_DEFAULT,
    }
)
"""Types that may appear in the definitions section."""

DATA_SECTION_STARTERS = frozenset({MessageType.ADD_LOGGED_MSG, MessageType.LOGGING})
"""The definitions section ends before the first 'A' or 'L' message (specification)."""

UnpackFileHeader = Callable[[bytes | bytearray | memoryview, int], tuple[bytes, int, int]]
unpack_file_header: UnpackFileHeader = struct.Struct("<7sBQ").unpack_from
"""(magic, version, timestamp_us) at an offset."""

UnpackMessageHeader = Callable[[bytes | bytearray | memoryview, int], tuple[int, int]]
unpack_message_header: UnpackMessageHeader = struct.Struct("<HB").unpack_from
"""(msg_size, msg_type) at an offset."""

pack_message_header: Callable[[int, int], bytes] = struct.Struct("<HB").pack

TYPE_SIZES: dict[str, int] = {
    "int8_t": 1,
    "uint8_t": 1,
    "int16_t": 2,
    "uint16_t": 2,
    "int32_t": 4,
    "uint32_t": 4,
    "int64_t": 8,
    "uint64_t": 8,
    "float": 4,
    "double": 8,
    "bool": 1,
    "char": 1,
}
"""Basic ULog field types and their sizes in bytes."""

TYPE_STRUCT_CODES: dict[str, str] = {
    "int8_t": "b",
    "uint8_t": "B",
    "int16_t": "h",
    "uint16_t": "H",
    "int32_t": "i",
    "uint32_t": "I",
    "int64_t": "q",
    "uint64_t": "Q",
    "float": "f",
    "double": "d",
    "bool": "?",
    "char": "c",
}
"""Basic ULog field types as little-endian ``struct`` codes."""

TIMESTAMP_FIELD = "timestamp"
"""Every subscribed format has a field of this name (uint64/32/16 in us, uint8 in ms)."""

PADDING_PREFIX = "_padding"
"""Fields whose names start with this are alignment padding: never shown, never decoded."""

LOG_LEVEL_NAMES: dict[int, str] = {
    ord("0"): "EMERG",
    ord("1"): "ALERT",
    ord("2"): "CRIT",
    ord("3"): "ERR",
    ord("4"): "WARNING",
    ord("5"): "NOTICE",
    ord("6"): "INFO",
    ord("7"): "DEBUG",
}
"""'L'/'C' ``log_level`` bytes (ASCII digits, as in the Linux kernel) and their names."""


def encode_dropout(duration_ms: int) -> bytes:
    """Encode an 'O' (dropout) message of ``duration_ms`` milliseconds, clamped to uint16."""
    return pack_message_header(2, MessageType.DROPOUT) + struct.pack(
        "<H", max(0, min(duration_ms, 0xFFFF))
    )


def encode_dropouts(duration_ms: int) -> bytes:
    """Encode ``duration_ms`` as 'O' messages: one, or several where a uint16 is too short."""
    whole, rest = divmod(max(0, duration_ms), 0xFFFF)
    return encode_dropout(0xFFFF) * whole + (encode_dropout(rest) if rest or not whole else b"")


def log_level_name(level: int) -> str:
    """Name a log level byte ('0'..'7' as ASCII); unknown values are shown as numbers."""
    return LOG_LEVEL_NAMES.get(level, str(level))


def iter_messages(log: bytes, start: int) -> Iterator[tuple[int, int, int]]:
    """``(offset, size, type)`` of each whole message of ``log`` from ``start`` on.

    ``size`` is the message's payload size; the walk ends at the first message cut short.
    """
    position = start
    end = len(log)
    while position + MESSAGE_HEADER_SIZE <= end:
        size = log[position] | log[position + 1] << 8
        following = position + MESSAGE_HEADER_SIZE + size
        if following > end:
            return
        yield position, size, log[position + 2]
        position = following
