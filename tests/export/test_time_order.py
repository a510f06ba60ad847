"""Exports in time order: sorting in bounded memory, chunk order, Foxglove's own readers.

Foxglove's bag reader (@foxglove/rosbag) takes the first chunk's start time as the bag's start
and drops every message before it, so no message may be earlier than the start of an earlier
chunk. The readers themselves run on Node.js from tests/node (installed by .ci/test with npm);
those tests skip, saying why, when node or the modules are missing.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from mcap.reader import make_reader
from pyulog import ULog
from rosbags.rosbag1 import Reader
from support.shared_data import SHARED_ULG_FILES, shared_ulg
from support.ulog_builders import EXTRA_ROWS

from ulogstream.adapters.ulog_file import read
from ulogstream.export import mcap, ordering, rosbag
from ulogstream.export.mcap import export_mcap
from ulogstream.export.ordering import TimeOrder
from ulogstream.export.rosbag import export_rosbag
from ulogstream.export.rosnames import LOG_TOPIC, PARAMETER_TOPIC, ros_topic
from ulogstream.ulog.writer import ULogWriter

if TYPE_CHECKING:
    from collections.abc import Callable

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
READ_BACK = NODE_DIR / "read_back.cjs"
SAMPLE_NAMES = [p.name for p in SHARED_ULG_FILES] or ["pyulog__sample.ulg"]
EXPORTS: dict[str, Callable[..., object]] = {"bag": export_rosbag, "mcap": export_mcap}


def foxglove_counts(kind: str, path: Path) -> dict[str, int]:
    """Messages per topic as Foxglove's reader of ``kind`` ('bag' or 'mcap') reads them."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: Foxglove's bag and MCAP readers run on Node.js")
    if not (NODE_DIR / "node_modules" / "@foxglove" / "rosbag").is_dir():
        pytest.skip(f"Foxglove's readers are not installed: run `npm ci --prefix {NODE_DIR}`")
    done = subprocess.run(
        [node, str(READ_BACK), kind, str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    counts: dict[str, int] = json.loads(done.stdout)
    return counts


def disordered_log(path: Path) -> None:
    """Topics in order, going back in time, stamped 0, and logged long after their time."""
    w = ULogWriter(timestamp_us=1_000_000)
    w.flag_bits()
    w.format("steady:uint64_t timestamp;float x;")
    w.format("jumpy:uint64_t timestamp;int32_t y;")
    w.format("sensor_preflight:uint64_t timestamp;float z;")  # PX4 2018 logs it with 0
    w.format("late:uint64_t timestamp;uint8_t w;")
    w.parameter("P", 1)
    steady = w.add_logged_message("steady")
    jumpy = w.add_logged_message("jumpy")
    zero = w.add_logged_message("sensor_preflight")
    late = w.add_logged_message("late")
    for i in range(600):
        t = 2_000_000 + i * 1_000
        w.data(steady, struct.pack("<Qf", t, i))
        w.data(jumpy, struct.pack("<Qi", t - (400_000 if i % 50 == 49 else 0), -i))
        if i % 10 == 0:
            w.data(zero, struct.pack("<Qf", 0, i))
        if i == 300:
            w.parameter("P", 2)
            w.logging(ord("6"), t, "half way")
    for i in range(200):  # buffered elsewhere, logged at the end with their own times
        w.data(late, struct.pack("<QB", 2_000_000 + i * 2_000, i % 256))
    path.write_bytes(w.getvalue())


def check_bag_chunks(path: Path) -> None:
    """Chunks start in time order: no message precedes the start of an earlier chunk."""
    with Reader(path) as reader:
        starts = [info.start_time for info in reader.chunk_infos]
        assert starts == sorted(starts)
        for info in reader.chunk_infos:
            assert info.start_time <= info.end_time


def check_mcap_order(path: Path) -> None:
    """Messages in the file in log-time order; chunks in time order."""
    with path.open("rb") as stream:
        reader = make_reader(stream)
        times = [message.log_time for _, _, message in reader.iter_messages(log_time_order=False)]
        assert times == sorted(times)
        summary = reader.get_summary()
        assert summary is not None
        starts = [index.message_start_time for index in summary.chunk_indexes]
        assert starts == sorted(starts)


def test_time_order_sorts_stably_in_memory() -> None:
    with TimeOrder() as order:
        for i, t in enumerate([5, 1, 5, 0, 1]):
            order.add(t, i, bytes([i]))
        assert list(order.drain()) == [
            (0, 3, b"\x03"),
            (1, 1, b"\x01"),
            (1, 4, b"\x04"),
            (5, 0, b"\x00"),
            (5, 2, b"\x02"),
        ]
        assert order.runs == 0


def test_time_order_spills_runs_and_merges_them(tmp_path: Path) -> None:
    rng = random.Random(7)  # noqa: S311 (test data)
    entries = [(rng.randrange(1000), i, rng.randbytes(rng.randrange(0, 300))) for i in range(5000)]
    with TimeOrder(budget=20_000, directory=str(tmp_path)) as order:
        for entry in entries:
            order.add(*entry)
        assert order.runs > 0  # spilled (and merged once 64 runs piled up)
        assert list(order.drain()) == sorted(entries, key=lambda e: e[0])
    assert list(tmp_path.iterdir()) == []  # runs are anonymous temporary files


def test_time_order_merges_runs_before_they_pile_up(tmp_path: Path) -> None:
    rng = random.Random(8)  # noqa: S311 (test data)
    entries = [(rng.randrange(50), i, bytes(rng.randrange(0, 40))) for i in range(4000)]
    with TimeOrder(budget=1000, directory=str(tmp_path)) as order:
        for entry in entries:
            order.add(*entry)
            assert order.runs < ordering.MAX_RUNS
        assert list(order.drain()) == sorted(entries, key=lambda e: e[0])


@pytest.mark.parametrize("budget", [1 << 30, 4096])
def test_disordered_log_exports_in_time_order(
    budget: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "disordered.ulg"
    disordered_log(src)
    monkeypatch.setattr(rosbag, "BAG_CHUNK_SIZE", 2048)
    monkeypatch.setattr(mcap, "MCAP_CHUNK_SIZE", 2048)
    export_rosbag(src, tmp_path / "out.bag", sort_budget=budget)
    export_mcap(src, tmp_path / "out.mcap", sort_budget=budget)
    check_bag_chunks(tmp_path / "out.bag")
    check_mcap_order(tmp_path / "out.mcap")
    with Reader(tmp_path / "out.bag") as reader:
        assert len(reader.chunk_infos) > 10
    expected = {"/steady": 600, "/jumpy": 600, "/sensor_preflight": 60, "/late": 200}
    for kind in ("bag", "mcap"):
        counts = foxglove_counts(kind, tmp_path / f"out.{kind}")
        assert {topic: counts.get(topic) for topic in expected} == expected, kind
        assert counts[PARAMETER_TOPIC] == 2
        assert counts[LOG_TOPIC] == 1


def pyulog_counts(path: Path) -> Counter[tuple[str, int]]:
    """Rows per topic instance as pyulog reads them."""
    with contextlib.redirect_stdout(io.StringIO()):
        log = ULog(str(path))
    counts: Counter[tuple[str, int]] = Counter()
    for data in log.data_list:
        counts[data.name, data.multi_id] += len(data.data["timestamp"])
    return counts


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize("kind", ["bag", "mcap"])
@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_foxglove_reads_every_row_of_a_sample(kind: str, name: str, tmp_path: Path) -> None:
    src = shared_ulg(name)
    dst = tmp_path / f"out.{kind}"
    EXPORTS[kind](src, dst)
    counts = foxglove_counts(kind, dst)
    theirs = pyulog_counts(src)
    ours = {key: len(topic.data) for key, topic in read(src).topics.items() if len(topic.data)}
    back = {key: counts.get(ros_topic(*key), 0) for key in ours}
    assert back == ours  # every row exported comes back
    # and they are pyulog's rows, plus those recovered around corruption (tests/ulog)
    assert set(ours) == set(theirs)
    assert all(back[key] >= theirs[key] for key in theirs)
    assert sum(back.values()) - sum(theirs.values()) == EXTRA_ROWS.get(name, 0)
    if kind == "bag":
        check_bag_chunks(dst)
    else:
        check_mcap_order(dst)
