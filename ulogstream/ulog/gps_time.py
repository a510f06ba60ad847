"""The one rule that ties a log's boot time to UTC: its first plausible GPS UTC fix.

Live publishing (:mod:`ulogstream.live.policy`) and the exporters (:mod:`ulogstream.export`) both
anchor vehicle time with it, so a log gets the same wall-clock time on MQTT and in a rosbag.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from ulogstream.ulog.events import type_code
from ulogstream.ulog.spec import TIMESTAMP_FIELD

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import numpy.typing as npt

    from ulogstream.ulog.events import RowLayout

GPS_UTC_TOPICS: Final = frozenset({"vehicle_gps_position", "sensor_gps"})
"""uORB topics whose ``time_utc_usec`` (with their ``timestamp``) ties boot time to UTC."""

GPS_UTC_FIELD: Final = "time_utc_usec"
"""The field of :data:`GPS_UTC_TOPICS` holding UTC in microseconds since 1970."""

MIN_PLAUSIBLE_UTC_US: Final = 1_262_304_000_000_000
"""2010-01-01 in microseconds. A receiver without a fix reports 0 or a date near the GPS epoch
(1980), and one with the week-number rollover bug a date 19.6 years late (1999 for 2019);
ULog itself dates from 2016, so nothing earlier than 2010 is a real fix."""


def first_gps_fix(
    rows: npt.NDArray[np.void], timestamps_us: npt.NDArray[np.uint64]
) -> tuple[int, int] | None:
    """The first ``(time_utc_usec, timestamp_us)`` of GPS rows with a plausible UTC time.

    Args:
        rows: Decoded rows of one of :data:`GPS_UTC_TOPICS`.
        timestamps_us: Their ULog timestamps (microseconds since boot).

    Returns:
        The fix, or None when no row has a UTC time from :data:`MIN_PLAUSIBLE_UTC_US` on (or the
        rows have no :data:`GPS_UTC_FIELD`).
    """
    if rows.dtype.names is None or GPS_UTC_FIELD not in rows.dtype.names:
        return None
    import numpy as np  # noqa: PLC0415 (the flight index uses this module's constants without numpy)

    utc = rows[GPS_UTC_FIELD].astype(np.uint64)
    valid = np.flatnonzero(utc >= MIN_PLAUSIBLE_UTC_US)
    if valid.size == 0:
        return None
    first = int(valid[0])
    return int(utc[first]), int(timestamps_us[first])


_U64_FROM: Final = struct.Struct("<Q").unpack_from
_I64_FROM: Final = struct.Struct("<q").unpack_from


def first_gps_fix_of_payloads(
    layout: RowLayout, payloads: Sequence[bytes]
) -> tuple[int, int] | None:
    """:func:`first_gps_fix` of rows given as their bytes ('D' payloads), read without numpy.

    Args:
        layout: The rows' fields; ``timestamp`` a ``uint64_t``.
        payloads: The rows, in log order.

    Returns:
        The fix, or None as :func:`first_gps_fix` (also when :data:`GPS_UTC_FIELD` is not a
        64-bit integer, which it is in every PX4 version).
    """
    names = layout.names
    if GPS_UTC_FIELD not in names or TIMESTAMP_FIELD not in names:
        return None
    field = names.index(GPS_UTC_FIELD)
    code = type_code(layout.types[field])
    read_utc = _U64_FROM if code == "u8" else _I64_FROM if code == "i8" else None
    if read_utc is None:
        return None
    utc_offset = layout.offsets[field]
    stamp_offset = layout.offsets[names.index(TIMESTAMP_FIELD)]
    for payload in payloads:
        (utc,) = read_utc(payload, utc_offset)
        if utc >= MIN_PLAUSIBLE_UTC_US:
            (stamp,) = _U64_FROM(payload, stamp_offset)
            return int(utc), int(stamp)
    return None
