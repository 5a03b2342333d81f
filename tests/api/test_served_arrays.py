"""The CLI's JSON and the REST API carry the newer arrays under vLLM's names, the padded buffers and
the presets' notes."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core.presets import preset_dict
from tests.support.cli import in_process


def test_cli_json_carries_every_new_array_under_vllms_names() -> None:
    names = {
        "demo-ngram-spec-decode": {
            "num_draft_tokens",
            "cu_num_draft_tokens",
            "logits_indices",
            "target_logits_indices",
            "bonus_logits_indices",
            "num_sampled_tokens",
        },
        "demo-async-scheduling": {"prev_sampled_token_ids", "sample_flattened_indices", "input_ids_device"},
        "demo-mrope": {"mrope_positions"},
        "demo-max-model-len": {"token_indices_whatif", "input_ids_whatif", "whatif_wrong"},
    }
    for preset, want in names.items():
        r = in_process("run", preset, "--json")  # the command's real main(), in this process
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        seen = set().union(*(s["arrays"] for s in doc["steps"]))
        assert want <= seen, (preset, want - seen)
    step1 = json.loads(in_process("run", "demo-cudagraph-padding", "--json").stdout)["steps"][0]
    assert step1["arrays"]["slot_mapping"]["valid"] == 5
    assert step1["arrays"]["query_start_loc"]["buffer"] == [0, 3, 5, 5, 5]
    assert step1["kv_cache"]["shape"][0] == 2


def test_rest_serves_the_notes_and_the_padded_buffers() -> None:
    client = TestClient(create_app(Settings(max_runs=4)))
    presets = {p["id"]: p for p in client.get("/api/presets?lang=zh").json()}
    assert "T_0_3" in presets["seed-001-ascend"]["notes"][0]
    run_id = client.post("/api/runs", json=preset_dict("demo-cudagraph-padding")).json()["run_id"]
    step = client.get(f"/api/runs/{run_id}/steps/1").json()
    assert step["arrays"]["seq_lens"]["buffer"] == [3, 2, 0, 0]
    assert next(s for s in step["stages"] if s["name"] == "slot_mapping")["why"]
