"""Where finished logs go: the target protocol, the upload command, and the choice of target."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from ulogstream.config.values import SettingError, upload_command
from ulogstream.errors import ConfigError, UploadError

if TYPE_CHECKING:
    from collections.abc import Collection

    from ulogstream.config.sections import UploadSettings
    from ulogstream.upload.info import FinishedLogInfo


class Uploaded(msgspec.Struct, frozen=True):
    """Where an uploaded log went (the log line, ``meta/log_uploaded``).

    Attributes:
        location: A URL (the log's page, ``s3://bucket/key``) or what the command printed.
        delete_token: Flight Review v2's token that deletes the log (None: none given).
    """

    location: str
    delete_token: str | None = None


class UploadTarget(Protocol):
    """Where finished logs go: one :meth:`upload` per log, retried by :class:`LogShipper`.

    Attributes:
        name: What the log lines call it (``"rclone"``, ``"Flight Review https://..."``).
    """

    name: str

    async def upload(self, info: FinishedLogInfo) -> Uploaded:
        """Upload the log ``info`` describes; it may be cancelled at any await.

        Returns:
            Where the log went: a URL or an object key (shown in the log line).

        Raises:
            UploadRejectedError: The remote refused the log for good (retrying cannot help).
            Exception: Anything else (OSError, UploadError, TimeoutError, ...): retried with
                backoff.
        """
        ...


def make_target(
    settings: UploadSettings, *, withheld_env: Collection[str] = ()
) -> UploadTarget | None:
    """The target ``upload.target`` names, or None when logs are not uploaded.

    Args:
        settings: The ``[upload]`` settings.
        withheld_env: Environment variables an upload command must not see (our secrets).

    Raises:
        ConfigError: Its settings cannot be used.
    """
    match settings.target:
        case "command":
            if settings.command is None:
                return None
            return CommandTarget(settings, withheld_env=withheld_env)
        case "flight_review":
            # Each target's code is loaded only by those who upload there.
            from ulogstream.upload.flight_review import FlightReviewTarget  # noqa: PLC0415

            return FlightReviewTarget(settings.flight_review, timeout_s=settings.timeout_s)
        case "s3":
            from ulogstream.upload.s3 import S3Target  # noqa: PLC0415

            return S3Target(settings.s3)


async def _kill(process: asyncio.subprocess.Process) -> None:
    """Kill ``process`` and everything it started (its process group), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


class CommandTarget:
    """Uploads with ``upload.command``: a program run without a shell, placeholders filled in.

    The command gets this process's environment without ``withheld_env``: the secrets of other
    parts (the MQTT password from ``mqtt.password_env``) are not an upload tool's business.

    Args:
        settings: The ``[upload]`` settings (``command`` set).
        withheld_env: Names of environment variables the command does not get.

    Raises:
        ConfigError: ``settings.command`` cannot be used.
    """

    def __init__(self, settings: UploadSettings, *, withheld_env: Collection[str] = ()) -> None:
        if settings.command is None:
            msg = "upload.command is not set; set it or another upload.target"
            raise ConfigError(msg)
        try:
            self._words = upload_command(settings.command)
        except SettingError as err:
            raise ConfigError(str(err)) from None
        self._timeout_s = settings.timeout_s
        self._withheld_env = frozenset(withheld_env)
        self.name = Path(self._words[0]).name

    async def upload(self, info: FinishedLogInfo) -> Uploaded:
        """Run the command once for ``info``.

        Returns:
            The last line the command printed (at most 200 characters), else its name.

        Raises:
            UploadError: It could not be run or exited with an error.
            TimeoutError: It outlasted ``upload.timeout_s`` and was killed.
        """
        values = {
            "path": str(info.path),
            "name": info.path.name,
            "stem": info.path.stem,
            "vehicle": info.vehicle,
            "date": info.date,
            "sha256": info.sha256 or "",
        }
        argv = [word.format_map(values) for word in self._words]
        environment = {
            name: value for name, value in os.environ.items() if name not in self._withheld_env
        }
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: a kill reaches its children
            )
        except OSError as err:
            msg = f"cannot run {argv[0]}: {err.strerror}"
            raise UploadError(msg) from None
        try:
            async with asyncio.timeout(self._timeout_s):
                output, _ = await process.communicate()
        except TimeoutError:
            await _kill(process)
            msg = f"{argv[0]} took longer than {self._timeout_s:g} s and was killed"
            raise TimeoutError(msg) from None
        except BaseException:  # cancelled (stopping): never leave the command running
            if process.returncode is None:
                await _kill(process)
            raise
        lines = output.decode(errors="replace").strip().splitlines()
        if process.returncode != 0:
            said = f": {lines[-1][:200]}" if lines else ""
            msg = f"{argv[0]} exited with {process.returncode}{said}"
            raise UploadError(msg)
        return Uploaded(lines[-1][:200] if lines else self.name)
