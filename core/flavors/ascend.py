"""The ascend flavour: vLLM's scheduling and inputs plus vllm-ascend's attention state and mask.

`attn_state` is PrefillNoCache when no request has computed tokens, DecodeOnly when every request
has one scheduled token, otherwise ChunkedPrefill (PrefillCacheHit with chunked prefill off).
The mask is causal over `max_seq_len`: the whole square for PrefillNoCache, the rows picked by
`positions` for ChunkedPrefill ([T, max_seq_len]), none for DecodeOnly. 1 marks a masked score
(added as -inf before softmax).
"""

from __future__ import annotations

import numpy as np

from pagedviz.core.engine import Engine
from pagedviz.core.registry import register_flavor
from pagedviz.core.runner import ModelRunner, stage


def causal_mask(size: int) -> np.ndarray:
    return np.triu(np.ones((size, size), dtype=np.uint8), k=1)


class AscendModelRunner(ModelRunner):
    flavor = "ascend"
    STAGES = (*ModelRunner.STAGES, "_attn_mask")

    @stage(
        "attn_mask",
        "num_computed_tokens_cpu num_scheduled_tokens positions seq_lens",
        "attn_state attn_mask",
        "PrefillNoCache: causal[max_seq_len, max_seq_len]; ChunkedPrefill: causal[positions] "
        "-> [T, max_seq_len]; DecodeOnly: none",
    )
    def _attn_mask(self) -> None:
        v = self.v
        n = v["num_reqs"]
        computed = self.input_batch.num_computed_tokens_cpu[:n]
        if n == 0:
            state = "None"
        elif not computed.any():
            state = "PrefillNoCache"
        elif (v["num_scheduled_tokens"] == 1).all():
            state = "DecodeOnly"
        elif self.config.enable_chunked_prefill:
            state = "ChunkedPrefill"
        else:
            state = "PrefillCacheHit"
        v["scalars"]["attn_state"] = state
        max_seq_len = v["scalars"]["max_seq_len"]
        if state == "PrefillNoCache":
            v["attn_mask"] = causal_mask(max_seq_len)
        elif state in ("ChunkedPrefill", "PrefillCacheHit"):
            v["attn_mask"] = causal_mask(max_seq_len)[v["positions"]]
        else:
            v.pop("attn_mask", None)


@register_flavor("ascend")
class AscendEngine(Engine):
    """vLLM's scheduling with vllm-ascend's attention state and mask."""

    flavor = "ascend"
    runner_cls = AscendModelRunner
