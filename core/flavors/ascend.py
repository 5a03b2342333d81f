"""The ascend flavour: vLLM's scheduling and inputs plus vllm-ascend's attention state and mask.

`attn_state` follows vllm-ascend's `NPUModelRunner._build_attn_state` (worker/model_runner_v1.py;
`build_attn_state` in worker/v2/attn_utils.py agrees) at `UPSTREAM`, first match wins:

1. PrefillNoCache  -- no request has computed tokens (`seq_lens == num_scheduled_tokens`);
2. DecodeOnly      -- every request has one scheduled token (SpecDecoding instead with an MTP drafter);
3. SpecDecoding    -- every request has one *valid* (non-draft) token and an MTP drafter; with any
                      other drafter the runner keeps ChunkedPrefill (`self.attn_state`);
4. ChunkedPrefill  -- chunked prefill is on;
5. PrefillCacheHit -- otherwise: chunked prefill off and some request prefills over computed tokens
                      (a prefix-cache hit or a resumed request), or a decode beside a prefill.

With speculative decoding (`num_speculative_tokens`), `num_valid_tokens = num_scheduled_tokens -
num_draft_tokens`; `speculative_method: "mtp"` makes a decode with drafts SpecDecoding (preset
ascend-spec-decoding), while the n-gram drafter's steps are stored as ChunkedPrefill, as upstream.

`attn_mask` is the mask each state gets from the mask builder the seed documents describe
(vllm-ascend `_make_attention_mask`, commit `DOC_MASK_COMMIT`): PrefillNoCache one causal
[max_seq_len, max_seq_len] matrix shared by every request; ChunkedPrefill the rows of that matrix
picked by `positions` ([T, max_seq_len]); PrefillCacheHit a fixed causal [128, 128] matrix;
DecodeOnly and SpecDecoding none (SpecDecoding reads a separate 2048 x 2048 `spec_attn_mask`).
1 marks a masked score (-inf before softmax). At `UPSTREAM` the builder no longer cuts masks per
state: `AttentionMaskBuilder.get_attention_mask` returns one `triu(ones(2048, 2048), 1)` int8
mask for every causal state, and the fused attention kernel (`sparse_mode=3`, right-down causal)
aligns it to each request's last key, so query j of a request sees keys 0..positions[j] -- the
same rows ChunkedPrefill picks; `attn_mask_head` in the scalars says so per step.
"""

from __future__ import annotations

import numpy as np

from pagedviz.core.engine import PagedvizEngine
from pagedviz.core.flavor_table import register_flavor
from pagedviz.core.runners.stages import stage
from pagedviz.core.runners.v1 import ModelRunner

UPSTREAM = "vllm-ascend 182b75ea84"  # the vllm-ascend HEAD this flavour's state selection follows
DOC_MASK_COMMIT = "2bfbf9b9b3"  # vllm-ascend's per-state mask builder that documents 000/001/003 describe
PREFILL_CACHE_HIT_MASK = 128  # `get_attn_mask(128, ...)` for PrefillCacheHit in that builder
HEAD_MASK = (
    "triu(ones(2048, 2048), 1) int8, one mask for every causal state; the kernel (sparse_mode=3) "
    "aligns it to each request's last key"
)

STATES = ("PrefillNoCache", "DecodeOnly", "SpecDecoding", "ChunkedPrefill", "PrefillCacheHit")


def causal_mask(size: int) -> np.ndarray:
    return np.triu(np.ones((size, size), dtype=np.uint8), k=1)


def build_attn_state(
    seq_lens: np.ndarray,
    num_scheduled_tokens: np.ndarray,
    num_valid_tokens: np.ndarray,
    enable_chunked_prefill: bool,
    spec_method: str | None = None,
) -> tuple[str, str]:
    """vllm-ascend's `_build_attn_state`: (the state it returns, the state the metadata carries).

    They differ in one case: SpecDecoding chosen for a drafter other than MTP, which the runner
    stores as ChunkedPrefill. `spec_method` is None without speculative decoding."""
    if np.array_equal(seq_lens, num_scheduled_tokens):
        state = "PrefillNoCache"
    elif np.all(num_scheduled_tokens == 1):
        state = "SpecDecoding" if spec_method == "mtp" else "DecodeOnly"
    elif np.all(num_valid_tokens == 1):
        state = "SpecDecoding" if spec_method is not None else "ChunkedPrefill"
    elif enable_chunked_prefill:
        state = "ChunkedPrefill"
    else:
        state = "PrefillCacheHit"
    used = "ChunkedPrefill" if state == "SpecDecoding" and spec_method != "mtp" else state
    return state, used


def attn_mask_for(state: str, positions: np.ndarray, max_seq_len: int) -> np.ndarray | None:
    """The mask the documents' builder makes for `state` (None where it makes none)."""
    if state == "PrefillNoCache":
        return causal_mask(max_seq_len)
    if state == "ChunkedPrefill":
        return causal_mask(max(max_seq_len, 1))[positions]
    if state == "PrefillCacheHit":
        return causal_mask(PREFILL_CACHE_HIT_MASK)
    return None


class AscendModelRunner(ModelRunner):
    flavor = "ascend"
    STAGES = (*ModelRunner.STAGES, "_attn_mask")

    def spec_decoding(self) -> tuple[np.ndarray | None, str | None]:
        """Draft tokens per request and the drafter's method (None without speculative decoding)."""
        drafts = self.v.get("num_draft_tokens")
        method = self.config.speculative_method if self.config.num_speculative_tokens else None
        return (None if drafts is None else np.asarray(drafts)), method

    @stage(
        "attn_mask",
        "seq_lens num_scheduled_tokens positions",
        "attn_state attn_mask",
        "attn_state (first match): PrefillNoCache if seq_lens == num_scheduled_tokens; DecodeOnly if "
        "all num_scheduled_tokens == 1 (SpecDecoding with MTP); SpecDecoding (MTP) / ChunkedPrefill if "
        "all num_valid_tokens == 1; ChunkedPrefill if chunked prefill is on; else PrefillCacheHit. "
        "attn_mask: PrefillNoCache causal[max_seq_len, max_seq_len]; ChunkedPrefill "
        "causal[max_seq_len, max_seq_len][positions] -> [T, max_seq_len]; PrefillCacheHit causal[128, 128]; "
        "DecodeOnly none. A decode token's row (position seq_len - 1) is 0 over its own keys 0..seq_len-1; "
        "its 1s lie past seq_len, where it has no keys -- all-zero only for the longest request. "
        "At HEAD one triu(2048, 2048) mask serves every state (kernel sparse_mode=3).",
    )
    def _attn_mask(self) -> None:
        v = self.v
        n = v["num_reqs"]
        if n == 0:
            v["scalars"]["attn_state"] = "None"
            v.pop("attn_mask", None)
            return
        scheduled = v["num_scheduled_tokens"]
        drafts, method = self.spec_decoding()
        valid = scheduled if drafts is None else scheduled - drafts
        state, used = build_attn_state(
            v["seq_lens"][:n], scheduled, valid, self.config.enable_chunked_prefill, method
        )
        v["scalars"]["attn_state"] = used
        v["scalars"]["attn_state_source"] = UPSTREAM
        if used != state:
            v["scalars"]["attn_state_built"] = state
        v["scalars"]["attn_mask_head"] = HEAD_MASK + (
            "; or none when _npu_paged_attention runs" if used == "DecodeOnly" else ""
        )
        mask = attn_mask_for(used, v["positions"], int(v["scalars"]["max_seq_len"]))
        if mask is None:
            v.pop("attn_mask", None)
        else:
            v["attn_mask"] = mask


@register_flavor("ascend")
class AscendEngine(PagedvizEngine):
    """vLLM's scheduling with vllm-ascend's attention state and mask."""

    flavor = "ascend"
    upstream = UPSTREAM
    runner_cls = AscendModelRunner
