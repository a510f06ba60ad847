"""Fuzz the ULog parser for a while: ``python tests/bench/fuzz_ulog.py [SECONDS] [SEED]``.

The same harness as the suite's short seeded run (tests/ulog/test_fuzz.py), run against the
clock: random bytes and mutated generated and real logs (bit flips, truncations, splices). It
stops at the first input that makes anything but UlogstreamError escape, hang, or change its
events with the chunking, and prints how many inputs it ran.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the suite's helpers

from support.ulog_fuzz import fuzz


def main() -> None:
    """Run for SECONDS (default 60) with SEED (default: from the clock)."""
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else time.time_ns() % 2**32
    ran = fuzz(seed, count=None, seconds=seconds)
    print(f"fuzz: {ran} inputs in {seconds:.0f} s without a failure (seed {seed})")


if __name__ == "__main__":
    main()
