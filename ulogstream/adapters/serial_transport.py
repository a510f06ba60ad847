"""Serial links (Pixhawk USB or a UART): the only module that imports pyserial.

pyserial opens, locks and configures the port (raw mode, baud rate); the reads and writes go
straight to its non-blocking file descriptor, driven by the event loop's ``add_reader`` and
``add_writer``, so no thread is needed.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import termios
from pathlib import Path

import serial

from ulogstream.adapters.transport import DEFAULT_MAX_WRITE_BUFFER, ReadableWaiter
from ulogstream.errors import LinkError


class _Port(serial.Serial):
    """pyserial's port, less the flush of the input queue at ``open``.

    What the device sent before we opened it (after a USB replug: PX4 streams on) is log data;
    dropping it would only widen the gap.
    """

    def _reset_input_buffer(self) -> None:
        pass


READ_SIZE = 1 << 14
"""Largest chunk one ``receive`` returns."""

TTY_READ_CHUNK = 64
"""Most bytes one read of a Linux tty returns while ``VMIN`` is above it (see ``_read_rest``)."""

MAX_VMIN = 255
"""Largest ``VMIN`` (a ``cc_t``): :meth:`SerialTransport.wake_after` asks for at most this."""

MAX_BURST = 16
"""Reads ``receive`` returns back to back before it lets other tasks run once."""


class SerialTransport:
    """A serial port. ``receive`` returns what one read got, so frames arrive split at any byte.

    Create it with ``SerialTransport.open(device, baud)``.

    Args:
        port: The open pyserial port.
        device: The device path, for messages.
        baud: The configured rate, for messages.
        max_write_buffer: Bytes held while the port cannot take more before ``send`` drops data.
    """

    def __init__(
        self,
        port: serial.Serial,
        *,
        device: str,
        baud: int,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> None:
        if port.fd is None:
            msg = f"serial port {device} is not open"
            raise ValueError(msg)
        self._port = port
        self._fd: int = port.fd
        self._device = device
        self._baud = baud
        self._loop = asyncio.get_running_loop()
        self._max_write_buffer = max_write_buffer
        self._outgoing = bytearray()
        self._dropped_sends = 0
        self._closed = False
        self._burst = 0
        self._drained = False
        os.set_blocking(self._fd, False)
        # pyserial's timeout=0 sets VMIN=0, with which an empty read returns b"" instead of
        # EAGAIN; VMIN=1 keeps b"" for a hangup (device gone) only.
        attributes = termios.tcgetattr(self._fd)
        attributes[6][termios.VMIN] = 1
        attributes[6][termios.VTIME] = 0
        termios.tcsetattr(self._fd, termios.TCSANOW, attributes)
        self._attributes = attributes
        self._vmin = 1
        self._readable = ReadableWaiter(self._fd)

    @classmethod
    def open(
        cls,
        device: str,
        baud: int,
        *,
        max_write_buffer: int = DEFAULT_MAX_WRITE_BUFFER,
    ) -> SerialTransport:
        """Open and lock ``device`` at ``baud`` in raw mode; call it from the event loop.

        Raises:
            LinkError: The device does not exist, is in use, or may not be opened.
        """
        try:
            port = _Port(port=None, baudrate=baud, timeout=0, write_timeout=0, exclusive=True)
            port.port = device
            port.open()
        except serial.SerialException as err:
            not_a_port = _is_not_a_serial_port(device, err)
            raise LinkError(_open_error(device, err), permanent=not_a_port) from err
        except ValueError as err:
            msg = f"cannot use serial device {device} at {baud} baud: {err}"
            raise LinkError(msg) from err
        try:
            return cls(port, device=device, baud=baud, max_write_buffer=max_write_buffer)
        except (OSError, termios.error) as err:
            # Gone again between open and set-up (a flaky cable): close it, or its lock stays.
            port.close()
            reason = err.args[-1] if err.args else err
            msg = f"cannot set up serial device {device} ({reason}); was it unplugged?"
            raise LinkError(msg) from err

    @property
    def dropped_sends(self) -> int:
        """Sends dropped because the port stopped taking data (full buffer or device gone)."""
        return self._dropped_sends

    async def receive(self) -> bytes:
        """Wait for the next bytes; ``b""`` after ``aclose``.

        Raises:
            LinkError: The device went away (USB unplugged) or failed; reopen it to go on.
        """
        while not self._closed:
            if self._drained:
                # The last read took less than it could: the kernel's buffer was empty then, so
                # a read now would almost always fail with EAGAIN. Wait for the loop to say so.
                self._drained = False
                self._burst = 0
                await self._readable.wait()
                continue
            if self._burst < MAX_BURST:
                try:
                    data = os.read(self._fd, READ_SIZE)
                except BlockingIOError:
                    pass
                except OSError as err:
                    msg = self._lost(err.strerror or str(err))
                    raise LinkError(msg) from err
                else:
                    if not data:
                        # Readable with nothing to read: a TTY whose device is gone (hangup).
                        msg = self._lost("end of file")
                        raise LinkError(msg)
                    self._burst += 1
                    if self._vmin > TTY_READ_CHUNK and len(data) == TTY_READ_CHUNK:
                        data = self._read_rest(data)
                    self._drained = len(data) < READ_SIZE
                    return data
            # Waiting also lets other tasks run after a burst of back-to-back reads.
            self._burst = 0
            await self._readable.wait()
        return b""

    def _read_rest(self, first: bytes) -> bytes:
        """``first`` and the rest of what is waiting (Linux's tty reads stop at 64 bytes here).

        With ``VMIN`` above 64, a non-blocking read of a tty returns at most 64 bytes however
        many are waiting (``tty_read`` copies through a 64-byte buffer and, in raw mode, only
        goes on while ``VMIN`` is met by what it copied), so the reads go on until one is short.
        """
        pieces = [first]
        size = len(first)
        last = size
        while last == TTY_READ_CHUNK and size < READ_SIZE:
            try:
                piece = os.read(self._fd, READ_SIZE - size)
            except OSError:
                break  # nothing more now (EAGAIN), or the device went away: the next read says
            if not piece:
                break
            pieces.append(piece)
            last = len(piece)
            size += last
        return b"".join(pieces)

    def wake_after(self, size: int) -> None:
        """Have the loop wake this reader only once ``size`` bytes are waiting (at most 255).

        The receive loop passes :meth:`MavlinkCodec.bytes_wanted` after each read, so a frame
        that arrives in small pieces (a radio's 32-byte writes) is read in one go when it is
        whole, not once per piece, and no frame is read later than it is complete. In raw mode
        with ``VTIME`` 0 the kernel's tty layer reports the port readable only when ``VMIN``
        bytes are there (a hangup still wakes it); reads themselves never wait (``O_NONBLOCK``).
        """
        minimum = min(max(size, 1), MAX_VMIN)
        if minimum == self._vmin or self._closed:
            return
        attributes = self._attributes
        attributes[6][termios.VMIN] = minimum
        try:
            termios.tcsetattr(self._fd, termios.TCSANOW, attributes)
        except termios.error:
            return  # the device is going away; the next read reports it
        self._vmin = minimum

    def _lost(self, reason: str) -> str:
        """Close the vanished device at once (its descriptor and lock); what to say about it."""
        self._close()
        return f"serial device {self._device} stopped working ({reason}); was it unplugged?"

    def send(self, data: bytes) -> None:
        """Write ``data`` without waiting; what the port cannot take now is written when it can."""
        if self._closed:
            self._dropped_sends += 1
            return
        if self._outgoing:
            if len(self._outgoing) + len(data) > self._max_write_buffer:
                self._dropped_sends += 1
                return
            self._outgoing += data
            return
        try:
            written = os.write(self._fd, data)
        except BlockingIOError:
            written = 0
        except OSError:
            self._dropped_sends += 1  # the device is gone; receive() reports it
            return
        if written < len(data):
            self._outgoing += data[written:]
            self._loop.add_writer(self._fd, self._flush)

    def _flush(self) -> None:
        try:
            written = os.write(self._fd, self._outgoing)
        except BlockingIOError:
            return
        except OSError:
            self._dropped_sends += 1
            written = len(self._outgoing)
        del self._outgoing[:written]
        if not self._outgoing:
            self._loop.remove_writer(self._fd)

    async def aclose(self) -> None:
        """Close the port; a waiting ``receive`` returns ``b""``."""
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # The loop forgets the descriptor before it is closed: a device plugged in again gets
        # the same number, and a registration left behind would keep it from ever being read.
        self._readable.close()
        self._loop.remove_writer(self._fd)
        self._port.close()

    def describe(self) -> str:
        """The device and baud rate."""
        return f"{self._device}:{self._baud}"


def _is_not_a_serial_port(device: str, err: serial.SerialException) -> bool:
    """Whether ``device`` can never be a serial port (a regular file, /dev/null): no termios."""
    if err.errno == errno.ENOTTY or "Inappropriate ioctl" in str(err):
        return True
    try:
        mode = Path(device).stat().st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _open_error(device: str, err: serial.SerialException) -> str:
    if _is_not_a_serial_port(device, err):
        return (
            f"{device} is not a serial port (a file or another kind of device); name the "
            "autopilot's port, e.g. /dev/ttyACM0 (list them with: ls /dev/serial/by-id/)"
        )
    code = err.errno
    if code == errno.ENOENT:
        return (
            f"serial device {device} does not exist; is the autopilot plugged in? "
            "(list devices with: ls /dev/serial/by-id/)"
        )
    if code in {errno.EACCES, errno.EPERM}:
        return (
            f"no permission to open serial device {device}; "
            "add the user to the 'dialout' group or install the udev rule"
        )
    if code in {errno.EAGAIN, errno.EBUSY}:
        return (
            f"serial device {device} is in use by another program "
            "(QGroundControl, MAVProxy, mavlink-router, ModemManager?)"
        )
    return f"cannot open serial device {device}: {err}"
