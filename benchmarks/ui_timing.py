"""First render of the run page and the redraw per step change, in Debian's Chromium.

Starts a real server, opens the run page of a preset (seed-000 by default) and reads the page's
own timings: first render (navigation start to the step's tables drawn; Plotly loads without
blocking them) and the heatmaps drawn (Plotly parsed and every heatmap up), for a cold first
load and for warm reloads in the same browser; and each
step change (→ key to the step drawn, its fetch included; a second pass over cached steps too).
Targets: first render under 1.5 s, a step change under 150 ms. Run:

    .venv/bin/python benchmarks/ui_timing.py [--preset seed-000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics

import httpx

from pagedviz.app.serve import running_server


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="seed-000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    with running_server() as server:
        base = server.url
        # the run is computed once by the first visit; later visits measure the page itself
        httpx.post(
            f"{base}/api/runs",
            json=httpx.get(f"{base}/api/presets/{args.preset}").json()["scenario"],
            timeout=120,
        )
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=args.chromium,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ],
            )
            # one browser context, as one person's browser: the first load is cold (nothing
            # cached), later loads find Plotly in the HTTP cache and V8's code cache
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            loads: list[tuple[float, float]] = []
            fresh: list[float] = []
            cached: list[float] = []
            for _ in range(max(2, args.repeat)):
                page = context.new_page()
                page.goto(f"{base}/run?preset={args.preset}")
                page.wait_for_selector("body[data-ready='1']", timeout=60_000)
                loads.append(
                    tuple(
                        page.evaluate(
                            "[window.pagedvizTiming.firstRenderMs, window.pagedvizTiming.heatmapsMs]"
                        )
                    )
                )
                total = int(page.evaluate("document.querySelectorAll('#timeline .tl-step').length"))
                # forward: each step fetched then drawn; back again: drawn from the page's cache
                for key, targets, into in (
                    ("ArrowRight", range(2, total + 1), fresh),
                    ("ArrowLeft", range(total - 1, 0, -1), cached),
                ):
                    for target in targets:
                        page.keyboard.press(key)
                        page.wait_for_selector(f"body[data-step='{target}']")
                        into.append(page.evaluate("window.pagedvizTiming.lastStepMs"))
                page.close()
            browser.close()
        (cold_tables, cold_maps), warm = loads[0], loads[1:]
        print(f"preset {args.preset}: 1 cold page load, {len(warm)} warm ones (same browser)")
        print(
            f"  first render, cold:  tables {cold_tables:7.1f} ms, heatmaps {cold_maps:7.1f} ms"
            "  (target < 1500 ms)"
        )
        print(
            f"  first render, warm:  tables {statistics.median(t for t, _ in warm):7.1f} ms, heatmaps "
            f"{statistics.median(m for _, m in warm):7.1f} ms (medians)"
        )
        print(
            f"  step change (fetch+draw): median {statistics.median(fresh):7.1f} ms  max {max(fresh):7.1f} ms"
            f"  (target < 150 ms)"
        )
        print(
            f"  step change (cached):     median {statistics.median(cached):7.1f} ms"
            f"  max {max(cached):7.1f} ms"
        )


if __name__ == "__main__":
    main()
