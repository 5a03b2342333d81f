"""The parts a scenario is made of (docs/scenario-format.md): the engine configuration
(`EngineConfig`, with its tiny model's `ModelConfig`), the requests (`RequestSpec`), the tables of
their fields (from which the pydantic models, the JSON Schema and the documentation are built) and
`ScenarioError`, the error that names every broken rule. The validator (core/validate.py) builds
them; `Scenario` (core/scenario.py) holds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pagedviz.core.fields import FieldSpec, setting
from pagedviz.core.kv_groups import LAYER_TYPES, KVCacheGroup, plan_kv_cache_groups

FLAVORS = ("vllm", "ascend", "nanovllm")
DEVICES = ("auto", "cpu", "cuda", "npu")
RUNNERS = ("v1", "v2")
# what computes a scenario's steps (core/vllm_engine: the engine `vllm`)
ENGINES = ("pagedviz", "vllm")
# vLLM's SchedulingPolicy (vllm/v1/core/sched/request_queue.py)
SCHEDULING_POLICIES = ("fcfs", "priority")
# the most children a request may fan out into (a request's `n`)
MAX_N = 16


class ScenarioError(ValueError):
    """A scenario broke one or more rules; `errors` holds (field path, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]], *, too_large: bool = False) -> None:
        self.errors = errors
        self.too_large = too_large
        super().__init__("; ".join(f"{loc}: {msg}" for loc, msg in errors))


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


LAYER_TYPES_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "null"},
        {"type": "array", "items": {"enum": list(LAYER_TYPES)}, "minItems": 1, "maxItems": 8},
    ]
}


@dataclass(frozen=True)
class EngineConfig:
    """A scenario's `config` section: the serving engine's settings (block size, budgets, pool,
    runner, scheduling policies, model), whichever engine runs it (the scenario's `engine`:
    pagedviz's own, `PagedvizEngine`, or vLLM's, `VllmEngine`). Not an engine itself; the name is
    the scenario format's. core/vllm_settings.py says which field is which vLLM setting."""

    block_size: int = setting(16, "tokens per KV-cache block", lo=1, hi="max_block_size")
    max_model_len: int = setting(
        240, "longest sequence (prompt + output) of a request: the width of token_ids_cpu", lo=1, hi=1 << 20
    )
    max_num_reqs: int = setting(
        8, "rows of the persistent batch: at most this many requests run at once", lo=1, hi=4096
    )
    max_num_batched_tokens: int = setting(
        200, "the scheduler's token budget per step", lo=1, hi="max_tokens_per_step"
    )
    num_kv_blocks: int = setting(
        64,
        "physical blocks in the KV-cache pool (vllm and ascend keep block 0 as the null block)",
        lo=2,
        hi="max_num_kv_blocks",
    )
    long_prefill_token_threshold: int = setting(
        0, "cap on one request's tokens per step while others wait (0: no cap)", lo=0, hi="max_model_len"
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
        lo=8,
        hi=1 << 24,
    )
    model: ModelConfig | None = setting(
        None,
        "the tiny transformer's sizes, or null for fast simulation (no forward pass)",
        schema={},  # filled in by scenario_schema() from ModelConfig's fields
        factory=ModelConfig,
    )
    # the model's attention layers (Hugging Face's config.layer_types), planned into KV cache groups
    layer_types: tuple[str, ...] | None = setting(
        None,
        'each layer\'s attention, in order: "full_attention" or "sliding_attention" (Hugging Face\'s '
        "layer_types); null: every layer full attention, one KV cache group. vLLM plans one block table "
        "per KV cache group (core/kv_groups.py); model.num_layers follows the list",
        schema=LAYER_TYPES_SCHEMA,
    )
    sliding_window: int | None = setting(
        None,
        "tokens a sliding_attention layer attends to (the query's own included); needed with a "
        "sliding_attention layer",
        schema={"oneOf": [{"type": "null"}, {"type": "integer", "minimum": 1, "maximum": 1 << 20}]},
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
        "core's batch queue; vLLM 0.33's default on the vllm flavour, off by default with speculative "
        "decoding on the V1 runner, which vLLM 0.33 refuses to combine with the n-gram drafter); "
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
    scheduling_policy: str = setting(
        "fcfs",
        "vllm flavour: fcfs (first come, first served) or priority (vLLM's --scheduling-policy: the "
        "waiting queue ordered by each request's (priority, arrival), and preemption takes the "
        "running request with the largest (priority, arrival) rather than the last)",
        choices=SCHEDULING_POLICIES,
    )

    @property
    def kv_cache_groups(self) -> tuple[KVCacheGroup, ...]:
        """The KV cache groups vLLM plans for the model's layers (core/kv_groups.py); one group of
        full attention when `layer_types` is null."""
        return plan_kv_cache_groups(
            self.layer_types, self.sliding_window, self.model.num_layers if self.model else 1
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
    FieldSpec(
        "engine",
        "pagedviz",
        "what computes the steps: pagedviz (its own model of the flavour) or vllm (vLLM 0.33.0's own "
        "scheduler, block pool and input preparation, in-process on the CPU; needs "
        "pip install 'pagedviz[vllm]')",
        "enum",
        choices=ENGINES,
    ),
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
        "n",
        1,
        "parallel sampling: the request fans out into n child requests with vLLM's ids "
        "{index}_{id} (ParentRequest.get_child_info), the same prompt and arrival; vllm flavour only",
        lo=1,
        hi=MAX_N,
    ),
    FieldSpec(
        "priority",
        0,
        "the request's priority under config.scheduling_policy priority: lower is served first, and "
        "ties go to the earlier arrival (vLLM's Request.__lt__); ignored under fcfs, as vLLM does",
        lo=-(2**31),
        hi=2**31 - 1,
    ),
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
    n: int = 1  # parallel sampling: the children the request fans out into (core/parallel_sampling.py)
    priority: int = 0  # lower is served first under scheduling_policy "priority"
    # set on the specs the scheduler sees (core/parallel_sampling.py): a child's parent request and
    # index, and the request's place in the scenario's list (its arrival order within a step)
    parent: str | None = None
    index: int = 0
    order: int = 0
