"""The floor: the least a Python log streaming receiver can do, to bound what any one costs.

Run: ``python tests/bench/floor_receiver.py udpout:HOST:PORT OUT`` (or ``udpin:HOST:PORT``, where
it waits for the vehicle's first datagram); SIGTERM ends it.

It imports only the standard library (no pymavlink, no asyncio), sends LOGGING_START, and for each
datagram takes its MAVLink 2 frames by their length byte, acks every LOGGING_DATA_ACKED addressed
to it and appends the payload's ``data[:length]`` to a buffered file. It checks no CRC, keeps no
sequence and frames no ULog message: its file is the raw stream, not a log. What it costs (Python's
start-up, one blocking ``recvfrom`` per datagram, a slice and a write) is below what any receiver
that keeps its promises can cost, so ``bench_real`` shows it next to PX4's script to tell which
ratios are within reach.
"""

from __future__ import annotations

import signal
import socket
import struct
import sys

OUR_SYSTEM = 254
OUR_COMPONENT = 155
LOGGING_DATA = 266
LOGGING_DATA_ACKED = 267
LOGGING_ACK = 268
COMMAND_LONG = 76
CRC_EXTRA = {LOGGING_ACK: 14, COMMAND_LONG: 152}
MAV_CMD_LOGGING_START = 2510
MAV_CMD_LOGGING_STOP = 2511


def x25crc(data: bytes, crc: int = 0xFFFF) -> int:
    """MAVLink's CRC-16/MCRF4XX (the few frames sent need no speed)."""
    for byte in data:
        tmp = byte ^ (crc & 0xFF)
        tmp = (tmp ^ (tmp << 4)) & 0xFF
        crc = ((crc >> 8) ^ (tmp << 8) ^ (tmp << 3) ^ (tmp >> 4)) & 0xFFFF
    return crc


class Frames:
    """MAVLink 2 frames sent from our ids, numbered."""

    def __init__(self) -> None:
        self.sequence = 0

    def frame(self, msg_id: int, payload: bytes) -> bytes:
        header = struct.pack(
            "<BBBBBBBHB",
            0xFD, len(payload), 0, 0, self.sequence, OUR_SYSTEM, OUR_COMPONENT,
            msg_id & 0xFFFF, msg_id >> 16,
        )  # fmt: skip
        self.sequence = (self.sequence + 1) & 0xFF
        body = header[1:] + payload
        crc = x25crc(bytes([CRC_EXTRA[msg_id]]), x25crc(body))
        return header + payload + struct.pack("<H", crc)

    def command(self, command: int) -> bytes:
        return self.frame(COMMAND_LONG, struct.pack("<7fHBBB", *[0.0] * 7, command, 1, 1, 0))

    def ack(self, sequence: int, system: int, component: int) -> bytes:
        return self.frame(LOGGING_ACK, struct.pack("<HBB", sequence, system, component))


def main() -> None:
    connection, out = sys.argv[1], sys.argv[2]
    kind, host, port = connection.split(":")
    stop = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    frames = Frames()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if kind == "udpin":  # the vehicle's address from its first datagram (its heartbeat)
        sock.bind((host, int(port)))
        _, peer = sock.recvfrom(65535)
    else:
        sock.bind(("", 0))
        peer = (host, int(port))
    sock.settimeout(0.05)
    sock.sendto(frames.command(MAV_CMD_LOGGING_START), peer)
    with open(out, "wb") as file:  # noqa: PTH123 (no pathlib import: the floor imports least)
        while not stop:
            try:
                datagram, sender = sock.recvfrom(65535)
            except TimeoutError:
                continue
            position = 0
            while len(datagram) - position >= 12 and datagram[position] == 0xFD:
                size = datagram[position + 1]
                end = position + 12 + size + (13 if datagram[position + 2] & 1 else 0)
                msg_id = datagram[position + 7] | datagram[position + 8] << 8
                payload = datagram[position + 10 : position + 10 + size].ljust(6, b"\0")
                if msg_id in (LOGGING_DATA, LOGGING_DATA_ACKED) and payload[2] == OUR_SYSTEM:
                    if msg_id == LOGGING_DATA_ACKED:
                        system, component = datagram[position + 5], datagram[position + 6]
                        sequence = payload[0] | payload[1] << 8
                        sock.sendto(frames.ack(sequence, system, component), sender)
                    file.write(payload[6 : 6 + payload[4]])
                position = end
        sock.sendto(frames.command(MAV_CMD_LOGGING_STOP), peer)


if __name__ == "__main__":
    main()
