"""S3 uploads against s3rver (npm), a store nobody here wrote, whose answers differ from AWS's.

s3rver checks every request's SigV4 signature, gives a multipart object the whole object's MD5
as its ETag (AWS: the parts' form ``md5-N``), and implements neither ListMultipartUploads nor
AbortMultipartUpload. An upload must land on its first attempt all the same, and be known again
by its ETag. (tests/upload/test_s3.py runs the rest against moto's server.)
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import socket
import subprocess
import time
from typing import TYPE_CHECKING

import obstore
import pytest
from support.broker import free_port
from support.foxglove_viewer import NODE_DIR, npm_packages
from support.s3_logs import DATE, PART_MB, fixture_big_log, info_of, small_log
from support.waiting import POLL_INTERVAL, WAIT_LIMIT

from ulogstream.config.sections import S3Settings
from ulogstream.errors import UploadRejectedError
from ulogstream.upload.s3 import S3Credentials, S3Target

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["fixture_big_log"]  # a fixture of this module

BUCKET = "logs"
S3RVER_KEYS = S3Credentials("S3RVER", "S3RVER")
"""The keys s3rver accepts (it checks the signature made with them)."""


@pytest.fixture(scope="module", name="s3rver")
def fixture_s3rver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """s3rver on a free port with the bucket ``logs``; its URL."""
    npm_packages(NODE_DIR, "s3rver", "the s3rver tests")
    node = shutil.which("node")
    assert node is not None  # npm_packages skipped otherwise
    port = free_port()
    data = tmp_path_factory.mktemp("s3rver")
    log = data.parent / f"{data.name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [node, str(NODE_DIR / "node_modules" / "s3rver" / "bin" / "s3rver.js"),
             "--directory", str(data), "--address", "127.0.0.1", "--port", str(port),
             "--configure-bucket", BUCKET, "--silent"],
            stdout=output,
            stderr=output,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_LIMIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, "s3rver did not start"
                time.sleep(POLL_INTERVAL)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait(timeout=10)


def target(url: str) -> S3Target:
    settings = S3Settings(bucket=BUCKET, endpoint_url=url, part_size_mb=PART_MB)
    return S3Target(settings, credentials=S3RVER_KEYS)


@pytest.mark.asyncio
@pytest.mark.parametrize("multipart", [False, True])
async def test_a_log_lands_on_its_first_attempt_and_is_known_again_by_its_etag(
    s3rver: str,
    tmp_path: Path,
    big_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    multipart: bool,
) -> None:
    log = big_log if multipart else small_log(tmp_path / "out")
    data = log.read_bytes()
    info = info_of(log)
    s3 = target(s3rver)
    assert (info.size > PART_MB << 20) is multipart

    url = (await s3.upload(info)).location  # the first attempt counts: no UploadError

    assert url == f"s3://{BUCKET}/uav-1/{DATE}/{log.name}"
    meta = await obstore.head_async(s3._store, s3.key(info))
    assert meta["size"] == len(data)
    # s3rver's ETag is the whole object's MD5 also for a multipart object (AWS: md5-N)
    assert (meta["e_tag"] or "").strip('"') == hashlib.md5(data, usedforsecurity=False).hexdigest()
    stored = await obstore.get_async(s3._store, s3.key(info))
    assert bytes(await stored.bytes_async()) == data

    async def no_put(*_args: object, **_kwargs: object) -> None:
        pytest.fail("the log was sent again")

    monkeypatch.setattr(obstore, "put_async", no_put)
    assert (await s3.upload(info)).location == url


@pytest.mark.asyncio
async def test_a_store_without_the_upload_listing_is_said_once_and_the_error_stays_the_uploads(
    s3rver: str, big_log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ulogstream")
    s3 = target(s3rver)
    wrong = info_of(big_log, sha256="0" * 64, vehicle="uav-2")  # changed since its checksum
    for _ in range(2):
        with pytest.raises(UploadRejectedError, match="changed since its checksum"):
            await s3.upload(wrong)
    said = [r.getMessage() for r in caplog.records if "does not list" in r.getMessage()]
    assert len(said) == 1
    assert "(HTTP 501)" in said[0] or "(HTTP 405)" in said[0]
    listed = [meta["path"] for batch in obstore.list(s3._store, "uav-2") for meta in batch]
    assert listed == []  # nothing completed
