"""The test helpers, in one place (tests/ is on the path: ``from support.waiting import ...``).

- ``waiting``: polling with a limit (``eventually``, ``holds_for``, ``running``).
- ``ulog_builders``: small ULog files from our own writer, and normalising parser events.
- ``ulog_fuzz``: the seeded parser fuzzer (a short run in the suite, a long one by hand).
- ``packetize``: a log cut into LOGGING_DATA packets as PX4 cuts it.
- ``end_to_end``: a recorder and a simulated PX4 on real links, and the oracles of lossy runs.
- ``processes``: ``ulogstream`` as a real process, its config files, and an MQTT subscriber.
- ``pty_links``: pseudo-terminals and udev-style symlinks for serial links.
- ``broker``: a real mosquitto (plain, password, TLS) under test control.
- ``px4``: a real PX4 (SITL, ``../shared/px4-sitl``) and a UDP relay to break its link.
- ``review_server``: a local Flight Review upload endpoint.
- ``shared_data``: the real sample logs in ``../shared/data/ulg`` (skips when absent).

The fixtures that start these parts are in tests/conftest.py.
"""
