"""ULogWriter: encodes every ULog message type, for tests, the simulated vehicle and the demo."""

from __future__ import annotations

import io
import re
import struct
from typing import TYPE_CHECKING, BinaryIO

from ulogstream.ulog.spec import (
    INCOMPAT_DATA_APPENDED,
    MAGIC,
    MAX_MESSAGE_SIZE,
    SUPPORTED_VERSION,
    SYNC_MAGIC,
    TYPE_STRUCT_CODES,
    MessageType,
    pack_message_header,
)

if TYPE_CHECKING:
    from ulogstream.ulog.events import InfoValue

_TYPE_RE = re.compile(r"^(\w+)(?:\[(\d+)\])?$")


def encode_value(type_name: str, value: InfoValue) -> bytes:
    """Encode an info/parameter value as the type in its key says (``char[N]``, ``float``, ...).

    Raises:
        ValueError: ``type_name`` is not a basic ULog type or ``value`` does not fit it.
    """
    match = _TYPE_RE.match(type_name)
    if match is None or match.group(1) not in TYPE_STRUCT_CODES:
        msg = f"not a basic ULog type: {type_name!r}"
        raise ValueError(msg)
    base, length = match.group(1), match.group(2)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    code = TYPE_STRUCT_CODES[base]
    if isinstance(value, tuple):
        return struct.pack(f"<{len(value)}{code}", *value)
    if length is not None:
        msg = f"{type_name} needs a str, bytes or tuple value, not {value!r}"
        raise ValueError(msg)
    return struct.pack(f"<{code}", value)


def key_type(type_name: str, value: InfoValue) -> str:
    """The type part of a key for ``value``: ``char`` and arrays get their length filled in."""
    if type_name in {"char", "uint8_t"} and isinstance(value, str | bytes):
        return f"{type_name}[{len(value.encode() if isinstance(value, str) else value)}]"
    if "[" not in type_name and isinstance(value, tuple):
        return f"{type_name}[{len(value)}]"
    return type_name


class ULogWriter:
    """Writes a ULog file message by message, in the order the methods are called.

    Args:
        out: Where bytes go; an in-memory buffer (see :meth:`getvalue`) when None.
        timestamp_us: The header's start timestamp.
        version: The header's file format version byte.
        header: Write the 16-byte file header now (False to append to an existing log).
    """

    def __init__(
        self,
        out: BinaryIO | None = None,
        *,
        timestamp_us: int = 0,
        version: int = SUPPORTED_VERSION,
        header: bool = True,
    ) -> None:
        self._out: BinaryIO = io.BytesIO() if out is None else out
        self._next_msg_id = 0
        self.size = 0
        """Bytes written so far."""
        if header:
            self._write(MAGIC + struct.pack("<BQ", version, timestamp_us))

    def getvalue(self) -> bytes:
        """Everything written so far (only for the default in-memory buffer)."""
        if not isinstance(self._out, io.BytesIO):
            msg = "getvalue() needs the default in-memory buffer"
            raise TypeError(msg)
        return self._out.getvalue()

    def _write(self, data: bytes) -> None:
        self._out.write(data)
        self.size += len(data)

    def message(self, msg_type: int, payload: bytes) -> None:
        """Write one message of any type (also unknown ones, for tests)."""
        if len(payload) > MAX_MESSAGE_SIZE:
            msg = f"message payload of {len(payload)} bytes exceeds the uint16 msg_size"
            raise ValueError(msg)
        self._write(pack_message_header(len(payload), msg_type) + payload)

    def flag_bits(
        self,
        *,
        compat_flags: bytes = bytes(8),
        incompat_flags: bytes = bytes(8),
        appended_offsets: tuple[int, int, int] = (0, 0, 0),
        extra: bytes = b"",
    ) -> None:
        """'B': must come right after the header; ``extra`` models a longer future message."""
        payload = (
            compat_flags.ljust(8, b"\0")
            + incompat_flags.ljust(8, b"\0")
            + struct.pack("<3Q", *appended_offsets)
            + extra
        )
        self.message(MessageType.FLAG_BITS, payload)

    def format(self, definition: str) -> None:
        """'F': ``definition`` as on the wire, e.g. ``"vehicle:uint64_t timestamp;float[3] v;"``."""
        self.message(MessageType.FORMAT, definition.encode())

    def info(self, type_name: str, key: str, value: InfoValue) -> None:
        """'I': e.g. ``info("char", "sys_name", "PX4")``, ``info("int32_t", "time_ref_utc", 0)``."""
        self.message(MessageType.INFO, _key_value(type_name, key, value))

    def info_multiple(
        self, type_name: str, key: str, value: InfoValue, *, is_continued: bool = False
    ) -> None:
        """'M': one piece of a multi-valued key; ``is_continued`` extends the previous piece."""
        self.message(
            MessageType.INFO_MULTIPLE, bytes([is_continued]) + _key_value(type_name, key, value)
        )

    def parameter(self, name: str, value: float) -> None:
        """'P': an ``int32_t`` (int value) or ``float`` (float value) parameter."""
        self.message(MessageType.PARAMETER, _key_value(_param_type(value), name, value))

    def parameter_default(self, name: str, value: float, default_types: int) -> None:
        """'Q': a default value; ``default_types`` bit 0 system wide, bit 1 configuration."""
        payload = bytes([default_types]) + _key_value(_param_type(value), name, value)
        self.message(MessageType.PARAMETER_DEFAULT, payload)

    def add_logged_message(self, name: str, multi_id: int = 0, msg_id: int | None = None) -> int:
        """'A': subscribe ``name`` instance ``multi_id``; returns its msg_id (next free one)."""
        if msg_id is None:
            msg_id = self._next_msg_id
        self._next_msg_id = max(self._next_msg_id, msg_id + 1)
        self.message(
            MessageType.ADD_LOGGED_MSG, struct.pack("<BH", multi_id, msg_id) + name.encode()
        )
        return msg_id

    def remove_logged_message(self, msg_id: int) -> None:
        """'R': unsubscribe ``msg_id``."""
        self.message(MessageType.REMOVE_LOGGED_MSG, struct.pack("<H", msg_id))

    def data(self, msg_id: int, payload: bytes) -> None:
        """'D': one sample of subscription ``msg_id``, ``payload`` packed as its format says."""
        self.message(MessageType.DATA, struct.pack("<H", msg_id) + payload)

    def logging(self, level: int, timestamp_us: int, text: str) -> None:
        """'L': a logged string; ``level`` is the ASCII digit byte (``ord("6")`` = INFO)."""
        self.message(MessageType.LOGGING, struct.pack("<BQ", level, timestamp_us) + text.encode())

    def logging_tagged(self, level: int, tag: int, timestamp_us: int, text: str) -> None:
        """'C': a tagged logged string."""
        payload = struct.pack("<BHQ", level, tag, timestamp_us) + text.encode()
        self.message(MessageType.LOGGING_TAGGED, payload)

    def sync(self) -> None:
        """'S': a synchronization marker."""
        self.message(MessageType.SYNC, SYNC_MAGIC)

    def dropout(self, duration_ms: int) -> None:
        """'O': ``duration_ms`` of lost data."""
        self.message(MessageType.DROPOUT, struct.pack("<H", duration_ms))


def appended_flag_bits(offsets: tuple[int, int, int]) -> dict[str, bytes | tuple[int, int, int]]:
    """Keyword arguments for :meth:`ULogWriter.flag_bits` announcing appended data."""
    return {
        "incompat_flags": bytes([INCOMPAT_DATA_APPENDED]) + bytes(7),
        "appended_offsets": offsets,
    }


MAX_KEY_LENGTH = 0xFF
"""Keys are prefixed by a uint8 length."""


def _param_type(value: float) -> str:
    return "int32_t" if isinstance(value, int) else "float"


def _key_value(type_name: str, key: str, value: InfoValue) -> bytes:
    full_key = f"{key_type(type_name, value)} {key}".encode()
    if len(full_key) > MAX_KEY_LENGTH:
        msg = f"key {full_key!r} is longer than 255 bytes"
        raise ValueError(msg)
    return bytes([len(full_key)]) + full_key + encode_value(key_type(type_name, value), value)
