"""The recording format (`pagedviz.record` writes it, `pagedviz import` reads it): one header line,
then one JSON line per engine step of a real vLLM scheduler. Pydantic models validate both; reading
names the line of the first problem. No vLLM needed.

Header (`"pagedviz_recording": 1`): the vLLM version, the runner (v1 | v2), async scheduling, block
size, max_model_len, the token budget, max_num_seqs, the number of KV blocks, chunked prefill, prefix
caching, the long-prefill threshold, speculative decoding, the KV cache groups (in vLLM's order:
each one's spec class, block size and number of layers, its window where it has one,
`sliding_window`, and with several groups its `layer_names`), the scheduling policy where it is not
fcfs (`scheduling_policy`), the CUDA-graph capture sizes (the inputs are padded to them), and
whether token ids were redacted (then every token list is written as its length).

Step: what `schedule()` returned (new requests with their prompt token ids and block ids, one list
per KV cache group; cached requests with their new block ids per group, whether they resumed and,
where a group may drop blocks, `null_head`: per group, how many of the request's first blocks are
the null block 0 after the step's schedule(), the blocks a sliding window dropped; preempted and
finished ids, `num_scheduled_tokens`, draft tokens, the free-block count after scheduling: vLLM's
`get_num_free_blocks()`, without the null block 0; `freed`: the blocks put back on vLLM's free
queue since the step before, in the order it took them, each run with where it went, `head` (a block
without a prefix-cache hash, reused first) or `tail` (a cached block, evicted last); recordings
older than it lack it, and their free queue's order is not known), the requests that arrived
before it (`add_request`: id, prompt, max_tokens, and the priority where it is not 0), and what
`update_from_output()` received for it (`sampled`: each request's sampled tokens; null if it never
reached update_from_output).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

FORMAT_VERSION = 1
HEADER_KEY = "pagedviz_recording"
DEFAULT_MAX_LINE_BYTES = 16 << 20

# a token list, or its length in a redacted recording
Tokens = list[int] | int


class KVGroup(BaseModel):
    model_config = ConfigDict(extra="allow")
    kind: str
    block_size: int = Field(ge=1)
    num_layers: int = Field(ge=0)


class Header(BaseModel):
    """The recorded server's configuration: what a replay needs."""

    model_config = ConfigDict(extra="allow")
    pagedviz_recording: int
    vllm_version: str
    scheduler: str
    runner: str = Field(pattern="^(v1|v2)$")
    async_scheduling: bool
    block_size: int = Field(ge=1)
    max_model_len: int = Field(ge=1)
    max_num_batched_tokens: int = Field(ge=1)
    max_num_seqs: int = Field(ge=1)
    num_kv_blocks: int = Field(ge=1)
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    long_prefill_token_threshold: int = Field(ge=0)
    speculative: dict[str, Any] | None = None
    kv_cache_groups: list[KVGroup]
    cudagraph_capture_sizes: list[int] | None = None  # None: eager (no padding to a capture size)
    vocab_size: int | None = None
    redacted: bool = False
    data_parallel_rank: int = 0


class Arrival(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    prompt_token_ids: Tokens
    max_tokens: int | None = None
    priority: int = 0  # the request's priority (written where it is not 0)


class NewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    prompt_token_ids: Tokens
    block_ids: list[list[int]]
    num_computed_tokens: int = Field(ge=0)


class CachedRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    resumed: bool
    new_block_ids: list[list[int]] | None
    num_computed_tokens: int = Field(ge=0)
    num_output_tokens: int = Field(ge=0)
    # per KV cache group, how many of the request's first blocks are the null block after this
    # schedule() (a sliding window's dropped blocks); None: no group drops blocks, or an older
    # recording
    null_head: list[NonNegativeInt] | None = None


class Freed(BaseModel):
    """Blocks put back on the free queue in one call: `prepend_n` (head) or `append_n` (tail)."""

    model_config = ConfigDict(extra="forbid")
    to: Literal["head", "tail"]
    blocks: list[int]


class Step(BaseModel):
    """One `schedule()` and the output `update_from_output()` received for it."""

    model_config = ConfigDict(extra="forbid")
    step: int = Field(ge=1)
    arrivals: list[Arrival] = []
    new: list[NewRequest]
    cached: list[CachedRequest]
    num_scheduled_tokens: dict[str, int]
    spec_tokens: dict[str, Tokens] = {}
    preempted: list[str] = []
    finished: list[str] = []
    num_free_blocks: int = Field(ge=0)
    freed: list[Freed] | None = None  # None: an older recording (the free queue's order unknown)
    sampled: dict[str, Tokens] | None


class RecordingError(ValueError):
    """A recording that cannot be read: `line` is the 1-based line of the first problem (0: the
    file as a whole)."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.message = message
        super().__init__(f"line {line}: {message}" if line else message)


def _problem(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "the line"
    return f"{where}: {err['msg']}"


def _decode(raw: bytes | str, line: int, max_line_bytes: int) -> dict[str, Any]:
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > max_line_bytes:
        raise RecordingError(
            line,
            f"longer than the per-line limit of {max_line_bytes} bytes "
            "(PAGEDVIZ_MAX_RECORD_LINE_MB raises it)",
        )
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        # the decoder counts lines within the line it was given: only the column is the file's
        raise RecordingError(line, f"not JSON at column {e.colno} ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise RecordingError(line, f"not JSON (not UTF-8 at byte {e.start + 1} of the line)") from None
    if not isinstance(value, dict):
        raise RecordingError(line, f"a JSON object was expected, not {type(value).__name__}")
    return value


def parse_header(raw: bytes | str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Header:
    value = _decode(raw, 1, max_line_bytes)
    version = value.get(HEADER_KEY)
    if version is None:
        raise RecordingError(1, f"not a pagedviz recording header (no {HEADER_KEY!r} field)")
    if version != FORMAT_VERSION:
        raise RecordingError(
            1, f"unknown header version {version!r} (this pagedviz reads version {FORMAT_VERSION})"
        )
    try:
        return Header.model_validate(value)
    except ValidationError as e:
        raise RecordingError(1, "header: " + _problem(e)) from None


@dataclass(frozen=True)
class Cut:
    """The last line of a recording, cut mid-write (a server killed while writing it): `line` is
    its 1-based number, `step` the last complete step, where the recording stops."""

    line: int
    step: int

    def text(self, lang: str = "en") -> str:
        if lang == "zh":
            return f"最后一行（第 {self.line} 行）被截断：记录止于第 {self.step} 步"
        return f"the last line ({self.line}) was cut: the recording stops at step {self.step}"

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "step": self.step, "text": {k: self.text(k) for k in ("en", "zh")}}


class RecordingSteps(Iterator[Step]):
    """A recording's steps, each validated as it is read. A last line that does not end (no
    newline) and is not JSON was cut mid-write: the steps stop before it and `cut` says so once
    they are read; any other bad line, the last included, raises RecordingError naming it."""

    def __init__(self, it: Iterator[bytes | str], max_line_bytes: int) -> None:
        self.cut: Cut | None = None
        self._steps = self._read(it, max_line_bytes)

    def __next__(self) -> Step:
        return next(self._steps)

    def _read(self, it: Iterator[bytes | str], max_line_bytes: int) -> Iterator[Step]:
        n = 1
        count = 0
        for raw in it:
            n += 1
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            size = len(raw) if isinstance(raw, bytes) else len(raw.encode())
            if size > max_line_bytes:
                _decode(raw, n, max_line_bytes)  # refuses it, naming the limit
            if not text.strip():
                continue
            if not text.endswith("\n") and _cut(raw) and next(it, None) is None:
                if count == 0:
                    raise RecordingError(n, "truncated: the last line was cut and no step before it is whole")
                self.cut = Cut(n, count)
                return
            value = _decode(raw, n, max_line_bytes)
            try:
                step = Step.model_validate(value)
            except ValidationError as e:
                raise RecordingError(n, _problem(e)) from None
            count += 1
            if step.step != count:
                raise RecordingError(n, f"step {step.step} where step {count} was expected")
            yield step
        if count == 0:
            raise RecordingError(n, "a header alone: the recording has no step")


def _cut(raw: bytes | str) -> bool:
    """Whether a line is not JSON (for the last line, without its newline: cut mid-write)."""
    try:
        json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return True
    return False


def iter_recording(
    lines: Iterable[bytes | str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[Header, RecordingSteps]:
    """The header, and the steps read one line at a time (each validated as it is read). A last
    line cut mid-write is left out, and the steps' `cut` names it once they are read."""
    it = iter(lines)
    first = next(it, None)
    if first is None or not (first.strip() if isinstance(first, str) else first.strip()):
        raise RecordingError(1, "empty recording: no header line")
    header = parse_header(first, max_line_bytes)
    return header, RecordingSteps(it, max_line_bytes)


def read_recording(
    lines: Iterable[bytes | str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[Header, list[Step]]:
    header, steps = iter_recording(lines, max_line_bytes)
    return header, list(steps)


def split_lines(data: bytes) -> Iterator[bytes]:
    """The lines of a body in memory, each with its newline (the last may lack one)."""
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            yield data[start:]
            return
        yield data[start : end + 1]
        start = end + 1


def max_line_bytes() -> int:
    """The per-line limit: PAGEDVIZ_MAX_RECORD_LINE_MB megabytes (16 by default)."""
    from pagedviz.core.limits import env_int

    return env_int("PAGEDVIZ_MAX_RECORD_LINE_MB", DEFAULT_MAX_LINE_BYTES >> 20) << 20


def bounded_lines(f: IO[bytes], limit: int) -> Iterator[bytes]:
    """The lines of a binary file, never reading more than `limit` + 1 bytes of one line: a line
    over the limit comes out cut at limit + 1 bytes (so the reader refuses it, naming it)."""
    while True:
        line = f.readline(limit + 1)
        if not line:
            return
        yield line
        if len(line) > limit and not line.endswith(b"\n"):
            return
