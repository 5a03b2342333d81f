"""Model Runner V2's side of n-gram speculative decoding (vLLM 0.33, `vllm/v1/worker/gpu/`),
mixed into `ModelRunnerV2` (core/runners/v2.py): the drafts live on the worker, in each state
slot's `draft_tokens`; the scheduler only sends how many each request verifies.

- stage `num_logits`: `cu_num_logits` and `expand_idx_mapping` (one entry per logits row);
- `_combine_drafts`: `combine_sampled_and_draft_tokens` with drafts: a verify row's input ids are
  [last sampled, d1 .. dk], its last k + 1 tokens give the logits;
- `post_update_spec`: `post_update` with `num_sampled` / `num_rejected` from the rejection
  sampler (core/ngram_v2.py greedy_verify): num_computed_tokens advances by n - num_rejected;
- `propose_drafts`: `NgramGPUSpeculator.propose` (core/ngram_v2.py) into the slots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pagedviz.core.ngram_v2 import ngram_propose_v2
from pagedviz.core.runners.stages import stage
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.table_changes import TableChanges


class V2SpecDecode:
    """The speculative-decoding stages and state updates of Model Runner V2 (module docstring)."""

    v: dict[str, Any]
    config: EngineConfig
    device: torch.device
    num_spec: int
    max_model_len: int
    draft_tokens: np.ndarray
    draft_tokens_dev: torch.Tensor
    token_changes: TableChanges
    last_sampled_tokens: np.ndarray
    last_sampled_dev: torch.Tensor
    num_computed_tokens: np.ndarray
    num_computed_dev: torch.Tensor
    total_len: np.ndarray
    all_token_ids: np.ndarray
    all_token_ids_dev: torch.Tensor

    @stage(
        "num_logits",
        "num_scheduled_tokens scheduled_spec_decode_tokens idx_mapping",
        "num_draft_tokens cu_num_logits expanded_idx_mapping expanded_local_pos",
        "num_logits = num_draft_tokens + 1; cu_num_logits = [0, cumsum(num_logits)]; "
        "expanded_idx_mapping[cu_num_logits[i] + j] = idx_mapping[i], "
        "expanded_local_pos[cu_num_logits[i] + j] = j for j < num_logits[i]",
        "prepare_inputs (model_runner.py:1411-1481) and expand_idx_mapping (input_batch.py:721-759): "
        "a row that verifies d drafts needs d + 1 logits (one per draft, plus the bonus token's), so "
        "cu_num_logits counts them per row. The scheduler sends only how many drafts each request "
        "gets (their values are -1 placeholders); the values stay on the worker. The sampler works "
        "per logits row, so idx_mapping is expanded to one entry per logits row, with the row's "
        "local position (0 = the last sampled token's row, then the drafts').",
        when=lambda r: r.num_spec > 0,
        title=("Logits rows per request", "每个请求的 logits 行"),
        why_zh=(
            "有草稿时，验证 d 个草稿的行需要 d + 1 个 logits 行：cu_num_logits 统计它们，expanded_idx_m"
            "apping / expanded_local_pos 把每个 logits 行映射到它的槽位和它在行内的位置。调度器只发送草"
            "稿个数；草稿的值留在槽位的 draft_tokens 里。"
        ),
    )
    def _num_logits(self) -> None:
        v = self.v
        R = v["num_reqs"]
        d = v["batch_num_draft"]
        num_logits = d + 1
        cu = np.zeros(R + 1, dtype=np.int32)
        np.add.accumulate(num_logits, out=cu[1:])
        total = int(cu[R])
        v["num_draft_tokens"] = d
        v["cu_num_logits"] = cu
        v["expanded_idx_mapping"] = np.repeat(v["idx_mapping"], num_logits)
        v["expanded_local_pos"] = (np.arange(total, dtype=np.int32) - np.repeat(cu[:R], num_logits)).astype(
            np.int32
        )

    def _combine_drafts(self, decoding: np.ndarray) -> None:
        """combine_sampled_and_draft_tokens with drafts (input_batch.py:414-513): each row's
        logits rows are its last num_draft_tokens + 1 tokens; a decoding row gets its slot's last
        sampled token first (where that position is past the prompt), then its slot's drafts."""
        v = self.v
        idx = v["idx_mapping"]
        qend = v["cu_num_tokens"]
        prefill_len = v["slot_prefill_len"]
        d = v["num_draft_tokens"].astype(np.int64)
        num_logits = d + 1
        start = qend - num_logits
        v["logits_indices"] = np.repeat(start, num_logits) + v["expanded_local_pos"]
        # the last sampled token goes in only where its position is past the prompt
        write_last = decoding & (v["seq_lens"] - num_logits >= prefill_len)
        v["input_ids"][start[write_last]] = self.last_sampled_tokens[idx[write_last]]
        has = decoding & (d > 0)
        nd = d[has]
        k = np.arange(int(nd.sum())) - np.repeat(np.cumsum(nd) - nd, nd)
        at = np.repeat(qend[has] - nd, nd) + k
        src = np.repeat(idx[has], nd)
        v["input_ids"][at] = self.draft_tokens[src, k]
        # where the device writes (internal)
        v["last_at"], v["last_src"] = start[write_last], idx[write_last]
        v["draft_at"], v["draft_src"] = at, (src, k)

    def post_update_spec(self, target: np.ndarray, num_sampled: np.ndarray, num_rejected: np.ndarray) -> None:
        """post_update with drafts (input_batch.py:565-686): row i's num_sampled[i] tokens (the
        target's tokens at its first logits rows: the accepted drafts, then the correction or the
        bonus) go after its slot's total_len, the last becomes last_sampled_tokens, and the slot's
        num_computed_tokens advances by n[i] - num_rejected[i]. On the CPU mirror and the device."""
        v = self.v
        idx = v["idx_mapping"]
        n = v["num_scheduled_tokens"].astype(np.int64)
        self.num_computed_tokens[idx] += (n - num_rejected).astype(np.int32)
        cu = v["cu_num_logits"].astype(np.int64)
        num_logits = np.diff(cu)
        keep = v["expanded_local_pos"] < np.repeat(num_sampled, num_logits)
        slots = v["expanded_idx_mapping"][keep]
        at = np.repeat(self.total_len[idx].astype(np.int64), num_logits)[keep] + v["expanded_local_pos"][keep]
        tokens = target[keep].astype(np.int64)
        room = at < self.max_model_len
        self.all_token_ids[slots[room], at[room]] = tokens[room]
        self.token_changes.wrote_entries(slots[room], at[room])
        sampled = num_sampled > 0
        self.last_sampled_tokens[idx[sampled]] = target[cu[:-1][sampled] + num_sampled[sampled] - 1]
        self.total_len[idx] += num_sampled
        dev = self.device
        idx_dev = torch.from_numpy(idx).to(dev)
        self.num_computed_dev[idx_dev] += torch.from_numpy(n - num_rejected).to(dev)
        self.last_sampled_dev[idx_dev] = torch.from_numpy(self.last_sampled_tokens[idx]).to(dev)
        rows = torch.from_numpy(slots[room]).to(dev)
        self.all_token_ids_dev[rows, torch.from_numpy(at[room]).to(dev)] = torch.from_numpy(tokens[room]).to(
            dev, torch.int32
        )

    def propose_drafts(self, num_sampled: np.ndarray) -> np.ndarray:
        """NgramGPUSpeculator.propose after post_update (model_runner.py:2307-2326): drafts for
        every batch row, scattered into the rows' slots of draft_tokens; returns them [R, K]."""
        v = self.v
        idx = v["idx_mapping"]
        cfg = self.config
        drafts = ngram_propose_v2(
            self.all_token_ids[idx],
            self.total_len[idx],
            num_sampled,
            self.last_sampled_tokens[idx],
            cfg.prompt_lookup_min,
            cfg.prompt_lookup_max,
            self.num_spec,
        )
        self.draft_tokens[idx] = drafts
        dev = self.device
        self.draft_tokens_dev[torch.from_numpy(idx).to(dev)] = torch.from_numpy(drafts).to(dev)
        return drafts
