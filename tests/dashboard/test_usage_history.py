"""The dashboard's usage history (``/usage/history``) follows the cluster, in-process (the app that ``fairpod up``
builds, on TestClient; the loop's turns take the usage samples)."""

from __future__ import annotations

from ..server.api import Api


def test_usage_history_follows_the_cluster(api: Api):
    api.submit(name="john-train", team="john", nodes=2, command=["sleep", "60"])
    api.until("john-train", "Running")
    h = api.turn_until(lambda: (x := api.api("GET", "/usage/history", params={"window": "1h"}).json())
                       and x["teams"] and x["teams"][0]["in_use"][-1] and x, 150, "a usage sample with john's job")
    assert h["now"]["groups"][0]["acc"] == 8 and h["now"]["groups"][0]["cap_acc"] == 16
    john = next(t for t in h["teams"] if t["team"] == "john")
    assert john["quota"][-1] == 12 and 0 < john["in_use"][-1] <= 8
    assert len(h["times"]) == len(john["in_use"]) == 120
    r = api.api("GET", "/usage/history", params={"window": "2h"})
    assert r.status_code == 422 and "1h, 6h, 1d, 7d" in r.json()["detail"]
