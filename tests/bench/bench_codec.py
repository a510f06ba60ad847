"""Benchmark: LOGGING_DATA(_ACKED) frames decoded per second, ours against plain pymavlink.

Run: ``.venv/bin/python tests/bench/bench_codec.py [frames]``. The receive path must reach
40000 packets/s per core end to end, so decoding alone should be several times faster.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import socket
import sys
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING

from pymavlink.dialects.v20 import common as mavlink2

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled
from ulogstream.adapters.udp_transport import UdpTransport
from ulogstream.mavlink_codec import MavlinkCodec, fast_crc_active

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


def make_frames(count: int) -> list[bytes]:
    """Full 249-byte packets, one in eight ACKED, as PX4 sends them in the data phase."""
    vehicle = MavlinkCodec(system_id=1, component_id=1)
    rng = random.Random(1)  # noqa: S311 - reproducible test data
    return [
        vehicle.encode_logging_data(
            i % 0x10000, 255, 155, rng.randrange(249), rng.randbytes(249), acked=i % 8 == 0
        )
        for i in range(count)
    ]


def chunked(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def ours(chunks: Iterable[bytes]) -> int:
    codec = MavlinkCodec(system_id=255, component_id=155)
    count = 0
    for chunk in chunks:
        count += len(codec.decode(chunk))
    return count


def pymavlink_loop(chunks: Iterable[bytes]) -> int:
    """PX4's Tools/mavlink_ulog_streaming.py: parse_buffer, then keep the logging messages."""
    mav = mavlink2.MAVLink(None, srcSystem=255, srcComponent=155)
    mav.robust_parsing = True
    wanted = {"LOGGING_DATA", "LOGGING_DATA_ACKED"}
    count = 0
    for chunk in chunks:
        for message in mav.parse_buffer(chunk) or ():
            if message.get_type() in wanted:
                data = bytes(message.data[: message.length])
                count += data is not None
    return count


def rate(name: str, decode: Callable[[list[bytes]], int], chunks: list[bytes], frames: int) -> None:
    start = time.perf_counter()
    decoded = decode(chunks)
    elapsed = time.perf_counter() - start
    assert decoded == frames, f"{name}: decoded {decoded} of {frames}"
    print(
        f"{name:<48} {frames / elapsed:>10,.0f} frames/s  ({elapsed * 1e6 / frames:5.1f} us/frame)"
    )


def buffer_growth(chunk_size: int, frames: list[bytes]) -> None:
    stream = b"".join(frames)
    codec = MavlinkCodec(system_id=255, component_id=155)
    mav = mavlink2.MAVLink(None, srcSystem=255, srcComponent=155)
    ours_max = theirs_max = 0
    for chunk in chunked(stream, chunk_size):
        codec.decode(chunk)
        mav.parse_buffer(chunk)
        ours_max = max(ours_max, codec.buffered)
        theirs_max = max(theirs_max, len(mav.buf))
    print(
        f"largest receive buffer with {chunk_size}-byte reads: ours {ours_max} B, "
        f"pymavlink {theirs_max:,} B"
    )


def blast(frames: list[bytes], address: tuple[str, int]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        for frame in frames:
            sender.sendto(frame, address)
        for _ in range(10):
            time.sleep(0.01)
            sender.sendto(b"end", address)


async def udp_loopback(frames: list[bytes]) -> None:
    """UdpTransport.receive() + decode() on datagrams another process sends as fast as it can."""
    link = await UdpTransport.listen("127.0.0.1", 0)
    codec = MavlinkCodec(system_id=255, component_id=155)
    sender = multiprocessing.get_context("fork").Process(
        target=blast, args=(frames, link.local_address)
    )
    sender.start()
    received = 0
    async with asyncio.timeout(60):
        received += len(codec.decode(await link.receive()))
        cpu = time.process_time()
        start = time.perf_counter()
        while (data := await link.receive()) != b"end":
            received += len(codec.decode(data))
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    sender.join()
    await link.aclose()
    print(
        f"UDP loopback receive()+decode(), sender in another process: {received:,} of "
        f"{len(frames):,} datagrams (the rest dropped by the kernel) at "
        f"{received / elapsed:,.0f}/s, {cpu * 1e6 / received:.1f} us CPU each"
    )


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    print(f"fastcrc active: {fast_crc_active()}; {count} frames of 267 bytes")
    frames = make_frames(count)
    stream = b"".join(frames)
    serial_chunks = chunked(stream, 4096)
    rate("ours, one frame per datagram", ours, frames, count)
    rate("ours, 4096-byte serial reads", ours, serial_chunks, count)
    rate("pymavlink parse_buffer, one frame per datagram", pymavlink_loop, frames, count)
    rate("pymavlink parse_buffer, 4096-byte serial reads", pymavlink_loop, serial_chunks, count)
    fast = mavlink2.x25crc
    mavlink2.x25crc = mavlink2._x25crc_slow
    try:
        rate("pymavlink parse_buffer without fastcrc", pymavlink_loop, frames, count)
    finally:
        mavlink2.x25crc = fast
    tracemalloc.start()
    ours(serial_chunks)
    print(f"peak traced memory while decoding: {tracemalloc.get_traced_memory()[1]:,} B")
    tracemalloc.stop()
    buffer_growth(65536, frames[:20_000])
    asyncio.run(udp_loopback(frames))


if __name__ == "__main__":
    main()
