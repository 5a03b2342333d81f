"""Request ids and small numbers shared between the steps a process holds: `share`.

A step arrives in the server pickled, one message a step (app/compute_stream.py). Pickle shares an
object only within one message, so every step unpickled holds its own copy of each request id (the
keys of the scheduler's and the batch's dicts, the waiting list, the sampled tokens) and of each
block id past 256, which CPython does not cache: at 1,024 requests, a fifth of what a stored run
holds. `share` puts those of one step's dicts and lists in place of equal ones already held:
strings through `sys.intern` (freed once no step holds them), numbers below SMALL_INTS through a
cache bounded by that range. The dicts and lists keep their types, keys, order and values.
"""

from __future__ import annotations

import sys
from typing import Any

SMALL_INTS = 1 << 15  # the numbers shared (block ids, token counts): at most this many cached
_INTS: dict[int, int] = {}


def share(root: Any) -> None:
    """Share the strings and small numbers held by the dicts and lists under `root`, in place."""
    intern, ints, top = sys.intern, _INTS, SMALL_INTS
    seen: set[int] = set()
    stack = [root]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if type(o) is dict:
            items = list(o.items())
            o.clear()  # refilled in the same order, with the keys shared
            for k, v in items:
                tv = type(v)
                if tv is str:
                    v = intern(v)
                elif tv is int:
                    if 256 < v < top:  # CPython caches -5..256 itself
                        v = ints.setdefault(v, v)
                elif tv is dict or tv is list:
                    stack.append(v)
                o[intern(k) if type(k) is str else k] = v
        elif type(o) is list:
            for i, x in enumerate(o):
                tx = type(x)
                if tx is str:
                    o[i] = intern(x)
                elif tx is int:
                    if 256 < x < top:
                        o[i] = ints.setdefault(x, x)
                elif tx is dict or tx is list:
                    stack.append(x)
