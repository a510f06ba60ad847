"""Fixtures the end-to-end tests share with the daemon tests (processes cleaned up after)."""

from daemon.conftest import fixture_processes

__all__ = ["fixture_processes"]
