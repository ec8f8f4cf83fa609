"""Small things a new user hit (the API in-process: tests/server/inproc_api.py): an unknown team is an error that names
the team meant, a misspelled spec field says which was meant, a queued service runs no replica, a borrowed single
accelerator is one accelerator, node health's figures are words, and the node list's job column says it holds ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairpod.cli.output import reason_in_units
from fairpod.model.spec import SpecError, parse_spec

from ..inproc_api import Api


@pytest.fixture
def api(tmp_path: Path):
    a = Api(tmp_path)
    yield a
    a.close()


def test_list_jobs_of_an_unknown_team_names_the_one_meant(api: Api):
    r = api.api("GET", "/jobs", params={"team": "jhon"})
    assert r.status_code == 404 and r.json()["detail"] == "unknown team jhon (did you mean john?)", r.text
    r = api.api("GET", "/jobs", params={"team": "zzz"})
    assert r.status_code == 404 and r.json()["detail"] == "unknown team zzz; teams: john, smith", r.text
    r = api.api("GET", "/jobs", api.member, params={"team": "jhon"})  # a member: among its own teams
    assert r.status_code == 404 and "did you mean john?" in r.json()["detail"], r.text
    assert api.api("GET", "/jobs", params={"team": "john"}).status_code == 200


def test_a_misspelled_spec_field_says_which_was_meant():
    with pytest.raises(SpecError) as e:
        parse_spec({"cluster": {"name": "c", "instance_groups": [
            {"name": "w", "instance_type": "ml.g5.12xlarge", "count": 1}]},
            "teams": [{"name": "john", "fair_share_weigth": 2}], "polcy": {}})
    assert "teams[0].fair_share_weigth: unknown field (did you mean fair_share_weight?)" in str(e.value)
    assert "polcy: unknown field (did you mean policy?)" in str(e.value)


def test_a_queued_service_runs_no_replica(tmp_path: Path):
    """get-service said '1 running, 0 ready' while the service was Pending."""
    api = Api(tmp_path, executor="local")  # (services need it; the service itself never starts here)
    try:
        for team, nodes in (("john", 3), ("smith", 1)):  # the whole cluster taken
            api.submit(name=f"hold-{team}", team=team, nodes=nodes, command=["sleep", "600"])
        api.turn()
        api.submit(name="web", team="john", command=["python3", "-m", "http.server"], service={})
        api.turn()
        s = api.api("GET", "/services/web").json()
        assert s["state"] == "Pending" and s["replicas"] == 0 and s["ready_replicas"] == 0, s
    finally:  # the service first: once the holds end, a turn would start it
        api.api("POST", "/jobs/web/cancel")
        for team in ("john", "smith"):
            api.api("POST", f"/jobs/hold-{team}/cancel")
        api.turns_while_busy(lambda: all(api.job(f"hold-{t}")["state"] == "Cancelled" for t in ("john", "smith")),
                             "the holds to end")  # real processes: as long as the machine takes to stop them
        api.close()


def test_one_borrowed_accelerator_is_one_accelerator():
    assert reason_in_units("admitted, borrowing 1 accelerators from john (1)", 4) == \
        "admitted, borrowing 1 accelerator (0.25 nodes) from john"
    assert reason_in_units("admitted, borrowing 8 accelerators from john (8)", 4) == \
        "admitted, borrowing 8 accelerators (2 nodes) from john"
