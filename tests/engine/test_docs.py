"""The project's documents: served at /docs-md/NAME, linked from the README and the OpenAPI
text, and nothing links to a file that is not in the repository; the scenario-format document
names every field of the generated schema. Every command a document shows works: each `pagedviz`
command line in a code block parses with the real CLI parser, and each ```python block runs. The
README is a front door: at most 200 lines, with the two newcomer commands in its first 60."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.settings import Settings
from pagedviz.core import Limits
from pagedviz.core.schema import scenario_schema


def _repository_root() -> Path:
    """The checkout's root (the folder with pyproject.toml), wherever in tests/ this module lives."""
    here = Path(__file__).resolve().parent
    return next(p for p in (here, *here.parents) if (p / "pyproject.toml").is_file())


ROOT = _repository_root()
DOCS = sorted((ROOT / "docs").glob("*.md"))
ZH_DOCS = sorted((ROOT / "docs" / "zh").glob("*.md"))  # the Chinese versions (?lang=zh)
BENCHMARKS = ROOT / "benchmarks" / "README.md"
# every page that shows commands: the README, the documents, their Chinese versions, the benchmarks
PAGES = [ROOT / "README.md", *DOCS, *ZH_DOCS, BENCHMARKS]
HAN = re.compile(r"[\u4e00-\u9fff]")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# the pages the README's old sections moved to (issue 39), each its own document
MOVED_PAGES = {"recording.md", "deployment.md", "fidelity.md", "trace-contract.md", "notebook.md"}


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


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


@pytest.mark.parametrize("source", PAGES, ids=_rel)
def test_relative_links_point_at_files_in_the_repository(source: Path) -> None:
    text = source.read_text(encoding="utf-8")
    links = [t for t in LINK.findall(text) if not t.startswith(("http://", "https://", "#"))]
    assert all(_target_exists(source, t) for t in links), [t for t in links if not _target_exists(source, t)]
    assert "DESIGN.md" not in text


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered (-1, -2, ...)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in anchors:
            n += 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@pytest.mark.parametrize("source", PAGES, ids=_rel)
def test_links_into_a_page_name_one_of_its_headings(source: Path) -> None:
    bad = []
    for target in LINK.findall(source.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        if not anchor or target.startswith(("http://", "https://", "/")):
            continue
        page = (source.parent / path).resolve() if path else source
        if page.suffix == ".md" and anchor not in heading_anchors(page):
            bad.append(target)
    assert not bad, f"{_rel(source)} links to headings its targets do not have: {bad}"


def test_heading_anchors_are_githubs() -> None:
    anchors = heading_anchors(ROOT / "docs" / "arrays.md")
    assert "why-requests-wait-schedulerwaiting_causes-schedulerpreemption_causes" in anchors
    assert "model-runner-v2" in anchors and "token_ids_cpu--max_num_reqs-m-int32" in anchors


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


# the sections of a step whose keys docs/trace-contract.md names (scalars: it or docs/arrays.md)
SECTIONS = ("scheduler", "batch", "scalars", "kv_cache", "forward", "engine_core")


@cache
def trace_survey() -> tuple[dict[str, str], dict[str, str]]:
    """What the runs below trace: every array name -> the first run that traced it, and every key
    of a step (top level, and `section.key` for SECTIONS) -> the first run that wrote it. The runs:
    every preset, a V2 run with CUDA graphs (FULL and PIECEWISE) and async scheduling, each
    runner with several KV cache groups, all without the tiny model, which decides sampled tokens
    but not which arrays a step records; and two steps of seed-000 with it (the forward's check)."""
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
    for d in runs.values():
        d["config"].update(model=None, device="cpu")
    with_model = preset_dict("seed-000")
    with_model["config"].update(device="cpu")
    with_model["max_steps"] = 2
    runs["seed-000-with-model"] = with_model
    arrays: dict[str, str] = {}
    keys: dict[str, str] = {}
    for name, d in runs.items():
        for t in make_engine(Scenario.from_dict(d)).run():
            for array in t.arrays:
                arrays.setdefault(array, name)
            for key, value in t.to_dict().items():
                keys.setdefault(key, name)
                if key in SECTIONS:
                    for sub in value:
                        keys.setdefault(f"{key}.{sub}", name)
    return arrays, keys


def traced_arrays() -> dict[str, str]:
    """Every array name some step of trace_survey's runs traces -> the first run that traced it."""
    return trace_survey()[0]


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


def test_the_trace_contract_names_every_key_a_step_has() -> None:
    """docs/trace-contract.md names every key of a step and of its sections (a scalar may be
    documented with its stage in docs/arrays.md instead), issue 38's keys among them."""
    keys = trace_survey()[1]
    assert {"scheduler.block_ids", "scheduler.window_drops", "scheduler.parents"} <= set(keys)
    assert {"scalars.num_kv_cache_groups", "forward.attn_groups", "engine_core.batch_queue"} <= set(keys)
    assert {"forward.paged_vs_dense_max_abs_diff", "kv_cache.kv_cache_groups", "batch.slots"} <= set(keys)
    contract = (ROOT / "docs" / "trace-contract.md").read_text(encoding="utf-8")
    arrays_md = (ROOT / "docs" / "arrays.md").read_text(encoding="utf-8")

    def named(key: str) -> bool:
        section, _, name = key.rpartition(".")
        return f"`{name}`" in contract or (section == "scalars" and f"`{name}`" in arrays_md)

    missing = {k: run for k, run in keys.items() if not named(k)}
    assert not missing, f"docs/trace-contract.md does not name {missing} (written by that run)"


def test_the_code_points_at_the_trace_contract_page_not_at_a_section_no_file_has() -> None:
    assert "docs/trace-contract.md" in (ROOT / "core" / "trace.py").read_text(encoding="utf-8")
    for folder in ("core", "app", "plots", "notebook", "record"):
        for source in (ROOT / folder).rglob("*.py"):
            assert "trace contract (§" not in source.read_text(encoding="utf-8"), _rel(source)


# --- the README as a front door, and the pages its old sections moved to ---


def test_the_readme_is_a_front_door_with_the_two_commands_in_its_first_60_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; a front door has at most 200"
    first = [line.strip() for line in lines[:60]]
    # the newcomer's two commands, each alone on its line: start the app; set up and pass the tests
    # (.ci/run runs the second, and tests/test_setup_script.py the setup.sh both call)
    assert "bash scripts/serve.sh" in first and "bash scripts/test.sh" in first
    assert (ROOT / "scripts" / "serve.sh").is_file() and (ROOT / "scripts" / "test.sh").is_file()
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    text = "\n".join(lines)
    # the daily fast lane and where the tiers live
    assert "scripts/test.sh --fast" in text
    assert all(f"tests/{tier}" in text for tier in ("engine", "api", "browser", "fidelity"))
    # one picture, in the repository, on the first screen
    pictures = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert len(pictures) == 1 and (ROOT / pictures[0]).is_file(), pictures
    assert any(pictures[0] in line for line in lines[:30])


def test_the_moved_pages_exist_and_are_linked_from_the_readme_and_the_openapi_text(
    client: TestClient,
) -> None:
    assert {p.name for p in DOCS} >= MOVED_PAGES
    links = set(LINK.findall((ROOT / "README.md").read_text(encoding="utf-8")))
    assert {f"docs/{name}" for name in MOVED_PAGES} | {"benchmarks/README.md"} <= links
    description = client.get("/openapi.json").json()["info"]["description"]
    assert all(f"/docs-md/{name}" in description for name in MOVED_PAGES - {"notebook.md"})


def test_the_benchmarks_page_has_one_table_with_the_command_of_every_benchmark() -> None:
    text = BENCHMARKS.read_text(encoding="utf-8")
    tables = re.findall(r"(?:^\|.*\|\n)+", text, re.MULTILINE)
    assert len(tables) == 1, f"benchmarks/README.md has {len(tables)} tables; the figures go in one"
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")} - {"common.py"}
    assert scripts >= {"async_loop.py", "import_memory.py", "live_engine.py", "validation.py"}
    measured = {name for name in scripts if f"benchmarks/{name}" in tables[0]}
    assert measured == scripts, f"no row with the command of {sorted(scripts - measured)}"


# --- every command a page shows ---

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")
# a line that runs pagedviz: an optional prompt, VAR=value settings, then the command
COMMAND_LINE = re.compile(r"^(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*pagedviz(?:\s|$)")


def code_blocks(text: str) -> Iterator[tuple[str, str]]:
    """(language, body) of every fenced block; an indented block (four spaces, outside fences)
    comes as language "indented"."""
    yield from FENCE.findall(text)
    outside = FENCE.sub("", text)
    indented = [line[4:] for line in outside.splitlines() if line.startswith("    ") and line.strip()]
    yield "indented", "\n".join(indented)


def pagedviz_commands(text: str) -> list[str]:
    """Every `pagedviz ...` command line of the page's code blocks (its Python blocks aside), a
    continued line joined, a `# comment` and leading VAR=value settings dropped."""
    found = []
    for language, body in code_blocks(text):
        if language in ("python", "json"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if not COMMAND_LINE.match(line.strip()):
                continue  # not a command (a diagram's text, another program)
            words = shlex.split(line.strip().removeprefix("$ "), comments=True)
            while words and ENV.match(words[0]):
                words = words[1:]
            if words and words[0] == "pagedviz":
                found.append(shlex.join(words))
    return found


@cache
def real_parser() -> argparse.ArgumentParser:
    """The parser `pagedviz` itself builds (the console script's `main`, the engine's commands
    and `serve`), caught at its parse_args before it runs anything."""
    from pagedviz.app import cli

    class Caught(BaseException):
        pass

    caught: list[argparse.ArgumentParser] = []
    original = argparse.ArgumentParser.parse_args

    def catch(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        caught.append(self)
        raise Caught

    argparse.ArgumentParser.parse_args = catch  # type: ignore[method-assign,assignment]
    try:
        cli.main(["presets"])
    except Caught:
        pass
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    assert caught, "pagedviz.app.cli.main built no parser"
    return caught[0]


def test_the_real_parser_refuses_what_pagedviz_refuses() -> None:
    parser = real_parser()
    assert parser.parse_args(["run", "seed-001", "--step", "2"]).step == 2
    assert parser.parse_args(["serve", "--port", "9000"]).port == 9000
    for wrong in (["run", "seed-001", "--step", "two"], ["frobnicate"], ["serve", "--portt", "1"]):
        with pytest.raises(SystemExit) as refused:
            parser.parse_args(wrong)
        assert refused.value.code == 2, wrong


def test_the_command_finder_reads_code_blocks_only() -> None:
    text = (
        "Run `pagedviz run ID --step N` in prose.\n\n    pagedviz presets\n\n"
        "```bash\nPAGEDVIZ_X=1 pagedviz run seed-000 \\\n  --step 2   # a comment\nls\n```\n"
        "```python\npagedviz = 1\n```\n"
    )
    assert sorted(pagedviz_commands(text)) == ["pagedviz presets", "pagedviz run seed-000 --step 2"]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_pagedviz_command_a_page_shows_parses(page: Path) -> None:
    parser = real_parser()
    for command in pagedviz_commands(page.read_text(encoding="utf-8")):
        try:
            parser.parse_args(shlex.split(command)[1:])
        except SystemExit as e:  # argparse's error (exit 2), or --help / --version (exit 0)
            assert e.code == 0, f"{_rel(page)} shows a command pagedviz refuses: {command}"


def test_the_pages_show_the_commands_a_newcomer_needs() -> None:
    shown = {c for page in PAGES for c in pagedviz_commands(page.read_text(encoding="utf-8"))}
    subcommands = {shlex.split(c)[1] for c in shown if len(shlex.split(c)) > 1}
    assert {"run", "presets", "schema", "serve", "import"} <= subcommands, subcommands


def python_blocks(page: Path) -> list[str]:
    return [body for language, body in code_blocks(page.read_text(encoding="utf-8")) if language == "python"]


# each block runs in a fresh namespace of one process per page; a failing block is named
RUN_BLOCKS = """
import json, sys, traceback
blocks = json.load(sys.stdin)
for i, block in enumerate(blocks):
    try:
        exec(compile(block, f"<block {i + 1}>", "exec"), {"__name__": "__main__"})
    except BaseException:
        print(f"block {i + 1} of {len(blocks)} failed:\\n{block}", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=_rel)
def test_every_python_snippet_a_page_shows_runs(page: Path, tmp_path: Path) -> None:
    blocks = python_blocks(page)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", RUN_BLOCKS],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        cwd=tmp_path,  # whatever a snippet writes lands here
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, f"{_rel(page)}: {done.stderr[-3000:]}"


def test_the_pages_python_snippets_are_checked() -> None:
    assert python_blocks(ROOT / "README.md"), "the README's Python tour has no ```python block"
    assert all("```py\n" not in p.read_text(encoding="utf-8") for p in PAGES)  # only ```python counts


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_every_json_block_a_page_shows_is_json(page: Path) -> None:
    for language, body in code_blocks(page.read_text(encoding="utf-8")):
        if language == "json":
            json.loads(body)
