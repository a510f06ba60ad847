"""Flight Review uploads against contract servers of both generations on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.review_server import HANG, ReviewServer
from support.waiting import running

from ulogstream.config.loader import load_settings
from ulogstream.config.sections import FlightReviewSettings, UploadSettings
from ulogstream.errors import ConfigError
from ulogstream.upload import flight_review
from ulogstream.upload.flight_review import FlightReviewTarget, MultipartPost, post
from ulogstream.upload.info import FinishedLogInfo
from ulogstream.upload.shipper import LogShipper
from ulogstream.upload.targets import make_target

if TYPE_CHECKING:
    from ulogstream.config.sections import FlightReviewApi

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0
DATA = b"ULog\x01\x12\x35" + bytes(range(256)) * 300


def finished_log(out: Path, data: bytes = DATA) -> Path:
    path = out / "2026-11-25" / "12_34_56.ulg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def settings(url: str, api: FlightReviewApi = "plot_app", **upload: float | str) -> UploadSettings:
    fields = {k.removeprefix("fr_"): v for k, v in upload.items() if k.startswith("fr_")}
    rest = {k: v for k, v in upload.items() if not k.startswith("fr_")}
    review = FlightReviewSettings(url=url, api=api, **fields)  # type: ignore[arg-type]
    return UploadSettings(
        target="flight_review",
        flight_review=review,
        backoff_s=0.01,
        **rest,  # type: ignore[arg-type]
    )


async def ship(shipper: LogShipper, log: Path) -> None:
    async with running(shipper.run()):
        shipper.offer(log, len(DATA), vehicle="uav-1", how="complete")
        await asyncio.wait_for(shipper.wait_idle(), WAIT)


@pytest.mark.asyncio
async def test_plot_app_gets_the_log_in_filearg_with_its_form_and_gives_its_page(
    tmp_path: Path,
) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app") as server:
        shipper = LogShipper(settings(server.url, fr_email="pilot@example.com"))
        await ship(shipper, log)

    (upload,) = server.received
    (log_id,) = server.stored
    assert upload.status == 302
    assert upload.files == {"filearg": ("12_34_56.ulg", DATA)}
    assert upload.fields == {
        "type": "personal",
        "description": "uav-1 12_34_56.ulg",
        "feedback": "",
        "email": "pilot@example.com",
        "allowForAnalysis": "false",
        "obfuscated": "false",
        "source": "ulogstream",
    }
    assert shipper.locations == [f"{server.url}/plot_app?log={log_id}"]
    assert (shipper.uploaded, shipper.failed, shipper.backlog) == (1, 0, 0)


@pytest.mark.asyncio
async def test_a_flight_report_sends_wind_rating_video_and_the_vehicle_name(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app") as server:
        shipper = LogShipper(
            settings(server.url, fr_type="flightreport", fr_wind_speed=5, fr_public=True)
        )
        await ship(shipper, log)

    (upload,) = server.received
    assert upload.status == 302
    assert upload.fields["type"] == "flightreport"
    names = ("windSpeed", "rating", "videoUrl", "public", "vehicleName")
    assert {k: upload.fields[k] for k in names} == {
        "windSpeed": "5",
        "rating": "notset",
        "videoUrl": "",
        "public": "true",
        "vehicleName": "uav-1",
    }
    assert shipper.uploaded == 1


@pytest.mark.asyncio
async def test_the_contract_server_holds_v1s_rule_description_and_email_are_required(
    tmp_path: Path,
) -> None:
    """v1 reads ``form_data['description']`` and ``['email']`` bare; the rest has defaults."""
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app") as server:
        statuses = []
        for fields in (
            {"type": "flightreport", "description": "", "email": ""},  # no wind, rating, video
            {"description": "x"},
            {"email": ""},
        ):
            request = MultipartPost(f"{server.url}/upload", fields, "filearg", log, timeout_s=WAIT)
            statuses.append((await post(request, WAIT)).status)

    assert statuses == [302, 500, 500]


@pytest.mark.asyncio
async def test_a_400_is_not_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app", answers=[400]) as server:
        shipper = LogShipper(settings(server.url, attempts=5))
        with caplog.at_level(logging.INFO, logger="ulogstream.upload"):
            await ship(shipper, log)

    assert [u.status for u in server.received] == [400]
    assert (shipper.uploaded, shipper.failed) == (0, 1)
    (line,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert "refused the log with HTTP 400: forced answer" in line
    assert "given up (the file stays)" in line
    assert log.exists()


@pytest.mark.asyncio
async def test_a_500_is_retried_then_succeeds(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app", answers=[500, 503]) as server:
        shipper = LogShipper(settings(server.url, attempts=3))
        await ship(shipper, log)

    assert [u.status for u in server.received] == [500, 503, 302]
    assert (shipper.uploaded, shipper.failed) == (1, 0)
    assert list(server.stored.values()) == [DATA]


@pytest.mark.asyncio
async def test_the_rust_server_gets_the_file_part_and_its_delete_token_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("api") as server:
        shipper = LogShipper(settings(server.url + "/", api="api"))
        with caplog.at_level(logging.INFO, logger="ulogstream.upload"):
            await ship(shipper, log)

    (upload,) = server.received
    assert upload.path == "/api/upload"
    assert upload.files == {"file": ("12_34_56.ulg", DATA)}
    ((log_id, token),) = server.tokens.items()
    page = f"{server.url}/log/{log_id}"  # v2's page (v1's /plot_app does not exist there)
    assert shipper.locations == [page]
    assert upload.fields == {
        "is_public": "false",
        "description": "uav-1 12_34_56.ulg",
        "vehicle_name": "uav-1",
        "source": "ulogstream",
    }
    lines = [r.getMessage() for r in caplog.records]
    (token_line,) = [line for line in lines if token in line]
    assert page in token_line
    assert "delete token" in token_line


@pytest.mark.asyncio
async def test_the_rust_server_refusing_with_400_is_not_retried_but_a_502_is(
    tmp_path: Path,
) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("api", answers=[502, 400]) as server:
        shipper = LogShipper(settings(server.url, api="api", attempts=5))
        await ship(shipper, log)

    assert [u.status for u in server.received] == [502, 400]
    assert (shipper.uploaded, shipper.failed) == (0, 1)


@pytest.mark.asyncio
async def test_no_server_listening_is_retried_then_given_up(tmp_path: Path) -> None:
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app") as server:
        url = server.url  # closed on leaving: nothing listens there any more
    shipper = LogShipper(settings(url, attempts=2))
    await ship(shipper, log)

    assert (shipper.uploaded, shipper.failed) == (0, 1)
    assert shipper.last_error is not None
    assert shipper.last_error.startswith(f"cannot post to {url}/upload")


@pytest.mark.asyncio
async def test_a_server_that_never_answers_times_out_and_the_thread_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flight_review, "ANSWER_WAIT_S", 0.3)
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app", answers=[HANG]) as server:
        shipper = LogShipper(settings(server.url, attempts=1, timeout_s=0.3))
        await ship(shipper, log)

    assert shipper.failed == 1
    assert (
        shipper.last_error
        == f"{server.url}/upload got the whole log but did not answer within 0.3 s"
    )


@pytest.mark.asyncio
async def test_a_server_slower_to_answer_than_the_transfer_timeout_gets_one_entry(
    tmp_path: Path,
) -> None:
    """v1 stores the log, then parses it before it answers: the answer is waited for."""
    log = finished_log(tmp_path)
    async with ReviewServer("plot_app", parse_s=1.5) as server:
        shipper = LogShipper(settings(server.url, attempts=3, timeout_s=0.5))
        await ship(shipper, log)

    assert len(server.stored) == 1  # before: three entries, and the status said one upload
    assert (shipper.uploaded, shipper.failed) == (1, 0)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("api", "limit", "status"),
    [
        ("plot_app", "max_body", 413),  # nginx before Flight Review: 413 from the headers
        ("api", "max_body", 413),
        ("plot_app", "body_limit", 400),  # Tornado itself: 400, then a reset mid-body
    ],
)
async def test_a_log_too_large_for_the_server_is_said_so_and_not_retried(
    tmp_path: Path, api: FlightReviewApi, limit: str, status: int
) -> None:
    log = finished_log(tmp_path, DATA * 400)  # 31 MB: more than the socket buffers take
    async with ReviewServer(api, **{limit: 100_000}) as server:  # type: ignore[arg-type]
        shipper = LogShipper(settings(server.url, api=api, attempts=5))
        await ship(shipper, log)

    assert [u.status for u in server.received] == [status]
    assert (shipper.uploaded, shipper.failed) == (0, 1)
    assert shipper.last_error is not None
    assert "is too large for this server" in shipper.last_error
    assert "url right" not in shipper.last_error


@pytest.mark.asyncio
async def test_v2_gets_every_field_it_reads_and_a_log_it_cannot_convert_is_not_retried(
    tmp_path: Path,
) -> None:
    log = finished_log(tmp_path)
    broken = finished_log(tmp_path / "broken", b"not a ULog file" * 100)
    async with ReviewServer("api") as server:
        shipper = LogShipper(
            settings(
                server.url, api="api", attempts=5, fr_public=True, fr_rating="great",
                fr_wind_speed=8, fr_video_url="https://video.example/1", fr_feedback="ok",
                fr_tags="survey,test", fr_pilot_name="Ann", fr_location_name="Field 3",
                fr_mission_type="survey", fr_description="{vehicle}",
            )
        )  # fmt: skip
        uploaded: list[tuple[str, str | None]] = []
        shipper.on_uploaded = lambda _info, _name, done: uploaded.append(
            (done.location, done.delete_token)
        )
        await ship(shipper, log)
        async with running(shipper.run()):
            shipper.offer(broken, broken.stat().st_size, vehicle="uav-1", how="complete")
            await asyncio.wait_for(shipper.wait_idle(), WAIT)

    first, second = server.received
    assert first.fields == {
        "is_public": "true",
        "description": "uav-1",
        "vehicle_name": "uav-1",
        "source": "ulogstream",
        "rating": "5",
        "wind_speed": "gale",
        "video_url": "https://video.example/1",
        "feedback": "ok",
        "tags": "survey,test",
        "pilot_name": "Ann",
        "location_name": "Field 3",
        "mission_type": "survey",
    }
    ((log_id, token),) = server.tokens.items()
    assert uploaded == [(f"{server.url}/log/{log_id}", token)]
    # the delete token is kept next to the log, in its flight index
    index = json.loads(log.with_name(log.name + ".json").read_text())
    assert [(u["location"], u["delete_token"]) for u in index["uploads"]] == uploaded
    assert second.status == 500  # conversion error: once, not five times
    assert (shipper.uploaded, shipper.failed) == (1, 1)
    assert shipper.last_error is not None
    assert "cannot convert" in shipper.last_error


def test_make_target_names_each_target() -> None:
    assert make_target(UploadSettings()) is None
    review = make_target(settings("https://review.example/fr", api="api"))
    assert isinstance(review, FlightReviewTarget)
    assert review.name == "Flight Review https://review.example/fr"
    assert review.endpoint == "https://review.example/fr/api/upload"
    info = FinishedLogInfo(
        path=Path("/x/2026-11-25/12_34_56.ulg"), size=1, sha256=None, sys_uuid=None,
        start_time=None, date="2026-11-25", vehicle="v", complete=True, how="complete",
    )  # fmt: skip
    assert review.form_fields(info) == {  # v2's own names
        "is_public": "false",
        "description": "v 12_34_56.ulg",
        "vehicle_name": "v",
        "source": "ulogstream",
    }


@pytest.mark.parametrize(
    ("override", "error"),
    [
        (
            ("upload.flight_review.url", "review.px4.io"),
            "upload.flight_review.url must be http(s)://HOST[:PORT][/PATH], not 'review.px4.io'",
        ),
        (
            ("upload.flight_review.api", "v2"),
            "upload.flight_review.api must be one of 'plot_app', 'api', not a string ('v2')",
        ),
        (
            ("upload.flight_review.type", "public"),
            "upload.flight_review.type must be one of 'personal', 'flightreport'",
        ),
        (("upload.flight_review.wind_speed", -3), "upload.flight_review.wind_speed must be -1"),
        (
            ("upload.flight_review.description", "{pilot}"),
            "upload.flight_review.description has an unknown placeholder {pilot}",
        ),
        (("upload.flight_review.video", ""), "(did you mean upload.flight_review.video_url?)"),
        (("upload.target", "ftp"), "upload.target must be one of 'command', 'flight_review'"),
    ],
)
def test_each_bad_flight_review_setting_gets_one_clear_error(
    override: tuple[str, object], error: str
) -> None:
    key, value = override
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"upload.target": "flight_review", key: value})
    assert str(info.value).startswith("command line: ")
    assert error in str(info.value)


def test_the_flight_review_section_loads_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "ulogstream.toml"
    path.write_text(
        '[upload]\ntarget = "flight_review"\n'
        '[upload.flight_review]\nurl = "http://127.0.0.1:5006"\napi = "api"\n'
        'type = "flightreport"\nrating = "good"\n'
    )
    review = load_settings(path).upload.flight_review
    assert (review.url, review.api, review.type, review.rating) == (
        "http://127.0.0.1:5006",
        "api",
        "flightreport",
        "good",
    )
    path.write_text('[upload.flight_review]\nwind_speed = "calm"\n')
    with pytest.raises(ConfigError, match=r"\.toml: upload\.flight_review\.wind_speed must be an"):
        load_settings(path)


def test_a_command_with_another_target_is_one_clear_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"upload.target": "flight_review", "upload.command": "cp {path} /x"})
    assert str(info.value) == (
        'command line: upload.command is only run with upload.target = "command", not '
        "'flight_review'; unset one of them"
    )
