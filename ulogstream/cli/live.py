"""The live commands: ``record``, ``run``, ``sim``, ``replay`` and ``demo``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ulogstream.adapters.file_sink import MB
from ulogstream.adapters.sd_notify import Notifier
from ulogstream.config.loader import load_settings, parse_override
from ulogstream.config.values import FOXGLOVE_DEFAULT_PORT
from ulogstream.recorder.recorder import Recorder
from ulogstream.recorder.wiring import recorder_parts, replay_publisher

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ulogstream.config.sections import Settings
from ulogstream.cli.terminal import (
    EXIT_ERROR,
    CliError,
    ProgressLine,
    TerminalStatus,
    error_words,
    exit_summary,
    os_error_text,
    setup_logging,
    warn,
)

T = TypeVar("T")


def _add_link_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", type=Path, help="TOML settings file (see configs/ulogstream.toml)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for the recordings (default: ./recordings, or recording.out_dir of"
        " --config); created if missing, checked at start-up",
    )
    parser.add_argument("--sysid", type=int, help="our MAVLink system id (default 254)")
    parser.add_argument("--compid", type=int, help="our MAVLink component id (default 155)")
    parser.add_argument(
        "--target-sysid",
        type=int,
        help="record only this autopilot (default: every one on the link)",
    )
    parser.add_argument(
        "--baud",
        type=int,
        help="serial baud rate unless CONNECTION names one (default 921600; USB ignores it)",
    )
    parser.add_argument("--signing-key-file", type=Path, help="MAVLink 2 signing key file")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        help="seconds an open log waits for its data through a link outage (default 30)",
    )
    parser.add_argument("--min-free-mb", type=int, help="stop recording below this free space")
    parser.add_argument(
        "--no-backfill",
        action="store_true",
        help="with --while-armed: do not complete each flight's log from the vehicle's SD log",
    )
    parser.add_argument(
        "--while-armed",
        action="store_true",
        help="record each flight: stream from arming to just after disarming, one log per flight"
        " (with --once: one flight)",
    )
    parser.add_argument(
        "--mqtt", metavar="URL", help="publish live to mqtt://HOST[:PORT] or mqtts://"
    )
    parser.add_argument("--mqtt-rate", type=float, help="default samples/s per topic (0 = all)")
    parser.add_argument(
        "--vehicle-id",
        help="vehicle id (MQTT topics, recording folder), or a template of {hostname} {link} "
        "{sysid} {sys_uuid} (default {sys_uuid}: the autopilot's, from its last log; "
        "{hostname}-{link}-sysid{sysid} until one is known)",
    )
    parser.add_argument(
        "--foxglove",
        metavar="[HOST:]PORT",
        help="serve a live view to Foxglove at ws://HOST:PORT (host default 127.0.0.1)",
    )
    parser.add_argument(
        "--foxglove-rate", type=float, help="Foxglove samples/s per topic (default 10, 0 = all)"
    )
    add_foxglove_encoding(parser, default=None)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting, e.g. --set mqtt.rates.vehicle_attitude=50 (repeatable)",
    )
    parser.add_argument("--no-status", action="store_true", help="no live status line")


def _settings(args: argparse.Namespace, *, connection: str | None = None) -> Settings:
    overrides: dict[str, object] = dict(parse_override(text) for text in args.overrides)
    options = {
        "link.connection": connection,
        "link.sysid": args.sysid,
        "link.compid": args.compid,
        "link.target_sysid": args.target_sysid,
        "link.baud": args.baud,
        "link.signing_key_file": args.signing_key_file,
        "recording.out_dir": args.out,
        "recording.idle_timeout_s": args.idle_timeout,
        "recording.min_free_mb": args.min_free_mb,
        "recording.mode": "while_armed" if args.while_armed else None,
        "backfill.enabled": False if args.no_backfill else None,
        "mqtt.url": args.mqtt,
        "mqtt.default_rate_hz": args.mqtt_rate,
        "mqtt.vehicle_id": args.vehicle_id,
        "foxglove.enabled": True if args.foxglove is not None else None,
        "foxglove.listen": args.foxglove,
        "foxglove.default_rate_hz": args.foxglove_rate,
        "foxglove.encoding": args.foxglove_encoding,
    }
    overrides.update({key: value for key, value in options.items() if value is not None})
    if args.config is None and args.out is None and "recording.out_dir" not in overrides:
        overrides["recording.out_dir"] = Path("recordings")  # not /var/lib outside systemd
    return load_settings(args.config, overrides)


def check_output_dir(path: Path) -> None:
    """Make sure recordings can be written to ``path`` before the vehicle talks.

    Creates the directory when missing and writes and removes a probe file in it.

    Raises:
        CliError: ``path`` is a file, cannot be created or cannot be written; the message names
            the path, the cause in words and what to do.
    """
    what_to_do = "choose another directory with --out or recording.out_dir"
    if path.exists() and not path.is_dir():
        msg = f"recordings directory {path} is a file, not a directory ({what_to_do})"
        raise CliError(msg)
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".ulogstream-probe-", dir=path)
        os.close(handle)
        Path(probe).unlink()
    except OSError as err:
        msg = f"recordings cannot be written to {path}: {os_error_text(err)} ({what_to_do})"
        raise CliError(msg) from err


def warn_if_disk_full(path: Path, min_free_mb: int) -> None:
    """Warn at start-up when ``path``'s disk is already under ``recording.min_free_mb``."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return
    if free < min_free_mb * MB:
        logging.getLogger("ulogstream").warning(
            "only %d MB free on %s (recording.min_free_mb = %d): logs are not written until "
            "space is freed (the vehicle's stream is still acked)",
            free // MB,
            path,
            min_free_mb,
        )


def run_quietly(main: Coroutine[object, object, T]) -> T:
    """``asyncio.run(main)``, then no task left behind to be destroyed while pending.

    aiomqtt connects in an executor thread, and paho's socket callbacks from that thread
    schedule a task on the loop (``Client._misc_loop``). A stop while a connection attempt is
    under way (a broker that is down, a double Ctrl-C) let that task be created while
    ``asyncio.run`` shut the executor down, so the loop closed with it pending: "Task was
    destroyed but it is pending!" and "coroutine ... was never awaited" at exit. Here the
    executor's threads finish first, then whatever they scheduled is cancelled and awaited.
    """
    with asyncio.Runner() as runner:
        try:
            return runner.run(main)
        finally:
            runner.run(_settle_background_work())


async def _settle_background_work() -> None:
    """Let executor threads finish; cancel and await the tasks left (see :func:`run_quietly`)."""
    loop = asyncio.get_running_loop()
    await loop.shutdown_default_executor()
    current = asyncio.current_task()
    late = [task for task in asyncio.all_tasks() if task is not current]
    for task in late:
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)


def _run_recorder(settings: Settings, *, once: bool, status_line: bool) -> int:
    terminal = sys.stderr.isatty()
    setup_logging(settings.log.level, terminal=terminal)
    view = None
    if terminal and status_line and settings.log.status_line:
        view = TerminalStatus(sys.stderr)
    with Notifier() as notifier:
        parts = recorder_parts(settings, once=once)
        recorder = Recorder(parts, once=once, status_view=view, notifier=notifier)
        check_output_dir(settings.recording.out_dir)  # after the settings' own checks
        warn_if_disk_full(settings.recording.out_dir, settings.recording.min_free_mb)
        code = run_quietly(recorder.run())
    sys.stdout.write("".join(f"{line}\n" for line in exit_summary(recorder)))
    return code


def configure_record(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream record``."""
    parser.add_argument(
        "connection",
        metavar="CONNECTION",
        help="udpin:HOST:PORT, udpout:HOST:PORT, tcp:HOST:PORT, /dev/ttyACM0, /dev/ttyUSB0:921600",
    )
    parser.add_argument("--once", action="store_true", help="exit after the first log ends")
    _add_link_options(parser)


def run_record(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream record``; return the exit status."""
    settings = _settings(args, connection=args.connection)
    return _run_recorder(settings, once=args.once, status_line=not args.no_status)


def configure_run(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream run``."""
    parser.add_argument("--connection", help="override link.connection")
    _add_link_options(parser)


def run_run(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream run``; return the exit status."""
    settings = _settings(args, connection=args.connection)
    return _run_recorder(settings, once=False, status_line=not args.no_status)


def configure_sim(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream sim``."""
    from ulogstream.sim.runner import add_sim_arguments  # noqa: PLC0415 (see above)

    add_sim_arguments(parser)


def run_sim(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream sim``; return the exit status."""
    from ulogstream.sim.runner import run_sim, sim_options_from_args  # noqa: PLC0415

    options = sim_options_from_args(args)
    setup_logging("info", terminal=sys.stderr.isatty())

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await run_sim(options, stop_event=stop)

    run_quietly(serve())
    return 0


def configure_replay(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream replay``."""
    parser.add_argument("file", type=Path, metavar="FILE", help="the .ulg to publish")
    parser.add_argument("--mqtt", metavar="URL", required=True, help="mqtt://HOST[:PORT]")
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="times the log's own pace (default 1); 0 = as fast as possible",
    )
    parser.add_argument("--config", type=Path, help="TOML settings for the [mqtt] section")
    parser.add_argument(
        "--vehicle-id", help="MQTT vehicle id (default: the log's sys_uuid, as record names it)"
    )
    parser.add_argument("--mqtt-rate", type=float, help="default samples/s per topic (0 = all)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def run_replay(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream replay``; return the exit status."""
    if not args.file.is_file():
        msg = f"{args.file}: no such file"
        raise CliError(msg)
    overrides: dict[str, object] = dict(parse_override(text) for text in args.overrides)
    overrides["mqtt.url"] = args.mqtt
    if args.vehicle_id is not None:
        overrides["mqtt.vehicle_id"] = args.vehicle_id
    if args.mqtt_rate is not None:
        overrides["mqtt.default_rate_hz"] = args.mqtt_rate
    settings = load_settings(args.config, overrides)
    setup_logging(settings.log.level, terminal=sys.stderr.isatty())
    from ulogstream.recorder.replay import replay_to_mqtt  # noqa: PLC0415 (loaded by the command that needs it: start-up time)
    from ulogstream.upload.info import read_sys_uuid  # noqa: PLC0415 (loaded by the command that needs it: start-up time)

    progress = ProgressLine(sys.stderr, f"replaying {args.file.name}")
    publisher = replay_publisher(settings.mqtt, sys_uuid=read_sys_uuid(args.file))
    stats = run_quietly(
        replay_to_mqtt(
            args.file,
            publisher=publisher,
            speed=args.speed if args.speed > 0 else None,
            progress=progress,
        )
    )
    progress.done()
    if not stats.published:
        why = f" ({error_words(stats.broker_error)})" if stats.broker_error else ""
        within = "" if stats.gave_up_after_s is None else f" in {stats.gave_up_after_s:.0f} s"
        msg = (
            f"the broker at {args.mqtt} was never reached{within}{why}: nothing was published"
            " (is it running? check the URL)"
        )
        raise CliError(msg)
    sys.stdout.write(
        f"published {stats.published} messages to {args.mqtt} covering"
        f" {stats.log_duration_s:.1f} s of log in {stats.elapsed_s:.1f} s\n"
    )
    if stats.unsent:
        warn(f"{stats.unsent} messages were not delivered: the broker went away")
        return EXIT_ERROR
    return 0


def add_foxglove_encoding(parser: argparse.ArgumentParser, *, default: str | None) -> None:
    """``--foxglove-encoding`` (None: the configuration's ``foxglove.encoding`` decides)."""
    parser.add_argument(
        "--foxglove-encoding",
        choices=["json", "cdr"],
        default=default,
        help="Foxglove channels: json (default) or cdr (ROS 2 messages, for PlotJuggler)",
    )


def configure_demo(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``ulogstream demo``."""
    from ulogstream.cli.demo import DemoOptions  # noqa: PLC0415 (only the demo needs it)

    defaults = DemoOptions()
    parser.add_argument("--out", type=Path, default=defaults.out_dir, help="recordings directory")
    parser.add_argument(
        "--duration", type=float, default=defaults.duration_s, help="seconds of flight"
    )
    parser.add_argument(
        "--speed",
        type=float,
        help=f"replay speed (default {defaults.speed:g}; 1, real time, with --loop)",
    )
    parser.add_argument("--loss", type=float, default=defaults.loss, help="packet loss (0..1)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="random seed")
    parser.add_argument("--mqtt", metavar="URL", help="also publish live to this broker")
    parser.add_argument(
        "--foxglove",
        metavar="[HOST:]PORT",
        nargs="?",
        const=f"127.0.0.1:{FOXGLOVE_DEFAULT_PORT}",
        help=(
            f"also serve a live view to Foxglove (default 127.0.0.1:{FOXGLOVE_DEFAULT_PORT}); "
            "implies --loop"
        ),
    )
    add_foxglove_encoding(parser, default="json")
    parser.add_argument(
        "--loop",
        action=argparse.BooleanOptionalAction,
        help=(
            "fly the flight again and again in real time, a recording each, until Ctrl-C "
            "(default with --foxglove; --no-loop: one flight)"
        ),
    )


def run_demo(args: argparse.Namespace) -> int:
    """Carry out ``ulogstream demo``; return the exit status."""
    from ulogstream.cli.demo import DemoOptions, foxglove_hint, run_demo, summary_lines  # noqa: PLC0415

    if not 0 <= args.loss < 1:
        msg = f"--loss must be in [0, 1), not {args.loss}"
        raise CliError(msg)
    loop = args.foxglove is not None if args.loop is None else args.loop
    speed = args.speed if args.speed is not None else 1.0 if loop else DemoOptions().speed
    if args.duration <= 0 or speed <= 0:
        msg = "--duration and --speed must be positive"
        raise CliError(msg)
    options = DemoOptions(
        out_dir=args.out,
        duration_s=args.duration,
        speed=speed,
        loop=loop,
        loss=args.loss,
        seed=args.seed,
        mqtt_url=args.mqtt,
        foxglove_listen=args.foxglove,
        foxglove_encoding=args.foxglove_encoding,
    )
    terminal = sys.stdout.isatty()
    # The injected losses are the point of the demo and its view shows them: warn of no more.
    setup_logging("error", terminal=sys.stderr.isatty())
    again = ", again and again until Ctrl-C" if options.loop else ""
    sys.stdout.write(
        f"Generating a {options.duration_s:.0f} s quadrotor flight and streaming it from a "
        f"simulated PX4 at {options.speed:g}x{again}...\n"
    )
    if options.foxglove_listen is not None:
        sys.stdout.write(f"{foxglove_hint(options.foxglove_listen)}\n")
    result = run_quietly(run_demo(options, view=sys.stdout if terminal else None))
    sys.stdout.write("\n".join(summary_lines(result, options)) + "\n")
    mqtt_failed = options.mqtt_url is not None and not result.status.mqtt_published
    return 0 if result.recording is not None and not mqtt_failed else EXIT_ERROR
