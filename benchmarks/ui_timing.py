"""First render of the run page and the redraw per step change, in Debian's Chromium.

Starts a real server, opens the run page of a preset (seed-000 by default) or of a generated
N-request scenario (--requests N, no model, a pool big enough for all of them) and reads the page's
own timings: first render (navigation start to the step's tables drawn) and the heatmaps drawn
(every heatmap up), for a cold first load and for warm reloads in the same browser; and each
step change (→ key to the step drawn, its fetch included; a second pass over cached steps too).
Targets (issue 17): first paint with heatmaps under 1 s for a preset and under 1.5 s for 128
requests; a step change under 50 ms median (under 100 ms at 128 requests). Run:

    .venv/bin/python benchmarks/ui_timing.py [--preset seed-000 | --requests 128] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import httpx

from pagedviz.app.serve import running_server


def generated(requests: int, max_tokens: int = 24) -> dict[str, Any]:
    """N requests of 32 prompt tokens, no model; every request fits in the batch and the pool."""
    return {
        "name": f"ui-{requests}",
        "seed": 0,
        "config": {
            "block_size": 16,
            "max_model_len": 32 + max_tokens,
            "max_num_reqs": requests,
            "max_num_batched_tokens": max(2048, 32 * requests),
            "num_kv_blocks": requests * ((32 + max_tokens) // 16 + 1) + 1,
            "model": None,
        },
        "requests": [{"id": f"r{i}", "prompt_len": 32, "max_tokens": max_tokens} for i in range(requests)],
        "max_steps": 4 * max_tokens,
    }


def main() -> None:
    from playwright.sync_api import sync_playwright

    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="seed-000")
    ap.add_argument("--requests", type=int, default=0, help="a generated N-request scenario instead")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()
    with running_server() as server:
        base = server.url
        # the run is computed once, before the first visit; the visits measure the page itself
        if args.requests:
            made = httpx.post(f"{base}/api/runs", json=generated(args.requests), timeout=300)
            made.raise_for_status()
            url, label = f"{base}/run?s={made.json()['link']}", f"{args.requests} requests"
        else:
            scenario = httpx.get(f"{base}/api/presets/{args.preset}").json()["scenario"]
            httpx.post(f"{base}/api/runs", json=scenario, timeout=120).raise_for_status()
            url, label = f"{base}/run?preset={args.preset}", f"preset {args.preset}"
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
                page.goto(url)
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
        print(f"{label}: 1 cold page load, {len(warm)} warm ones (same browser)")
        print(
            f"  first render, cold:  tables {cold_tables:7.1f} ms, heatmaps {cold_maps:7.1f} ms"
            "  (target < 1000 ms, 1500 ms at 128 requests)"
        )
        print(
            f"  first render, warm:  tables {statistics.median(t for t, _ in warm):7.1f} ms, heatmaps "
            f"{statistics.median(m for _, m in warm):7.1f} ms (medians)"
        )
        print(
            f"  step change (fetch+draw): median {statistics.median(fresh):7.1f} ms  max {max(fresh):7.1f} ms"
            f"  (target < 50 ms, 100 ms at 128 requests)"
        )
        print(
            f"  step change (cached):     median {statistics.median(cached):7.1f} ms"
            f"  max {max(cached):7.1f} ms"
        )


if __name__ == "__main__":
    main()
