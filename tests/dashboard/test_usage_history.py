"""The dashboard's usage history (``/usage/history``) follows the cluster, in-process (the app that ``fairpod up``
builds, on TestClient; the loop's turns take the usage samples)."""

from __future__ import annotations

import threading

from ..server.inproc_api import Api


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
    # the cluster page's: the instance groups' series alone, read from their rows only, and the same as in all
    both = api.api("GET", "/usage/history", params={"window": "1h"}).json()
    groups = api.api("GET", "/usage/history", params={"window": "1h", "series": "groups"}).json()
    assert groups["teams"] == [] and groups["now"]["teams"] == []
    assert groups["groups"] == both["groups"] and groups["times"] == both["times"], (groups["groups"], both["groups"])
    assert groups["now"]["groups"][0]["acc"] == 8
    r = api.api("GET", "/usage/history", params={"window": "1h", "series": "teams-only"})
    assert r.status_code == 422 and "all, groups" in r.json()["detail"]


def test_the_figures_now_do_not_wait_for_a_turn_that_holds_the_lock(api: Api):
    """A turn at datacenter size holds the control plane's lock for seconds: the history answers with the usage
    sampler's last figures (and the time they are of) instead of waiting for it; once the lock is free it reads
    them from the snapshot again."""
    api.submit(name="john-train", team="john", nodes=2, command=["sleep", "60"])
    api.until("john-train", "Running")
    cp = api.cp
    api.turn_until(lambda: cp.usage.latest is not None and cp.usage.latest[1] and
                   any(s.acc == 8 for s in cp.usage.latest[1]), 150, "the sampler's figures with john's job")
    at = cp.usage.latest[0]
    held, done = threading.Event(), threading.Event()

    def turn_that_holds_the_lock() -> None:
        with cp.lock:
            held.set()
            done.wait(60)

    holder = threading.Thread(target=turn_that_holds_the_lock, daemon=True)
    holder.start()
    try:
        assert held.wait(30)
        got: list[dict] = []
        reader = threading.Thread(target=lambda: got.append(
            api.api("GET", "/usage/history", params={"window": "1h"}).json()), daemon=True)
        reader.start()
        reader.join(30)  # without the sampler's figures it waits until the lock is let go (60 s)
        assert got, "the history waited for the lock"
        assert got[0]["now_at"] == at and got[0]["now"]["groups"][0]["acc"] == 8
    finally:
        done.set()
        holder.join(30)
    fresh = api.api("GET", "/usage/history", params={"window": "1h"}).json()
    assert fresh["now_at"] >= at and fresh["now"]["groups"][0]["acc"] == 8
