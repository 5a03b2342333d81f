"""Engine configuration and the scenario format (DESIGN.md §6).

A scenario is plain JSON: a name, a flavour, a seed, an engine config and a list of requests.
`Scenario.from_dict` validates everything before anything runs and reports each problem with the
field path and the rule it breaks, so the CLI and the REST API can show the same clear message.
Prompts may be token ids, a length (ids drawn from the seed) or text (a byte-level tokenizer).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

FLAVORS = ("vllm", "ascend", "nanovllm")
DEVICES = ("auto", "cpu", "cuda", "npu")

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


@dataclass(frozen=True)
class Limits:
    """Bounds that keep any scenario finite; overridable by environment (PAGEDVIZ_MAX_*)."""

    max_requests: int = 256
    max_cells: int = 4_000_000  # cells of token_ids_cpu (max_num_reqs * max_model_len)
    max_total_tokens: int = 200_000  # prompt + output tokens over all requests
    max_steps: int = 4096
    max_num_kv_blocks: int = 1_000_000
    max_block_size: int = 4096
    max_model_cells: int = 1 << 24  # parameters of the tiny model
    max_kv_cache_elems: int = 1 << 26  # elements of one layer's KV cache tensor

    @classmethod
    def from_env(cls) -> Limits:
        values: dict[str, int] = {}
        for name in cls.__dataclass_fields__:
            raw = os.environ.get(f"PAGEDVIZ_{name.upper()}")
            if raw is not None and raw.strip().isdigit():
                values[name] = int(raw)
        return cls(**values)


class ScenarioError(ValueError):
    """A scenario broke one or more rules; `errors` holds (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]], *, too_large: bool = False) -> None:
        self.errors = errors
        self.too_large = too_large
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_size: int = 16
    vocab_size: int = 512

    @property
    def hidden_size(self) -> int:
        return self.num_heads * self.head_size

    def num_params(self) -> int:
        h, kv = self.hidden_size, self.num_kv_heads * self.head_size
        per_layer = h * (h + 2 * kv) + h * h + 3 * h * (2 * h) + 2 * h
        return 2 * self.vocab_size * h + self.num_layers * per_layer + h


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16
    max_model_len: int = 240
    max_num_reqs: int = 8
    max_num_batched_tokens: int = 200
    num_kv_blocks: int = 64
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = False
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    device: str = "auto"
    vocab_size: int = 512  # token ids are < vocab_size, with or without a model
    # Policies that changed across vLLM versions (defaults: vLLM 0.33.0, core/upstream.py).
    # Admit a waiting request only if its whole sequence fits the free blocks (else its first chunk).
    scheduler_reserve_full_isl: bool = True
    # Fraction of the pool kept free when admitting waiting requests while others run.
    watermark: float = 0.0
    # "lifo": freed blocks without a hash go to the queue's head (0.33); "fifo": all to the tail.
    free_queue_order: str = "lifo"
    # Apply long_prefill_token_threshold even when one request is running or waiting (older vLLM).
    long_prefill_cap_lone_request: bool = False
    model: ModelConfig | None = field(default_factory=ModelConfig)

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

    @classmethod
    def from_dict(cls, data: Any, limits: Limits | None = None) -> Scenario:
        return _Validator(limits or Limits.from_env()).scenario(data)

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
            reqs.append({"id": r.id, **prompt, "max_tokens": r.max_tokens, "arrival_step": r.arrival_step})
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

    def unknown_keys(self, obj: dict[str, Any], allowed: set[str], loc: str) -> None:
        for key in obj:
            if key not in allowed:
                self.err(f"{loc}.{key}" if loc else str(key), "unknown field")

    def model(self, raw: Any, vocab_size: int | None) -> ModelConfig | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.err("config.model", "must be an object or null")
            return ModelConfig()
        loc = "config.model"
        self.unknown_keys(raw, set(ModelConfig.__dataclass_fields__), loc)
        d = ModelConfig()
        m = ModelConfig(
            num_layers=self.int_field(raw, "num_layers", loc, d.num_layers, 1, 8),
            num_heads=self.int_field(raw, "num_heads", loc, d.num_heads, 1, 64),
            num_kv_heads=self.int_field(raw, "num_kv_heads", loc, d.num_kv_heads, 1, 64),
            head_size=self.int_field(raw, "head_size", loc, d.head_size, 2, 256),
            vocab_size=self.int_field(raw, "vocab_size", loc, vocab_size or d.vocab_size, 8, 1 << 20),
        )
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
        self.unknown_keys(raw, set(EngineConfig.__dataclass_fields__), loc)
        block_size = self.int_field(raw, "block_size", loc, d.block_size, 1, lim.max_block_size)
        max_model_len = self.int_field(raw, "max_model_len", loc, d.max_model_len, 1, 1 << 20)
        max_num_reqs = self.int_field(raw, "max_num_reqs", loc, d.max_num_reqs, 1, 4096)
        budget = self.int_field(raw, "max_num_batched_tokens", loc, d.max_num_batched_tokens, 1, 1 << 20)
        num_kv_blocks = self.int_field(raw, "num_kv_blocks", loc, d.num_kv_blocks, 2, lim.max_num_kv_blocks)
        threshold = self.int_field(
            raw, "long_prefill_token_threshold", loc, d.long_prefill_token_threshold, 0, 1 << 20
        )
        chunked = self.bool_field(raw, "enable_chunked_prefill", loc, d.enable_chunked_prefill)
        prefix = self.bool_field(raw, "enable_prefix_caching", loc, d.enable_prefix_caching)
        device = raw.get("device", "auto")
        if device not in DEVICES:
            self.err(f"{loc}.device", f"must be one of {', '.join(DEVICES)} (got {device!r:.40})")
            device = "auto"
        if max_num_reqs * max_model_len > lim.max_cells:
            self.err(
                loc,
                f"token_ids_cpu would hold {max_num_reqs * max_model_len} cells "
                f"(max_num_reqs * max_model_len); the limit is {lim.max_cells}",
                too_large=True,
            )
        sizes = self.capture_sizes(raw.get("cudagraph_capture_sizes"), budget)
        vocab: int | None = None
        if "vocab_size" in raw:
            vocab = self.int_field(raw, "vocab_size", loc, d.vocab_size, 8, 1 << 24)
        model = self.model(raw.get("model", {}), vocab)
        vocab = model.vocab_size if model is not None else (vocab or d.vocab_size)
        reserve_full = self.bool_field(raw, "scheduler_reserve_full_isl", loc, d.scheduler_reserve_full_isl)
        watermark = raw.get("watermark", d.watermark)
        if not isinstance(watermark, int | float) or isinstance(watermark, bool) or not 0 <= watermark < 1:
            self.err(f"{loc}.watermark", f"must be a number in [0, 1) (got {watermark!r:.40})")
            watermark = d.watermark
        order = raw.get("free_queue_order", d.free_queue_order)
        if order not in ("lifo", "fifo"):
            self.err(f"{loc}.free_queue_order", f'must be "lifo" or "fifo" (got {order!r:.40})')
            order = d.free_queue_order
        lone_cap = self.bool_field(raw, "long_prefill_cap_lone_request", loc, d.long_prefill_cap_lone_request)
        # what vLLM's SchedulerConfig.verify_max_model_len refuses, with its reasons
        vllm_rules = self.flavor != "nanovllm"
        if vllm_rules and not chunked and budget < max_model_len:
            self.err(
                f"{loc}.max_num_batched_tokens",
                f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}). "
                "This effectively limits the maximum sequence length to max_num_batched_tokens and "
                "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
                "decrease max_model_len.",
            )
        if vllm_rules and budget < max_num_reqs:
            self.err(
                f"{loc}.max_num_batched_tokens",
                f"max_num_batched_tokens ({budget}) must be greater than or equal to "
                f"max_num_seqs (max_num_reqs, {max_num_reqs}).",
            )
        if vllm_rules and threshold > max_model_len:
            self.err(
                f"{loc}.long_prefill_token_threshold",
                f"long_prefill_token_threshold ({threshold}) cannot be greater than the "
                f"max_model_len ({max_model_len}).",
            )
        if model is not None:
            elems = 2 * num_kv_blocks * block_size * model.num_kv_heads * model.head_size
            if elems > lim.max_kv_cache_elems:
                self.err(
                    loc,
                    f"one layer's KV cache would hold {elems} elements; the limit is "
                    f"{lim.max_kv_cache_elems} (lower num_kv_blocks or block_size)",
                    too_large=True,
                )
        return EngineConfig(
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_reqs=max_num_reqs,
            max_num_batched_tokens=budget,
            num_kv_blocks=num_kv_blocks,
            long_prefill_token_threshold=threshold,
            enable_chunked_prefill=chunked,
            enable_prefix_caching=prefix,
            cudagraph_capture_sizes=sizes,
            device=device,
            vocab_size=vocab,
            scheduler_reserve_full_isl=reserve_full,
            watermark=float(watermark),
            free_queue_order=str(order),
            long_prefill_cap_lone_request=lone_cap,
            model=model,
        )

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
        allowed = {"id", "prompt_token_ids", "prompt", "prompt_len", "max_tokens", "arrival_step"}
        self.unknown_keys(raw, allowed, loc)
        rid = raw.get("id", str(i))
        if _is_int(rid):
            rid = str(rid)
        if not isinstance(rid, str) or not rid or len(rid) > 64:
            self.err(f"{loc}.id", "must be a non-empty string of at most 64 characters")
            rid = str(i)
        max_tokens = self.int_field(raw, "max_tokens", loc, 8, 1, cfg.max_model_len)
        arrival = self.int_field(raw, "arrival_step", loc, 1, 1, self.limits.max_steps)
        given = [k for k in ("prompt_token_ids", "prompt", "prompt_len") if k in raw]
        if len(given) != 1:
            self.err(loc, "give exactly one of prompt_token_ids, prompt, prompt_len")
            return None
        text: str | None = None
        if given[0] == "prompt_len":
            n = self.int_field(raw, "prompt_len", loc, 1, 1, cfg.max_model_len)
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
        if self.flavor == "nanovllm" and len(ids) + max_tokens > cfg.max_num_batched_tokens:
            self.err(
                loc,
                f"nanovllm prefills whole sequences: prompt length {len(ids)} + max_tokens "
                f"{max_tokens} exceeds max_num_batched_tokens {cfg.max_num_batched_tokens}",
            )
        elif not cfg.enable_chunked_prefill and len(ids) + max_tokens > cfg.max_num_batched_tokens:
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
        return RequestSpec(rid, tuple(ids), max_tokens, arrival, text, given[0] == "prompt_len")

    def scenario(self, data: Any) -> Scenario:
        if not isinstance(data, dict):
            raise ScenarioError([("scenario", "must be a JSON object")])
        allowed = {"name", "flavor", "seed", "config", "requests", "max_steps"}
        allowed |= {"title", "summary", "document"}
        self.unknown_keys(data, allowed, "")
        name = self.str_field(data, "name", "scenario", "untitled", 200)
        flavor = data.get("flavor", "vllm")
        if flavor not in FLAVORS:
            self.err("flavor", f"must be one of {', '.join(FLAVORS)} (got {flavor!r:.40})")
            flavor = "vllm"
        self.flavor = flavor
        seed = self.int_field(data, "seed", "scenario", 0, 0, 2**32 - 1)
        max_steps = self.int_field(data, "max_steps", "scenario", 256, 1, self.limits.max_steps)
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
        if self.errors:
            raise ScenarioError(self.errors, too_large=self.too_large)
        return Scenario(
            name=name,
            flavor=flavor,
            seed=seed,
            config=cfg,
            requests=tuple(reqs),
            max_steps=max_steps,
            title=self.str_field(data, "title", "scenario", "", 200),
            summary=self.str_field(data, "summary", "scenario", "", 2000),
            document=self.str_field(data, "document", "scenario", "", 200),
        )
