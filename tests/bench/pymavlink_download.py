"""The reference log download: pymavlink's ``mavutil`` loop, as MAVProxy-style scripts do it.

Run: ``python tests/bench/pymavlink_download.py CONNECTION OUT.ulg`` (the vehicle's newest log).

Built for the benchmark, after the usual script (MAVProxy's ``log`` module, QGroundControl-like
tools): ask for the list, then for the whole log; take LOG_DATA with ``recv_match``; when the
data stops for 0.5 s, ask again for the first missing range, until every byte is there. It
writes the file at the end and prints ``BYTES SECONDS REQUESTS``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pymavlink import mavutil

CHUNK = 90
IDLE_S = 0.5


def main() -> None:
    """Download the newest log of the vehicle on ``argv[1]`` to ``argv[2]``."""
    link = mavutil.mavlink_connection(sys.argv[1], source_system=254, source_component=190)
    heartbeat = link.wait_heartbeat(timeout=10)
    if heartbeat is None:
        sys.exit("no heartbeat")
    system, component = link.target_system, 1
    link.mav.log_request_list_send(system, component, 0, 0xFFFF)
    entries = {}
    while True:
        entry = link.recv_match(type="LOG_ENTRY", blocking=True, timeout=2)
        if entry is None:
            sys.exit("no LOG_ENTRY")
        entries[entry.id] = entry
        if len(entries) >= entry.num_logs:
            break
    newest = max(entries.values(), key=lambda e: (e.time_utc, e.id))
    size = newest.size
    chunks: dict[int, bytes] = {}
    started = time.monotonic()
    link.mav.log_request_data_send(system, component, newest.id, 0, 0xFFFFFFFF)
    requests = 1
    have = 0
    while have < size:
        message = link.recv_match(type="LOG_DATA", blocking=True, timeout=IDLE_S)
        if message is not None:
            if message.id == newest.id and message.ofs not in chunks and message.count:
                chunks[message.ofs] = bytes(message.data[: message.count])
                have += message.count
            continue
        gap = next(ofs for ofs in range(0, size, CHUNK) if ofs not in chunks)
        following = next((ofs for ofs in range(gap, size, CHUNK) if ofs in chunks), size)
        link.mav.log_request_data_send(system, component, newest.id, gap, following - gap)
        requests += 1
    seconds = time.monotonic() - started
    link.mav.log_request_end_send(system, component)
    Path(sys.argv[2]).write_bytes(b"".join(chunks[ofs] for ofs in sorted(chunks)))
    print(size, f"{seconds:.3f}", requests)


if __name__ == "__main__":
    main()
