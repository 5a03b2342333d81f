"""Process-wide settings for the differential suite, fixed before anything imports vLLM: both
glues (vllm_side.py, vllm_v2_side.py) import this module before vLLM. (Not a conftest.py: a
second conftest module shadows tests/conftest.py for the other test modules.)

vLLM decides once, when `vllm.triton_utils` is first imported, whether Triton works: with no GPU
driver it turns every `@triton.jit` kernel into a placeholder, unless `CUDA_VISIBLE_DEVICES` is
set to an empty string (the lenient "distributed environment" branch of
vllm/triton_utils/importing.py). Model Runner V2's input preparation is made of Triton kernels,
which the V2 group (vllm_v2_side.py) runs under Triton's interpreter on the CPU. Pytest imports
every test module of this folder before it runs any test, and either glue may come first, so
that decision is taken here, with `CUDA_VISIBLE_DEVICES=""` set only for the import (a GPU,
where there is one, stays visible to the rest of the suite). `TRITON_INTERPRET=1` stays set:
Triton binds a kernel to the interpreter when the kernel is decorated, and vLLM modules imported
by either group may hold kernels V2 calls. Nothing else in the project uses Triton.

With Triton working, `VllmConfig.use_v2_model_runner` would be true for every config (vLLM 0.33's
default wherever Triton works). `VLLM_USE_V2_MODEL_RUNNER=0` keeps the V1 glue on the V1
scheduler paths; the V2 glue sets it to 1 only while it builds its own config and scheduler
(both read it there, and the scheduler keeps the answer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

# the V1 glue's settings (vllm_side.py), needed before vLLM resolves its platform below
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ["TRITON_INTERPRET"] = "1"
os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"


def _triton_for_vllm() -> None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        import vllm.triton_utils  # noqa: F401
    except ImportError:
        pass  # no wheel: the test modules skip and say why
    finally:
        if visible is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible


_triton_for_vllm()


@dataclass
class TinyModelConfig:
    """The attributes of vLLM's ModelConfig that the scheduler and both runners' methods read (V1's
    `_update_states` / `_prepare_inputs`, V2's state and input methods): a text-only decoder, no
    M-RoPE, no tokenizer (prompts are token ids). Building a real ModelConfig needs Hugging Face
    files; both glues use this one."""

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
    extra: dict[str, Any] = field(default_factory=dict)

    def get_vocab_size(self) -> int:
        return self.vocab_size
