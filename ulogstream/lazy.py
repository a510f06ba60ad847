"""A package's names loaded from their modules at first use (PEP 562 ``__getattr__``).

``ulogstream`` and ``ulogstream.ulog`` import cheaply this way: a recorder that decodes nothing
never loads numpy or the parser just because a package mentions them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping


def load_lazily(
    namespace: MutableMapping[str, object], modules: Mapping[str, str], name: str
) -> object:
    """The package attribute ``name``, imported from its module ``modules[name]``.

    Args:
        namespace: The package's ``globals()``: the value is kept there, an ordinary attribute
            from then on.
        modules: Each lazy name's module (a full dotted path).
        name: The attribute asked for.

    Raises:
        AttributeError: ``name`` is none of ``modules``.
    """
    module = modules.get(name)
    if module is None:
        msg = f"module {namespace['__name__']!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
