"""MAVLink FTP: the listing and the transfer cores against the simulated SD card's server."""

from __future__ import annotations

import itertools
import random

import msgspec
import pytest

from ulogstream.download.ftp import (
    LOG_ROOTS,
    READ_HOLE_MAX,
    RESPONSE_FLOOR_S,
    SEQ_STEP,
    FtpFile,
    FtpListing,
    FtpListingDone,
    FtpListingOutput,
    FtpTransfer,
    FtpTransferOutput,
    FtpUnsupported,
)
from ulogstream.download.packets import FTP_DATA_MAX, FtpError, FtpMessage, FtpOpcode
from ulogstream.download.transfer import (
    RESPONSE_TIMEOUT_S,
    TransferDone,
    TransferFailed,
    WriteLogData,
)
from ulogstream.sim.faults import FaultConfig
from ulogstream.sim.sd_card import FTP_BURST_BYTES, SdCard, SdLog

Core = FtpListing | FtpTransfer
Output = FtpListingOutput | FtpTransferOutput


def run(
    core: Core,
    card: SdCard,
    *,
    lose_requests: float = 0.0,
    seed: int = 0,
    limit_s: float = 600.0,
) -> tuple[list[Output], dict[int, bytes], list[FtpMessage]]:
    """Exchange messages between ``core`` and ``card`` on a simulated clock until it finishes.

    Returns:
        The core's final outputs, the bytes it said to write (by offset), and its requests.
    """
    rng = random.Random(seed)  # noqa: S311 (test data)
    now = 0.0
    finals: list[Output] = []
    written: dict[int, bytes] = {}
    sent: list[FtpMessage] = []

    def take(outputs: list[FtpListingOutput] | list[FtpTransferOutput]) -> None:
        for output in outputs:
            if isinstance(output, FtpMessage):
                sent.append(output)
                if rng.random() >= lose_requests:
                    card.receive_ftp(msgspec.structs.replace(output, system_id=255), now)
            elif isinstance(output, WriteLogData):
                assert output.ofs not in written
                written[output.ofs] = output.data
            else:
                finals.append(output)

    take(core.start(now))
    while not core.finished and now < limit_s:
        deadlines = [d for d in (core.next_deadline(), card.next_deadline()) if d is not None]
        now = max(now, min(deadlines))
        for reply in card.handle_timer(now):
            assert isinstance(reply, FtpMessage)
            take(core.receive(reply, now))
        take(core.handle_timer(now))
    return finals, written, sent


def assembled(written: dict[int, bytes]) -> bytes:
    out = bytearray()
    for ofs in sorted(written):
        assert ofs == len(out), "writes are disjoint and cover the file"
        out += written[ofs]
    return bytes(out)


LOG = bytes(random.Random(1).randbytes(200_000))  # noqa: S311 (test data)
TIME = 1_714_557_600  # 2024-05-01 10:00:00 UTC
PATH = "/log/2024-05-01/10_00_00.ulg"


def card_with_log(**kwargs: object) -> SdCard:
    card = SdCard(system_id=1, bytes_per_s=2_000_000, **kwargs)  # type: ignore[arg-type]
    card.add(SdLog(LOG, TIME))
    card.add(SdLog(b"ULog" * 10, TIME + 3600))
    return card


def test_the_listing_finds_every_ulog_file_under_the_first_log_folder() -> None:
    card = card_with_log()
    for day in range(12):  # folders and files beyond one listing page
        card.add(SdLog(bytes(100 + day), TIME + 86_400 * (day + 1)))
    finals, _, sent = run(FtpListing(), card)
    (done,) = finals
    assert isinstance(done, FtpListingDone)
    expected = {FtpFile(log.ftp_path, len(log.data)) for log in card.logs}
    assert set(done.files) == expected
    assert len(done.files) == len(expected)
    # The board's folder was asked first and is not there; SITL's is.
    assert sent[0].data == LOG_ROOTS[0].encode()


def test_a_vehicle_without_ftp_is_told_apart_from_one_without_logs() -> None:
    finals, _, _ = run(FtpListing(), card_with_log(ftp=False))
    assert finals == [FtpUnsupported("it answers ListDirectory with UnknownCommand")]
    finals, _, _ = run(FtpListing(), SdCard())
    assert finals == [FtpListingDone(())]


def test_a_silent_vehicle_fails_the_listing_after_its_tries() -> None:
    finals, _, sent = run(FtpListing(tries=3), card_with_log(), lose_requests=1.0)
    assert finals == [FtpUnsupported("no answer to 3 FTP requests")]
    assert len(sent) == 3
    assert len({m.seq for m in sent}) == 1, "asked again with the same seq"


def test_a_file_read_in_bursts_is_the_file_byte_for_byte() -> None:
    card = card_with_log()
    transfer = FtpTransfer(path=PATH, size=len(LOG))
    finals, written, sent = run(transfer, card)
    assert finals == [TransferDone(len(LOG))]
    assert assembled(written) == LOG
    opcodes = [m.opcode for m in sent]
    assert opcodes[0] == FtpOpcode.OPEN_FILE_RO
    assert opcodes[-1] == FtpOpcode.TERMINATE_SESSION
    # One burst per 35 kB, nothing asked twice.
    assert opcodes.count(FtpOpcode.BURST_READ_FILE) == -(
        -len(LOG) // (FTP_BURST_BYTES + FTP_DATA_MAX)
    )
    assert transfer.received == len(LOG)


@pytest.mark.parametrize("seed", range(6))
def test_lost_packets_and_requests_are_asked_for_again_until_the_file_is_whole(seed: int) -> None:
    card = card_with_log(faults=FaultConfig(seed=seed, loss=0.05))
    finals, written, sent = run(
        FtpTransfer(path=PATH, size=len(LOG)), card, lose_requests=0.05, seed=seed
    )
    assert finals == [TransferDone(len(LOG))]
    assert assembled(written) == LOG
    assert card.lost > 0
    reads = [m for m in sent if m.opcode == FtpOpcode.READ_FILE]
    assert reads, "single lost packets are read one by one"
    assert all(0 < (m.size or 0) <= FTP_DATA_MAX for m in reads)


def test_a_resumed_read_asks_only_for_what_is_not_held() -> None:
    held = [(0, 100_000), (150_000, 160_000)]
    finals, written, _ = run(FtpTransfer(path=PATH, size=len(LOG), held=held), card_with_log())
    assert finals == [TransferDone(len(LOG))]
    assert min(written) == 100_000
    for ofs, data in written.items():
        for start, end in held:
            assert ofs + len(data) <= start or ofs >= end
    assert sum(map(len, written.values())) == len(LOG) - 110_000


def test_a_session_left_open_is_reset_and_a_wrong_size_or_missing_file_refused() -> None:
    card = card_with_log()
    run(FtpTransfer(path=PATH, size=len(LOG)), card, limit_s=0.001)  # opened, never closed
    finals, written, sent = run(FtpTransfer(path=PATH, size=len(LOG)), card)
    assert finals == [TransferDone(len(LOG))]
    assert FtpOpcode.RESET_SESSIONS in [m.opcode for m in sent]
    assert assembled(written) == LOG

    (failed,) = run(FtpTransfer(path=PATH, size=len(LOG) + 1), card_with_log())[0]
    assert isinstance(failed, TransferFailed)
    assert failed.reason == f"it has {len(LOG)} bytes, not the {len(LOG) + 1} listed"
    grown, written, _ = run(FtpTransfer(path=PATH, size=1000), card_with_log())
    assert grown == [TransferDone(1000)]  # a log still being written: its listed bytes
    assert assembled(written) == LOG[:1000]
    (failed,) = run(FtpTransfer(path="/log/nope.ulg", size=10), card_with_log())[0]
    assert isinstance(failed, TransferFailed)
    assert failed.reason == "the vehicle cannot open it: FAIL_ERRNO (errno 2)"


def test_a_vehicle_that_goes_silent_fails_the_read_with_what_is_missing() -> None:
    card = card_with_log()
    transfer = FtpTransfer(path=PATH, size=len(LOG), tries=3)
    outputs = transfer.start(0.0)
    (open_request,) = outputs
    assert isinstance(open_request, FtpMessage)
    card.receive_ftp(open_request, 0.0)
    now = 0.0
    while not transfer.finished:
        now = transfer.next_deadline() or now
        replies = card.handle_timer(now) if now < 0.01 else []  # then silence
        for reply in replies:
            assert isinstance(reply, FtpMessage)
            transfer.receive(reply, now)
        outputs = transfer.handle_timer(now)
    (failed,) = outputs
    assert isinstance(failed, TransferFailed)
    assert failed.missing == len(LOG) - transfer.held.total
    assert failed.reason == "no answer to 3 FTP requests"


def test_a_nak_error_name_and_the_hole_size_bound() -> None:
    nak = FtpMessage(2, 0, FtpOpcode.NAK, FtpOpcode.OPEN_FILE_RO, data=bytes((FtpError.EOF,)))
    assert nak.error == FtpError.EOF
    assert READ_HOLE_MAX < FTP_BURST_BYTES


def test_once_a_round_trip_is_measured_a_lost_request_costs_a_few_of_them() -> None:
    """Not the first request's 1.5 s: five round trips, at least :data:`RESPONSE_FLOOR_S`."""
    card = card_with_log()
    transfer = FtpTransfer(path=PATH, size=len(LOG))
    (open_request,) = transfer.start(0.0)
    assert transfer.next_deadline() == RESPONSE_TIMEOUT_S
    assert isinstance(open_request, FtpMessage)
    card.receive_ftp(open_request, 0.0)
    (reply,) = card.handle_timer(0.01)
    assert isinstance(reply, FtpMessage)
    (read,) = transfer.receive(reply, 0.01)
    assert isinstance(read, FtpMessage)
    assert read.opcode == FtpOpcode.BURST_READ_FILE
    assert transfer.round_trip_s == pytest.approx(0.01)
    # A burst's deadline is its silence; with none of its data yet, the request's timeout.
    assert transfer.next_deadline() == pytest.approx(0.01 + RESPONSE_FLOOR_S)


def test_a_resent_request_gets_the_last_short_reply_again_so_new_requests_step_past_bursts() -> (
    None
):
    """As PX4: a request whose seq + 1 is the last short reply's is taken for a resend."""
    card = card_with_log()
    open_request = FtpMessage(10, 0, FtpOpcode.OPEN_FILE_RO, data=PATH.encode())
    card.receive_ftp(open_request, 0.0)
    (opened,) = card.handle_timer(0.0)
    card.receive_ftp(open_request, 0.1)  # the ACK was lost: the same request again
    (again,) = card.handle_timer(0.1)
    assert again == opened  # not NoSessionsAvailable: the vehicle did not open it twice
    # A burst's EOF NAK is a short reply too: a request whose seq + 1 hits it would be taken
    # for a resend, so each new request steps past the longest burst.
    card.receive_ftp(FtpMessage(20, 0, FtpOpcode.BURST_READ_FILE, offset=len(LOG) - 300), 0.2)
    (_first, _second, eof) = card.handle_timer(0.2)
    assert isinstance(eof, FtpMessage)
    assert (eof.opcode, eof.seq) == (FtpOpcode.NAK, 23)
    card.receive_ftp(FtpMessage(22, 0, FtpOpcode.READ_FILE, offset=0, size=10), 0.3)
    assert card.handle_timer(0.3) == [eof]  # what a step of 2 would have got
    assert SEQ_STEP > FTP_BURST_BYTES // FTP_DATA_MAX + 2
    _, _, sent = run(FtpTransfer(path=PATH, size=len(LOG)), card_with_log())
    steps = {(b.seq - a.seq) & 0xFFFF for a, b in itertools.pairwise(sent)}
    assert steps == {SEQ_STEP}
