"""``record`` uploading to a Flight Review contract server, across a restart of the recorder.

A simulated PX4 streams over UDP to ``record --once``; the first run finds the server failing
(503) and stops with the log still waiting; the second run uploads it from the on-disk queue,
then its own log: each log arrives once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from support.processes import Process, make_flight, recordings
from support.review_server import ReviewServer

from ulogstream.cli.demo import free_udp_port
from ulogstream.recorder.wiring import UPLOAD_QUEUE_FOLDER

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.timeout(120)


def record_to(tmp_path: Path, port: int, out: Path, url: str, name: str) -> Process:
    return Process(
        [
            "record", f"udpin:127.0.0.1:{port}", "--once", "--out", str(out),
            "--idle-timeout", "0.5", "--no-status",
            "--set", "upload.target=flight_review",
            "--set", f"upload.flight_review.url={url}",
            "--set", "upload.backoff_s=60",
        ],
        tmp_path,
        name=name,
    )  # fmt: skip


@pytest.mark.asyncio
async def test_a_log_the_server_failed_is_uploaded_once_by_the_next_run(
    tmp_path: Path, processes: list[Process]
) -> None:
    flights = [make_flight(tmp_path, duration_s=1.5, seed=seed) for seed in (21, 22)]
    out = tmp_path / "recordings"
    async with ReviewServer("plot_app", answers=[503]) as server:
        runs: list[Process] = []
        for run, flight in enumerate(flights):
            port = free_udp_port()
            recorder = record_to(tmp_path, port, out, server.url, f"record{run}")
            processes.append(recorder)
            runs.append(recorder)
            await recorder.await_line("listening on")
            sim = Process(
                ["sim", str(flight.path), f"udpout:127.0.0.1:{port}", "--rate", "usb"],
                tmp_path,
                name=f"sim{run}",
            )
            processes.append(sim)
            assert await recorder.await_exit(limit=60) == 0
            assert await sim.await_exit() == 0
            if run == 0:
                assert [u.status for u in server.received] == [503]
                assert len(list((out / UPLOAD_QUEUE_FOLDER).glob("*.json"))) == 1

    # in finishing order: each run records under its own link's vehicle folder
    first, second = sorted(recordings(out), key=lambda path: path.stat().st_mtime)
    assert [u.status for u in server.received] == [503, 302, 302]
    assert sorted(server.stored.values()) == sorted([first.read_bytes(), second.read_bytes()])
    assert list((out / UPLOAD_QUEUE_FOLDER).iterdir()) == []
    before, after = (recorder.stderr() for recorder in runs)
    assert "retried at the next start" in before
    assert f"1 log(s) waiting for upload since the last run, the first {first}" in after
    assert after.count("uploaded ") == 2
