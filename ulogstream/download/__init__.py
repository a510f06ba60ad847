"""Log download over MAVLink (LOG_REQUEST_LIST / LOG_ENTRY / LOG_REQUEST_DATA / LOG_DATA), sans-IO.

The vehicle's own logs, as every PX4 and ArduPilot serves them from its SD card: the listing
(:mod:`~ulogstream.download.listing`) and one log's bytes (:mod:`~ulogstream.download.transfer`),
values in and values out, time as an argument (protocol.md "Log download").
"""
