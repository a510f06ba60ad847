"""Finished logs to S3 or an S3-compatible store (MinIO, Ceph, R2, ...), checksum verified.

:class:`S3Target` puts one finished log at ``s3://{bucket}/{prefix}/{vehicle}/{date}/{name}``
through ``obstore`` (Rust's ``object_store``: async, no Python dependencies):

- Streamed: the file is read in 1 MiB chunks in a thread, never whole; a log larger than
  ``part_size_mb`` goes up as a multipart upload, two parts at a time, so about three parts are
  held in memory whatever the size of the log.
- Checked: every request carries the SHA-256 of its body (``x-amz-checksum-sha256``), which AWS
  S3 and stores with its flexible checksums verify (s3rver and Ceph RGW 16 do not: RGW answers a
  wrong one with 200); the bytes read are hashed on the way and the upload is abandoned before
  it completes when their SHA-256 is not the announced one (:attr:`FinishedLogInfo.sha256`); the
  store's ETag, an MD5 digest it computed itself, is compared with the log's (S3's per-part form
  ``md5-N`` or the whole log's MD5, as s3rver gives multipart objects; when the completion
  answers with none, as Ceph RGW does, the HEAD's); then a HEAD compares the object's size and
  ``sha256`` metadata. Only then does the upload count as done.
- Idempotent: a log whose object is already there (an earlier upload whose answer was lost) is
  not sent again, but only when the store's own ETag matches the log, never on the size and the
  ``sha256`` metadata alone (a claim this client wrote itself); a retried upload replaces its
  object whole. Write-only keys (a 403 on HEAD) skip the HEADs, with one warning.
- Tidy: a multipart upload that will not complete is aborted (AbortMultipartUpload), and so are
  earlier ones left at the same key (a recorder killed mid-upload), where the store lists them
  (ListMultipartUploads: AWS S3, Ceph RGW, MinIO; not s3rver).
- Errors: :class:`~ulogstream.errors.UploadRejectedError` when retrying cannot help (no such
  bucket, access denied, a 4xx answer, a log that changed since its checksum was taken);
  :class:`~ulogstream.errors.UploadError` for everything a later attempt may get through (no
  connection, a 5xx answer, a timeout, a clock not yet set). Both carry one line.

"""

from __future__ import annotations

import asyncio
import configparser
import hashlib
import hmac
import http.client
import logging
import os
import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import quote, urlsplit

import msgspec
import obstore
from obstore.exceptions import InvalidPathError, PermissionDeniedError, UnauthenticatedError
from obstore.store import S3Store

from ulogstream.errors import ConfigError, UploadError, UploadRejectedError
from ulogstream.upload.targets import Uploaded

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from obstore.store import S3Config, S3Credential

    from ulogstream.config.sections import S3Settings
    from ulogstream.upload.info import FinishedLogInfo

logger = logging.getLogger(__name__)

READ_CHUNK = 1 << 20
"""Bytes read from the log at a time (a divisor of every part size)."""

PARTS_AT_ONCE = 2
"""Parts of one multipart upload in flight at once."""

CONNECT_TIMEOUT_S = 10.0
"""Seconds to open a connection to the store."""

REQUEST_RETRIES = 2
"""Retries of one request within one upload call (5xx, dropped connection); later attempts are
the caller's (with its backoff)."""

SHA256_METADATA = "sha256"
"""User metadata (``x-amz-meta-sha256``) holding the log's SHA-256 in hex."""
FLIGHT_METADATA = (
    "start_time",
    "duration_s",
    "armed_s",
    "takeoff_time",
    "max_altitude_m",
    "distance_m",
    "min_battery_v",
    "warnings",
    "errors",
    "vehicle_type",
    "firmware",
)
"""The flight summary's fields an object carries as ``x-amz-meta-flight-*`` (S3 allows 2 KB of
user metadata; the whole summary is in the log's sidecar)."""

_MB = 1 << 20
_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
_MD5_ETAG = re.compile(r'^"?([0-9a-f]{32}(?:-\d+)?)"?$')
_UPLOAD = re.compile(r"<Upload>(.*?)</Upload>", re.DOTALL)
_KEY = re.compile(r"<Key>([^<]*)</Key>")
_UPLOAD_ID = re.compile(r"<UploadId>([^<]*)</UploadId>")
_RETRYABLE_STATUS = frozenset({408, 429})
_RETRYABLE_CODES = frozenset(
    {
        "RequestTimeout",  # S3's 400 when a body came too slowly
        "RequestTimeTooSkewed",  # 403 while the vehicle's clock is not yet set (no RTC, no NTP)
        "BadDigest",  # 400: the body changed on the way
        "XAmzContentSHA256Mismatch",
        "SlowDown",
        "OperationAborted",
    }
)
_FINAL = (PermissionDeniedError, UnauthenticatedError, FileNotFoundError, InvalidPathError)
"""What obstore raises for 403, 401, 404 (no such bucket, on a PUT) and a key it refuses."""
_CAUSES = (
    ("connection refused", "connection refused"),
    ("connection reset", "connection reset"),
    ("connection closed", "connection closed"),
    ("broken pipe", "connection broken"),
    ("timed out", "timed out"),
    ("dns error", "host name not resolved"),
)


class S3Credentials(msgspec.Struct, frozen=True):
    """The keys requests are signed with (from the environment or a credentials file).

    Attributes:
        access_key_id: ``AWS_ACCESS_KEY_ID``.
        secret_access_key: ``AWS_SECRET_ACCESS_KEY`` (never shown).
        session_token: ``AWS_SESSION_TOKEN`` of temporary credentials; None: none.
    """

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None

    def __repr__(self) -> str:
        """The key id only: the secrets never reach a log line or a traceback."""
        return f"S3Credentials(access_key_id={self.access_key_id!r})"

    def __call__(self) -> S3Credential:
        """These keys as obstore asks for them (its ``credential_provider``)."""
        return {
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "token": self.session_token,
            "expires_at": None,
        }


def read_s3_credentials(
    settings: S3Settings, environ: Mapping[str, str] = os.environ
) -> S3Credentials:
    """The keys of ``settings.credentials_file`` (its ``profile``), else of the environment.

    Blocking (reads the file): call it at start-up.

    Raises:
        ConfigError: The file cannot be read or lacks the keys, or the environment holds one key
            without the other, or no keys are configured at all.
    """
    path = settings.credentials_file
    if path is not None:
        parser = configparser.ConfigParser(interpolation=None)
        where = f"upload.s3.credentials_file {path}"
        try:
            with path.open(encoding="utf-8") as file:
                parser.read_file(file)
        except OSError as err:
            msg = f"{where} cannot be read: {err.strerror}"
            raise ConfigError(msg) from err
        except (configparser.Error, UnicodeDecodeError) as err:
            first = str(err).splitlines()[0]
            msg = f"{where} is not an AWS credentials file ({first})"
            raise ConfigError(msg) from None
        if not parser.has_section(settings.profile):
            profiles = ", ".join(parser.sections()) or "none"
            msg = (
                f"{where} has no [{settings.profile}] section (upload.s3.profile); "
                f"it has: {profiles}"
            )
            raise ConfigError(msg)
        section = parser[settings.profile]
        key_id = section.get("aws_access_key_id", "").strip()
        secret = section.get("aws_secret_access_key", "").strip()
        if not key_id or not secret:
            msg = f"{where} [{settings.profile}] needs aws_access_key_id and aws_secret_access_key"
            raise ConfigError(msg)
        token = section.get("aws_session_token", "").strip() or None
        return S3Credentials(key_id, secret, token)
    key_id = environ.get("AWS_ACCESS_KEY_ID", "")
    secret = environ.get("AWS_SECRET_ACCESS_KEY", "")
    if key_id and secret:
        return S3Credentials(key_id, secret, environ.get("AWS_SESSION_TOKEN") or None)
    if key_id or secret:
        missing = "AWS_SECRET_ACCESS_KEY" if key_id else "AWS_ACCESS_KEY_ID"
        msg = f"S3 upload: {missing} is not set, but its partner is; set both"
        raise ConfigError(msg)
    msg = (
        "S3 upload: no keys; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment "
        "(e.g. an EnvironmentFile= of the systemd unit) or upload.s3.credentials_file"
    )
    raise ConfigError(msg)


def object_key(prefix: str, info: FinishedLogInfo) -> str:
    """``{prefix}/{vehicle}/{date}/{name}`` of ``info``, without empty levels."""
    levels = [prefix.strip("/"), _level(info.vehicle), _level(info.date), info.path.name]
    return "/".join(level for level in levels if level)


def _level(text: str) -> str:
    """``text`` as one key level: no slash, not empty, not ``.`` or ``..``."""
    level = text.replace("/", "_").strip()
    return "_" if level in {"", ".", ".."} else level


def multipart_etag(part_md5s: list[bytes]) -> str:
    """The ETag S3 gives an object uploaded in these parts (MD5 digests of each part)."""
    digest = hashlib.md5(b"".join(part_md5s), usedforsecurity=False).hexdigest()
    return f"{digest}-{len(part_md5s)}"


class _ChecksumMismatchError(Exception):
    """The bytes read are not the log that was announced (raised inside the upload's stream)."""


class _Stored(msgspec.Struct, frozen=True):
    """What a HEAD tells of an object: its size, ``sha256`` metadata and the store's ETag."""

    size: int
    sha256: str | None
    etag: str | None = None


_UNREADABLE = _Stored(-1, None)
"""The object cannot be read back (HTTP 403)."""


class _ReadError(Exception):
    """The log cannot be read (raised inside the upload's stream)."""


class _Digests:
    """SHA-256 of a whole log and MD5 of each of its parts, fed chunk by chunk (in a thread)."""

    def __init__(self, part_size: int) -> None:
        self.part_size = part_size
        self.sha256 = hashlib.sha256()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self.part_md5s: list[bytes] = []
        self.failure: Exception | None = None
        """Why the upload's stream ended it (the log changed or cannot be read): the cause, also
        when the store's answer to the abort that followed is what the upload raised."""
        self._part = hashlib.md5(usedforsecurity=False)
        self._in_part = 0

    def read(self, file: BinaryIO) -> bytes:
        """Read the next chunk of ``file`` and take it in (blocking)."""
        chunk = file.read(READ_CHUNK)
        self.sha256.update(chunk)
        self.md5.update(chunk)
        self.size += len(chunk)
        view = memoryview(chunk)
        while view:
            take = min(len(view), self.part_size - self._in_part)
            self._part.update(view[:take])
            self._in_part += take
            view = view[take:]
            if self._in_part == self.part_size:
                self._close_part()
        if not chunk and self._in_part:
            self._close_part()
        return chunk

    def _close_part(self) -> None:
        self.part_md5s.append(self._part.digest())
        self._part = hashlib.md5(usedforsecurity=False)
        self._in_part = 0

    def etags(self, *, multipart: bool) -> frozenset[str]:
        """The ETags a store may give these bytes (after the last chunk).

        The whole object's MD5; for a multipart upload also S3's form, the MD5 of the parts'
        MD5s and their count (s3rver gives the whole MD5, AWS S3 and Ceph RGW the parts' form).
        """
        whole = self.md5.hexdigest()
        return frozenset({whole, multipart_etag(self.part_md5s)} if multipart else {whole})

    def read_all(self, file: BinaryIO) -> None:
        """Take in the rest of ``file`` (blocking)."""
        while self.read(file):
            pass


class S3Target:
    """Uploads finished logs to one bucket of S3 or an S3-compatible store.

    Args:
        settings: The ``[upload.s3]`` settings; ``bucket`` must be set.
        credentials: The keys; None: :func:`read_s3_credentials` of ``settings`` (blocking: it
            may read a file, so construct the target at start-up).

    Raises:
        ConfigError: No bucket, or no usable keys.
    """

    def __init__(self, settings: S3Settings, *, credentials: S3Credentials | None = None) -> None:
        if settings.bucket is None:
            msg = "upload.s3.bucket is not set: set it to upload to S3"
            raise ConfigError(msg)
        self.settings = settings
        self.bucket = settings.bucket
        self.name = f"s3://{settings.bucket}"
        """What the logs call this target."""
        self._part_size = settings.part_size_mb * _MB
        self._readable = True
        self._lists_uploads = True
        """The store answers ListMultipartUploads (s3rver does not): incomplete uploads are
        aborted."""
        self._aborting: set[asyncio.Future[None]] = set()
        self._credentials = credentials or read_s3_credentials(settings)
        config: S3Config = {"region": settings.region, "checksum_algorithm": "SHA256"}
        if settings.endpoint_url is not None:
            config["endpoint"] = settings.endpoint_url.rstrip("/")
        self._store = S3Store(
            settings.bucket,
            config=config,
            client_options={
                "allow_http": (settings.endpoint_url or "").startswith("http://"),
                "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT_S),
                "timeout": timedelta(seconds=settings.request_timeout_s),
            },
            retry_config={
                "max_retries": REQUEST_RETRIES,
                "retry_timeout": timedelta(seconds=settings.request_timeout_s),
                "backoff": {
                    "init_backoff": timedelta(seconds=0.1),
                    "max_backoff": timedelta(seconds=2),
                    "base": 2,
                },
            },
            credential_provider=self._credentials,
        )

    def key(self, info: FinishedLogInfo) -> str:
        """The object key of ``info``: ``{prefix}/{vehicle}/{date}/{name}``."""
        return object_key(self.settings.prefix, info)

    def url(self, info: FinishedLogInfo) -> str:
        """``s3://{bucket}/{key}`` of ``info``."""
        return f"s3://{self.bucket}/{self.key(info)}"

    async def upload(self, info: FinishedLogInfo) -> Uploaded:
        """Upload ``info``'s log (unless its object is there already) and verify the object.

        Returns:
            ``s3://{bucket}/{key}`` of the object.

        Raises:
            UploadRejectedError: Retrying cannot help (see the module's documentation).
            UploadError: A later attempt may get through.
        """
        url = self.url(info)
        if info.sha256 is None:
            msg = f"{info.path} has no checksum (it could not be read when it finished)"
            raise UploadRejectedError(msg)
        multipart = info.size > self._part_size
        if await self._present(info, multipart=multipart):
            return Uploaded(url)
        if multipart:
            await self._abort_incomplete(self.key(info))  # a killed recorder's parts
        try:
            file = await asyncio.to_thread(info.path.open, "rb")
        except FileNotFoundError:
            msg = f"{info.path} no longer exists"
            raise UploadRejectedError(msg) from None
        except OSError as err:
            msg = f"cannot read {info.path}: {err.strerror}"
            raise UploadError(msg) from err
        digests = _Digests(self._part_size)
        try:
            result = await obstore.put_async(
                self._store,
                self.key(info),
                self._chunks(file, digests, info),
                attributes={SHA256_METADATA: info.sha256, **flight_metadata(info)},
                use_multipart=multipart,
                chunk_size=self._part_size,
                max_concurrency=PARTS_AT_ONCE,
            )
        except BaseException as raised:
            if multipart:  # the upload will not complete: its parts go
                cancelled = not isinstance(raised, Exception)
                await self._abort_after(self.key(info), cancelled=cancelled)
            cause = digests.failure or raised
            if isinstance(cause, _ChecksumMismatchError):
                raise UploadRejectedError(str(cause)) from None
            if isinstance(cause, _ReadError):
                raise UploadError(str(cause)) from cause.__cause__
            if isinstance(cause, (OSError, obstore.exceptions.BaseError)):
                error = _failure("PUT", url, cause)
                raise error from None
            raise
        finally:
            await asyncio.to_thread(file.close)
        stored = await self._verify(info, url)
        etag = result["e_tag"] or (None if stored is None else stored.etag)
        self._check_etag(url, etag, digests.etags(multipart=multipart))
        return Uploaded(url)

    async def _chunks(
        self, file: BinaryIO, digests: _Digests, info: FinishedLogInfo
    ) -> AsyncIterator[bytes]:
        while True:
            try:
                chunk = await asyncio.to_thread(digests.read, file)
            except OSError as err:
                msg = f"cannot read {info.path}: {err.strerror}"
                read_error = digests.failure = _ReadError(msg)
                raise read_error from err
            if not chunk:
                break
            yield chunk
        digest = digests.sha256.hexdigest()
        if digests.size != info.size or digest != info.sha256:
            msg = (
                f"{info.path} changed since its checksum was taken "
                f"({digests.size} bytes, SHA-256 {digest[:16]}..., not {info.size} bytes, "
                f"{(info.sha256 or '')[:16]}...): not uploaded"
            )
            mismatch = digests.failure = _ChecksumMismatchError(msg)
            raise mismatch

    async def _head(self, info: FinishedLogInfo) -> _Stored | None:
        """What the store holds at ``info``'s key; None: nothing.

        Write-only keys (``s3:PutObject`` without ``s3:GetObject``, common for vehicles) get a
        403: the object counts as unknown, and the checks that need to read it are skipped.
        """
        try:
            result = await obstore.get_async(self._store, self.key(info), options={"head": True})
        except FileNotFoundError:
            return None
        except PermissionDeniedError:
            if self._readable:
                self._readable = False
                logger.warning(
                    "%s: these keys may not read objects back (HTTP 403): logs are sent again "
                    "after a lost answer, and checked by the store's SHA-256 and ETag only",
                    self.name,
                )
            return _UNREADABLE
        except (OSError, obstore.exceptions.BaseError) as err:
            error = _failure("HEAD", self.url(info), err)
            raise error from None
        meta = result.meta
        sha256 = result.attributes.get(SHA256_METADATA)
        return _Stored(meta["size"], sha256 if isinstance(sha256, str) else None, meta["e_tag"])

    async def _present(self, info: FinishedLogInfo, *, multipart: bool) -> bool:
        """Whether ``info``'s object is in the store already (an earlier upload's answer lost).

        Its size and ``sha256`` metadata must match, and so must its ETag, which the store
        computed: the metadata alone is this client's own claim. With ``verify_etag`` off
        (SSE-KMS or SSE-C, whose ETags are no MD5) size and metadata must do.
        """
        stored = await self._head(info)
        if stored is None or stored is _UNREADABLE:
            return False
        if (stored.size, stored.sha256) != (info.size, info.sha256):
            return False
        if not self.settings.verify_etag:
            return True
        digests = _Digests(self._part_size)
        try:
            with info.path.open("rb") as file:
                await asyncio.to_thread(digests.read_all, file)
        except OSError:
            return False  # the upload itself says what is wrong with the file
        if _etag_matches(stored.etag, digests.etags(multipart=multipart)):
            return True
        logger.warning(
            "%s: the object at %s has this log's size and sha256 metadata but ETag %s, no MD5 "
            "of it: uploading it again",
            self.name,
            self.key(info),
            stored.etag,
        )
        return False

    def _check_etag(self, url: str, etag: str | None, expected: frozenset[str]) -> None:
        if self.settings.verify_etag and not _etag_matches(etag, expected):
            md5 = " or ".join(sorted(expected))
            msg = (
                f"S3 object {url} has ETag {etag}, not the log's MD5 ({md5}): "
                "the upload does not count (if the bucket encrypts with SSE-KMS or SSE-C, set "
                "upload.s3.verify_etag = false)"
            )
            raise UploadError(msg)

    async def _abort_after(self, key: str, *, cancelled: bool) -> None:
        """Abort the incomplete multipart uploads at ``key`` after a failed or cancelled one."""
        abort = asyncio.ensure_future(self._abort_incomplete(key))
        self._aborting.add(abort)
        abort.add_done_callback(self._aborting.discard)
        if not cancelled:  # a cancelled upload does not wait: the abort goes on by itself
            await asyncio.shield(abort)

    async def _abort_incomplete(self, key: str) -> None:
        """Abort every incomplete multipart upload at ``key`` (errors are logged, not raised)."""
        if not self._lists_uploads:
            return
        try:
            aborted = await asyncio.to_thread(self._abort_blocking, key)
        except (OSError, UploadError) as err:
            logger.warning("%s: incomplete uploads at %s not aborted: %s", self.name, key, err)
            return
        if aborted:
            logger.info("%s: aborted %d incomplete upload(s) at %s", self.name, aborted, key)

    def _abort_blocking(self, key: str) -> int:
        """List the incomplete uploads at ``key`` and abort each (blocking); how many."""
        status, body = self._signed("GET", "", {"uploads": "", "prefix": key})
        if status in {400, 404, 405, 501}:
            self._lists_uploads = False
            logger.info(
                "%s: the store does not list incomplete multipart uploads (HTTP %d): parts of "
                "an interrupted upload stay until its lifecycle rules remove them",
                self.name,
                status,
            )
            return 0
        if status != 200:  # noqa: PLR2004
            msg = f"ListMultipartUploads answered HTTP {status}"
            raise UploadError(msg)
        aborted = 0
        for upload in _UPLOAD.findall(body.decode(errors="replace")):
            found_key, upload_id = _xml_text(_KEY, upload), _xml_text(_UPLOAD_ID, upload)
            if found_key != key or upload_id is None:
                continue  # the prefix matched a longer key
            status, _ = self._signed("DELETE", key, {"uploadId": upload_id})
            if status in {200, 204}:
                aborted += 1
        return aborted

    def _signed(self, method: str, key: str, query: dict[str, str]) -> tuple[int, bytes]:
        """One request signed with AWS Signature V4, path style (blocking): status and body.

        obstore aborts nothing and lists no uploads, so these two requests are made here.
        """
        endpoint = self.settings.endpoint_url or f"https://s3.{self.settings.region}.amazonaws.com"
        parts = urlsplit(endpoint)
        path = quote(f"{parts.path.rstrip('/')}/{self.bucket}" + (f"/{key}" if key else ""))
        canonical_query = "&".join(
            f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items())
        )
        headers = sigv4_headers(
            method,
            host=parts.netloc,
            path=path,
            canonical_query=canonical_query,
            credentials=self._credentials,
            region=self.settings.region,
            now=time.gmtime(),
        )
        connection_type = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = connection_type(parts.netloc, timeout=self.settings.request_timeout_s)
        try:
            target = f"{path}?{canonical_query}" if canonical_query else path
            connection.request(method, target, headers=headers)
            response = connection.getresponse()
            return response.status, response.read(1 << 20)
        finally:
            connection.close()

    async def _verify(self, info: FinishedLogInfo, url: str) -> _Stored | None:
        """HEAD the uploaded object: its size and ``sha256`` metadata must be the log's.

        Returns:
            What the HEAD told (its ETag stands in for a completion that gave none), None
            when the object cannot be read back (write-only keys).
        """
        stored = await self._head(info)
        if stored is _UNREADABLE:
            return None
        problem = None
        if stored is None:
            problem = "is not there after its upload was answered with success"
        elif stored.size != info.size:
            problem = f"holds {stored.size} bytes, not {info.size}"
        elif stored.sha256 != info.sha256:
            problem = f"has SHA-256 {stored.sha256} in its metadata, not {info.sha256}"
        if problem is not None:
            msg = f"S3 object {url} {problem}: the upload does not count"
            raise UploadError(msg)
        return stored


def sigv4_headers(
    method: str,
    *,
    host: str,
    path: str,
    canonical_query: str,
    credentials: S3Credentials,
    region: str,
    now: time.struct_time,
) -> dict[str, str]:
    """The headers of an S3 request without a body, signed with AWS Signature Version 4.

    Args:
        method: GET, DELETE, ...
        host: The ``Host`` header.
        path: The URI-encoded path.
        canonical_query: The query, names sorted, names and values URI-encoded.
        credentials: The keys to sign with.
        region: The region the request is signed for.
        now: The request's time (UTC).
    """
    amz_date, day = time.strftime("%Y%m%dT%H%M%SZ", now), time.strftime("%Y%m%d", now)
    payload = hashlib.sha256(b"").hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    if credentials.session_token:
        headers["x-amz-security-token"] = credentials.session_token
    signed = ";".join(sorted(headers))
    canonical = "\n".join(
        [
            method,
            path,
            canonical_query,
            *(f"{name}:{headers[name]}" for name in sorted(headers)),
            "",
            signed,
            payload,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{credentials.secret_access_key}".encode()
    for word in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, word.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key_id}/{scope}, "
        f"SignedHeaders={signed}, Signature={signature}"
    )
    return headers


def flight_metadata(info: FinishedLogInfo) -> dict[str, str]:
    """The flight summary's headline numbers as object metadata (``x-amz-meta-flight-*``)."""
    flight = info.flight or {}
    return {
        f"flight-{name.replace('_', '-')}": str(value)
        for name in FLIGHT_METADATA
        if (value := flight.get(name)) is not None
    }


def _etag_matches(etag: str | None, expected: frozenset[str]) -> bool:
    """Whether the store's ``etag`` (quoted or not) is one of the ``expected`` MD5 forms."""
    match = _MD5_ETAG.match(etag or "")
    return match is not None and match[1] in expected


def _xml_text(pattern: re.Pattern[str], xml: str) -> str | None:
    found = pattern.search(xml)
    return None if found is None else found[1]


def _failure(what: str, url: str, err: BaseException) -> UploadRejectedError | UploadError:
    """The error to raise for ``err`` of a request: rejected when retrying cannot help."""
    text = str(err)
    status_match = _STATUS.search(text)
    status = int(status_match[1]) if status_match else None
    code_match = _CODE.search(text)
    code = code_match[1] if code_match else None
    message_match = _MESSAGE.search(text)
    if code is not None:
        said = f"{code}: {message_match[1]}" if message_match else code
        reason = f"{said} (HTTP {status})" if status else said
    elif status is not None:
        reason = f"HTTP {status}"
    else:
        lower = text.lower()
        reason = next((cause for needle, cause in _CAUSES if needle in lower), "")
        first = text.splitlines()[0] if text else type(err).__name__
        reason = reason or first.rsplit(" - ", 1)[-1].strip()
    line = f"S3 {what} {url} failed: {reason}"
    retryable = code in _RETRYABLE_CODES or status in _RETRYABLE_STATUS
    final = isinstance(err, _FINAL)
    if not retryable and (final or (status is not None and 400 <= status < 500)):  # noqa: PLR2004
        return UploadRejectedError(f"{line}; not retried")
    return UploadError(line)
