"""Validation of a scenario dict: `precheck` (what must hold before prompts are drawn or encoded)
and the validator, which collects every problem with its field path before raising one
ScenarioError."""

from __future__ import annotations

import difflib
import math
import unicodedata
from dataclasses import asdict
from typing import Any

import numpy as np

from pagedviz.core.fields import FieldSpec, fields_of
from pagedviz.core.limits import Limits, cost_problems
from pagedviz.core.scenario import (
    PROMPT_FIELDS,
    REQUEST_FIELDS,
    SCENARIO_FIELDS,
    EngineConfig,
    ModelConfig,
    RequestSpec,
    Scenario,
    ScenarioError,
    default_capture_sizes,
)
from pagedviz.core.text import NUM_SPECIAL_IDS, encode_text


def parse_scenario(data: Any, limits: Limits | None = None) -> Scenario:
    """`Scenario.from_dict`: precheck, validate, then the cost model (a ScenarioError marked
    too_large when a size is over a limit)."""
    limits = limits or Limits.from_env()
    scenario = _Validator(limits).scenario(precheck(data, limits))
    problems = cost_problems(scenario, limits)
    if problems:
        raise ScenarioError(problems, too_large=True)
    return scenario


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Validator:
    """Collects every problem of a scenario dict, then raises one ScenarioError."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.errors: list[tuple[str, str]] = []
        self.too_large = False
        self.flavor = "vllm"
        self.context: dict[str, int] = {}  # config values that bound request fields

    def err(self, loc: str, msg: str, *, too_large: bool = False) -> None:
        self.errors.append((loc, msg))
        self.too_large = self.too_large or too_large

    def int_field(
        self, obj: dict[str, Any], key: str, loc: str, default: int | None, lo: int, hi: int
    ) -> int:
        v = obj.get(key, default)
        if v is None or not _is_int(v):
            self.err(f"{loc}.{key}", f"must be an integer (got {type(v).__name__})")
            return default if default is not None else lo
        if v < lo:
            self.err(f"{loc}.{key}", f"must be >= {lo} (got {v})")
            return lo
        if v > hi:
            self.err(f"{loc}.{key}", f"must be <= {hi} (got {v})", too_large=True)
            return hi
        return int(v)

    def bool_field(self, obj: dict[str, Any], key: str, loc: str, default: bool) -> bool:
        v = obj.get(key, default)
        if not isinstance(v, bool):
            self.err(f"{loc}.{key}", f"must be true or false (got {v!r:.40})")
            return default
        return v

    def str_field(self, obj: dict[str, Any], key: str, loc: str, default: str, max_len: int) -> str:
        v = obj.get(key, default)
        if not isinstance(v, str):
            self.err(f"{loc}.{key}", f"must be a string (got {type(v).__name__})")
            return default
        if len(v) > max_len:
            self.err(f"{loc}.{key}", f"must be at most {max_len} characters", too_large=True)
            return v[:max_len]
        return v

    def float_field(
        self, obj: dict[str, Any], key: str, loc: str, default: float, lo: float, hi: float
    ) -> float:
        v = obj.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
            self.err(f"{loc}.{key}", f"must be a number (got {type(v).__name__})")
            return default
        if v < lo:
            self.err(f"{loc}.{key}", f"must be >= {lo} (got {v})")
            return lo
        if v > hi:
            self.err(f"{loc}.{key}", f"must be <= {hi} (got {v})", too_large=True)
            return hi
        return float(v)

    def enum_field(
        self, obj: dict[str, Any], key: str, loc: str, default: str, choices: tuple[str, ...]
    ) -> str:
        v = obj.get(key, default)
        if v not in choices:
            self.err(f"{loc}.{key}" if loc else key, f"must be one of {', '.join(choices)} (got {v!r:.40})")
            return default
        return str(v)

    def bound(self, hi: float | str | None) -> Any:
        if isinstance(hi, int | float):
            return hi
        if hi is None:
            return 2**63 - 1
        return self.context[hi] if hi in self.context else int(getattr(self.limits, hi))

    def read(self, obj: dict[str, Any], spec: FieldSpec, loc: str) -> Any:
        """One field as its spec says: its type, its bounds, its default when absent."""
        if spec.kind == "bool":
            return self.bool_field(obj, spec.name, loc, spec.default)
        if spec.kind == "str":
            return self.str_field(obj, spec.name, loc, spec.default, spec.max_len)
        if spec.kind == "enum":
            return self.enum_field(obj, spec.name, loc, spec.default, spec.choices)
        lo = spec.lo if spec.lo is not None else 0
        if spec.kind == "float":
            return self.float_field(obj, spec.name, loc, spec.default, lo, self.bound(spec.hi))
        return self.int_field(obj, spec.name, loc, spec.default, int(lo), self.bound(spec.hi))

    def fields(self, obj: dict[str, Any], specs: tuple[FieldSpec, ...], loc: str) -> dict[str, Any]:
        """Every field of the table that is not custom, in the table's order."""
        return {s.name: self.read(obj, s, loc) for s in specs if s.kind != "custom"}

    def unknown_keys(self, obj: dict[str, Any], allowed: set[str], loc: str) -> None:
        for key in obj:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                self.err(f"{loc}.{key}" if loc else str(key), f"unknown field{hint}")

    def model(self, raw: Any, vocab_size: int | None) -> ModelConfig | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.err("config.model", "must be an object or null")
            return ModelConfig()
        loc = "config.model"
        specs = fields_of(ModelConfig)
        self.unknown_keys(raw, {s.name for s in specs}, loc)
        vals = self.fields(raw, specs, loc)
        if vocab_size is not None and "vocab_size" not in raw:
            vals["vocab_size"] = vocab_size
        m = ModelConfig(**vals)
        if vocab_size is not None and "vocab_size" in raw and raw["vocab_size"] != vocab_size:
            self.err(f"{loc}.vocab_size", f"differs from config.vocab_size ({vocab_size}); give one")
        if m.num_heads % m.num_kv_heads:
            self.err(f"{loc}.num_kv_heads", "must divide num_heads (grouped-query attention)")
        if m.head_size % 2:
            self.err(f"{loc}.head_size", "must be even (RoPE rotates pairs)")
        if m.num_params() > self.limits.max_model_cells:
            self.err(loc, f"model too large ({m.num_params()} parameters)", too_large=True)
        return m

    def config(self, raw: Any) -> EngineConfig:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            self.err("config", "must be an object")
            raw = {}
        lim, loc, d = self.limits, "config", EngineConfig()
        specs = fields_of(EngineConfig)
        self.unknown_keys(raw, {s.name for s in specs}, loc)
        v = self.fields(raw, specs, loc)
        if v["max_num_reqs"] * v["max_model_len"] > lim.max_cells:
            self.err(
                loc,
                f"token_ids_cpu would hold {v['max_num_reqs'] * v['max_model_len']} cells "
                f"(max_num_reqs * max_model_len); the limit is {lim.max_cells}",
                too_large=True,
            )
        sizes = self.capture_sizes(raw.get("cudagraph_capture_sizes"), v["max_num_batched_tokens"])
        self.runner_defaults(raw, v)
        spec, async_scheduling = v["num_speculative_tokens"], v["async_scheduling"]
        if v["prompt_lookup_max"] < v["prompt_lookup_min"]:
            self.err(
                f"{loc}.prompt_lookup_max",
                f"is below prompt_lookup_min ({v['prompt_lookup_min']}): give a range min <= max",
            )
        if spec and async_scheduling:
            self.err(f"{loc}.async_scheduling", "is not modelled together with num_speculative_tokens > 0")
        if spec and v["enable_prefix_caching"]:
            self.err(f"{loc}.num_speculative_tokens", "is not modelled together with enable_prefix_caching")
        if v["speculative_method"] == "mtp" and self.flavor != "ascend":
            self.err(
                f"{loc}.speculative_method",
                "mtp is modelled for the ascend flavour only (it selects vllm-ascend's SpecDecoding state)",
            )
        if (spec or async_scheduling) and self.flavor == "nanovllm":
            self.err(loc, "nanovllm has no speculative decoding or async scheduling")
        vocab: int | None = None
        if "vocab_size" in raw:
            vocab = self.int_field(raw, "vocab_size", loc, d.vocab_size, 8, 1 << 24)
        model = self.model(raw.get("model", {}), vocab)
        vocab = model.vocab_size if model is not None else (vocab or d.vocab_size)
        # what vLLM's SchedulerConfig.verify_max_model_len refuses, with its reasons
        vllm_rules = self.flavor != "nanovllm"
        budget, max_model_len = v["max_num_batched_tokens"], v["max_model_len"]
        if vllm_rules and not v["enable_chunked_prefill"] and budget < max_model_len:
            self.err(
                f"{loc}.max_num_batched_tokens",
                f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to max_num_batched_tokens and "
                "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
                "decrease max_model_len.",
            )
        if vllm_rules and budget < v["max_num_reqs"]:
            self.err(
                f"{loc}.max_num_batched_tokens",
                f"max_num_batched_tokens ({budget}) must be greater than or equal to "
                f"max_num_seqs (max_num_reqs, {v['max_num_reqs']}).",
            )
        if vllm_rules and v["long_prefill_token_threshold"] > max_model_len:
            self.err(
                f"{loc}.long_prefill_token_threshold",
                f"long_prefill_token_threshold ({v['long_prefill_token_threshold']}) cannot be greater "
                f"than the max_model_len ({max_model_len}).",
            )
        if model is not None:
            elems = 2 * v["num_kv_blocks"] * v["block_size"] * model.num_kv_heads * model.head_size
            if elems > lim.max_kv_cache_elems:
                self.err(
                    loc,
                    f"one layer's KV cache would hold {elems} elements; the limit is "
                    f"{lim.max_kv_cache_elems} (lower num_kv_blocks or block_size)",
                    too_large=True,
                )
        self.context["max_model_len"] = v["max_model_len"]
        return EngineConfig(**v, cudagraph_capture_sizes=sizes, vocab_size=vocab, model=model)

    def runner_defaults(self, raw: dict[str, Any], v: dict[str, Any]) -> None:
        """model_runner and async_scheduling as vLLM 0.33 picks them when the scenario leaves them
        out: Model Runner V2 and async scheduling on the vllm flavour (async off with speculative
        decoding, which pagedviz does not model together with it); v1 and sync elsewhere. A flavour
        without a V2 refuses an explicit "v2"."""
        vllm = self.flavor == "vllm"
        if "model_runner" not in raw:
            v["model_runner"] = "v2" if vllm else "v1"
        elif v["model_runner"] == "v2" and not vllm:
            self.err(
                "config.model_runner",
                f'the {self.flavor} flavour has no Model Runner V2 (it mirrors a V1-style runner): use "v1"',
            )
        if "async_scheduling" not in raw:
            v["async_scheduling"] = vllm and not v["num_speculative_tokens"]

    def capture_sizes(self, raw: Any, budget: int) -> tuple[int, ...] | None:
        loc = "config.cudagraph_capture_sizes"
        if raw is None:
            return None
        if raw == "default":
            return default_capture_sizes(budget)
        if not isinstance(raw, list) or not raw or not all(_is_int(s) and s > 0 for s in raw):
            self.err(loc, 'must be null, "default" or a non-empty list of positive integers')
            return None
        if len(raw) > 1024:
            self.err(loc, "at most 1024 sizes", too_large=True)
            return None
        return tuple(sorted(set(raw)))

    def request(self, raw: Any, i: int, cfg: EngineConfig, rng: np.random.Generator) -> RequestSpec | None:
        loc = f"requests[{i}]"
        if not isinstance(raw, dict):
            self.err(loc, "must be an object")
            return None
        spec = {s.name: s for s in REQUEST_FIELDS}
        self.unknown_keys(raw, set(spec), loc)
        rid = raw.get("id", str(i))
        if _is_int(rid):
            rid = str(rid)
        if not isinstance(rid, str) or not rid or len(rid) > 64:
            self.err(f"{loc}.id", "must be a non-empty string of at most 64 characters")
            rid = str(i)
        max_tokens = self.read(raw, spec["max_tokens"], loc)
        arrival = self.read(raw, spec["arrival_step"], loc)
        given = [k for k in PROMPT_FIELDS if k in raw]
        if len(given) != 1:
            self.err(loc, "give exactly one of prompt_token_ids, prompt, prompt_len")
            return None
        text: str | None = None
        if given[0] == "prompt_len":
            n = self.read(raw, spec["prompt_len"], loc)
            # drawn above the special ids so the prompt is never padding
            ids = rng.integers(NUM_SPECIAL_IDS, cfg.vocab_size, size=n).tolist()
        elif given[0] == "prompt":
            text = self.str_field(raw, "prompt", loc, "", cfg.max_model_len * 4)
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
            raw_ids = raw["prompt_token_ids"]
            if not isinstance(raw_ids, list) or not raw_ids:
                self.err(f"{loc}.prompt_token_ids", "must be a non-empty list of integers")
                return None
            if len(raw_ids) > cfg.max_model_len:
                self.err(
                    f"{loc}.prompt_token_ids",
                    f"has {len(raw_ids)} tokens; max_model_len is {cfg.max_model_len}",
                )
                return None
            bad = [v for v in raw_ids if not _is_int(v) or not 0 <= v < cfg.vocab_size]
            if bad:
                self.err(
                    f"{loc}.prompt_token_ids",
                    f"ids must be integers in [0, vocab_size={cfg.vocab_size}) (got {bad[0]!r:.40})",
                )
                return None
            ids = list(raw_ids)
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
        need = math.ceil((len(ids) + max_tokens) / cfg.block_size)
        usable = cfg.num_kv_blocks - (0 if self.flavor == "nanovllm" else 1)
        if need > usable:
            self.err(
                loc,
                f"needs {need} KV blocks but the pool has {usable} usable blocks "
                f"(num_kv_blocks {cfg.num_kv_blocks})",
            )
        image = self.image(raw.get("image"), loc, len(ids))
        return RequestSpec(rid, tuple(ids), max_tokens, arrival, text, given[0] == "prompt_len", image)

    def image(self, raw: Any, loc: str, num_prompt_tokens: int) -> tuple[int, int, int, int] | None:
        """An image's placeholder tokens: `t*h*w` prompt tokens from `offset` (M-RoPE, Qwen2-VL)."""
        if raw is None:
            return None
        loc = f"{loc}.image"
        if not isinstance(raw, dict):
            self.err(loc, "must be an object {offset, t, h, w}")
            return None
        self.unknown_keys(raw, {"offset", "t", "h", "w"}, loc)
        offset = self.int_field(raw, "offset", loc, None, 0, 1 << 20)
        t, h, w = (self.int_field(raw, k, loc, None, 1, 1 << 10) for k in ("t", "h", "w"))
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

    def scenario(self, data: Any) -> Scenario:
        if not isinstance(data, dict):
            raise ScenarioError([("scenario", "must be a JSON object")])
        top = {s.name: s for s in SCENARIO_FIELDS}
        self.unknown_keys(data, set(top), "")
        name = self.read(data, top["name"], "scenario")
        flavor = self.read(data, top["flavor"], "")
        self.flavor = flavor
        seed = self.read(data, top["seed"], "scenario")
        max_steps = self.read(data, top["max_steps"], "scenario")
        cfg = self.config(data.get("config"))
        if flavor == "nanovllm" and cfg.block_size < 2:
            self.err(
                "config.block_size", "nanovllm needs block_size >= 2 (may_append tests len % block_size == 1)"
            )
        raw_reqs = data.get("requests")
        reqs: list[RequestSpec] = []
        if not isinstance(raw_reqs, list) or not raw_reqs:
            self.err("requests", "must be a non-empty list")
        elif len(raw_reqs) > self.limits.max_requests:
            self.err("requests", f"at most {self.limits.max_requests} requests", too_large=True)
        else:
            rng = np.random.default_rng(seed)
            seen: set[str] = set()
            for i, raw in enumerate(raw_reqs):
                spec = self.request(raw, i, cfg, rng)
                if spec is None:
                    continue
                if spec.id in seen:
                    self.err(f"requests[{i}].id", f"duplicate id {spec.id!r:.70}")
                seen.add(spec.id)
                reqs.append(spec)
            total = sum(len(r.prompt_token_ids) + r.max_tokens for r in reqs)
            if total > self.limits.max_total_tokens:
                self.err(
                    "requests",
                    f"{total} tokens in all; the limit is {self.limits.max_total_tokens}",
                    too_large=True,
                )
        texts = {k: self.read(data, top[k], "scenario") for k in ("title", "summary", "document")}
        notes = self.notes(data.get("notes", []))
        if self.errors:
            raise ScenarioError(self.errors, too_large=self.too_large)
        return Scenario(
            name=name,
            flavor=flavor,
            seed=seed,
            config=cfg,
            requests=tuple(reqs),
            max_steps=max_steps,
            **texts,
            notes=notes,
        )

    def notes(self, raw: Any) -> tuple[str, ...]:
        """One line each, shown on the preset's page (e.g. where a document has a typo)."""
        if not isinstance(raw, list) or len(raw) > 8 or not all(isinstance(n, str) for n in raw):
            self.err("notes", "must be a list of at most 8 strings")
            return ()
        if any(len(n) > 400 for n in raw):
            self.err("notes", "each note must be at most 400 characters", too_large=True)
            return ()
        return tuple(raw)


# ----------------------------------------------------------------------------- before validation
_INT_DEFAULTS = {"seed", "max_steps"}
_CONFIG_INTS = {k for k, v in asdict(EngineConfig()).items() if _is_int(v)}


def _text_problem(text: str, newlines: bool) -> str | None:
    """Why `text` cannot be an id or a name: a lone surrogate, or a control character."""
    for ch in text:
        if "\ud800" <= ch <= "\udfff":
            return f"has a lone surrogate (U+{ord(ch):04X}): not valid Unicode text"
        if unicodedata.category(ch) == "Cc" and not (newlines and ch in "\n\t"):
            return f"has a control character (U+{ord(ch):04X})"
    return None


def precheck(data: Any, limits: Limits) -> Any:
    """What must hold before the validator draws or encodes prompts: ids and names are printable
    text, prompts valid Unicode, and the requests' token total within the limit (so a huge
    `prompt_len` is refused before any id is drawn). Empty values of integer fields mean their
    default (a form's blank field). Returns the data to validate; raises ScenarioError."""
    if not isinstance(data, dict):
        return data
    data = {k: v for k, v in data.items() if not (k in _INT_DEFAULTS and _blank(v))}
    if isinstance(data.get("config"), dict):
        data["config"] = {k: v for k, v in data["config"].items() if not (k in _CONFIG_INTS and _blank(v))}
    errors: list[tuple[str, str]] = []
    for key in ("name", "title", "summary", "document"):
        v = data.get(key)
        if isinstance(v, str) and (why := _text_problem(v, newlines=key == "summary")):
            errors.append((f"scenario.{key}", why))
    reqs = data.get("requests")
    if isinstance(reqs, list) and len(reqs) <= limits.max_requests:
        total = 0
        for i, r in enumerate(reqs):
            if not isinstance(r, dict):
                continue
            if isinstance(r.get("id"), str) and (why := _text_problem(r["id"], newlines=False)):
                errors.append((f"requests[{i}].id", why))
            prompt = r.get("prompt")
            if isinstance(prompt, str):
                if any("\ud800" <= ch <= "\udfff" for ch in prompt):
                    errors.append((f"requests[{i}].prompt", "has a lone surrogate: not valid Unicode text"))
                total += len(prompt)
            ids = r.get("prompt_token_ids")
            total += len(ids) if isinstance(ids, list) else 0
            for key, default in (("prompt_len", 0), ("max_tokens", 8)):
                n = r.get(key, default)
                total += max(0, int(n)) if _is_int(n) else 0
        if total > limits.max_total_tokens:
            errors.append(
                (
                    "requests",
                    f"at least {total} tokens in all; the limit is {limits.max_total_tokens} "
                    "(PAGEDVIZ_MAX_TOTAL_TOKENS raises it)",
                )
            )
            raise ScenarioError(errors, too_large=True)
    if errors:
        raise ScenarioError(errors)
    return data


def _blank(v: Any) -> bool:
    return isinstance(v, str) and not v.strip()
