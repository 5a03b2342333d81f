"""The token_indices what-if: indices that stride by max_num_blocks_per_req * block_size go wrong
past row 0 when max_model_len is not a multiple of block_size, and the stage runs only then."""

from __future__ import annotations

from pagedviz.core import load_preset, make_engine


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


def test_whatif_token_indices_stride_by_blocks_and_go_wrong_past_row_zero() -> None:
    sc = load_preset("demo-max-model-len")
    M, bs = sc.config.max_model_len, sc.config.block_size
    assert M % bs != 0
    K = -(-M // bs)
    for t in make_engine(sc).run():
        a = t.arrays
        assert a["token_indices_whatif"].tolist() == (a["positions"] + a["req_indices"] * K * bs).tolist()
        wrong = a["whatif_wrong"]
        assert wrong.tolist() == (a["req_indices"] > 0).tolist()
        # where the index is right the ids agree; the right formula's ids are the table's
        assert (a["input_ids_whatif"][~wrong] == a["input_ids"][~wrong]).all()
        table = a["token_ids_cpu"]
        assert a["input_ids"].tolist() == table[a["req_indices"], a["positions"]].tolist()
    step1 = make_engine(sc).step().arrays
    assert (
        step1["input_ids_whatif"][step1["whatif_wrong"]] != step1["input_ids"][step1["whatif_wrong"]]
    ).any()


def test_whatif_stage_runs_only_when_max_model_len_is_not_a_multiple_of_block_size() -> None:
    t = run("seed-001")[0]
    assert "token_indices_whatif" not in t.arrays
    assert "token_indices_whatif" not in [s.name for s in t.stages]
