"""Engine configuration and the scenario format (docs/scenario-format.md).

A scenario is plain JSON: a name, a flavour, a seed, an engine config and a list of requests.
`Scenario.from_dict` validates everything before anything runs and reports each problem with the
field path and the rule it breaks, so the CLI and the REST API can show the same clear message.
Prompts may be token ids, a length (ids drawn from the seed) or text (a byte-level tokenizer).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

FLAVORS = ("vllm", "ascend", "nanovllm")
DEVICES = ("auto", "cpu", "cuda", "npu")
RUNNERS = ("v1", "v2")

# Byte-level tokenizer: ids 0..2 are special, byte b is id b + NUM_SPECIAL_IDS.
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NUM_SPECIAL_IDS = 3
SPECIAL_NAMES = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


def encode_text(text: str) -> list[int]:
    """Token ids of `text`: its UTF-8 bytes shifted past the special ids."""
    return [b + NUM_SPECIAL_IDS for b in text.encode("utf-8")]


def decode_ids(ids: list[int] | np.ndarray) -> str:
    """Readable text of token ids; ids outside the byte range show as <id>."""
    out: list[str] = []
    buf = bytearray()
    for i in (int(x) for x in ids):
        b = i - NUM_SPECIAL_IDS
        if 0 <= b < 256:
            buf.append(b)
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
        out.append(SPECIAL_NAMES.get(i, f"<{i}>"))
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


class SettingError(ValueError):
    """A PAGEDVIZ_* setting in the environment is not a positive integer; names the variable."""


def env_int(name: str, default: int) -> int:
    """The positive integer in environment variable `name`, or `default` when it is unset."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise SettingError(f"{name} must be a positive integer (got {raw!r:.40})")
    return int(raw)


@dataclass(frozen=True)
class Limits:
    """What one scenario may cost, checked before any work starts (`cost_problems`). Each is raised
    or lowered with PAGEDVIZ_<NAME> in the environment (README: the limits table)."""

    max_requests: int = 256
    max_cells: int = 4_000_000  # cells of token_ids_cpu (max_num_reqs * max_model_len)
    max_total_tokens: int = 200_000  # prompt + output tokens over all requests
    max_steps: int = 4096
    max_num_kv_blocks: int = 1_000_000
    max_block_size: int = 4096
    max_model_cells: int = 1 << 24  # parameters of the tiny model
    max_kv_cache_elems: int = 1 << 26  # elements of the KV cache tensors, all layers together
    max_tokens_per_step: int = 16384  # max_num_batched_tokens and every CUDA-graph capture size
    max_context_tokens: int = 65536  # tokens one step's forward attends over (with a model)
    max_attention_scores: int = 1 << 24  # num_heads * longest sequence^2 (dense check, with a model)
    max_mask_cells: int = 1 << 22  # cells of the ascend attention mask of one step
    max_vocab_size: int = 65536
    max_step_mflop: int = 2_000  # estimated forward work of one step, millions of flops
    max_step_trace_kb: int = 32 << 10  # estimated bytes one step's trace holds

    @classmethod
    def from_env(cls) -> Limits:
        """Defaults overridden by PAGEDVIZ_<NAME>; a bad value raises SettingError naming it."""
        d = cls()
        return cls(**{n: env_int(f"PAGEDVIZ_{n.upper()}", getattr(d, n)) for n in cls.__dataclass_fields__})


class ScenarioError(ValueError):
    """A scenario broke one or more rules; `errors` holds (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]], *, too_large: bool = False) -> None:
        self.errors = errors
        self.too_large = too_large
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))


@dataclass(frozen=True)
class FieldSpec:
    """One field of the scenario format, declared once: the validator reads it and
    `scenario_schema()` publishes it. `hi` is a number, or the name of a `Limits` field (the
    server's limit) or of a config field the value may not exceed (`max_model_len`)."""

    name: str
    default: Any
    doc: str
    kind: str = "int"  # int, float, bool, str, enum; custom: read by its own method, `schema` its shape
    lo: float | None = None
    hi: float | str | None = None
    choices: tuple[str, ...] = ()
    max_len: int = 200
    schema: dict[str, Any] | None = None


def setting(
    default: Any,
    doc: str,
    *,
    lo: float | None = None,
    hi: float | str | None = None,
    choices: tuple[str, ...] = (),
    schema: dict[str, Any] | None = None,
    factory: Any = None,
) -> Any:
    """A dataclass field that carries its FieldSpec: adding a config field is this one line."""
    if schema is not None:
        kind = "custom"
    elif choices:
        kind = "enum"
    else:
        kind = _kind_of(default)
    spec = FieldSpec("", default, doc, kind, lo, hi, choices, schema=schema)
    if factory is not None:
        return field(default_factory=factory, metadata={"spec": spec})
    return field(default=default, metadata={"spec": spec})


def _kind_of(default: Any) -> str:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, int):
        return "int"
    return "float" if isinstance(default, float) else "str"


def fields_of(cls: Any) -> tuple[FieldSpec, ...]:
    """The scenario fields of a config dataclass, in declaration order (internal ones left out;
    a plain field without `setting(...)` is read by the type of its default)."""
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        spec = f.metadata.get("spec") or FieldSpec("", f.default, "", _kind_of(f.default), lo=0)
        out.append(dataclasses.replace(spec, name=f.name))
    return tuple(out)


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = setting(2, "transformer layers of the tiny model", lo=1, hi=8)
    num_heads: int = setting(4, "query heads", lo=1, hi=64)
    num_kv_heads: int = setting(2, "K/V heads; must divide num_heads (grouped-query attention)", lo=1, hi=64)
    head_size: int = setting(16, "size of one head; even (RoPE rotates pairs)", lo=2, hi=256)
    vocab_size: int = setting(
        512, "token ids run over [0, vocab_size); text prompts need at least 259", lo=8, hi=65536
    )

    @property
    def hidden_size(self) -> int:
        return self.num_heads * self.head_size

    def num_params(self) -> int:
        h, kv = self.hidden_size, self.num_kv_heads * self.head_size
        per_layer = h * (h + 2 * kv) + h * h + 3 * h * (2 * h) + 2 * h
        return 2 * self.vocab_size * h + self.num_layers * per_layer + h


CAPTURE_SIZES_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "null"},
        {"const": "default"},
        {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1, "maxItems": 1024},
    ]
}


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = setting(16, "tokens per KV-cache block", lo=1, hi="max_block_size")
    max_model_len: int = setting(
        240, "longest sequence (prompt + output) of a request: the width of token_ids_cpu", lo=1, hi=1 << 20
    )
    max_num_reqs: int = setting(
        8, "rows of the persistent batch: at most this many requests run at once", lo=1, hi=4096
    )
    max_num_batched_tokens: int = setting(200, "the scheduler's token budget per step", lo=1, hi=1 << 20)
    num_kv_blocks: int = setting(
        64,
        "physical blocks in the KV-cache pool (vllm and ascend keep block 0 as the null block)",
        lo=2,
        hi="max_num_kv_blocks",
    )
    long_prefill_token_threshold: int = setting(
        0, "cap on one request's tokens per step while others wait (0: no cap)", lo=0, hi=1 << 20
    )
    enable_chunked_prefill: bool = setting(True, "a prompt may be split over several steps")
    enable_prefix_caching: bool = setting(False, "reuse full blocks whose token ids were seen before")
    cudagraph_capture_sizes: tuple[int, ...] | None = setting(
        None,
        'CUDA-graph sizes num_input_tokens is padded to: null (eager), "default" (vLLM\'s list) '
        "or a list of sizes",
        schema=CAPTURE_SIZES_SCHEMA,
    )
    device: str = setting("auto", "where prepare_inputs and the model run", choices=DEVICES)
    vocab_size: int = setting(
        512,
        "token ids run over [0, vocab_size), with or without a model (the model's vocabulary too); "
        "text prompts need at least 259",
        schema={"type": "integer", "minimum": 8, "maximum": 1 << 24},
    )
    model: ModelConfig | None = setting(
        None,
        "the tiny transformer's sizes, or null for fast simulation (no forward pass)",
        schema={},  # filled in by scenario_schema() from ModelConfig's fields
        factory=ModelConfig,
    )
    # speculative decoding (an n-gram, prompt-lookup drafter with vLLM's prompt_lookup_* defaults)
    num_speculative_tokens: int = setting(
        0, "draft tokens per step from the n-gram (prompt-lookup) drafter; 0: none", lo=0, hi=16
    )
    speculative_method: str = setting(
        "ngram",
        "the drafter's method: ngram (vLLM's prompt lookup); mtp (ascend only: vllm-ascend then picks the "
        "SpecDecoding attention state; the n-gram proposals stand in for the MTP head's drafts)",
        choices=("ngram", "mtp"),
    )
    prompt_lookup_min: int = setting(5, "shortest n-gram the drafter looks up", lo=1, hi=64)
    prompt_lookup_max: int = setting(5, "longest n-gram the drafter looks up", lo=1, hi=64)
    model_runner: str = setting(
        "v2",
        "vllm flavour: which of vLLM 0.33's GPU model runners prepares the inputs: v2 (Model Runner V2, "
        "vllm/v1/worker/gpu/, 0.33's default) or v1 (gpu_model_runner.py, what the documents teach); "
        "ascend and nanovllm have v1 only",
        choices=RUNNERS,
    )
    async_scheduling: bool = setting(
        True,
        "schedule step n+1 before step n's output reaches the scheduler (AsyncScheduler and the engine "
        "core's batch queue; vLLM 0.33's default on the vllm flavour, unless speculative decoding is on); "
        "ascend and nanovllm run synchronously",
    )
    # Policies that changed across vLLM versions (defaults: vLLM 0.33.0, core/upstream.py)
    scheduler_reserve_full_isl: bool = setting(
        True,
        "admit a waiting request only if its whole sequence fits the free blocks (0.33); "
        "false: its first chunk",
    )
    watermark: float = setting(
        0.0, "fraction of the pool kept free when admitting waiting requests while others run", lo=0, hi=0.99
    )
    free_queue_order: str = setting(
        "lifo",
        "lifo: freed blocks without a hash go to the free queue's head (0.33); "
        "fifo: all to its tail (older vLLM)",
        choices=("lifo", "fifo"),
    )
    long_prefill_cap_lone_request: bool = setting(
        False, "apply long_prefill_token_threshold even to a lone running or waiting request (older vLLM)"
    )

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_kv_blocks)

    @property
    def max_num_blocks_per_req(self) -> int:
        return math.ceil(self.max_model_len / self.block_size)

    def pad_for_cudagraph(self, num_tokens: int) -> int:
        """Next capture size >= num_tokens (eager when none fits or graphs are off)."""
        if not self.cudagraph_capture_sizes:
            return num_tokens
        for size in self.cudagraph_capture_sizes:
            if size >= num_tokens:
                return size
        return num_tokens


# The scenario's top level and each request: fields that are not a config dataclass's
SCENARIO_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("name", "untitled", "a short name", "str", max_len=200),
    FieldSpec("flavor", "vllm", "which engine's rules apply", "enum", choices=FLAVORS),
    FieldSpec("seed", 0, "draws prompt_len prompts and the model's weights", lo=0, hi=2**32 - 1),
    FieldSpec("config", None, "the engine configuration", "custom", schema={}),
    FieldSpec("requests", None, "the requests, in arrival order", "custom", schema={}),
    FieldSpec("max_steps", 256, "the run stops after this many steps (and says so)", lo=1, hi="max_steps"),
    FieldSpec("title", "", "a title shown by the page", "str", max_len=200),
    FieldSpec("summary", "", "what the scenario shows", "str", max_len=2000),
    FieldSpec("document", "", "the document whose example the scenario reproduces", "str", max_len=200),
    FieldSpec(
        "notes",
        None,
        "one-line notes shown with the scenario (e.g. where a document's printed number has a typo)",
        "custom",
        schema={"type": "array", "items": {"type": "string", "maxLength": 400}, "maxItems": 8},
    ),
)
PROMPT_FIELDS = ("prompt_token_ids", "prompt", "prompt_len")
REQUEST_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "id",
        None,
        "unique request id (a number is taken as its string; default: the list index)",
        "custom",
        schema={"type": ["string", "integer"], "minLength": 1, "maxLength": 64},
    ),
    FieldSpec(
        "prompt_token_ids",
        None,
        "the prompt as token ids in [0, vocab_size), at most max_model_len of them",
        "custom",
        schema={"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
    ),
    FieldSpec(
        "prompt",
        None,
        "the prompt as text (a byte-level tokenizer: one token per UTF-8 byte)",
        "custom",
        schema={"type": "string", "minLength": 1},
    ),
    FieldSpec("prompt_len", None, "a prompt of this many ids drawn from the seed", lo=1, hi="max_model_len"),
    FieldSpec("max_tokens", 8, "tokens to generate", lo=1, hi="max_model_len"),
    FieldSpec("arrival_step", 1, "the step at which the request arrives", lo=1, hi="max_steps"),
    FieldSpec(
        "image",
        None,
        "an image's placeholder tokens in the prompt: t*h*w tokens from offset (M-RoPE, as Qwen2-VL)",
        "custom",
        schema={
            "type": "object",
            "properties": {
                k: {"type": "integer", "minimum": 0 if k == "offset" else 1}
                for k in ("offset", "t", "h", "w")
            },
            "required": ["offset", "t", "h", "w"],
            "additionalProperties": False,
        },
    ),
)


def default_capture_sizes(max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM's default list: 1, 2, 4, then 8..248 by 8, then 256..512 by 16, capped."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    return tuple(s for s in sizes if s <= max_num_batched_tokens)


@dataclass(frozen=True)
class RequestSpec:
    id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    arrival_step: int
    prompt: str | None = None  # the text, when the prompt was given as text
    drawn: bool = False  # ids drawn from the seed (given as prompt_len)
    image: tuple[int, int, int, int] | None = None  # (offset, t, h, w): placeholder tokens of an image


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

    @classmethod
    def from_dict(cls, data: Any, limits: Limits | None = None) -> Scenario:
        limits = limits or Limits.from_env()
        scenario = _Validator(limits).scenario(precheck(data, limits))
        problems = cost_problems(scenario, limits)
        if problems:
            raise ScenarioError(problems, too_large=True)
        return scenario

    def to_dict(self) -> dict[str, Any]:
        """Canonical JSON form; prompts as they were given (text, seed-drawn length or token ids)."""
        cfg = asdict(self.config)
        if self.config.cudagraph_capture_sizes is not None:
            cfg["cudagraph_capture_sizes"] = list(self.config.cudagraph_capture_sizes)
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
            reqs.append(req)
        out: dict[str, Any] = {
            "name": self.name,
            "flavor": self.flavor,
            "seed": self.seed,
            "config": cfg,
            "requests": reqs,
            "max_steps": self.max_steps,
        }
        for key in ("title", "summary", "document"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Validator:
    """Collects every problem of a scenario dict, then raises one ScenarioError."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.errors: list[tuple[str, str]] = []
        self.too_large = False
        self.flavor = "vllm"
        self.runner_given = False
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
        self.runner_given = "model_runner" in raw
        if "model_runner" not in raw:
            v["model_runner"] = "v2" if vllm else "v1"
        elif v["model_runner"] == "v2" and not vllm:
            self.err(
                "config.model_runner",
                f"the {self.flavor} flavour has no Model Runner V2 (it mirrors a V1-style runner): "
                'use "v1"',
            )
        elif v["model_runner"] == "v2" and v["num_speculative_tokens"]:
            self.err(
                "config.model_runner",
                "Model Runner V2 with speculative decoding is not modelled yet: use \"v1\" (the default "
                "when num_speculative_tokens > 0)",
            )
        if "model_runner" not in raw and v["num_speculative_tokens"]:
            v["model_runner"] = "v1"
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
        if cfg.model_runner == "v2" and any(r.image is not None for r in reqs):
            if self.runner_given:
                self.err(
                    "config.model_runner",
                    'Model Runner V2 with M-RoPE (an image in a request) is not modelled yet: use "v1" '
                    "(the default when a request has an image)",
                )
            cfg = dataclasses.replace(cfg, model_runner="v1")
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


def _json_default(value: Any) -> Any:
    if isinstance(value, ModelConfig):
        return asdict(value)
    return list(value) if isinstance(value, tuple) else value


def _property(spec: FieldSpec, limits: Limits, default: Any) -> dict[str, Any]:
    """The JSON Schema of one field, from its spec."""
    doc = spec.doc
    out: dict[str, Any]
    if spec.kind == "custom":
        out = dict(spec.schema or {})
    elif spec.kind == "bool":
        out = {"type": "boolean"}
    elif spec.kind == "str":
        out = {"type": "string", "maxLength": spec.max_len}
    elif spec.kind == "enum":
        out = {"enum": list(spec.choices)}
    else:
        out = {
            "type": "number" if spec.kind == "float" else "integer",
            "minimum": spec.lo if spec.lo is not None else 0,
        }
        if isinstance(spec.hi, int | float):
            out["maximum"] = spec.hi
        elif isinstance(spec.hi, str) and hasattr(limits, spec.hi):
            out["maximum"] = getattr(limits, spec.hi)
            doc += f" (at most the server's {spec.hi})"
        elif spec.hi is not None:
            doc += f" (at most config.{spec.hi})"
    out["description"] = doc
    if default is not dataclasses.MISSING:
        out["default"] = _json_default(default)
    return out


def _object(props: dict[str, dict[str, Any]], doc: str) -> dict[str, Any]:
    return {"type": "object", "description": doc, "properties": props, "additionalProperties": False}


def _dataclass_object(cls: Any, limits: Limits, doc: str) -> dict[str, Any]:
    defaults = {
        f.name: f.default_factory() if callable(f.default_factory) else f.default
        for f in dataclasses.fields(cls)
    }
    return _object({s.name: _property(s, limits, defaults[s.name]) for s in fields_of(cls)}, doc)


def scenario_schema(limits: Limits | None = None) -> dict[str, Any]:
    """The scenario format as a JSON Schema (draft 2020-12), generated from the same field tables
    that the validator reads; bounds that are limits are this server's (`limits`). Rules that
    relate fields to each other are checked by the validator alone; the description lists them."""
    limits = limits or Limits.from_env()
    model = _dataclass_object(ModelConfig, limits, "the tiny transformer's sizes")
    config = _dataclass_object(
        EngineConfig, limits, "the engine configuration; absent fields take their default"
    )
    model_prop = config["properties"]["model"]
    model_prop.pop("type", None)
    model_prop["oneOf"] = [{"type": "null"}, model]
    request = _object(
        {
            s.name: _property(s, limits, s.default if s.default is not None else dataclasses.MISSING)
            for s in REQUEST_FIELDS
        },
        "one request; give exactly one of prompt_token_ids, prompt, prompt_len",
    )
    request["oneOf"] = [{"required": [k]} for k in PROMPT_FIELDS]
    top = {
        s.name: _property(s, limits, s.default if s.kind != "custom" else dataclasses.MISSING)
        for s in SCENARIO_FIELDS
    }
    top["config"] = {**config, "description": SCENARIO_FIELDS[3].doc}
    top["requests"] = {
        "type": "array",
        "description": SCENARIO_FIELDS[4].doc,
        "minItems": 1,
        "maxItems": limits.max_requests,
        "items": request,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "/api/schema/scenario",
        "title": "pagedviz scenario",
        "description": (
            "A scenario for pagedviz (docs/scenario-format.md). Rules across fields, checked when "
            "the scenario is validated: prompt length + max_tokens <= max_model_len; a request's "
            "blocks fit the pool; without chunked prefill (and always for nanovllm) a request fits "
            "max_num_batched_tokens whole; request ids are unique; num_kv_heads divides num_heads; "
            f"prompt + output tokens over all requests <= {limits.max_total_tokens}; "
            f"max_num_reqs * max_model_len <= {limits.max_cells}."
        ),
        "type": "object",
        "properties": top,
        "required": ["requests"],
        "additionalProperties": False,
    }


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


# ----------------------------------------------------------------------------- the cost model
# the dense reference recomputes whole sequences; past this many tokens of context in a step it is skipped
DENSE_CHECK_MAX_TOKENS = 16384


def step_costs(s: Scenario) -> dict[str, int]:
    """Upper bounds of what one step of `s` can cost, from its config and requests alone.

    L is the longest sequence (prompt + max_tokens), T the padded tokens of a step, rows the
    requests a step can hold. Paged attention scores one request's queries against its context
    (<= T * L per head); the dense check recomputes whole sequences (<= L * L per head, over at
    most DENSE_CHECK_MAX_TOKENS tokens of context in a step); the ascend mask is causal over L.
    """
    c, m = s.config, s.config.model
    lens = [len(r.prompt_token_ids) + r.max_tokens for r in s.requests]
    L, total = max(lens), sum(lens)
    rows = min(c.max_num_reqs, len(lens))
    T = max(c.max_num_batched_tokens, max(c.cudagraph_capture_sizes or (0,)))
    context = min(rows * L, total)
    mask = L * max(L, min(T, total)) if s.flavor == "ascend" else 0
    blocks_per_req = math.ceil(c.max_model_len / c.block_size)
    trace = 8 * 16 * T + rows * 4 * (c.max_model_len + blocks_per_req) + mask + 3 * 40 * c.num_kv_blocks
    costs = {"tokens": T, "context": context, "mask": mask, "trace": trace, "scores": 0, "flop": 0}
    if m is not None:
        h, d = m.num_heads, m.head_size
        per_layer = (m.num_params() - 2 * m.vocab_size * m.hidden_size) // m.num_layers
        fwd = min(T, total) + min(context, DENSE_CHECK_MAX_TOKENS)
        costs["scores"] = h * L * L
        costs["flop"] = (
            m.num_layers * (2 * per_layer + 4 * h * d * L) * fwd + 2 * m.hidden_size * m.vocab_size * rows
        )
        costs["kv"] = m.num_layers * 2 * c.num_kv_blocks * c.block_size * m.num_kv_heads * d
    return costs


def cost_problems(s: Scenario, limits: Limits) -> list[tuple[str, str]]:
    """Each size over its limit, as (field, message naming the limit and the setting that raises it)."""
    k = step_costs(s)
    m = s.config.model
    checks = [
        (
            "config.max_num_batched_tokens",
            s.config.max_num_batched_tokens,
            "max_tokens_per_step",
            "tokens per step",
        ),
        (
            "config.cudagraph_capture_sizes",
            max(s.config.cudagraph_capture_sizes or (0,)),
            "max_tokens_per_step",
            "the largest capture size",
        ),
        ("config", k["mask"], "max_mask_cells", "cells of the ascend attention mask of one step"),
        ("config", k["trace"] >> 10, "max_step_trace_kb", "KiB of trace one step may hold"),
    ]
    if m is not None:
        checks += [
            ("config.model.vocab_size", m.vocab_size, "max_vocab_size", "vocab_size"),
            (
                "config.model",
                k["context"],
                "max_context_tokens",
                "tokens of context one step may attend over",
            ),
            (
                "config.model",
                k["scores"],
                "max_attention_scores",
                "attention scores of the longest sequence (num_heads x length^2)",
            ),
            (
                "config.model",
                k["flop"] // 1_000_000,
                "max_step_mflop",
                "million flops one step's forward may take",
            ),
            ("config.num_kv_blocks", k["kv"], "max_kv_cache_elems", "elements of the KV cache (all layers)"),
        ]
    out = []
    for loc, value, name, what in checks:
        limit = getattr(limits, name)
        if value > limit:
            hint = ' or set "model": null' if m is not None and loc.startswith("config.model") else ""
            out.append(
                (loc, f"{what}: {value} is over the limit {limit} (PAGEDVIZ_{name.upper()} raises it){hint}")
            )
    return out
