"""The vehicle's list of logs: LOG_REQUEST_LIST asked, its LOG_ENTRYs gathered, asked again."""

from __future__ import annotations

from typing import Final

import msgspec

from ulogstream.download.packets import LogEntry, LogRequestList

LIST_TIMEOUT_S: Final = 1.0
"""Silence after which the listing is asked for again (a radio's round trip is well below)."""

LIST_TRIES: Final = 4
"""Times the listing is asked for before the vehicle counts as not answering."""


class ListingDone(msgspec.Struct, frozen=True):
    """Every log the vehicle reported, by id (none: the vehicle has no logs)."""

    entries: tuple[LogEntry, ...]


class ListingFailed(msgspec.Struct, frozen=True):
    """The vehicle did not answer the listing (``entries``: what came before it fell silent)."""

    tries: int
    entries: tuple[LogEntry, ...]


ListingOutput = LogRequestList | ListingDone | ListingFailed


class LogListing:
    """Gathers the LOG_ENTRYs of one LOG_REQUEST_LIST.

    The listing is whole when ``num_logs`` distinct entries have come (PX4 counts ids from 0,
    ArduPilot from 1, so ids are not assumed). After :data:`LIST_TIMEOUT_S` without an entry the
    whole list is asked for again (it is small); after :data:`LIST_TRIES` silent tries it fails.

    Args:
        system_id: The vehicle whose entries count (others on the link are ignored).
        timeout_s: Silence before asking again.
        tries: Requests before giving up.
    """

    def __init__(
        self, *, system_id: int, timeout_s: float = LIST_TIMEOUT_S, tries: int = LIST_TRIES
    ) -> None:
        self.system_id = system_id
        self._timeout_s = timeout_s
        self._tries_allowed = tries
        self._entries: dict[int, LogEntry] = {}
        self._num_logs: int | None = None
        self._tries = 0
        self._deadline: float | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether :class:`ListingDone` or :class:`ListingFailed` was returned."""
        return self._finished

    def start(self, now: float) -> list[ListingOutput]:
        """Ask for the list."""
        return self._ask(now)

    def receive(self, entry: LogEntry, now: float) -> list[ListingOutput]:
        """Take one LOG_ENTRY."""
        if self._finished or entry.system_id != self.system_id:
            return []
        self._num_logs = entry.num_logs
        if entry.num_logs:
            self._entries[entry.id] = entry
        self._tries = 0  # the vehicle answers: silence from here on counts afresh
        self._deadline = now + self._timeout_s
        if len(self._entries) >= entry.num_logs:
            self._finished = True
            self._deadline = None
            return [ListingDone(self._sorted())]
        return []

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must run next (None: nothing pending)."""
        return self._deadline

    def handle_timer(self, now: float) -> list[ListingOutput]:
        """Ask again after silence, or give up."""
        if self._deadline is None or now < self._deadline:
            return []
        if self._tries >= self._tries_allowed:
            self._finished = True
            self._deadline = None
            return [ListingFailed(self._tries, self._sorted())]
        return self._ask(now)

    def _ask(self, now: float) -> list[ListingOutput]:
        self._tries += 1
        self._deadline = now + self._timeout_s
        return [LogRequestList()]

    def _sorted(self) -> tuple[LogEntry, ...]:
        return tuple(self._entries[key] for key in sorted(self._entries))
