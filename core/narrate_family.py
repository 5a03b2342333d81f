"""Parallel sampling in words (en, 简体中文): when a request's children (n > 1, `scheduler.parents`)
are admitted, which prompt blocks they share, why that needs no copy-on-write in vLLM V1, and which
blocks each child holds alone. Every number comes from the trace: the children and their parent
(`scheduler.parents`), the prefix-cache hits (seq_lens less the scheduled tokens), the blocks'
owners and `ref_cnt` (`kv_cache`)."""

from __future__ import annotations

from typing import Any

from pagedviz.core.narrate_common import Item, block_ranges, en_zh, join_en, join_zh, plural, sentence
from pagedviz.core.narrate_facts import Facts


def _sampler_words(f: Facts, n: int) -> tuple[str, str]:
    """How the children's outputs come to differ, as pagedviz samples them."""
    if "num_layers" in f.t.kv_cache:  # the tiny model ran
        return (
            " Each child samples at temperature 1 with draws of its own (Gumbel noise keyed by the "
            "seed, its id and the position), since vLLM refuses n > 1 with greedy sampling: its "
            "outputs are its own.",
            "每个子请求都以 temperature 1 用自己的随机数采样（由种子、它的 id 和位置决定的 Gumbel 噪声），"
            "因为 vLLM 不允许在贪心采样下使用 n > 1：它的输出是它自己的。",
        )
    return (
        " Their outputs differ: without a model pagedviz's sampler draws each token from the child's "
        "own id, as sampling with temperature > 0 would.",
        "它们的输出各不相同：没有模型时，pagedviz 的采样器按子请求自己的 id 抽取每个 token，"
        "就像 temperature > 0 的采样那样。",
    )


def sibling_items(f: Facts, resumed: set[str] | frozenset[str] = frozenset()) -> list[Item]:
    """One sentence per parent whose children are admitted this step (`resumed`: Model Runner V2's
    resumed requests, which travel among the new ones)."""
    parents: dict[str, Any] = f.sched.get("parents") or {}
    if not parents:
        return []
    admitted: dict[str, list[str]] = {}
    for rid in f.sched.get("new_req_ids", []):
        info = parents.get(str(rid))
        if info is not None and str(rid) not in resumed and f.row(str(rid)) is not None:
            admitted.setdefault(str(info["parent"]), []).append(str(rid))
    owners = f.owners()
    ref_cnt = list(f.t.kv_cache.get("ref_cnt", []))
    items = []
    for parent, kids in admitted.items():
        n = int(parents[kids[0]]["n"])
        family = {c for c, i in parents.items() if i["parent"] == parent}
        held = {c: sorted(b for b, o in owners.items() if c in o) for c in kids}
        shared = sorted({b for c in kids for b in held[c] if len(family & set(owners[b])) > 1})
        hits = {c: int(f.computed[r]) for c in kids if (r := f.row(c)) is not None}
        hitters = [c for c in kids if hits.get(c, 0) > 0]
        r0 = f.row(kids[0])
        prompt = f.total_tokens(r0) if r0 is not None else None
        own = {c: [b for b in held[c] if b not in shared] for c in kids}
        refs: list[tuple[str, Any]] = [("request", c) for c in kids] + [("block", b) for b in shared]
        all_en = "are the" if len(kids) == n else "is one of the" if len(kids) == 1 else "are among the"
        en = (
            f"{join_en(kids)} {all_en} n = {n} children of request {parent}: vLLM's ParentRequest "
            f"names them {{index}}_{{request_id}} and adds them to the scheduler in index order, each "
            f"with {parent}'s prompt"
        )
        zh = (
            f"{join_zh(kids)} 是请求 {parent} 的 n = {n} 个子请求{'' if len(kids) == n else '中的成员'}："
            f"vLLM 的 ParentRequest 把它们命名为 {{index}}_{{request_id}}，按 index 顺序交给调度器，"
            f"每个都带着 {parent} 的提示"
        )
        if prompt is not None:
            en += f" ({plural(prompt, 'token')})"
            zh += f"（{prompt} 个 token）"
        en += ". vLLM V1 does not copy on write"
        zh += "。vLLM V1 不做写时复制（copy-on-write）"
        if shared and hitters:
            counts = sorted({ref_cnt[b] for b in shared if b < len(ref_cnt)})
            cnt = "/".join(str(c) for c in counts)
            found = join_en(sorted({hits[c] for c in hitters}))
            en += (
                f": the children share the prompt's full blocks {block_ranges(shared)} only through "
                f"prefix-cache hits ({join_en(hitters)} found {found} tokens cached; ref_cnt {cnt}). "
                "A full block is never written again, so sharing it needs no copy"
            )
            zh += (
                f"：子请求只通过前缀缓存命中共享提示的满块 {block_ranges(shared)}（{join_zh(hitters)} 命中了 "
                f"{join_zh(sorted({hits[c] for c in hitters}))} 个已缓存的 token；ref_cnt 为 {cnt}）。"
                "满块之后不会再被写入，所以共享它不需要复制"
            )
        else:
            en += (
                ": without prefix-cache hits the children share no block, and each computes the whole "
                "prompt into blocks of its own"
            )
            zh += "：没有前缀缓存命中时，子请求不共享任何块，每个都把整个提示算进自己的块里"
        mine = [f"{c}: {block_ranges(own[c])}" for c in kids if own[c]]
        if mine:
            en += (
                "; the last, partial prompt block and the outputs are each child's own, computed by it "
                f"({'; '.join(mine)})"
            )
            zh += f"；最后那个未满的提示块和输出都归各子请求自己，由它自己计算（{'；'.join(mine)}）"
        s_en, s_zh = _sampler_words(f, n)
        items.append(sentence(f"children:{parent}", en_zh(en + "." + s_en, zh + "。" + s_zh), refs))
    return items
