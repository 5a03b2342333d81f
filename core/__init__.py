"""pagedviz's engine: a vLLM-v1-style scheduler, paged KV blocks, persistent batch and
prepare_inputs, stage by stage, with a tiny paged-attention model. No web code lives here.

`Engine` is the public name of pagedviz's own engine, an alias of `PagedvizEngine`
(core/engine.py); `make_engine(scenario)` builds the engine a scenario names (its flavour, or with
`engine: vllm` vLLM's own scheduler: core/vllm_engine).

The names below are imported when first used (a module `__getattr__`), not with the package: a
command that needs no engine (`pagedviz --version`, `--help`, a refused argument) or a module of
the core that needs only its own neighbours then does not import torch (about a second and a half
of CPU a process)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pagedviz.core.engine import Engine, PagedvizEngine
    from pagedviz.core.limits import Limits
    from pagedviz.core.presets import list_presets, load_preset, preset_dict
    from pagedviz.core.registry import engine_class, make_engine
    from pagedviz.core.scenario import Scenario
    from pagedviz.core.scenario_parts import EngineConfig, ModelConfig, ScenarioError
    from pagedviz.core.trace import StepTrace

# each public name and the module it is imported from on first use
_HOMES = {
    "Engine": "engine",
    "PagedvizEngine": "engine",
    "Limits": "limits",
    "list_presets": "presets",
    "load_preset": "presets",
    "preset_dict": "presets",
    "engine_class": "registry",
    "make_engine": "registry",
    "Scenario": "scenario",
    "EngineConfig": "scenario_parts",
    "ModelConfig": "scenario_parts",
    "ScenarioError": "scenario_parts",
    "StepTrace": "trace",
}

__all__ = [
    "Engine",  # the public name of pagedviz's own engine: an alias of PagedvizEngine
    "PagedvizEngine",
    "EngineConfig",
    "Limits",
    "ModelConfig",
    "Scenario",
    "ScenarioError",
    "StepTrace",
    "engine_class",
    "make_engine",
    "list_presets",
    "load_preset",
    "preset_dict",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked for (then kept here)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
