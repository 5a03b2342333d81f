"""Which engine class runs each flavour: each flavour's engine class registers itself here with
`@register_flavor(name)` when its module is imported. core/registry.py looks the classes up and
builds engines; this table imports nothing, so the engine (core/engine.py) and the flavours
register without importing the registry that imports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

# flavour name -> its engine class (a PagedvizEngine subclass), filled as flavour modules import
ENGINES: dict[str, Any] = {}
E = TypeVar("E", bound=type)


def register_flavor(name: str) -> Callable[[E], E]:
    """Class decorator: the engine class of flavour `name`."""

    def register(cls: E) -> E:
        ENGINES[name] = cls
        return cls

    return register
