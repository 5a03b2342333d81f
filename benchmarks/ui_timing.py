"""First render of the run page and the redraw per step change, in Debian's Chromium.

Starts a real server, opens the run page of a preset (seed-000 by default) or of a generated
N-request scenario (--requests N, no model, a pool big enough for all of them) and reads the page's
own timings, each two ways: when the page's script is done (tables written, heatmap canvases in
view drawn) and when the frame that shows it is painted (the browser's style, layout and paint done
too; a task queued from that frame's animation callback). What is out of view (heatmaps below the
first screen, a big table's rows and columns past what its box shows) follows once the page is
idle. A step change is also read from the browser's Event Timing ("on screen"): from the key
press to the frame presented, which adds the raster and the compositor's draw, done in software
here. First paint is from navigation start, for a cold first load and for warm reloads in the
same browser; a step change is from the → key, its fetch included, each step's first visit after
a page load: "rapid" presses the next key as soon as a step is painted (the step before is still
finishing what it put off: heatmaps out of view, a big table's later rows, the next steps'
read-ahead), "settled" once the page is idle after it, as a reader who looks at each step; a
pass back over the steps (cached) follows. "done" is the settled step change read to the end of
what it put off (body[data-put-off] back to 0): what a reader who scrolls waits for at most.
--requests N generates N requests with vLLM 0.33's defaults (Model Runner V2, async scheduling:
the state slots panel and the gathered block table on the page; --runner v1 for the V1 runner's
persistent batch) and walks its steps twice (--view both): with the page's first screen in view
(the slots panel, the request and token tables) and with the system level's block tables
scrolled into view (the gathered table, "(tables)"). With --stream N it also opens a scenario of
N requests the server has not computed and times step 1 painted while the later steps compute.
Targets: first paint with heatmaps under 1 s for every preset and under 1.5 s for 128 requests
(issue 17); a step change, painted settled (the "settled" column), under 50 ms median on the
presets and under 100 ms at 128 requests with the defaults (issue 40); step 1 of a new
1024-request run on the page in under 1 s.
The run-level charts under the page (static/runcharts.js: plotly.js loaded once the first step
is painted, the page idle and the reader within a screen of them) are on by default; --run-charts
both measures each run a second time with that module answered empty (the page as it was before
them), side by side in one run.
--baseline-static DIR measures each run a second time, just after, with the page's static files
(its script and styles) answered from DIR, e.g. another commit's `static/` (`git archive <commit>
static | tar -x -C /tmp/base`): before and after side by side, on the same server, the same load.
Run:

    .venv/bin/python benchmarks/ui_timing.py [--preset seed-000[,demo-v2-slots…] | --preset all
        | --requests 128] [--runner v2|v1] [--view top|system|both] [--stream 1024] [--repeat 3]
        [--run-charts on|off|both] [--baseline-static DIR]
"""

from __future__ import annotations

import argparse
import mimetypes
import statistics
from pathlib import Path
from typing import Any

import httpx
from big_runs import scenario as big_scenario

from pagedviz.app.links import pack
from pagedviz.app.serve import running_server


def generated(requests: int, max_tokens: int = 24, runner: str = "v2") -> dict[str, Any]:
    """N requests of 32 prompt tokens, no model; every request fits in the batch and the pool.
    runner "v2": vLLM 0.33's defaults (Model Runner V2, async scheduling: both left out of the
    config, so the defaults apply; the page shows the state slots panel and the gathered block
    table); "v1": the V1 runner's persistent batch (async scheduling still the default)."""
    config: dict[str, Any] = {
        "block_size": 16,
        "max_model_len": 32 + max_tokens,
        "max_num_reqs": requests,
        "max_num_batched_tokens": max(2048, 32 * requests),
        "num_kv_blocks": requests * ((32 + max_tokens) // 16 + 1) + 1,
        "model": None,
    }
    if runner != "v2":
        config["model_runner"] = runner
    return {
        "name": f"ui-{requests}" + ("" if runner == "v2" else f"-{runner}"),
        "seed": 0,
        "config": config,
        "requests": [{"id": f"r{i}", "prompt_len": 32, "max_tokens": max_tokens} for i in range(requests)],
        "max_steps": 4 * max_tokens,
    }


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


SETTLE = "new Promise((r) => requestIdleCallback(() => setTimeout(r, 250)))"

# the browser's own Event Timing entries: for each key press, from its timestamp to the moment the
# frame it changed was presented (raster and the compositor's draw included); entries of 16 ms
# and more are reported, in 8 ms steps
EVENT_TIMING = """
window.__keys = []; window.__shown = [];
addEventListener("keydown", (e) => window.__keys.push(e.timeStamp), true);
// when the page last had nothing put off (body[data-put-off] back to "0": canvasmap.js's count of
// the work a step change leaves for after its frame, heatmaps and tables out of view, read-ahead)
window.__quiet = 0;
addEventListener("DOMContentLoaded", () => new MutationObserver(() => {
  if (document.body.dataset.putOff === "0") window.__quiet = performance.now();
}).observe(document.body, { attributes: true, attributeFilter: ["data-put-off"] }));
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) if (e.name === "keydown") window.__shown.push([e.startTime, e.duration]);
}).observe({ type: "event", durationThreshold: 16, buffered: true });
"""


def on_screen(page: Any, first_key: int) -> list[float]:
    """ms from each key press since the `first_key`-th to its frame on screen (Event Timing); a
    press with no entry took under 16 ms and counts as 16."""
    page.wait_for_timeout(300)  # the last entries come once their frame is presented
    keys, shown = page.evaluate("[window.__keys, window.__shown]")
    by_start = {round(start, 1): duration for start, duration in shown}
    return [by_start.get(round(ts, 1), 16.0) for ts in keys[first_key:]]


# a step change, settled: ms from its key press to the page's put-off work all done (the frame
# after it painted, nothing left put off); the painted time where nothing was put off
DONE = """(painted) => {
  const key = window.__keys[window.__keys.length - 1];
  return window.__quiet > key ? Math.max(painted, window.__quiet - key) : painted;
}"""


def measure(context: Any, url: str, repeat: int, view: str = "") -> dict[str, Any]:
    """Page loads of `url` in one browser context (the first cold, the later ones warm: the HTTP
    cache and V8's code cache are filled) and every step change forward (rapid after even loads,
    settled after odd ones), then back (cached). `view`: a selector scrolled to the top of the
    window before the steps are walked (the page's first screen where empty)."""
    loads: list[tuple[float, float]] = []
    modes = ("rapid", "settled", "cached")
    painted: dict[str, list[list[float]]] = {m: [] for m in modes}  # [painted, script done] per step change
    screen: dict[str, list[float]] = {m: [] for m in modes}  # Event Timing
    done: list[float] = []  # settled: key press to everything put off done
    for k in range(max(3, repeat)):
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        page.wait_for_selector("body[data-complete='1']", state="attached", timeout=300_000)
        page.wait_for_selector("body[data-first-paint='1']", state="attached", timeout=60_000)
        loads.append(
            tuple(page.evaluate("[window.pagedvizTiming.firstRenderMs, window.pagedvizTiming.firstPaintMs]"))
        )
        if view:
            page.evaluate(f"document.querySelector({view!r}).scrollIntoView({{ block: 'start' }})")
        total = int(page.evaluate("document.querySelectorAll('#timeline .tl-step').length"))
        # forward: each step fetched (or prefetched while the page was idle) then drawn; back
        # again: drawn from the page's cache
        for key, targets, mode in (
            ("ArrowRight", range(2, total + 1), "settled" if k % 2 else "rapid"),
            ("ArrowLeft", range(total - 1, 0, -1), "cached"),
        ):
            first_key = int(page.evaluate("window.__keys.length"))
            for target in targets:
                if mode == "settled":
                    page.evaluate(SETTLE)
                page.keyboard.press(key)
                page.wait_for_selector(f"body[data-painted='{target}']", state="attached")
                painted[mode].append(
                    page.evaluate("[window.pagedvizTiming.lastStepPaintMs, window.pagedvizTiming.lastStepMs]")
                )
                if mode == "settled":
                    page.wait_for_selector("body[data-put-off='0']", state="attached", timeout=60_000)
                    page.evaluate(SETTLE)
                    done.append(page.evaluate(DONE, painted[mode][-1][0]))
            screen[mode] += on_screen(page, first_key)
        page.close()
    warm = loads[1:]
    fresh, settled, cached = (painted[m] for m in modes)
    return {
        "cold": loads[0][1],
        "warm": statistics.median(m for _, m in warm),
        "warm_js": statistics.median(t for t, _ in warm),
        "step": statistics.median(p for p, _ in fresh) if fresh else 0.0,
        "step_js": statistics.median(j for _, j in fresh) if fresh else 0.0,
        "step_max": max(p for p, _ in fresh) if fresh else 0.0,
        "settled": statistics.median(p for p, _ in settled) if settled else 0.0,
        "settled_js": statistics.median(j for _, j in settled) if settled else 0.0,
        "cached": statistics.median(p for p, _ in cached) if cached else 0.0,
        "done": statistics.median(done) if done else 0.0,
        "done_max": max(done) if done else 0.0,
        **{f"screen_{m}": statistics.median(v) if v else 0.0 for m, v in screen.items()},
    }


def static_from(root: Path) -> Any:
    """A route handler that answers the page's /static/ files from `root` (another commit's static/)."""

    def answer(route: Any) -> None:
        rel = route.request.url.split("/static/", 1)[1].split("?", 1)[0]
        path = (root / rel).resolve()
        if root.resolve() not in path.parents or not path.is_file():
            route.fulfill(status=404, body="")
            return
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        route.fulfill(body=path.read_bytes(), content_type=kind)

    return answer


def first_step_of_a_new_run(context: Any, base: str, requests: int, seed: int = 0) -> tuple[float, bool]:
    """A scenario this server has not computed, opened by its link: ms from navigation to step
    1's tables and heatmaps drawn, and whether the run was complete at that moment."""
    page = context.new_page()
    page.goto(f"{base}/run?s={pack({**big_scenario(requests, 128, False), 'seed': seed})}")
    page.wait_for_selector("body[data-content='1']", state="attached", timeout=300_000)
    page.wait_for_selector("#token-table", state="attached", timeout=1_000)  # a step, not an error
    page.wait_for_selector("body[data-first-paint='1']", state="attached", timeout=60_000)
    ms, complete = page.evaluate(
        "[window.pagedvizTiming.firstPaintMs, window.pagedvizTiming.completeAtFirstPaint]"
    )
    page.wait_for_selector("body[data-complete='1']", state="attached", timeout=300_000)
    page.close()
    return float(ms), bool(complete)


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--preset", default="seed-000", help="a preset's id, several (a,b,c), or 'all': every preset"
    )
    ap.add_argument("--requests", type=int, default=0, help="a generated N-request scenario instead")
    ap.add_argument(
        "--stream", type=int, default=0, help="also open a new N-request run and time its first step"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument(
        "--run-charts",
        choices=("on", "off", "both"),
        default="on",
        help="the run-level plotly charts: loaded (on), left out (off) or both, side by side",
    )
    ap.add_argument(
        "--baseline-static",
        type=Path,
        default=None,
        help="also measure each run with the page's static files from this folder (another commit's static/)",
    )
    ap.add_argument(
        "--runner",
        choices=("v2", "v1"),
        default="v2",
        help="--requests: vLLM's model runner (v2: the defaults, Model Runner V2 with async scheduling)",
    )
    ap.add_argument(
        "--view",
        choices=("top", "system", "both"),
        default="both",
        help="--requests: the steps walked with the page's first screen in view (the state slots panel),"
        " with the system level's block tables scrolled into view (the gathered table), or both",
    )
    args = ap.parse_args()
    # a stream of N > 256 requests needs the server's limits raised, as big_runs.py does
    limits = ["--max-requests", "4096", "--max-run-seconds", "600", "--max-run-mb", "4096"]
    with running_server(*(limits if args.stream else [])) as server:
        base = server.url
        # each run is computed once, before the first visit; the visits measure the page itself
        targets: list[tuple[str, str, str]] = []  # label, url, the selector scrolled into view
        if args.requests:
            scenario = generated(args.requests, runner=args.runner)
            made = httpx.post(f"{base}/api/runs", json=scenario, timeout=300)
            made.raise_for_status()
            url = f"{base}/run?s={made.json()['link']}"
            label = f"{args.requests} requests {args.runner}"
            # the table the attention kernel reads: V2's gathered input_block_tables, V1's block_table
            table = "#card-input_block_tables" if args.runner == "v2" else "#card-block_table"
            if args.view in ("top", "both"):
                targets.append((label, url, ""))
            if args.view in ("system", "both"):
                targets.append((f"{label} (tables)", url, table))
        else:
            ids = (
                [p["id"] for p in httpx.get(f"{base}/api/presets").json()]
                if args.preset == "all"
                else args.preset.split(",")
            )
            for pid in ids:
                scenario = httpx.get(f"{base}/api/presets/{pid}").json()["scenario"]
                httpx.post(f"{base}/api/runs", json=scenario, timeout=120).raise_for_status()
                targets.append((pid, f"{base}/run?preset={pid}", ""))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            # one browser context per run, as one person's browser
            rows = []
            charts = {"on": [True], "off": [False], "both": [True, False]}[args.run_charts]
            statics = [None, args.baseline_static] if args.baseline_static else [None]
            for label, url, view in targets:
                for with_charts in charts:
                    for static in statics:
                        context = browser.new_context(viewport={"width": 1400, "height": 1000})
                        context.add_init_script(EVENT_TIMING)
                        if static is not None:  # the page's script and styles as another commit had them
                            context.route("**/static/**", static_from(static))
                        if not with_charts:  # the page without its run-level charts: their module empty
                            context.route(
                                "**/static/runcharts.js*",
                                lambda route: route.fulfill(body="", content_type="text/javascript"),
                            )
                        name = label + ("" if with_charts else " (no charts)")
                        name += " (baseline)" if static else ""
                        rows.append((name, measure(context, url, args.repeat, view)))
                        context.close()
            streamed = []
            for seed in range(max(1, args.repeat) if args.stream else 0):  # a new run each time
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                streamed.append(first_step_of_a_new_run(context, base, args.stream, seed))
                context.close()
            browser.close()
    print(
        "first paint = navigation start to the frame showing the step's tables and heatmaps painted; "
        f"medians of "
        f"{max(3, args.repeat) - 1} warm loads after 1 cold one; targets: first paint < 1000 ms "
        "(1500 ms at 128 requests); a step change, painted settled, < 50 ms median on the presets and"
        " < 100 ms at 128 requests (issue 40)"
    )
    print(
        "(js) = the page's script done, before the browser's style, layout and paint; a step change"
        " from the key press, its fetch included: rapid = the next key as soon as a step is painted,"
        " settled = once the page is idle after it; on screen = the browser's Event Timing, key press to"
        " the frame presented (raster and draw included, 8 ms steps); done = settled, from the key press to"
        " the last of what the step put off (heatmaps and table rows out of view, the read-ahead) done"
    )
    print(
        f"{'run':26} {'cold':>7} {'warm':>7} {'(js)':>7} {'rapid':>6} {'(js)':>5} {'max':>6}"
        f" {'settled':>7} {'(js)':>5} {'cached':>6} {'done':>6} {'max':>6}   on screen: {'rapid':>5}"
        f" {'settled':>7} {'cached':>6}"
    )
    for label, r in rows:
        print(
            f"{label:26} {r['cold']:5.0f}ms {r['warm']:5.0f}ms {r['warm_js']:5.0f}ms "
            f"{r['step']:4.0f}ms {r['step_js']:3.0f}ms {r['step_max']:4.0f}ms "
            f"{r['settled']:5.0f}ms {r['settled_js']:3.0f}ms {r['cached']:4.0f}ms {r['done']:4.0f}ms"
            f" {r['done_max']:4.0f}ms{'':14}{r['screen_rapid']:3.0f}ms {r['screen_settled']:5.0f}ms"
            f" {r['screen_cached']:4.0f}ms"
        )
    # how many of the runs meet each target (a preset's first paint under 1 s, 128 requests' 1.5 s)
    limit = 1500 if args.requests >= 128 else 1000
    step_limit = 100 if args.requests >= 128 else 50

    def under(key: str, ms: float = step_limit) -> str:
        return f"{sum(r[key] < ms for _, r in rows)} of {len(rows)}"

    print(
        f"against the targets: first paint (warm) under {limit} ms in {under('warm', limit)}; a step change"
        f" under {step_limit} ms median painted settled (the target's measure) in {under('settled')}, by the"
        f" script's time in {under('step_js')}, painted rapid in {under('step')}, on screen settled in"
        f" {under('screen_settled')}, done in {under('done')}"
    )
    if len(rows) > 1:
        worst = max(rows, key=lambda lr: lr[1]["warm"])
        print(
            f"worst warm first paint: {worst[0]} {worst[1]['warm']:.0f} ms; worst step median: "
            f"{max(r['step'] for _, r in rows):.0f} ms painted rapid, "
            f"{max(r['settled'] for _, r in rows):.0f} ms painted settled, "
            f"{max(r['step_js'] for _, r in rows):.0f} ms script, "
            f"{max(r['screen_settled'] for _, r in rows):.0f} ms on screen settled, "
            f"{max(r['done'] for _, r in rows):.0f} ms done"
        )
    if streamed:
        each = ", ".join(f"{ms:.0f}" for ms, _ in streamed)
        computing = sum(not complete for _, complete in streamed)
        print(
            f"a new {args.stream}-request run opened by its link, {len(streamed)} times: step 1 on the page"
            f" after {statistics.median(ms for ms, _ in streamed):.0f} ms (median; each: {each} ms), the run"
            f" still computing then in {computing} of them; target < 1000 ms"
        )


if __name__ == "__main__":
    main()
