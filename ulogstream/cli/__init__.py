"""The ``ulogstream`` command line: its subcommands, and the one place errors reach the user.

A subcommand is a ``configure_NAME(parser)`` (its arguments) and a ``run_NAME(args) -> int`` in
the module of its family (:mod:`~ulogstream.cli.files`, :mod:`~ulogstream.cli.live`), listed in
:data:`SUBCOMMANDS`; only the chosen command's family is imported (``record`` starts without the
file tools, ``info`` without asyncio). Bad input (a missing file, a file that is not a ULog
log, an unwritable output) is reported as one ``ulogstream: error: ...`` line on stderr and a
non-zero exit status; ``UlogstreamError`` and ``OSError`` never reach the user as tracebacks.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import msgspec

from ulogstream import __version__
from ulogstream.cli.terminal import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, PROG, os_error_text
from ulogstream.errors import UlogstreamError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


class _ArgumentParser(argparse.ArgumentParser):
    """argparse, with usage errors on one line like every other error."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{PROG}: error: {message} (see '{self.prog} --help')\n")


class Subcommand(msgspec.Struct, frozen=True):
    """One ``ulogstream NAME`` command.

    Attributes:
        name: What the user types.
        help: One line for ``ulogstream --help``.
        family: The module under ``ulogstream.cli`` with its ``configure_NAME`` (adds the
            command's arguments to its parser) and ``run_NAME`` (carries the command out; returns
            the exit status).
    """

    name: str
    help: str
    family: str

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments to ``parser`` (imports its family)."""
        configure: Callable[[argparse.ArgumentParser], None] = getattr(
            self._module(), f"configure_{self.name}"
        )
        configure(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Carry the command out."""
        run: Callable[[argparse.Namespace], int] = getattr(self._module(), f"run_{self.name}")
        return run(args)

    def _module(self) -> object:
        return importlib.import_module(f"ulogstream.cli.{self.family}")


SUBCOMMANDS: list[Subcommand] = [
    Subcommand("info", "show an overview of a ULog file", "files"),
    Subcommand("messages", "show the logged strings of a ULog file", "files"),
    Subcommand("params", "show the parameters of a ULog file", "files"),
    Subcommand("export", "convert a ULog file to CSV, a ROS bag or MCAP", "files"),
    Subcommand("record", "record the logs streamed on a MAVLink link", "live"),
    Subcommand("run", "run the daemon from a configuration file", "live"),
    Subcommand("download", "list or download the vehicle's own logs over MAVLink", "download"),
    Subcommand("backfill", "put back a recording's gaps from the vehicle's SD log", "download"),
    Subcommand("sim", "a simulated PX4 that streams a ULog file", "live"),
    Subcommand("replay", "publish a recorded log to MQTT as if live", "live"),
    Subcommand("demo", "stream, record and decode a simulated flight", "live"),
]
"""Every subcommand, in the order ``--help`` lists them."""


def build_parser(
    subcommands: Sequence[Subcommand] = SUBCOMMANDS, *, only: str | None = None
) -> argparse.ArgumentParser:
    """The argument parser with one subparser per entry of ``subcommands``.

    With ``only`` (a subcommand's name), only that subparser gets its arguments; the others are
    listed by ``--help`` but not set up, so a command does not import what another one needs.
    """
    parser = _ArgumentParser(
        prog=PROG,
        description="Live ULog receiver and recorder for PX4, and tools for ULog files.",
    )
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of errors (for bug reports)"
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in subcommands:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        if only is None or command.name == only:
            command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (``sys.argv[1:]`` when None); return the exit status."""
    # numpy's OpenBLAS starts a thread per core when numpy is imported and spins them up: 0.1
    # CPU s on 2 cores (live decoding imports numpy at a vehicle's first log), for linear algebra
    # ulogstream never does. One thread, unless the user chose otherwise.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    words = sys.argv[1:] if argv is None else list(argv)
    names = {command.name for command in SUBCOMMANDS}
    chosen = next((word for word in words if not word.startswith("-")), None)
    # Importing the command's modules builds objects that live as long as the process (about
    # 23,000 for record): a collection while they are built finds nothing to free, and the
    # collections the packets' short-lived objects set off, and the one at exit, would walk
    # them all again. So none runs until they are built, and then they are frozen out of the
    # collector's way (docs/performance.md).
    collecting = gc.isenabled()
    gc.disable()
    try:
        parser = build_parser(only=chosen if chosen in names else None)
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    args, extra = parser.parse_known_args(words)
    if args.command is None:
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        parser.print_help()  # a bare ``ulogstream``: what it can do, rather than an error
        return 0
    if extra:
        # ``export FILE --format rosbag OUT``: argparse cannot take a positional after options.
        if args.command == "export" and args.output is None and len(extra) == 1:
            args.output = Path(extra[0])
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "export" and (args.output is None) == (args.out is None):
        parser.error("export needs one output: OUT (e.g. flight.bag) or --out, not both or neither")
    run: Callable[[argparse.Namespace], int] = args.run
    if args.debug:
        return run(args)
    try:
        return run(args)
    except UlogstreamError as err:
        return _fail(str(err))
    except BrokenPipeError:
        # The reader of our output went away (``| head``): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as err:
        where = f"{err.filename}: " if err.filename is not None else ""
        return _fail(f"{where}{os_error_text(err)}")
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return EXIT_INTERRUPTED


def _fail(message: str) -> int:
    sys.stdout.flush()
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return EXIT_ERROR
