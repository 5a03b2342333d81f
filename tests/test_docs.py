"""The project's documents: served at /docs-md/NAME, linked from the README and the OpenAPI
text, and nothing links to a file that is not in the repository; the scenario-format document
names every field of the generated schema."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Limits
from pagedviz.core.config import scenario_schema

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))


def test_the_three_documents_exist() -> None:
    assert {p.name for p in DOCS} >= {"architecture.md", "scenario-format.md", "arrays.md"}


def test_documents_are_served_as_text(client: TestClient) -> None:
    for doc in DOCS:
        r = client.get(f"/docs-md/{doc.name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert r.text == doc.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["nope.md", "..%2Fpyproject.toml", "%2E%2E%2FREADME.md", "arrays"])
def test_only_documents_are_served(client: TestClient, name: str) -> None:
    r = client.get(f"/docs-md/{name}")
    assert r.status_code == 404
    assert "Project" not in r.text and "[project]" not in r.text


def _target_exists(source: Path, target: str) -> bool:
    target = target.split("#")[0]
    if target.startswith("/docs-md/"):
        return (ROOT / "docs" / target.removeprefix("/docs-md/")).is_file()
    if target.startswith("/"):  # a route of the app: checked by the API tests
        return True
    return (source.parent / target).exists()


@pytest.mark.parametrize("source", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_relative_links_point_at_files_in_the_repository(source: Path) -> None:
    text = source.read_text(encoding="utf-8")
    links = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]
    assert all(_target_exists(source, t) for t in links), [t for t in links if not _target_exists(source, t)]
    assert "DESIGN.md" not in text


def test_the_readme_links_into_docs() -> None:
    links = LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {f"docs/{d.name}" for d in DOCS} <= set(links)


def test_openapi_links_into_docs_and_nowhere_else(client: TestClient) -> None:
    text = client.get("/openapi.json").text
    assert "DESIGN.md" not in text
    for name in re.findall(r"/docs-md/([\w.-]+)", text):
        assert client.get(f"/docs-md/{name}").status_code == 200, name
    assert "/docs-md/arrays.md" in text and "/docs-md/scenario-format.md" in text


def test_the_format_document_names_every_field_of_the_schema() -> None:
    text = (ROOT / "docs" / "scenario-format.md").read_text(encoding="utf-8")
    schema = scenario_schema(Limits())
    config = schema["properties"]["config"]["properties"]
    model = next(o for o in config["model"]["oneOf"] if o.get("type") == "object")["properties"]
    request = schema["properties"]["requests"]["items"]["properties"]
    for props in (schema["properties"], config, model, request):
        missing = [k for k in props if f"| `{k}` |" not in text]
        assert not missing, f"docs/scenario-format.md lacks a row for {missing}"
