"""pagedviz.notebook: the run page's linked view inside Jupyter, JupyterLab and VS Code, offline.

    from pagedviz import notebook
    view = notebook.show("seed-000", step=3, lang="zh")
    view.step(5)

`show` starts the app in the kernel on a free loopback port (once; a second `show` reuses it; the
kernel's end stops it) and embeds the page in an IFrame. `.step(n)` moves the view to step n.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlencode

from pagedviz.core import Scenario, StepTrace
from pagedviz.notebook import server

# the page's URL state (static/urlstate.js) that show(**view) may set
VIEW_FIELDS = ("stage", "lang", "present", "req", "pos", "block", "slot", "array", "note", "delta")


def _source_query(src: Any, scenario: Any) -> dict[str, str]:
    from pagedviz.app.links import pack
    from pagedviz.plots.source import scenario_of

    if isinstance(src, str):
        scenario_of(src)  # an unknown preset fails here, naming the presets
        return {"preset": src}
    if isinstance(src, (Scenario, Mapping)):
        return {"s": pack(scenario_of(src).to_dict())}
    if isinstance(src, (StepTrace, Iterable)):
        if scenario is None:
            raise ValueError(
                "scenario: a run's step traces do not say which scenario made them; call"
                " show(run, scenario=...) (the view recomputes the same run: the engine is deterministic)"
            )
        return _source_query(scenario, None)
    raise TypeError(f"show: expected a preset id, a Scenario, its dict or a run (got {type(src).__name__})")


class View:
    """The view shown in a notebook cell: `.step(n)` moves it, `.url` is its address, `.display()`
    shows it again in another cell (show() displays it once, itself)."""

    def __init__(self, query: dict[str, str], step: int, width: int | str, height: int) -> None:
        self.query = query
        self.current = step
        self.width, self.height = width, height
        self.handle: Any = None

    @property
    def url(self) -> str:
        return f"{server.get().url}/run?{urlencode({**self.query, 'step': str(self.current)})}"

    def _iframe(self) -> Any:
        from IPython.display import IFrame

        return IFrame(self.url, width=self.width, height=self.height)

    def display(self) -> View:
        from IPython.display import display

        self.handle = display(self._iframe(), display_id=True)
        return self

    def step(self, n: int) -> View:
        """Move the view to step n (the page clamps it to the run)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n: a step number from 1 (got {n!r:.40})")
        self.current = n
        if self.handle is not None:
            self.handle.update(self._iframe())
        return self

    def _ipython_display_(self) -> None:
        if self.handle is None:  # show() displays the view itself; shown once
            self.display()

    def __repr__(self) -> str:
        return f"<pagedviz view {self.url}>"


def show(
    source: Any,
    step: int = 1,
    *,
    scenario: Any = None,
    width: int | str = "100%",
    height: int = 760,
    **view: Any,
) -> View:
    """Show the run page's linked view of a preset id, a scenario (or its dict), or a run with its
    `scenario=`, at `step`; `view` sets the page's other state (stage, lang, req, block, present...)."""
    unknown = sorted(set(view) - set(VIEW_FIELDS))
    if unknown:
        raise ValueError(f"view: unknown field(s) {', '.join(unknown)}; known: {', '.join(VIEW_FIELDS)}")
    query = _source_query(source, scenario)
    for k, v in view.items():
        query[k] = ("1" if v else "0") if isinstance(v, bool) else str(v)
    v = View(query, 1, width, height)
    v.step(step)
    return v.display()


def stop() -> None:
    """Stop the view's server now (the kernel's end does it too)."""
    server.stop()


__all__ = ["View", "show", "stop"]
