"""A KV pool that cannot hold one max_model_len sequence is refused as vLLM's KV-cache planning
refuses it (`_check_enough_kv_cache_memory`: the memory of cdiv(max_model_len, block_size) blocks
against the pool less its null block), on config.num_kv_blocks, by the library, the REST API and
the command line; nano-vllm only asserts it has some blocks, so its flavour is left alone."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Limits, Scenario, ScenarioError
from tests.support.cli import in_process

LIMITS = Limits()


def scenario(
    flavor: str, num_kv_blocks: int, max_model_len: int = 240, block_size: int = 16
) -> dict[str, Any]:
    return {
        "name": "pool",
        "flavor": flavor,
        "config": {
            "block_size": block_size,
            "max_model_len": max_model_len,
            "num_kv_blocks": num_kv_blocks,
            "model": None,
        },
        "requests": [{"id": "a", "prompt_len": 8, "max_tokens": 4}],
    }


def pool_errors(d: dict[str, Any]) -> list[str]:
    try:
        Scenario.from_dict(d, LIMITS)
    except ScenarioError as e:
        return [msg for loc, msg in e.errors if loc == "config.num_kv_blocks"]
    return []


def test_a_pool_short_of_one_max_model_len_sequence_gets_vllms_reason_and_the_smallest_pool() -> None:
    # 240 tokens in blocks of 16: 15 blocks, and the null block besides
    assert pool_errors(scenario("vllm", 15)) == [
        "To serve at least one request with the model's max seq len (240), 15 KV blocks are needed, "
        "which is more than the 14 usable blocks of the pool (num_kv_blocks 15 less the null block). "
        "Based on the available blocks, the estimated maximum model length is 224. "
        "Increase num_kv_blocks to at least 16 or decrease max_model_len."
    ]


@pytest.mark.parametrize("flavor", ["vllm", "ascend"])
@pytest.mark.parametrize(("max_model_len", "block_size"), [(240, 16), (241, 16), (17, 4), (2, 1)])
def test_the_smallest_pool_that_holds_one_sequence_passes_and_one_block_less_is_refused(
    flavor: str, max_model_len: int, block_size: int
) -> None:
    smallest = math.ceil(max_model_len / block_size) + 1  # the null block
    d = scenario(flavor, smallest, max_model_len, block_size)
    d["requests"] = [{"id": "a", "prompt_len": 1, "max_tokens": 1}]
    assert Scenario.from_dict(d, LIMITS).config.num_kv_blocks == smallest
    refused = pool_errors(
        scenario(flavor, smallest - 1, max_model_len, block_size) | {"requests": d["requests"]}
    )
    assert len(refused) == 1 and f"at least {smallest} " in refused[0]


def test_nanovllm_keeps_a_pool_shorter_than_max_model_len() -> None:
    # nano-vllm's allocate_kv_cache asserts only num_kvcache_blocks > 0; its requests must still fit
    s = Scenario.from_dict(scenario("nanovllm", 4), LIMITS)
    assert s.config.num_kv_blocks == 4 and s.config.max_model_len == 240


def test_the_api_refuses_the_pool_with_a_422_naming_the_field() -> None:
    client = TestClient(create_app(Settings(max_runs=2)))
    r = client.post("/api/runs", json=scenario("vllm", 15))
    assert r.status_code == 422, r.text
    detail = {d["field"]: d["message"] for d in r.json()["detail"]}
    assert "at least 16" in detail["config.num_kv_blocks"]
    assert client.post("/api/runs", json=scenario("vllm", 16)).status_code == 201


def test_the_cli_refuses_the_pool_with_exit_2_and_one_line(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(scenario("ascend", 15)))
    r = in_process("run", str(path))  # the command's real main(), in this process
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.num_kv_blocks: To serve at least one request" in lines[0], r.stderr
    assert r.stdout == ""
