"""M-RoPE: prompt positions follow Qwen2-VL around an image, the preset's 3 x T array continues
after the image, and an image must fit its prompt."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagedviz.core import Scenario, ScenarioError, load_preset, make_engine
from pagedviz.core.runners.mrope import mrope_prompt_positions


def run(preset: str) -> list:
    return list(make_engine(load_preset(preset)).run())


def _mrope_by_definition(num_prompt: int, offset: int, t: int, h: int, w: int) -> np.ndarray:
    """Token by token: text before the image counts 0, 1, ...; image token j sits at its
    (t, h, w) grid index plus offset; text after the image counts on from offset + max(t, h, w)."""
    cols = []
    n_img = t * h * w
    for j in range(num_prompt):
        if j < offset:
            cols.append((j, j, j))
        elif j < offset + n_img:
            ti, hi, wi = np.unravel_index(j - offset, (t, h, w))
            cols.append((offset + ti, offset + hi, offset + wi))
        else:
            p = offset + max(t, h, w) + (j - offset - n_img)
            cols.append((p, p, p))
    return np.array(cols, dtype=np.int64).T


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(0, 5))
def test_mrope_prompt_positions_follow_qwen2_vl(offset: int, t: int, h: int, w: int, tail: int) -> None:
    n = offset + t * h * w + tail
    m = mrope_prompt_positions(n, (offset, t, h, w))
    assert m.positions.tolist() == _mrope_by_definition(n, offset, t, h, w).tolist()
    assert m.delta == offset + max(t, h, w) + tail - n


def test_mrope_preset_gives_a_3_by_t_array_that_continues_after_the_image() -> None:
    steps = run("demo-mrope")
    full = _mrope_by_definition(12, 3, 1, 2, 3)
    cols = []
    for t in steps:
        a = t.arrays
        mp = a["mrope_positions"]
        assert mp.shape == (3, len(a["positions"]))
        img_rows = a["req_indices"] == t.batch["req_ids"].index("img")
        prompt = img_rows & (a["positions"] < 12)
        assert mp[:, prompt].tolist() == full[:, a["positions"][prompt]].tolist()
        # decoded tokens: position + delta (-3) on all three rows
        dec = img_rows & (a["positions"] >= 12)
        assert (mp[:, dec] == a["positions"][dec] - 3).all()
        # a text-only request: three equal rows, equal to positions
        if "txt" in t.batch["req_ids"]:
            txt = a["req_indices"] == t.batch["req_ids"].index("txt")
            assert (mp[:, txt] == a["positions"][txt]).all()
        cols.extend(mp[:, dec].T.tolist())
    assert cols[0] == [9, 9, 9], "the first decoded token takes max + 1 after the text, not 12"


def test_image_must_fit_its_prompt() -> None:
    base = load_preset("demo-mrope").to_dict()
    reqs = [dict(base["requests"][0], image={"offset": 10, "t": 1, "h": 2, "w": 3}), base["requests"][1]]
    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**base, "requests": reqs})
    assert e.value.errors[0][0] == "requests[0].image"
