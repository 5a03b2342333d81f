"""Pydantic models of every REST response, so /docs shows the real shapes with examples."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorItem(BaseModel):
    field: str = Field(examples=["config.block_size"])
    message: str = Field(examples=["must be >= 1 (got -1)"])


class ErrorOut(BaseModel):
    error: str = Field(examples=["invalid_scenario"])
    detail: list[ErrorItem]


class Health(BaseModel):
    status: str = Field(examples=["ok"])
    version: str = Field(examples=["0.1.0"])
    device: str = Field(examples=["cpu"])
    upstream: str = Field(
        description="the upstream code the engine mirrors", examples=["vLLM 0.33.0 · nano-vllm bb823b3"]
    )
    compute: str = Field(
        "",
        description="compute processes ready of those started (a server that has just started"
        " answers ok once one is ready)",
        examples=["2 of 2 ready"],
    )


class PresetSummary(BaseModel):
    id: str = Field(examples=["seed-001"])
    title: str
    summary: str
    document: str = Field(examples=["001_8a4008a8117428f7.txt"])
    flavor: str = Field(examples=["vllm"])
    notes: list[str] = Field(default=[], description="one line each, e.g. where the document has a typo")


class PresetDetail(PresetSummary):
    scenario: dict[str, Any]


class RunCreated(BaseModel):
    run_id: str = Field(examples=["3f1c0d9a6b2e4c7d8e9f"])
    num_steps: int = Field(examples=[5])
    device: str = Field(examples=["cpu"])
    flavor: str = Field(examples=["vllm"])
    truncated: bool = False
    complete: bool = Field(
        True, description="false when `wait=first` answered while later steps still compute (202)"
    )
    url: str = Field(description="the run page", examples=["/run?s=eNqr..."])
    link: str = Field(description="the scenario packed for URLs (zlib + base64url)")
    upstream: str = Field(
        "",
        description="what this run's flavour mirrors, as the run overview says it (the run page's header)",
        examples=["vLLM 0.33.0 · Model Runner V2 (vllm/v1/worker/gpu/)"],
    )


class RecordingCut(BaseModel):
    """A recording's last line, cut mid-write (a server killed while writing it): every line
    before it is imported."""

    line: int = Field(examples=[9], description="the cut line (1-based, the header is line 1)")
    step: int = Field(examples=[8], description="the last whole step: where the recording stops")
    text: dict[str, str] = Field(
        examples=[{"en": "the last line (9) was cut: the recording stops at step 8"}],
        description="what to say, by language (en, zh)",
    )


class ImportCreated(RunCreated):
    cut: RecordingCut | None = Field(None, description="the last line, when it was cut mid-write")


class RunProgress(BaseModel):
    """Where a run stands: done, computing (steps so far), or waiting to be computed."""

    run_id: str
    state: str = Field(examples=["computing"], description="done | computing | queued | refused | waiting")
    steps_done: int = Field(examples=[120])
    max_steps: int = Field(examples=[256], description="the scenario's bound on steps")
    elapsed_s: float | None = Field(default=None, description="seconds spent computing so far")
    queue_ahead: int | None = Field(default=None, description="runs ahead of this one while it is queued")
    paused: bool | None = Field(
        default=None,
        description="computing, but paused between two steps: the runs in flight hold more memory than "
        "the server allows them, and only the oldest goes on until some end",
    )
    max_seconds: float | None = Field(default=None, description="the server's time bound per run")
    reason: str | None = Field(default=None, description="refused: why (an import whose replay stopped)")


class ScenarioCheck(BaseModel):
    """The answer of the validator: valid with the run id it would get, or the problems found."""

    valid: bool
    run_id: str | None = None
    num_requests: int = 0
    error: str | None = Field(default=None, examples=["invalid_scenario"])
    detail: list[ErrorItem] = []
    maxima: dict[str, int] = Field(
        default={},
        description="of a valid scenario: the largest value of each config field whose limit depends on the"
        " other fields (the step-trace size, max_num_reqs x max_model_len, the KV cache, the pool) that this"
        " server accepts with the other fields as they are",
        examples=[{"config.num_kv_blocks": 279616, "config.max_model_len": 30}],
    )


class StepSummary(BaseModel):
    step: int
    idle: bool
    kind: str = Field(description="idle | prefill | decode | mixed", examples=["mixed"])
    num_reqs: int
    num_tokens: int
    new_req_ids: list[str]
    resumed_req_ids: list[str]
    finished_req_ids: list[str]
    preempted_req_ids: list[str]
    kv_blocks_in_use: int = Field(0, description="KV blocks with a reference after the step (ref_cnt > 0)")
    kv_pool_blocks: int = Field(
        0,
        description="the pool's usable KV blocks, vLLM's count: num_kv_blocks less the null block "
        "(nano-vllm: all of them)",
    )
    num_cached_tokens: dict[str, int] = Field(
        default_factory=dict,
        description="tokens each request admitted this step (new or resumed) found in the prefix cache",
    )


class RunOverview(BaseModel):
    run_id: str
    scenario: dict[str, Any]
    num_steps: int
    truncated: bool
    device: str
    flavor: str
    link: str
    upstream: str = Field(description="what this run's flavour mirrors", examples=["vLLM 0.33.0"])
    complete: bool = Field(
        True, description="false while an imported recording is still replayed: `steps` are those so far"
    )
    steps: list[StepSummary]


class ArrayOut(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "level": "token",
                "dtype": "int64",
                "shape": [5],
                "data": [5, 14, 13, 16, 17],
                "stage": "slot_mapping",
                "side": "cpu",
            }
        }
    )
    level: str
    dtype: str
    shape: list[int]
    data: list[Any]
    stage: str
    side: str
    valid: int | None = Field(default=None, description="padded arrays: how many leading entries are real")
    buffer: list[Any] | None = Field(
        default=None, description="the whole persistent buffer, padding included"
    )


class ArrayNamed(ArrayOut):
    name: str


class StageOut(BaseModel):
    name: str = Field(examples=["positions"])
    reads: list[str]
    writes: list[str]
    formula: str = Field(examples=["positions = num_computed_tokens_cpu[req_indices] + arange"])
    why: str = Field(default="", description="what the stage is for, checked against vLLM's source")


class StageSource(StageOut):
    source: str = Field(description="the engine's own code for this stage, read from the running module")


class SchedulerOut(BaseModel):
    num_scheduled_tokens: dict[str, int] = Field(examples=[{"0": 1, "1": 1, "2": 3}])
    total_num_scheduled_tokens: int = 0
    new_req_ids: list[str] = []
    resumed_req_ids: list[str] = []
    preempted_req_ids: list[str] = []
    finished_req_ids: list[str] = []
    waiting_req_ids: list[str] = []
    waiting_causes: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="why each waiting request waits (docs/arrays.md, 'Why requests wait')",
        examples=[{"4": {"cause": "token_budget", "tokens_needed": 120, "tokens_left": 70}}],
    )
    preemption_causes: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="for whom each preempted request was preempted",
        examples=[{"c": {"cause": "kv_pool", "for": "a"}}],
    )
    new_block_ids: dict[str, list[int] | list[list[int]]] = Field(
        default_factory=dict,
        description="blocks each request gained this step: a flat list with one KV cache group, one "
        "list per group with several (vLLM's tuple)",
        examples=[{"1": [7], "2": [8]}],
    )
    block_ids: dict[str, list[list[int]]] = Field(
        default_factory=dict,
        description="every scheduled request's blocks, one list per KV cache group in vLLM's group "
        "order (KVCacheManager.get_block_ids); 0 is the null block a sliding window leaves",
        examples=[{"a": [[1, 2, 3, 4, 5, 8], [0, 0, 0, 9, 10, 7]]}],
    )
    window_drops: dict[str, list[dict[str, Any]]] | None = Field(
        None,
        description="several KV cache groups only, on a step that dropped blocks: the blocks each "
        "sliding group replaced by the null block, in the order vLLM freed them (docs/arrays.md)",
        examples=[
            {
                "a": [
                    {
                        "group": 1,
                        "block_ids": [8, 7, 6],
                        "block_indices": [2, 1, 0],
                        "num_computed_tokens": 20,
                        "sliding_window": 8,
                        "first_kept_token": 13,
                    }
                ]
            }
        ],
    )


class BatchOut(BaseModel):
    req_ids: list[str]
    moves: list[dict[str, Any]] = Field(examples=[[{"req_id": "3", "from": 3, "to": 1}]])


class StepOut(BaseModel):
    """One step in the trace contract: its arrays are described in docs/arrays.md (/docs-md/arrays.md)."""

    step: int
    idle: bool
    scheduler: SchedulerOut
    batch: BatchOut
    arrays: dict[str, ArrayOut]
    scalars: dict[str, Any] = Field(examples=[{"num_reqs": 3, "total_num_scheduled_tokens": 5}])
    stages: list[StageOut]
    sampled_token_ids: dict[str, int]
    kv_cache: dict[str, Any]
    forward: dict[str, Any] = Field(examples=[{"device": "cpu", "paged_vs_dense_max_abs_diff": 9.5e-07}])
    timing_us: dict[str, float]
    engine_core: dict[str, Any] | None = Field(
        None,
        description="async scheduling only: what the engine core's batch queue did this step",
        examples=[{"scheduled": True, "consumed_step": 2, "batch_queue": [3], "batch_queue_size": 2}],
    )


class LangText(BaseModel):
    en: str
    zh: str


class StageTextOut(BaseModel):
    key: str = Field(
        examples=["v2:positions"],
        description="what the page looks the stage up by: its name, or flavour:name (v2:, nanovllm:) "
        "where Model Runner V2 or a flavour has its own",
    )
    name: str = Field(examples=["positions"], description="the stage's name in a trace's stages")
    runner: str = Field(examples=["v1"], description="the model runner: v1 or v2")
    flavor: str = Field(
        examples=["vllm"], description="the first flavour that runs it: vllm, ascend or nanovllm"
    )
    title: LangText
    why: LangText = Field(description="what the stage does; the English is the engine's own `why`")


class StageTextsOut(BaseModel):
    stages: list[StageTextOut]


class LiveCreated(BaseModel):
    """A live run opened (POST /api/runs/live): post its lines to `lines`."""

    run_id: str = Field(examples=["rec-0123456789abcdef"], description="an imported run's id (`rec-…`)")
    url: str = Field(examples=["/run?run=rec-0123456789abcdef"], description="the page that follows it")
    lines: str = Field(examples=["/api/runs/rec-0123456789abcdef/lines"], description="where its lines go")
    live: bool = Field(True, description="the run's overview says `live: true` until it closes")


class LinesAccepted(BaseModel):
    """A batch of a live run's lines kept (POST /api/runs/{id}/lines)."""

    run_id: str
    accepted: int = Field(examples=[64], description="the lines of this batch")
    steps: int = Field(examples=[1280], description="the run's steps arrived so far")
    live: bool = Field(description="false once this batch closed the run (`end=true`)")
