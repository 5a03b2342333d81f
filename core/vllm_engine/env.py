"""The process-wide settings vLLM needs before it is first imported, made once, when the engine
`vllm` is first used (`prepare()`; never at pagedviz's import, so pagedviz's own engine runs as
before until then).

- `VLLM_LOGGING_LEVEL=ERROR`, `VLLM_CONFIGURE_LOGGING=0`, `VLLM_TARGET_DEVICE=cpu` (set only where
  unset): vLLM's CPU platform, no pinned memory, no CUDA streams, no log lines on the console
  (the `vllm` logger at ERROR).
- Triton: vLLM decides once, when `vllm.triton_utils` is first imported, whether Triton works. With
  no GPU driver it turns every `@triton.jit` kernel into a placeholder, unless `CUDA_VISIBLE_DEVICES`
  is an empty string (the lenient "distributed environment" branch of
  vllm/triton_utils/importing.py). Model Runner V2's input preparation is made of Triton kernels,
  which this engine runs under Triton's interpreter on the CPU. So `prepare()` imports
  `vllm.triton_utils` with `CUDA_VISIBLE_DEVICES=""` set for that import only; where torch sees a
  GPU, CUDA is initialised first, so hiding the devices for that one import cannot hide them from
  pagedviz's own engine afterwards (torch reads the variable once, when CUDA starts).
- `TRITON_INTERPRET=1` stays set: Triton binds a kernel to the interpreter when the kernel is
  decorated, and vLLM modules imported later may hold kernels V2 calls. Nothing in pagedviz uses
  Triton (its own engine is numpy and eager torch), so this changes nothing else. Triton must not
  have been imported before with the interpreter off (Triton's own jit'd helpers would not be
  interpreted): `prepare()` then says so, and V2 is refused.
- `VLLM_USE_V2_MODEL_RUNNER=0`: with Triton working, `VllmConfig.use_v2_model_runner` would be true
  for every config (vLLM 0.33's default wherever Triton works); the V1 side keeps the V1 scheduler
  paths, and the V2 side sets it to 1 only while it builds its own config and scheduler (both read
  it there, and the scheduler keeps the answer).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_state: dict[str, Any] = {"prepared": False, "triton_problem": None}


@contextmanager
def env(**values: str) -> Iterator[None]:
    """Environment variables set for the block, restored after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def prepare() -> None:
    """Make the settings above, once per process, then import vLLM's Triton decision."""
    if _state["prepared"]:
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
    # unconfigured, vLLM's loggers reach Python's last-resort handler: its warnings about the CPU
    # platform (no vllm._C, block sizes) would print on stderr at every first run
    logging.getLogger("vllm").setLevel(logging.ERROR)
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        _state["triton_problem"] = (
            "Triton was imported before the vllm engine, without its interpreter: V2's kernels "
            "cannot run on the CPU in this process"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    _start_cuda_first()
    try:
        with env(CUDA_VISIBLE_DEVICES=""):
            import vllm.triton_utils  # noqa: F401
    except ImportError:
        pass  # no wheel: the callers say how to install it
    _state["prepared"] = True


def _start_cuda_first() -> None:
    """Initialise CUDA where torch sees a GPU, before CUDA_VISIBLE_DEVICES is emptied for vLLM's
    import: torch keeps the devices it found at its start."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.init()


def triton_problem() -> str | None:
    """Why V2's kernels cannot run in this process (None: they can)."""
    return _state["triton_problem"]


@dataclass
class TinyModelConfig:
    """The attributes of vLLM's ModelConfig that the scheduler and both runners' methods read (V1's
    `_update_states` / `_prepare_inputs`, V2's state and input methods): a text-only decoder, no
    M-RoPE, no tokenizer (prompts are token ids), and the two fields vLLM's KV cache planner reads
    (groups.py). Building a real ModelConfig needs Hugging Face files; both sides use this one."""

    max_model_len: int
    vocab_size: int
    uses_mrope: bool = False
    runner_type: str = "generate"
    is_diffusion: bool = False
    is_encoder_decoder: bool = False
    supports_multimodal_inputs: bool = False
    is_multimodal_model: bool = False
    return_sampling_mask: bool = False
    enable_prompt_embeds: bool = False
    skip_tokenizer_init: bool = True  # no tokenizer: prompts are token ids
    multimodal_config: Any = None
    hf_config: Any = None
    rswa_window: Any = None
    # read by vLLM's KV cache planner (groups.py): no model-declared grouping
    supports_kv_cache_grouping: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def get_vocab_size(self) -> int:
        return self.vocab_size

    @property
    def original_max_model_len(self) -> int:
        """The planner's auto-fit runs only for -1 (never here: the scenario names the length)."""
        return self.max_model_len
