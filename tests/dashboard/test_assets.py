"""The dashboard's files over HTTP, in-process (the app that ``fairpod up`` builds, on TestClient): no token
needed, gzip for browsers that take it, ETags, and a problem document for a file that is not there."""

from __future__ import annotations

import pytest

from ..server.inproc_api import Api


def test_the_page_and_its_files_need_no_token(api: Api):
    page = api.request("GET", "/", "")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<html" in page.text.lower() and page.headers["cache-control"] == "no-cache"
    for name, kind in [("app.js", "text/javascript"), ("app.css", "text/css"), ("plotly.min.js", "text/javascript")]:
        r = api.request("GET", f"/static/{name}", "", headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), (name, r.status_code)
        assert "content-encoding" not in r.headers and len(r.content) > 100
    assert "max-age=86400" in api.request("GET", "/static/plotly.min.js", "").headers["cache-control"]


def test_gzip_and_etags(api: Api):
    plain = api.request("GET", "/static/app.js", "", headers={"Accept-Encoding": "identity"})
    packed = api.client.get("/static/app.js", headers={"Accept-Encoding": "gzip"})
    assert packed.headers["content-encoding"] == "gzip" and packed.content == plain.content  # httpx unpacks it
    assert int(packed.headers["content-length"]) < len(plain.content)
    etag = plain.headers["etag"]
    again = api.request("GET", "/static/app.js", "", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize("name", ["index.html", "nope.js", "..%2Fassets.py"])
def test_a_file_that_is_not_served_is_a_404_problem(api: Api, name: str):
    r = api.request("GET", f"/static/{name}", "")
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json", r.text
