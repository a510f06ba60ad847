"""``ulogstream demo`` as the user runs it, shortened: exit 0, a summary, a faithful recording.

The oracle is the source itself: the demo's flight is regenerated with the same seed and
duration, and every message recorded must appear in it, in order, dropouts aside.
"""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from support.processes import (
    Process,
    assert_subsequence_of_source,
    assert_valid_ulog,
    clean_environment,
    json_samples,
    messages_of,
    recordings,
    subscriber,
)
from support.waiting import eventually

from ulogstream.adapters.ulog_file import read
from ulogstream.cli import demo
from ulogstream.cli.demo import DemoOptions
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.spec import MessageType

if TYPE_CHECKING:
    from pathlib import Path

    from support.broker import Broker

DURATION = "4"
SPEED = "4"
TIMEOUT = 60.0


def source_log(seed: int) -> bytes:
    out = io.BytesIO()
    generate_flight_log(out, duration_s=float(DURATION), seed=seed)
    return out.getvalue()


def run_demo(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "ulogstream", "demo", "--duration", DURATION, "--speed", SPEED,
            "--out", str(tmp_path / "recordings"), *options,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
        env=clean_environment(),
        check=False,
    )  # fmt: skip


def data_messages(log: bytes) -> int:
    return sum(message[2] == MessageType.DATA for message in messages_of(log)[1:])


def test_demo_with_loss_records_what_the_link_delivered(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--loss", "0.03", "--seed", "7")
    assert done.returncode == 0, done.stderr
    files = recordings(tmp_path / "recordings")
    assert len(files) == 1
    path = files[0]
    assert f"Recorded {path} (" in done.stdout
    assert f"ulogstream info {path}" in done.stdout
    assert "Traceback" not in done.stderr

    assert_valid_ulog(path)
    recording = path.read_bytes()
    source = source_log(7)
    dropouts = assert_subsequence_of_source(recording, source)
    assert dropouts > 0, "3 % loss left no dropout marker"
    recorded, total = data_messages(recording), data_messages(source)
    assert recorded < total
    match = re.search(r"(\d+) of (\d+) samples recovered", done.stdout)
    assert match is not None, done.stdout
    assert (int(match[1]), int(match[2])) == (recorded, total)
    lost = re.search(r"(\d+) lost in (\d+) gaps, marked by (\d+) measured dropouts", done.stdout)
    assert lost is not None, done.stdout
    assert int(lost[3]) == dropouts


def test_demo_without_loss_is_byte_identical_to_the_source(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--loss", "0", "--seed", "3")
    assert done.returncode == 0, done.stderr
    (path,) = recordings(tmp_path / "recordings")
    assert f"Recorded {path} (" in done.stdout
    assert path.read_bytes() == source_log(3)
    assert_valid_ulog(path)
    assert re.search(r"0 lost in 0 gaps", done.stdout), done.stdout


def test_demo_rejects_impossible_options(tmp_path: Path) -> None:
    done = run_demo(tmp_path, "--loss", "1.5")
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["ulogstream: error: --loss must be in [0, 1), not 1.5"]
    assert not (tmp_path / "recordings").exists()


@pytest.mark.broker
@pytest.mark.asyncio
async def test_demo_publishes_live_to_mqtt(tmp_path: Path, mosquitto: Broker) -> None:
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/demo/#") as messages:
        demo = Process(
            [
                "demo", "--duration", DURATION, "--speed", SPEED, "--loss", "0",
                "--out", str(tmp_path / "recordings"), "--mqtt", mosquitto.url,
            ],
            tmp_path,
            name="demo",
        )  # fmt: skip
        try:
            assert await demo.await_exit(TIMEOUT) == 0, demo.stderr()
        finally:
            demo.kill()
        expected = {"vehicle_attitude/0", "sensor_combined/0", "battery_status/0"}
        await eventually(
            lambda: expected <= set(json_samples(messages, "ulogstream/demo/json/")),
            what=f"samples of {sorted(expected)} at the subscriber",
        )

    samples = json_samples(messages, "ulogstream/demo/json/")
    assert all("timestamp" in sample for sample in samples["vehicle_attitude/0"])
    statuses = [m for m in messages if m.topic == "ulogstream/demo/meta/status"]
    assert statuses
    assert f"to {mosquitto.url} (0 dropped) under ulogstream/demo/" in demo.stdout()

    # A dashboard connecting afterwards is shown the finished file, not a .part being recorded.
    (path,) = recordings(tmp_path / "recordings")
    async with subscriber(mosquitto.host, mosquitto.port, "ulogstream/demo/meta/status") as got:
        await eventually(lambda: bool(got), what="no retained status after the demo")
    retained = json.loads(got[0].payload)
    assert got[0].retain
    assert (retained["online"], retained["state"]) == (False, "stopped")
    assert (retained["log_file"], retained["logs"]) == (str(path), 1)


def test_demo_to_an_unreachable_broker_says_so_and_fails(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"mqtt://127.0.0.1:{probe.getsockname()[1]}"
    done = run_demo(tmp_path, "--loss", "0", "--mqtt", url)
    assert done.returncode == 1
    assert "Published" not in done.stdout
    assert (
        f"MQTT: the broker at {url} was never reached (Connection refused): nothing was"
        " published (is it running? check the URL)."
    ) in done.stdout.splitlines()
    assert "Traceback" not in done.stderr
    assert len(recordings(tmp_path / "recordings")) == 1, "the recording itself was made"


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_the_demo_view_lists_every_topic_instance_with_its_rows(tmp_path: Path) -> None:
    view = io.StringIO()
    options = DemoOptions(out_dir=tmp_path / "recordings", duration_s=3.0, speed=4.0, loss=0.0)
    result = await demo.run_demo(options, view=view)
    assert result.recording is not None
    counted = {key: stats.samples for key, stats in result.status.topics.items()}
    expected = {
        key: len(topic.timestamps_us)
        for key, topic in read(result.recording).topics.items()
        if len(topic.timestamps_us)
    }
    assert counted == expected
    assert "vehicle_attitude" in view.getvalue()
