"""The code's layout holds where import-linter cannot say it (the layer rules are contracts in
pyproject.toml's [tool.importlinter], checked by lint-imports): no private name is imported from
another module, no module is in an import cycle (counting imports inside functions and under
TYPE_CHECKING), the engine imports and validates without the web stack, flavours come from a
registry, the installed distribution claims only the `pagedviz` import name, and the page's
modules import each other in no circle."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from pagedviz.core import Engine, engine_class, load_preset, make_engine
from pagedviz.core.flavors.ascend import AscendEngine
from pagedviz.core.flavors.nanovllm import NanoEngine

ROOT = Path(__file__).resolve().parents[2]
# the product's packages: the `pagedviz` namespace maps these folders (pyproject's package-dir)
PACKAGES = {"core": "pagedviz.core", "app": "pagedviz.app", "plots": "pagedviz.plots"}
PACKAGES |= {"notebook": "pagedviz.notebook", "record": "pagedviz.record"}


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    parts = [PACKAGES[rel.parts[0]], *rel.with_suffix("").parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_imports(root: Path = ROOT) -> list[str]:
    """Each `from pagedviz.X import _name` in the product where X is not the importing module:
    a name private to one module, used by another (it should be public, or stay in its module)."""
    found = []
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            here = _module_name(path, root)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pagedviz.")):
                    continue
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and node.module != here:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {node.module}.{alias.name}")
    return found


def test_no_private_name_is_imported_from_another_module(tmp_path: Path) -> None:
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "a.py").write_text(
        "from pagedviz.core.a import _mine\nfrom pagedviz.core.b import _theirs, __version__, public\n"
    )
    assert private_imports(tmp_path) == ["core/a.py:2 pagedviz.core.b._theirs"]  # the scan sees one
    offenders = private_imports()
    assert offenders == [], "\n".join(offenders)


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively), each
    sorted, smallest first: every module in one of them is in an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return sorted(out)


def test_no_module_is_in_an_import_cycle() -> None:
    """grimp reads every import statement, at the top, inside functions and under TYPE_CHECKING:
    an import moved into a function hides a cycle from Python, not from this test."""
    g = grimp.build_graph(*PACKAGES.values(), cache_dir=None)
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    assert "pagedviz.core.scenario" in graph["pagedviz.core.engine"]  # grimp sees the imports
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]
    report = []
    for cycle in import_cycles(graph):
        report.append(f"{len(cycle)} modules: " + ", ".join(cycle))
        for a in cycle:
            for b in sorted(graph[a] & set(cycle)):
                lines = sorted(d["line_number"] for d in g.get_import_details(importer=a, imported=b))
                report.append(f"    {a} -> {b} (line {', '.join(map(str, lines))})")
    assert report == [], "\n".join(report)


def test_the_engine_imports_without_pydantic() -> None:
    """A GPU machine with torch and numpy only can import the engine (validation needs pydantic)."""
    code = "import sys, pagedviz.core, pagedviz.core.engine; sys.exit('pydantic' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_validating_a_scenario_loads_no_web_stack() -> None:
    code = (
        "import sys\n"
        "from pagedviz.core import Scenario, load_preset\n"
        "Scenario.from_dict(load_preset('seed-001').to_dict())\n"
        "web = ('fastapi', 'starlette', 'uvicorn', 'pagedviz.app')\n"
        "print(sorted(m for m in sys.modules if m.startswith(web)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("flavor", "cls"), [("vllm", Engine), ("ascend", AscendEngine), ("nanovllm", NanoEngine)]
)
def test_registry_gives_each_flavour_its_engine(flavor: str, cls: type) -> None:
    assert engine_class(flavor) is cls


def test_make_engine_builds_the_scenarios_flavour_and_engine_refuses_another() -> None:
    assert type(make_engine(load_preset("seed-004"))) is NanoEngine
    with pytest.raises(ValueError, match="make_engine"):
        Engine(load_preset("seed-004"))
    with pytest.raises(KeyError, match="unknown flavour"):
        engine_class("tgi")


def test_installed_package_claims_no_generic_top_level_names(tmp_path: Path) -> None:
    # from outside the checkout, only what the installation put on the path is importable
    code = (
        "import importlib.util as u; "
        "print(u.find_spec('pagedviz.core') is not None, u.find_spec('core'), u.find_spec('app'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["True", "None", "None"]


_JS_IMPORT = re.compile(
    r"""(?:^|;|\n)\s*(?:import|export)\b[^;]*?\bfrom\s*["']\./([\w.-]+\.js)["']"""  # import {x} from "./m.js"
    r"""|\bimport\s*["']\./([\w.-]+\.js)["']"""  # import "./m.js"
)


def _js_imports() -> dict[str, set[str]]:
    """Each page module's static imports of the other modules in static/."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "static").glob("*.js")):
        text = re.sub(r"//[^\n]*|/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.S)
        out[path.name] = {a or b for a, b in _JS_IMPORT.findall(text)}
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, each once, from its smallest module name."""
    found: set[tuple[str, ...]] = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                found.add(tuple(path))
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return [list(c) for c in sorted(found)]


def test_the_page_modules_import_each_other_in_no_circle() -> None:
    graph = _js_imports()
    assert graph["run.js"] and "context.js" in graph["hover.js"]  # the parser sees the imports
    assert _cycles({"a.js": {"b.js"}, "b.js": {"c.js"}, "c.js": {"a.js"}}) == [["a.js", "b.js", "c.js"]]
    circles = [" -> ".join([*c, c[0]]) for c in _cycles(graph)]
    assert circles == [], circles
