"""Foxglove viewers for the live-view tests: Foxglove's own protocol client, run by Node.

``tests/node/foxglove_client.mjs`` is built on ``@foxglove/ws-protocol``; :class:`Viewer` runs it
and parses its lines. The oracle is pyulog (:func:`pyulog_rows`), with MCAP topic names.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from pyulog import ULog

from ulogstream.export.rosnames import ros_topic

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
CLIENT_SCRIPT = NODE_DIR / "foxglove_client.mjs"


def node_client_installed() -> None:
    """Skip with the reason when Node or the npm packages are missing; install them if npm is."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the Foxglove client tests (Debian: nodejs, npm)")
    if not (NODE_DIR / "node_modules" / "@foxglove" / "ws-protocol").is_dir():
        result = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
        if result.returncode != 0:
            pytest.skip(f"npm install in {NODE_DIR} failed: {result.stderr.strip()[-300:]}")


class Viewer:
    """A running ``foxglove_client.mjs``: its output lines, parsed, as they come."""

    def __init__(
        self,
        url: str,
        subprotocols: tuple[str, ...] = ("foxglove.sdk.v1", "foxglove.websocket.v1"),
        *,
        ros2_only: bool = False,
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
                assert self.process.poll() is not None, line  # only a killed viewer's last line
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
