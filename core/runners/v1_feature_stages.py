"""The stages of V1's `prepare_inputs` that a scenario's feature turns on: M-RoPE's positions, the
token_indices what-if, async scheduling's device fill of input_ids and speculative decoding's
metadata (each `@stage` says when it runs). `V1Stages` (v1_stages.py) adds the stages every step
runs; `ModelRunner` (v1.py) holds the buffers these read."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pagedviz.core.input_batch import InputBatch
from pagedviz.core.runners.mrope import MRope
from pagedviz.core.runners.stages import stage
from pagedviz.core.scenario_parts import EngineConfig
from pagedviz.core.spec_decode import calc_spec_decode_metadata


class V1FeatureStages:
    """The feature stages of V1's prepare_inputs; `ModelRunner` supplies the state below."""

    config: EngineConfig
    input_batch: InputBatch
    v: dict[str, Any]
    mrope: dict[str, MRope]
    block_size: int
    max_model_len: int
    max_num_blocks_per_req: int
    prev_req_id_to_index: dict[str, int]
    prev_sampled_token_ids: torch.Tensor | None
    pending_sampled: dict[str, int]
    token_ids_flat_np: np.ndarray

    def _write_tokens(self, sampled: dict[str, int]) -> None:
        ib = self.input_batch
        sampled = {r: t for r, t in sampled.items() if r in ib.req_id_to_index}
        if not sampled:
            return
        rows = np.array([ib.req_id_to_index[r] for r in sampled], dtype=np.int64)
        index = rows * self.max_model_len  # flat: the write and its record share it
        index += ib.num_tokens[rows]
        self.token_ids_flat_np[index] = np.fromiter(sampled.values(), dtype=np.int32)
        ib.token_changes.wrote_flat(index)
        ib.num_tokens[rows] += 1

    @stage(
        "mrope_positions",
        "positions num_computed_tokens_cpu num_scheduled_tokens",
        "mrope_positions",
        "prompt part: mrope_positions[:, j] = req.mrope_positions[:, num_computed + j] (from "
        "get_mrope_input_positions); completion part: arange(num_computed + delta, ...) on all 3 rows",
        "M-RoPE (Qwen2-VL): three position rows (t, h, w) per token. Text tokens count up equally on "
        "all three; an image's t x h x w placeholder tokens take their grid coordinates from the "
        "position the image starts at; the text after the image continues at max + 1, so the image "
        "uses max(t, h, w) positions instead of t*h*w (mrope_position_delta = max + 1 - num_prompt "
        "is negative). _calc_mrope_positions copies the prompt's precomputed columns and computes "
        "the decoded tokens' columns as position + delta. The tiny model still rotates by the 1-D "
        "positions.",
        when=lambda r: r.uses_mrope,
        title=("M-RoPE positions", "M-RoPE 位置"),
        why_zh=(
            "M-RoPE（Qwen2-VL）：每个 token 有三行位置（t、h、w）。文本 token 在三行上同步递增；图像的 "
            "t × h × w 个占位 token 从图像起始位置开始取网格坐标；图像之后的文本从 max + 1 继续，因此图"
            "像只占 max(t, h, w) 个位置而不是 t·h·w 个（mrope_position_delta = max + 1 - num_prompt 为"
            "负）。_calc_mrope_positions 拷贝提示词预先算好的列，解码 token 的列为 position + delta。这"
            "个小模型仍按一维 positions 旋转。"
        ),
    )
    def _mrope_positions(self) -> None:
        v = self.v
        ib = self.input_batch
        out = np.empty((3, v["T"]), dtype=np.int64)
        ptr = 0
        for row, req_id in enumerate(ib.req_ids):  # one slice per request, as vLLM does
            m = self.mrope[req_id]
            computed = int(ib.num_computed_tokens_cpu[row])
            n = int(v["num_scheduled_tokens"][row])
            num_prompt = m.positions.shape[1]
            prompt_part = max(0, min(n, num_prompt - computed))
            out[:, ptr : ptr + prompt_part] = m.positions[:, computed : computed + prompt_part]
            start = computed + prompt_part
            out[:, ptr + prompt_part : ptr + n] = np.arange(start, computed + n) + m.delta
            ptr += n
        v["mrope_positions"] = out

    @stage(
        "token_indices_whatif",
        "positions req_indices token_ids_cpu token_indices",
        "token_indices_whatif input_ids_whatif whatif_wrong",
        "WHAT IF (wrong): token_indices_whatif = positions + req_indices * K * block_size, "
        "K = ceil(M / block_size); whatif_wrong = token_indices_whatif != token_indices",
        "Counterfactual, not what vLLM does: why token_indices multiplies by max_model_len. The "
        "token table's rows are M = max_model_len long; block rows hold K = ceil(M / block_size) "
        "blocks, i.e. K * block_size >= M slots. When M % block_size != 0 the two differ, so "
        "striding by K * block_size lands every request past row 0 in the wrong cell (the next "
        "row's tokens, or past the table: -1) and input_ids_whatif reads wrong ids.",
        when=lambda r: r.max_model_len % r.block_size != 0,
        title=("What if: the wrong token_indices", "假如：错误的 token_indices"),
        why_zh=(
            "反事实推演，并非 vLLM 的做法：说明 token_indices 为什么乘以 max_model_len。token 表每行长 "
            "M = max_model_len；块表每行有 K = ceil(M / block_size) 个块，即 K × block_size ≥ M 个槽位"
            "。当 M % block_size ≠ 0 时两者不同，按 K × block_size 跨行会让第 0 行之后的每个请求落到错"
            "误的单元格（下一行的 token，或超出表外：-1），input_ids_whatif 读到错误的 ID。"
        ),
    )
    def _token_indices_whatif(self) -> None:
        v = self.v
        table = self.input_batch.token_ids_cpu.ravel()
        whatif = v["positions"] + v["req_indices"] * (self.max_num_blocks_per_req * self.block_size)
        inside = whatif < table.size
        v["token_indices_whatif"] = whatif
        v["input_ids_whatif"] = np.where(inside, table[np.where(inside, whatif, 0)], -1).astype(np.int32)
        v["whatif_wrong"] = whatif != v["token_indices"]

    @stage(
        "prepare_input_ids",
        "input_ids prev_sampled_token_ids prev_positions cu_num_tokens",
        "prev_sampled_token_ids prev_positions sample_flattened_indices prev_common_req_indices "
        "input_ids_device input_ids_copy",
        "prev_positions[i] = prev_req_id_to_index.get(req_ids[i], -1); for rows with "
        "prev_positions >= 0: sample_flattened_indices = cu_num_tokens - 1; one copy "
        "input_ids[:n] = prev_sampled_token_ids[:n, 0] if sample_flattened_indices == prev_positions "
        "== arange(n), else input_ids.scatter_(0, sample_flattened_indices, "
        "prev_sampled_token_ids[prev_common_req_indices, 0])",
        "Async scheduling: the scheduler planned this step before the last step's sampled tokens "
        "reached the CPU, so a decode request's input token is only a placeholder in token_ids_cpu "
        "(0 here) and in the CPU input_ids. _prepare_input_ids copies input_ids to the device, then "
        "fills each such token on the device from prev_sampled_token_ids (last step's rows): when "
        "the batch kept its order the requests are rows 0..n-1 in both steps and one slice copy "
        "does it; otherwise a scatter by (sample_flattened_indices, prev_common_req_indices).",
        when=lambda r: r.config.async_scheduling,
        views="prev_sampled_token_ids",
        title=("Fill input_ids on the device (async)", "在设备上填入 input_ids（异步）"),
        why_zh=(
            "异步调度：调度器在上一步采样出的 token 回到 CPU 之前就规划了本步，所以解码请求的输入 token"
            " 在 token_ids_cpu（此处为 0）和 CPU 的 input_ids 中只是占位。_prepare_input_ids 把 input_i"
            "ds 拷到设备后，再用 prev_sampled_token_ids（上一步的各行）填入这些 token：批次顺序未变时，"
            "请求在两步中都是第 0..n-1 行，一次切片拷贝即可；否则按 (sample_flattened_indices, prev_com"
            "mon_req_indices) 做 scatter。"
        ),
    )
    def _prepare_input_ids(self) -> None:
        v = self.v
        ib = self.input_batch
        prev = self.prev_req_id_to_index
        prev_positions = np.array([prev.get(r, -1) for r in ib.req_ids], dtype=np.int64)
        common = np.flatnonzero(prev_positions >= 0)
        flat = v["cu_num_tokens"][common] - 1
        prev_idx = prev_positions[common]
        if not len(common):
            mode = "cpu"  # nothing in common with the last step: the CPU ids are all real
        elif (flat == prev_idx).all() and (len(flat) == 0 or flat.max() == len(common) - 1):
            mode = "one_copy"
        else:
            mode = "scatter"
        v["prev_positions"] = prev_positions
        v["sample_flattened_indices"] = flat
        v["prev_common_req_indices"] = prev_idx
        v["scalars"]["input_ids_copy"] = mode
        if self.prev_sampled_token_ids is not None:
            v["prev_sampled_token_ids"] = self.prev_sampled_token_ids[:, 0].cpu().numpy()
        # the CPU catches up with last step's tokens after the gather (vLLM: in _update_states)
        self._write_tokens(self.pending_sampled)
        self.pending_sampled = {}

    @stage(
        "spec_decode_metadata",
        "num_draft_tokens cu_num_tokens input_ids",
        "num_draft_tokens cu_num_draft_tokens num_sampled_tokens cu_num_sampled_tokens logits_indices "
        "target_logits_indices bonus_logits_indices draft_token_ids",
        "num_sampled_tokens = num_draft_tokens + 1; logits_indices = repeat(cu_num_tokens - "
        "num_sampled_tokens, num_sampled_tokens) + arange; bonus_logits_indices = "
        "cu_num_sampled_tokens - 1; target_logits_indices = repeat(cu_num_sampled_tokens - "
        "num_sampled_tokens, num_draft_tokens) + arange; draft_token_ids = "
        "input_ids[logits_indices][target_logits_indices + 1]",
        "_calc_spec_decode_metadata: a request with k drafts scheduled k + 1 tokens (its last known "
        "token, then the drafts) and needs the logits of all k + 1: the first k verify the drafts "
        "(target_logits_indices, rows of the logits), the last gives the bonus token if every draft "
        "is accepted (bonus_logits_indices). A request without drafts reads one row, as before.",
        when=lambda r: r.config.num_speculative_tokens > 0,
        title=("Speculative-decoding metadata", "投机解码元数据"),
        why_zh=(
            "_calc_spec_decode_metadata：有 k 个草稿的请求调度了 k + 1 个 token（最后一个已知 token 加"
            "上草稿），需要全部 k + 1 行 logits：前 k 行验证草稿（target_logits_indices，logits 的行号"
            "），最后一行在全部草稿被接受时给出奖励 token（bonus_logits_indices）。没有草稿的请求照旧只"
            "读一行。"
        ),
    )
    def _spec_decode_metadata(self) -> None:
        v = self.v
        if not v["num_reqs"]:
            return
        meta = calc_spec_decode_metadata(v["num_draft_tokens"], v["cu_num_tokens"])
        v.update(meta)
        v["draft_token_ids"] = v["input_ids"][meta["logits_indices"]][meta["target_logits_indices"] + 1]
