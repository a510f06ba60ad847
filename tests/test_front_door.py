"""The library's front door: ``from ulogstream import read`` and friends, numpy only on use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ulogstream
from ulogstream import ReadError, ULogParser, UlogstreamError, ULogWriter, iter_events, read
from ulogstream.sim.flightlog import generate_flight_log
from ulogstream.ulog.events import DataRows


def test_a_log_written_with_the_writer_reads_back_through_the_front_door(tmp_path: Path) -> None:
    writer = ULogWriter(timestamp_us=1000)
    writer.flag_bits()
    writer.format("t:uint64_t timestamp;float x;")
    msg_id = writer.add_logged_message("t")
    for i in range(3):
        writer.data(msg_id, np.array([(2000 + i, float(i))], "<u8,<f4").tobytes())
    path = tmp_path / "front.ulg"
    path.write_bytes(writer.getvalue())

    log = read(path)
    assert isinstance(log, ulogstream.ULogData)
    assert log.topics["t", 0].data["x"].tolist() == [0.0, 1.0, 2.0]
    rows = [e for e in iter_events(path) if isinstance(e, DataRows)]
    assert sum(len(e.rows) for e in rows) == 3
    parser = ULogParser()
    assert [type(e).__name__ for e in parser.receive_bytes(path.read_bytes())][:2] == [
        "FileHeader",
        "FlagBits",
    ]


def test_every_error_is_one_family_and_carries_where(tmp_path: Path) -> None:
    with pytest.raises(UlogstreamError) as raised:
        read(tmp_path / "absent.ulg")
    assert isinstance(raised.value, ReadError)
    assert raised.value.path == tmp_path / "absent.ulg"


def test_the_front_door_lists_its_names_and_refuses_others() -> None:
    assert {"read", "iter_events", "ULogParser", "ULogData", "ULogWriter"} <= set(dir(ulogstream))
    assert set(ulogstream.__all__) == set(dir(ulogstream))
    with pytest.raises(AttributeError, match="has no attribute 'reed'"):
        ulogstream.reed  # noqa: B018 (the access is the test)


def test_importing_the_package_loads_no_numpy_until_a_reading_name_is_used() -> None:
    script = (
        "import sys, ulogstream\n"
        "before = 'numpy' in sys.modules\n"
        "ulogstream.read\n"
        "print(before, 'numpy' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "True"]


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Reading logs from Python") :]
    start = section.index("```python\n") + len("```python\n")
    example = section[start : section.index("\n```", start)]
    generate_flight_log(tmp_path / "flight.ulg", duration_s=3.0, seed=1)
    done = subprocess.run(
        [sys.executable, "-c", example.replace("    ...", "    pass")],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert done.stdout.count("\n") == 2
