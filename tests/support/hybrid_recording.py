"""Records vLLM 0.33.0's own Scheduler with its hybrid KV cache manager on, under pagedviz.record,
as a GPU server runs it: the shipped example core/recordings/real-vllm-hybrid.jsonl is made here.

    .venv/bin/python tests/support/hybrid_recording.py            # rewrites the shipped example
    .venv/bin/python tests/support/hybrid_recording.py OUT.jsonl  # writes it elsewhere

What is vLLM's: the configs, the KV cache groups as vLLM plans them (`get_global_kv_cache_groups`,
one spec per layer: `FullAttentionSpec` or `SlidingWindowSpec`), the recording scheduler (vLLM's
`Scheduler` or `AsyncScheduler` with pagedviz.record's wrappers), its `HybridKVCacheCoordinator`,
block pool and free queue, and, with async scheduling, the engine core's batch-queue loop
(core/vllm_engine/loop.py). vLLM's CPU platform turns the hybrid manager off
(`disable_hybrid_kv_cache_manager`, a GPU optimisation); it is set to False before the groups are
planned, as a GPU server has it. What stands in for the model: each request that samples in a
step (its computed tokens reach its known tokens) gets a fixed token, `token(req, k)`, so the file
is the same on every run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from copy import copy
from pathlib import Path
from typing import Any

from pagedviz.core.vllm_engine import env as vllm_env

vllm_env.prepare()  # before vLLM (env.py)
import torch  # noqa: E402
from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.kv_cache_planning import (  # noqa: E402
    get_global_kv_cache_groups,
    get_kv_cache_configs,
)
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.engine import EngineCoreRequest  # noqa: E402
from vllm.v1.engine.parallel_sampling import ParentRequest  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from pagedviz.core.vllm_engine.loop import EngineCoreLoop  # noqa: E402
from pagedviz.record import RecordingAsyncScheduler, RecordingScheduler  # noqa: E402

# the shipped example: the setup (layer 0 full attention, layer 1 a window of 8 tokens,
# block size 4, 40 blocks, max_model_len 64, max_num_seqs 4, a budget of 64 tokens, prefix caching
# and chunked prefill on; a: ids 1..20, max_tokens 8, and b: ids 1..12, max_tokens 4, at step 1),
# then c, d and e, one a step, until the pool is short and vLLM preempts d
EXAMPLE: dict[str, Any] = {
    "layer_types": ("full_attention", "sliding_attention"),
    "sliding_window": 8,
    "block_size": 4,
    "num_kv_blocks": 40,
    "max_model_len": 64,
    "max_num_seqs": 4,
    "max_num_batched_tokens": 64,
    # (arrival step, id, prompt token ids, max_tokens)
    "requests": (
        (1, "a", tuple(range(1, 21)), 8),
        (1, "b", tuple(range(1, 13)), 4),
        (2, "c", tuple(range(101, 141)), 20),
        (3, "d", tuple(range(301, 331)), 24),
        (4, "e", tuple(range(501, 537)), 20),
    ),
}
VOCAB = 1000
SHIPPED = Path(__file__).resolve().parents[2] / "core" / "recordings" / "real-vllm-hybrid.jsonl"


def token(req_id: str, k: int) -> int:
    """The k-th token a request samples (0-based): fixed, inside the vocabulary."""
    return 400 + (sum(map(ord, req_id)) * 7 + 13 * k) % 500


def _specs(layer_types: Sequence[str], window: int, block_size: int) -> dict[str, KVCacheSpec]:
    common = {"block_size": block_size, "num_kv_heads": 1, "head_size": 8, "dtype": torch.float32}
    specs: dict[str, KVCacheSpec] = {}
    for i, kind in enumerate(layer_types):
        name = f"model.layers.{i}.self_attn.attn"
        if kind == "sliding_attention":
            specs[name] = SlidingWindowSpec(sliding_window=window, **common)
        else:
            specs[name] = FullAttentionSpec(**common)
    return specs


def build(
    layer_types: Sequence[str] = EXAMPLE["layer_types"],
    sliding_window: int = EXAMPLE["sliding_window"],
    block_size: int = EXAMPLE["block_size"],
    num_kv_blocks: int = EXAMPLE["num_kv_blocks"],
    max_model_len: int = EXAMPLE["max_model_len"],
    max_num_seqs: int = EXAMPLE["max_num_seqs"],
    max_num_batched_tokens: int = EXAMPLE["max_num_batched_tokens"],
    async_scheduling: bool = False,
    enable_prefix_caching: bool = True,
    policy: str = "fcfs",
    runner: str = "v1",
) -> Any:
    """The recording scheduler (PAGEDVIZ_RECORD names its file) on vLLM's hybrid manager; `runner`
    v2: vLLM chooses Model Runner V2 (`VLLM_USE_V2_MODEL_RUNNER`, read while the config and the
    scheduler are built), whose scheduler sends resumed requests as new ones."""
    with vllm_env.env(VLLM_USE_V2_MODEL_RUNNER="1" if runner == "v2" else "0"):
        sched = _build(**locals())
    assert sched.use_v2_model_runner == (runner == "v2")
    return sched


def _build(
    layer_types: Sequence[str],
    sliding_window: int,
    block_size: int,
    num_kv_blocks: int,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    async_scheduling: bool,
    enable_prefix_caching: bool,
    policy: str,
    runner: str,
) -> Any:
    sched = SchedulerConfig(
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        enable_chunked_prefill=True,
        async_scheduling=async_scheduling,
        policy=policy,  # type: ignore[arg-type]
    )
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=enable_prefix_caching)
    cache.num_gpu_blocks = num_kv_blocks
    cache.kv_cache_layout = "NHD"  # the engine core resolves it from the attention backends
    vc = VllmConfig(scheduler_config=sched, cache_config=cache, device_config=DeviceConfig(device="cpu"))
    vc.scheduler_config.async_scheduling = async_scheduling  # the CPU platform turns it off
    model = vllm_env.TinyModelConfig(max_model_len, VOCAB)
    model.supports_kv_cache_grouping = False  # type: ignore[attr-defined]  (vLLM plans the groups)
    object.__setattr__(vc, "model_config", model)
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False  # as on a GPU
    specs = _specs(layer_types, sliding_window, block_size)
    groups = get_global_kv_cache_groups(vc, [specs])
    # the KVCacheConfig as the engine core makes it (the prefix cache's retention of sliding
    # blocks included: `prefix_cache_retention_interval`, 0 by default), with the pool's size set
    # as --num-gpu-blocks-override sets it, and vLLM's refusal of a pool that cannot hold one
    # max_model_len request in every group
    cache.num_gpu_blocks_override = num_kv_blocks
    (kv,) = get_kv_cache_configs(vc, [specs], [0], groups)
    assert kv.num_blocks == num_kv_blocks
    cls = RecordingAsyncScheduler if async_scheduling else RecordingScheduler
    return cls(
        vllm_config=vc,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=block_size,
    )


def _vllm_runner(sched: Any, config: dict[str, Any]) -> Any:
    """vLLM's V1 runner as the engine `vllm` drives it (core/vllm_engine/v1.py), on the recording
    scheduler's own configs and KV cache groups."""
    from pagedviz.core.scenario import Scenario
    from pagedviz.core.scenario_parts import EngineConfig
    from pagedviz.core.vllm_engine import v1

    cfg = EngineConfig(
        block_size=config["block_size"],
        max_model_len=config["max_model_len"],
        max_num_reqs=config["max_num_seqs"],
        max_num_batched_tokens=config["max_num_batched_tokens"],
        num_kv_blocks=config["num_kv_blocks"],
        vocab_size=VOCAB,
        model=None,
        device="cpu",
        model_runner="v1",
        async_scheduling=False,
        layer_types=tuple(config["layer_types"]),
        sliding_window=config["sliding_window"],
    )
    runner = v1._Runner(sched.vllm_config, Scenario("hybrid", "vllm", 0, cfg, ()), sched.kv_cache_config)
    if not runner.slot_kernel:
        runner.input_batch.block_table.compute_slot_mapping = lambda *a, **k: None
    return runner


def _requests(
    step: int, rid: str, prompt: Sequence[int], max_tokens: int, n: int, priority: int, hasher: Any
) -> list[Request]:
    """What vLLM's engine core adds for one request: the request, or with n > 1 its children as
    `LLMEngine.add_request` fans them out (vLLM's `ParentRequest` names them `{index}_{id}`)."""
    params = SamplingParams(
        n=n,
        max_tokens=max_tokens,
        ignore_eos=True,
        temperature=0.0 if n == 1 else 1.0,
        seed=None if n == 1 else 0,
    )
    core = EngineCoreRequest(
        request_id=rid,
        prompt_token_ids=list(prompt),
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(step),
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        priority=priority,
        external_req_id=rid,
    )
    if n == 1:
        return [Request.from_engine_core_request(core, hasher)]
    parent = ParentRequest(core)
    children = []
    for idx in range(n):
        child = copy(core)
        child.request_id, child.sampling_params = parent.get_child_info(idx)
        children.append(Request.from_engine_core_request(child, hasher))
    return children


def record(
    path: Path,
    requests: Sequence[tuple[Any, ...]] = EXAMPLE["requests"],
    max_steps: int = 500,
    vllm_runner: bool = False,
    **config: Any,
) -> list[dict[str, Any]]:
    """Record a run to `path`; returns what vLLM's scheduler held after each schedule(), in order:
    the scheduled tokens, preempted ids, each scheduled request's block ids per group
    (`KVCacheManager.get_block_ids`), the free queue (head first) and the free count. A request is
    (arrival step, id, prompt ids, max_tokens[, n[, priority]]). `vllm_runner` (V1, synchronous):
    each batch also runs through vLLM's own V1 runner (the engine `vllm`'s, with its
    MultiGroupBlockTable), whose arrays per group come back as `arrays` and whose bookkeeping makes
    the output update_from_output receives."""
    old = os.environ.get("PAGEDVIZ_RECORD")
    os.environ["PAGEDVIZ_RECORD"] = str(path)
    try:
        sched = build(**config)
    finally:
        if old is None:
            os.environ.pop("PAGEDVIZ_RECORD", None)
        else:
            os.environ["PAGEDVIZ_RECORD"] = old
    init_none_hash(sha256_cbor)
    hasher = get_request_block_hasher(sched.block_size, sha256_cbor)
    kcm = sched.kv_cache_manager
    pool = kcm.block_pool
    arrivals: dict[int, list[tuple[Any, ...]]] = {}
    for step, rid, prompt, max_tokens, *more in requests:
        n = more[0] if more else 1
        priority = more[1] if len(more) > 1 else 0
        arrivals.setdefault(step, []).append((rid, prompt, max_tokens, n, priority))
    produced: dict[str, int] = {}
    seen: list[dict[str, Any]] = []
    runner = _vllm_runner(sched, {**EXAMPLE, **config}) if vllm_runner else None

    def execute(out: Any) -> ModelRunnerOutput:
        seen.append(
            {
                "num_scheduled_tokens": dict(out.num_scheduled_tokens),
                "preempted": sorted(out.preempted_req_ids or ()),
                "finished": sorted(out.finished_req_ids),
                "block_ids": {r: [list(g) for g in kcm.get_block_ids(r)] for r in out.num_scheduled_tokens},
                "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
                "num_free_blocks": pool.get_num_free_blocks(),
            }
        )
        if runner is not None:
            seen[-1]["arrays"] = runner.step(out)
        if not out.total_num_scheduled_tokens:
            return EMPTY_MODEL_RUNNER_OUTPUT
        if runner is not None:
            wanted = {r: token(r, produced.get(r, 0)) for r in out.num_scheduled_tokens}
            result = runner.sampled(out, wanted)
            for r, toks in zip(result.req_ids, result.sampled_token_ids):
                if len(toks):
                    produced[r] = produced.get(r, 0) + 1
            return result
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for r in ids:
            req = sched.requests[r]
            if req.num_computed_tokens >= req.num_tokens:  # the prompt (and outputs) all computed
                k = produced.get(r, 0)
                produced[r] = k + 1
                sampled.append([token(r, k)])
            else:  # a chunk of a prefill: the runner discards its sample
                sampled.append([])
        return ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=sampled
        )

    loop = EngineCoreLoop(sched, execute, 2 if config.get("async_scheduling") else 1)
    step = 0
    while (arrivals or loop.has_work()) and step < max_steps:
        step += 1
        for rid, prompt, max_tokens, n, priority in arrivals.pop(step, []):
            for request in _requests(step, rid, prompt, max_tokens, n, priority, hasher):
                sched.add_request(request)
        loop.step(step)
    sched.shutdown()
    if arrivals or loop.has_work():
        raise RuntimeError(f"the run did not finish in {max_steps} steps")
    return seen


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SHIPPED
    steps = record(out)
    print(f"{out}: {len(steps)} steps")
