"""``ulogstream record`` with one part of the live path made free: what that part costs.

Run: ``python tests/bench/free_part.py PART record ARGS...`` (``bench_real.py`` runs it as the
receiver ``"free:PART record --mqtt"``, the script in the same run). PART is one of:

- ``json``: every JSON sample payload is the constant ``{}``. The publish policy still weighs
  every batch and chooses the same rows; the sink frames and sends every message.
- ``policy``: the publish policy takes no parser event. The parser still frames every message
  of the log; only the status goes to the broker.

The recording itself is untouched (``bench_real`` still compares it with the log byte for byte).
The difference between ``record --mqtt`` and ``free:json record --mqtt`` is what building the JSON
text costs in the whole process, as a user runs it; between ``free:policy`` and ``record`` what
framing the log for the live path and keeping the broker connection cost.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's ulogstream, as ``python -m ulogstream`` from it

from ulogstream.cli import main  # noqa: E402
from ulogstream.live.encode import RowEncoder  # noqa: E402
from ulogstream.live.policy import PublishPolicy  # noqa: E402

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ulogstream.live.outbox import MqttMessage
    from ulogstream.ulog.events import ULogEvent

EMPTY = b"{}"

PREFIX = "free:"


def program(receiver: str) -> list[str]:
    """What runs a benchmark's ulogstream receiver after the interpreter (``record`` and on).

    ``"free:json record --mqtt"``: this script with part ``json``; any other: ``-m ulogstream``.
    """
    first = receiver.partition(" ")[0]
    if first.startswith(PREFIX):
        return [__file__, first.removeprefix(PREFIX)]
    return ["-m", "ulogstream"]


def command_words(receiver: str) -> list[str]:
    """``receiver``'s words from ``record`` on (a ``free:PART`` first word left out)."""
    words = receiver.split()
    return words[1:] if words[0].startswith(PREFIX) else words


def _constant_payload(self: RowEncoder, row: bytes, stamp: int, time: str) -> bytes:
    del self, row, stamp, time
    return EMPTY


def _constant_payloads(
    self: RowEncoder, rows: npt.NDArray[np.void], stamps: list[int], times: list[str]
) -> list[bytes]:
    del self, stamps, times
    return [EMPTY] * len(rows)


def _no_messages(self: PublishPolicy, event: ULogEvent, now: float) -> list[MqttMessage]:
    del self, event, now
    return []


def make_free(part: str) -> None:
    """Replace ``part`` of the live path by one that costs (nearly) nothing.

    Raises:
        SystemExit: ``part`` is none of ``json``, ``policy``.
    """
    if part == "json":
        RowEncoder.json_payload = _constant_payload  # type: ignore[method-assign]
        RowEncoder.json_payloads = _constant_payloads  # type: ignore[method-assign]
    elif part == "policy":
        PublishPolicy.select = _no_messages  # type: ignore[method-assign]
    else:
        msg = f"free_part.py: no part {part!r} (json or policy)"
        raise SystemExit(msg)


if __name__ == "__main__":
    if len(sys.argv) < 3:  # the part and a command
        raise SystemExit(__doc__)
    make_free(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
