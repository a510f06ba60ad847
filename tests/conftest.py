"""Every shared fixture: real brokers, sample logs, generated flights, processes, systemd's socket.

The helpers the fixtures and tests use live in tests/support/ (one module per kind of part).
"""

from __future__ import annotations

import logging
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.broker import (
    PASSWORD,
    USERNAME,
    Broker,
    broker_config,
    free_port,
    make_certificates,
    running_broker,
)
from support.shared_data import SHARED_ULG_DIR, SHARED_ULG_FILES

from ulogstream.sim.flightlog import generate_flight_log

if TYPE_CHECKING:
    from collections.abc import Iterator

    from support.processes import Process


@pytest.fixture(autouse=True)
def _subprocesses_take_ctrl_c() -> None:
    """Let the ``ulogstream`` subprocesses a test starts take Ctrl-C (SIGINT) as a user's.

    A suite started as a background job (``cmd &`` in a script, some CI runners) inherits
    SIGINT ignored, and so would every process it starts: a test's Ctrl-C to a recorder or a
    download would do nothing and the process would run on to its end. With a handler in the
    test process, the processes it starts get SIGINT's default again. Checked before each test,
    in case anything in the process set it ignored meanwhile.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _no_log_handler_outlives_its_test() -> Iterator[None]:
    """Remove the log handlers a test's in-process ``ulogstream`` command installed.

    ``setup_logging`` binds a handler to the ``sys.stderr`` of the moment: under ``capsys`` a
    capture stream that is closed when the test ends. Left on the root logger, it made a later
    test's log line fail with "I/O operation on closed file" (seen on a loaded machine).
    """
    root = logging.getLogger()
    level = root.level
    yield
    for handler in root.handlers[:]:
        if type(handler) is logging.StreamHandler or type(handler).__module__.startswith(
            "ulogstream"
        ):
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(name="shared_ulg_files")
def fixture_shared_ulg_files() -> list[Path]:
    """Every sample log, or a skip with a reason when ../shared/data/ulg is absent."""
    if not SHARED_ULG_FILES:
        pytest.skip(f"{SHARED_ULG_DIR} is absent: the sample logs live beside a CI checkout only")
    return SHARED_ULG_FILES


@pytest.fixture(name="mosquitto")
def fixture_mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """An anonymous plain-TCP broker."""
    port = free_port()
    config = broker_config(tmp_path, "mosquitto", port, "allow_anonymous true\n")
    yield from running_broker(Broker("127.0.0.1", port, config))


@pytest.fixture(name="mosquitto_auth")
def fixture_mosquitto_auth(tmp_path: Path) -> Iterator[Broker]:
    """A broker that only lets ``USERNAME``/``PASSWORD`` in (file made by mosquitto_passwd)."""
    passwd_tool = shutil.which("mosquitto_passwd")
    if passwd_tool is None:
        pytest.skip("mosquitto_passwd is not installed (Debian package 'mosquitto')")
    password_file = tmp_path / "passwd"
    subprocess.run(
        [passwd_tool, "-b", "-c", str(password_file), USERNAME, PASSWORD],
        check=True,
        capture_output=True,
    )
    password_file.chmod(0o600)
    port = free_port()
    extra = f"allow_anonymous false\npassword_file {password_file}\n"
    config = broker_config(tmp_path, "mosquitto-auth", port, extra)
    broker = Broker("127.0.0.1", port, config, username=USERNAME, password=PASSWORD)
    yield from running_broker(broker)


@pytest.fixture(name="mosquitto_tls")
def fixture_mosquitto_tls(tmp_path: Path) -> Iterator[Broker]:
    """A TLS-only broker that requires a client certificate signed by the test CA."""
    certs = make_certificates(tmp_path / "certs")
    port = free_port()
    extra = (
        "allow_anonymous true\n"
        f"cafile {certs['ca.crt']}\n"
        f"certfile {certs['server.crt']}\n"
        f"keyfile {certs['server.key']}\n"
        "require_certificate true\n"
    )
    config = broker_config(tmp_path, "mosquitto-tls", port, extra)
    broker = Broker(
        "127.0.0.1",
        port,
        config,
        scheme="mqtts",
        ca_file=certs["ca.crt"],
        client_cert=certs["client.crt"],
        client_key=certs["client.key"],
    )
    yield from running_broker(broker)


@pytest.fixture(name="notify_socket")
def fixture_notify_socket() -> Iterator[tuple[socket.socket, Path]]:
    """A bound AF_UNIX datagram socket standing in for systemd's (a short path: 108 bytes max)."""
    with tempfile.TemporaryDirectory(prefix="uls-") as directory:
        path = Path(directory) / "notify"
        server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        server.bind(str(path))
        server.setblocking(False)  # noqa: FBT003 (socket API)
        try:
            yield server, path
        finally:
            server.close()


@pytest.fixture(name="processes")
def fixture_processes() -> Iterator[list[Process]]:
    """Processes a test starts; killed at the end if still running."""
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()


@pytest.fixture(name="flight_log", scope="session")
def fixture_flight_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 20 s generated flight (every feature of the generator, about 1 MB)."""
    path = tmp_path_factory.mktemp("flight") / "flight.ulg"
    generate_flight_log(path, duration_s=20.0, seed=7)
    return path


@pytest.fixture(name="minute_log", scope="session")
def fixture_minute_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default 60 s flight with seed 0, as ``ulogstream demo`` streams it."""
    path = tmp_path_factory.mktemp("minute") / "minute.ulg"
    generate_flight_log(path)
    return path
