"""pagedviz's engine: a vLLM-v1-style scheduler, paged KV blocks, persistent batch and
prepare_inputs, stage by stage, with a tiny paged-attention model. No web code lives here.

`Engine` is the public name of pagedviz's own engine, an alias of `PagedvizEngine`
(core/engine.py); `make_engine(scenario)` builds the engine a scenario names (its flavour, or with
`engine: vllm` vLLM's own scheduler: core/vllm_engine)."""

from pagedviz.core.engine import Engine, PagedvizEngine
from pagedviz.core.limits import Limits
from pagedviz.core.presets import list_presets, load_preset, preset_dict
from pagedviz.core.registry import engine_class, make_engine
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import EngineConfig, ModelConfig, ScenarioError
from pagedviz.core.trace import StepTrace

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
