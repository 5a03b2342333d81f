"""The flavour registry: each flavour's engine class registers itself under its name, and
`make_engine(scenario)` builds the one the scenario names. Flavour modules are imported on first
use, so pagedviz's engine of the vllm flavour (core/engine.py) and the flavours that extend it
never import each other in a cycle."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pagedviz.core.engine import PagedvizEngine
    from pagedviz.core.scenario import Scenario

# where each flavour's engine is defined (imported on first use)
FLAVOR_MODULES: dict[str, str] = {
    "vllm": "pagedviz.core.engine",
    "ascend": "pagedviz.core.flavors.ascend",
    "nanovllm": "pagedviz.core.flavors.nanovllm",
}
_ENGINES: dict[str, type[PagedvizEngine]] = {}
E = TypeVar("E", bound="type[PagedvizEngine]")


def register_flavor(name: str) -> Callable[[E], E]:
    """Class decorator: the engine class of flavour `name`."""

    def register(cls: E) -> E:
        _ENGINES[name] = cls
        return cls

    return register


def engine_class(flavor: str) -> type[PagedvizEngine]:
    if flavor not in FLAVOR_MODULES:
        raise KeyError(f"unknown flavour {flavor!r} (flavours: {', '.join(FLAVOR_MODULES)})")
    if flavor not in _ENGINES:
        importlib.import_module(FLAVOR_MODULES[flavor])
    return _ENGINES[flavor]


def make_engine(scenario: Scenario, capture: bool = True) -> PagedvizEngine:
    """The engine of the scenario's flavour; with `engine: vllm`, vLLM's own code
    (core/vllm_engine, imported only then)."""
    if scenario.engine == "vllm":
        from pagedviz.core.vllm_engine import make_vllm_engine

        return make_vllm_engine(scenario, capture)
    return engine_class(scenario.flavor)(scenario, capture)
