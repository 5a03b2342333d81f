"""The code's layout holds: the engine never imports the web app, flavours come from a registry,
and the installed distribution claims only the `pagedviz` import name."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pagedviz.core import Engine, engine_class, load_preset, make_engine
from pagedviz.core.flavors.ascend import AscendEngine
from pagedviz.core.flavors.nanovllm import NanoEngine

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# the scenario's validation and JSON Schema are pydantic's (a dependency of the package itself)
# the modules that validate with pydantic (scenarios; recordings of a vLLM server)
VALIDATION = {"core/models.py", "core/validate.py", "core/schema.py", "core/recording.py"}


def test_core_imports_nothing_from_the_web_app() -> None:
    # pydantic is a core dependency (it validates scenarios); the web stack is not
    offenders = {
        str(p.relative_to(ROOT)): sorted(
            n
            for n in _imports(p)
            if n.startswith(("pagedviz.app", "app", "fastapi", "starlette", "uvicorn"))
            or (n.startswith("pydantic") and str(p.relative_to(ROOT)) not in VALIDATION)
        )
        for p in (ROOT / "core").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


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


def test_engine_modules_do_not_import_their_flavours() -> None:
    assert not any(n.startswith("pagedviz.core.flavors") for n in _imports(ROOT / "core" / "engine.py"))


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
