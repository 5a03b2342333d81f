"""Speculative decoding as vLLM v1 does it with the n-gram (prompt-lookup) drafter.

- `ngram_propose`: vLLM's `NgramProposer` (vllm/v1/spec_decode/ngram_proposer.py): find the
  longest n-gram, `prompt_lookup_min <= n <= prompt_lookup_max`, that ends the request's tokens
  and also occurs earlier in them (the earliest such occurrence), and propose the (up to k) tokens
  that followed it. No second model: the request's own tokens are the draft model.
- `calc_spec_decode_metadata`: `GPUModelRunner._calc_spec_decode_metadata`, which turns the draft
  counts into the rows of the hidden states the LM head reads (`logits_indices`), the rows that
  verify drafts (`target_logits_indices`) and the rows whose token is the bonus
  (`bonus_logits_indices`), without a Python loop.
- `greedy_accept`: the rejection sampler with greedy targets: drafts are accepted while they equal
  the target model's own choice; the first mismatch is replaced by the target's token (and ends the
  run); if all drafts pass, the bonus token is added. The scheduler then rolls
  `num_computed_tokens` back by the rejected drafts.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def cumsum_and_arange(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[2, 5, 3] -> cumsum [2, 7, 10] and arange [0, 1, 0, 1, 2, 3, 4, 0, 1, 2]
    (`GPUModelRunner._get_cumsum_and_arange`)."""
    cu = np.cumsum(counts, dtype=np.int64)
    total = int(cu[-1]) if len(cu) else 0
    return cu, np.arange(total, dtype=np.int64) - np.repeat(cu - counts, counts)


def calc_spec_decode_metadata(
    num_draft_tokens: np.ndarray, cu_num_scheduled_tokens: np.ndarray
) -> dict[str, np.ndarray]:
    """vLLM's worked example: cu_num_scheduled_tokens [4, 104, 107, 207, 209] and
    num_draft_tokens [3, 0, 2, 0, 1] give logits_indices [0, 1, 2, 3, 103, 104, 105, 106, 206,
    207, 208], target_logits_indices [0, 1, 2, 5, 6, 9], bonus_logits_indices [3, 4, 7, 8, 10]."""
    num_draft_tokens = np.asarray(num_draft_tokens, dtype=np.int64)
    cu_num_scheduled_tokens = np.asarray(cu_num_scheduled_tokens, dtype=np.int64)
    num_sampled_tokens = num_draft_tokens + 1
    cu_num_sampled_tokens, sampled_arange = cumsum_and_arange(num_sampled_tokens)
    logits_indices = np.repeat(cu_num_scheduled_tokens - num_sampled_tokens, num_sampled_tokens)
    logits_indices += sampled_arange
    bonus_logits_indices = cu_num_sampled_tokens - 1
    cu_num_draft_tokens, draft_arange = cumsum_and_arange(num_draft_tokens)
    target_logits_indices = np.repeat(cu_num_sampled_tokens - num_sampled_tokens, num_draft_tokens)
    target_logits_indices += draft_arange
    return {
        "num_draft_tokens": num_draft_tokens,
        "cu_num_draft_tokens": cu_num_draft_tokens,
        "num_sampled_tokens": num_sampled_tokens,
        "cu_num_sampled_tokens": cu_num_sampled_tokens,
        "logits_indices": logits_indices,
        "target_logits_indices": target_logits_indices,
        "bonus_logits_indices": bonus_logits_indices,
    }


def ngram_propose(tokens: np.ndarray, min_n: int, max_n: int, k: int, max_model_len: int) -> list[int]:
    """Up to k draft tokens for a request whose known tokens are `tokens` (empty if no match)."""
    total = len(tokens)
    k = min(k, max_model_len - total)
    if total < min_n or k <= 0:
        return []
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        # windows starting at 0 .. total-1-n: every earlier occurrence, never the suffix itself
        windows = sliding_window_view(tokens[:-1], n)
        hits = np.flatnonzero((windows == tokens[total - n :]).all(axis=1))
        if len(hits):
            start = int(hits[0]) + n
            return tokens[start : start + k].tolist()
    return []


def greedy_accept(draft_token_ids: np.ndarray, target_token_ids: np.ndarray) -> tuple[list[int], int]:
    """One request: its drafts and the target's greedy tokens at its len(drafts) + 1 logits rows.
    Returns (the tokens it outputs, how many drafts were accepted)."""
    k = len(draft_token_ids)
    mismatch = np.flatnonzero(draft_token_ids != target_token_ids[:k])
    accepted = int(mismatch[0]) if len(mismatch) else k
    return target_token_ids[: accepted + 1].tolist(), accepted
