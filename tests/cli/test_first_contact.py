"""A newcomer's mistakes, through ``main([...])`` as the user types them (issue 14, 1 and 2).

One line each, no traceback, and no success claimed for work not done.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.processes import Process

from ulogstream import __version__
from ulogstream.cli import main
from ulogstream.cli.demo import free_udp_port
from ulogstream.cli.live import run_quietly
from ulogstream.recorder import replay
from ulogstream.sim.flightlog import generate_flight_log

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _one_error(err: str, *pieces: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith("ulogstream: error: "), line
    assert "Traceback" not in line
    assert "Errno" not in line
    for piece in pieces:
        assert piece in line, line
    return line


# --- record / run: everything that can be checked before the vehicle talks -------------------


def test_record_out_naming_an_existing_file_fails_at_start_up(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "flights.ulg"
    target.write_bytes(b"not a directory")
    status, out, err = _run(capsys, "record", "udpin:127.0.0.1:14550", "--out", str(target))
    assert status == 1
    assert out == ""
    _one_error(err, str(target), "is a file, not a directory", "--out")
    assert target.read_bytes() == b"not a directory"


def test_record_out_below_a_file_fails_at_start_up(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    status, _, err = _run(capsys, "record", "udpin:127.0.0.1:14550", "--out", str(blocker / "sub"))
    assert status == 1
    _one_error(err, str(blocker / "sub"), "a part of the path is a file", "--out")


def test_record_out_in_a_directory_without_write_permission_fails_at_start_up(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root writes anyway: refuse as the kernel would for anyone else
        real_open = os.open

        def refusing_open(path: str, flags: int, mode: int = 0o777, **kwargs: int | None) -> int:
            if Path(path).parent == locked and flags & os.O_CREAT:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return real_open(path, flags, mode, **kwargs)

        monkeypatch.setattr(os, "open", refusing_open)
    try:
        status, _, err = _run(capsys, "record", "udpin:127.0.0.1:14550", "--out", str(locked))
    finally:
        locked.chmod(0o700)
    assert status == 1
    _one_error(err, str(locked), "permission denied")
    assert list(locked.iterdir()) == [], "the probe file was left behind"


def test_record_creates_a_missing_out_directory_and_leaves_no_probe(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "new" / "flights"
    # A connection that cannot open with --once: the start-up check has run by then.
    status, _, err = _run(
        capsys, "record", "/dev/ulogstream-no-such-port", "--once", "--out", str(out_dir)
    )
    assert status == 1
    _one_error(err, "/dev/ulogstream-no-such-port")
    assert out_dir.is_dir()
    assert list(out_dir.iterdir()) == []


def test_run_with_a_config_that_is_not_utf8_says_so_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "ulogstream.toml"
    config.write_bytes(b'[link]\nconnection = "caf\xe9"\n')
    status, _, err = _run(capsys, "run", "--config", str(config))
    assert status == 1
    _one_error(err, str(config), "not UTF-8", "save it as UTF-8")


def test_sim_of_a_missing_file_is_one_line_with_the_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "flight.ulg"
    status, _, err = _run(capsys, "sim", str(missing), "udpout:127.0.0.1:9")
    assert status == 1
    _one_error(err, f"{missing}: no such file or directory (check the path)")


@pytest.mark.parametrize(
    "command", [["info"], ["params"], ["messages"], ["export", "-f", "csv", "-o", "out"]]
)
def test_a_directory_given_as_the_log_is_named_as_a_directory(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    status, _, err = _run(capsys, command[0], str(tmp_path), *command[1:])
    assert status == 1
    _one_error(err, f"{tmp_path} is a directory, not a ULog file")


def test_debug_keeps_the_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "ulogstream.toml"
    config.write_bytes(b"\xff")
    with pytest.raises(Exception, match="not UTF-8"):
        main(["--debug", "run", "--config", str(config)])
    capsys.readouterr()


# --- truncated files: print what there is, and say the file is cut ---------------------------


@pytest.fixture(name="cut_log")
def fixture_cut_log(flight_log: Path, tmp_path: Path) -> Path:
    """The flight cut in the middle of a message, two thirds in."""
    data = flight_log.read_bytes()
    path = tmp_path / "cut.ulg"
    path.write_bytes(data[: len(data) * 2 // 3 + 5])
    return path


def _truncation_warning(err: str, path: Path) -> None:
    warnings = [line for line in err.splitlines() if line.startswith("ulogstream: warning: ")]
    assert any(f"{path} is truncated" in line for line in warnings), err
    assert "error" not in err


def test_params_of_a_truncated_file_prints_them_and_warns(
    capsys: pytest.CaptureFixture[str], cut_log: Path
) -> None:
    status, out, err = _run(capsys, "params", str(cut_log))
    assert status == 0
    assert len(out.splitlines()) > 10
    _truncation_warning(err, cut_log)


def test_messages_of_a_truncated_file_prints_them_and_warns(
    capsys: pytest.CaptureFixture[str], cut_log: Path
) -> None:
    status, out, err = _run(capsys, "messages", str(cut_log))
    assert status == 0
    assert out.splitlines(), "the logged strings before the cut"
    _truncation_warning(err, cut_log)


def test_a_log_cut_in_its_definitions_says_there_is_nothing(
    capsys: pytest.CaptureFixture[str], flight_log: Path, tmp_path: Path
) -> None:
    path = tmp_path / "header-only.ulg"
    path.write_bytes(flight_log.read_bytes()[:200])
    status, out, err = _run(capsys, "messages", str(path))
    assert (status, out) == (0, "")
    _truncation_warning(err, path)
    assert f"ulogstream: warning: {path}: no logged messages" in err.splitlines()


@pytest.mark.parametrize(("kind", "suffix"), [("rosbag", ".bag"), ("mcap", ".mcap")])
def test_ros_export_of_a_truncated_file_warns(
    capsys: pytest.CaptureFixture[str], flight_log: Path, tmp_path: Path, kind: str, suffix: str
) -> None:
    path = tmp_path / "header-only.ulg"
    path.write_bytes(flight_log.read_bytes()[:200])
    out_file = tmp_path / f"out{suffix}"
    status, out, err = _run(capsys, "export", str(path), "-f", kind, str(out_file))
    assert status == 0
    assert out.startswith(f"wrote {out_file}: 0 topics")
    lines = err.splitlines()
    assert any("log ends" in line and "into a message" in line for line in lines), err
    assert f"ulogstream: warning: {path}: no data messages were exported" in err


# --- brokers that are not there -----------------------------------------------------------------


def _closed_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_replay_to_an_unreachable_broker_fails_and_says_so(
    capsys: pytest.CaptureFixture[str], cut_log: Path
) -> None:
    url = f"mqtt://127.0.0.1:{_closed_port()}"
    status, out, err = _run(capsys, "replay", str(cut_log), "--mqtt", url, "--speed", "0")
    assert status == 1
    assert "published" not in out
    errors = [line for line in err.splitlines() if line.startswith("ulogstream: error: ")]
    assert errors == [
        (
            f"ulogstream: error: the broker at {url} was never reached (Connection refused):"
            " nothing was published (is it running? check the URL)"
        )
    ]


# --- conventions ------------------------------------------------------------------------------


def test_a_bare_ulogstream_shows_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(capsys)
    assert (status, err) == (0, "")
    assert out.startswith("usage: ulogstream ")
    assert "record" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"ulogstream {__version__}\n"


# --- one-shot commands on conditions that never heal (issue 21 item 14) ------------------------


@pytest.mark.parametrize("kind", ["regular file", "/dev/null", "directory"])
def test_record_refuses_a_path_that_is_not_a_serial_port(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    device = {"regular file": tmp_path / "ttyACM0", "/dev/null": Path("/dev/null")}.get(
        kind, tmp_path
    )
    if kind == "regular file":
        device.write_bytes(b"")
    status, _, err = _run(capsys, "record", str(device), "--out", str(tmp_path / "out"))
    assert status == 1
    _one_error(err, str(device), "is not a serial port", "/dev/ttyACM0")


def test_record_on_a_link_that_does_not_open_says_it_retries_and_how_to_stop(
    tmp_path: Path,
) -> None:
    record = Process(
        ["record", "udpout:no-such-host.invalid:14550", "--out", str(tmp_path / "out"),
         "--no-status"],
        tmp_path,
    )  # fmt: skip
    try:
        record.wait_for("retrying until it opens (Ctrl-C or SIGTERM stops)")
        assert record.stderr().count("retrying") == 1  # said once, not every attempt
        assert record.terminate(signal.SIGINT) == 0
    finally:
        record.kill()
    stderr = record.stderr()
    assert "stopping: no vehicle was heard, so there is no stream to stop" in stderr
    assert "LOGGING_STOP sent" not in stderr


def test_replay_to_a_broker_that_is_not_there_gives_up(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay, "CONNECT_LIMIT_S", 1.0)
    log = tmp_path / "flight.ulg"
    generate_flight_log(log, duration_s=30.0, seed=3)  # 30 s to replay at its own pace
    refused = f"mqtt://127.0.0.1:{free_udp_port()}"  # nothing listens there
    status, _, err = _run(capsys, "replay", str(log), "--mqtt", refused)
    line = _one_error(err.splitlines()[-1] + "\n", refused)
    assert status == 1
    assert "was never reached in 1 s (Connection refused)" in line


def _late_task_after_stop(started: threading.Event) -> Callable[[], Coroutine[object, object, str]]:
    """A main that returns while an executor thread is about to schedule a task on the loop.

    That is what aiomqtt does when a stop comes during a connection attempt: its connect runs in
    an executor thread, and paho's socket callback from that thread creates ``_misc_loop``.
    """

    async def misc_loop() -> None:
        await asyncio.sleep(1)

    async def main() -> str:
        loop = asyncio.get_running_loop()

        def connect() -> None:
            started.set()
            time.sleep(0.2)  # the blocking connect, still going when main has returned
            loop.call_soon_threadsafe(lambda: loop.create_task(misc_loop()))

        loop.run_in_executor(None, connect)
        await asyncio.to_thread(started.wait)
        return "stopped"

    return main


def test_no_task_is_left_pending_at_exit_after_a_stop_during_a_connection_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 21 item 10: no 'Task was destroyed but it is pending!' at exit."""

    def destroyed() -> list[str]:
        gc.collect()
        return [r.getMessage().splitlines()[0] for r in caplog.records if "destroyed" in r.msg]

    assert run_quietly(_late_task_after_stop(threading.Event())()) == "stopped"
    assert destroyed() == []
    # The same with asyncio.run: the task the thread scheduled is destroyed pending.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'never awaited' belongs to what this shows
        asyncio.run(_late_task_after_stop(threading.Event())())
        assert destroyed() == ["Task was destroyed but it is pending!"]
