"""Model Runner V2's buffers when one dimension dwarfs the others (found by the V2 fidelity group)."""

from __future__ import annotations

from tests.support.scenarios import make_scenario, run_all


def test_v2_gathers_a_block_table_wider_than_the_token_and_request_buffers() -> None:
    """block_size 1 and max_model_len 6 give 6 block-table columns, against one request slot and a
    one-token budget: the gather's column mask must cover every column."""
    scenario = make_scenario(
        [{"id": "r0", "prompt_token_ids": [3, 4], "max_tokens": 2}],
        model_runner="v2",
        async_scheduling=False,
        block_size=1,
        max_model_len=6,
        max_num_reqs=1,
        max_num_batched_tokens=1,
        num_kv_blocks=7,
        enable_chunked_prefill=True,
    )
    steps = run_all(scenario)
    assert [t.scheduler["num_scheduled_tokens"] for t in steps] == [{"r0": 1}] * 3
    last = steps[-1]
    assert last.arrays["input_block_tables"][0, :3].tolist() == last.arrays["block_tables"][0, :3].tolist()
    assert last.arrays["slot_mapping"][:1].tolist() == [int(last.arrays["block_tables"][0, 2])]
