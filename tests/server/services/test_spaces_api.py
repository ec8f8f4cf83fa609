"""The spaces API in-process (tests/server/inproc_api.py: the real app over SQLite, no turn run): who may create,
see, open, stop, start and delete a space, and what a bad request gets. The live IDE, its proxy and Chromium are
tests/dashboard/test_space_browser.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..inproc_api import Api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    """The local executor (a space is a service: the timed one cannot run services); no turn runs, so no space
    starts a process here."""
    a = Api(tmp_path, executor="local")
    yield a
    a.close()


def test_a_space_is_a_job_of_its_owner_that_only_its_owner_opens(api: Api):
    mia = api.member  # team john
    r = api.api("POST", "/spaces", mia, json={"name": "nb", "team": "john", "ide": "jupyter", "accelerators": 1})
    assert r.status_code == 201, r.text
    s = r.json()
    assert (s["owner"], s["access"], s["ide"], s["state"]) == ("mia", "OwnerOnly", "jupyter", "Pending")
    job = api.store.get_job(s["job_id"])
    assert job is not None and job.spec.kind == "job"  # governed as a job: it borrows and is preempted
    assert job.spec.command[-1] == "jupyter" and job.spec.env["FAIRPOD_SPACE_BASE"] == "/spaces/john/nb/"
    assert [x["name"] for x in api.api("GET", "/spaces", mia).json()["spaces"]] == ["nb"]

    # another team's member does not see it; a teammate sees it but may neither open nor change it
    assert api.api("GET", "/spaces/nb", api.other).status_code == 404
    assert api.api("POST", "/spaces/nb/links", api.other).status_code == 404
    assert api.api("GET", "/spaces", api.other).json()["spaces"] == []
    ted = api.user("ted", "member", ["john"])
    assert api.api("GET", "/spaces/nb", ted).status_code == 200
    for method, path in (("POST", "/spaces/nb/links"), ("POST", "/spaces/nb/stop"), ("DELETE", "/spaces/nb")):
        r = api.api(method, path, ted)
        assert r.status_code == 403 and "mia" in r.json()["detail"], (path, r.text)
    r = api.api("POST", "/spaces/nb/links", api.admin)  # the admin manages it but never works in it as mia
    assert r.status_code == 403, r.text
    assert api.api("POST", "/spaces/nb/links", mia).status_code == 409  # not running yet: no address

    # stop keeps it (and its name); start runs it again as mia's, even when the admin starts it
    assert api.api("POST", "/spaces/nb/stop", api.admin).json()["state"] == "Stopped"
    assert api.api("POST", "/spaces/nb/stop", mia).status_code == 409
    files = api.cp.checkpoint_root() / "john" / "space.nb"
    assert files.is_dir()  # made at create: a space stopped before it ran is still there
    assert api.api("GET", "/spaces/nb", mia).json()["state"] == "Stopped"
    r = api.api("POST", "/spaces", mia, json={"name": "nb", "team": "john", "ide": "jupyter"})
    assert r.status_code == 409 and "space start nb" in r.json()["detail"]
    again = api.api("POST", "/spaces/nb/start", api.admin).json()
    assert again["owner"] == "mia" and again["job_id"] != s["job_id"] and again["state"] == "Pending"
    assert api.api("DELETE", "/spaces/nb", mia).json()["state"] == "Deleted"
    assert not files.exists() and api.api("GET", "/spaces/nb", mia).status_code == 404
    # an IDE still stopping after the delete writes into its directory again: the space stays deleted
    (files / ".ipynb_checkpoints").mkdir(parents=True)
    assert api.api("GET", "/spaces/nb", mia).status_code == 404
    assert api.api("GET", "/spaces", mia).json()["spaces"] == []


def test_a_public_space_opens_for_its_team_and_bad_requests_say_which_field(api: Api):
    r = api.api("POST", "/spaces", api.member, json={"name": "shared", "team": "john", "ide": "code-server",
                                                     "access": "Public"})
    assert r.status_code == 201, r.text
    ted = api.user("ted", "member", ["john"])
    assert api.api("POST", "/spaces/shared/links", ted).status_code == 409  # may open it (once it runs)
    assert api.api("POST", "/spaces/shared/links", api.other).status_code == 404
    assert api.api("POST", "/spaces", api.member, json={"name": "x", "team": "smith", "ide": "jupyter"}
                   ).status_code == 403  # not mia's team
    for body, field in (({"name": "Bad_Name", "ide": "jupyter"}, "name"), ({"name": "x", "ide": "emacs"}, "ide"),
                        ({"name": "x", "ide": "jupyter", "access": "Everyone"}, "access"),
                        ({"name": "x", "ide": "jupyter", "accelerators": -1}, "accelerators"),
                        ({"name": "x", "ide": "jupyter", "command": ["sh"]}, "command")):
        r = api.api("POST", "/spaces", api.member, json={"team": "john", **body})
        assert r.status_code == 422 and field in r.text, (body, r.text)
    assert api.api("GET", "/spaces", api.member).json()["spaces"][0]["name"] == "shared"
