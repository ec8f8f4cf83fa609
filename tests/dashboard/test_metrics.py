"""/metrics scraped from a real server and checked against the JSON API, across a control-plane restart."""

from __future__ import annotations

import signal
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from .. import httpclient
from ..server.conftest import Server, wait_for


def scrape(server: Server, token: str | None = None) -> dict[str, dict[tuple, float]]:
    r = httpclient.get(server.url + "/metrics", headers={"Authorization": f"Bearer {token or server.token}"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def val(m: dict, name: str, **labels: str) -> float:
    return m[name][tuple(sorted(labels.items()))]


def check_against_api(server: Server, m: dict) -> None:
    cluster = server.api("GET", "/cluster").json()
    for it, cap in cluster["capacity"].items():
        assert val(m, "fairpod_cluster_capacity", instance_type=it, resource="accelerators") == cap["accelerators"]
        assert val(m, "fairpod_cluster_resource_usage", instance_type=it, resource="accelerators") == cap["in_use"]
    for t in cluster["teams"]:
        lab = {"team": t["team"], "instance_type": t["instance_type"], "resource": "accelerators"}
        assert val(m, "fairpod_team_nominal_quota", **lab) == t["quota"]
        assert val(m, "fairpod_team_resource_usage", **lab) == t["in_use"]
        assert val(m, "fairpod_team_borrowed_resources", **lab) == t["borrowed"]
        assert val(m, "fairpod_team_lent_resources", **lab) == t["lent"]
        assert val(m, "fairpod_team_fair_share_weight", team=t["team"]) == t["fair_share_weight"]
    jobs = server.api("GET", "/jobs").json()["jobs"]
    for team in ("john", "smith"):
        mine = [j for j in jobs if j["team"] == team]
        assert val(m, "fairpod_running_jobs", team=team) == sum(j["state"] == "Running" for j in mine)
        pending = sum(j["state"] == "Pending" for j in mine)
        assert val(m, "fairpod_pending_jobs", team=team, status="active") + val(
            m, "fairpod_pending_jobs", team=team, status="inadmissible") == pending
        started = [j for j in mine if j["first_started_at"] is not None]
        assert val(m, "fairpod_admission_wait_time_seconds_count", team=team) == len(started)
        assert abs(val(m, "fairpod_admission_wait_time_seconds_sum", team=team)
                   - sum(j["first_started_at"] - j["submit_time"] for j in started)) < 1e-6
        for state in ("Succeeded", "Failed", "Cancelled"):
            assert val(m, "fairpod_finished_jobs_total", team=team, state=state) == sum(
                j["state"] == state for j in mine)
        assert val(m, "fairpod_job_restarts_total", team=team) == sum(j["restarts"] for j in mine)
    events = server.api("GET", "/events", params={"since_id": 0, "limit": 10000}).json()["events"]
    admitted = Counter(e["team"] for e in events if e["kind"] == "JobAdmitted")
    preempted = Counter(e["team"] for e in events if e["kind"] == "JobPreempted")
    for team in ("john", "smith"):
        assert val(m, "fairpod_admitted_jobs_total", team=team) == admitted[team]
        assert sum(v for k, v in m["fairpod_preempted_jobs_total"].items() if ("team", team) in k) == preempted[team]
        assert sum(j["preemptions"] for j in jobs if j["team"] == team) == preempted[team]
    nodes = server.api("GET", "/nodes").json()["nodes"]
    assert val(m, "fairpod_nodes", instance_group="workers", instance_type="ml.g5.12xlarge",
               health_status="Schedulable") == sum(n["health_status"] == "Schedulable" for n in nodes)
    assert val(m, "fairpod_nodes_cordoned", instance_group="workers", instance_type="ml.g5.12xlarge") == sum(
        n["cordoned"] for n in nodes)


def test_metrics_match_the_api_and_survive_a_restart(server: Server, tmp_path):
    assert httpclient.get(server.url + "/metrics", timeout=10).status_code == 401
    server.submit(name="john-train", team="john", nodes=2, command=["sleep", "120"])
    server.wait_state("john-train", "Running")
    server.submit(name="smith-train", team="smith", nodes=2, termination_grace_seconds=2, command=["sleep", "120"])
    server.wait_state("smith-train", "Running")
    server.submit(name="smith-more", team="smith", nodes=1, command=["sleep", "120"])
    wait_for(lambda: "borrow limit" in server.job("smith-more")["reason"], 10, "smith-more to wait")
    m = scrape(server)
    check_against_api(server, m)
    assert val(m, "fairpod_team_borrowed_resources", team="smith", instance_type="ml.g5.12xlarge",
               resource="accelerators") == 4
    assert val(m, "fairpod_team_lent_resources", team="john", instance_type="ml.g5.12xlarge",
               resource="accelerators") == 4
    assert val(m, "fairpod_cluster_resource_usage", instance_type="ml.g5.12xlarge", resource="cpu") == 192
    assert val(m, "fairpod_pending_jobs", team="smith", status="inadmissible") == 1
    assert val(m, "fairpod_scheduler_cycles_total") > 0
    assert val(m, "fairpod_scheduler_cycle_duration_seconds_count") > 0

    # john reclaims one node: smith-train is preempted (reclaim), smith-more may run within smith's quota
    server.submit(name="john-eval", team="john", nodes=1, command=["sleep", "1"])
    wait_for(lambda: server.job("smith-train")["preemptions"] == 1, 20, "the reclaim")
    server.wait_state("john-eval", "Succeeded", 30)
    server.api("POST", "/jobs/smith-more/cancel")
    server.wait_state("smith-more", "Cancelled", 20)
    server.api("POST", "/nodes/workers-3/cordon")
    m = scrape(server)
    check_against_api(server, m)
    assert val(m, "fairpod_preempted_jobs_total", team="smith", reason="reclaim") == 1
    assert val(m, "fairpod_preempted_jobs_total", team="smith", reason="priority") == 0
    assert val(m, "fairpod_finished_jobs_total", team="john", state="Succeeded") == 1
    assert val(m, "fairpod_finished_jobs_total", team="smith", state="Cancelled") == 1
    assert val(m, "fairpod_job_run_time_seconds_count", team="john") == 1
    assert val(m, "fairpod_nodes_cordoned", instance_group="workers", instance_type="ml.g5.12xlarge") == 1

    # a member sees only their team's series
    r = server.api("POST", "/users", json={"name": "alice", "role": "member", "teams": ["smith"]})
    mm = scrape(server, r.json()["token"])
    assert {dict(k)["team"] for k in mm["fairpod_team_resource_usage"]} == {"smith"}
    assert {dict(k)["team"] for k in mm["fairpod_admitted_jobs_total"]} == {"smith"}

    # counters come from the store: a restarted control plane reports the same totals
    server.api("POST", "/jobs/smith-train/cancel")
    server.wait_state("smith-train", "Cancelled", 20)
    counters = ("fairpod_admitted_jobs_total", "fairpod_preempted_jobs_total", "fairpod_finished_jobs_total",
                "fairpod_job_restarts_total", "fairpod_admission_wait_time_seconds_count",
                "fairpod_admission_wait_time_seconds_sum", "fairpod_job_run_time_seconds_count")
    m = scrape(server)
    before = {c: m[c] for c in counters}
    assert val(m, "fairpod_finished_jobs_total", team="smith", state="Cancelled") == 2
    server.kill(signal.SIGTERM)
    server.start()
    after = scrape(server)
    assert {c: after[c] for c in counters} == before
    check_against_api(server, after)
