"""Foxglove viewers for the live-view tests: Foxglove's own protocol client, run by Node.

``tests/node/foxglove_client.mjs`` is built on ``@foxglove/ws-protocol``; :class:`Viewer` runs it
and parses its lines. The oracle is pyulog (:func:`pyulog_rows`), with MCAP topic names.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from pyulog import ULog

from support.waiting import wait_until
from ulogstream.cli.demo import free_udp_port
from ulogstream.export.rosnames import ros_topic

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
CLIENT_SCRIPT = NODE_DIR / "foxglove_client.mjs"

SITL_SAMPLE = "px4-ulog-rs__6ba1abc7-b433-4029-b8f5-3b2bb12d3b6c.ulg"
"""The live-view runs' log (../shared/data/ulg): SITL v1.8.0, 34 topic instances, 20390 rows,
2 logged strings, nested formats (MIT)."""


def node_client_installed() -> None:
    """Skip with the reason when Node or the npm packages of ``tests/node`` are missing."""
    npm_packages(NODE_DIR, "@foxglove/ws-protocol", "the Foxglove client tests")


class Viewer:
    """A running ``foxglove_client.mjs``: its output lines, parsed, as they come."""

    def __init__(
        self,
        url: str,
        subprotocols: tuple[str, ...] = ("foxglove.sdk.v1", "foxglove.websocket.v1"),
        *,
        ros2_only: bool = False,
        subscribe_delay_s: float = 0.0,
    ) -> None:
        node = shutil.which("node")
        assert node is not None
        mode = ["ros2-only"] if ros2_only else []
        self.process = subprocess.Popen(
            [node, str(CLIENT_SCRIPT), url, ",".join(subprotocols), *mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "SUBSCRIBE_DELAY_MS": str(round(subscribe_delay_s * 1000))},
        )
        self.lines: list[dict[str, object]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                self.lines.append(json.loads(line))
            except json.JSONDecodeError:
                # Only a killed viewer's last line may be cut; its pipe closes as it exits, so
                # its exit status may take a moment to be there.
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    raise AssertionError(line) from None
                return

    def of_kind(self, kind: str) -> list[dict[str, object]]:
        return [line for line in list(self.lines) if line["kind"] == kind]

    def messages(self, topic: str) -> list[dict[str, object]]:
        return [m for m in self.of_kind("message") if m["topic"] == topic]

    def command(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def pyulog_rows(files: list[Path]) -> dict[str, list[dict[str, object]]]:
    """Every row of every file, in order, as ``{topic: [row, ...]}`` with MCAP topic names."""
    out: dict[str, list[dict[str, object]]] = {}
    for path in files:
        ulog = ULog(str(path))
        for data in ulog.data_list:
            rows = out.setdefault(ros_topic(data.name, data.multi_id), [])
            columns = data.data
            kept = {k: v for k, v in columns.items() if "._padding" not in k}  # never published
            rows.extend(
                {key: values[i] for key, values in kept.items()}
                for i in range(len(columns["timestamp"]))
            )
    return out


def same_value(received: object, expected: object) -> bool:
    if isinstance(expected, np.floating):
        if not np.isfinite(expected):
            return received is None
        return isinstance(received, int | float) and bool(
            np.asarray(received, dtype=expected.dtype) == expected
        )
    if isinstance(expected, np.bool_):
        return received is bool(expected)
    return isinstance(received, int) and received == int(expected)  # type: ignore[call-overload]


def npm_packages(folder: Path, marker: str, what: str) -> None:
    """Skip with the reason unless ``folder``'s npm packages (``marker`` one of them) install.

    Runs ``npm ci`` there when ``node_modules/{marker}`` is missing (``.ci/test`` runs it first).
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip(f"node and npm are needed for {what} (Debian: nodejs, npm)")
    if not (folder / "node_modules" / marker).is_dir():
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if result.returncode != 0:
            pytest.skip(f"npm ci in {folder} failed: {result.stderr.strip()[-300:]}")


class LiveRecording:
    """``ulogstream record --foxglove`` on a UDP port, and ``ulogstream sim`` streaming into it.

    ``record_args`` are added to the recorder's command line (rate, encoding...); its log goes
    to ``err`` (read with :meth:`log`).
    """

    def __init__(self, tmp: Path, *record_args: str) -> None:
        self.port = free_udp_port()
        self.out = tmp / "rec"
        self.err = tmp / "record.err"
        self._exe = [sys.executable, "-m", "ulogstream"]
        self.sim: subprocess.Popen[bytes] | None = None
        with self.err.open("w") as err:
            self.recorder = subprocess.Popen(
                [
                    *self._exe,
                    *("record", f"udpin:127.0.0.1:{self.port}", "--out", str(self.out)),
                    *("--foxglove", "127.0.0.1:0", "--idle-timeout", "1", "--no-status"),
                    *("--set", "foxglove.backlog=200000", *record_args),
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def log(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def url(self) -> str:
        """The live view's URL, once the recorder has logged it."""
        found: list[str] = []

        def logged() -> bool:
            found[:] = re.findall(r"Foxglove live view at (ws://\S+)", self.log())
            return bool(found)

        wait_until(logged, what="the recorder's Foxglove URL in its log")
        return found[0]

    def stream(self, source: Path) -> None:
        """The simulated PX4 streams ``source`` at USB speed, again after each STOP."""
        self.sim = subprocess.Popen(
            [
                *(*self._exe, "sim", str(source), f"udpout:127.0.0.1:{self.port}"),
                *("--rate", "usb", "--speed", "max", "--repeat"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        """SIGINT: the recorder must finish its files and exit 0."""
        self.recorder.send_signal(signal.SIGINT)
        assert self.recorder.wait(timeout=60) == 0, self.log()

    def recordings(self) -> list[Path]:
        return sorted(self.out.rglob("*.ulg"))

    def close(self) -> None:
        if self.sim is not None:
            self.sim.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.sim.wait(timeout=10)
        if self.recorder.poll() is None:
            self.recorder.kill()
            self.recorder.wait()
