"""The scenario format (docs/scenario-format.md): the scenario itself, the frozen dataclass the
engine runs on, read from JSON (`Scenario.from_dict`) and written back (`to_dict`).

A scenario is plain JSON: a name, a flavour, a seed, an engine config and a list of requests.
`Scenario.from_dict` validates everything before anything runs (core/validate.py) and reports each
problem with the field path and the rule it breaks, so the CLI and the REST API can show the same
clear message. Prompts may be token ids, a length (ids drawn from the seed) or text (a byte-level
tokenizer, core/tokenizer.py). Its parts (the engine config, the requests, their field tables and
ScenarioError) are core/scenario_parts.py's: the validator builds them, and builds the Scenario
with the class it is given, so that it imports nothing of this module.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pagedviz.core.scenario_parts import EngineConfig, RequestSpec

if TYPE_CHECKING:
    from pagedviz.core.limits import Limits


@dataclass(frozen=True)
class Scenario:
    name: str
    flavor: str
    seed: int
    config: EngineConfig
    requests: tuple[RequestSpec, ...]
    max_steps: int = 256
    title: str = ""
    summary: str = ""
    document: str = ""
    notes: tuple[str, ...] = ()
    engine: str = "pagedviz"

    @classmethod
    def from_dict(cls, data: Any, limits: Limits | None = None) -> Scenario:
        """The scenario of a JSON dict, validated against `limits` (the environment's when None);
        raises ScenarioError naming every broken rule's field."""
        # imported here: validating needs pydantic, which the engine does not (tests/test_layout.py)
        from pagedviz.core.validate import parse_scenario

        return parse_scenario(data, cls, limits)

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form; prompts as they were given (text, seed-drawn length or token ids)."""
        cfg = asdict(self.config)
        if cfg["scheduling_policy"] == "fcfs":
            del cfg["scheduling_policy"]  # the default leaves run ids as they were
        if self.config.cudagraph_capture_sizes is not None:
            cfg["cudagraph_capture_sizes"] = list(self.config.cudagraph_capture_sizes)
        # the layers' fields only when given, so scenarios without them keep their run ids
        if self.config.layer_types is None:
            del cfg["layer_types"]
        else:
            cfg["layer_types"] = list(self.config.layer_types)
        if self.config.sliding_window is None:
            del cfg["sliding_window"]
        if self.config.model is None:
            cfg["model"] = None
        else:
            cfg["model"].pop("vocab_size")
        reqs = []
        for r in self.requests:
            prompt: dict[str, Any]
            if r.prompt is not None:
                prompt = {"prompt": r.prompt}
            elif r.drawn:
                prompt = {"prompt_len": len(r.prompt_token_ids)}
            else:
                prompt = {"prompt_token_ids": list(r.prompt_token_ids)}
            req = {"id": r.id, **prompt, "max_tokens": r.max_tokens, "arrival_step": r.arrival_step}
            if r.image is not None:
                req["image"] = dict(zip(("offset", "t", "h", "w"), r.image))
            # left out at their defaults, so run ids stay as they were
            if r.n != 1:
                req["n"] = r.n
            if r.priority != 0:
                req["priority"] = r.priority
            reqs.append(req)
        out: dict[str, Any] = {
            "name": self.name,
            "flavor": self.flavor,
            "seed": self.seed,
            "config": cfg,
            "requests": reqs,
            "max_steps": self.max_steps,
        }
        if self.engine != "pagedviz":
            out["engine"] = self.engine
        for key in ("title", "summary", "document"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.notes:
            out["notes"] = list(self.notes)
        return out
