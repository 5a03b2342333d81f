"""A tiny real transformer that reads and writes a paged KV cache, and its dense twin.

Per layer: RMSNorm, Q/K/V projections, RoPE on `positions`, grouped-query attention, output
projection, RMSNorm, a SwiGLU MLP; then a final norm and the LM head. Each layer owns one KV cache
tensor shaped `[2, num_kv_blocks, block_size, num_kv_heads, head_size]`, as vLLM lays it out.
The paged forward writes K/V at `slot_mapping` and each request attends over its context gathered
through its `block_table` row, `seq_lens` and `query_start_loc`. The dense reference runs the same
weights over each request's whole sequence with no cache at all; the two must agree, which is what
shows that the metadata is right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pagedviz.core.config import ModelConfig


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


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class TinyTransformer:
    def __init__(
        self, cfg: ModelConfig, seed: int, num_kv_blocks: int, block_size: int, device: torch.device
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.block_size = block_size
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

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor) -> torch.Tensor:
        """q [n, h, d] at positions q_pos over keys/values [L, kvh, d] at positions 0..L-1."""
        group = self.cfg.num_heads // self.cfg.num_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("nhd,lhd->hnl", q, k) / self.cfg.head_size**0.5
        masked = torch.arange(k.shape[0], device=q.device)[None, :] > q_pos[:, None]
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
        # context slots of every request, read through its block-table row
        ctx_slots = inp.block_table[:R, j // bs].to(torch.int64) * bs + j % bs  # [R, max_len]
        slots = inp.slot_mapping[:T]
        for layer, cache in zip(self.layers, self.kv_caches):
            q, k, v = self._qkv(layer, x, inp.positions[:T])
            k_cache = cache[0].view(-1, c.num_kv_heads, c.head_size)
            v_cache = cache[1].view(-1, c.num_kv_heads, c.head_size)
            k_cache.index_copy_(0, slots, k)
            v_cache.index_copy_(0, slots, v)
            out = torch.empty_like(q)
            for r in range(R):
                lo, hi, L = qsl[r], qsl[r + 1], seq_lens[r]
                s = ctx_slots[r, :L]
                out[lo:hi] = self._attend(q[lo:hi], k_cache[s], v_cache[s], inp.positions[lo:hi])
            x = self._finish_layer(layer, x, out)
        hidden = _rms_norm(x, self.final_norm)
        logits = hidden[inp.logits_indices] @ self.lm_head
        return hidden, logits

    # ------------------------------------------------------------------ dense reference
    def dense_hidden(self, token_ids: torch.Tensor, start: int) -> torch.Tensor:
        """Hidden states of one whole sequence with no cache; rows from `start` on."""
        L = token_ids.shape[0]
        pos = torch.arange(L, device=self.device)
        x = self.embed[token_ids.long()]
        for layer in self.layers:
            q, k, v = self._qkv(layer, x, pos)
            x = self._finish_layer(layer, x, self._attend(q, k, v, pos))
        return _rms_norm(x, self.final_norm)[start:]

    def max_dense_diff(
        self, hidden: torch.Tensor, seqs: list[tuple[np.ndarray, int]], query_start_loc: np.ndarray
    ) -> float:
        """Largest |paged - dense| over the step's tokens; seqs[i] is request i's whole token ids
        and where its tokens of this step start, query_start_loc where they sit in `hidden`."""
        worst = 0.0
        for i, (ids, start) in enumerate(seqs):
            dense = self.dense_hidden(torch.from_numpy(np.ascontiguousarray(ids)).to(self.device), start)
            paged = hidden[query_start_loc[i] : query_start_loc[i + 1]]
            worst = max(worst, float((dense - paged).abs().max()))
        return worst

    def written_slots(self) -> torch.Tensor:
        """Per physical block, how many slots of layer 0's K cache hold nonzero data."""
        return (self.kv_caches[0][0] != 0).flatten(2).any(-1).sum(-1)
