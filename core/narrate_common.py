"""The narration's shared vocabulary: the sentence items the page renders (`Item`, `Text`) and how
every narration module writes them: one text in both languages (`en_zh`), one sentence item
(`sentence`), lists of requests (`join_en`, `join_zh`), block ids (`block_ranges`) and counts
(`plural`). Used by the narration (core/narrate*.py) and the answer checks (core/answers*.py)."""

from __future__ import annotations

from typing import Any

Item = dict[str, Any]
Text = dict[str, str]


def en_zh(en: str, zh: str) -> Text:
    """One text in English and 简体中文."""
    return {"en": en, "zh": zh}


def sentence(
    key: str, text: Text, refs: list[tuple[str, Any]] | None = None, stage: str | None = None
) -> Item:
    """One sentence item: its key, its text, what it refers to (kind, id) and its stage (None: a
    step-level sentence)."""
    return {
        "key": key,
        "text": text,
        "refs": [{"kind": k, "id": i} for k, i in (refs or [])],
        "stage": stage,
    }


def join_en(xs: list[Any]) -> str:
    """`a, b and c`."""
    s = [str(x) for x in xs]
    return s[0] if len(s) == 1 else ", ".join(s[:-1]) + " and " + s[-1]


def join_zh(xs: list[Any]) -> str:
    """`a、b 和 c`."""
    s = [str(x) for x in xs]
    return s[0] if len(s) == 1 else "、".join(s[:-1]) + " 和 " + s[-1]


def block_ranges(bs: list[int]) -> str:
    """Block ids, runs written as ranges: 1–9, 13, 14."""
    out: list[str] = []
    i = 0
    while i < len(bs):
        j = i
        while j + 1 < len(bs) and bs[j + 1] == bs[j] + 1:
            j += 1
        out.append(f"{bs[i]}–{bs[j]}" if j - i >= 2 else ", ".join(str(b) for b in bs[i : j + 1]))
        i = j + 1
    return ", ".join(out)


def plural(n: int, word: str) -> str:
    """`1 token`, `3 tokens`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
