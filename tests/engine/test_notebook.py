"""pagedviz.notebook: the view's server starts on demand on a free loopback port, is shared by the
next show, lets the notebook frame the page, and stops."""

from __future__ import annotations

import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest

from pagedviz import notebook
from pagedviz.core import load_preset, make_engine
from pagedviz.notebook import server


@pytest.fixture
def fresh():
    notebook.stop()
    yield
    notebook.stop()


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_show_serves_the_run_page_framable_on_loopback(fresh):
    assert server.running() is None
    view = notebook.show("seed-000", step=3, lang="zh")
    assert view.url.startswith("http://127.0.0.1:")
    assert query(view.url) == {"preset": ["seed-000"], "lang": ["zh"], "step": ["3"]}
    with urllib.request.urlopen(view.url, timeout=10) as r:
        assert r.status == 200
        assert "frame-ancestors *" in r.headers["content-security-policy"]
        assert "script-src 'self';" in r.headers["content-security-policy"]  # the CSP stays strict
        assert r.headers.get("x-frame-options") is None
        assert b'id="timeline"' in r.read()


def test_a_second_show_reuses_the_server_and_step_moves_the_view(fresh):
    a = notebook.show("seed-000")
    port = server.running().port
    sc = load_preset("seed-001")
    b = notebook.show(list(make_engine(sc).run()), scenario=sc, step=2)
    assert server.running().port == port
    assert "s" in query(b.url) and query(b.url)["step"] == ["2"]
    a.step(5)
    assert query(a.url)["step"] == ["5"]


def test_stop_closes_the_port(fresh):
    url = notebook.show("seed-000").url
    notebook.stop()
    assert server.running() is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


def test_the_app_alone_still_refuses_framing():
    from fastapi.testclient import TestClient

    from pagedviz.app.main import create_app
    from pagedviz.app.settings import Settings

    with TestClient(create_app(Settings(compute_in="thread"))) as c:
        r = c.get("/run?preset=seed-000")
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert r.headers["x-frame-options"] == "DENY"


def test_bad_input_names_the_field(fresh):
    with pytest.raises(ValueError, match="view: unknown field"):
        notebook.show("seed-000", colour="red")
    with pytest.raises(ValueError, match="scenario: a run's step traces"):
        notebook.show(list(make_engine(load_preset("seed-000")).run()))
    with pytest.raises(ValueError, match="n: a step number"):
        notebook.show("seed-000").step(0)
