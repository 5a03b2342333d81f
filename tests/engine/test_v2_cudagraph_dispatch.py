"""Model Runner V2's CUDA-graph dispatch: which batches replay the FULL decode graph (vLLM 0.33)."""

from __future__ import annotations

from tests.support.scenarios import make_scenario, run_all


def _modes(**config: object) -> list[tuple[str, int, int]]:
    scenario = make_scenario(
        [{"id": "r0", "prompt_token_ids": [3, 4, 5], "max_tokens": 2}],
        model_runner="v2",
        async_scheduling=False,
        block_size=1,
        max_model_len=6,
        max_num_reqs=1,
        num_kv_blocks=7,
        enable_chunked_prefill=True,
        **{"cudagraph_capture_sizes": [1], **config},
    )
    return [
        (t.scalars["cudagraph_mode"], t.scalars["num_tokens_after_padding"], t.scalars["num_reqs_padded"])
        for t in run_all(scenario)
    ]


def test_a_one_token_prefill_chunk_after_the_first_runs_as_a_decode() -> None:
    """gather_batch_req_state counts a prefilling row with one new token over existing context as
    decode-like, so such a batch replays the FULL decode graph; the first chunk (no context yet)
    does not. Found by the V2 fidelity group against vLLM's own CudaGraphManager."""
    # one token a step: chunks at 0, 1, 2, then the decode
    assert _modes(max_num_batched_tokens=1) == [("PIECEWISE", 1, 1)] + [("FULL", 1, 1)] * 3


def test_a_longer_prefill_chunk_keeps_the_batch_off_the_decode_graph() -> None:
    # chunks of 2 (positions 0-1), then 1 token (2, over context: decode-like), then the decode
    assert _modes(max_num_batched_tokens=2, cudagraph_capture_sizes=[1, 2]) == [
        ("PIECEWISE", 2, 1),
        ("FULL", 1, 1),
        ("FULL", 1, 1),
    ]
