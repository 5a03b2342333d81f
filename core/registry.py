"""The flavour registry: each flavour's engine class registers itself under its name (with
core/flavor_table.py's `register_flavor`), and
`make_engine(scenario)` builds the one the scenario names. Flavour modules are imported on first
use, so pagedviz's engine of the vllm flavour (core/engine.py) and the flavours that extend it
never import each other in a cycle."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pagedviz.core.flavor_table import ENGINES

if TYPE_CHECKING:
    from pagedviz.core.engine import PagedvizEngine
    from pagedviz.core.scenario import Scenario

# where each flavour's engine is defined (imported on first use)
FLAVOR_MODULES: dict[str, str] = {
    "vllm": "pagedviz.core.engine",
    "ascend": "pagedviz.core.flavors.ascend",
    "nanovllm": "pagedviz.core.flavors.nanovllm",
}


def engine_class(flavor: str) -> type[PagedvizEngine]:
    if flavor not in FLAVOR_MODULES:
        raise KeyError(f"unknown flavour {flavor!r} (flavours: {', '.join(FLAVOR_MODULES)})")
    if flavor not in ENGINES:
        importlib.import_module(FLAVOR_MODULES[flavor])
    cls: type[PagedvizEngine] = ENGINES[flavor]
    return cls


def make_engine(scenario: Scenario, capture: bool = True) -> PagedvizEngine:
    """The engine of the scenario's flavour; with `engine: vllm`, vLLM's own code
    (core/vllm_engine, imported only then)."""
    if scenario.engine == "vllm":
        from pagedviz.core.vllm_engine import make_vllm_engine

        return make_vllm_engine(scenario, capture)
    return engine_class(scenario.flavor)(scenario, capture)
