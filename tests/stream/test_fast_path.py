"""The data phase's fast path does exactly what the general path does, or nothing.

``MavlinkCodec.decode_logging_data``, ``LoggingSession.receive_logging_data`` and
``LogStreamReassembler.receive_next`` skip the message objects for the common case (a plain
LOGGING_DATA, next in sequence, in step). Each is fed the same input as its general counterpart,
on streams with loss, duplicates, reordering, damaged framing and foreign frames: the outputs,
the bytes written and every counter must be equal, and the fast path must take the common case.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from support.packetize import make_ulog, packetize, random_boundaries, split, written

from ulogstream.mavlink_codec import MavlinkCodec
from ulogstream.stream import (
    LogEndReason,
    LoggingData,
    LoggingPacket,
    LogStreamReassembler,
    MavResult,
    SessionOutput,
    WriteUlog,
    logging_packet,
)
from ulogstream.stream.packets import MAV_CMD_LOGGING_START, CommandAck, Heartbeat
from ulogstream.stream.session import DEFAULT_SYSTEM_ID, LoggingSession

if TYPE_CHECKING:
    from ulogstream.stream.reassembler import ReassemblerOutput

ULOG = make_ulog(600, big_every=9)
PACKETS = packetize(ULOG)
ME = (DEFAULT_SYSTEM_ID, 155)


def fields(packet: LoggingPacket) -> LoggingData:
    return (
        packet.system_id,
        packet.component_id,
        packet.target_system,
        packet.target_component,
        packet.sequence,
        packet.first_message_offset,
        packet.data,
    )


def damaged(packets: list[LoggingPacket], rng: random.Random) -> list[LoggingPacket]:
    """``packets`` as a bad link and a confused sender deliver them."""
    out: list[LoggingPacket] = []
    for packet in packets:
        roll = rng.random()
        if roll < 0.05:
            continue  # lost
        if roll < 0.08:
            out += [packet, packet]  # duplicated
        elif roll < 0.11 and out:
            out.insert(len(out) - rng.randint(1, min(5, len(out))), packet)  # late
        elif roll < 0.13:
            offset = rng.choice([0, 1, 255, len(packet.data) - 1, len(packet.data)])
            out.append(
                msgspec.structs.replace(packet, first_message_offset=offset)
            )  # framing that disagrees
        elif roll < 0.14:
            out.append(
                msgspec.structs.replace(packet, sequence=rng.randrange(1 << 16))
            )  # a wild sequence
        elif roll < 0.15:
            out.append(
                msgspec.structs.replace(
                    packet, data=packet.data[: rng.randrange(len(packet.data) + 1)]
                )
            )
        else:
            out.append(packet)
    return out


def reassembled(packets: list[LoggingPacket], *, fast: bool) -> tuple[list[object], dict[str, int]]:
    reassembler = LogStreamReassembler(reorder_packets=4, reorder_time=0.02)
    out: list[ReassemblerOutput] = []
    taken = 0
    for number, packet in enumerate(packets):
        now = number * 0.001
        if fast and not packet.needs_ack:
            chunk = reassembler.receive_next(
                packet.sequence, packet.first_message_offset, packet.data, now
            )
            if chunk is not None:
                taken += 1
                if chunk:
                    out.append(WriteUlog(chunk))
                continue
        reassembler.receive_packet_into(packet, now, out)
    reassembler.handle_timer(math.inf, out)
    reassembler.end_log(LogEndReason.STOPPED, complete=True, out=out)
    return [*out, ("taken", taken if fast else None)], msgspec.structs.asdict(reassembler.counters)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), px4_packets=st.booleans())
def test_the_reassemblers_fast_path_changes_nothing_but_the_objects(
    seed: int, *, px4_packets: bool
) -> None:
    rng = random.Random(seed)  # noqa: S311 (reproducible test data)
    packets = PACKETS if px4_packets else split(ULOG, random_boundaries(ULOG, rng), acked_until=0)
    delivered = damaged(packets, rng)
    general, general_counters = reassembled(delivered, fast=False)
    fast, fast_counters = reassembled(delivered, fast=True)
    assert fast[:-1] == general[:-1]
    assert fast_counters == general_counters


def test_the_fast_path_takes_every_unacked_packet_of_a_clean_stream() -> None:
    outputs, _ = reassembled(PACKETS, fast=True)
    unacked = sum(not packet.needs_ack for packet in PACKETS)
    assert outputs[-1] == ("taken", unacked)
    writes = [o for o in outputs if isinstance(o, WriteUlog)]
    assert written(writes) == ULOG


def streaming_session() -> LoggingSession:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    session.receive(Heartbeat(1, 1, mav_type=2, autopilot=12), 0.0)
    session.receive(CommandAck(MAV_CMD_LOGGING_START, MavResult.ACCEPTED, 1, 1, *ME), 0.0)
    return session


def through_session(packets: list[LoggingPacket], *, fast: bool) -> tuple[list[SessionOutput], int]:
    session = streaming_session()
    out: list[SessionOutput] = []
    taken = 0
    for number, packet in enumerate(packets):
        now = number * 0.001
        if fast and not packet.needs_ack:
            chunk = session.receive_logging_data(fields(packet), now)
            if chunk is not None:
                taken += 1
                if chunk:
                    out.append(WriteUlog(chunk))
                continue
        out += session.receive(packet, now)
    out += session.stop(1e6)
    return out, taken


def test_the_session_takes_only_its_autopilots_data_addressed_to_it() -> None:
    strangers = [msgspec.structs.replace(PACKETS[0], system_id=2)]  # another autopilot's log start
    for n, packet in enumerate(PACKETS):
        strangers.append(packet)
        if n % 3 == 0:
            strangers.append(
                msgspec.structs.replace(packet, system_id=2, data=bytes(len(packet.data)))
            )
        if n % 5 == 1:
            strangers.append(
                msgspec.structs.replace(packet, target_system=7, data=bytes(len(packet.data)))
            )
    general, _ = through_session(strangers, fast=False)
    fast, taken = through_session(strangers, fast=True)
    assert fast == general
    assert written(fast) == ULOG
    assert taken == sum(not packet.needs_ack for packet in PACKETS)


def test_the_session_takes_nothing_before_it_streams() -> None:
    session = LoggingSession(target_system=1)
    session.start(0.0)
    packet = next(p for p in PACKETS if not p.needs_ack)
    assert session.receive_logging_data(fields(packet), 0.0) is None
    assert session.counters.packets == 0


def test_the_session_and_its_fast_path_write_the_same_log() -> None:
    general, _ = through_session(PACKETS, fast=False)
    fast, taken = through_session(PACKETS, fast=True)
    assert fast == general
    assert written(fast) == ULOG
    assert taken == sum(not packet.needs_ack for packet in PACKETS)


def datagrams(rng: random.Random) -> list[bytes]:
    """Frames as a link brings them: ours, others', signed, cut, damaged, glued together."""
    sender = MavlinkCodec(system_id=1, component_id=1)
    out: list[bytes] = []
    for packet in PACKETS[:200]:
        frame = sender.encode_logging_data(
            packet.sequence,
            rng.choice([DEFAULT_SYSTEM_ID, DEFAULT_SYSTEM_ID, 0, 9]),
            rng.choice([155, 155, 0, 3]),
            packet.first_message_offset,
            packet.data,
            acked=packet.needs_ack,
        )
        roll = rng.random()
        if roll < 0.05:
            flipped = bytearray(frame)
            flipped[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
            frame = bytes(flipped)
        elif roll < 0.08:
            frame = frame[: rng.randrange(len(frame))]
        elif roll < 0.11:
            frame += sender.encode_heartbeat()
        elif roll < 0.13:
            frame = b"\x00garbage" + frame
        out.append(frame)
    out.append(sender.encode_logging_data(5, 1, 155, 0, b"\x01\x00" + bytes(50), acked=False))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_codecs_fast_path_decodes_as_decode_or_declines(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (reproducible test data)
    general = MavlinkCodec(system_id=DEFAULT_SYSTEM_ID, component_id=155)
    fast = MavlinkCodec(system_id=DEFAULT_SYSTEM_ID, component_id=155)
    taken = 0
    for datagram in datagrams(rng):
        expected = general.decode(datagram)
        packet = fast.decode_logging_data(datagram)
        if packet is None:
            assert fast.decode(datagram) == expected
        else:
            taken += 1
            assert [logging_packet(packet)] == expected
        assert vars(fast) == vars(general)
    assert taken > 0


def test_a_signed_link_never_takes_the_fast_path() -> None:
    codec = MavlinkCodec(system_id=DEFAULT_SYSTEM_ID, component_id=155, signing_key=bytes(32))
    frame = MavlinkCodec(system_id=1, component_id=1).encode_logging_data(
        1, DEFAULT_SYSTEM_ID, 155, 0, b"\x01\x00x" + bytes(10), acked=False
    )
    assert codec.decode_logging_data(frame) is None


def test_a_frame_whose_data_ends_in_zeros_is_taken_with_its_zeros() -> None:
    # MAVLink 2 cuts a payload's trailing zeros: half of a real log's packets end so.
    data = b"\x05\x00D" + bytes(200)
    frame = MavlinkCodec(system_id=1, component_id=1).encode_logging_data(
        7, DEFAULT_SYSTEM_ID, 155, 0, data, acked=False
    )
    assert len(frame) < 12 + 6 + len(data)
    packet = MavlinkCodec(system_id=DEFAULT_SYSTEM_ID, component_id=155).decode_logging_data(frame)
    assert packet == (1, 1, DEFAULT_SYSTEM_ID, 155, 7, 0, data)
