"""Placeholders in a lesson's paragraphs: numbers the engine computes are never typed in.

A paragraph may say `{{batch.slots.c}}` where it means "the state slot request c holds": the
server fills it in from the run of the section's scenario, at the section's step, before it
serves the lesson. `{{@3:batch.free_slots}}` reads step 3 instead. A path starts at one part of
the step's trace and goes down by `.key` and `[index]`:

- `arrays.NAME`: an array of the step (`arrays.idx_mapping`, `arrays.slot_mapping[7]`);
- `batch.…`, `scheduler.…`, `scalars.…`, `sampled_token_ids.…`, `kv_cache.…`: the step's trace
  as the API serves it (`batch.req_ids`, `scheduler.num_scheduled_tokens.c`,
  `batch.slot_events[0].slot`, `kv_cache.num_usable_blocks`: the pool's size as vLLM counts it);
- `config.NAME`: a setting of the scenario (`config.max_num_reqs`).

A number or a word is written as it is, a list as its items joined by ", " (the text adds the
brackets it wants). A placeholder must not give the section's checkpoint away: at the
checkpoint's step it may not name the checkpoint's array, nor what says the same thing
(`batch.slots` says idx_mapping: each row's request, in its slot).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pagedviz.core.scenario import Scenario
from pagedviz.core.trace import StepTrace

PLACEHOLDER = re.compile(r"\{\{(.{0,200}?)\}\}")
_PATH = re.compile(r"^\s*(?:@(\d{1,5}):)?\s*([a-z_]{1,40})((?:\.[A-Za-z0-9_-]{1,64}|\[\d{1,7}\])*)\s*$")
_STEP = re.compile(r"\.([A-Za-z0-9_-]{1,64})|\[(\d{1,7})\]")
ROOTS = ("arrays", "batch", "scheduler", "scalars", "sampled_token_ids", "kv_cache", "config")
MAX_ITEMS = 64  # a list longer than this is cut with "…"
# what else says a checkpoint array's entries at its step
REVEALS: dict[str, tuple[str, ...]] = {
    "idx_mapping": ("batch.slots", "batch.slot_events"),
    # the blocks each request got this step are its new block-table entries
    # (and, with several KV cache groups, every group's list and the window's drops)
    "block_table": ("scheduler.new_block_ids", "scheduler.block_ids", "scheduler.window_drops"),
    "block_tables": ("scheduler.new_block_ids", "scheduler.block_ids", "scheduler.window_drops"),
}


class PlaceholderError(ValueError):
    """A placeholder that is malformed, names nothing, or gives a checkpoint away."""


def parse(text: str) -> tuple[int | None, str, list[str | int]]:
    """`@N:root.key[i]` -> (N or None, root, [key, i]); PlaceholderError when malformed."""
    m = _PATH.match(text)
    if not m or m.group(2) not in ROOTS:
        raise PlaceholderError(
            f"{{{{{text[:60]}}}}} is not a placeholder: write {{{{path}}}} or {{{{@step:path}}}}, "
            f"the path starting at {', '.join(ROOTS)} (e.g. {{{{batch.slots.a}}}})"
        )
    keys: list[str | int] = [k if k else int(i) for k, i in _STEP.findall(m.group(3))]
    if not keys and m.group(2) != "config":
        raise PlaceholderError(f"{{{{{text[:60]}}}}} names a whole part of the trace: name one value in it")
    return (int(m.group(1)) if m.group(1) else None), m.group(2), keys


def syntax_errors(text: str) -> list[str]:
    """The problems of each placeholder in `text` that need no run to see."""
    out = []
    for m in PLACEHOLDER.finditer(text):
        try:
            step, _, _ = parse(m.group(1))
            if step is not None and step < 1:
                out.append(f"{{{{{m.group(1)[:60]}}}}}: steps are numbered from 1")
        except PlaceholderError as e:
            out.append(str(e))
    if "{{" in PLACEHOLDER.sub("", text):
        out.append("an unclosed {{ (a placeholder is {{path}})")
    return out


def _format(v: Any, what: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float | str):
        return str(v)
    if isinstance(v, list | tuple):
        if any(isinstance(x, dict | list | tuple) for x in v):
            raise PlaceholderError(f"{what} is a list of groups: name one value in it")
        items = [_format(x, what) for x in v[:MAX_ITEMS]]
        return ", ".join(items) + (", …" if len(v) > MAX_ITEMS else "")
    raise PlaceholderError(f"{what} is a group of values: name one of them")


def _part(t: StepTrace, root: str, keys: list[str | int], what: str) -> tuple[Any, list[str | int]]:
    """The trace part a path starts at, and the keys left to follow (an array is converted alone)."""
    if root == "arrays":
        name = keys[0]
        if not isinstance(name, str) or name not in t.arrays:
            names = ", ".join(sorted(t.arrays))
            raise PlaceholderError(f"{what}: step {t.step} has no array {name!r} (arrays: {names})")
        return t.arrays[name].tolist(), keys[1:]
    if root == "sampled_token_ids":
        return dict(t.sampled_token_ids), keys
    return getattr(t, root), keys


def resolve(text: str, steps: list[StepTrace], step: int, scenario: Scenario) -> str:
    """The value a placeholder's path names in the run `steps` (its step is `step` unless the
    path says `@N:`), written as the text shows it."""
    at, root, keys = parse(text)
    n = at if at is not None else step
    what = f"{{{{{text.strip()[:60]}}}}}"
    if root == "config":
        node: Any = scenario.to_dict()["config"]
    else:
        if not 1 <= n <= len(steps):
            raise PlaceholderError(f"{what}: the run has steps 1 to {len(steps)} (got {n})")
        node, keys = _part(steps[n - 1], root, keys, what)
    for k in keys:
        found = (isinstance(k, int) and isinstance(node, list | tuple) and k < len(node)) or (
            isinstance(k, str) and isinstance(node, dict) and k in node
        )
        if found:
            node = node[k]
        else:
            if isinstance(node, dict):
                have = f"keys {', '.join(map(str, list(node)[:20]))}"
            elif isinstance(node, list | tuple):
                have = f"{len(node)} entries"
            else:
                have = "a single value"
            raise PlaceholderError(f"{what}: nothing at {k!r} at step {n} (there: {have})")
    return _format(node, what)


def gives_away(text: str, step: int, checkpoint: dict[str, Any] | None) -> bool:
    """Whether the placeholder, in a section at `step`, tells the checkpoint's answer."""
    if checkpoint is None:
        return False
    at, root, keys = parse(text)
    if root == "config" or (at if at is not None else step) != step:
        return False
    path = ".".join([root, *map(str, keys)])
    said = (f"arrays.{checkpoint['array']}", *REVEALS.get(checkpoint["array"], ()))
    return any(path == p or path.startswith(p + ".") for p in said)


def fill(
    text: str,
    steps: list[StepTrace],
    step: int,
    scenario: Scenario,
    checkpoint: dict[str, Any] | None = None,
) -> str:
    """`text` with each placeholder replaced by its value; PlaceholderError on the first that
    names nothing or gives the checkpoint away."""

    def one(m: re.Match[str]) -> str:
        if gives_away(m.group(1), step, checkpoint):
            cp = checkpoint or {}
            raise PlaceholderError(
                f"{{{{{m.group(1).strip()[:60]}}}}} gives away the checkpoint's answer ({cp.get('array')} at "
                f"step {step}): name another step or another value"
            )
        return resolve(m.group(1), steps, step, scenario)

    return PLACEHOLDER.sub(one, text)


def has_placeholders(texts: dict[str, str] | None) -> bool:
    return bool(texts) and any(PLACEHOLDER.search(s) for s in (texts or {}).values())


RunOf = Callable[[Scenario], list[StepTrace]]
