"""The browser's own work per step change of the run page, from a Chromium trace: robust where
ui_timing.py's wall-clock times are not, on a machine shared with other work.

ui_timing.py times a step change by the clock, from the key press to the frame painted; on a busy
machine that time is mostly waiting for a core. This reads the same step changes' thread time
(the CPU the renderer's main thread spent, trace events' `tdur`) from a Chromium trace: "to paint"
from the key press to the frame that shows the step (the page's script, style, layout, paint),
"whole step" from the key press to the next one (also what the step put off until after its frame:
heatmaps and table rows out of view, the read-ahead), and the wall time of the first for reference.
Each step is visited once, settled (the page idle before each key, as ui_timing.py's "settled").
--baseline-static DIR walks the same steps again with the page's static files from DIR (another
commit's `static/`: `git archive <commit> static | tar -x -C /tmp/base`), in the same run; the
ratios new / baseline are printed. Run:

    .venv/bin/python benchmarks/ui_cpu.py [--requests 128] [--preset seed-000,demo-v2-slots]
        [--view top|system|both] [--max-steps 30] [--baseline-static DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx
from ui_timing import CHROMIUM_ARGS, SETTLE, generated, static_from

from pagedviz.app.serve import running_server

# a trace mark when the page says a step is painted (body[data-painted], set after its frame)
MARK = """addEventListener("DOMContentLoaded", () => new MutationObserver(() => performance.mark("painted"))
  .observe(document.body, { attributes: true, attributeFilter: ["data-painted"] }));"""
TASKS = ("ThreadControllerImpl::RunTask", "RunTask")


def step_costs(path: Path) -> list[tuple[float, float, float]]:
    """(wall ms to paint, main-thread CPU ms to paint, main-thread CPU ms of the whole step) per
    key press in the trace at `path`."""
    raw = json.loads(path.read_text())
    events = raw["traceEvents"] if isinstance(raw, dict) else raw
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    main = [e for e in events if names.get((e["pid"], e["tid"])) == "CrRendererMain"]
    keys = sorted(
        e["ts"]
        for e in main
        if e.get("name") == "EventDispatch" and e.get("args", {}).get("data", {}).get("type") == "keydown"
    )
    painted = sorted(e["ts"] for e in main if e.get("name") == "painted")
    tasks = [e for e in main if e.get("ph") == "X" and e.get("name") in TASKS]
    end = max((e["ts"] + e["dur"] for e in tasks), default=0)
    out = []
    for i, key in enumerate(keys):
        done = next((p for p in painted if p > key), None)
        if done is None:
            continue
        after = keys[i + 1] if i + 1 < len(keys) else end

        def cpu(a: float, b: float) -> float:
            return sum(
                e.get("tdur", e["dur"]) for e in tasks if a - 1000 <= e["ts"] < b and e["ts"] + e["dur"] >= a
            )

        out.append(((done - key) / 1000, cpu(key, done) / 1000, cpu(key, after - 1000) / 1000))
    return out


def walk(browser: Any, url: str, view: str, static: Path | None, max_steps: int, trace: Path) -> list[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(MARK)
    if static is not None:
        context.route("**/static/**", static_from(static))
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-complete='1']", state="attached", timeout=300_000)
    page.wait_for_selector("body[data-first-paint='1']", state="attached", timeout=60_000)
    if view:
        page.evaluate(f"document.querySelector({view!r}).scrollIntoView({{ block: 'start' }})")
    total = min(max_steps, int(page.evaluate("document.querySelectorAll('#timeline .tl-step').length")))
    page.evaluate(SETTLE)
    browser.start_tracing(
        page=page, path=str(trace), categories=["devtools.timeline", "toplevel", "blink.user_timing"]
    )
    for target in range(2, total + 1):
        page.evaluate(SETTLE)
        page.keyboard.press("ArrowRight")
        page.wait_for_selector(f"body[data-painted='{target}']", state="attached")
    page.evaluate(SETTLE)
    browser.stop_tracing()
    context.close()
    return step_costs(trace)


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=0, help="a generated N-request scenario (V2, async)")
    ap.add_argument("--preset", default="", help="preset ids (a,b,c) instead")
    ap.add_argument("--view", choices=("top", "system", "both"), default="both")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--baseline-static", type=Path, default=None)
    args = ap.parse_args()
    with running_server() as server, tempfile.TemporaryDirectory() as tmp:
        base = server.url
        targets: list[tuple[str, str, str]] = []
        if args.requests:
            made = httpx.post(f"{base}/api/runs", json=generated(args.requests), timeout=300)
            made.raise_for_status()
            url = f"{base}/run?s={made.json()['link']}"
            if args.view in ("top", "both"):
                targets.append((f"{args.requests} requests v2", url, ""))
            if args.view in ("system", "both"):
                targets.append((f"{args.requests} requests v2 (tables)", url, "#card-input_block_tables"))
        for pid in [p for p in args.preset.split(",") if p]:
            scenario = httpx.get(f"{base}/api/presets/{pid}").json()["scenario"]
            httpx.post(f"{base}/api/runs", json=scenario, timeout=120).raise_for_status()
            targets.append((pid, f"{base}/run?preset={pid}", ""))
        rows = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            for k, (label, url, view) in enumerate(targets):
                statics = [None, args.baseline_static] if args.baseline_static else [None]
                got = [
                    walk(browser, url, view, s, args.max_steps, Path(tmp) / f"t{k}-{i}.json")
                    for i, s in enumerate(statics)
                ]
                rows.append((label, got))
            browser.close()
    med = statistics.median
    print(
        "medians per step change (settled): wall ms to paint; main-thread CPU ms to paint, of the whole step"
    )
    print(
        f"{'run':34} {'wall':>7} {'cpu':>7} {'whole':>7}   baseline: {'wall':>6} {'cpu':>6} {'whole':>6}"
        "   cpu / base"
    )
    for label, got in rows:
        now = got[0]
        wall, cpu, whole = (med(x[i] for x in now) for i in range(3))
        line = f"{label:34} {wall:5.0f}ms {cpu:5.1f}ms {whole:5.1f}ms"
        if len(got) > 1:
            was = got[1]
            cn, cw = med(c for _, c, _ in now), med(c for _, c, _ in was)
            an, aw = med(a for _, _, a in now), med(a for _, _, a in was)
            line += (
                f"             {med(w for w, _, _ in was):4.0f}ms {cw:4.1f}ms {aw:4.1f}ms"
                f"   {cn / cw:.2f}x to paint, {an / aw:.2f}x whole"
            )
        print(line)


if __name__ == "__main__":
    main()
