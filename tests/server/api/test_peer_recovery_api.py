"""``--peer-recovery`` at submit and ``POST /jobs/{job}/recovered`` (``fairpod.sdk.peers``), in-process: what is
refused and how, without a live server (the recovery itself: tests/training/test_peer_recovery.py)."""

from __future__ import annotations

from ..inproc_api import Api


def test_peer_recovery_needs_restarts_in_place_and_peers(shared_api: Api) -> None:
    a = shared_api
    base = {"team": "john", "command": ["sleep", "60"]}
    r = a.api("POST", "/jobs", json={**base, "name": "pr-1", "nodes": 3, "peer_recovery": True})
    assert r.status_code == 422 and "peer_recovery needs restarts_in_place >= 1" in r.text, r.text
    r = a.api("POST", "/jobs", json={**base, "name": "pr-2", "nodes": 1, "peer_recovery": True, "restarts_in_place": 1})
    assert r.status_code == 422 and "at least 2 replicas" in r.text, r.text
    assert a.api("GET", "/jobs/pr-1").status_code == 404  # nothing half-created


def test_recovered_is_refused_unless_a_replica_waits_for_it(api: Api) -> None:
    a = api
    a.submit(name="pr-ok", team="john", nodes=2, restarts_in_place=1, peer_recovery=True, command=["sleep", "600"])
    a.until("pr-ok", "Running")
    good = {"ranks": [1], "source": 0, "step": 5, "seconds": 1.5}
    for bad in ({**good, "ranks": []}, {**good, "ranks": [-1]}, {**good, "step": "5"}, {**good, "seconds": "nan"},
                {**good, "ranks": list(range(65))}, {**good, "extra": 1}, {**good, "source": 1.5}):
        r = a.api("POST", "/jobs/pr-ok/recovered", json=bad)
        assert r.status_code == 422, (bad, r.text)
    r = a.api("POST", "/jobs/pr-ok/recovered", a.other, json=good)  # another team's member
    assert r.status_code in (403, 404), r.text
    r = a.api("POST", "/jobs/pr-ok/recovered", json=good)  # no replica was restarted: nothing to recover
    assert r.status_code == 409 and "no replica 1 waiting" in r.json()["detail"], r.text
    assert not a.store.list_events(kind="ReplicaRecovered", limit=None)
