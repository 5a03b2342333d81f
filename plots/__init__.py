"""pagedviz.plots: plotly figures of a trace, in the page's colours (one per request) and its light
or dark theme. Each function takes a preset id, a scenario, or what `make_engine(scenario).run()`
yields (a run; one StepTrace for the step figures) and returns a `plotly.graph_objects.Figure`:

- `array(step, name)`: any traced array of a step, as a heatmap or a table;
- `kv_pool(step)`: the physical blocks coloured by owner, allocated / reused / freed marked;
- `block_table(step)`;
- `run_metrics(run)`: tokens, KV blocks, waiting / running / preempted, prefix-cache hits per step;
- `timeline(run)`: a Gantt chart of every request's life.

    from pagedviz import plots
    plots.run_metrics("seed-000")
    plots.array("seed-000", "slot_mapping", n=3)
"""

from pagedviz.plots.run import lives, run_metrics, series, timeline
from pagedviz.plots.source import resolve
from pagedviz.plots.step import array, block_table, kv_pool
from pagedviz.plots.style import Identity, palette

__all__ = [
    "Identity",
    "array",
    "block_table",
    "kv_pool",
    "lives",
    "palette",
    "resolve",
    "run_metrics",
    "series",
    "timeline",
]
