"""Fault injection for the simulated vehicle: what can go wrong, and a seeded, timing-free RNG.

Every random decision is a pure function of the seed and of *what* is decided about (the
log, the packet's sequence number, the copy), never of how many decisions came before. So the
same seed loses the same packets however the asyncio loop happens to schedule the run. The
wire's latency draws (:class:`DelayLine`) are the exception: they are keyed by a frame's
position on the wire, so they repeat when the same frames go out in the same order.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
from typing import Generic, TypeVar

import msgspec

from ulogstream.errors import ConfigError

_MASK64 = (1 << 64) - 1
_MAVLINK2_HEADER_LEN = 10
_START_BYTES = frozenset({0xFD, 0xFE})
"""MAVLink 2 and 1 start bytes: kept out of garbage so it can never hide a real frame."""


def _mix(value: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


@enum.unique
class Draw(enum.IntEnum):
    """What a random number is drawn for: each kind gets an independent stream."""

    LOSS = 1
    DUPLICATE = 2
    REORDER = 3
    CORRUPT = 4
    CORRUPT_POSITION = 5
    GARBAGE = 6
    GARBAGE_BYTES = 7
    LOST_ACK = 8
    DELAY = 9
    LOG_DATA_LOSS = 10


class FaultRng:
    """Deterministic random numbers keyed by what they decide.

    Args:
        seed: Any integer; the same seed and keys always give the same numbers.
    """

    def __init__(self, seed: int) -> None:
        self._seed = _mix(seed & _MASK64)

    def integer(self, kind: Draw, *keys: int) -> int:
        """A 64-bit unsigned integer for ``kind`` and ``keys``."""
        value = _mix(self._seed ^ kind)
        for key in keys:
            value = _mix(value ^ (key & _MASK64))
        return value

    def uniform(self, kind: Draw, *keys: int) -> float:
        """A float in [0, 1) for ``kind`` and ``keys``."""
        return (self.integer(kind, *keys) >> 11) * (1.0 / (1 << 53))

    def chance(self, probability: float, kind: Draw, *keys: int) -> bool:
        """True with ``probability`` (never draws when it is 0)."""
        return probability > 0.0 and self.uniform(kind, *keys) < probability

    def garbage(self, *keys: int) -> bytes:
        """1 to 32 bytes of line noise, free of MAVLink start bytes."""
        length = 1 + self.integer(Draw.GARBAGE_BYTES, *keys, -1) % 32
        noise = bytearray()
        index = 0
        while len(noise) < length:
            for byte in self.integer(Draw.GARBAGE_BYTES, *keys, index).to_bytes(8, "little"):
                if byte not in _START_BYTES and len(noise) < length:
                    noise.append(byte)
            index += 1
        return bytes(noise)


def corrupt_frame(frame: bytes, position: int) -> bytes:
    """Flip one byte of ``frame``'s payload or checksum so its CRC check fails.

    The 10-byte MAVLink 2 header is left alone: a damaged length byte could make a decoder
    swallow the next, intact frame, and the delivery report would then be wrong.

    Args:
        frame: An encoded MAVLink 2 frame (longer than its header).
        position: Any integer (a random draw); it picks the byte.
    """
    if len(frame) <= _MAVLINK2_HEADER_LEN:
        msg = f"a MAVLink 2 frame is longer than {_MAVLINK2_HEADER_LEN} bytes, not {len(frame)}"
        raise ValueError(msg)
    index = _MAVLINK2_HEADER_LEN + position % (len(frame) - _MAVLINK2_HEADER_LEN)
    damaged = bytearray(frame)
    damaged[index] ^= 0xFF
    return bytes(damaged)


def _check_probability(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        msg = f"fault probability {name} must be between 0 and 1, not {value!r}"
        raise ConfigError(msg)


class FaultConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What the simulated vehicle and its link get wrong on purpose.

    Probabilities apply to each LOGGING_DATA / LOGGING_DATA_ACKED frame (each copy of a resent
    acked packet is decided on its own); COMMAND_ACK and HEARTBEAT frames only suffer link cuts.

    Attributes:
        seed: Seed of every random decision.
        loss: Probability that a frame is lost on the link.
        duplicate: Probability that a frame arrives twice.
        reorder: Probability that a frame is held back and arrives after the next one.
        lost_acks: Probability that a received LOGGING_ACK is dropped before the vehicle sees it.
        corrupt: Probability that a frame arrives with a flipped byte (its CRC fails).
        garbage: Probability that 1-32 bytes of noise go out before a frame.
        reboot_at: The vehicle reboots as the first log's packet with this index (0-based
            count, not sequence) is published: it restarts at sequence 0 with packet 0 of the
            log again, as a new log to the same receiver.
        cut_at: The link goes down as the frame of the packet with this global index (0-based,
            counted over every LOGGING_DATA frame sent) would leave, for ``cut_seconds``:
            nothing is sent or received meanwhile.
        cut_seconds: Length of the link cut.
        sitl_gap: Unacked packets lost inside the vehicle right after the definitions of each
            log, as PX4 SITL does on every run (2-14 there).
        delay: One-way latency of the link in seconds, both ways (a radio: 0.04).
        jitter: Each frame's one-way latency is drawn on its own, uniformly from ``delay`` -
            ``jitter`` to ``delay`` + ``jitter`` (at least 0), so frames overtake each other
            when the jitter exceeds their spacing (UDP over Wi-Fi, LTE, IP radios).
        bandwidth: Bytes per second the wire carries from the vehicle (a telemetry radio:
            5700); frames queue behind each other and a frame that would wait more than
            :data:`MAX_BACKLOG` is lost. None: no limit. Frames toward the vehicle (acks,
            commands) are only delayed.
    """

    seed: int = 0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    lost_acks: float = 0.0
    corrupt: float = 0.0
    garbage: float = 0.0
    reboot_at: int | None = None
    cut_at: int | None = None
    cut_seconds: float = 0.0
    sitl_gap: int = 0
    delay: float = 0.0
    jitter: float = 0.0
    bandwidth: float | None = None

    @property
    def shapes_link(self) -> bool:
        """True when frames are delayed or rate-limited on the wire (a :class:`DelayLine`)."""
        return self.delay > 0.0 or self.jitter > 0.0 or self.bandwidth is not None

    def __post_init__(self) -> None:
        """Reject probabilities outside [0, 1] and negative counts or durations."""
        for name in ("loss", "duplicate", "reorder", "lost_acks", "corrupt", "garbage"):
            _check_probability(name, getattr(self, name))
        for name in ("reboot_at", "cut_at"):
            value = getattr(self, name)
            if value is not None and value < 0:
                msg = f"fault {name} must be a packet index >= 0, not {value}"
                raise ConfigError(msg)
        if not (math.isfinite(self.cut_seconds) and self.cut_seconds >= 0.0):
            msg = f"fault cut_seconds must be >= 0, not {self.cut_seconds!r}"
            raise ConfigError(msg)
        if self.sitl_gap < 0:
            msg = f"fault sitl_gap must be a packet count >= 0, not {self.sitl_gap}"
            raise ConfigError(msg)
        for name in ("delay", "jitter"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                msg = f"link {name} must be >= 0 seconds, not {value!r}"
                raise ConfigError(msg)
        if self.bandwidth is not None and not (
            math.isfinite(self.bandwidth) and self.bandwidth > 0.0
        ):
            msg = f"link bandwidth must be a positive number of B/s, not {self.bandwidth!r}"
            raise ConfigError(msg)


NO_FAULTS = FaultConfig()
"""A perfect vehicle on a perfect link."""


# ---------------------------------------------------------------------------------------------
# The wire: latency, jitter and a byte rate

MAX_BACKLOG = 2.0
"""Seconds of frames a rate-limited wire queues (a radio's buffer) before it loses new ones."""

_Item = TypeVar("_Item")


class DelayLine(Generic[_Item]):
    """One direction of a link: what goes in at ``now`` comes out later, maybe reordered.

    Each item leaves the wire's queue when the bytes before it have gone (``bandwidth``), then
    travels ``delay`` +- ``jitter`` (drawn on its own, uniformly, keyed by the item's position
    in this direction). Items with the same arrival time come out in the order they went in.
    Time only as an argument: the runner calls :meth:`push` when the vehicle sends and
    :meth:`pop_due` at :meth:`next_due`.

    Args:
        faults: Its ``delay``, ``jitter``, ``bandwidth`` and ``seed`` are used.
        direction: Keeps the draws of two lines with the same seed apart (0, 1).
        limit_rate: Apply ``bandwidth`` (False: latency and jitter only).
    """

    def __init__(self, faults: FaultConfig, *, direction: int, limit_rate: bool = True) -> None:
        self._rng = FaultRng(faults.seed)
        self._delay = faults.delay
        self._jitter = faults.jitter
        self._bandwidth = faults.bandwidth if limit_rate else None
        self._direction = direction
        self._count = itertools.count()
        self._free_at = -math.inf
        self._flight: list[tuple[float, int, _Item]] = []
        """The items on the wire, a heap by (arrival time, order sent): no two orders are the
        same, so items themselves are never compared."""
        self.backlog_drops = 0
        """Items lost because the wire's queue was full (:data:`MAX_BACKLOG`)."""

    def __len__(self) -> int:
        """Items on the wire."""
        return len(self._flight)

    def push(self, item: _Item, size: int, now: float) -> bool:
        """Put ``item`` (``size`` bytes) on the wire at ``now``; False when it was lost."""
        order = next(self._count)
        leaves = now
        if self._bandwidth is not None:
            start = max(now, self._free_at)
            if start - now > MAX_BACKLOG:
                self.backlog_drops += 1
                return False
            leaves = self._free_at = start + size / self._bandwidth
        latency = self._delay
        if self._jitter > 0.0:
            draw = self._rng.uniform(Draw.DELAY, self._direction, order)
            latency = max(0.0, latency + (2.0 * draw - 1.0) * self._jitter)
        heapq.heappush(self._flight, (leaves + latency, order, item))
        return True

    def next_due(self) -> float | None:
        """When the next item arrives; None when the wire is empty."""
        return self._flight[0][0] if self._flight else None

    def pop_due(self, now: float) -> list[_Item]:
        """The items that have arrived by ``now``, in arrival order."""
        flight = self._flight
        arrived: list[_Item] = []
        while flight and flight[0][0] <= now:
            arrived.append(heapq.heappop(flight)[2])
        return arrived
