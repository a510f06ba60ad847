"""The simulated SD card answers log downloads as PX4's mavlink_log_handler does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from support.processes import make_flight
from support.rows import rows
from support.ulog_builders import sample_log

from ulogstream.download.packets import (
    LogData,
    LogEntry,
    LogRequestData,
    LogRequestEnd,
    LogRequestList,
)
from ulogstream.errors import ULogFormatError
from ulogstream.sim.faults import FaultConfig
from ulogstream.sim.sd_card import (
    LOG_DATA_FRAME,
    TICK_S,
    SdCard,
    SdCardOutput,
    SdLog,
    split_at_stream_start,
)
from ulogstream.ulog.spec import HEADER_SIZE, MessageType, iter_messages

if TYPE_CHECKING:
    from pathlib import Path


def drain(card: SdCard, now: float = 0.0) -> list[SdCardOutput]:
    out: list[SdCardOutput] = []
    while (deadline := card.next_deadline()) is not None:
        now = max(now, deadline)
        out += card.handle_timer(now)
    return out


def test_the_listing_has_one_entry_per_log_from_id_0() -> None:
    card = SdCard(system_id=3)
    card.add(SdLog(b"a" * 100, 1000))
    card.add(SdLog(b"b" * 50, 2000))
    card.receive(LogRequestList(), 0.0)
    assert drain(card) == [
        LogEntry(0, 2, 1, 1000, 100, system_id=3),
        LogEntry(1, 2, 1, 2000, 50, system_id=3),
    ]


def test_an_empty_card_answers_one_empty_entry() -> None:
    card = SdCard()
    card.receive(LogRequestList(), 0.0)
    assert drain(card) == [LogEntry(0, 0, 0, 0, 0)]


def test_data_comes_in_order_90_bytes_at_a_time_and_ends_short() -> None:
    log = bytes(range(256)) * 2
    card = SdCard(bytes_per_s=1e9)
    card.add(SdLog(log, 1))
    card.receive(LogRequestData(0, 100, 300), 0.0)
    out = drain(card)
    assert [(m.ofs, len(m.data)) for m in out if isinstance(m, LogData)] == [
        (100, 90),
        (190, 90),
        (280, 90),
        (370, 30),
    ]
    assert b"".join(m.data for m in out if isinstance(m, LogData)) == log[100:400]


def test_a_request_past_the_end_gets_one_empty_message_and_unknown_logs_nothing() -> None:
    card = SdCard()
    card.add(SdLog(b"x" * 10, 1))
    card.receive(LogRequestData(0, 10, 90), 0.0)
    assert drain(card) == [LogData(0, 10, b"")]
    card.receive(LogRequestData(5, 0, 90), 1.0)
    assert drain(card, 1.0) == []


def test_a_new_request_replaces_the_one_in_progress_and_end_stops_it() -> None:
    card = SdCard(bytes_per_s=LOG_DATA_FRAME / TICK_S)  # one message per tick
    card.add(SdLog(bytes(9000), 1))
    card.receive(LogRequestData(0, 0, 9000), 0.0)
    first = card.handle_timer(0.0)
    card.receive(LogRequestData(0, 4500, 180), 0.001)
    rest = drain(card, 0.001)
    assert [m.ofs for m in first + rest if isinstance(m, LogData)] == [0, 90, 4500, 4590]
    card.receive(LogRequestData(0, 0, 9000), 1.0)
    card.receive(LogRequestEnd(), 1.0)
    assert card.next_deadline() is None


def test_the_rate_paces_the_messages() -> None:
    card = SdCard(bytes_per_s=100 * LOG_DATA_FRAME)
    card.add(SdLog(bytes(90_000), 1))
    card.receive(LogRequestData(0, 0, 90_000), 0.0)
    sent = 0
    now = 0.0
    while now < 1.0:
        sent += len(card.handle_timer(now))
        now += TICK_S
    assert 95 <= sent <= 105  # 100 frames' worth a second


def test_loss_drops_log_data_on_the_link_reproducibly() -> None:
    def lost(seed: int) -> list[int]:
        card = SdCard(bytes_per_s=1e9, faults=FaultConfig(seed=seed, loss=0.2))
        card.add(SdLog(bytes(90_000), 1))
        card.receive(LogRequestData(0, 0, 90_000), 0.0)
        got = {m.ofs for m in drain(card) if isinstance(m, LogData)}
        assert card.lost == 1000 - len(got)
        return sorted(set(range(0, 90_000, 90)) - got)

    assert lost(1) == lost(1)
    assert lost(1) != lost(2)
    assert 150 < len(lost(1)) < 250


def test_a_stream_started_into_the_flight_lacks_its_start_and_both_lack_the_stall(
    tmp_path: Path,
) -> None:
    """As PX4's logger: the SD log has the flight's start; neither has the header's stall."""
    log = make_flight(tmp_path, duration_s=10, seed=3).data
    streamed, on_card = split_at_stream_start(log, 2.0, 1.5)
    (tmp_path / "streamed.ulg").write_bytes(streamed)
    (tmp_path / "card.ulg").write_bytes(on_card)
    everything = rows(tmp_path / "flight-3.ulg")
    stream, card = rows(tmp_path / "streamed.ulg"), rows(tmp_path / "card.ulg")
    first = min(min(table) for table in everything.values() if table)
    stall = range(first + 2_000_000, first + 3_500_000)
    for key, table in everything.items():
        assert {s: r for s, r in table.items() if s not in stall} == card.get(key, {}), key
        kept = {s: r for s, r in table.items() if s >= stall.stop}
        # Slow topics' first row after the stall may come before a fast topic's: allow the
        # rows the logger wrote in the message order, never a row from the stall or before.
        assert all(s >= stall.start for s in stream.get(key, {})), key
        assert stream.get(key, {}).items() <= table.items(), key
        assert kept.keys() <= stream.get(key, {}).keys(), key
    assert any(s < stall.start for table in card.values() for s in table)
    # After its subscriptions the stream is the SD log's tail, byte for byte.
    resume = next(
        offset
        for offset, _size, kind in iter_messages(streamed, HEADER_SIZE)
        if kind == MessageType.DATA
    )
    assert on_card.endswith(streamed[resume:])
    assert len(streamed) < len(on_card) < len(log)


def test_a_stream_from_the_flight_s_start_is_the_whole_log_and_garbage_is_refused() -> None:
    log = sample_log(rows=20)
    assert split_at_stream_start(log, 0.0, 0.0) == (log, log)
    with pytest.raises(ULogFormatError, match="not a ULog file"):
        split_at_stream_start(b"garbage" * 10, 1.0)
