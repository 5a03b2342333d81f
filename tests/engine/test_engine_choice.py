"""The scenario's `engine` field: pagedviz's own engine by default, and the engine `vllm` (vLLM 0.33.0's
own code, core/vllm_engine) only where the `vllm` extra is installed. Without vLLM the choice is
refused with the pip command that enables it, by the CLI (one line, exit 2) and the REST API (422),
naming the field; pagedviz itself never imports vLLM. Where vLLM is installed, the API runs the
engine `vllm` and its steps carry the marker the run page shows."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from pagedviz.core import Scenario
from pagedviz.core.presets import preset_dict
from pagedviz.core.vllm_engine import ENGINE_LABEL, INSTALL, installed_vllm

# the child process sees no vLLM: `import vllm` fails and find_spec answers None
NO_VLLM = "import sys; sys.modules['vllm'] = None\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", NO_VLLM + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


def test_the_default_engine_is_pagedvizs_own_and_the_canonical_form_leaves_it_out() -> None:
    s = Scenario.from_dict(preset_dict("demo-preemption"))
    assert s.engine == "pagedviz" and "engine" not in s.to_dict()


def test_an_unknown_engine_is_refused_naming_the_field() -> None:
    from pagedviz.core import ScenarioError

    with pytest.raises(ScenarioError) as e:
        Scenario.from_dict({**preset_dict("demo-preemption"), "engine": "sglang"})
    assert e.value.errors[0][0] == "engine" and "pagedviz, vllm" in e.value.errors[0][1]


def test_without_vllm_the_cli_refuses_the_engine_with_the_pip_command() -> None:
    r = _python(
        """
        from pagedviz.core.cli import main
        sys.exit(main(["run", "demo-preemption", "--engine", "vllm"]))
        """
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("pagedviz: invalid scenario: engine: ") and INSTALL in lines[0]
    assert not r.stdout


def test_without_vllm_the_api_refuses_the_engine_with_the_pip_command() -> None:
    r = _python(
        """
        import json
        from fastapi.testclient import TestClient
        from pagedviz.app.main import create_app
        from pagedviz.app.settings import Settings
        from pagedviz.core.presets import preset_dict
        client = TestClient(create_app(Settings(compute_in="thread")))
        r = client.post("/api/runs", json={**preset_dict("demo-preemption"), "engine": "vllm"})
        print(json.dumps({"status": r.status_code, "body": r.json()}))
        """
    )
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["status"] == 422
    detail = got["body"]["detail"]
    assert [d["field"] for d in detail] == ["engine"] and INSTALL in detail[0]["message"]


def test_pagedvizs_own_engine_never_imports_vllm() -> None:
    r = _python(
        """
        del sys.modules['vllm']
        from pagedviz.core import Scenario, make_engine
        from pagedviz.core.presets import preset_dict
        import pagedviz.core.vllm_engine
        d = preset_dict("demo-preemption")
        d["config"]["model"] = None
        steps = list(make_engine(Scenario.from_dict(d)).run())
        print(len(steps), any(m == "vllm" or m.startswith("vllm.") for m in sys.modules))
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["8", "False"]


@pytest.mark.fidelity
@pytest.mark.skipif(
    installed_vllm() is None, reason="the vLLM 0.33.0 wheel is not installed (scripts/fidelity-deps.sh)"
)
def test_the_api_runs_the_engine_vllm_and_its_steps_carry_the_marker_the_page_shows() -> None:
    from fastapi.testclient import TestClient

    from pagedviz.app.compute import compute_pool
    from pagedviz.app.main import create_app
    from pagedviz.app.settings import Settings

    client = TestClient(create_app(Settings(max_runs=4)))
    assert compute_pool().wait_ready(), "the compute processes did not start"
    d = preset_dict("demo-preemption")
    d["config"]["model"] = None
    own = client.post("/api/runs", json=d)
    live = client.post("/api/runs", json={**d, "engine": "vllm"})
    assert own.status_code in (200, 201) and live.status_code in (200, 201), live.text
    run = live.json()["run_id"]
    assert run != own.json()["run_id"]
    overview = client.get(f"/api/runs/{run}").json()
    assert overview["scenario"]["engine"] == "vllm"
    step = client.get(f"/api/runs/{run}/steps/3").json()
    ours = client.get(f"/api/runs/{own.json()['run_id']}/steps/3").json()
    assert step["forward"]["engine"] == ENGINE_LABEL and "slot_mapping" in step["forward"]["vllm_arrays"]
    assert step["arrays"]["slot_mapping"]["data"] == ours["arrays"]["slot_mapping"]["data"]
    schema = client.get("/api/schema/scenario").json()
    assert schema["properties"]["engine"]["enum"] == ["pagedviz", "vllm"]
    page = client.get(live.json()["url"])
    assert page.status_code == 200 and 'id="engine-mark"' in page.text
