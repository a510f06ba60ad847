"""S3Target against a real S3-compatible server: moto's, started as a process on a free port.

The server can be killed mid-upload (SIGKILL: no goodbye) and started again on the same port.
Requests to it are unsigned plain HTTP (moto accepts them), so the checks here do not go
through the code under test.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from unittest import mock
from urllib.parse import quote

import obstore
import pytest
from obstore.exceptions import GenericError, PermissionDeniedError
from support.broker import free_port
from support.s3_logs import DATE, PART_MB, fixture_big_log, info_of, small_log
from support.waiting import POLL_INTERVAL, WAIT_LIMIT, eventually, holds_for, running

from ulogstream.config.loader import COMMAND_LINE, load_settings
from ulogstream.config.sections import S3Settings, UploadSettings
from ulogstream.errors import ConfigError, UploadError, UploadRejectedError
from ulogstream.upload.info import describe
from ulogstream.upload.s3 import (
    S3Credentials,
    S3Target,
    _failure,
    multipart_etag,
    object_key,
    read_s3_credentials,
    sigv4_headers,
)
from ulogstream.upload.shipper import LogShipper

__all__ = ["fixture_big_log"]  # a fixture of this module

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ulogstream.upload.targets import Uploaded

pytestmark = pytest.mark.timeout(120)

START_TIMEOUT = 30.0
"""Seconds moto's server may take to start on a loaded machine (it imports a lot)."""

KEYS = S3Credentials("test-key-id", "test-secret")
"""S3's smallest part: the multipart tests need the fewest bytes."""
PASS = {
    "Authorization": "AWS4-HMAC-SHA256 Credential=test/20261125/us-east-1/s3/aws4_request, "
    "SignedHeaders=host, Signature=0"
}
"""Lets the checks read private objects: moto verifies no signature unless told to."""


@dataclass
class MotoS3:
    """moto's S3-compatible server as a process under test control.

    Attributes:
        port: Its port on 127.0.0.1, kept across :meth:`kill` and :meth:`start`.
        log: Where its output goes.
    """

    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server (empty: moto keeps nothing across a restart) and wait for it."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                text = self.log.read_text(errors="replace")[-2000:]
                pytest.fail(f"moto's server exited with {self.process.returncode}: {text}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    pytest.fail(f"moto's server did not answer on {self.port} in {START_TIMEOUT} s")
                time.sleep(POLL_INTERVAL)
            else:
                return

    def kill(self) -> None:
        """SIGKILL the server (connections drop with no answer) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def _request(self, method: str, path: str) -> bytes:
        request = urllib.request.Request(  # noqa: S310 (http only)
            self.url + path, method=method, headers=PASS
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            body: bytes = answer.read()
            return body

    def create_bucket(self, bucket: str) -> None:
        """Create ``bucket``."""
        self._request("PUT", f"/{bucket}")

    def deny_reading(self, bucket: str) -> None:
        """Give ``bucket`` a policy that lets nobody read its objects (write-only keys)."""
        statement = {
            "Effect": "Deny",
            "Principal": "*",
            "Action": ["s3:GetObject", "s3:HeadObject"],
            "Resource": f"arn:aws:s3:::{bucket}/*",
        }
        policy = json.dumps({"Version": "2012-10-17", "Statement": [statement]}).encode()
        request = urllib.request.Request(  # noqa: S310 (http only)
            f"{self.url}/{bucket}?policy",
            data=policy,
            method="PUT",
            headers={**PASS, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass

    def keys(self, bucket: str) -> list[str]:
        """The keys of the objects in ``bucket``."""
        return re.findall(
            r"<Key>([^<]*)</Key>", self._request("GET", f"/{bucket}?list-type=2").decode()
        )

    def uploads(self, bucket: str) -> list[str]:
        """The keys of the multipart uploads begun in ``bucket`` and not completed or aborted."""
        return re.findall(
            r"<Key>([^<]*)</Key>", self._request("GET", f"/{bucket}?uploads").decode()
        )

    def get(self, bucket: str, key: str) -> bytes:
        """The bytes of an object."""
        return self._request("GET", f"/{bucket}/{key}")

    def head(self, bucket: str, key: str) -> dict[str, str]:
        """The headers of an object, names in lower case."""
        request = urllib.request.Request(  # noqa: S310 (http only)
            f"{self.url}/{bucket}/{key}", method="HEAD", headers=PASS
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            return {name.lower(): value for name, value in answer.headers.items()}


def _running(server: MotoS3) -> Iterator[MotoS3]:
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(name="moto_s3", scope="module")
def fixture_moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """One server for the module's tests (each uses buckets of its own)."""
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    yield from _running(MotoS3(free_port(), log))


@pytest.fixture(name="moto_s3_own")
def fixture_moto_s3_own(tmp_path: Path) -> Iterator[MotoS3]:
    """A server of the test's own, to kill and restart."""
    yield from _running(MotoS3(free_port(), tmp_path / "moto.log"))


def target(server: MotoS3, bucket: str, *, prefix: str = "") -> S3Target:
    settings = S3Settings(
        bucket=bucket, prefix=prefix, endpoint_url=server.url, part_size_mb=PART_MB
    )
    return S3Target(settings, credentials=KEYS)


async def until_multipart_began(
    server: MotoS3, bucket: str, upload: asyncio.Task[Uploaded]
) -> None:
    """Wait until ``upload`` has begun its multipart upload (and not completed it)."""
    deadline = time.monotonic() + WAIT_LIMIT
    while not await asyncio.to_thread(server.uploads, bucket):
        assert not upload.done(), "the upload ended before it could be interrupted"
        assert time.monotonic() < deadline, "no multipart upload began"
        await asyncio.sleep(POLL_INTERVAL)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- uploads ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_generated_log_lands_at_its_key_with_an_equal_sha256(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    moto_s3.create_bucket("logs-small")
    log = small_log(tmp_path / "out")
    info = info_of(log)

    url = (await target(moto_s3, "logs-small", prefix="/fleet/a/").upload(info)).location

    key = f"fleet/a/uav-1/{DATE}/12_34_56.ulg"
    assert url == f"s3://logs-small/{key}"
    assert moto_s3.keys("logs-small") == [key]
    stored = moto_s3.get("logs-small", key)
    assert sha256(stored) == info.sha256 == sha256(log.read_bytes())
    headers = moto_s3.head("logs-small", key)
    assert headers["x-amz-meta-sha256"] == info.sha256
    assert headers["etag"].strip('"') == hashlib.md5(stored, usedforsecurity=False).hexdigest()


@pytest.mark.asyncio
async def test_the_object_carries_the_flight_summarys_headline_as_metadata(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    moto_s3.create_bucket("logs-indexed")
    log = small_log(tmp_path / "out")
    info = await asyncio.to_thread(describe, log, log.stat().st_size, vehicle="uav-1", how="ok")
    assert info.flight is not None
    s3 = target(moto_s3, "logs-indexed")

    await s3.upload(info)

    headers = moto_s3.head("logs-indexed", s3.key(info))
    assert headers["x-amz-meta-flight-duration-s"] == str(info.flight["duration_s"])
    assert headers["x-amz-meta-flight-firmware"] == "v1.15.2"
    assert headers["x-amz-meta-flight-vehicle-type"] == "rotary wing"
    assert headers["x-amz-meta-flight-max-altitude-m"] == str(info.flight["max_altitude_m"])
    assert "x-amz-meta-flight-takeoff-time" not in headers  # not in this log: not made up


@pytest.mark.asyncio
async def test_a_log_larger_than_a_part_goes_up_in_parts_and_arrives_whole(
    moto_s3: MotoS3, big_log: Path
) -> None:
    moto_s3.create_bucket("logs-big")
    info = info_of(big_log)
    data = await asyncio.to_thread(big_log.read_bytes)
    part = PART_MB << 20
    parts = [data[i : i + part] for i in range(0, len(data), part)]
    assert len(parts) > 2

    url = (await target(moto_s3, "logs-big").upload(info)).location

    key = f"uav-1/{DATE}/10_00_00.ulg"
    assert url == f"s3://logs-big/{key}"
    assert moto_s3.keys("logs-big") == [key]
    assert moto_s3.uploads("logs-big") == []
    assert sha256(moto_s3.get("logs-big", key)) == info.sha256
    md5s = [hashlib.md5(p, usedforsecurity=False).digest() for p in parts]
    assert moto_s3.head("logs-big", key)["etag"].strip('"') == multipart_etag(md5s)


@pytest.mark.asyncio
@pytest.mark.parametrize("multipart", [False, True])
async def test_a_log_already_uploaded_is_not_sent_again(
    moto_s3: MotoS3,
    tmp_path: Path,
    big_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    multipart: bool,
) -> None:
    bucket = f"logs-again-{int(multipart)}"
    moto_s3.create_bucket(bucket)
    log = big_log if multipart else small_log(tmp_path / "out")
    info = info_of(log)
    s3 = target(moto_s3, bucket)
    url = (await s3.upload(info)).location

    async def no_put(*_args: object, **_kwargs: object) -> None:
        pytest.fail("the log was sent again")

    monkeypatch.setattr(obstore, "put_async", no_put)  # s3 calls obstore.put_async
    assert (
        await s3.upload(info)
    ).location == url  # the store's ETag matches the log: nothing is sent
    assert moto_s3.keys(bucket) == [f"uav-1/{DATE}/{log.name}"]


@pytest.mark.asyncio
async def test_an_object_with_our_metadata_but_other_bytes_is_replaced(
    moto_s3: MotoS3, tmp_path: Path
) -> None:
    """The ``sha256`` metadata is this client's own claim: the store's ETag must match too."""
    moto_s3.create_bucket("logs-forged")
    log = small_log(tmp_path / "out")
    info = info_of(log)
    s3 = target(moto_s3, "logs-forged")
    other = bytes(reversed(log.read_bytes()))  # same size, other bytes
    assert info.sha256 is not None
    await obstore.put_async(s3._store, s3.key(info), other, attributes={"sha256": info.sha256})

    await s3.upload(info)
    assert moto_s3.get("logs-forged", s3.key(info)) == log.read_bytes()


@pytest.mark.asyncio
async def test_parts_a_killed_recorder_left_are_aborted_before_the_next_upload(
    moto_s3: MotoS3, big_log: Path
) -> None:
    moto_s3.create_bucket("logs-left")
    info = info_of(big_log)
    s3 = target(moto_s3, "logs-left")
    status, _ = await asyncio.to_thread(s3._signed, "POST", s3.key(info), {"uploads": ""})
    assert status == 200
    assert moto_s3.uploads("logs-left") == [s3.key(info)]

    await s3.upload(info)
    assert moto_s3.uploads("logs-left") == []
    assert moto_s3.get("logs-left", s3.key(info)) == big_log.read_bytes()  # noqa: ASYNC240


@pytest.mark.asyncio
async def test_write_only_keys_upload_checked_by_the_etag_of_the_answer(
    moto_s3: MotoS3, big_log: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    moto_s3.create_bucket("logs-write-only")
    moto_s3.deny_reading("logs-write-only")
    s3 = target(moto_s3, "logs-write-only")
    small = small_log(tmp_path / "out")

    for log in (small, big_log):
        assert (await s3.upload(info_of(log))).location == s3.url(info_of(log))

    assert moto_s3.keys("logs-write-only") == [
        f"uav-1/{DATE}/10_00_00.ulg",
        f"uav-1/{DATE}/12_34_56.ulg",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        (
            "s3://logs-write-only: these keys may not read objects back (HTTP 403): logs are "
            "sent again after a lost answer, and checked by the store's SHA-256 and ETag only"
        )
    ]


@pytest.mark.asyncio
async def test_a_log_that_changed_since_its_checksum_leaves_no_object(
    moto_s3: MotoS3, big_log: Path, tmp_path: Path
) -> None:
    moto_s3.create_bucket("logs-changed")
    s3 = target(moto_s3, "logs-changed")
    small = small_log(tmp_path / "out")
    for log in (small, big_log):  # one PUT; a multipart upload, abandoned before it completes
        announced = info_of(log, sha256="0" * 64)

        with pytest.raises(UploadRejectedError) as raised:
            await s3.upload(announced)

        message = str(raised.value)
        assert message.startswith(f"{log} changed since its checksum was taken")
        assert "\n" not in message
    assert moto_s3.keys("logs-changed") == []
    assert moto_s3.uploads("logs-changed") == []


@pytest.mark.asyncio
async def test_a_missing_bucket_is_rejected_for_good(moto_s3: MotoS3, tmp_path: Path) -> None:
    info = info_of(small_log(tmp_path / "out"))

    with pytest.raises(UploadRejectedError) as raised:
        await target(moto_s3, "no-such-bucket").upload(info)

    assert str(raised.value) == (
        f"S3 PUT s3://no-such-bucket/uav-1/{DATE}/12_34_56.ulg failed: "
        "NoSuchBucket: The specified bucket does not exist (HTTP 404); not retried"
    )


@pytest.mark.asyncio
async def test_a_log_gone_from_disk_is_rejected(moto_s3: MotoS3, tmp_path: Path) -> None:
    moto_s3.create_bucket("logs-gone")
    log = small_log(tmp_path / "out")
    info = info_of(log)
    log.unlink()

    with pytest.raises(UploadRejectedError, match="no longer exists"):
        await target(moto_s3, "logs-gone").upload(info)


@pytest.mark.asyncio
async def test_no_server_is_a_retryable_error(tmp_path: Path) -> None:
    nobody = MotoS3(free_port(), tmp_path / "unused.log")
    info = info_of(small_log(tmp_path / "out"))

    with pytest.raises(UploadError) as raised:
        await target(nobody, "logs").upload(info)

    assert str(raised.value) == (
        f"S3 HEAD s3://logs/uav-1/{DATE}/12_34_56.ulg failed: connection refused"
    )


@pytest.mark.asyncio
async def test_server_killed_mid_upload_then_restarted_the_next_attempt_completes_once(
    moto_s3_own: MotoS3, big_log: Path
) -> None:
    server = moto_s3_own
    server.create_bucket("logs")
    info = info_of(big_log)
    s3 = target(server, "logs")
    key = f"uav-1/{DATE}/10_00_00.ulg"

    upload = asyncio.create_task(s3.upload(info))
    await until_multipart_began(server, "logs", upload)
    server.kill()

    with pytest.raises(UploadError) as raised:
        await upload
    message = str(raised.value)
    assert message.startswith(f"S3 PUT s3://logs/{key} failed: ")
    assert "\n" not in message

    server.start()  # same port, and empty: moto keeps nothing
    server.create_bucket("logs")

    assert (await s3.upload(info)).location == f"s3://logs/{key}"
    assert server.keys("logs") == [key]
    assert sha256(server.get("logs", key)) == info.sha256


@pytest.mark.asyncio
async def test_the_shipper_retries_an_upload_cut_by_a_server_kill_until_it_lands_once(
    moto_s3_own: MotoS3, big_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``upload.target = "s3"`` end to end: killed mid-upload, retried with backoff, one object."""
    server = moto_s3_own
    server.create_bucket("logs")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS.secret_access_key)
    s3 = S3Settings(bucket="logs", endpoint_url=server.url, part_size_mb=PART_MB)
    shipper = LogShipper(
        UploadSettings(target="s3", s3=s3, backoff_s=0.5, attempts=20), journal=tmp_path / "queue"
    )
    key = f"uav-1/{DATE}/10_00_00.ulg"
    data = await asyncio.to_thread(big_log.read_bytes)
    async with running(shipper.run()):
        shipper.offer(big_log, len(data), vehicle="uav-1", how="complete")
        await eventually(lambda: bool(server.uploads("logs")), what="a multipart upload began")
        server.kill()
        await eventually(lambda: shipper.last_error is not None, what="the cut upload failed")
        server.start()  # same port, and empty: moto keeps nothing
        server.create_bucket("logs")
        await asyncio.wait_for(shipper.wait_idle(), WAIT_LIMIT * 4)
    assert (shipper.uploaded, shipper.failed) == (1, 0)
    assert server.keys("logs") == [key]
    assert sha256(server.get("logs", key)) == sha256(data)
    assert not await asyncio.to_thread(any, (tmp_path / "queue").iterdir())  # nothing waits


@pytest.mark.asyncio
async def test_an_upload_cancelled_halfway_leaves_no_object(moto_s3: MotoS3, big_log: Path) -> None:
    moto_s3.create_bucket("logs-cancelled")
    upload = asyncio.create_task(target(moto_s3, "logs-cancelled").upload(info_of(big_log)))
    await until_multipart_began(moto_s3, "logs-cancelled", upload)

    upload.cancel()

    with pytest.raises(asyncio.CancelledError):
        await upload
    await holds_for(
        lambda: moto_s3.keys("logs-cancelled") == [],
        2.0,
        what="a cancelled upload completed all the same",
    )
    # and its parts are gone: the multipart upload was aborted
    await eventually(lambda: moto_s3.uploads("logs-cancelled") == [], what="parts left")


# --- errors -----------------------------------------------------------------------------------


def _answer(status: str, code: str, message: str) -> str:
    return (
        "Generic S3 error: Error performing PUT http://s3/logs/k in 2ms - Server returned non-2xx "
        f'status code: {status}: <?xml version="1.0"?><Error><Code>{code}</Code>'
        f"<Message>{message}</Message></Error>\n\nDebug source:\n..."
    )


@pytest.mark.parametrize(
    ("error", "rejected", "reason"),
    [
        (
            PermissionDeniedError(_answer("403 Forbidden", "AccessDenied", "Access Denied")),
            True,
            "AccessDenied: Access Denied (HTTP 403)",
        ),
        (
            GenericError(_answer("400 Bad Request", "InvalidBucketName", "bad name")),
            True,
            "InvalidBucketName: bad name (HTTP 400)",
        ),
        (
            PermissionDeniedError(_answer("403 Forbidden", "RequestTimeTooSkewed", "skewed")),
            False,
            "RequestTimeTooSkewed: skewed (HTTP 403)",
        ),
        (
            GenericError(_answer("400 Bad Request", "BadDigest", "differs")),
            False,
            "BadDigest: differs (HTTP 400)",
        ),
        (
            GenericError(_answer("503 Service Unavailable", "SlowDown", "slow down")),
            False,
            "SlowDown: slow down (HTTP 503)",
        ),
        (
            GenericError("Generic S3 error: ... after 2 retries - HTTP error: operation timed out"),
            False,
            "timed out",
        ),
        (
            GenericError(
                "Generic S3 error: Error performing PUT x - Server returned non-2xx "
                "status code: 500 Internal Server Error: "
            ),
            False,
            "HTTP 500",
        ),
    ],
)
def test_answers_that_retrying_cannot_change_are_rejected_the_rest_retried(
    error: Exception,
    rejected: bool,  # noqa: FBT001
    reason: str,
) -> None:
    raised = _failure("PUT", "s3://logs/k", error)

    assert isinstance(raised, UploadError)  # rejected or retried, an upload's error
    assert isinstance(raised, UploadRejectedError) is rejected
    suffix = "; not retried" if rejected else ""
    assert str(raised) == f"S3 PUT s3://logs/k failed: {reason}{suffix}"


# --- keys, settings and credentials -----------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "key"),
    [
        ("", f"uav-1/{DATE}/12_34_56.ulg"),
        ("fleet", f"fleet/uav-1/{DATE}/12_34_56.ulg"),
        ("/fleet/logs/", f"fleet/logs/uav-1/{DATE}/12_34_56.ulg"),
    ],
)
def test_the_key_is_prefix_vehicle_date_name_without_double_slashes(
    prefix: str, key: str, tmp_path: Path
) -> None:
    log = tmp_path / DATE / "12_34_56.ulg"
    log.parent.mkdir()
    log.write_bytes(b"ULog")

    assert object_key(prefix, info_of(log)) == key
    assert object_key(prefix, info_of(log, vehicle="..")) == key.replace("uav-1", "_")
    assert object_key(prefix, info_of(log, vehicle="a/b")) == key.replace("uav-1", "a_b")


def test_upload_s3_table_loads_from_toml_and_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "ulogstream.toml"
    path.write_text(
        '[upload]\nattempts = 3\n[upload.s3]\nbucket = "flight-logs"\n'
        'endpoint_url = "http://minio.local:9000"\npart_size_mb = 16\n'
    )

    settings = load_settings(path, {"upload.s3.prefix": "fleet"})

    assert settings.upload.attempts == 3
    assert settings.upload.s3 == S3Settings(
        bucket="flight-logs",
        endpoint_url="http://minio.local:9000",
        part_size_mb=16,
        prefix="fleet",
    )
    assert load_settings(None).upload.s3.bucket is None  # no S3 upload by default


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"upload.s3.bucket": "Flight_Logs"},
            (
                "upload.s3.bucket must be an S3 bucket name (3 to 63 lower-case letters, digits, "
                "dots and hyphens, beginning and ending with a letter or digit), not 'Flight_Logs'"
            ),
        ),
        (
            {"upload.s3.endpoint_url": "minio:9000"},
            "upload.s3.endpoint_url must start with http:// or https://, not 'minio:9000'",
        ),
        (
            {"upload.s3.endpoint_url": "http://minio:9000/flight-logs"},
            (
                "upload.s3.endpoint_url must be only scheme, host and port (the bucket is "
                "upload.s3.bucket), not 'http://minio:9000/flight-logs'"
            ),
        ),
        (
            {"upload.s3.part_size_mb": 4},
            "upload.s3.part_size_mb must be from 5 to 5120 (S3's limits), not 4",
        ),
        (
            {"upload.s3.prefix": "a//b"},
            (
                "upload.s3.prefix must be key levels without empty ones or control characters, "
                "not 'a//b'"
            ),
        ),
        (
            {"upload.s3.secret_access_key": "abc"},
            (
                "upload.s3.secret_access_key is never accepted inline; use AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY or upload.s3.credentials_file"
            ),
        ),
    ],
)
def test_bad_s3_settings_are_one_clear_line(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, overrides)

    assert str(raised.value) == f"{COMMAND_LINE}: {message}"


def test_keys_come_from_the_environment() -> None:
    settings = S3Settings(bucket="logs")
    environ = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}

    assert read_s3_credentials(settings, environ) == S3Credentials("id", "secret")
    assert "secret" not in repr(read_s3_credentials(settings, environ))
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY is not set, but its partner"):
        read_s3_credentials(settings, {"AWS_ACCESS_KEY_ID": "id"})
    with pytest.raises(ConfigError, match="S3 upload: no keys; set AWS_ACCESS_KEY_ID"):
        read_s3_credentials(settings, {})


def test_keys_come_from_a_credentials_file_profile(tmp_path: Path) -> None:
    path = tmp_path / "credentials"
    path.write_text(
        "[default]\naws_access_key_id = a\naws_secret_access_key = b\n"
        "[vehicle]\naws_access_key_id = c\naws_secret_access_key = d\naws_session_token = e\n"
    )
    environ = {"AWS_ACCESS_KEY_ID": "env", "AWS_SECRET_ACCESS_KEY": "env"}

    chosen = S3Settings(bucket="logs", credentials_file=path, profile="vehicle")
    assert read_s3_credentials(chosen, environ) == S3Credentials("c", "d", "e")
    missing = S3Settings(bucket="logs", credentials_file=path, profile="other")
    with pytest.raises(ConfigError) as raised:
        read_s3_credentials(missing, environ)
    assert str(raised.value) == (
        f"upload.s3.credentials_file {path} has no [other] section (upload.s3.profile); "
        "it has: default, vehicle"
    )
    absent = S3Settings(bucket="logs", credentials_file=tmp_path / "nothing")
    with pytest.raises(ConfigError, match="cannot be read: No such file or directory"):
        read_s3_credentials(absent, environ)


def test_a_target_needs_a_bucket() -> None:
    with pytest.raises(ConfigError, match=r"upload.s3.bucket is not set"):
        S3Target(S3Settings(), credentials=KEYS)


@pytest.mark.parametrize(
    ("method", "path", "query", "token"),
    [
        ("GET", "/logs", {"uploads": "", "prefix": "fleet/uav-1/2026-11-27/12_34_56.ulg"}, None),
        ("DELETE", "/logs/fleet/uav 1/a+b.ulg", {"uploadId": "2~abc/def=="}, "session"),
    ],
)
def test_the_abort_requests_are_signed_as_botocore_signs_them(
    method: str, path: str, query: dict[str, str], token: str | None
) -> None:
    """ListMultipartUploads and AbortMultipartUpload go out signed by our own SigV4 code."""
    from botocore.auth import S3SigV4Auth  # type: ignore[import-untyped]  # noqa: PLC0415 (moto's dependency, tests only)
    from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]  # noqa: PLC0415
    from botocore.credentials import Credentials  # type: ignore[import-untyped]  # noqa: PLC0415

    keys = S3Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    now = time.gmtime(1_764_000_000)
    encoded = quote(path)
    canonical_query = "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items())
    )
    ours = sigv4_headers(
        method,
        host="127.0.0.1:9000",
        path=encoded,
        canonical_query=canonical_query,
        credentials=keys,
        region="eu-central-1",
        now=now,
    )
    request = AWSRequest(
        method=method,
        url=f"http://127.0.0.1:9000{encoded}?{canonical_query}",
        headers={"x-amz-content-sha256": ours["x-amz-content-sha256"]},
    )
    at = dt.datetime(*now[:6], tzinfo=dt.UTC)
    with mock.patch("botocore.auth.get_current_datetime", return_value=at):
        S3SigV4Auth(
            Credentials(keys.access_key_id, keys.secret_access_key, token), "s3", "eu-central-1"
        ).add_auth(request)
    assert ours["authorization"] == request.headers["Authorization"]


@pytest.mark.asyncio
async def test_a_completion_without_an_etag_is_checked_by_the_heads(
    moto_s3: MotoS3, big_log: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ceph RGW 16 answers CompleteMultipartUpload with an empty ETag; its HEAD has the right one.

    RGW cannot run here (see the README), so its answer is made by blanking moto's.
    """
    moto_s3.create_bucket("logs-rgw")
    put = obstore.put_async

    async def rgw_put(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 (obstore's signature)
        result = await put(*args, **kwargs)
        return {**result, "e_tag": None}

    monkeypatch.setattr(obstore, "put_async", rgw_put)
    s3 = target(moto_s3, "logs-rgw")
    info = info_of(big_log)

    assert (await s3.upload(info)).location == s3.url(info)  # the first attempt counts
    assert "-" in moto_s3.head("logs-rgw", s3.key(info))["etag"]  # a multipart object
