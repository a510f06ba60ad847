from __future__ import annotations

import itertools
import random
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pymavlink.dialects.v20 import common as mavlink2

from ulogstream.adapters.connection import load_signing_key
from ulogstream.errors import ConfigError
from ulogstream.mavlink_codec import (
    MAV_AUTOPILOT_INVALID,
    MAV_AUTOPILOT_PX4,
    MAV_STATE_ACTIVE,
    MAV_TYPE_QUADROTOR,
    MAX_FRAME_LEN,
    MavlinkCodec,
    fast_crc_active,
    parse_signing_key,
)
from ulogstream.mavlink_crc import CRC_EXTRAS
from ulogstream.stream.packets import (
    MAV_CMD_LOGGING_START,
    MAV_TYPE_ONBOARD_CONTROLLER,
    AutopilotVersion,
    CommandAck,
    CommandLong,
    Heartbeat,
    LoggingAck,
    LoggingPacket,
    MavResult,
)

if TYPE_CHECKING:
    from pathlib import Path

KEY = bytes(range(32))


def receiver(**kwargs: object) -> MavlinkCodec:
    return MavlinkCodec(system_id=255, component_id=155, **kwargs)  # type: ignore[arg-type]


def vehicle(**kwargs: object) -> MavlinkCodec:
    return MavlinkCodec(system_id=1, component_id=1, **kwargs)  # type: ignore[arg-type]


def pymavlink_vehicle() -> mavlink2.MAVLink:
    return mavlink2.MAVLink(None, srcSystem=1, srcComponent=1)


def logging_frame(
    mav: mavlink2.MAVLink,
    sequence: int,
    data: bytes,
    *,
    acked: bool = False,
    length: int | None = None,
    fmo: int = 0,
    target: tuple[int, int] = (255, 155),
) -> bytes:
    """A frame built by pymavlink itself, as a vehicle would send it."""
    encode = mav.logging_data_acked_encode if acked else mav.logging_data_encode
    message = encode(
        target[0],
        target[1],
        sequence,
        len(data) if length is None else length,
        fmo,
        data + bytes(249 - len(data)),
    )
    frame: bytes = message.pack(mav)
    mav.seq = (mav.seq + 1) % 256
    return frame


def sample_frames(count: int, seed: int = 0) -> tuple[list[bytes], list[LoggingPacket]]:
    rng = random.Random(seed)  # noqa: S311 - reproducible test data
    mav = pymavlink_vehicle()
    frames, packets = [], []
    for sequence in range(count):
        data = rng.randbytes(rng.randrange(250))
        if rng.random() < 0.3:
            data = data.rstrip(b"\0") + bytes(rng.randrange(1, 20))[: 249 - len(data)]
        acked = rng.random() < 0.5
        frames.append(logging_frame(mav, sequence, data, acked=acked))
        packets.append(
            LoggingPacket(
                sequence=sequence,
                first_message_offset=0,
                data=data,
                needs_ack=acked,
                system_id=1,
                component_id=1,
                target_system=255,
                target_component=155,
            )
        )
    return frames, packets


def test_pymavlink_uses_the_compiled_crc() -> None:
    assert fast_crc_active()
    assert mavlink2.mcrf4xx is not None


def test_the_crc_extra_table_is_pymavlinks() -> None:
    assert {i: int(c.crc_extra) for i, c in mavlink2.mavlink_map.items()} == CRC_EXTRAS


def test_an_unsigned_link_never_imports_pymavlink(tmp_path: Path) -> None:
    # A recorder's start-up: pymavlink's dialect is ~30 ms of CPU it does not need.
    mav = pymavlink_vehicle()
    telemetry = mav.attitude_encode(1, 0.1, 0.2, 0.3, 0, 0, 0).pack(mav)
    script = (
        "import sys\n"
        "from ulogstream.mavlink_codec import MavlinkCodec\n"
        "rx = MavlinkCodec(system_id=255, component_id=155)\n"
        "tx = MavlinkCodec(system_id=1, component_id=1)\n"
        "frames = tx.encode_heartbeat() + tx.encode_command_ack(2510, 0, 255, 155)\n"
        "frames += tx.encode_command_long(2510, 0, 255, 155) + tx.encode_logging_ack(7, 255, 155)\n"
        "frames += tx.encode_logging_data(8, 255, 155, 0, b'data', acked=True)\n"
        f"frames += bytes.fromhex('{telemetry.hex()}')\n"
        "print(len(rx.decode(frames)), rx.ignored_frames, 'pymavlink' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert done.stdout.split() == ["5", "1", "False"]


def test_logging_data_and_acked_decode_to_packets() -> None:
    mav = pymavlink_vehicle()
    codec = receiver()
    plain = codec.decode(logging_frame(mav, 7, b"ULog", fmo=255))
    acked = codec.decode(logging_frame(mav, 8, b"\x01\x02", acked=True, fmo=1))
    assert plain == [
        LoggingPacket(7, 255, b"ULog", needs_ack=False, target_system=255, target_component=155)
    ]
    assert acked == [
        LoggingPacket(8, 1, b"\x01\x02", needs_ack=True, target_system=255, target_component=155)
    ]


def test_data_is_cut_to_length_so_stale_bytes_are_dropped() -> None:
    frame = logging_frame(pymavlink_vehicle(), 3, b"fresh" + b"stale leftovers", length=5)
    [packet] = receiver().decode(frame)
    assert isinstance(packet, LoggingPacket)
    assert packet.data == b"fresh"


def test_trailing_zeros_truncated_by_mavlink2_are_restored() -> None:
    data = b"\x07" + bytes(100)
    frame = logging_frame(pymavlink_vehicle(), 0, data)
    assert len(frame) < 20  # MAVLink 2 really did cut the zeros off the wire
    [packet] = receiver().decode(frame)
    assert isinstance(packet, LoggingPacket)
    assert packet.data == data


def test_all_zero_payload_decodes() -> None:
    frame = logging_frame(pymavlink_vehicle(), 0, bytes(249), target=(0, 0))
    [packet] = receiver().decode(frame)
    assert packet == LoggingPacket(0, 0, bytes(249), needs_ack=False)


def test_many_frames_in_one_datagram_decode_in_order() -> None:
    frames, packets = sample_frames(20)
    assert receiver().decode(b"".join(frames)) == packets


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), cuts=st.lists(st.integers(0, 10_000), max_size=40))
def test_any_chunking_decodes_the_same_packets(seed: int, cuts: list[int]) -> None:
    frames, packets = sample_frames(12, seed)
    stream = b"".join(frames)
    bounds = sorted({0, len(stream), *(cut % (len(stream) + 1) for cut in cuts)})
    codec = receiver()
    decoded = []
    for start, end in itertools.pairwise(bounds):
        decoded += codec.decode(stream[start:end])
    assert decoded == packets
    assert codec.buffered == 0
    assert codec.bad_frames == 0
    assert codec.skipped_bytes == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), signed=st.booleans(), noise=st.binary(max_size=40))
@example(seed=39, signed=True, noise=b"\xfe")  # a false start longer than the frames after it
def test_bytes_wanted_is_exact_for_a_frame_and_never_more(
    seed: int, *, signed: bool, noise: bytes
) -> None:
    """Feeding the stream byte by byte, no frame completes before ``bytes_wanted`` bytes more.

    Once a clean frame's header is held, the bound is exact: the frame
    completes at exactly that byte, so a serial port that wakes on it (VMIN) reads each frame the
    moment it is whole.
    """
    frames, _ = sample_frames(6, seed)
    if signed:
        sender = vehicle(signing_key=KEY)
        frames = [sender.encode_heartbeat(), *frames[:2], sender.encode_heartbeat()]
    # zeros after the frames: a false start in the noise (0xFE, then a large length) holds
    # the frames behind it until its CRC fails, as a live link's next bytes would make it
    stream = noise + b"".join(frames) + bytes(MAX_FRAME_LEN if noise else 0)
    codec = receiver(signing_key=KEY, accept_unsigned=True) if signed else receiver()
    wanted, known = codec.bytes_wanted(), False
    fed_since = completed = 0
    for byte in stream:
        got = codec.decode(bytes((byte,)))
        fed_since += 1
        if got:
            completed += len(got)
            assert fed_since >= wanted, "a frame completed before bytes_wanted bytes came"
        if known and not noise and fed_since == wanted:
            assert got, "the frame was not complete after exactly bytes_wanted bytes"
        if got or fed_since >= wanted:
            wanted, known = codec.bytes_wanted(), codec.buffered >= 10  # a whole v2 header
            fed_since = 0
        assert 1 <= wanted <= MAX_FRAME_LEN
    assert completed == len(frames)


def test_byte_by_byte_feeding_decodes_everything() -> None:
    frames, packets = sample_frames(5)
    codec = receiver()
    decoded = [m for byte in b"".join(frames) for m in codec.decode(bytes((byte,)))]
    assert decoded == packets


def test_buffer_stays_bounded_with_serial_reads_that_split_frames() -> None:
    frames, packets = sample_frames(300)
    stream = b"".join(frames)
    codec = receiver()
    decoded = []
    largest = 0
    for start in range(0, len(stream), 1000):  # 1000-byte reads never align with frames
        decoded += codec.decode(stream[start : start + 1000])
        largest = max(largest, codec.buffered)
    assert decoded == packets
    assert 0 < largest < MAX_FRAME_LEN


def test_garbage_between_frames_is_skipped_and_counted() -> None:
    frames, packets = sample_frames(3)
    noise = bytes(range(0x10, 0x60))  # no start byte (0xFD/0xFE) in it
    codec = receiver()
    decoded = codec.decode(noise + frames[0] + noise + frames[1] + noise + frames[2])
    assert decoded == packets
    assert codec.skipped_bytes == 3 * len(noise)
    assert codec.bad_frames == 0


def test_valid_frames_count_what_passed_every_check_and_noise_counts_none() -> None:
    frames, _ = sample_frames(3)
    codec = receiver()
    codec.decode(random.Random(1).randbytes(2000))  # noqa: S311 - reproducible test data
    assert codec.valid_frames == 0
    assert codec.skipped_bytes + codec.buffered == 2000
    codec.decode(b"".join(frames))
    assert codec.valid_frames == codec.messages == 3


def test_noise_with_start_bytes_never_hides_the_next_frame() -> None:
    rng = random.Random(5)  # noqa: S311 - reproducible test data
    frames, packets = sample_frames(40)
    codec = receiver()
    decoded = []
    for frame in frames:
        noise = bytes(
            rng.choice((0xFD, 0xFE, rng.randrange(256))) for _ in range(rng.randrange(30))
        )
        decoded += codec.decode(noise)
        decoded += codec.decode(frame)
    # A false start byte is rescanned from the next byte, so even noise ending in 0xFD right
    # before a frame costs nothing.
    assert decoded == packets
    assert codec.skipped_bytes > 0


def test_corrupt_frame_is_counted_and_the_next_one_still_decodes() -> None:
    frames, packets = sample_frames(3)
    damaged = bytearray(frames[1])
    damaged[20] ^= 0xFF
    codec = receiver()
    decoded = codec.decode(frames[0] + bytes(damaged) + frames[2])
    assert decoded == [packets[0], packets[2]]
    assert codec.bad_frames == 1  # once, though the damaged payload may hold more start bytes
    assert codec.skipped_bytes == len(damaged)


def test_false_start_byte_with_a_long_length_does_not_swallow_real_frames() -> None:
    frames, packets = sample_frames(2)
    codec = receiver()
    decoded = codec.decode(b"\xfd\xff" + frames[0] + frames[1])
    assert decoded == packets
    assert codec.skipped_bytes >= 2


def test_impossible_length_is_rejected_as_bad() -> None:
    frame = logging_frame(pymavlink_vehicle(), 1, b"x", length=250)
    codec = receiver()
    assert codec.decode(frame) == []
    assert codec.bad_frames == 1


def test_logging_frames_addressed_to_someone_else_are_dropped_and_counted() -> None:
    mav = pymavlink_vehicle()
    codec = receiver()
    other_system = logging_frame(mav, 1, b"a", target=(254, 155))
    other_component = logging_frame(mav, 2, b"b", target=(255, 190))
    broadcast = logging_frame(mav, 3, b"c", target=(255, 0))
    decoded = codec.decode(other_system + other_component + broadcast)
    assert [m.sequence for m in decoded if isinstance(m, LoggingPacket)] == [3]
    assert len(decoded) == 1
    assert codec.foreign_frames == 2


def test_command_acks_for_other_clients_pass_for_the_session_to_judge() -> None:
    # Another client's accepted LOGGING_STOP ends our stream too (PX4 has only one).
    ack_for_qgc = vehicle().encode_command_ack(MAV_CMD_LOGGING_START, MavResult.ACCEPTED, 255, 190)
    [ack] = receiver().decode(ack_for_qgc)
    assert isinstance(ack, CommandAck)
    assert (ack.target_system, ack.target_component) == (255, 190)


def test_other_messages_are_ignored_and_counted() -> None:
    # An onboard link carries ~400 telemetry frames/s beside the log: each is checked (its CRC
    # keeps the framing in sync) and counted, never unpacked.
    mav = pymavlink_vehicle()
    frames = mav.attitude_encode(1, 0.1, 0.2, 0.3, 0, 0, 0).pack(mav)
    frames += mav.gps_raw_int_encode(1, 3, 1, 2, 3, 4, 5, 6, 7, 8).pack(mav)
    heartbeat = mav.heartbeat_encode(MAV_TYPE_QUADROTOR, MAV_AUTOPILOT_PX4, 0, 0, 4).pack(mav)
    codec = receiver()
    decoded = codec.decode(frames + heartbeat)
    assert [type(m) for m in decoded] == [Heartbeat]
    assert codec.ignored_frames == 2
    assert codec.bad_frames == codec.skipped_bytes == 0


def _pymavlink_frame(mav: mavlink2.MAVLink, message: mavlink2.MAVLink_message) -> bytes:
    frame: bytes = message.pack(mav)
    mav.seq = (mav.seq + 1) % 256
    return frame


@given(
    sequence=st.integers(0, 0xFFFF),
    target=st.tuples(st.integers(0, 255), st.integers(0, 255)),
    command=st.sampled_from([0, 2510, 2511, 0xFFFF]),
    param1=st.sampled_from([0.0, 1.0, -2.5, 3.0e38]),
    byte=st.integers(0, 255),
    frames_before=st.integers(0, 300),
)
def test_every_frame_we_build_is_pymavlinks_byte_for_byte(
    *,
    sequence: int,
    target: tuple[int, int],
    command: int,
    param1: float,
    byte: int,
    frames_before: int,
) -> None:
    ours = MavlinkCodec(system_id=42, component_id=155)
    theirs = mavlink2.MAVLink(None, srcSystem=42, srcComponent=155)
    for _ in range(frames_before):  # the frame sequence number wraps alike
        ours.encode_logging_ack(0, 0, 0)
        _pymavlink_frame(theirs, theirs.logging_ack_encode(0, 0, 0))
    system, component = target
    pairs = [
        (
            ours.encode_logging_ack(sequence, system, component),
            theirs.logging_ack_encode(system, component, sequence),
        ),
        (
            ours.encode_command_long(command, param1, system, component),
            theirs.command_long_encode(system, component, command, 0, param1, 0, 0, 0, 0, 0, 0),
        ),
        (
            ours.encode_heartbeat(mav_type=byte, autopilot=byte ^ 0x55, base_mode=byte),
            theirs.heartbeat_encode(byte, byte ^ 0x55, byte, 0, MAV_STATE_ACTIVE),
        ),
        (
            ours.encode_command_ack(command, byte, system, component),
            theirs.command_ack_encode(
                command, byte, target_system=system, target_component=component
            ),
        ),
        (
            ours.encode_autopilot_version(uid=sequence << 40 | byte, uid2=bytes([byte]) * 18),
            theirs.autopilot_version_encode(
                0,
                0,
                0,
                0,
                0,
                bytes(8),
                bytes(8),
                bytes(8),
                0,
                0,
                sequence << 40 | byte,
                uid2=bytes([byte]) * 18,
            ),
        ),
    ]
    for mine, message in pairs:
        assert mine == _pymavlink_frame(theirs, message), message


@given(
    target=st.tuples(st.sampled_from([0, 255, 7]), st.sampled_from([0, 155, 9])),
    command=st.sampled_from([0, 2510, 2511, 0xFFFF]),
    value=st.integers(0, 255),
    param1=st.sampled_from([0.0, 1.0, -2.5]),
)
def test_every_message_we_use_decodes_from_pymavlinks_frames_as_pymavlink_reads_them(
    target: tuple[int, int], command: int, value: int, param1: float
) -> None:
    mav = pymavlink_vehicle()
    system, component = target
    addressed = system in {0, 255} and component in {0, 155}
    heartbeat = _pymavlink_frame(mav, mav.heartbeat_encode(value, value ^ 1, value, 9, 4))
    ack = mav.command_ack_encode(command, value, target_system=system, target_component=component)
    long = mav.command_long_encode(system, component, command, 0, param1, 1, 2, 3, 4, 5, 6)
    logging_ack = mav.logging_ack_encode(system, component, command)
    uid2 = bytes(range(value, value + 18)) if value < 200 else bytes(18)
    version = mav.autopilot_version_encode(
        value, 1, 2, 3, 4, bytes(8), bytes(8), bytes(8), 5, 6, command << 32 | value, uid2=uid2
    )
    frames = [_pymavlink_frame(mav, m) for m in (ack, version, long, logging_ack)]
    decoded = receiver().decode(heartbeat + b"".join(frames))
    expected: list[object] = [
        Heartbeat(1, 1, value, value ^ 1, value),
        CommandAck(command, value, 1, 1, system, component),
        AutopilotVersion(command << 32 | value, uid2, 1, 1),
    ]
    if addressed:
        expected += [
            CommandLong(command, param1, 1, 1, system, component),
            LoggingAck(command, 1, 1, system, component),
        ]
    assert decoded == expected


@pytest.mark.parametrize(
    ("uid", "uid2", "guid"),
    [
        (
            5,
            bytes.fromhex("000600000000383233333039510700340029"),
            "000600000000383233333039510700340029",
        ),
        (0x4954414C44494E56, bytes([7]) + bytes(17), "07" + "00" * 17),  # PX4 SITL instance 7
        (0x1234, bytes(18), "0000000000001234"),  # no GUID (ArduPilot): the 64-bit uid
        (0, bytes(18), None),
    ],
)
def test_the_autopilots_guid_is_uid2_in_hex_as_px4_logs_spell_sys_uuid(
    uid: int, uid2: bytes, guid: str | None
) -> None:
    frame = vehicle().encode_autopilot_version(uid=uid, uid2=uid2)
    (decoded,) = receiver().decode(frame)
    assert isinstance(decoded, AutopilotVersion)
    assert decoded.guid == guid


def test_mavlink1_heartbeat_decodes() -> None:
    mav = pymavlink_vehicle()
    frame = mav.heartbeat_encode(MAV_TYPE_QUADROTOR, MAV_AUTOPILOT_PX4, 0, 0, 4).pack(
        mav, force_mavlink1=True
    )
    assert frame[0] == 0xFE
    assert receiver().decode(frame) == [Heartbeat(1, 1, MAV_TYPE_QUADROTOR, MAV_AUTOPILOT_PX4)]


def test_logging_ack_parses_back_in_pymavlink() -> None:
    codec = receiver()
    mav = pymavlink_vehicle()
    [message] = mav.parse_buffer(codec.encode_logging_ack(65535, 1, 1))
    assert message.get_type() == "LOGGING_ACK"
    assert (message.sequence, message.target_system, message.target_component) == (65535, 1, 1)
    assert (message.get_srcSystem(), message.get_srcComponent()) == (255, 155)


def test_frame_sequence_counts_up_across_encoders() -> None:
    codec = receiver()
    mav = pymavlink_vehicle()
    frames = [codec.encode_heartbeat(), codec.encode_logging_ack(1, 1, 1)]
    assert [m.get_seq() for f in frames for m in mav.parse_buffer(f)] == [0, 1]


def test_logging_start_command_parses_back_in_pymavlink() -> None:
    frame = receiver().encode_command_long(MAV_CMD_LOGGING_START, 0, 1, 1)
    [message] = pymavlink_vehicle().parse_buffer(frame)
    assert message.get_type() == "COMMAND_LONG"
    assert (message.command, message.param1, message.target_system) == (2510, 0, 1)
    assert message.target_component == 1


def test_receiver_heartbeat_is_an_onboard_controller() -> None:
    [message] = pymavlink_vehicle().parse_buffer(receiver().encode_heartbeat())
    assert message.type == MAV_TYPE_ONBOARD_CONTROLLER
    assert message.autopilot == MAV_AUTOPILOT_INVALID


def test_vehicle_side_round_trip() -> None:
    veh, rx = vehicle(), receiver()
    heartbeat = veh.encode_heartbeat(mav_type=MAV_TYPE_QUADROTOR, autopilot=MAV_AUTOPILOT_PX4)
    assert rx.decode(heartbeat) == [Heartbeat(1, 1, MAV_TYPE_QUADROTOR, MAV_AUTOPILOT_PX4)]
    ack = veh.encode_command_ack(MAV_CMD_LOGGING_START, MavResult.IN_PROGRESS, 255, 155)
    assert rx.decode(ack) == [CommandAck(2510, 5, 1, 1, 255, 155)]
    assert veh.decode(rx.encode_command_long(2511, 0, 1, 1)) == [
        CommandLong(2511, 0.0, 255, 155, 1, 1)
    ]
    assert veh.decode(rx.encode_logging_ack(42, 1, 1)) == [LoggingAck(42, 255, 155, 1, 1)]


@pytest.mark.parametrize("acked", [False, True])
@pytest.mark.parametrize("data", [b"", b"\0", b"abc\0\0", bytes(range(249)), bytes(249)])
def test_encoded_logging_data_matches_pymavlink_byte_for_byte(*, acked: bool, data: bytes) -> None:
    codec = vehicle()
    codec.encode_heartbeat()  # frame sequence 0 used; both sides continue at 1
    mav = pymavlink_vehicle()
    mav.seq = 1
    ours = codec.encode_logging_data(513, 255, 155, 255, data, acked=acked)
    assert ours == logging_frame(mav, 513, data, acked=acked, fmo=255)
    [packet] = receiver().decode(ours)
    assert packet == LoggingPacket(
        513, 255, data, needs_ack=acked, target_system=255, target_component=155
    )


def test_logging_data_longer_than_249_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 249 bytes, not 250"):
        vehicle().encode_logging_data(0, 255, 155, 0, bytes(250), acked=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"system_id": 0, "component_id": 155}, "system id must be 1-255, not 0"),
        ({"system_id": 1, "component_id": 256}, "component id must be 1-255, not 256"),
        ({"system_id": 1, "component_id": 1, "signing_key": b"short"}, "32 bytes, not 5"),
    ],
)
def test_bad_identity_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MavlinkCodec(**kwargs)  # type: ignore[arg-type]


def test_signed_frames_decode_on_a_peer_with_the_key() -> None:
    veh, rx = vehicle(signing_key=KEY), receiver(signing_key=KEY)
    frame = veh.encode_logging_data(9, 255, 155, 0, b"signed data", acked=True)
    assert frame[2] & 0x01  # the incompat flag says signed
    assert len(frame) == 10 + len(b"\x09\x00\xff\x9b\x0b\x00signed data") + 2 + 13
    assert rx.decode(frame) == [
        LoggingPacket(9, 0, b"signed data", needs_ack=True, target_system=255, target_component=155)
    ]
    ack = rx.encode_logging_ack(9, 1, 1)
    assert veh.decode(ack) == [LoggingAck(9, 255, 155, 1, 1)]
    assert rx.bad_frames == veh.bad_frames == 0


def test_signed_frames_split_across_reads_decode() -> None:
    veh, rx = vehicle(signing_key=KEY), receiver(signing_key=KEY)
    stream = b"".join(
        veh.encode_logging_data(i, 255, 155, 0, b"x" * i, acked=False) for i in range(10)
    )
    decoded = [
        m for start in range(0, len(stream), 7) for m in rx.decode(stream[start : start + 7])
    ]
    assert [m.sequence for m in decoded if isinstance(m, LoggingPacket)] == list(range(10))


def test_wrong_key_and_unsigned_frames_are_rejected_when_a_key_is_set() -> None:
    rx = receiver(signing_key=KEY)
    wrong = vehicle(signing_key=bytes(32)).encode_logging_data(1, 255, 155, 0, b"a", acked=False)
    unsigned = vehicle().encode_logging_data(2, 255, 155, 0, b"b", acked=False)
    unsigned_ack = vehicle().encode_command_ack(2510, 0, 255, 155)
    assert rx.decode(wrong + unsigned + unsigned_ack) == []
    assert rx.bad_frames == 3


def test_accept_unsigned_lets_unsigned_frames_through_but_checks_signatures() -> None:
    rx = receiver(signing_key=KEY, accept_unsigned=True)
    unsigned = vehicle().encode_logging_data(2, 255, 155, 0, b"b", acked=False)
    signed = vehicle(signing_key=KEY).encode_logging_data(3, 255, 155, 0, b"c", acked=False)
    assert [m.sequence for m in rx.decode(unsigned + signed) if isinstance(m, LoggingPacket)] == [
        2,
        3,
    ]


def test_replayed_signed_frame_is_rejected() -> None:
    rx = receiver(signing_key=KEY)
    frame = vehicle(signing_key=KEY).encode_logging_data(1, 255, 155, 0, b"a", acked=False)
    assert len(rx.decode(frame)) == 1
    assert rx.decode(frame) == []
    assert rx.bad_frames == 1


def test_signing_key_is_read_raw_or_as_hex(tmp_path: Path) -> None:
    raw = tmp_path / "raw.key"
    raw.write_bytes(KEY)
    hexed = tmp_path / "hex.key"
    hexed.write_text(KEY.hex().upper() + "\n")
    assert load_signing_key(raw) == KEY
    assert load_signing_key(hexed) == KEY


def test_bad_signing_key_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "short.key"
    path.write_text("abcd\n")
    with pytest.raises(ConfigError, match=r"short\.key must hold 32 raw bytes or 64 hex digits"):
        load_signing_key(path)
    with pytest.raises(ConfigError, match=r"cannot read signing key file .*missing\.key"):
        load_signing_key(tmp_path / "missing.key")
    with pytest.raises(ConfigError, match=r"key\.txt must hold"):
        parse_signing_key(b"zz" * 32, source="key.txt")
