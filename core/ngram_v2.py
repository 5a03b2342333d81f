"""Model Runner V2's n-gram speculator (vLLM 0.33, `vllm/v1/worker/gpu/spec_decode/ngram/speculator.py`,
`NgramGPUSpeculator`), with numpy over the whole batch at once.

It runs on the worker after `post_update`, over each batch row's slot of `all_token_ids` (the
prompt and every token sampled so far, `total_len` of them), and differs from V1's drafter
(core/spec_decode.py) in three ways:
- among the n-grams `prompt_lookup_min <= n <= prompt_lookup_max` that end the tokens and occur
  earlier, the longest wins and, for that n, the RIGHTMOST earlier occurrence (V1: the earliest);
  an occurrence must leave at least one token after it (`pos + n <= total_len - 1`);
- it always proposes exactly `num_speculative_tokens` drafts: the tokens that followed the match,
  and where they run out (or there is no match, or the row sampled nothing) the row's last
  sampled token (`last_sampled_tokens`), which verification may reject like any other draft;
- a row that sampled nothing this step (a partial prefill) gets drafts too (all the last sampled
  token of its slot); the scheduler drops them (`update_draft_token_ids` skips prefill chunks).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def ngram_propose_v2(
    tokens: np.ndarray,
    total_len: np.ndarray,
    num_sampled: np.ndarray,
    last_sampled: np.ndarray,
    min_n: int,
    max_n: int,
    k: int,
) -> np.ndarray:
    """Drafts [R, k] (int64) for R batch rows.

    tokens: [R, L] each row's slot of all_token_ids; total_len: [R] its valid length;
    num_sampled: [R] tokens the row sampled this step; last_sampled: [R] its slot's
    last_sampled_tokens (after post_update)."""
    R, L = tokens.shape
    seq_len = total_len.astype(np.int64)
    eligible = (num_sampled > 0) & (seq_len >= min_n)
    # score n * (L + 1) + pos + 1: one max gives the longest n, then the rightmost pos
    best = np.zeros(R, dtype=np.int64)
    rows = np.arange(R)[:, None]
    for n in range(min_n, min(max_n, L - 1) + 1):
        windows = sliding_window_view(tokens, n, axis=1)  # [R, L - n + 1, n]
        suffix_at = seq_len[:, None] - n + np.arange(n)  # [R, n]
        suffix = np.where(suffix_at >= 0, tokens[rows, suffix_at.clip(0)], -1)
        match = (windows == suffix[:, None, :]).all(axis=2)
        pos = np.arange(windows.shape[1])
        match &= pos[None, :] <= (seq_len - n - 1)[:, None]
        score = np.where(match, n * (L + 1) + pos + 1, 0).max(axis=1)
        best = np.maximum(best, score)
    has_match = eligible & (best > 0)
    s1 = best - 1
    best_n = s1 // (L + 1)
    start = np.where(has_match, s1 - best_n * (L + 1) + best_n, 0)
    at = start[:, None] + np.arange(k)  # [R, k]
    valid = has_match[:, None] & (at < seq_len[:, None])
    gathered = tokens[rows, at.clip(max=L - 1)].astype(np.int64)
    return np.where(valid, gathered, last_sampled.astype(np.int64)[:, None])


def gather_draft_sampled(
    input_ids: np.ndarray,
    positions: np.ndarray,
    logits_indices: np.ndarray,
    expanded_local_pos: np.ndarray,
    expanded_prefill_len: np.ndarray,
) -> np.ndarray:
    """`gather_draft_sampled` (rejection_sampler.py): the input token at each logits row (the
    last sampled token at local position 0, then the drafts), -1 for a draft slot of a row
    that starts inside its prefill (a placeholder, always rejected)."""
    token = input_ids[logits_indices].astype(np.int64)
    start = positions[logits_indices] - expanded_local_pos
    placeholder = (expanded_local_pos > 0) & (start < expanded_prefill_len)
    return np.where(placeholder, -1, token)


def greedy_verify(target: np.ndarray, draft_sampled: np.ndarray, cu_num_logits: np.ndarray) -> np.ndarray:
    """V2's rejection sampler with greedy targets, all rows at once: row i's draft at local
    position j + 1 is accepted while every draft before it was and it equals the target's token
    at local position j; returns num_sampled = accepted + 1 per row (before
    `get_num_sampled_and_rejected` zeroes the partial prefills)."""
    R = len(cu_num_logits) - 1
    starts = cu_num_logits[:-1].astype(np.int64)
    num_logits = np.diff(cu_num_logits).astype(np.int64)
    n = int(cu_num_logits[-1]) if R else 0
    local = np.arange(n, dtype=np.int64) - np.repeat(starts, num_logits)
    row = np.repeat(np.arange(R), num_logits)
    # logits row t verifies the draft at t + 1 (same request) against its target token
    verifies = local < np.repeat(num_logits - 1, num_logits)
    t = np.flatnonzero(verifies)
    draft = draft_sampled[t + 1]
    fail = (draft < 0) | (draft != target[t])  # a placeholder (-1) is never a valid draft
    first_fail = num_logits - 1
    np.minimum.at(first_fail, row[t[fail]], local[t[fail]])
    return (first_fail + 1).astype(np.int32)
