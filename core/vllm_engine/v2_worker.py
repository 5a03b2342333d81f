"""Model Runner V2's worker on the CPU, as the V2 side (v2.py) drives it: the imports that must
come first (V2's modules under Triton's interpreter, vLLM's CPU patch set undone on torch), one fix
to the interpreter, vLLM's KV cache configs for a scenario (its `VllmConfig`: config.py), and the
stand-ins for what `GPUModelRunner.__init__` would build (`RunnerStub`, the model and LoRA
states, the CUDA-graph manager). What each stand-in holds, and why, is in v2.py's docstring.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import numpy as np

from pagedviz.core.vllm_engine import env as vllm_env
from pagedviz.core.vllm_engine.env import env as _env

vllm_env.prepare()  # before vLLM: Triton usable, V1 pinned by default (env.py)


def _import_vllm_v2() -> None:
    """Import V2's worker modules with the interpreter on (kernels are bound to it when decorated),
    keeping the torch attributes vLLM's CPU patch set would replace process-wide."""
    import torch

    saved = [
        (obj, name, getattr(obj, name))
        for obj, names in (
            (torch, ("Event",)),
            (torch.cuda, ("Event", "Stream", "set_stream", "current_stream", "stream")),
            (torch.accelerator, ("synchronize", "empty_cache", "get_memory_info")),
            (torch.Tensor, ("pin_memory", "record_stream")),
        )
        for name in names
        if hasattr(obj, name)
    ]
    with _env(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES=""):
        import vllm.v1.worker.cpu.shm  # noqa: F401
        import vllm.v1.worker.gpu.model_runner  # noqa: F401
        import vllm.v1.worker.gpu.spec_decode.ngram.speculator  # noqa: F401
        import vllm.v1.worker.gpu.spec_decode.rejection_sampler  # noqa: F401
        import vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils  # noqa: F401
    for obj, name, value in saved:
        setattr(obj, name, value)


_import_vllm_v2()


def _bool_masks_for_the_interpreter() -> None:
    """Triton's interpreter (3.9.0) refuses a load or store whose mask is an integer array: V2's
    n-gram finalize kernel builds its gather mask as `(k < avail) & write_ok & in_range`, which
    the interpreter types as int64 (a GPU treats any nonzero mask lane as on). Masks become bool
    before the interpreter's load and store; nothing else changes."""
    from triton.runtime import interpreter as ti

    builder = ti.InterpreterBuilder
    if getattr(builder, "_pagedviz_bool_masks", False):
        return
    load, store = builder.create_masked_load, builder.create_masked_store

    def as_bool(mask: Any) -> Any:
        if mask.data.dtype != np.bool_:
            mask = ti.TensorHandle(mask.data.astype(np.bool_), ti.tl.int1)
        return mask

    def masked_load(self: Any, ptrs: Any, mask: Any, *args: Any) -> Any:
        return load(self, ptrs, as_bool(mask), *args)

    def masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *args: Any) -> Any:
        return store(self, ptrs, value, as_bool(mask), *args)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder._pagedviz_bool_masks = True


_bool_masks_for_the_interpreter()

import torch  # noqa: E402
from vllm.config import VllmConfig  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.triton_utils import HAS_TRITON  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig  # noqa: E402
from vllm.v1.worker.block_table import get_block_table_width  # noqa: E402
from vllm.v1.worker.gpu.block_table import BlockTables  # noqa: E402
from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager  # noqa: E402
from vllm.v1.worker.gpu.input_batch import (  # noqa: E402
    InputBuffers,
)
from vllm.v1.worker.gpu.model_runner import GPUModelRunner  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.ngram.speculator import NgramGPUSpeculator  # noqa: E402
from vllm.v1.worker.gpu.states import RequestState  # noqa: E402

from pagedviz.core.scenario import Scenario  # noqa: E402
from pagedviz.core.vllm_engine import groups  # noqa: E402
from pagedviz.core.vllm_engine.config import scheduler_config  # noqa: E402

logging.getLogger("vllm").setLevel(logging.ERROR)  # the CPU platform's advice on block sizes


def check_triton() -> None:
    """Raise if vLLM decided Triton does not work (it was imported before env.prepare())."""
    if not HAS_TRITON:
        raise ImportError(
            "vLLM was imported before env.prepare() made Triton usable (CUDA_VISIBLE_DEVICES='')"
        )


def kv_cache_spec(scenario: Scenario) -> FullAttentionSpec:
    """The spec of a full-attention layer (every group's page is this size: groups.py)."""
    return FullAttentionSpec(
        block_size=scenario.config.block_size, num_kv_heads=1, head_size=8, dtype=torch.float32
    )


def kv_cache_config(scenario: Scenario, vc: VllmConfig | None = None) -> KVCacheConfig:
    """vLLM's KV cache groups for the scenario's layers, planned by vLLM (groups.py)."""
    if vc is None:
        with _env(VLLM_USE_V2_MODEL_RUNNER="1"):
            vc = scheduler_config(scenario, runner="v2")
    return groups.plan(vc, scenario.config)


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class RunnerStub:
    """The fields of a V2 `GPUModelRunner` that the driven methods read (module docstring)."""

    def __init__(self, vc: VllmConfig, scenario: Scenario, kv: KVCacheConfig) -> None:
        cfg = scenario.config
        self.device = torch.device("cpu")
        self.max_num_reqs = cfg.max_num_reqs
        self.max_model_len = cfg.max_model_len
        self.max_num_tokens = cfg.max_num_batched_tokens
        self.num_speculative_steps = K = cfg.num_speculative_tokens
        self.decode_query_len = K + 1  # speculative steps + one sampled token per step
        self.req_states = RequestState(
            max_num_reqs=cfg.max_num_reqs,
            max_model_len=cfg.max_model_len,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            num_speculative_steps=K,
            vocab_size=cfg.vocab_size,
            device=self.device,
        )
        # one block table per KV cache group, as GPUModelRunner sizes them (model_runner.py, the
        # block-table loop of initialize_kv_cache), with each sliding group's reach
        widths = [
            get_block_table_width(
                g.kv_cache_spec.max_num_blocks_per_req(vc, cfg.max_model_len),
                g.kv_cache_spec.block_size,
                token_alignment=g.kv_cache_spec.block_table_token_alignment,
            )
            for g in kv.kv_cache_groups
        ]
        self.block_tables = BlockTables(
            block_sizes=groups.group_block_sizes(kv),
            max_num_reqs=cfg.max_num_reqs,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_blocks_per_group=widths,
            device=self.device,
            sliding_window_reach=groups.sliding_window_reach(kv),
        )
        self.input_buffers = InputBuffers(cfg.max_num_reqs, cfg.max_num_batched_tokens, self.device)
        self.model_state = _ModelState()
        self.lora_state = _LoraState()
        self.model_config = vc.model_config
        self.pooling_runner = None
        self.pp_handler = None
        self.encoder_cache = None
        self.prompt_logprobs_worker = None
        self.adaptive_verification = None
        self.sampler = None
        self.pcp_manager = None
        self.fast_prefill = None
        self.kv_block_zeroer = None
        self.is_last_pp_rank = False
        self.use_pp = False
        self.speculator = NgramGPUSpeculator(vc, self.device, self.req_states) if K else None

    def _remove_request(self, req_id: str) -> bool:
        return bool(GPUModelRunner._remove_request(self, req_id))  # type: ignore[arg-type]


class _ModelState:
    num_new_sampled_tokens_per_step = 1
    add_request = apply_staged_writes = postprocess_state = remove_request = staticmethod(_noop)


class _LoraState:
    add_request = remove_request = staticmethod(_noop)


def graph_manager(vc: VllmConfig, sizes: Any, decode_query_len: int = 1) -> CudaGraphManager | None:
    """vLLM's CudaGraphManager for FULL_AND_PIECEWISE with `sizes`, graphs counted as captured
    (the fields CudaGraphManager.__init__ sets for one rank without LoRA or microbatches)."""
    if not sizes:
        return None
    m = CudaGraphManager.__new__(CudaGraphManager)
    m.vllm_config = vc
    m.max_num_reqs = vc.scheduler_config.max_num_seqs
    m.compilation_config = SimpleNamespace(  # type: ignore[assignment]
        cudagraph_capture_sizes=sorted(sizes), max_cudagraph_capture_size=max(sizes)
    )
    m.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    m.decode_query_len = decode_query_len
    m.varlen_decode = False
    m.ubatch_runner = None
    m.lora_capture_cases = [0]
    m._lora_dispatch_map, m._max_lora_case = m._build_lora_dispatch_map()
    m._candidates, m._capture_descs = {}, {}
    m._init_candidates()
    m._graphs_captured = True
    return m
