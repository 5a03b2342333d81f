"""Scenarios packed into URLs (zlib, then base64url without padding), so a shared link carries
its scenario and reopens on any server, with or without its run cache."""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from typing import Any


class LinkError(ValueError):
    pass


def pack(scenario: dict[str, Any]) -> str:
    raw = json.dumps(scenario, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).rstrip(b"=").decode()


def unpack(packed: str, max_bytes: int = 1 << 20) -> Any:
    try:
        data = base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4))
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, max_bytes)
        if inflater.unconsumed_tail:
            raise LinkError(f"s: the packed scenario inflates past {max_bytes} bytes")
        return json.loads(raw)
    except LinkError:
        raise
    except (binascii.Error, zlib.error, ValueError, RecursionError) as e:
        raise LinkError(f"s: not a packed scenario ({type(e).__name__})") from None
