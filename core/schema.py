"""The scenario format as a JSON Schema (draft 2020-12): the pydantic models' own schema
(core/models.py), with this server's limits as bounds, made self-contained (no $ref) and plain
(no generated titles)."""

from __future__ import annotations

from typing import Any

from pagedviz.core.limits import Limits
from pagedviz.core.models import scenario_model


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every $ref replaced by its definition, generated titles dropped, and a nullable
    object as oneOf [null, object]."""
    if isinstance(node, list):
        return [_inline(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    out = {k: _inline(v, defs) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
    if "anyOf" in out and {"type": "null"} in out["anyOf"]:
        alts = out.pop("anyOf")
        out["oneOf"] = [{"type": "null"}] + [a for a in alts if a != {"type": "null"}]
    return out


def scenario_schema(limits: Limits | None = None) -> dict[str, Any]:
    """The scenario format as a JSON Schema; bounds that are limits are this server's (`limits`).
    Rules that relate fields to each other are checked by the validator alone; the description
    lists them."""
    limits = limits or Limits.from_env()
    generated = scenario_model(limits).model_json_schema()
    body = _inline({k: v for k, v in generated.items() if k != "$defs"}, generated.get("$defs", {}))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "/api/schema/scenario",
        **body,
        "title": "pagedviz scenario",
        "description": (
            "A scenario for pagedviz (docs/scenario-format.md). Rules across fields, checked when "
            "the scenario is validated: prompt length + max_tokens <= max_model_len; a request's "
            "blocks fit the pool; for vllm and ascend the pool holds one max_model_len sequence "
            "besides the null block; without chunked prefill (and always for nanovllm) a request "
            "fits max_num_batched_tokens whole; request ids are unique; num_kv_heads divides "
            f"num_heads; prompt + output tokens over all requests <= {limits.max_total_tokens}; "
            f"max_num_reqs * max_model_len <= {limits.max_cells}."
        ),
    }
