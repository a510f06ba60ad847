"""A wrong configuration stops ``ulogstream run``/``record`` with one line, before anything starts.

Each case runs the real command with ``NOTIFY_SOCKET`` pointing at a socket of the test: the
error must be one ``ulogstream: error: ...`` line naming the file (or the command line) and the
key, the exit status non-zero, no traceback, no recordings directory, and no READY=1 sent.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from support.processes import clean_environment, received

if TYPE_CHECKING:
    import socket
    from pathlib import Path

TIMEOUT = 30.0


def run_failing(
    args: list[str], workdir: Path, notify: tuple[socket.socket, Path]
) -> tuple[int, str, str]:
    """Run ``ulogstream ARGS``; return its exit status, stdout and stderr."""
    server, path = notify
    done = subprocess.run(
        [sys.executable, "-m", "ulogstream", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=workdir,
        env=clean_environment(NOTIFY_SOCKET=str(path), WATCHDOG_USEC="100000"),
        check=False,
    )
    assert received(server) == [], "systemd was notified although nothing started"
    return done.returncode, done.stdout, done.stderr


def assert_one_error_line(stderr: str, *fragments: str) -> str:
    """``stderr`` is exactly one ``ulogstream: error:`` line holding every fragment."""
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    line = lines[0]
    assert line.startswith("ulogstream: error: "), line
    assert "Traceback" not in line
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    return line


CASES: list[tuple[str, str, list[str]]] = [
    (
        "unknown-key",
        '[link]\nconection = "udpin:127.0.0.1:14550"\n',
        ["unknown key link.conection", "(did you mean link.connection?)"],
    ),
    (
        "unknown-section",
        "[recordng]\nmax_logs = 3\n",
        ["unknown section [recordng]", "(did you mean [recording]?)"],
    ),
    ("wrong-type", '[link]\nsysid = "254"\n', ["link.sysid must be an integer, not a string"]),
    ("wrong-type-bool", "[log]\nstatus_line = 1\n", ["log.status_line must be true or false"]),
    ("wrong-choice", '[log]\nlevel = "verbose"\n', ["log.level must be one of", "'verbose'"]),
    ("impossible-id", "[link]\nsysid = 300\n", ["link.sysid must be a MAVLink id from 1 to 255"]),
    ("impossible-qos", "[mqtt]\nqos = 3\n", ["mqtt.qos must be 0, 1 or 2, not 3"]),
    (
        "impossible-timeout",
        "[recording]\nidle_timeout_s = 0\n",
        ["recording.idle_timeout_s must be > 0 s"],
    ),
    (
        "negative-rate",
        "[mqtt.rates]\nvehicle_attitude = -5\n",
        ["mqtt.rates.vehicle_attitude must be >= 0 Hz"],
    ),
    (
        "bad-port",
        '[link]\nconnection = "udpin:0.0.0.0:70000"\n',
        ["link.connection 'udpin:0.0.0.0:70000' is not valid (port 70000 is outside 0-65535)"],
    ),
    (
        "bad-connection",
        '[link]\nconnection = "udpx:localhost:14550"\n',
        ["link.connection", "'udpx:localhost:14550' is not valid", "unknown link type 'udpx'"],
    ),
    (
        "bad-mqtt-url",
        '[mqtt]\nurl = "http://broker:1883"\n',
        ["mqtt.url must start with mqtt:// or mqtts://"],
    ),
    (
        "inline-password",
        '[mqtt]\npassword = "hunter2"\n',
        ["mqtt.password is never accepted inline", "mqtt.password_file"],
    ),
    ("invalid-toml", '[link\nconnection = "x"\n', ["invalid TOML"]),
]


@pytest.mark.parametrize(("name", "text", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_bad_config_file_gives_one_line_naming_file_and_key(
    tmp_path: Path,
    notify_socket: tuple[socket.socket, Path],
    name: str,
    text: str,
    fragments: list[str],
) -> None:
    config = tmp_path / f"{name}.toml"
    config.write_text(text, encoding="utf-8")
    out = tmp_path / "recordings"
    code, stdout, stderr = run_failing(
        ["run", "--config", str(config), "--out", str(out)], tmp_path, notify_socket
    )
    assert code == 1
    assert stdout == ""
    assert_one_error_line(stderr, f"{config}: ", *fragments)
    assert not out.exists()


def test_missing_config_file(tmp_path: Path, notify_socket: tuple[socket.socket, Path]) -> None:
    missing = tmp_path / "nowhere.toml"
    code, _, stderr = run_failing(["run", "--config", str(missing)], tmp_path, notify_socket)
    assert code == 1
    assert_one_error_line(stderr, f"config file {missing} does not exist")


def test_unknown_key_on_the_command_line(
    tmp_path: Path, notify_socket: tuple[socket.socket, Path]
) -> None:
    out = tmp_path / "recordings"
    code, _, stderr = run_failing(
        ["run", "--out", str(out), "--set", "recording.max_log=3"], tmp_path, notify_socket
    )
    assert code == 1
    assert_one_error_line(
        stderr, "command line: unknown key recording.max_log", "did you mean recording.max_logs?"
    )
    assert not out.exists()


def test_bad_connection_on_the_command_line(
    tmp_path: Path, notify_socket: tuple[socket.socket, Path]
) -> None:
    out = tmp_path / "recordings"
    code, _, stderr = run_failing(
        ["record", "udpout:127.0.0.1", "--once", "--out", str(out)], tmp_path, notify_socket
    )
    assert code == 1
    assert_one_error_line(stderr, "command line: link.connection", "HOST:PORT is missing")
    assert not out.exists()


def test_missing_password_file(tmp_path: Path, notify_socket: tuple[socket.socket, Path]) -> None:
    config = tmp_path / "mqtt.toml"
    missing = tmp_path / "mqtt-password"
    config.write_text(
        f'[mqtt]\nurl = "mqtt://127.0.0.1:1883"\nusername = "u"\npassword_file = "{missing}"\n',
        encoding="utf-8",
    )
    out = tmp_path / "recordings"
    code, _, stderr = run_failing(
        [
            "run",
            "--config",
            str(config),
            "--out",
            str(out),
            "--connection",
            "udpin:127.0.0.1:14550",
        ],
        tmp_path,
        notify_socket,
    )
    assert code == 1
    assert_one_error_line(stderr, f"mqtt.password_file {missing} cannot be read")
    assert not out.exists()


def test_missing_serial_device_with_record_once(
    tmp_path: Path, notify_socket: tuple[socket.socket, Path]
) -> None:
    device = tmp_path / "ttyACM9"
    out = tmp_path / "recordings"
    server, path = notify_socket
    done = subprocess.run(
        [sys.executable, "-m", "ulogstream", "record", str(device), "--once", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
        env=clean_environment(NOTIFY_SOCKET=str(path)),
        check=False,
    )
    assert done.returncode == 1
    assert_one_error_line(done.stderr, f"serial device {device} does not exist", "plugged in")
    assert not out.exists() or not list(out.rglob("*.ulg*"))
    # The recorder had started (READY) and says it stops; nothing was recorded.
    assert b"STOPPING=1" in b"\n".join(received(server))
