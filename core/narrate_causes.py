"""Why requests wait and for whom a request was preempted, in words rendered only from the trace's
cause objects (`scheduler.waiting_causes`, `scheduler.preemption_causes`; docs/arrays.md, "Why
requests wait"), in English and 简体中文.

Each cause has one fixed phrase naming the request (`MARKERS`): "4 waits for the token budget",
"请求 4 在等 token 预算". Tests read the narration back through `stated_causes`: every phrase in a
sentence must match the cause object of the request it names, so no sentence can state a cause
the trace does not hold.
"""

from __future__ import annotations

import re
from typing import Any

from pagedviz.core.narrate_common import Item, en_zh, join_en, join_zh, sentence
from pagedviz.core.narrate_facts import Facts
from pagedviz.core.scenario_parts import EngineConfig

# the phrase that states each cause for request {r} (behind: requests {r} behind {h})
MARKERS: dict[str, tuple[str, str]] = {
    "token_budget": ("request {r} waits for the token budget", "请求 {r} 在等 token 预算"),
    "kv_pool": ("request {r} waits for KV blocks", "请求 {r} 在等 KV 块"),
    "max_num_seqs": ("request {r} waits for a running slot", "请求 {r} 在等运行名额"),
    "preemption": ("request {r} is held back by this step's preemption", "请求 {r} 受这一步的抢占所限"),
    "output_in_flight": ("request {r} waits for its output in flight", "请求 {r} 在等它在途的输出"),
    "prefill_chunk": ("request {r} is still prefilling", "请求 {r} 仍在预填充"),
    "unknown": (
        "the recorded numbers do not show why request {r} waits",
        "录制的数字看不出请求 {r} 为何等待",
    ),
    "behind": ("{r} wait{s} behind request {h}", "{r} 排在请求 {h} 后面等待"),
    # many requests behind one head, all the rest of the queue: counted, not named
    "behind_rest": ("the {n} others queue behind request {h}", "其余 {n} 个请求排在请求 {h} 后面等待"),
}
MANY = 4  # more requests than this behind one head, all the rest of the queue, are counted


def _marker(cause: str, lang: int, r: str, h: str = "", s: str = "", n: int = 0) -> str:
    return MARKERS[cause][lang].format(r=r, h=h, s=s, n=n)


def _tokens(n: int) -> str:
    return f"{n} token" + ("" if n == 1 else "s")


def _head_words(rid: str, c: dict[str, Any], f: Facts, config: EngineConfig | None) -> tuple[str, str]:
    """The sentence part for a request with its own cause (not `behind`), en and zh."""
    cause = str(c.get("cause"))
    en, zh = _marker(cause, 0, rid), _marker(cause, 1, rid)
    if cause == "token_budget":
        need, left = int(c["tokens_needed"]), int(c["tokens_left"])
        en += f": it needs {_tokens(need)} and {left} {'is' if left == 1 else 'are'} left"
        zh += f"：它需要 {need} 个 token，预算只剩 {left} 个"
        if c.get("padded"):
            en += " (padded to 1 + num_speculative_tokens for a uniform decode"
            zh += "（为了统一的解码形状补齐到 1 + num_speculative_tokens"
            en += "; vLLM does not schedule it unpadded)" if left > 0 else ")"
            zh += "；vLLM 不会不补齐就调度它）" if left > 0 else "）"
        elif c.get("first_seq_only_chunks"):
            en += " (nano-vllm lets only a step's first sequence take a chunk)"
            zh += "（nano-vllm 每一步只允许第一个序列分块）"
        elif left > 0 and config is not None and not config.enable_chunked_prefill:
            en += " (chunked prefill is off: it must fit whole)"
            zh += "（分块预填充关闭：必须整个放下）"
    elif cause == "kv_pool":
        need, free = int(c["blocks_needed"]), int(c["blocks_free"])
        en += f": it needs {need} {'block' if need == 1 else 'blocks'}"
        en += f" and {free} {'is' if free == 1 else 'are'} free"
        zh += f"：它需要 {need} 个块，只有 {free} 个空闲"
        if c.get("watermark_blocks"):
            w = int(c["watermark_blocks"])
            en += f", {w} of them held back by the watermark"
            zh += f"，其中 {w} 个被水位线留作余量"
        if c.get("full_sequence"):
            en += " (its whole sequence must fit: scheduler_reserve_full_isl)"
            zh += "（整个序列都必须放得下：scheduler_reserve_full_isl）"
    elif cause == "max_num_seqs":
        n, m = int(c["running"]), int(c["max_num_seqs"])
        if f.nano:
            en += f": {n} sequences are already in this step's batch, max_num_seqs = {m}"
            zh += f"：这一步的批次里已有 {n} 个序列，max_num_seqs = {m}"
        else:
            en += f": {n} requests are running, max_num_seqs = {m}"
            zh += f"：已有 {n} 个请求在运行，max_num_seqs = {m}"
    elif cause == "preemption":
        victims = [str(v) for v in c.get("preempted", [])]
        if rid in victims:
            en += ": it was preempted in this step, and vLLM admits nobody in a step that preempted"
            zh += "：它在这一步被抢占，而 vLLM 在发生抢占的一步不接纳任何请求"
            if f.nano:
                en, zh = _marker(cause, 0, rid), _marker(cause, 1, rid)
                en += ": it was preempted in this step's decode"
                zh += "：它在这一步的解码中被抢占"
        else:
            en += f": vLLM admits nobody in a step that preempted ({join_en(victims)})"
            zh += f"：发生抢占（{join_zh(victims)}）的一步，vLLM 不接纳任何请求"
    elif cause == "output_in_flight":
        n = int(c.get("tokens_in_flight", 0))
        en += (
            f" ({_tokens(n)} sampled before its preemption, async scheduling) before it resumes; "
            "the requests behind it may go first"
        )
        zh += f"（抢占前采样的 {n} 个 token，异步调度），之后才能恢复；排在它后面的请求可以先走"
    elif cause == "prefill_chunk":
        s, r = int(c["tokens_scheduled"]), int(c["tokens_remaining"])
        en += f": {s} of its tokens this step, {r} still to go; nano-vllm keeps it in waiting until "
        en += "its prompt is done"
        zh += f"：这一步 {s} 个 token，还剩 {r} 个；nano-vllm 在它的提示算完之前一直把它留在等待队列"
    elif cause == "unknown":
        en += (
            f" ({c.get('tokens_left')} tokens left, {c.get('blocks_free')} blocks free, "
            f"{c.get('running')} running of max_num_seqs = {c.get('max_num_seqs')})"
        )
        zh += (
            f"（预算剩 {c.get('tokens_left')} 个 token，{c.get('blocks_free')} 个空闲块，"
            f"运行 {c.get('running')} 个，max_num_seqs = {c.get('max_num_seqs')}）"
        )
    if c.get("derived") == "recording" and cause != "unknown":
        en += " (derived from the recorded numbers)"
        zh += "（由录制中的数字推出）"
    return en, zh


def waiting_items(f: Facts, config: EngineConfig | None) -> list[Item]:
    """ "Still waiting: ..." with each request's cause: the requests with a cause of their own,
    then the ones behind each head."""
    waiting = [str(r) for r in f.sched.get("waiting_req_ids", [])]
    if not waiting:
        return []
    causes: dict[str, dict[str, Any]] = {str(k): v for k, v in (f.sched.get("waiting_causes") or {}).items()}
    en, zh = [f"Still waiting: {join_en(waiting)}"], [f"仍在等待：{join_zh(waiting)}"]
    behind: dict[str, list[str]] = {}
    parts_en, parts_zh = [], []
    for rid in waiting:
        c = causes.get(rid)
        if c is None:
            continue  # a trace without causes (older runs): no reason is stated
        if c.get("cause") == "behind":
            behind.setdefault(str(c["behind"]), []).append(rid)
            continue
        e, z = _head_words(rid, c, f, config)
        parts_en.append(e)
        parts_zh.append(z)
    for h, rs in behind.items():
        if len(rs) > MANY and rs == waiting[waiting.index(h) + 1 :]:
            parts_en.append(_marker("behind_rest", 0, "", h, n=len(rs)) + " (first come, first served)")
            parts_zh.append(_marker("behind_rest", 1, "", h, n=len(rs)) + "（先来先服务）")
            continue
        parts_en.append(
            _marker("behind", 0, join_en(rs), h, "" if len(rs) > 1 else "s") + " (first come, first served)"
        )
        parts_zh.append(_marker("behind", 1, join_zh(rs), h) + "（先来先服务）")
    text_en = (
        en[0] + (". " + "; ".join(parts_en)[:1].upper() + "; ".join(parts_en)[1:] if parts_en else "") + "."
    )
    text_zh = zh[0] + ("。" + "；".join(parts_zh) if parts_zh else "") + "。"
    refs: list[tuple[str, Any]] = [("request", r) for r in waiting]
    return [sentence("waiting", en_zh(text_en, text_zh), refs)]


def preempted_for(f: Facts, rid: str) -> tuple[str, str] | None:
    """Why `rid` was preempted, from its cause object: (en, zh), or None without one."""
    c = (f.sched.get("preemption_causes") or {}).get(rid)
    if not c or c.get("cause") != "kv_pool":
        return None
    who = str(c["for"])
    if who == rid:
        en = f"request {rid} was preempted for itself: its own next tokens needed a block "
        en += "the free queue did not have"
        zh = f"请求 {rid} 为它自己被抢占：它自己的下一个 token 需要一个空闲队列里没有的块"
    else:
        en = f"request {rid} was preempted for request {who}: {who}'s next tokens needed a block "
        en += "the free queue did not have"
        zh = f"请求 {rid} 为请求 {who} 被抢占：{who} 的下一个 token 需要一个空闲队列里没有的块"
    if "blocks_needed" in c:
        en += f" ({c['blocks_needed']} needed, {c['blocks_free']} free)"
        zh += f"（需要 {c['blocks_needed']} 个，空闲 {c['blocks_free']} 个）"
    if c.get("derived") == "recording":
        en += " (derived from the recorded numbers)"
        zh += "（由录制中的数字推出）"
    return en, zh


# reading causes back out of words (tests): each marker as a regex with the request ids captured
_ID = r"[^\s,;:()（），；：。、]+"
_IDS = _ID + r"(?:(?:, | and |、| 和 )" + _ID + ")*"


def _pattern(template: str) -> re.Pattern[str]:
    out = ""
    for p in re.split(r"(\{r\}|\{h\}|\{s\}|\{n\})", template):
        if p == "{r}":
            out += f"(?P<r>{_IDS if template.startswith('{r}') else _ID})"
        elif p == "{h}":
            out += f"(?P<h>{_ID})"
        elif p == "{s}":
            out += "s?"
        elif p == "{n}":
            out += r"(?P<r>\d+)"
        else:
            out += re.escape(p)
    return re.compile(out, re.IGNORECASE)


PATTERNS = {cause: (_pattern(en), _pattern(zh)) for cause, (en, zh) in MARKERS.items()}


def stated_causes(text: str, lang: str) -> list[tuple[str, str, str | None]]:
    """(cause, request, head for `behind`) for every cause phrase in `text` (`lang` "en" or
    "zh"); a `behind` phrase gives one tuple per request it names, `behind_rest` one with the
    count in place of the request."""
    k = 0 if lang == "en" else 1
    out: list[tuple[str, str, str | None]] = []
    for cause, pats in PATTERNS.items():
        for m in pats[k].finditer(text):
            if cause == "behind":
                names = re.split(r", | and |、| 和 ", m.group("r"))
                out += [(cause, n, m.group("h")) for n in names if n]
            else:
                out.append((cause, m.group("r"), m.groupdict().get("h")))
    return out
