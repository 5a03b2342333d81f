"""A tiny real transformer that reads and writes a paged KV cache, and its dense twin.

Per layer: RMSNorm, Q/K/V projections, RoPE on `positions`, grouped-query attention, output
projection, RMSNorm, a SwiGLU MLP; then a final norm and the LM head. Each layer owns one KV cache
tensor shaped `[2, num_kv_blocks, block_size, num_kv_heads, head_size]`, as vLLM lays it out.
The paged forward writes K/V at `slot_mapping` and each request attends over its context gathered
through its `block_table` row, `seq_lens` and `query_start_loc`. The dense reference runs the same
weights over each request's whole sequence with no cache at all; the two must agree, which is what
shows that the metadata is right.

With several KV cache groups (a hybrid model: `config.layer_types`), each layer writes through its
group's `slot_mapping` and reads through its group's block table; a sliding-window layer masks keys
more than `sliding_window - 1` positions before the query (Hugging Face's and vLLM's window: a query
at position p attends to keys at positions > p - sliding_window), in the paged forward and in the
dense reference alike, so they agree layer by layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pagedviz.core.kv_groups import KVCacheGroup
from pagedviz.core.scenario_parts import ModelConfig


@dataclass
class ForwardInputs:
    """The device tensors one paged forward reads (T scheduled tokens, R requests)."""

    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    slot_mapping: torch.Tensor  # [T]
    block_table: torch.Tensor  # [R, K]
    seq_lens: torch.Tensor  # [R]
    query_start_loc: torch.Tensor  # [R + 1]
    logits_indices: torch.Tensor  # [R]
    # with several KV cache groups: each group's slot_mapping [T] and block table [R, K], group 0's
    # first (None: slot_mapping and block_table are the only group's)
    group_slot_mappings: list[torch.Tensor] | None = None
    group_block_tables: list[torch.Tensor] | None = None


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class TinyTransformer:
    def __init__(
        self,
        cfg: ModelConfig,
        seed: int,
        num_kv_blocks: int,
        block_size: int,
        device: torch.device,
        groups: tuple[KVCacheGroup, ...] | None = None,
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.block_size = block_size
        # each layer's KV cache group and, for a sliding-window layer, its window (None: full)
        self.layer_group = [0] * cfg.num_layers
        self.layer_window: list[int | None] = [None] * cfg.num_layers
        for index, group in enumerate(groups or ()):
            for layer in group.layers:
                if layer < cfg.num_layers:
                    self.layer_group[layer] = index
                    self.layer_window[layer] = group.sliding_window if group.sliding else None
        self.num_groups = max(self.layer_group, default=0) + 1
        # the hidden states after each layer of the last paged forward (for the per-layer check)
        self.layer_hidden: list[torch.Tensor] = []
        g = torch.Generator().manual_seed(seed)
        H, d, kvh = cfg.hidden_size, cfg.head_size, cfg.num_kv_heads

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(device)

        self.embed = (torch.randn(cfg.vocab_size, H, generator=g)).to(device)
        self.layers = [
            {
                "attn_norm": torch.ones(H, device=device),
                "wq": w(H, H),
                "wk": w(H, kvh * d),
                "wv": w(H, kvh * d),
                "wo": w(H, H),
                "mlp_norm": torch.ones(H, device=device),
                "w_gate": w(H, 2 * H),
                "w_up": w(H, 2 * H),
                "w_down": w(2 * H, H),
            }
            for _ in range(cfg.num_layers)
        ]
        self.final_norm = torch.ones(H, device=device)
        self.lm_head = w(H, cfg.vocab_size)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.inv_freq = inv.to(device)
        self.kv_caches = [
            torch.zeros(2, num_kv_blocks, block_size, kvh, d, device=device) for _ in range(cfg.num_layers)
        ]

    # ------------------------------------------------------------------ shared pieces
    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ang = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]  # [T, d/2]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def _qkv(self, layer: dict[str, torch.Tensor], x: torch.Tensor, positions: torch.Tensor):
        c = self.cfg
        h = _rms_norm(x, layer["attn_norm"])
        q = (h @ layer["wq"]).view(-1, c.num_heads, c.head_size)
        k = (h @ layer["wk"]).view(-1, c.num_kv_heads, c.head_size)
        v = (h @ layer["wv"]).view(-1, c.num_kv_heads, c.head_size)
        return self._rope(q, positions), self._rope(k, positions), v

    def _finish_layer(
        self, layer: dict[str, torch.Tensor], x: torch.Tensor, attn: torch.Tensor
    ) -> torch.Tensor:
        x = x + attn.reshape(x.shape[0], -1) @ layer["wo"]
        h = _rms_norm(x, layer["mlp_norm"])
        return x + (F.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"]

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_pos: torch.Tensor,
        window: int | None = None,
    ) -> torch.Tensor:
        """q [n, h, d] at positions q_pos over keys/values [L, kvh, d] at positions 0..L-1: causal,
        and with a sliding `window` only keys at positions > q_pos - window."""
        group = self.cfg.num_heads // self.cfg.num_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,lhd->hnl", q, k) / self.cfg.head_size**0.5
        key_pos = torch.arange(k.shape[0], device=q.device)[None, :]
        masked = key_pos > q_pos[:, None]
        if window is not None:
            masked |= key_pos <= q_pos[:, None] - window
        scores = scores.masked_fill(masked[None], float("-inf"))
        return torch.einsum("hnl,lhd->nhd", scores.softmax(-1), v)

    # ------------------------------------------------------------------ paged forward
    def forward(self, inp: ForwardInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Paged forward; returns (hidden [T, H] after the final norm, logits [R, V])."""
        T = inp.input_ids.shape[0]
        c, bs = self.cfg, self.block_size
        x = self.embed[inp.input_ids.long()]
        qsl = inp.query_start_loc.tolist()
        seq_lens = inp.seq_lens.tolist()
        R = len(seq_lens)
        max_len = max(seq_lens, default=0)
        j = torch.arange(max_len, device=self.device)
        tables = inp.group_block_tables or [inp.block_table]
        slot_mappings = inp.group_slot_mappings or [inp.slot_mapping]
        # context slots of every request in each group, read through its block-table row there
        ctx = [t[:R, j // bs].to(torch.int64) * bs + j % bs for t in tables]  # [R, max_len] a group
        self.layer_hidden = []
        for i, (layer, cache) in enumerate(zip(self.layers, self.kv_caches)):
            g, window = self.layer_group[i], self.layer_window[i]
            ctx_slots, slots = ctx[g], slot_mappings[g][:T]
            q, k, v = self._qkv(layer, x, inp.positions[:T])
            k_cache = cache[0].view(-1, c.num_kv_heads, c.head_size)
            v_cache = cache[1].view(-1, c.num_kv_heads, c.head_size)
            k_cache.index_copy_(0, slots, k)
            v_cache.index_copy_(0, slots, v)
            out = torch.empty_like(q)
            for r in range(R):
                lo, hi, L = qsl[r], qsl[r + 1], seq_lens[r]
                # a sliding layer's keys below the window are masked: its table may hold the
                # null block there, which is read but never weighs in
                s = ctx_slots[r, :L]
                out[lo:hi] = self._attend(q[lo:hi], k_cache[s], v_cache[s], inp.positions[lo:hi], window)
            x = self._finish_layer(layer, x, out)
            self.layer_hidden.append(x)
        hidden = _rms_norm(x, self.final_norm)
        logits = hidden[inp.logits_indices] @ self.lm_head
        return hidden, logits

    # ------------------------------------------------------------------ dense reference
    def dense_hidden(
        self, token_ids: torch.Tensor, start: int, layers_out: list[torch.Tensor] | None = None
    ) -> torch.Tensor:
        """Hidden states of one whole sequence with no cache; rows from `start` on. Each layer's
        output (rows from `start` on) is appended to `layers_out` when given."""
        L = token_ids.shape[0]
        pos = torch.arange(L, device=self.device)
        x = self.embed[token_ids.long()]
        for layer, window in zip(self.layers, self.layer_window):
            q, k, v = self._qkv(layer, x, pos)
            x = self._finish_layer(layer, x, self._attend(q, k, v, pos, window))
            if layers_out is not None:
                layers_out.append(x[start:])
        return _rms_norm(x, self.final_norm)[start:]

    def max_dense_diff(
        self, hidden: torch.Tensor, seqs: list[tuple[np.ndarray, int]], query_start_loc: np.ndarray
    ) -> float:
        """Largest |paged - dense| over the step's tokens; seqs[i] is request i's whole token ids
        and where its tokens of this step start, query_start_loc where they sit in `hidden`."""
        return self.max_dense_diffs(hidden, seqs, query_start_loc)[0]

    def max_dense_diffs(
        self, hidden: torch.Tensor, seqs: list[tuple[np.ndarray, int]], query_start_loc: np.ndarray
    ) -> tuple[float, list[float]]:
        """max_dense_diff, and the same after each layer of the last paged forward (paged == dense
        layer by layer: each sliding layer's window, each group's tables)."""
        worst = 0.0
        per_layer = [0.0] * len(self.layers)
        for i, (ids, start) in enumerate(seqs):
            lo, hi = int(query_start_loc[i]), int(query_start_loc[i + 1])
            dense_layers: list[torch.Tensor] = []
            token_ids = torch.from_numpy(np.ascontiguousarray(ids)).to(self.device)
            dense = self.dense_hidden(token_ids, start, dense_layers)
            worst = max(worst, float((dense - hidden[lo:hi]).abs().max()))
            for n, (d, p) in enumerate(zip(dense_layers, self.layer_hidden)):
                per_layer[n] = max(per_layer[n], float((d - p[lo:hi]).abs().max()))
        return worst, per_layer

    def written_slots(self) -> torch.Tensor:
        """Per physical block, how many slots of layer 0's K cache hold nonzero data; with several
        KV cache groups, of any group's first layer (vLLM lays the groups' layers over the same
        memory, so a block holds what the group that used it last wrote)."""
        if self.num_groups == 1:
            return (self.kv_caches[0][0] != 0).flatten(2).any(-1).sum(-1)
        written = [
            (self.kv_caches[self.layer_group.index(g)][0] != 0).flatten(2).any(-1)
            for g in range(self.num_groups)
        ]
        return torch.stack(written).any(0).sum(-1)

    def written_slots_by_group(self) -> list[torch.Tensor]:
        """Per KV cache group, per physical block, how many slots of the group's first layer's K
        cache hold nonzero data (what that group's layers wrote there)."""
        first = {g: self.layer_group.index(g) for g in range(self.num_groups)}
        return [(self.kv_caches[first[g]][0] != 0).flatten(2).any(-1).sum(-1) for g in range(self.num_groups)]
