"""The log download messages on the wire: byte for byte as pymavlink packs and reads them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymavlink.dialects.v20 import common as mavlink2

from ulogstream.download.packets import (
    FTP_DATA_MAX,
    FtpMessage,
    FtpOpcode,
    LogData,
    LogEntry,
    LogRequestData,
    LogRequestEnd,
    LogRequestList,
)
from ulogstream.mavlink_codec import MavlinkCodec


def _frame(mav: mavlink2.MAVLink, message: mavlink2.MAVLink_message) -> bytes:
    frame: bytes = message.pack(mav)
    mav.seq = (mav.seq + 1) % 256
    return frame


@given(
    target=st.tuples(st.integers(0, 255), st.integers(0, 255)),
    log_id=st.integers(0, 0xFFFF),
    ofs=st.integers(0, 0xFFFFFFFF),
    count=st.integers(0, 0xFFFFFFFF),
)
def test_requests_are_pymavlinks_byte_for_byte(
    target: tuple[int, int], log_id: int, ofs: int, count: int
) -> None:
    ours = MavlinkCodec(system_id=42, component_id=155)
    theirs = mavlink2.MAVLink(None, srcSystem=42, srcComponent=155)
    system, component = target
    pairs: list[
        tuple[LogRequestList | LogRequestData | LogRequestEnd, mavlink2.MAVLink_message]
    ] = [
        (
            LogRequestList(log_id, count & 0xFFFF),
            theirs.log_request_list_encode(system, component, log_id, count & 0xFFFF),
        ),
        (
            LogRequestData(log_id, ofs, count),
            theirs.log_request_data_encode(system, component, log_id, ofs, count),
        ),
        (LogRequestEnd(), theirs.log_request_end_encode(system, component)),
    ]
    for request, message in pairs:
        assert ours.encode_log_request(request, system, component) == _frame(theirs, message)


@given(
    log_id=st.integers(0, 0xFFFF),
    ofs=st.integers(0, 0xFFFFFFFF),
    data=st.binary(max_size=90),
    time_utc=st.integers(0, 0xFFFFFFFF),
)
def test_answers_are_pymavlinks_and_decode_as_pymavlink_reads_them(
    log_id: int, ofs: int, data: bytes, time_utc: int
) -> None:
    vehicle = MavlinkCodec(system_id=7, component_id=1)
    theirs = mavlink2.MAVLink(None, srcSystem=7, srcComponent=1)
    entry = LogEntry(log_id, 3, 2, time_utc, ofs, system_id=7)
    chunk = LogData(log_id, ofs, data, system_id=7)
    entry_frame = vehicle.encode_log_entry(entry)
    data_frame = vehicle.encode_log_data(chunk)
    padded = list(data) + [0] * (90 - len(data))
    assert entry_frame == _frame(theirs, theirs.log_entry_encode(log_id, 3, 2, time_utc, ofs))
    assert data_frame == _frame(theirs, theirs.log_data_encode(log_id, ofs, len(data), padded))
    downloader = MavlinkCodec(system_id=255, component_id=155)
    assert downloader.decode_with_log_download(entry_frame + data_frame) == [entry, chunk]


def test_the_recorders_decode_counts_log_download_frames_as_ignored() -> None:
    vehicle = MavlinkCodec(system_id=1, component_id=1)
    frames = vehicle.encode_log_entry(LogEntry(0, 1, 0, 5, 9)) + vehicle.encode_log_data(
        LogData(0, 0, b"ULog")
    )
    recorder = MavlinkCodec(system_id=255, component_id=155)
    assert recorder.decode(frames) == []
    assert recorder.ignored_frames == 2


def test_requests_for_another_component_are_not_returned() -> None:
    downloader = MavlinkCodec(system_id=255, component_id=155)
    frames = downloader.encode_log_request(LogRequestList(), 1, 1) + downloader.encode_log_request(
        LogRequestData(2, 90, 180), 1, 2
    )
    vehicle = MavlinkCodec(system_id=1, component_id=1)
    assert vehicle.decode_with_log_download(frames) == [LogRequestList()]
    assert vehicle.foreign_frames == 1


def test_a_log_data_count_past_90_is_a_bad_frame() -> None:
    theirs = mavlink2.MAVLink(None, srcSystem=1, srcComponent=1)
    frame = _frame(theirs, theirs.log_data_encode(0, 0, 91, [1] * 90))
    downloader = MavlinkCodec(system_id=255, component_id=155)
    assert downloader.decode_with_log_download(frame) == []
    assert downloader.bad_frames == 1


def test_signed_requests_are_accepted_by_a_peer_with_the_key() -> None:
    key = bytes(range(32))
    downloader = MavlinkCodec(system_id=255, component_id=155, signing_key=key)
    vehicle = MavlinkCodec(system_id=1, component_id=1, signing_key=key)
    frame = downloader.encode_log_request(LogRequestData(3, 900, 90), 1, 1)
    assert vehicle.decode_with_log_download(frame) == [LogRequestData(3, 900, 90)]


@given(
    log_id=st.integers(0, 0xFFFF),
    ofs=st.integers(0, 0xFFFFFFFF),
    data=st.binary(max_size=90),
    zeros=st.integers(0, 90),
)
def test_the_log_data_fast_path_decodes_and_counts_as_the_general_path(
    log_id: int, ofs: int, data: bytes, zeros: int
) -> None:
    data = (data + bytes(zeros))[:90]  # trailing zeros: MAVLink 2 cuts them from the frame
    frame = MavlinkCodec(system_id=9, component_id=1).encode_log_data(LogData(log_id, ofs, data))
    fast = MavlinkCodec(system_id=255, component_id=155)
    general = MavlinkCodec(system_id=255, component_id=155)
    fields = fast.decode_log_data(frame)
    (message,) = general.decode_with_log_download(frame)
    assert message == LogData(log_id, ofs, data, system_id=9)
    if fields is not None:  # frames cut into the header go the general way
        assert LogData(fields[1], fields[2], fields[3], system_id=fields[0]) == message
        assert fast.messages == general.messages == 1
    else:
        assert len(frame) < 10 + 7 + 2


def test_the_fast_path_declines_everything_else_untouched() -> None:
    vehicle = MavlinkCodec(system_id=9, component_id=1)
    frame = vehicle.encode_log_data(LogData(1, 0, b"x" * 90))
    codec = MavlinkCodec(system_id=255, component_id=155)
    damaged = frame[:-1] + bytes([frame[-1] ^ 1])
    entry = vehicle.encode_log_entry(LogEntry(0, 1, 0, 1, 2))
    for datagram in (damaged, frame + frame, entry, frame[:-3], b""):
        assert codec.decode_log_data(datagram) is None
    assert codec.messages == codec.bad_frames == 0
    signed = MavlinkCodec(system_id=255, component_id=155, signing_key=bytes(32))
    assert signed.decode_log_data(frame) is None


@given(
    seq=st.integers(0, 0xFFFF),
    session=st.integers(0, 255),
    opcode=st.sampled_from(list(FtpOpcode)),
    req_opcode=st.integers(0, 255),
    burst_complete=st.booleans(),
    offset=st.integers(0, 0xFFFFFFFF),
    data=st.binary(max_size=FTP_DATA_MAX),
    target=st.tuples(st.integers(1, 255), st.integers(1, 255)),
)
def test_ftp_messages_are_pymavlinks_byte_for_byte_and_read_back(
    *,
    seq: int,
    session: int,
    opcode: FtpOpcode,
    req_opcode: int,
    burst_complete: bool,
    offset: int,
    data: bytes,
    target: tuple[int, int],
) -> None:
    message = FtpMessage(seq, session, opcode, req_opcode, burst_complete, offset, data)
    ours = MavlinkCodec(system_id=42, component_id=155)
    theirs = mavlink2.MAVLink(None, srcSystem=42, srcComponent=155)
    system, component = target
    payload = (
        struct.pack(
            "<HBBBBBxI", seq, session, opcode, len(data), req_opcode, burst_complete, offset
        )
        + data
    ).ljust(251, b"\0")
    frame = _frame(theirs, theirs.file_transfer_protocol_encode(0, system, component, payload))
    assert ours.encode_ftp(message, system, component) == frame
    reader = MavlinkCodec(system_id=system, component_id=component)
    (decoded,) = reader.decode_with_log_download(frame)
    assert decoded == FtpMessage(
        seq, session, opcode, req_opcode, burst_complete, offset, data, system_id=42
    )
    # Addressed to another system: not ours.
    other = MavlinkCodec(system_id=system % 255 + 1, component_id=component)
    assert other.decode_with_log_download(frame) == []


def test_an_ftp_read_request_carries_its_wanted_size_and_oversized_data_is_refused() -> None:
    codec = MavlinkCodec(system_id=7, component_id=8)
    request = FtpMessage(3, 0, FtpOpcode.READ_FILE, offset=1000, size=200)
    (decoded,) = MavlinkCodec(system_id=1, component_id=1).decode_with_log_download(
        codec.encode_ftp(request, 1, 1)
    )
    assert isinstance(decoded, FtpMessage)
    assert decoded.data == bytes(200)  # the size field says 200 (zeros: no data is sent)
    with pytest.raises(ValueError, match="at most 239 bytes, not 240"):
        codec.encode_ftp(FtpMessage(1, 0, FtpOpcode.ACK, data=bytes(240)), 1, 1)
