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
from pagedviz.core.schema import scenario_schema

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
ZH_DOCS = sorted((ROOT / "docs" / "zh").glob("*.md"))  # the Chinese versions (?lang=zh)
HAN = re.compile(r"[\u4e00-\u9fff]")
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


def test_documents_in_chinese_are_their_chinese_version_or_say_in_chinese_that_they_are_english(
    client: TestClient,
) -> None:
    assert {p.name for p in ZH_DOCS} <= {p.name for p in DOCS}  # a version of a document, no other
    assert ZH_DOCS, "docs/zh/ has no Chinese version"
    for doc in DOCS:
        r = client.get(f"/docs-md/{doc.name}?lang=zh")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert HAN.search(r.text.splitlines()[0]), (doc.name, r.text[:120])  # its first line is Chinese
        local = ROOT / "docs" / "zh" / doc.name
        if local.is_file():
            assert r.text == local.read_text(encoding="utf-8")
            # the same code blocks as the English text: the diagrams and examples are not retyped
            fences = re.compile(r"```.*?```", re.S)
            assert fences.findall(r.text) == fences.findall(doc.read_text(encoding="utf-8")), doc.name
        else:
            assert r.text.endswith(doc.read_text(encoding="utf-8"))
    assert client.get("/docs-md/arrays.md?lang=fr").status_code == 422
    assert client.get("/docs-md/nope.md?lang=zh").status_code == 404


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


@pytest.mark.parametrize(
    "source", [ROOT / "README.md", *DOCS, *ZH_DOCS], ids=lambda p: str(p.relative_to(ROOT))
)
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


# an array counts as documented in docs/arrays.md when a heading or a list item names it before its
# dash: "### `a` — shape ..." or "- `a`, `b` — shape ..."
DOCUMENTED_AT = re.compile(r"^(?:#{2,4} |- )([^—\n]*) —", re.MULTILINE)


def documented_arrays() -> set[str]:
    text = (ROOT / "docs" / "arrays.md").read_text(encoding="utf-8")
    return {name for lead in DOCUMENTED_AT.findall(text) for name in re.findall(r"`(\w+)`", lead)}


def traced_arrays() -> dict[str, str]:
    """Every array name some step traces -> the first run that traced it: every preset, and a V2
    run with CUDA graphs (FULL and PIECEWISE) and async scheduling. The runs go without the tiny
    model, which decides sampled tokens but not which arrays a step records."""
    from pagedviz.core import Scenario, make_engine
    from pagedviz.core.presets import list_presets, preset_dict

    runs = {p["id"]: preset_dict(p["id"]) for p in list_presets()}
    v2 = preset_dict("demo-v2-slots")
    v2["config"].update(model_runner="v2", async_scheduling=True, cudagraph_capture_sizes=[1, 2, 4, 8, 16])
    runs["v2-cudagraphs"] = v2
    # several KV cache groups: each runner's per-group arrays (group g >= 1 suffixed _g{g})
    for runner in ("v1", "v2"):
        hybrid = preset_dict("demo-v2-slots")
        hybrid["config"].update(
            model_runner=runner,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            sliding_window=4,
            num_kv_blocks=32,
        )
        runs[f"hybrid-{runner}"] = hybrid
    seen: dict[str, str] = {}
    for name, d in runs.items():
        d["config"].update(model=None, device="cpu")
        for t in make_engine(Scenario.from_dict(d)).run():
            for array in t.arrays:
                seen.setdefault(array, name)
    return seen


def test_every_traced_array_is_documented_in_arrays_md() -> None:
    traced = traced_arrays()
    # the runs cover both runners and every flavour's own arrays
    assert {"token_indices", "idx_mapping", "input_block_tables", "last_indices", "attn_mask"} <= set(traced)
    assert {"bonus_logits_indices", "prev_sampled_token_ids", "mrope_positions", "is_padding"} <= set(traced)
    assert {"block_table_g1", "slot_mapping_g1", "input_block_tables_g1", "slot_mapping_g2"} <= set(traced)
    # a KV cache group's copy of an array is documented under group 1's name (docs/arrays.md says
    # that group g >= 1 adds the suffix _g{g})
    documented = documented_arrays()
    missing = {a: run for a, run in traced.items() if re.sub(r"_g[1-9][0-9]*$", "_g1", a) not in documented}
    assert not missing, f"docs/arrays.md lacks a heading or list item for {missing} (traced by that run)"


def test_the_documented_array_check_reads_headings_and_list_items_only() -> None:
    names = documented_arrays()
    assert {"token_ids_cpu", "idx_mapping", "num_accepted_tokens", "num_rejected_tokens"} <= names
    assert {"cu_seqlens_q", "last_indices", "expanded_local_pos"} <= names
    # named only in running text, a scalar's bullet or a heading's stage, never as an array's name
    assert not {"num_reqs", "R", "update_states", "attn_state"} & names
