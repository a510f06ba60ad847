"""A real mosquitto per test: plain, TLS (certificates made by the openssl CLI) and password auth.

Each fixture writes a config into ``tmp_path``, starts ``mosquitto`` on a free 127.0.0.1 port,
waits until it accepts TCP connections, yields a :class:`Broker` and kills it afterwards.
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


def _running(broker: Broker) -> Iterator[Broker]:
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(name="mosquitto")
def fixture_mosquitto(tmp_path: Path) -> Iterator[Broker]:
    """An anonymous plain-TCP broker."""
    port = free_port()
    config = broker_config(tmp_path, "mosquitto", port, "allow_anonymous true\n")
    yield from _running(Broker("127.0.0.1", port, config))


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
    yield from _running(broker)


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
    yield from _running(broker)
