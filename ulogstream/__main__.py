"""``python -m ulogstream`` and the ``ulogstream`` console script: see :mod:`ulogstream.cli`."""

from __future__ import annotations

import sys

from ulogstream.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
