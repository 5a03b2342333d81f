"""The editors in a real Chromium (issue 37 point 9): the run page's JSON editor checks the text as
it is typed, malformed JSON with its line and column, a scenario against the server's validator,
and shows the answer beside the editor without Run being pressed, gone once the text is valid; the
landing form's help shows the bounds the server enforces."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pagedviz.core import Limits
from pagedviz.core.schema import scenario_schema
from tests.support.browser import shot, watched_page

# the validator's maxima for the scenario the landing form loads (seed-001)
MAXIMA = """async () => {
  const s = (await (await fetch('/api/presets/seed-001')).json()).scenario;
  const r = await fetch('/api/scenarios/validate',
    {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(s)});
  return (await r.json()).maxima;
}"""


@pytest.fixture()
def page(browser: object, base_url: str) -> Iterator[object]:
    yield from watched_page(browser, base_url, 1280, 720)


def _beside(page: object) -> None:
    """The editor's answer is to the right of the text, level with it, and in the window with it
    (the run's charts may still be drawn above and move the editor down)."""
    page.locator("#scenario-json").scroll_into_view_if_needed()
    area = page.locator("#scenario-json").bounding_box()
    box = page.locator("#editor-msg").bounding_box()
    assert box["x"] >= area["x"] + area["width"] - 1, (area, box)
    assert area["y"] - 1 <= box["y"] < area["y"] + area["height"], (area, box)
    assert box["y"] >= 0 and box["y"] + box["height"] <= 720, box


def _edit(page: object, text: str) -> None:
    """Replace the editor's text as a person does: select all, then type (input events, no Run)."""
    page.locator("#scenario-json").click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)


def test_the_json_editor_checks_as_you_type_beside_the_editor_and_the_form_shows_the_servers_bounds(
    page: object,
) -> None:
    # the landing form: each number field's help shows the schema's bounds, which the server enforces
    page.goto(page.base + "/")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    help_text = page.locator("#help-max_num_batched_tokens").inner_text()
    assert "(1 … 16384; " in help_text and "1048576" not in help_text, help_text
    schema = scenario_schema(Limits.from_env())
    props = {**schema["properties"], **schema["properties"]["config"]["properties"]}
    for key, prop in props.items():
        helper = page.locator(f"#help-{key}")
        if prop.get("type") != "integer" or not helper.count():
            continue
        lo, hi = prop.get("minimum"), prop.get("maximum")
        said = helper.inner_text()
        assert (f"{lo} … {hi}" if hi is not None else f"≥ {lo}") in said, (key, said)
    # under num_kv_blocks' own bound, the largest value the server accepts with the other fields as
    # they are (the step-trace or KV cache size binds first): that value is valid, one more is not
    top = page.evaluate(MAXIMA)["config.num_kv_blocks"]
    assert top < props["num_kv_blocks"]["maximum"], top
    page.wait_for_function(
        "(n) => document.getElementById('help-num_kv_blocks').textContent.includes(`At most ${n} with`)",
        arg=top,
    )
    for value, valid in ((top + 1, False), (top, True)):
        page.fill("#f-num_kv_blocks", str(value))
        page.wait_for_selector(f"#validation.{'ok' if valid else 'bad'}")
        assert ("PAGEDVIZ_" in page.locator("#editor").inner_text()) is not valid, value
    shot(page, "editor-form-maxima.png")

    # the run page's editor, at 1280x720
    page.goto(page.base + "/run?preset=seed-001&step=2")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    url = page.url
    page.click("#editor-panel summary")
    page.wait_for_function("document.getElementById('scenario-json').value.length > 0")
    scenario = json.loads(page.locator("#scenario-json").input_value())
    good = json.dumps(scenario, indent=2)
    lines = good.split("\n")
    # the first line that ends with a comma loses it: the parser stops at the next line's first
    # character (line i + 2, 1-based)
    i = next(n for n, line in enumerate(lines) if line.endswith(","))
    broken = "\n".join([*lines[:i], lines[i][:-1], *lines[i + 1 :]])
    col = len(lines[i + 1]) - len(lines[i + 1].lstrip()) + 1
    page.locator("#scenario-json").scroll_into_view_if_needed()
    # the run's charts above the editor draw once near the view: the editor has its place after
    page.wait_for_selector("#run-charts[data-phase='drawn']", state="attached", timeout=60_000)
    _edit(page, broken)
    page.wait_for_selector("#editor-msg[data-state='bad']")
    said = page.locator("#editor-msg").inner_text()
    assert said.startswith(f"line {i + 2}, column {col}: not JSON ("), said
    assert page.locator("#scenario-json").get_attribute("aria-invalid") == "true"
    _beside(page)
    shot(page, "editor-live-json-error.png")

    # JSON, but a scenario the server refuses: its field, from POST /api/scenarios/validate
    scenario["config"]["block_size"] = 0
    _edit(page, json.dumps(scenario, indent=2))
    page.wait_for_function("document.getElementById('editor-msg').textContent.includes('config.block_size')")
    assert "config.block_size: must be >= 1 (got 0)" in page.locator("#editor-msg").inner_text()
    _beside(page)

    # fixed: the error goes, no Run pressed
    _edit(page, good)
    page.wait_for_selector("#editor-msg[data-state='ok']")
    said = page.locator("#editor-msg").inner_text()
    assert "block_size" not in said and "not JSON" not in said and said.startswith("✓"), said
    assert page.locator("#scenario-json").get_attribute("aria-invalid") is None
    assert page.url == url  # nothing ran
    shot(page, "editor-live-json-ok.png")

    # 中文
    page.goto(page.base + "/run?preset=seed-001&step=2&lang=zh")
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.click("#editor-panel summary")
    page.wait_for_function("document.getElementById('scenario-json').value.length > 0")
    _edit(page, broken)
    page.wait_for_selector("#editor-msg[data-state='bad']")
    assert page.locator("#editor-msg").inner_text() == f"第 {i + 2} 行第 {col} 列：不是合法的 JSON"
