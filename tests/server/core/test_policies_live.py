"""Lending and absolute borrow limits, per-user limits and FairShareHistory through the CLI and the API of a real
server (``fairpod up``, SQLite, jobs as local processes) on the seed cluster: 4 x ml.g5.12xlarge, john 3 nodes of
quota, smith 1."""

from __future__ import annotations

import json
import signal
import time

from fairpod.server.core.history import EVERY as FAIRSHARE_SAVE_EVERY

from ... import httpclient
from ..conftest import Server, wait_for

T = "ml.g5.12xlarge"


def _running(s: Server, names: list[str]) -> list[str]:
    return sorted(n for n in names if s.job(n)["state"] == "Running")


def test_limits_and_users_live(server: Server) -> None:
    s = server
    # the admin sets the limits with the team and policy commands
    s.cli("team", "update", "john", "--lending-limit", f"{T}=1")  # john keeps 2 of his 3 nodes for himself
    s.cli("team", "update", "smith", "--borrow-limit", "300", "--absolute-borrow-limit", f"{T}:accelerators=8",
          "--max-accelerators-per-user", "8", "--user-queue-order", "RoundRobin")
    s.cli("policy", "set", "--idle-compute-allocation", "FairShareHistory", "--fair-share-half-life-seconds", "600")
    teams = {t["name"]: t for t in json.loads(s.cli("team", "list", "-o", "json").stdout)}
    assert teams["john"]["sharing"]["lending_limits"] == [{"instance_type": T, "count": 1, "accelerators": None,
                                                           "vcpu": None, "memory_gib": None}]
    assert teams["smith"]["user_limits"] == {"max_running_accelerators": 8, "queue_order": "RoundRobin"}
    table = s.cli("team", "list").stdout
    assert "LENDING LIMIT" in table and f"{T}:count=1" in table and "8 acc round-robin" in table
    assert "FairShareHistory" in s.cli("policy", "show").stdout

    # bad input: one line naming the flag, nothing changed
    for args, words in ((["--lending-limit", f"{T}=x"], "--lending-limit"),
                        (["--lending-limit", "ml.nope=1"], "--lending-limit"),
                        (["--max-accelerators-per-user", "-3"], "--max-accelerators-per-user")):
        r = s.cli("team", "update", "john", *args, check=False)
        assert r.returncode != 0 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = s.cli("team", "update", "john", "--absolute-borrow-limit", f"{T}=1", "--strategy", "Lend", check=False)
    assert r.returncode != 0 and "does not borrow" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert json.loads(s.cli("team", "list", "-o", "json").stdout)[0]["sharing"]["strategy"] == "LendAndBorrow"

    # two users of smith; jobs record who submitted them, whatever the body says
    ann = s.cli("user", "create", "ann", "--team", "smith").stdout.split("token (shown once): ")[1].strip()
    bob = s.cli("user", "create", "bob", "--team", "smith").stdout.split("token (shown once): ")[1].strip()
    # smith's whole room (its node and the one john lends) is taken while ann and bob queue their jobs
    s.submit(name="hold", team="smith", nodes=2, command=["sleep", "600"])
    s.wait_state("hold", "Running")
    for i in range(3):
        s.cli("start-job", "--name", f"ann-{i}", "--team", "smith", "--", "sleep", "600", token=ann)
    s.submit(token=bob, name="bob-0", team="smith", command=["sleep", "600"], user="ann")
    assert s.job("bob-0")["user"] == "bob" and s.job("ann-0")["user"] == "ann"
    assert "User:" in s.cli("get-job", "ann-0").stdout
    smith = ["ann-0", "ann-1", "ann-2", "bob-0"]
    wait_for(lambda: all(s.job(n)["reason"] == "no idle ml.g5.12xlarge capacity to borrow"
                         for n in ("ann-0", "bob-0")), 20,
             "smith jobs to wait: " + str([s.job(n)["reason"] for n in smith]))
    s.cli("cancel-job", "hold")
    # smith may use 1 own node + 1 lent by john (his lending limit; the absolute limit of 8 would allow 2):
    # round-robin gives the two nodes to ann and bob, not to ann's first two jobs
    wait_for(lambda: _running(s, smith) == ["ann-0", "bob-0"], 30,
             "ann-0 and bob-0 to run: " + str([(n, s.job(n)["state"], s.job(n)["reason"]) for n in smith]))
    assert "no idle ml.g5.12xlarge capacity to borrow" in s.job("ann-1")["reason"]
    view = s.api("GET", "/cluster").json()
    row = {(t["team"], t["instance_type"]): t for t in view["teams"]}
    assert row[("john", T)]["lending_limit"] == 4 and row[("smith", T)]["absolute_borrow_limit"] == 8
    assert row[("smith", T)]["borrowed_from"] == {"john": 4}

    # john's two nodes kept back start at once: nothing of smith's is reclaimed
    s.submit(name="john-0", team="john", command=["sleep", "600"])
    s.submit(name="john-1", team="john", command=["sleep", "600"])
    s.wait_state("john-0", "Running")
    s.wait_state("john-1", "Running")
    assert _running(s, smith) == ["ann-0", "bob-0"]

    # the per-user cap: john's lending limit raised, smith may borrow up to its absolute limit of 8 (2 nodes);
    # ann already runs 4 accelerators, her cap is 8: ann-1 starts
    s.cli("team", "update", "john", "--lending-limit", "none")
    s.cli("cancel-job", "john-1")
    wait_for(lambda: _running(s, smith) == ["ann-0", "ann-1", "bob-0"], 30, "ann-1 to start")
    wait_for(lambda: s.job("ann-2")["reason"] == "per-user cap: user ann runs 8 accelerators in team smith, the "
                                                 "job needs 4 more and the cap is 8", 20, "ann-2 to wait for her cap")

    # budgets: john's week in accelerator-hours, in the usage report and /metrics; a bad one is one line
    s.cli("team", "update", "john", "--budget", f"{T}:week=1000")
    report = s.cli("report", "usage").stdout
    assert "Budgets (current period)" in report and "of 1000 h" in report
    rows = json.loads(s.cli("report", "usage", "-o", "json").stdout)["budgets"]
    assert [(b["team"], b["period"], b["state"]) for b in rows] == [("john", "week", "ok")]
    metrics = httpclient.get(s.url + "/metrics", headers={"Authorization": f"Bearer {s.token}"}, timeout=30).text
    assert 'fairpod_team_budget_hours{instance_type="ml.g5.12xlarge",period="week",team="john"} 1000.0' in metrics
    assert "fairpod_team_budget_used_ratio{" in metrics
    r = s.cli("team", "update", "john", "--budget", f"{T}:fortnight=10", check=False)
    assert r.returncode != 0 and "--budget" in r.stderr and len(r.stderr.strip().splitlines()) == 1

    # FairShareHistory: smith's past borrowing is shown and kept across a restart of the server
    hist = wait_for(lambda: next(t["fair_share_history"] for t in s.api("GET", "/cluster").json()["teams"]
                                 if t["team"] == "smith") or None, 20, "smith's history to grow")
    assert 0 < hist < 1
    assert "BORROWED (DECAYED)" in s.cli("cluster", "show").stdout
    time.sleep(FAIRSHARE_SAVE_EVERY + 1)  # saved every 5 s: a kill loses at most the last 5 s of history
    s.kill(signal.SIGKILL)
    s.spec = None  # up without --spec: the live spec stays
    s.start()
    again = next(t["fair_share_history"] for t in s.api("GET", "/cluster").json()["teams"] if t["team"] == "smith")
    assert again >= hist, (hist, again)  # smith borrows on (share 0.5): its decayed mean only grew
