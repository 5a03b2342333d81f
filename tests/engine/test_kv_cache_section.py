"""The step's KV-cache section gives the cache tensor's shape per layer."""

from __future__ import annotations

from pagedviz.core import load_preset, make_engine


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


def test_kv_cache_section_gives_the_tensor_shape_per_layer() -> None:
    sc = load_preset("seed-001")
    m = sc.config.model
    assert m is not None
    kv = run("seed-001")[0].kv_cache
    assert kv["shape"] == [2, sc.config.num_kv_blocks, sc.config.block_size, m.num_kv_heads, m.head_size]
    assert kv["num_layers"] == m.num_layers and "per layer" in kv["layout"]
