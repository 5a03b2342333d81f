"""The embeddable figure's framing headers on a real uvicorn: a page asked for with embed=<card> may
be framed by PAGEDVIZ_EMBED_ANCESTORS (default *) and has no X-Frame-Options; every other response
keeps frame-ancestors 'none' and DENY; a setting that could break the header stops the server."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from pagedviz.app.main import create_app
from pagedviz.app.serve import free_port, running_server
from pagedviz.app.settings import Settings, embed_ancestors
from pagedviz.core.limits import SettingError
from tests.support.cli import one_line_exit_2, pagedviz


def frame_ancestors(r: httpx.Response) -> str:
    csp = r.headers["content-security-policy"]
    return next(d.strip() for d in csp.split(";") if d.strip().startswith("frame-ancestors"))


def test_only_an_embed_page_may_be_framed_on_a_real_server() -> None:
    with running_server() as server:
        plain = httpx.get(f"{server.url}/run?preset=seed-001&step=2", timeout=30)
        embed = httpx.get(f"{server.url}/run?preset=seed-001&step=2&embed=kv", timeout=30)
        api = httpx.get(f"{server.url}/api/presets", timeout=30)
        empty = httpx.get(f"{server.url}/run?preset=seed-001&embed=", timeout=30)
    assert plain.status_code == embed.status_code == 200
    assert frame_ancestors(plain) == "frame-ancestors 'none'"
    assert plain.headers["x-frame-options"] == "DENY"
    assert frame_ancestors(embed) == "frame-ancestors *"
    assert "x-frame-options" not in embed.headers
    # the rest of the policy is the same: still no inline script
    assert "script-src 'self';" in embed.headers["content-security-policy"]
    assert frame_ancestors(api) == "frame-ancestors 'none'"
    assert frame_ancestors(empty) == "frame-ancestors 'none'"  # an empty embed= is not an embed


def test_the_setting_names_who_may_frame_it() -> None:
    app = create_app(Settings(embed_ancestors=embed_ancestors("'self'  https://slides.example")))
    with TestClient(app) as c:
        r = c.get("/run?preset=seed-001&embed=block_table")
        plain = c.get("/run?preset=seed-001")
    assert frame_ancestors(r) == "frame-ancestors 'self' https://slides.example"
    assert frame_ancestors(plain) == "frame-ancestors 'none'"


@pytest.mark.parametrize("bad", ["", "* ; script-src *", "a,b", "https://x\r\nSet-Cookie: a=1"])
def test_a_setting_that_would_break_the_header_is_refused(bad: str) -> None:
    with pytest.raises(SettingError, match="PAGEDVIZ_EMBED_ANCESTORS"):
        embed_ancestors(bad)


def test_the_server_stops_at_start_on_a_bad_embed_setting() -> None:
    r = pagedviz("serve", "--port", str(free_port()), env={"PAGEDVIZ_EMBED_ANCESTORS": "*; sandbox"})
    assert "PAGEDVIZ_EMBED_ANCESTORS must be CSP frame-ancestors sources" in one_line_exit_2(r)
