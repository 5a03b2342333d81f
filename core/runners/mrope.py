"""M-RoPE (Qwen2-VL): a request's prompt positions on three rows (t, h, w) and the delta that
continues them after the prompt."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MRope:
    """A request's prompt positions for M-RoPE ([3, num_prompt_tokens]) and the delta that
    continues them after the prompt (Qwen2-VL's `get_mrope_input_positions`)."""

    positions: np.ndarray
    delta: int


def mrope_prompt_positions(num_prompt_tokens: int, image: tuple[int, int, int, int] | None) -> MRope:
    """Text tokens count up equally on the (t, h, w) rows; an image's t*h*w placeholder tokens
    take their grid indices, offset by the position the image starts at; the text after the image
    restarts at max(positions so far) + 1, so the image takes max(t, h, w) positions, not t*h*w."""
    if image is None:
        return MRope(np.broadcast_to(np.arange(num_prompt_tokens), (3, num_prompt_tokens)).copy(), 0)
    offset, t, h, w = image
    parts = [np.broadcast_to(np.arange(offset), (3, offset))]
    parts.append(np.indices((t, h, w)).reshape(3, -1) + offset)
    st_idx = int(parts[-1].max()) + 1
    tail = num_prompt_tokens - offset - t * h * w
    parts.append(np.broadcast_to(np.arange(tail), (3, tail)) + st_idx)
    positions = np.concatenate(parts, axis=1).astype(np.int64)
    return MRope(positions, int(positions.max()) + 1 - num_prompt_tokens)
