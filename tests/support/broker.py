"""A real mosquitto under test control: its process, config, certificates (openssl CLI), ports.

The fixtures in tests/conftest.py write a config into ``tmp_path``, start ``mosquitto`` on a free
127.0.0.1 port, wait until it accepts TCP connections, yield a :class:`Broker` and kill it after.
"""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

START_TIMEOUT = 10.0
"""Seconds a broker may take to accept connections on a loaded machine."""

USERNAME = "vehicle"
PASSWORD = "s3cret-pw"  # noqa: S105  # the test broker's throwaway password


def mosquitto_binary() -> str:
    """The mosquitto executable, or a skip with a reason when it is not installed."""
    found = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
    )
    if found is None:
        pytest.skip("mosquitto is not installed (Debian package 'mosquitto'; .ci/test installs it)")
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Broker:
    """A mosquitto process under test control.

    Attributes:
        host: Always 127.0.0.1.
        port: The listener's port (kept across :meth:`stop`/:meth:`start`).
        config: The generated configuration file.
        scheme: ``mqtt`` or ``mqtts``.
        ca_file: CA certificate of a TLS broker.
        client_cert: Client certificate signed by the CA (TLS).
        client_key: Key of ``client_cert`` (TLS).
        username: The user a password broker accepts.
        password: That user's password.
    """

    host: str
    port: int
    config: Path
    scheme: str = "mqtt"
    ca_file: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    username: str | None = None
    password: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:PORT`` (or mqtts)."""
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self) -> None:
        """Start mosquitto and wait until it accepts connections."""
        log = self.config.with_suffix(".log").open("ab")
        self.process = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.config)], stdout=log, stderr=log
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                text = self.config.with_suffix(".log").read_text(errors="replace")
                pytest.fail(f"mosquitto exited with {self.process.returncode}: {text[-2000:]}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"mosquitto did not listen on {self.port} in {START_TIMEOUT} s")
                time.sleep(0.02)

    def stop(self) -> None:
        """Kill mosquitto (SIGKILL: no goodbye to clients) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None


def broker_config(tmp_path: Path, name: str, port: int, extra: str) -> Path:
    path = tmp_path / f"{name}.conf"
    path.write_text(
        f"listener {port} 127.0.0.1\n"
        "persistence false\n"
        "max_queued_messages 100000\n"
        "log_dest stderr\n"
        "log_type error\nlog_type warning\nlog_type notice\n"
        # As root mosquitto would switch to user 'mosquitto', which cannot read tmp_path.
        f"user {getpass.getuser()}\n"
        f"{extra}"
    )
    return path


def running_broker(broker: Broker) -> Iterator[Broker]:
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=cwd)


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    directory.mkdir(parents=True, exist_ok=True)
    days = "2"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", days, "-subj", "/CN=ulogstream test CA", cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ext in (("server", ["-extfile", "server.ext"]), ("client", [])):
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", f"/CN={name}", cwd=directory,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", days, *ext, cwd=directory,
        )  # fmt: skip
    return {
        name: directory / name
        for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    }
