"""Token choice: greedy over the model's logits (parallel sampling's children at temperature 1,
with Gumbel noise), or, with `"model": null`, a fixed function of (seed, request id, position) so
big scenarios simulate fast and still deterministically."""

from __future__ import annotations

import zlib

import numpy as np

from pagedviz.core.tokenizer import NUM_SPECIAL_IDS

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def synthetic_tokens(seed: int, req_ids: list[str], positions: np.ndarray, vocab_size: int) -> np.ndarray:
    """One token id per request for the token at `positions`, never a special id."""
    keys = np.array([zlib.crc32(r.encode()) for r in req_ids], dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = _mix(np.uint64(seed) * _GOLD + keys) ^ _mix(positions.astype(np.uint64) + _GOLD)
        x = _mix(x)
    return (NUM_SPECIAL_IDS + x % np.uint64(vocab_size - NUM_SPECIAL_IDS)).astype(np.int32)


def gumbel_noise(seed: int, req_ids: list[str], positions: np.ndarray, vocab_size: int) -> np.ndarray:
    """Gumbel(0, 1) noise of shape [len(req_ids), vocab_size], a fixed function of (seed, request
    id, position, token id): argmax(logits + noise) samples softmax(logits) at temperature 1 (the
    Gumbel-max trick), reproducibly. Parallel sampling's children sample so (vLLM refuses n > 1
    with greedy sampling); each child's own id gives it its own draws."""
    keys = np.array([zlib.crc32(r.encode()) for r in req_ids], dtype=np.uint64)
    vocab = np.arange(vocab_size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        row = _mix(np.uint64(seed) * _GOLD + keys) ^ _mix(positions.astype(np.uint64) * _GOLD + _M1)
        x = _mix(row[:, None] ^ _mix(vocab + _M2)[None, :])
    # 53 random bits as a uniform in (0, 1), then -log(-log(u))
    u = ((x >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    return -np.log(-np.log(u))
