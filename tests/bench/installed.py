"""Run ulogstream in benchmark subprocesses as an installed copy runs: from compiled bytecode.

``pip install`` compiles a package's modules; an editable checkout compiles them at the first
import and keeps the ``.pyc`` files. With ``PYTHONDONTWRITEBYTECODE`` set (as on this machine)
nothing is kept, and every benchmark subprocess would compile ulogstream's sources again at its
start (about 70 ms of CPU), a cost no user pays. :func:`compile_package` writes the bytecode once
before a benchmark starts its processes; Python reads existing ``.pyc`` files whatever that
variable says.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "ulogstream"


def compile_package() -> None:
    """Write the ``.pyc`` files of every ulogstream module (quietly; up to date ones are kept)."""
    compileall.compile_dir(PACKAGE, quiet=1)
