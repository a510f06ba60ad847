"""The reference receiver: a standalone PX4-script-style log streaming receiver (pymavlink only).

Run: ``python tests/bench/px4_script.py CONNECTION OUT [--baud N]``; SIGTERM ends it.

Written the way PX4's ``Tools/mavlink_ulog_streaming.py`` works (from protocol.md and style.md,
not from its code): a pymavlink ``mavutil`` link polled with ``recv_match(type=[LOGGING_DATA_ACKED,
LOGGING_DATA])``, acks sent with ``mav.logging_ack_send`` for new ACKED packets, ``check_sequence``
with uint16 wrap, ``process_streamed_ulog_data`` that takes the first 16 bytes as the header (no
magic check), resyncs at ``first_message_offset`` after a gap with a guessed dropout (lost x
10 ms, at most 250) and ``write_ulog_messages`` writing each whole message to a buffered file.

It imports nothing from ulogstream, so a benchmark that runs it as a process times what PX4's
script costs: pymavlink's start-up and its loop, no more.
"""

from __future__ import annotations

import argparse
import os
import signal
import struct
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from pymavlink import mavutil

OUR_SYSTEM = 254
OUR_COMPONENT = 155
LOGGING_TYPES = ["LOGGING_DATA_ACKED", "LOGGING_DATA"]
_DROPOUT = struct.Struct("<HBH")


class ReferenceReceiver:
    """``check_sequence``, ``process_streamed_ulog_data`` and ``write_ulog_messages``."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.last_sequence = -1
        self.got_header = False
        self.buffer = bytearray()
        self.synced = True
        self.dropout_ms = 0

    def check_sequence(self, sequence: int) -> int:
        """Packets lost before ``sequence``; -1 for a duplicate or an older packet."""
        if self.last_sequence < 0:
            return 0
        distance = (sequence - self.last_sequence) % 0x10000
        if distance == 0 or distance >= 0x8000:
            return -1
        return distance - 1

    def process_streamed_ulog_data(self, msg: mavutil.mavlink.MAVLink_message) -> None:
        data = bytes(msg.data[: msg.length])
        if not self.got_header:
            self.file.write(data[:16])  # whatever the first 16 bytes are
            self.got_header = True
            data = data[16:]
        elif not self.synced:
            if msg.first_message_offset == 255:
                return
            data = data[msg.first_message_offset :]
            self.synced = True
            self.file.write(_DROPOUT.pack(2, ord("O"), self.dropout_ms))
        self.buffer += data
        self.write_ulog_messages()

    def write_ulog_messages(self) -> None:
        buffer = self.buffer
        position = 0
        while len(buffer) - position >= 3:
            end = position + 3 + (buffer[position] | buffer[position + 1] << 8)
            if end > len(buffer):
                break
            self.file.write(buffer[position:end])
            position = end
        del buffer[:position]

    def lost(self, count: int) -> None:
        self.buffer.clear()
        self.synced = False
        self.dropout_ms = min(count * 10, 250)


def receive(connection: str, out: Path, baud: int) -> None:
    """The script's loop: START, then ack, check the sequence and write until SIGTERM; then STOP."""
    from pymavlink import mavutil  # noqa: PLC0415 (importers that only want the class skip it)

    stop = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    mav = mavutil.mavlink_connection(
        connection, baud=baud, source_system=OUR_SYSTEM, source_component=OUR_COMPONENT
    )
    if connection.startswith("udpin:"):  # as PX4's script does: the vehicle's address first
        mav.wait_heartbeat()
    mav.mav.command_long_send(1, 1, mavutil.mavlink.MAV_CMD_LOGGING_START, 0, 0, 0, 0, 0, 0, 0, 0)
    with out.open("wb") as file:
        receiver = ReferenceReceiver(file)
        while not stop:
            msg = mav.recv_match(type=LOGGING_TYPES, blocking=True, timeout=0.05)
            if msg is None or msg.target_system != OUR_SYSTEM:
                continue
            if msg.get_type() == "LOGGING_DATA_ACKED":
                mav.mav.logging_ack_send(msg.get_srcSystem(), msg.get_srcComponent(), msg.sequence)
            lost = receiver.check_sequence(msg.sequence)
            if lost < 0:
                continue
            if lost:
                receiver.lost(lost)
            receiver.last_sequence = msg.sequence
            receiver.process_streamed_ulog_data(msg)
        stop_command = mavutil.mavlink.MAV_CMD_LOGGING_STOP
        mav.mav.command_long_send(1, 1, stop_command, 0, 0, 0, 0, 0, 0, 0, 0)
        file.flush()
        os.fsync(file.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("connection", help="a pymavlink connection string, e.g. udpout:HOST:PORT")
    parser.add_argument("out", type=Path, help="the .ulg file to write")
    parser.add_argument("--baud", type=int, default=57600)
    args = parser.parse_args()
    receive(args.connection, args.out, args.baud)


if __name__ == "__main__":
    main()
