"""The rules that relate a scenario's fields to each other, to the flavour and to the limits, checked
once every field alone is valid (core/models.py), while the engine's dataclasses are built. Where
vLLM refuses a configuration, the message is vLLM's own. Every broken rule is collected with its
field path; `Rules.scenario` raises one ScenarioError with all of them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from pagedviz.core.fields import fields_of
from pagedviz.core.kv_cache import usable_blocks
from pagedviz.core.kv_groups import SLIDING, plan_kv_cache_groups
from pagedviz.core.kv_planning import group_max_blocks, max_in_flight_tokens, pool_too_small
from pagedviz.core.limits import Limits, raised_by
from pagedviz.core.scenario_parts import (
    PROMPT_FIELDS,
    EngineConfig,
    ModelConfig,
    RequestSpec,
    ScenarioError,
    default_capture_sizes,
)
from pagedviz.core.tokenizer import NUM_SPECIAL_IDS, encode_text
from pagedviz.core.vllm_support import problems

S = TypeVar("S")  # the scenario `Rules.scenario` builds (core/scenario.py's Scenario)

CONFIG_FIELDS = tuple(s.name for s in fields_of(EngineConfig))
MODEL_FIELDS = tuple(s.name for s in fields_of(ModelConfig))
# what governs a request's bound by config.max_model_len, which is itself bounded by a setting
BY_MAX_MODEL_LEN = (
    f"config.max_model_len sets it, and {raised_by('max_cells')} as far as max_num_reqs x max_model_len"
)


class Rules:
    """Checks the cross-field rules of one validated scenario model and builds its Scenario."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.errors: list[tuple[str, str]] = []
        self.too_large = False
        self.flavor = "vllm"
        self.runner_given = False

    def err(self, loc: str, msg: str, *, too_large: bool = False) -> None:
        self.errors.append((loc, msg))
        self.too_large = self.too_large or too_large

    def scenario(self, m: Any, build: Callable[..., S]) -> S:
        """The scenario (made by `build`, the Scenario class) of a validated scenario model;
        raises ScenarioError if a rule is broken."""
        self.flavor = m.flavor
        cfg = self.config(m.config)
        if self.flavor == "nanovllm" and cfg.block_size < 2:
            self.err(
                "config.block_size", "nanovllm needs block_size >= 2 (may_append tests len % block_size == 1)"
            )
        if cfg.scheduling_policy != "fcfs" and self.flavor != "vllm":
            self.err(
                "config.scheduling_policy",
                f"priority scheduling is modelled for the vllm flavour only (got {self.flavor!r}): use fcfs",
            )
        rng = np.random.default_rng(m.seed)
        reqs: list[RequestSpec] = []
        seen: set[str] = set()
        for i, raw in enumerate(m.requests):
            spec = self.request(raw, i, cfg, rng)
            if spec is None:
                continue
            if spec.id in seen:
                self.err(f"requests[{i}].id", f"duplicate id {spec.id!r:.70}")
            seen.add(spec.id)
            reqs.append(spec)
        self.child_ids(reqs)
        # each of a request's n children holds its own prompt and outputs
        total = sum((len(r.prompt_token_ids) + r.max_tokens) * r.n for r in reqs)
        if total > self.limits.max_total_tokens:
            self.err(
                "requests",
                f"{total} tokens in all; the limit is {self.limits.max_total_tokens}"
                f" ({raised_by('max_total_tokens')})",
                too_large=True,
            )
        if cfg.model_runner == "v2" and any(r.image is not None for r in reqs):
            if self.runner_given:
                self.err(
                    "config.model_runner",
                    'Model Runner V2 with M-RoPE (an image in a request) is not modelled yet: use "v1" '
                    "(the default when a request has an image)",
                )
            cfg = dataclasses.replace(cfg, model_runner="v1")
        if m.engine == "vllm" and not self.errors:
            for loc, msg in problems(m.flavor, cfg, reqs):
                self.err(loc, msg)
        if self.errors:
            raise ScenarioError(self.errors, too_large=self.too_large)
        return build(
            name=m.name,
            flavor=m.flavor,
            seed=m.seed,
            config=cfg,
            requests=tuple(reqs),
            max_steps=m.max_steps,
            title=m.title,
            summary=m.summary,
            document=m.document,
            notes=m.notes or (),
            engine=m.engine,
        )

    def child_ids(self, reqs: list[RequestSpec]) -> None:
        """The ids the scheduler sees (a request with n > 1 as its children, vLLM's
        {index}_{request_id}) must be unique: a child's id may not be another request's."""
        from pagedviz.core.parallel_sampling import child_id

        owner: dict[str, int] = {}
        for i, r in enumerate(reqs):
            if r.n == 1:
                owner.setdefault(r.id, i)
        for i, r in enumerate(reqs):
            for k in range(r.n if r.n > 1 else 0):
                cid = child_id(r.id, k)
                j = owner.setdefault(cid, i)
                if j != i:
                    self.err(
                        f"requests[{i}].n",
                        f"child {k} of request {r.id!r:.70} is named {cid!r:.70} (vLLM's "
                        f"{{index}}_{{request_id}}), which requests[{j}] also is: rename one",
                    )
                    break

    def config(self, c: Any) -> EngineConfig:
        lim, loc = self.limits, "config"
        v = {k: getattr(c, k) for k in CONFIG_FIELDS if k not in ("model", "cudagraph_capture_sizes")}
        given = c.model_fields_set
        if v["max_num_reqs"] * v["max_model_len"] > lim.max_cells:
            self.err(
                loc,
                f"token_ids_cpu would hold {v['max_num_reqs'] * v['max_model_len']} cells "
                f"(max_num_reqs * max_model_len); the limit is {lim.max_cells} ({raised_by('max_cells')})",
                too_large=True,
            )
        sizes = c.cudagraph_capture_sizes
        if sizes == "default":
            sizes = default_capture_sizes(v["max_num_batched_tokens"])
        self.runner_defaults(given, v)
        spec, async_scheduling = v["num_speculative_tokens"], v["async_scheduling"]
        if v["prompt_lookup_max"] < v["prompt_lookup_min"]:
            self.err(
                f"{loc}.prompt_lookup_max",
                f"is below prompt_lookup_min ({v['prompt_lookup_min']}): give a range min <= max",
            )
        if spec and async_scheduling and v["model_runner"] == "v1":
            # VllmConfig refuses it outright when asked for (vllm/config/vllm.py:1651-1680): the V1
            # runner's async path needs a GPU drafter (eagle, ngram_gpu, ...), and pagedviz's n-gram
            # proposer is the CPU one
            self.err(
                f"{loc}.async_scheduling",
                f"Async scheduling is not supported by the V1 model runner with "
                f"{v['speculative_method']}-based speculative decoding (as vLLM 0.33 refuses it): "
                'use "model_runner": "v2" or async_scheduling false',
            )
        if spec and v["enable_prefix_caching"]:
            self.err(f"{loc}.num_speculative_tokens", "is not modelled together with enable_prefix_caching")
        if v["speculative_method"] == "mtp" and self.flavor != "ascend":
            self.err(
                f"{loc}.speculative_method",
                "mtp is modelled for the ascend flavour only (it selects vllm-ascend's SpecDecoding state)",
            )
        if (spec or async_scheduling) and self.flavor == "nanovllm":
            self.err(loc, "nanovllm has no speculative decoding or async scheduling")
        self.layers(v)
        model = self.model(c.model, v["vocab_size"] if "vocab_size" in given else None, v["layer_types"])
        if model is not None:
            v["vocab_size"] = model.vocab_size
        self.vllm_rules(v)
        if model is not None:
            elems = 2 * v["num_kv_blocks"] * v["block_size"] * model.num_kv_heads * model.head_size
            if elems > lim.max_kv_cache_elems:
                self.err(
                    loc,
                    f"one layer's KV cache would hold {elems} elements; the limit is "
                    f"{lim.max_kv_cache_elems} (lower num_kv_blocks or block_size; "
                    f"{raised_by('max_kv_cache_elems')})",
                    too_large=True,
                )
        return EngineConfig(**v, cudagraph_capture_sizes=sizes, model=model)

    def vllm_rules(self, v: dict[str, Any]) -> None:
        """What vLLM refuses, with its reasons: SchedulerConfig.verify_max_model_len, and the
        KV-cache planning's check that the pool holds one max_model_len sequence. nano-vllm has
        neither (it only asserts that it has some blocks)."""
        if self.flavor == "nanovllm":
            return
        loc = "config"
        budget, max_model_len = v["max_num_batched_tokens"], v["max_model_len"]
        if not v["enable_chunked_prefill"] and budget < max_model_len:
            self.err(
                f"{loc}.max_num_batched_tokens",
                f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to max_num_batched_tokens and "
                "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
                "decrease max_model_len.",
            )
        if budget < v["max_num_reqs"]:
            self.err(
                f"{loc}.max_num_batched_tokens",
                f"max_num_batched_tokens ({budget}) must be greater than or equal to "
                f"max_num_seqs (max_num_reqs, {v['max_num_reqs']}).",
            )
        if v["long_prefill_token_threshold"] > max_model_len:
            self.err(
                f"{loc}.long_prefill_token_threshold",
                f"long_prefill_token_threshold ({v['long_prefill_token_threshold']}) cannot be greater "
                f"than the max_model_len ({max_model_len}).",
            )
        groups = plan_kv_cache_groups(v["layer_types"], v["sliding_window"])
        in_flight = max_in_flight_tokens(budget, v["async_scheduling"])
        if why := pool_too_small(max_model_len, v["block_size"], v["num_kv_blocks"], groups, in_flight):
            self.err(f"{loc}.num_kv_blocks", why)

    def runner_defaults(self, given: set[str], v: dict[str, Any]) -> None:
        """model_runner and async_scheduling as vLLM 0.33 picks them when the scenario leaves them
        out: Model Runner V2 and async scheduling on the vllm flavour; v1 and sync elsewhere. With
        n-gram speculative decoding vLLM 0.33 still runs V2 (`_get_v2_model_runner_unsupported_features`
        refuses only suffix / custom_class methods) and turns async scheduling on as well; on the V1
        runner it turns async off, since V1's async path has no CPU n-gram drafter
        (`v1_async_sched_incompat`, vllm/config/vllm.py:1651-1717). A flavour without a V2 refuses
        an explicit "v2"."""
        vllm = self.flavor == "vllm"
        self.runner_given = "model_runner" in given
        if "model_runner" not in given:
            v["model_runner"] = "v2" if vllm else "v1"
        elif v["model_runner"] == "v2" and not vllm:
            self.err(
                "config.model_runner",
                f'the {self.flavor} flavour has no Model Runner V2 (it mirrors a V1-style runner): use "v1"',
            )
        if "async_scheduling" not in given:
            v["async_scheduling"] = vllm and (v["model_runner"] == "v2" or not v["num_speculative_tokens"])

    def layers(self, v: dict[str, Any]) -> None:
        """`layer_types` and `sliding_window`: a sliding layer needs a window, a window needs a
        sliding layer, and several KV cache groups are modelled on the vllm flavour only."""
        loc, types, window = "config", v["layer_types"], v["sliding_window"]
        sliding = bool(types) and SLIDING in types
        if sliding and window is None:
            self.err(f"{loc}.sliding_window", "is needed: layer_types has a sliding_attention layer")
        if window is not None and not sliding:
            self.err(
                f"{loc}.sliding_window", "applies to no layer: layer_types has no sliding_attention layer"
            )
        if types and len(set(types)) > 1 and self.flavor != "vllm":
            self.err(
                f"{loc}.layer_types",
                f"{self.flavor} models one KV cache group: mixed layer types (several groups) are "
                "modelled on the vllm flavour only",
            )

    def model(
        self, m: Any, vocab_size: int | None, layer_types: tuple[str, ...] | None = None
    ) -> ModelConfig | None:
        if m is None:
            return None
        loc = "config.model"
        vals = {k: getattr(m, k) for k in MODEL_FIELDS}
        if layer_types:
            # the tiny model's layers follow layer_types; a num_layers given must agree
            if "num_layers" not in m.model_fields_set:
                vals["num_layers"] = len(layer_types)
            elif m.num_layers != len(layer_types):
                self.err(
                    f"{loc}.num_layers",
                    f"is {m.num_layers} but config.layer_types lists {len(layer_types)} layer(s); "
                    "leave it out (it follows layer_types) or make them agree",
                )
        if vocab_size is not None:
            if "vocab_size" not in m.model_fields_set:
                vals["vocab_size"] = vocab_size
            elif m.vocab_size != vocab_size:
                self.err(f"{loc}.vocab_size", f"differs from config.vocab_size ({vocab_size}); give one")
        model = ModelConfig(**vals)
        if model.num_heads % model.num_kv_heads:
            self.err(f"{loc}.num_kv_heads", "must divide num_heads (grouped-query attention)")
        if model.head_size % 2:
            self.err(f"{loc}.head_size", "must be even (RoPE rotates pairs)")
        if model.num_params() > self.limits.max_model_cells:
            self.err(
                loc,
                f"model too large ({model.num_params()} parameters; the limit is "
                f"{self.limits.max_model_cells}, {raised_by('max_model_cells')})",
                too_large=True,
            )
        return model

    def bounded(self, loc: str, value: int, hi: int) -> int:
        """A field bounded by the config (max_model_len): over it is refused, and clamped."""
        if value > hi:
            self.err(loc, f"must be <= {hi} (got {value}; {BY_MAX_MODEL_LEN})", too_large=True)
            return hi
        return value

    def request(self, r: Any, i: int, cfg: EngineConfig, rng: np.random.Generator) -> RequestSpec | None:
        loc = f"requests[{i}]"
        rid = r.id if r.id is not None else str(i)
        max_tokens = self.bounded(f"{loc}.max_tokens", r.max_tokens, cfg.max_model_len)
        given = next(k for k in PROMPT_FIELDS if k in r.model_fields_set)
        text: str | None = None
        if given == "prompt_len":
            n = self.bounded(f"{loc}.prompt_len", r.prompt_len, cfg.max_model_len)
            # drawn above the special ids so the prompt is never padding
            ids = rng.integers(NUM_SPECIAL_IDS, cfg.vocab_size, size=n).tolist()
        elif given == "prompt":
            text, longest = r.prompt, cfg.max_model_len * 4
            if len(text) > longest:
                msg = f"must be at most {longest} characters (4 x config.max_model_len; {BY_MAX_MODEL_LEN})"
                self.err(f"{loc}.prompt", msg, too_large=True)
                text = text[:longest]
            ids = encode_text(text)
            if not ids:
                self.err(f"{loc}.prompt", "must not be empty")
                return None
            if cfg.vocab_size < 256 + NUM_SPECIAL_IDS:
                self.err(
                    f"{loc}.prompt",
                    f"text prompts need vocab_size >= {256 + NUM_SPECIAL_IDS} (byte tokenizer)",
                )
        else:
            ids = r.prompt_token_ids
            if len(ids) > cfg.max_model_len:
                self.err(
                    f"{loc}.prompt_token_ids", f"has {len(ids)} tokens; max_model_len is {cfg.max_model_len}"
                )
                return None
            vocab = cfg.vocab_size
            # all ints within range, checked at C speed; the first bad id is looked for only then
            fine = set(map(type, ids)) == {int} and min(ids) >= 0 and max(ids) < vocab
            bad = _NONE if fine else next(v for v in ids if type(v) is not int or not 0 <= v < vocab)
            if bad is not _NONE:
                self.err(
                    f"{loc}.prompt_token_ids",
                    f"ids must be integers in [0, vocab_size={vocab}) (got {bad!r:.40})",
                )
                return None
        if len(ids) + max_tokens > cfg.max_model_len:
            self.err(
                loc,
                f"prompt length {len(ids)} + max_tokens {max_tokens} exceeds "
                f"max_model_len {cfg.max_model_len}",
            )
        # nano-vllm has no switch: the first waiting sequence of a step always may take a chunk
        chunked = cfg.enable_chunked_prefill or self.flavor == "nanovllm"
        if not chunked and len(ids) + max_tokens > cfg.max_num_batched_tokens:
            self.err(
                loc,
                f"without chunked prefill a request must fit the budget whole: prompt length "
                f"{len(ids)} + max_tokens {max_tokens} exceeds max_num_batched_tokens "
                f"{cfg.max_num_batched_tokens}",
            )
        # its blocks in every KV cache group (a sliding group's at most what its window holds;
        # nano-vllm drops nothing)
        in_flight = max_in_flight_tokens(cfg.max_num_batched_tokens, cfg.async_scheduling)
        length = len(ids) + max_tokens
        if self.flavor == "nanovllm":
            need = math.ceil(length / cfg.block_size)
        else:
            need = sum(group_max_blocks(g, length, cfg.block_size, in_flight) for g in cfg.kv_cache_groups)
        usable = usable_blocks(self.flavor, cfg.num_kv_blocks)
        if need > usable:
            self.err(
                loc,
                f"needs {need} KV blocks but the pool has {usable} usable blocks "
                f"(num_kv_blocks {cfg.num_kv_blocks})",
            )
        image = self.image(r.image, loc, len(ids))
        if r.n > 1 and self.flavor != "vllm":
            self.err(
                f"{loc}.n",
                f"parallel sampling (n > 1) is modelled for the vllm flavour only (got {self.flavor!r})",
            )
        return RequestSpec(
            rid,
            tuple(ids),
            max_tokens,
            r.arrival_step,
            text,
            given == "prompt_len",
            image,
            n=r.n,
            priority=r.priority,
        )

    def image(self, m: Any, loc: str, num_prompt_tokens: int) -> tuple[int, int, int, int] | None:
        """An image's placeholder tokens: `t*h*w` prompt tokens from `offset` (M-RoPE, Qwen2-VL)."""
        if m is None:
            return None
        loc = f"{loc}.image"
        offset, t, h, w = m.offset, m.t, m.h, m.w
        if offset + t * h * w > num_prompt_tokens:
            self.err(
                loc,
                f"offset {offset} + t*h*w {t * h * w} placeholder tokens run past the prompt's "
                f"{num_prompt_tokens} tokens",
            )
            return None
        if self.flavor == "nanovllm":
            self.err(loc, "nanovllm has no multimodal inputs")
        return (offset, t, h, w)


_NONE = object()  # no bad id found
