"""pagedviz.record's RecordingScheduler on vLLM 0.33.0's real Scheduler with speculative decoding
(pytest -m fidelity): n-gram drafts, the V1 runner, synchronous scheduling, as vLLM runs it.

vLLM's scheduler is driven as its engine core drives it: schedule(), update_from_output() with
each request's accepted drafts and one more token, then update_draft_token_ids() with the next
drafts (post_step). The drafts and the tokens are pagedviz's own, for the same scenario. The
recording is then imported (core/replay.py, no vLLM): the replay must reproduce, step for step,
what vLLM's scheduler did (scheduled tokens, drafts, new, resumed, preempted and finished
requests, block ids), and the arrays of pagedviz's own trace of the scenario.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pagedviz.core import Scenario, make_engine
from pagedviz.core.presets import preset_dict
from pagedviz.core.recording import read_recording
from pagedviz.core.replay import import_recording
from tests.support.fidelity_env import require_vllm

require_vllm()
from vllm.config import SpeculativeConfig  # noqa: E402
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput  # noqa: E402

from pagedviz.core.vllm_engine import v1 as vllm_side  # noqa: E402
from pagedviz.record import RecordingScheduler  # noqa: E402
from tests.support.vllm_v1 import ARRAYS, vllm_new_blocks  # noqa: E402

# the arrays whose values the replay cannot know past a rejected draft: the target model's tokens
# at the rows after the first rejection (the server keeps only the accepted prefix)
UNRECORDED = {"target_token_ids"}


def _scenario(preset: str, **config: Any) -> Scenario:
    d = preset_dict(preset)
    d["config"] = {**d["config"], **config}  # its tiny model: its tokens repeat, so the drafter finds n-grams
    return Scenario.from_dict(d)


def record_spec(scenario: Scenario, path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Drive the recorder with speculative decoding on; what vLLM scheduled, per schedule()."""
    monkeypatch.setenv("PAGEDVIZ_RECORD", str(path))
    cfg = scenario.config
    side = vllm_side.VllmSide(scenario)
    spec = SpeculativeConfig(
        method="ngram",
        num_speculative_tokens=cfg.num_speculative_tokens,
        prompt_lookup_min=cfg.prompt_lookup_min,
        prompt_lookup_max=cfg.prompt_lookup_max,
    )
    object.__setattr__(side.config, "speculative_config", spec)
    sched = RecordingScheduler(
        vllm_config=side.config,
        kv_cache_config=vllm_side.kv_cache_config(scenario),
        structured_output_manager=vllm_side.StructuredOutputManager(side.config),
        block_size=cfg.block_size,
    )
    side.scheduler = sched
    seen: list[dict[str, Any]] = []
    for t in make_engine(scenario).run():
        out = side.schedule()
        ids = list(out.num_scheduled_tokens)
        seen.append(
            {
                "num_scheduled_tokens": dict(out.num_scheduled_tokens),
                "spec_tokens": {k: list(v) for k, v in out.scheduled_spec_decode_tokens.items()},
                "new_req_ids": [r.req_id for r in out.scheduled_new_reqs],
                "resumed_req_ids": sorted(out.scheduled_cached_reqs.resumed_req_ids),
                "preempted_req_ids": sorted(out.preempted_req_ids or ()),
                "finished_req_ids": sorted(out.finished_req_ids),
                "new_block_ids": vllm_new_blocks(out),
            }
        )
        if not out.total_num_scheduled_tokens:
            continue
        generated = t.forward.get("generated_token_ids", {})
        sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=[list(generated.get(r, [])) for r in ids],
            ),
        )
        proposed = t.forward.get("proposed_draft_token_ids", {})
        sched.update_draft_token_ids(DraftTokenIds(ids, [list(proposed.get(r, [])) for r in ids]))
    sched.shutdown()
    return seen


@pytest.mark.parametrize(
    "preset,config",
    [
        ("demo-ngram-spec-decode", {}),
        ("demo-spec-decode-metadata", {}),
        # a tight token budget: drafts cut to what the budget leaves
        ("demo-ngram-spec-decode", {"max_num_batched_tokens": 6, "num_kv_blocks": 11}),
    ],
)
def test_a_spec_decode_recording_of_vllms_scheduler_imports_as_what_it_scheduled(
    preset: str, config: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = _scenario(preset, **config)
    path = tmp_path / "rec.jsonl"
    seen = record_spec(scenario, path, monkeypatch)
    assert any(s["spec_tokens"] for s in seen), "the scenario schedules no draft"
    with open(path, "rb") as f:
        header, steps = read_recording(f)
    cfg = scenario.config
    assert header.speculative == {
        "method": "ngram",
        "num_speculative_tokens": cfg.num_speculative_tokens,
        "prompt_lookup_min": cfg.prompt_lookup_min,
        "prompt_lookup_max": cfg.prompt_lookup_max,
    }
    imported = import_recording(header, steps)
    assert len(imported.traces) == len(seen)
    for t, vs in zip(imported.traces, seen):
        s, where = t.scheduler, f"step {t.step}"
        assert list(s["num_scheduled_tokens"].items()) == list(vs["num_scheduled_tokens"].items()), where
        assert s.get("scheduled_spec_decode_tokens", {}) == vs["spec_tokens"], where
        assert s["new_req_ids"] == vs["new_req_ids"], where
        assert sorted(s["resumed_req_ids"]) == vs["resumed_req_ids"], where
        assert sorted(s["preempted_req_ids"]) == vs["preempted_req_ids"], where
        assert sorted(s["finished_req_ids"]) == vs["finished_req_ids"], where
        assert s["new_block_ids"] == vs["new_block_ids"], where
    # pagedviz's own trace of the scenario, step for step: the same arrays and generated tokens
    own = list(make_engine(scenario).run())
    assert len(own) == len(imported.traces)
    for a, b in zip(own, imported.traces):
        where = f"step {a.step}"
        assert a.batch["req_ids"] == b.batch["req_ids"], where
        assert a.scheduler.get("scheduled_spec_decode_tokens") == b.scheduler.get(
            "scheduled_spec_decode_tokens"
        )
        for name in {
            *ARRAYS,
            "draft_token_ids",
            "num_accepted_tokens",
            "num_rejected_tokens",
            "logits_indices",
        }:
            if name in a.arrays and name not in UNRECORDED:
                assert a.arrays[name].tolist() == b.arrays[name].tolist(), f"{where}: {name}"
        assert a.forward.get("generated_token_ids") == b.forward.get("generated_token_ids"), where
        assert a.sampled_token_ids == b.sampled_token_ids, where
    assert not any("samples for" in n for n in imported.notes)
