"""Two of issue 39's rules that no linter states: no product file (.py or .js) is over 450 lines,
and no test module imports another test module or puts a folder on sys.path to do so (what the
tiers share lives in tests/support and the conftest files)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("core", "app", "plots", "notebook", "record", "static")
MAX_LINES = 450
SYS_PATH_EDITS = ("sys.path.insert", "sys.path.append")


def long_files(root: Path = ROOT) -> list[str]:
    out = []
    for folder in PRODUCT:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".js") and path.is_file():
                n = len(path.read_text(encoding="utf-8").splitlines())
                if n > MAX_LINES:
                    out.append(f"{path.relative_to(root)}: {n} lines")
    return out


def imports_of_test_modules(root: Path = ROOT) -> list[str]:
    """Each import of a test module (a module named test_*) and each sys.path edit under tests/."""
    out = []
    for path in sorted((root / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            if any(part.startswith("test_") for n in names for part in n.split(".")):
                out.append(f"{path.relative_to(root)}:{node.lineno} imports a test module")
            if isinstance(node, ast.Call) and ast.unparse(node.func) in SYS_PATH_EDITS:
                out.append(f"{path.relative_to(root)}:{node.lineno} edits sys.path")
    return out


def test_no_product_file_is_over_450_lines(tmp_path: Path) -> None:
    (tmp_path / "static").mkdir()
    (tmp_path / "static" / "long.js").write_text("x;\n" * (MAX_LINES + 1))
    (tmp_path / "static" / "short.js").write_text("x;\n" * MAX_LINES)
    assert long_files(tmp_path) == [f"static/long.js: {MAX_LINES + 1} lines"]  # the scan sees one
    assert long_files() == []


def test_no_test_module_imports_another(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    lines = ["import sys", "sys.path.insert(0, 'x')", "from test_b import f"]
    (tmp_path / "tests" / "test_a.py").write_text("\n".join(lines) + "\n")
    (tmp_path / "tests" / "test_b.py").write_text("from tests.support.scenarios import make_scenario\n")
    found = sorted(imports_of_test_modules(tmp_path))
    assert found == ["tests/test_a.py:2 edits sys.path", "tests/test_a.py:3 imports a test module"]
    assert imports_of_test_modules() == []
