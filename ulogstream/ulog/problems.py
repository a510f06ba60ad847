"""What is wrong with a log, counted as it is read and told in a few lines (sans-IO).

A damaged stretch of a log reaches a reader as many events: every message in 4 KiB of noise, and
every 'D' row whose subscription was in that noise. Readers (``info``, the exports) fold them
here and show one line per kind, with counts and the first offset, instead of one line per event.
"""

from __future__ import annotations

import msgspec

from ulogstream.ulog.events import (
    Corruption,
    DataWithoutSubscription,
    ParserWarning,
    Truncated,
    ULogEvent,
)

MAX_WARNING_LINES = 5
"""Parser warnings shown one by one; the rest are counted."""


class Problems(msgspec.Struct):
    """The damage a parser reported about one log (see the module docstring)."""

    corruption: list[Corruption] = msgspec.field(default_factory=list)
    """Stretches of bytes that were no valid messages, in order."""
    data_without_subscription: dict[int, int] = msgspec.field(default_factory=dict)
    """Well-formed 'D' messages whose 'A' was lost, per msg_id."""
    first_data_without_subscription: int | None = None
    """Offset of the first of those."""
    truncated: Truncated | None = None
    warnings: list[ParserWarning] = msgspec.field(default_factory=list)

    def add(self, event: ULogEvent | object) -> bool:
        """Take ``event`` into account if it reports a problem; True when it did."""
        match event:
            case DataWithoutSubscription(offset, msg_id):
                counts = self.data_without_subscription
                counts[msg_id] = counts.get(msg_id, 0) + 1
                if self.first_data_without_subscription is None:
                    self.first_data_without_subscription = offset
            case Corruption():
                self.corruption.append(event)
            case Truncated():
                self.truncated = event
            case ParserWarning():
                self.warnings.append(event)
            case _:
                return False
        return True

    @property
    def corrupt_bytes(self) -> int:
        """Bytes skipped as damage."""
        return sum(region.skipped for region in self.corruption)

    @property
    def rows_without_subscription(self) -> int:
        """'D' messages that could not be read for want of their subscription."""
        return sum(self.data_without_subscription.values())

    def __bool__(self) -> bool:
        return bool(
            self.corruption or self.data_without_subscription or self.truncated or self.warnings
        )

    def lines(self) -> list[str]:
        """One sentence per kind of problem, with counts and where the first one is."""
        lines: list[str] = []
        if self.corruption:
            first = self.corruption[0]
            regions = len(self.corruption)
            lines.append(
                f"skipped {self.corrupt_bytes} corrupt bytes in {_count(regions, 'region')}, "
                f"the first at byte {first.offset}: {first.reason}"
            )
        if self.data_without_subscription:
            counts = self.data_without_subscription
            ids = ", ".join(f"msg_id {msg_id}: {count}" for msg_id, count in sorted(counts.items()))
            lines.append(
                f"skipped {_count(self.rows_without_subscription, 'data message')} without a "
                f"subscription ({ids}; their 'A' message was lost), the first at byte "
                f"{self.first_data_without_subscription}"
            )
        if self.truncated is not None:
            lines.append(
                f"the log ends {self.truncated.size} bytes into a message at byte "
                f"{self.truncated.offset}"
            )
        shown = self.warnings[:MAX_WARNING_LINES]
        lines.extend(f"{warning.text} (at byte {warning.offset})" for warning in shown)
        if len(self.warnings) > len(shown):
            lines.append(f"... and {len(self.warnings) - len(shown)} more warnings")
        return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
