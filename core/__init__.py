"""pagedviz's engine: a vLLM-v1-style scheduler, paged KV blocks, persistent batch and
prepare_inputs, stage by stage, with a tiny paged-attention model. No web code lives here."""

from pagedviz.core.engine import Engine
from pagedviz.core.limits import Limits
from pagedviz.core.presets import list_presets, load_preset, preset_dict
from pagedviz.core.registry import engine_class, make_engine
from pagedviz.core.scenario import Scenario
from pagedviz.core.scenario_parts import EngineConfig, ModelConfig, ScenarioError
from pagedviz.core.trace import StepTrace

__all__ = [
    "Engine",
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
