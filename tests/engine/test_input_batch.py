"""The persistent batch: the lowest hole first, condense moves, tables that follow their rows."""

from __future__ import annotations

import numpy as np

from pagedviz.core.input_batch import InputBatch


def batch_with(ids: list[str]) -> InputBatch:
    b = InputBatch(max_num_reqs=8, max_model_len=6, max_num_blocks_per_req=3, pin=False)
    for i, rid in enumerate(ids):
        b.add_request(rid, np.array([10 * i + 1, 10 * i + 2], dtype=np.int32), 2, 0, [i + 1])
    return b


def test_condense_fills_the_lowest_hole_from_the_end() -> None:
    b = batch_with(["A", "B", "C", "D", "E"])
    b.remove_request("B")
    b.remove_request("D")
    moves = b.condense()
    assert moves == [{"req_id": "E", "from": 4, "to": 1}]
    assert b.req_ids == ["A", "E", "C"]
    assert b.req_id_to_index == {"A": 0, "E": 1, "C": 2}
    assert b.token_ids_cpu[1, :2].tolist() == [41, 42] and not b.token_ids_cpu[3:].any()
    assert b.block_table.block_table_np[:4, 0].tolist() == [1, 5, 3, 0]


def test_new_rows_take_the_lowest_hole_before_the_end() -> None:
    b = batch_with(["A", "B", "C"])
    b.remove_request("A")
    b.remove_request("B")
    assert b.add_request("X", np.array([7], dtype=np.int32), 1, 0, [9]) == 0
    assert b.add_request("Y", np.array([8], dtype=np.int32), 1, 0, [9]) == 1
    assert b.add_request("Z", np.array([9], dtype=np.int32), 1, 0, [9]) == 3
    assert b.condense() == []
    assert b.req_ids == ["X", "Y", "C", "Z"]


def test_removing_the_last_rows_needs_no_move() -> None:
    b = batch_with(["A", "B", "C"])
    b.remove_request("C")
    b.remove_request("B")
    assert b.condense() == [] and b.req_ids == ["A"]
    assert b.add_request("D", np.array([1], dtype=np.int32), 1, 0, [2]) == 1
