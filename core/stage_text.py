"""The stages' titles and explanations as the page shows them, in English and 简体中文, served at
GET /api/stages/text: one source with the engine. A stage declared with `@stage` carries its own
(`why` in English, the very text its trace records, `why_zh` and `title` beside it); the stages
recorded without an `@stage` title (V1's update_states and rejection sampler, V2's finish_and_add
and rejection sampler, Ascend's attention mask and nano-vllm's stages, whose traces record no
`why`) have theirs in `OTHER_TEXTS` below, with the English of the engine's record where it has
one. Keys are the names the page looks a stage up by: the stage's name, or "flavour:name" where a
flavour or Model Runner V2 has its own ("v2:positions", "nanovllm:input_ids")."""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from pagedviz.core.engine_drafts import V1_REJECTION_STAGE, V2_REJECTION_STAGE
from pagedviz.core.registry import engine_class
from pagedviz.core.runners.stages import StageSpec
from pagedviz.core.runners.v1 import UPDATE_STATES_STAGE
from pagedviz.core.runners.v2 import FINISH_STAGE, ModelRunnerV2
from pagedviz.core.scenario_parts import FLAVORS


class StageText(NamedTuple):
    """A stage's title (English, 简体中文) and its explanation in each language."""

    title: tuple[str, str]
    why: str
    why_zh: str


OTHER_TEXTS: dict[str, StageText] = {
    "update_states": StageText(
        ("Update the persistent batch", "更新持久化批次"),
        UPDATE_STATES_STAGE.why,
        (
            "持久化批次（persistent "
            "batch）与调度结果同步：已完成和本步未被调度的请求移出（所在行成为空洞），新请求填入最低的空洞，"
            "再把末尾的行搬进空洞（condense）。只写入发生变化的部分。"
        ),
    ),
    "rejection_sampler": StageText(
        ("Verify the drafts (rejection sampler)", "验证草稿（拒绝采样）"),
        V1_REJECTION_STAGE.why,
        (
            "贪心验证：由目标模型在每个草稿所在行的选择决定。每个请求输出被接受的草稿再加一个 "
            "token：第一个错误草稿处目标模型的 token，或全部正确时的奖励 token。调度器按被拒绝的草稿数回退 "
            "num_computed_tokens；它们的 KV 槽位仍保留（与 vLLM 相同），之后被新 token 覆盖。"
        ),
    ),
    "attn_mask": StageText(
        ("Attention state and mask", "注意力状态与掩码"),
        (
            "Ascend (vllm-ascend's _build_attn_state, first match): PrefillNoCache when nothing was "
            "computed before, one max_seq_len × max_seq_len causal mask for all requests; DecodeOnly when "
            "every request has one token, no mask; SpecDecoding with an MTP drafter; ChunkedPrefill when "
            "chunked prefill is on, one mask row per token picked by its position ([T, max_seq_len]); "
            "otherwise PrefillCacheHit, a fixed 128 × 128 causal mask. Document 000 calls a decode token's "
            "row all zeros: it is zero over the request's own keys 0..seq_len-1, and its 1s lie past "
            "seq_len where the request has no keys, so it is literally all zeros only for the longest "
            "request. Current vllm-ascend passes one 2048 × 2048 mask for every state and lets the kernel "
            "align it to each request's last key (sparse_mode=3): the same rows."
        ),
        (
            "昇腾（vllm-ascend 的 _build_attn_state，按顺序取第一个匹配）：之前没有计算过任何 token 时为 "
            "PrefillNoCache，所有请求共用一个 max_seq_len × max_seq_len 的因果掩码；每个请求只有一个 token "
            "时为 DecodeOnly，不需要掩码；使用 MTP 草稿模型时为 SpecDecoding；开启分块预填充时为 "
            "ChunkedPrefill，按每个 token 的位置取出对应的掩码行（[T, max_seq_len]）；否则为 "
            "PrefillCacheHit，使用固定的 128 × 128 因果掩码。文档 000 说解码 token 的掩码行全为 "
            "0：它在本请求自己的 key 0..seq_len-1 上为 0，值为 1 的位置都在 seq_len 之后，那里没有本请求的 "
            "key，所以只有最长的请求那一行才真正全为 0。当前的 vllm-ascend 对所有状态都传入同一个 2048 × "
            "2048 掩码，由算子按每个请求最后一个 key 对齐（sparse_mode=3），效果与按位置取行相同。"
        ),
    ),
    "v2:finish_and_add": StageText(
        ("Free and add state slots", "释放与分配状态槽"),
        FINISH_STAGE.why,
        (
            "模型运行器 V2 把每个请求放在固定的状态槽里。已完成和被抢占的请求按请求 ID "
            "排序后释放各自的状态槽。新请求取 "
            "free_indices.pop()，即编号最大的空闲状态槽，所以刚释放的状态槽最先被再次分出。恢复的请求作为新"
            "请求回来，带着提示和目前为止的输出，占用一个新的状态槽。运行中的请求保留原状态槽，只追加新块："
            "没有任何移动，也没有压缩（condense）。"
        ),
    ),
    "v2:rejection_sampler": StageText(
        ("Verify the drafts (rejection sampler)", "验证草稿（拒绝采样）"),
        V2_REJECTION_STAGE.why,
        (
            "模型运行器 V2 的拒绝采样器，目标取贪心结果（spec_decode/rejection_sampler.py，input_batch.py "
            "中的 "
            "get_num_sampled_and_rejected）：由目标模型在每一行的选择决定。每一行输出被接受的草稿再加一个 "
            "token：第一个错误草稿处目标模型的 token，或全部正确时的奖励 token。随后 post_update 把状态槽的 "
            "num_computed_tokens 推进本行的 token "
            "数减去被拒绝的个数，调度器也把自己的计数回退同样多；被拒绝草稿的 KV 槽位之后被新 token 覆盖。"
        ),
    ),
    "nanovllm:positions": StageText(
        ("Token positions", "token 位置"),
        (
            "nano-vllm builds them per sequence: a prefill covers positions num_cached_tokens up to "
            "num_cached_tokens + num_scheduled_tokens (a prefix-cache hit or an earlier chunk is skipped); "
            "a decode feeds position len(seq) - 1."
        ),
        (
            "nano-vllm 逐序列生成位置：预填充覆盖 num_cached_tokens 到 num_cached_tokens + "
            "num_scheduled_tokens（跳过前缀缓存命中的部分或之前已算过的块）；解码输入位置 len(seq) - 1。"
        ),
    ),
    "nanovllm:input_ids": StageText(
        ("Input ids", "输入 ID"),
        (
            "nano-vllm has no token-id table: it concatenates each sequence's own token ids, "
            "seq[num_cached_tokens : num_cached_tokens + num_scheduled_tokens], one sequence after another "
            "(a decode feeds seq.last_token). No gather through token_indices."
        ),
        (
            "nano-vllm 没有 token ID 表：它把每个序列自己的 token ID seq[num_cached_tokens : "
            "num_cached_tokens + num_scheduled_tokens] 依次拼接（解码时取 seq.last_token），不经过 "
            "token_indices 的 gather。"
        ),
    ),
    "nanovllm:cu_seqlens_q": StageText(
        ("Query boundaries (cu_seqlens_q)", "query 边界 (cu_seqlens_q)"),
        (
            "Where each sequence's query tokens start and end in the flat batch: [0, "
            "*cumsum(num_scheduled_tokens)]. flash_attn_varlen_func splits the queries with it; a decode "
            "step has none and passes context_lens instead."
        ),
        (
            "每个序列的 query token 在扁平批次中的起止位置：[0, "
            "*cumsum(num_scheduled_tokens)]。flash_attn_varlen_func 用它切分 query；解码步没有它，改传 "
            "context_lens。"
        ),
    ),
    "nanovllm:cu_seqlens_k": StageText(
        ("Key boundaries (cu_seqlens_k)", "key 边界 (cu_seqlens_k)"),
        (
            "The same for keys: each sequence has num_cached_tokens + num_scheduled_tokens keys. It equals "
            "cu_seqlens_q unless some keys are already in the cache (a prefix-cache hit or an earlier "
            "chunk)."
        ),
        (
            "key 的起止位置：每个序列有 num_cached_tokens + num_scheduled_tokens 个 key。除非有 key "
            "已在缓存中（前缀缓存命中或之前的分块），它与 cu_seqlens_q 相同。"
        ),
    ),
    "nanovllm:slot_mapping": StageText(
        ("Slot mapping", "槽位映射"),
        (
            "The KV-cache slot each new token is written to: block_table[position // block_size] * "
            "block_size + position % block_size. Cached tokens are not written again."
        ),
        (
            "每个新 token 写入的 KV cache 槽位：block_table[position // block_size] * block_size + position "
            "% block_size。已缓存的 token 不再写入。"
        ),
    ),
    "nanovllm:block_tables": StageText(
        ("Block tables", "块表"),
        (
            "Each sequence's block list, padded with -1 to the longest. A prefill passes them only when "
            "cu_seqlens_k[-1] > cu_seqlens_q[-1] (some keys come from the cache); otherwise attention reads "
            "this step's K/V directly. A decode always passes them."
        ),
        (
            "每个序列的块列表，用 -1 补齐到最长。预填充只在 cu_seqlens_k[-1] > cu_seqlens_q[-1]（有 key "
            "来自缓存）时传入；否则注意力直接读取本步的 K/V。解码总是传入。"
        ),
    ),
    "nanovllm:last_indices": StageText(
        ("Last token of each sequence (last_indices)", "每个序列的最后一个 token (last_indices)"),
        (
            "In a prefill the LM head keeps only the rows last_indices = cu_seqlens_q[1:] - 1; a decode has "
            "one row per sequence already. A sequence still in a partial prefill gets a logits row whose "
            "sample is dropped."
        ),
        (
            "预填充时 LM head 只保留 last_indices = cu_seqlens_q[1:] - 1 "
            "这几行；解码时每个序列本来就只有一行。仍在分块预填充中的序列也会得到一行 "
            "logits，但其采样结果被丢弃。"
        ),
    ),
}


def _spec_text(spec: StageSpec) -> StageText:
    return StageText(spec.title, spec.why, spec.why_zh)


def _specs(cls: type) -> list[StageSpec]:
    return [getattr(cls, method).stage_spec for method in cls.STAGES]  # type: ignore[attr-defined]


@cache
def stage_texts() -> tuple[tuple[str, str, str, StageText], ...]:
    """(key, runner, flavour, text) of every stage any flavour or runner can show, in pipeline
    order: V1's (vLLM's, then the flavours' own), then Model Runner V2's."""
    out: dict[str, tuple[str, str, str, StageText]] = {}
    for flavor in FLAVORS:
        cls = engine_class(flavor).stages_from()
        own = f"{flavor}:" if flavor == "nanovllm" else ""  # nano-vllm's stages are its own
        if hasattr(cls, "update_states"):
            out.setdefault("update_states", ("update_states", "v1", flavor, OTHER_TEXTS["update_states"]))
        for spec in _specs(cls):
            key = own + spec.name
            text = OTHER_TEXTS.get(key) or _spec_text(spec)
            out.setdefault(key, (key, "v1", flavor, text))
    out["rejection_sampler"] = ("rejection_sampler", "v1", "vllm", OTHER_TEXTS["rejection_sampler"])
    out["v2:" + FINISH_STAGE.name] = (
        "v2:" + FINISH_STAGE.name,
        "v2",
        "vllm",
        OTHER_TEXTS["v2:finish_and_add"],
    )
    for spec in _specs(ModelRunnerV2):
        out["v2:" + spec.name] = ("v2:" + spec.name, "v2", "vllm", _spec_text(spec))
    rejection = "v2:" + V2_REJECTION_STAGE.name
    out[rejection] = (rejection, "v2", "vllm", OTHER_TEXTS[rejection])
    return tuple(out.values())
