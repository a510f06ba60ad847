"""Fixtures of the upload tests: the MQTT tests' real mosquitto and the daemon tests' processes."""

from __future__ import annotations

from daemon.conftest import fixture_processes
from mqtt.conftest import Broker, fixture_mosquitto

__all__ = ["Broker", "fixture_mosquitto", "fixture_processes"]
