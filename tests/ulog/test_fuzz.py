"""Fuzz the parser: only UlogstreamError escapes, no hangs, bounded buffers, chunking-invariant.

A short seeded run is part of the suite. For a longer one, by hand:
``.venv/bin/python tests/bench/fuzz_ulog.py 600`` (prints how many inputs it ran).
"""

from __future__ import annotations

from support.ulog_fuzz import fuzz

from ulogstream.ulog.parser import MIN_MAX_BUFFERED, ULogParser
from ulogstream.ulog.spec import MAGIC

SHORT_RUN_INPUTS = 3000


def test_short_seeded_fuzz_run() -> None:
    assert fuzz(20251121, count=SHORT_RUN_INPUTS, seconds=None) == SHORT_RUN_INPUTS


def test_huge_declared_sizes_keep_the_buffer_bounded() -> None:
    parser = ULogParser(max_buffered=MIN_MAX_BUFFERED)
    parser.receive_bytes(MAGIC + b"\x01" + bytes(8))
    for _ in range(300):
        parser.receive_bytes(b"\xff\xffZ" + bytes(997))
        assert parser.buffered <= MIN_MAX_BUFFERED
    parser.close()
