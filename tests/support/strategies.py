"""The hypothesis scenario strategy, one for every test that draws random scenarios: tiny blocks,
tight token budgets, KV pools small enough to preempt, arrivals over four steps, prefix caching
and chunked prefill on and off, shared prompt prefixes.

`scenarios(family, ...)` draws them. A `Family` says where the test groups draw differently (each
keeps the distribution its tests were written for):

- `ENGINE`: pagedviz's own invariants (tests/test_properties.py), every flavour, the tiny model
  on demand, a seed per scenario.
- `V1_FIDELITY`: pagedviz against vLLM's V1 side (tests/fidelity): vLLM's own scheduler knobs
  (`scheduler_reserve_full_isl`, the watermark), max_model_len no longer than the longest request
  needs, so the pool is as tight as vLLM allows.
- `V2_FIDELITY`: pagedviz against vLLM's Model Runner V2: longer prompts and up to 8 new tokens
  (preemption is common), at most 4 slots (freed and handed out again), random CUDA-graph sizes.

Keyword arguments fix what a test needs (the runner, async scheduling, n-gram drafts, the tiny
model) or pin one drawn choice (`prefix_caching`, `chunked_prefill`), so that one long property
can be split into several tests over parts of the same space, which pytest-xdist runs in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hypothesis import strategies as st

from pagedviz.core import Scenario

# the tiny model of the engine family's paged-vs-dense test: token ids stay below its vocabulary
TINY_MODEL = {"num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "head_size": 4, "vocab_size": 32}
DEFAULT_CAPTURE_SIZES = [1, 2, 4, 8, 16, 32, 64]


@dataclass(frozen=True)
class Family:
    """Where one group of tests draws its scenarios differently from the others."""

    name: str  # the scenarios' name
    runner: str  # the model runner unless the test says
    max_token_id: int  # prompt token ids are drawn from 3 to this
    max_num_reqs: int  # max_num_reqs from 1 to this
    max_new_tokens: int  # a request's max_tokens from 1 to this (and to max_model_len - 1)
    long_prompts: bool  # prompts of at least a third of max_model_len
    fit_model_len: bool  # max_model_len redrawn between the longest request and the first draw
    budget_span: int  # max_num_batched_tokens from its lowest allowed value to that plus this
    pool_slack: int  # KV blocks beyond the fewest allowed: 0 to this
    cudagraph: Literal["eager", "default-or-eager", "random"]
    max_spec_tokens: int  # num_speculative_tokens from 1 to this, with drafts
    against_vllm: bool  # run by vLLM too: its scheduler knobs drawn, on the CPU, its limits kept
    seeds: bool  # a seed drawn per scenario (the synthetic sampler's and the tiny model's)


ENGINE = Family(
    name="prop",
    runner="v1",
    max_token_id=20,
    max_num_reqs=5,
    max_new_tokens=4,
    long_prompts=False,
    fit_model_len=False,
    budget_span=30,
    pool_slack=8,
    cudagraph="default-or-eager",
    max_spec_tokens=4,
    against_vllm=False,
    seeds=True,
)
V1_FIDELITY = Family(
    name="fid",
    runner="v1",
    max_token_id=40,
    max_num_reqs=5,
    max_new_tokens=5,
    long_prompts=False,
    fit_model_len=True,
    budget_span=24,
    pool_slack=6,
    cudagraph="eager",
    max_spec_tokens=0,
    against_vllm=True,
    seeds=False,
)
V2_FIDELITY = Family(
    name="fid-v2",
    runner="v2",
    max_token_id=40,
    max_num_reqs=4,
    max_new_tokens=8,
    long_prompts=True,
    fit_model_len=False,
    budget_span=24,
    pool_slack=3,
    cudagraph="random",
    max_spec_tokens=3,
    against_vllm=True,
    seeds=False,
)


def _pinned(draw: st.DrawFn, value: bool | None, allowed: bool = True) -> bool:
    """A drawn boolean, or the test's own choice; False where the scenario cannot have it."""
    if not allowed:
        return False
    return draw(st.booleans()) if value is None else value


@st.composite
def scenarios(
    draw: st.DrawFn,
    family: Family = ENGINE,
    *,
    flavor: str = "vllm",
    runner: str | None = None,
    async_scheduling: bool = False,
    spec: bool = False,
    with_model: bool = False,
    prefix_caching: bool | None = None,
    chunked_prefill: bool | None = None,
) -> Scenario:
    """A random scenario of `family`; `prefix_caching` / `chunked_prefill` pin that choice (None:
    drawn, where the flavour and drafts allow it)."""
    nano = flavor == "nanovllm"
    bs = draw(st.integers(2 if nano else 1, 4))
    M = draw(st.integers(6, 24))
    # speculative decoding is not modelled with prefix caching; nano-vllm has neither knob
    prefix = _pinned(draw, prefix_caching, allowed=flavor == "vllm" and not spec)
    chunked = _pinned(draw, chunked_prefill, allowed=not nano)
    max_num_reqs = draw(st.integers(1, family.max_num_reqs))
    token_ids = st.integers(3, family.max_token_id)
    shared = draw(st.lists(token_ids, max_size=M // 2))
    reqs: list[dict[str, Any]] = []
    longest, need = 1, 1
    for i in range(draw(st.integers(1, 6))):
        max_tokens = draw(st.integers(1, min(family.max_new_tokens, M - 1)))
        lo = max(1, min(M // 3, M - max_tokens)) if family.long_prompts else 1
        plen = draw(st.integers(lo, M - max_tokens))
        tail = draw(st.lists(token_ids, min_size=plen, max_size=plen))
        reqs.append(
            {
                "id": f"r{i}",
                "prompt_token_ids": (shared + tail)[:plen] if prefix else tail,
                "max_tokens": max_tokens,
                "arrival_step": draw(st.integers(1, 4)),
            }
        )
        longest = max(longest, plen + max_tokens)
        need = max(need, -(-(plen + max_tokens) // bs))
    if family.fit_model_len:  # max_model_len no longer than needed keeps the pool tight
        M = draw(st.integers(longest, M))
    threshold = 0 if nano else draw(st.sampled_from([0, 0, 2, 5]))
    # vLLM refuses a budget below max_num_reqs, and below max_model_len without chunked prefill
    low = max_num_reqs if chunked else (longest if nano else max(M, max_num_reqs))
    budget = draw(st.integers(low, low + family.budget_span))
    sizes: list[int] | None = None
    if family.cudagraph == "default-or-eager":
        sizes = draw(st.sampled_from([None, DEFAULT_CAPTURE_SIZES]))
    elif family.cudagraph == "random":  # within the budget, as vLLM caps them
        sizes = draw(st.one_of(st.none(), st.lists(st.integers(1, budget), min_size=1, max_size=4)))
    # tight pools: vLLM refuses one that cannot hold a max_model_len sequence (plus the null
    # block), so preemption is common; nano-vllm needs only each request's own blocks
    slack = draw(st.integers(0, family.pool_slack))
    pool = max(2, need + slack) if nano else -(-M // bs) + 1 + slack
    cfg: dict[str, Any] = {
        "block_size": bs,
        "max_model_len": M,
        "max_num_reqs": max_num_reqs,
        "max_num_batched_tokens": budget,
        "num_kv_blocks": pool,
        "long_prefill_token_threshold": threshold if threshold <= M else 0,
        "enable_chunked_prefill": chunked,
        "enable_prefix_caching": prefix,
        "cudagraph_capture_sizes": sizes,
        "model": TINY_MODEL if with_model else None,
        "model_runner": runner or family.runner,
        "async_scheduling": async_scheduling,
    }
    if family.against_vllm:
        cfg.update(
            scheduler_reserve_full_isl=draw(st.booleans()),
            watermark=draw(st.sampled_from([0.0, 0.0, 0.1, 0.3])),
            device="cpu",
        )
    if spec:
        lookup_min = draw(st.integers(1, 3))
        cfg.update(
            num_speculative_tokens=draw(st.integers(1, family.max_spec_tokens)),
            prompt_lookup_min=lookup_min,
            prompt_lookup_max=draw(st.integers(lookup_min, 4)),
        )
        # vLLM 0.33 asserts (scheduler.py, `num_new_tokens == 1 + num_spec_tokens`) when a long-
        # prefill cap below 1 + num_speculative_tokens cuts a request padded with placeholder drafts
        if family.against_vllm and 0 < cfg["long_prefill_token_threshold"] <= cfg["num_speculative_tokens"]:
            cfg["long_prefill_token_threshold"] = 0
    d: dict[str, Any] = {"name": family.name, "flavor": flavor, "config": cfg, "requests": reqs}
    d["max_steps"] = 2000
    if family.seeds:
        d["seed"] = draw(st.integers(0, 99))
    return Scenario.from_dict(d)
