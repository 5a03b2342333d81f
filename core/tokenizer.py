"""The byte-level tokenizer of text prompts: ids 0..2 are special, byte b is id b + NUM_SPECIAL_IDS."""

from __future__ import annotations

import numpy as np

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NUM_SPECIAL_IDS = 3
SPECIAL_NAMES = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


def encode_text(text: str) -> list[int]:
    """Token ids of `text`: its UTF-8 bytes shifted past the special ids."""
    return [b + NUM_SPECIAL_IDS for b in text.encode("utf-8")]


def decode_ids(ids: list[int] | np.ndarray) -> str:
    """Readable text of token ids; ids outside the byte range show as <id>."""
    out: list[str] = []
    buf = bytearray()
    for i in (int(x) for x in ids):
        b = i - NUM_SPECIAL_IDS
        if 0 <= b < 256:
            buf.append(b)
            continue
        if buf:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
        out.append(SPECIAL_NAMES.get(i, f"<{i}>"))
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)
