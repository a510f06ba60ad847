"""The only module that touches pymavlink: MAVLink 2 wire bytes <-> ulogstream's packet values.

Framing is our own (pymavlink's receive buffer only compacts when it runs exactly empty, so it
grows without bound on serial reads that split frames; protocol.md). The few messages ulogstream
uses are packed and unpacked here with ``struct`` and the compiled CRC (``fastcrc``, as pymavlink
uses it), their layouts and CRC_EXTRA taken from pymavlink's common dialect (:mod:`~ulogstream.
mavlink_crc`) and held byte for byte against pymavlink's own encode and decode by the tests.
pymavlink itself is imported only on a signed link (it checks and makes the signatures): an
unsigned recorder starts without it and spends about a microsecond per ack instead of five.
"""

from __future__ import annotations

import importlib
import struct
import time
from typing import TYPE_CHECKING, Final, cast

from ulogstream.download.packets import (
    FTP_DATA_MAX,
    LOG_DATA_CHUNK,
    FtpMessage,
    LogData,
    LogEntry,
    LogRequestData,
    LogRequestEnd,
    LogRequestList,
)
from ulogstream.errors import ConfigError
from ulogstream.mavlink_crc import CRC_EXTRAS
from ulogstream.stream.packets import (
    MAV_AUTOPILOT_INVALID,
    MAV_COMP_ID_AUTOPILOT1,
    MAV_STATE_ACTIVE,
    MAV_TYPE_ONBOARD_CONTROLLER,
    MAVLINK_MSG_ID_AUTOPILOT_VERSION,
    MAX_DATA_LENGTH,
    AutopilotVersion,
    CommandAck,
    CommandLong,
    Heartbeat,
    LoggingAck,
    LoggingData,
    LoggingPacket,
    MavlinkMessage,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from pymavlink.dialects.v20 import common as mavlink2

MAVLINK_MSG_ID_HEARTBEAT: Final = 0
MAVLINK_MSG_ID_COMMAND_LONG: Final = 76
MAVLINK_MSG_ID_COMMAND_ACK: Final = 77
MAVLINK_MSG_ID_LOGGING_DATA: Final = 266
MAVLINK_MSG_ID_LOGGING_DATA_ACKED: Final = 267
MAVLINK_MSG_ID_LOGGING_ACK: Final = 268

MAVLINK_MSG_ID_LOG_REQUEST_LIST: Final = 117
MAVLINK_MSG_ID_LOG_ENTRY: Final = 118
MAVLINK_MSG_ID_LOG_REQUEST_DATA: Final = 119
MAVLINK_MSG_ID_LOG_DATA: Final = 120
MAVLINK_MSG_ID_LOG_REQUEST_END: Final = 122
MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL: Final = 110

MAV_TYPE_QUADROTOR: Final = 2
MAV_AUTOPILOT_PX4: Final = 12

SIGNING_KEY_LENGTH: Final = 32
"""MAVLink 2 signing keys are 32 bytes (a SHA-256 secret)."""

STX_V1: Final = 0xFE
STX_V2: Final = 0xFD
HEADER_LEN_V1: Final = 6
HEADER_LEN_V2: Final = 10
CHECKSUM_LEN: Final = 2
SIGNATURE_LEN: Final = 13
MAX_FRAME_LEN: Final = HEADER_LEN_V2 + 255 + CHECKSUM_LEN + SIGNATURE_LEN
"""Longest MAVLink frame (280 bytes): the codec never holds more than this between calls."""

_IFLAG_SIGNED: Final = 0x01
_UID2_LENGTH: Final = 18
_MAX_ID: Final = 255
_LOGGING_HEADER_LEN: Final = 6
_SIGNING_EPOCH: Final = 1_420_070_400
"""MAVLink signing timestamps count 10 microsecond units since 2015-01-01 00:00 UTC."""

_CRC_EXTRA_BYTES: Final = {msg_id: bytes((extra,)) for msg_id, extra in CRC_EXTRAS.items()}
_unpack_logging_header: Callable[[bytes, int], tuple[int, int, int, int, int]] = struct.Struct(
    "<HBBBB"
).unpack_from
_pack_v2_header: Callable[[int, int, int, int, int, int, int, int, int], bytes] = struct.Struct(
    "<BBBBBBBHB"
).pack
_pack_logging_header: Callable[[int, int, int, int, int], bytes] = struct.Struct("<HBBBB").pack
_pack_checksum: Callable[[int], bytes] = struct.Struct("<H").pack


def _slow_crc(data: bytes | bytearray, crc: int) -> int:
    """CRC-16/MCRF4XX (MAVLink's X.25 checksum) in Python, where ``fastcrc`` is missing."""
    for byte in data:
        tmp = byte ^ (crc & 0xFF)
        tmp = (tmp ^ (tmp << 4)) & 0xFF
        crc = ((crc >> 8) ^ (tmp << 8) ^ (tmp << 3) ^ (tmp >> 4)) & 0xFFFF
    return crc


def _compiled_crc() -> Callable[[bytes | bytearray, int], int] | None:
    """``fastcrc``'s CRC-16/MCRF4XX (the one pymavlink uses), or None where it is missing."""
    try:
        from fastcrc import crc16  # noqa: PLC0415 (optional: a fallback follows)
    except ImportError:  # pragma: no cover - fastcrc has wheels for every platform we run on
        return None
    mcrf4xx: Callable[[bytes | bytearray, int], int] = crc16.mcrf4xx
    return mcrf4xx


_compiled = _compiled_crc()

FAST_CRC: Final[bool] = _compiled is not None
"""True when the compiled ``fastcrc`` is there (about 5x faster decoding; protocol.md)."""

_crc16: Callable[[bytes | bytearray, int], int] = _compiled if _compiled is not None else _slow_crc


def fast_crc_active() -> bool:
    """Tell whether both our framing and pymavlink's own checksum (signed links) use ``fastcrc``."""
    from pymavlink.dialects.v20 import common as mavlink2  # noqa: PLC0415 (signed links only)

    return FAST_CRC and mavlink2.x25crc is mavlink2._x25crc_fast  # noqa: SLF001


def _pymavlink() -> ModuleType:
    """Import pymavlink's common dialect (signed links only)."""
    dialect: ModuleType = importlib.import_module("pymavlink.dialects.v20.common")
    return dialect


def parse_signing_key(raw: bytes, *, source: str) -> bytes:
    """Turn the contents of a key file into a 32-byte MAVLink 2 signing key.

    Args:
        raw: The file's bytes: either exactly 32 raw bytes, or 64 hex digits (whitespace allowed).
        source: Where ``raw`` came from, for the error message (a path).

    Raises:
        ConfigError: ``raw`` is neither form.
    """
    if len(raw) == SIGNING_KEY_LENGTH:
        return bytes(raw)
    text = raw.strip()
    try:
        key = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != SIGNING_KEY_LENGTH:
        msg = (
            f"signing key {source} must hold 32 raw bytes or 64 hex digits, "
            f"but holds {len(raw)} bytes that are neither"
        )
        raise ConfigError(msg)
    return key


class MavlinkCodec:
    """MAVLink 2 decoder and encoder for one side of a link (our own system and component id).

    Decoding accepts any chunking; garbage between frames, frames with a wrong CRC or signature,
    and impossible field values are skipped and counted. Messages addressed to another system or
    component are dropped (and counted) here, so the core only sees what is meant for us;
    HEARTBEAT, which has no addressee, always passes.

    Args:
        system_id: Our MAVLink system id (1-255), put in every frame we send.
        component_id: Our component id (1-255; 155 for a log receiver, 1 for a simulated autopilot).
        signing_key: A 32-byte MAVLink 2 signing key: outgoing frames are signed and incoming
            frames must carry a valid signature. None disables signing.
        accept_unsigned: With a key, still accept unsigned incoming frames.
        link_id: The signing link id put in our signatures.

    Attributes:
        bad_frames: Corrupt frames: each loss of sync on a bad CRC counts once, plus each frame
            rejected for its signature (bad, replayed, or missing while a key is required) or
            for impossible field values.
        skipped_bytes: Bytes that were not part of any valid frame (line noise, damaged frames,
            messages outside the common dialect, unknown incompatibility flags).
        foreign_frames: Valid frames addressed to another system or component.
        ignored_frames: Valid frames of messages ulogstream does not use.
        messages: Messages ``decode`` returned.
    """

    def __init__(
        self,
        *,
        system_id: int,
        component_id: int,
        signing_key: bytes | None = None,
        accept_unsigned: bool = False,
        link_id: int = 0,
    ) -> None:
        if not 1 <= system_id <= _MAX_ID:
            msg = f"MAVLink system id must be 1-255, not {system_id}"
            raise ValueError(msg)
        if not 1 <= component_id <= _MAX_ID:
            msg = f"MAVLink component id must be 1-255, not {component_id}"
            raise ValueError(msg)
        if signing_key is not None and len(signing_key) != SIGNING_KEY_LENGTH:
            msg = f"a MAVLink signing key has 32 bytes, not {len(signing_key)}"
            raise ValueError(msg)
        self.system_id = system_id
        self.component_id = component_id
        self.bad_frames = 0
        self.skipped_bytes = 0
        self.foreign_frames = 0
        self.ignored_frames = 0
        self.messages = 0
        self._pending = bytearray()
        self._in_sync = True
        self._seq = 0
        """The sequence number of our next frame (unsigned links; pymavlink's on signed ones)."""
        self._mav: mavlink2.MAVLink | None = None
        """pymavlink, on a signed link only: it checks and makes the signatures."""
        # Unsigned LOGGING_DATA may take the struct fast path unless a signature is required.
        self._fast_unsigned = signing_key is None or accept_unsigned
        if signing_key is not None:
            self._mav = _pymavlink().MAVLink(None, srcSystem=system_id, srcComponent=component_id)
            signing = self._mav.signing
            signing.secret_key = bytes(signing_key)
            signing.sign_outgoing = True
            signing.link_id = link_id
            signing.timestamp = _signing_timestamp(time.time())
            if accept_unsigned:
                signing.allow_unsigned_callback = _allow_unsigned

    @property
    def valid_frames(self) -> int:
        """Frames that passed every check: returned, addressed to others, or of unused messages."""
        return self.messages + self.foreign_frames + self.ignored_frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held until the next ``decode`` (< ``MAX_FRAME_LEN``)."""
        return len(self._pending)

    def bytes_wanted(self) -> int:
        """Fewest further bytes before :meth:`decode` can return a frame: a lower bound.

        The held bytes start with a frame's start byte (noise is dropped at once). Until its
        header is whole, the bound is the rest of the header: there :meth:`decode` may find an
        unknown message id and resync at the next byte. With the header held, no frame can come
        out before this one's last byte (a frame hidden behind a false start is found only when
        the false frame's CRC fails), so the bound is exact. With nothing held, it is the
        shortest frame (MAVLink 1, empty payload).
        """
        pending = self._pending
        have = len(pending)
        if not have:
            return HEADER_LEN_V1 + CHECKSUM_LEN
        if pending[0] == STX_V1:
            header_len = HEADER_LEN_V1
            size = header_len + (pending[1] if have > 1 else 0) + CHECKSUM_LEN
        else:
            header_len = HEADER_LEN_V2
            size = header_len + (pending[1] if have > 1 else 0) + CHECKSUM_LEN
            if have > 2 and pending[2] & _IFLAG_SIGNED:  # noqa: PLR2004 (the flags byte)
                size += SIGNATURE_LEN
        if have < header_len:
            return header_len - have
        return max(1, size - have)

    def decode(self, data: bytes) -> list[MavlinkMessage]:
        """Parse ``data`` (any chunking: a datagram, a serial read, a single byte).

        Returns:
            The messages completed by ``data`` and addressed to us (or broadcast), in order.
        """
        return cast("list[MavlinkMessage]", self._decode(data, _USED_IDS))

    def decode_with_log_download(self, data: bytes) -> list[MavlinkMessage | LogDownloadMessage]:
        """:meth:`decode`, also returning the log download messages.

        LOG_ENTRY and LOG_DATA (a downloader's side), and LOG_REQUEST_LIST, _DATA and _END
        addressed to us (a simulated vehicle's side).
        """
        return self._decode(data, _DOWNLOAD_USED_IDS)

    def _decode(
        self, data: bytes, used_ids: frozenset[int]
    ) -> list[MavlinkMessage | LogDownloadMessage]:
        if self._pending:
            self._pending += data
            buf: bytes | bytearray = self._pending
        else:
            buf = data
        out: list[MavlinkMessage | LogDownloadMessage] = []
        end = len(buf)
        pos = 0
        while pos < end:
            stx = buf[pos]
            if stx == STX_V2:
                if end - pos < HEADER_LEN_V2:
                    break
                payload_len = buf[pos + 1]
                flags = buf[pos + 2]
                msg_id = buf[pos + 7] | buf[pos + 8] << 8 | buf[pos + 9] << 16
                header_len = HEADER_LEN_V2
                size = HEADER_LEN_V2 + payload_len + CHECKSUM_LEN
                if flags & _IFLAG_SIGNED:
                    size += SIGNATURE_LEN
            elif stx == STX_V1:
                if end - pos < HEADER_LEN_V1:
                    break
                payload_len = buf[pos + 1]
                flags = 0
                msg_id = buf[pos + 5]
                header_len = HEADER_LEN_V1
                size = HEADER_LEN_V1 + payload_len + CHECKSUM_LEN
            else:
                pos = self._skip_noise(buf, pos)
                continue
            extra = _CRC_EXTRA_BYTES.get(msg_id)
            if extra is None or flags & ~_IFLAG_SIGNED:
                # Not a frame we can check: resync at the next start byte, as for noise.
                self.skipped_bytes += 1
                pos += 1
                continue
            if end - pos < size:
                break
            crc_end = pos + header_len + payload_len
            crc = _crc16(extra, _crc16(buf[pos + 1 : crc_end], 0xFFFF))
            if crc != buf[crc_end] | buf[crc_end + 1] << 8:
                # A false start byte or a damaged frame: rescan from the next byte so a real
                # frame hidden behind a bogus length is not thrown away. Start bytes inside the
                # damaged frame fail too; count the loss of sync once, not each of them.
                if self._in_sync:
                    self.bad_frames += 1
                    self._in_sync = False
                self.skipped_bytes += 1
                pos += 1
                continue
            self._in_sync = True
            if msg_id in _LOGGING_DATA_IDS and not flags and self._fast_unsigned:
                message: MavlinkMessage | LogDownloadMessage | None = self._logging_packet(
                    bytes(buf[pos + HEADER_LEN_V2 : crc_end]),
                    needs_ack=msg_id == MAVLINK_MSG_ID_LOGGING_DATA_ACKED,
                    system_id=buf[pos + 5],
                    component_id=buf[pos + 6],
                )
            elif msg_id not in used_ids:
                # Telemetry on the same link (an onboard link carries ~400 frames/s besides the
                # log): checked for sync by its CRC, never unpacked.
                self.ignored_frames += 1
                message = None
            elif self._mav is not None and not self._signature_accepted(
                bytearray(buf[pos : pos + size])
            ):
                message = None
            else:
                ids = pos + 3 if header_len == HEADER_LEN_V1 else pos + 5
                message = self._message(
                    msg_id, bytes(buf[pos + header_len : crc_end]), buf[ids], buf[ids + 1]
                )
            pos += size
            if message is not None:
                out.append(message)
        if pos >= end:
            self._pending = bytearray()
        elif buf is not self._pending or pos:
            self._pending = bytearray(buf[pos:])
        self.messages += len(out)
        return out

    def decode_logging_data(self, datagram: bytes) -> LoggingData | None:
        """The fields of a datagram that is exactly one plain LOGGING_DATA frame for us.

        The data phase's common case, at 900-2000 datagrams/s: an unsigned MAVLink 2
        LOGGING_DATA frame alone in its datagram, with a valid CRC, addressed to us (or to
        everyone), its header fields whole (trailing zeros of the data may be cut). Such a
        datagram is decoded and counted exactly as :meth:`decode` would, without building a
        message; anything else returns None untouched and goes to :meth:`decode`.

        Returns:
            ``(system_id, component_id, target_system, target_component, sequence,
            first_message_offset, data)``, or None.
        """
        size = len(datagram)
        if not self._one_plain_frame(
            datagram, _LOGGING_DATA_MIN_FRAME, _LOGGING_DATA_ID_BYTES, _LOGGING_DATA_CRC_EXTRA
        ):
            return None
        sequence, target_system, target_component, length, first_message_offset = (
            _unpack_logging_header(datagram, HEADER_LEN_V2)
        )
        if (
            length > MAX_DATA_LENGTH
            or target_system not in (0, self.system_id)
            or target_component not in (0, self.component_id)
        ):
            return None
        start = HEADER_LEN_V2 + _LOGGING_HEADER_LEN
        end = start + length
        data = datagram[start:end]
        if end > size - CHECKSUM_LEN:  # MAVLink 2 cut the payload's trailing zeros
            data = datagram[start : size - CHECKSUM_LEN] + bytes(end - size + CHECKSUM_LEN)
        self._in_sync = True
        self.messages += 1
        return (
            datagram[5],
            datagram[6],
            target_system,
            target_component,
            sequence,
            first_message_offset,
            data,
        )

    def decode_log_data(self, datagram: bytes) -> tuple[int, int, int, bytes] | None:
        """The fields of a datagram that is exactly one plain LOG_DATA frame.

        A download's common case, at up to 90,000 datagrams/s: an unsigned MAVLink 2 LOG_DATA
        frame alone in its datagram, with a valid CRC. It is counted exactly as
        :meth:`decode_with_log_download` would count it, without building a message; anything
        else returns None untouched and goes there.

        Returns:
            ``(system_id, id, ofs, data)``, or None.
        """
        size = len(datagram)
        if not self._one_plain_frame(
            datagram, _LOG_DATA_MIN_FRAME, _LOG_DATA_ID_BYTES, _LOG_DATA_CRC_EXTRA
        ):
            return None
        ofs, log_id, count = _unpack_log_data_header(datagram, HEADER_LEN_V2)
        if count > LOG_DATA_CHUNK:
            return None
        start = HEADER_LEN_V2 + _LOG_DATA_HEADER_LEN
        end = start + count
        data = datagram[start:end]
        if end > size - CHECKSUM_LEN:  # MAVLink 2 cut the payload's trailing zeros
            data = datagram[start : size - CHECKSUM_LEN] + bytes(end - size + CHECKSUM_LEN)
        self._in_sync = True
        self.messages += 1
        return datagram[5], log_id, ofs, data

    def _one_plain_frame(
        self, datagram: bytes, min_frame: int, id_bytes: bytes, crc_extra: bytes
    ) -> bool:
        """Whether ``datagram`` is exactly one plain frame of the message with ``id_bytes``.

        Unsigned MAVLink 2, at least ``min_frame`` long, a valid CRC, and nothing held.
        """
        size = len(datagram)
        if (
            size < min_frame
            or datagram[0] != STX_V2
            or datagram[2]  # incompatibility flags: a signed frame
            or datagram[7:10] != id_bytes
            or size != datagram[1] + (HEADER_LEN_V2 + CHECKSUM_LEN)
            or self._pending
            or self._mav is not None
        ):
            return False
        return _crc16(crc_extra, _crc16(datagram[1:-2], 0xFFFF)) == datagram[-2] | datagram[-1] << 8

    def _skip_noise(self, buf: bytes | bytearray, pos: int) -> int:
        next_v2 = buf.find(STX_V2, pos)
        next_v1 = buf.find(STX_V1, pos)
        if next_v2 < 0:
            nxt = len(buf) if next_v1 < 0 else next_v1
        else:
            nxt = next_v2 if next_v1 < 0 else min(next_v1, next_v2)
        self.skipped_bytes += nxt - pos
        return nxt

    def _addressed_to_us(self, target_system: int, target_component: int) -> bool:
        if target_system in {0, self.system_id} and target_component in {0, self.component_id}:
            return True
        self.foreign_frames += 1
        return False

    def _logging_packet(
        self, payload: bytes, *, needs_ack: bool, system_id: int, component_id: int
    ) -> LoggingPacket | None:
        if len(payload) < _LOGGING_HEADER_LEN:
            payload += bytes(_LOGGING_HEADER_LEN - len(payload))  # MAVLink 2 cut trailing zeros
        sequence, target_system, target_component, length, first_message_offset = (
            _unpack_logging_header(payload, 0)
        )
        if length > MAX_DATA_LENGTH:
            self.bad_frames += 1
            return None
        if not self._addressed_to_us(target_system, target_component):
            return None
        data = payload[_LOGGING_HEADER_LEN : _LOGGING_HEADER_LEN + length]
        if len(data) < length:
            data += bytes(length - len(data))  # trailing zeros of data[:length] were truncated
        return LoggingPacket(
            sequence=sequence,
            first_message_offset=first_message_offset,
            data=data,
            needs_ack=needs_ack,
            system_id=system_id,
            component_id=component_id,
            target_system=target_system,
            target_component=target_component,
        )

    def _signature_accepted(self, frame: bytearray) -> bool:
        """Whether pymavlink accepts the signature of ``frame`` (a link with a signing key)."""
        assert self._mav is not None  # noqa: S101 (called on signed links only)
        try:
            self._mav.decode(frame)
        except _pymavlink().MAVError:
            self.bad_frames += 1  # the CRC matched, so this is a rejected signature
            return False
        return True

    def _message(
        self, msg_id: int, payload: bytes, system_id: int, component_id: int
    ) -> MavlinkMessage | LogDownloadMessage | None:
        """Unpack the payload of a checked frame of one of :data:`_DOWNLOAD_USED_IDS`."""
        if msg_id in _DOWNLOAD_IDS:
            return self._download_message(msg_id, payload, system_id)
        if msg_id in _LOGGING_DATA_IDS:
            return self._logging_packet(
                payload,
                needs_ack=msg_id == MAVLINK_MSG_ID_LOGGING_DATA_ACKED,
                system_id=system_id,
                component_id=component_id,
            )
        layout = _LAYOUTS[msg_id]
        if len(payload) < layout.size:
            payload += bytes(layout.size - len(payload))  # MAVLink 2 cut trailing zeros
        if msg_id == MAVLINK_MSG_ID_HEARTBEAT:
            _custom_mode, mav_type, autopilot, base_mode, _status, _version = layout.unpack_from(
                payload
            )
            return Heartbeat(
                system_id=system_id,
                component_id=component_id,
                mav_type=mav_type,
                autopilot=autopilot,
                base_mode=base_mode,
            )
        if msg_id == MAVLINK_MSG_ID_COMMAND_ACK:
            # Not filtered by target: PX4 sends COMMAND_ACKs on every link, and another client's
            # accepted LOGGING_STOP is how the session learns that our stream ended.
            command, result, _progress, _param2, target_system, target_component = (
                layout.unpack_from(payload)
            )
            return CommandAck(
                command=command,
                result=result,
                system_id=system_id,
                component_id=component_id,
                target_system=target_system,
                target_component=target_component,
            )
        if msg_id == MAVLINK_MSG_ID_AUTOPILOT_VERSION:
            _capabilities, uid, *_versions, uid2 = layout.unpack_from(payload)
            return AutopilotVersion(
                uid=uid, uid2=uid2, system_id=system_id, component_id=component_id
            )
        if msg_id == MAVLINK_MSG_ID_COMMAND_LONG:
            param1, *_params, command, target_system, target_component, _confirmation = (
                layout.unpack_from(payload)
            )
            if not self._addressed_to_us(target_system, target_component):
                return None
            return CommandLong(
                command=command,
                param1=param1,
                system_id=system_id,
                component_id=component_id,
                target_system=target_system,
                target_component=target_component,
            )
        sequence, target_system, target_component = layout.unpack_from(payload)  # LOGGING_ACK
        if not self._addressed_to_us(target_system, target_component):
            return None
        return LoggingAck(
            sequence=sequence,
            system_id=system_id,
            component_id=component_id,
            target_system=target_system,
            target_component=target_component,
        )

    def _download_message(
        self, msg_id: int, payload: bytes, system_id: int
    ) -> LogDownloadMessage | None:
        layout = _LAYOUTS[msg_id]
        if len(payload) < layout.size:
            payload += bytes(layout.size - len(payload))  # MAVLink 2 cut trailing zeros
        if msg_id == MAVLINK_MSG_ID_LOG_DATA:
            ofs, log_id, count, data = layout.unpack_from(payload)
            if count > LOG_DATA_CHUNK:
                self.bad_frames += 1
                return None
            return LogData(id=log_id, ofs=ofs, data=data[:count], system_id=system_id)
        if msg_id == MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL:
            return self._ftp_message(payload, system_id)
        if msg_id == MAVLINK_MSG_ID_LOG_ENTRY:
            time_utc, size, log_id, num_logs, last_log_num = layout.unpack_from(payload)
            return LogEntry(
                id=log_id,
                num_logs=num_logs,
                last_log_num=last_log_num,
                time_utc=time_utc,
                size=size,
                system_id=system_id,
            )
        # The requests (a simulated vehicle's side): addressed by their last two fields.
        *fields, target_system, target_component = layout.unpack_from(payload)
        if not self._addressed_to_us(target_system, target_component):
            return None
        if msg_id == MAVLINK_MSG_ID_LOG_REQUEST_DATA:
            ofs, count, log_id = fields
            return LogRequestData(id=log_id, ofs=ofs, count=count)
        if msg_id == MAVLINK_MSG_ID_LOG_REQUEST_LIST:
            start, end = fields
            return LogRequestList(start=start, end=end)
        return LogRequestEnd()

    def _ftp_message(self, payload: bytes, system_id: int) -> FtpMessage | None:
        _network, target_system, target_component, ftp = _LAYOUTS[
            MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL
        ].unpack_from(payload)
        if not self._addressed_to_us(target_system, target_component):
            return None
        seq, session, opcode, size, req_opcode, burst_complete, offset = _FTP_HEADER.unpack_from(
            ftp
        )
        if size > FTP_DATA_MAX:
            self.bad_frames += 1
            return None
        start = _FTP_HEADER.size
        return FtpMessage(
            seq=seq,
            session=session,
            opcode=opcode,
            req_opcode=req_opcode,
            burst_complete=bool(burst_complete),
            offset=offset,
            data=ftp[start : start + size],
            system_id=system_id,
        )

    def encode_ftp(self, message: FtpMessage, target_system: int, target_component: int) -> bytes:
        """FILE_TRANSFER_PROTOCOL carrying ``message`` to ``target_system``/``target_component``.

        Raises:
            ValueError: ``message.data`` is longer than 239 bytes.
        """
        size = len(message.data) if message.size is None else message.size
        if len(message.data) > FTP_DATA_MAX or size > FTP_DATA_MAX:
            msg = f"a MAVLink FTP payload carries at most {FTP_DATA_MAX} bytes, not {size}"
            raise ValueError(msg)
        ftp = (
            _FTP_HEADER.pack(
                message.seq & 0xFFFF,
                message.session,
                message.opcode,
                size,
                message.req_opcode,
                int(message.burst_complete),
                message.offset,
            )
            + message.data
        )
        if self._mav is not None:
            return self._signed_frame(
                self._mav.file_transfer_protocol_encode(
                    0, target_system, target_component, list(ftp.ljust(251, b"\0"))
                )
            )
        payload = _LAYOUTS[MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL].pack(
            0, target_system, target_component, ftp
        )
        return self._frame(MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL, payload)

    def encode_log_request(
        self,
        request: LogRequestList | LogRequestData | LogRequestEnd,
        target_system: int,
        target_component: int,
    ) -> bytes:
        """LOG_REQUEST_LIST, LOG_REQUEST_DATA or LOG_REQUEST_END, to the vehicle."""
        mav = self._mav
        match request:
            case LogRequestList(start, end):
                if mav is not None:
                    return self._signed_frame(
                        mav.log_request_list_encode(target_system, target_component, start, end)
                    )
                msg_id = MAVLINK_MSG_ID_LOG_REQUEST_LIST
                fields: tuple[int, ...] = (start, end)
            case LogRequestData(log_id, ofs, count):
                if mav is not None:
                    return self._signed_frame(
                        mav.log_request_data_encode(
                            target_system, target_component, log_id, ofs, count
                        )
                    )
                msg_id = MAVLINK_MSG_ID_LOG_REQUEST_DATA
                fields = (ofs, count, log_id)
            case _:
                if mav is not None:
                    return self._signed_frame(
                        mav.log_request_end_encode(target_system, target_component)
                    )
                msg_id = MAVLINK_MSG_ID_LOG_REQUEST_END
                fields = ()
        return self._frame(msg_id, _LAYOUTS[msg_id].pack(*fields, target_system, target_component))

    def encode_log_entry(self, entry: LogEntry) -> bytes:
        """LOG_ENTRY (a simulated vehicle's answer to LOG_REQUEST_LIST)."""
        payload = _LAYOUTS[MAVLINK_MSG_ID_LOG_ENTRY].pack(
            entry.time_utc, entry.size, entry.id, entry.num_logs, entry.last_log_num
        )
        return self._frame(MAVLINK_MSG_ID_LOG_ENTRY, payload)

    def encode_log_data(self, data: LogData) -> bytes:
        """LOG_DATA (a simulated vehicle's answer to LOG_REQUEST_DATA).

        Raises:
            ValueError: ``data.data`` is longer than 90 bytes.
        """
        count = len(data.data)
        if count > LOG_DATA_CHUNK:
            msg = f"LOG_DATA carries at most {LOG_DATA_CHUNK} bytes, not {count}"
            raise ValueError(msg)
        payload = _LAYOUTS[MAVLINK_MSG_ID_LOG_DATA].pack(data.ofs, data.id, count, data.data)
        return self._frame(MAVLINK_MSG_ID_LOG_DATA, payload)

    def _frame(self, msg_id: int, payload: bytes) -> bytes:
        """An unsigned MAVLink 2 frame of ``payload`` from us, as pymavlink packs it."""
        payload = payload.rstrip(b"\0") or b"\0"  # MAVLink 2 drops trailing zeros, keeping one
        seq = self._seq
        self._seq = (seq + 1) & 0xFF
        frame = _pack_v2_header(
            STX_V2,
            len(payload),
            0,
            0,
            seq,
            self.system_id,
            self.component_id,
            msg_id & 0xFFFF,
            msg_id >> 16,
        )
        frame += payload
        crc = _crc16(_CRC_EXTRA_BYTES[msg_id], _crc16(frame[1:], 0xFFFF))
        return frame + _pack_checksum(crc)

    def _signed_frame(self, message: mavlink2.MAVLink_message) -> bytes:
        """``message`` packed and signed by pymavlink (a link with a signing key)."""
        assert self._mav is not None  # noqa: S101 (called on signed links only)
        frame: bytes = message.pack(self._mav)
        self._mav.seq = (self._mav.seq + 1) % 256
        return frame

    def encode_logging_ack(self, sequence: int, target_system: int, target_component: int) -> bytes:
        """LOGGING_ACK for LOGGING_DATA_ACKED ``sequence``, to the vehicle that sent it."""
        if self._mav is not None:
            return self._signed_frame(
                self._mav.logging_ack_encode(
                    target_system=target_system,
                    target_component=target_component,
                    sequence=sequence,
                )
            )
        return self._frame(
            MAVLINK_MSG_ID_LOGGING_ACK,
            _LAYOUTS[MAVLINK_MSG_ID_LOGGING_ACK].pack(sequence, target_system, target_component),
        )

    def encode_command_long(
        self, command: int, param1: float, target_system: int, target_component: int
    ) -> bytes:
        """COMMAND_LONG ``command`` with ``param1``.

        LOGGING_START 2510 with param1 0 = ULog, LOGGING_STOP 2511, REQUEST_MESSAGE 512 with
        param1 the message id.
        """
        if self._mav is not None:
            return self._signed_frame(
                self._mav.command_long_encode(
                    target_system=target_system,
                    target_component=target_component,
                    command=command,
                    confirmation=0,
                    param1=param1,
                    param2=0,
                    param3=0,
                    param4=0,
                    param5=0,
                    param6=0,
                    param7=0,
                )
            )
        layout = _LAYOUTS[MAVLINK_MSG_ID_COMMAND_LONG]
        payload = layout.pack(param1, 0, 0, 0, 0, 0, 0, command, target_system, target_component, 0)
        return self._frame(MAVLINK_MSG_ID_COMMAND_LONG, payload)

    def encode_autopilot_version(self, *, uid: int, uid2: bytes) -> bytes:
        """AUTOPILOT_VERSION with the unique ids ``uid`` and ``uid2`` (a simulated vehicle's)."""
        uid2 = uid2.ljust(_UID2_LENGTH, b"\0")
        if self._mav is not None:
            return self._signed_frame(
                self._mav.autopilot_version_encode(
                    capabilities=0,
                    flight_sw_version=0,
                    middleware_sw_version=0,
                    os_sw_version=0,
                    board_version=0,
                    flight_custom_version=bytes(8),
                    middleware_custom_version=bytes(8),
                    os_custom_version=bytes(8),
                    vendor_id=0,
                    product_id=0,
                    uid=uid,
                    uid2=uid2,
                )
            )
        payload = _LAYOUTS[MAVLINK_MSG_ID_AUTOPILOT_VERSION].pack(
            0, uid, 0, 0, 0, 0, 0, 0, bytes(8), bytes(8), bytes(8), uid2
        )
        return self._frame(MAVLINK_MSG_ID_AUTOPILOT_VERSION, payload)

    def encode_heartbeat(
        self,
        *,
        mav_type: int = MAV_TYPE_ONBOARD_CONTROLLER,
        autopilot: int = MAV_AUTOPILOT_INVALID,
        system_status: int = MAV_STATE_ACTIVE,
        base_mode: int = 0,
    ) -> bytes:
        """HEARTBEAT; the defaults describe a log receiver (onboard controller, no autopilot).

        A simulated vehicle passes ``mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4``
        (and ``base_mode=MAV_MODE_FLAG_SAFETY_ARMED`` when armed).
        """
        if self._mav is not None:
            return self._signed_frame(
                self._mav.heartbeat_encode(
                    type=mav_type,
                    autopilot=autopilot,
                    base_mode=base_mode,
                    custom_mode=0,
                    system_status=system_status,
                )
            )
        payload = _LAYOUTS[MAVLINK_MSG_ID_HEARTBEAT].pack(
            0, mav_type, autopilot, base_mode, system_status, MAVLINK_VERSION
        )
        return self._frame(MAVLINK_MSG_ID_HEARTBEAT, payload)

    def encode_command_ack(
        self, command: int, result: int, target_system: int, target_component: int
    ) -> bytes:
        """COMMAND_ACK of ``command`` with MAV_RESULT ``result`` (a simulated vehicle's reply)."""
        if self._mav is not None:
            return self._signed_frame(
                self._mav.command_ack_encode(
                    command=command,
                    result=result,
                    target_system=target_system,
                    target_component=target_component,
                )
            )
        payload = _LAYOUTS[MAVLINK_MSG_ID_COMMAND_ACK].pack(
            command, result, 0, 0, target_system, target_component
        )
        return self._frame(MAVLINK_MSG_ID_COMMAND_ACK, payload)

    def encode_logging_data(
        self,
        sequence: int,
        target_system: int,
        target_component: int,
        first_message_offset: int,
        data: bytes,
        *,
        acked: bool,
    ) -> bytes:
        """LOGGING_DATA (or LOGGING_DATA_ACKED when ``acked``) carrying ``data`` (<= 249 bytes).

        Raises:
            ValueError: ``data`` is longer than 249 bytes.
        """
        length = len(data)
        if length > MAX_DATA_LENGTH:
            msg = f"LOGGING_DATA carries at most {MAX_DATA_LENGTH} bytes, not {length}"
            raise ValueError(msg)
        msg_id = MAVLINK_MSG_ID_LOGGING_DATA_ACKED if acked else MAVLINK_MSG_ID_LOGGING_DATA
        if self._mav is not None:
            padded = data + bytes(MAX_DATA_LENGTH - length)
            encode = self._mav.logging_data_acked_encode if acked else self._mav.logging_data_encode
            return self._signed_frame(
                encode(
                    target_system=target_system,
                    target_component=target_component,
                    sequence=sequence,
                    length=length,
                    first_message_offset=first_message_offset,
                    data=padded,
                )
            )
        header = _pack_logging_header(
            sequence, target_system, target_component, length, first_message_offset
        )
        return self._frame(msg_id, header + data)


_LOGGING_DATA_IDS: Final = frozenset(
    {MAVLINK_MSG_ID_LOGGING_DATA, MAVLINK_MSG_ID_LOGGING_DATA_ACKED}
)
_LOGGING_DATA_ID_BYTES: Final = MAVLINK_MSG_ID_LOGGING_DATA.to_bytes(3, "little")
_LOGGING_DATA_CRC_EXTRA: Final = bytes((CRC_EXTRAS[MAVLINK_MSG_ID_LOGGING_DATA],))
_LOGGING_DATA_MIN_FRAME: Final = HEADER_LEN_V2 + _LOGGING_HEADER_LEN + CHECKSUM_LEN
"""The shortest LOGGING_DATA frame :meth:`MavlinkCodec.decode_logging_data` takes: its header
fields whole (MAVLink 2 may cut trailing zeros; such frames go through ``decode``)."""

_LOG_DATA_HEADER_LEN: Final = 7
_LOG_DATA_ID_BYTES: Final = MAVLINK_MSG_ID_LOG_DATA.to_bytes(3, "little")
_LOG_DATA_CRC_EXTRA: Final = bytes((CRC_EXTRAS[MAVLINK_MSG_ID_LOG_DATA],))
_LOG_DATA_MIN_FRAME: Final = HEADER_LEN_V2 + _LOG_DATA_HEADER_LEN + CHECKSUM_LEN
"""The shortest LOG_DATA frame :meth:`MavlinkCodec.decode_log_data` takes: ofs, id and count
whole (MAVLink 2 may cut trailing zeros; shorter frames go through the general path)."""
_unpack_log_data_header: Callable[[bytes, int], tuple[int, int, int]] = struct.Struct(
    "<IHB"
).unpack_from

_USED_IDS: Final = frozenset(
    {
        MAVLINK_MSG_ID_HEARTBEAT,
        MAVLINK_MSG_ID_COMMAND_LONG,
        MAVLINK_MSG_ID_COMMAND_ACK,
        MAVLINK_MSG_ID_LOGGING_ACK,
        MAVLINK_MSG_ID_AUTOPILOT_VERSION,
        *_LOGGING_DATA_IDS,
    }
)
"""The messages :meth:`MavlinkCodec.decode` returns; frames of any other id are counted only."""

_DOWNLOAD_IDS: Final = frozenset(
    {
        MAVLINK_MSG_ID_LOG_REQUEST_LIST,
        MAVLINK_MSG_ID_LOG_ENTRY,
        MAVLINK_MSG_ID_LOG_REQUEST_DATA,
        MAVLINK_MSG_ID_LOG_DATA,
        MAVLINK_MSG_ID_LOG_REQUEST_END,
        MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL,
    }
)
_DOWNLOAD_USED_IDS: Final = _USED_IDS | _DOWNLOAD_IDS
"""The messages :meth:`MavlinkCodec.decode_with_log_download` returns."""

LogDownloadMessage = (
    LogEntry | LogData | LogRequestList | LogRequestData | LogRequestEnd | FtpMessage
)
"""The log download messages as the codec returns them."""

_LAYOUTS: Final[dict[int, struct.Struct]] = {
    MAVLINK_MSG_ID_HEARTBEAT: struct.Struct("<IBBBBB"),
    MAVLINK_MSG_ID_COMMAND_LONG: struct.Struct("<7fHBBB"),
    MAVLINK_MSG_ID_COMMAND_ACK: struct.Struct("<HBBiBB"),
    MAVLINK_MSG_ID_LOGGING_ACK: struct.Struct("<HBB"),
    MAVLINK_MSG_ID_AUTOPILOT_VERSION: struct.Struct("<QQIIIIHH8s8s8s18s"),
    MAVLINK_MSG_ID_LOG_REQUEST_LIST: struct.Struct("<HHBB"),
    MAVLINK_MSG_ID_LOG_ENTRY: struct.Struct("<IIHHH"),
    MAVLINK_MSG_ID_LOG_REQUEST_DATA: struct.Struct("<IIHBB"),
    MAVLINK_MSG_ID_LOG_DATA: struct.Struct(f"<IHB{LOG_DATA_CHUNK}s"),
    MAVLINK_MSG_ID_LOG_REQUEST_END: struct.Struct("<BB"),
    MAVLINK_MSG_ID_FILE_TRANSFER_PROTOCOL: struct.Struct("<BBB251s"),
}
"""Wire layouts (fields largest first, extensions last) of the messages we pack and unpack but
LOGGING_DATA: HEARTBEAT (custom_mode, type, autopilot, base_mode, system_status,
mavlink_version), COMMAND_LONG (param1-7, command, target_system, target_component,
confirmation), COMMAND_ACK (command, result, then the extensions progress, result_param2,
target_system, target_component), LOGGING_ACK (sequence, target_system, target_component),
AUTOPILOT_VERSION (capabilities, uid, the four versions, vendor_id, product_id, the three custom
versions, then the extension uid2), and
the log download's LOG_REQUEST_LIST (start, end, targets), LOG_ENTRY (time_utc, size, id,
num_logs, last_log_num), LOG_REQUEST_DATA (ofs, count, id, targets), LOG_DATA (ofs, id, count,
data) and LOG_REQUEST_END (targets), and MAVLink FTP's FILE_TRANSFER_PROTOCOL (target_network,
targets, payload: see :data:`_FTP_HEADER`)."""

_FTP_HEADER: Final = struct.Struct("<HBBBBBxI")
"""A MAVLink FTP payload's header: seq_number, session, opcode, size, req_opcode,
burst_complete, padding, offset; its data follows."""

MAVLINK_VERSION: Final = 3
"""HEARTBEAT's ``mavlink_version`` field: the dialect's version, as pymavlink sends it."""


def _signing_timestamp(now: float) -> int:
    return int((max(now, _SIGNING_EPOCH) - _SIGNING_EPOCH) * 100_000)


def _allow_unsigned(_mav: object, _msg_id: int) -> bool:
    return True


__all__ = [
    "CRC_EXTRAS",
    "FAST_CRC",
    "MAVLINK_MSG_ID_COMMAND_ACK",
    "MAVLINK_MSG_ID_COMMAND_LONG",
    "MAVLINK_MSG_ID_HEARTBEAT",
    "MAVLINK_MSG_ID_LOGGING_ACK",
    "MAVLINK_MSG_ID_LOGGING_DATA",
    "MAVLINK_MSG_ID_LOGGING_DATA_ACKED",
    "MAVLINK_MSG_ID_LOG_DATA",
    "MAVLINK_MSG_ID_LOG_ENTRY",
    "MAVLINK_MSG_ID_LOG_REQUEST_DATA",
    "MAVLINK_MSG_ID_LOG_REQUEST_END",
    "MAVLINK_MSG_ID_LOG_REQUEST_LIST",
    "MAV_AUTOPILOT_INVALID",
    "MAV_AUTOPILOT_PX4",
    "MAV_COMP_ID_AUTOPILOT1",
    "MAV_STATE_ACTIVE",
    "MAV_TYPE_QUADROTOR",
    "MAX_FRAME_LEN",
    "SIGNING_KEY_LENGTH",
    "LogDownloadMessage",
    "MavlinkCodec",
    "fast_crc_active",
    "parse_signing_key",
]
