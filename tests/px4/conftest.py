"""Fixtures of the real-PX4 tests: the daemon tests' processes, cleaned up after."""

from daemon.conftest import fixture_processes

__all__ = ["fixture_processes"]
