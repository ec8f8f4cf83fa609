"""Elastic jobs end to end: a real server, real replica processes and signals, the CLI.

Four 1-accelerator nodes; john and smith have two each. smith's elastic job (1..4 nodes) starts with the one
node left, grows when smith's other job ends, and shrinks (its highest rank gets SIGTERM, the job keeps running)
when john reclaims a node it borrowed; its first replica runs throughout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import Server, running, wait_for

SPEC = (Path(__file__).resolve().parents[3] / "examples" / "four" / "spec.yaml").read_text()  # 4 x unit1

# each replica notes its start (rank, node, the FAIRPOD_* sizes) and a SIGTERM in the shared file
REPLICA = ('echo "start $NODE_RANK $FAIRPOD_NODE $FAIRPOD_NODES $FAIRPOD_MIN_NODES $FAIRPOD_MAX_NODES $MASTER_PORT" '
           '>> {out}; trap \'echo "term $NODE_RANK" >> {out}; exit 1\' TERM; while :; do sleep 0.1; done')


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def plain(server: Server, name: str, team: str, nodes: int = 1) -> None:
    server.cli("start-job", "--name", name, "--team", team, "--node-count", str(nodes), "--grace-seconds", "1",
               "--", "sleep", "300")


def lines(out: Path, n: int, word: str) -> list[list[str]]:
    return wait_for(lambda: out.exists() and len(got := [ln.split() for ln in out.read_text().splitlines()
                                                        if ln.startswith(word)]) >= n and got,
                    30, f"{n} '{word}' lines in {out.name}")


def events(server: Server, kind: str) -> list[dict]:
    return [e for e in server.api("GET", "/jobs/ddp/events").json()["events"] if e["kind"] == kind]


def test_elastic_job_starts_small_grows_and_shrinks_without_restarting(server: Server, tmp_path: Path):
    out = tmp_path / "ddp.log"
    plain(server, "smith-a", "smith", 2)
    plain(server, "john-x", "john")
    server.wait_state("smith-a", "Running")
    server.wait_state("john-x", "Running")
    server.cli("start-job", "--name", "ddp", "--team", "smith", "--min-nodes", "1", "--max-nodes", "4",
               "--grace-seconds", "2", "--", "sh", "-c", REPLICA.format(out=out))
    j = server.wait_state("ddp", "Running")
    assert j["nodes"] == 1 and (j["min_nodes"], j["max_nodes"]) == (1, 4)
    (first,) = lines(out, 1, "start")
    assert first[1] == "0" and first[3:6] == ["1", "1", "4"]  # rank 0; FAIRPOD_NODES/MIN/MAX
    port = first[6]

    server.cli("cancel-job", "smith-a")  # smith's other job ends: ddp grows into its two nodes
    wait_for(lambda: server.job("ddp")["nodes"] == 3, 30, "ddp to grow to 3 nodes")
    starts = lines(out, 3, "start")
    assert sorted(s[1] for s in starts) == ["0", "1", "2"] and len(starts) == 3  # rank 0 did not start again
    assert all(s[3] == "3" and s[6] == port for s in starts[1:])  # the new ranks see 3 nodes, the same rendezvous
    assert len({s[2] for s in starts}) == 3
    assert events(server, "JobGrown")

    plain(server, "john-y", "john")  # john wants its second node back: ddp's highest rank goes, not ddp
    server.wait_state("john-y", "Running", timeout=30)
    (term,) = lines(out, 1, "term")
    assert term[1] == "2"
    j = server.job("ddp")
    assert j["state"] == "Running" and j["nodes"] == 2 and j["preemptions"] == 0 and len(j["placement"]) == 2
    (shrunk,) = events(server, "JobShrunk")
    assert "john reclaims" in shrunk["message"] and shrunk["data"]["removed"]
    assert server.job("john-y")["placement"][0] not in j["placement"]
    assert "elastic: 1 to 4" in server.cli("get-job", "ddp").stdout
    assert "2x1 (1-4)" in server.cli("list-jobs").stdout
    assert len(lines(out, 3, "start")) == 3 and len(lines(out, 1, "term")) == 1  # nobody else restarted

    server.cli("cancel-job", "ddp")
    server.wait_state("ddp", "Cancelled", timeout=30)


def test_elastic_flags_are_checked_in_one_line(server: Server):
    for flags, msg in ((["--min-nodes", "3", "--max-nodes", "2"], "min_nodes 3 is more than max_nodes 2"),
                       (["--min-nodes", "2"], "min_nodes needs max_nodes"),
                       (["--max-nodes", "5"], "max_nodes 5 is more than the 4 unit1 nodes")):
        r = server.cli("start-job", "--name", "x", "--team", "john", *flags, "--", "true", check=False)
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_an_elastic_job_that_does_not_regroup_after_a_shrink_is_noticed(tmp_path: Path):
    spec = SPEC.replace("teams:", "policy: {elastic_regroup_timeout_seconds: 2}\nteams:", 1)
    servers = running(tmp_path, spec)
    server = next(servers)
    try:
        out = tmp_path / "ddp.log"
        plain(server, "john-x", "john")
        server.wait_state("john-x", "Running")
        # prints nothing once it runs, as a torchrun agent stuck in its re-rendezvous
        server.cli("start-job", "--name", "ddp", "--team", "smith", "--min-nodes", "1", "--max-nodes", "3",
                   "--grace-seconds", "1", "--", "sh", "-c", REPLICA.format(out=out))
        wait_for(lambda: server.job("ddp")["nodes"] == 3, 30, "ddp to grow to 3 nodes")
        plain(server, "john-y", "john")  # john's second node back: ddp shrinks
        server.wait_state("john-y", "Running", timeout=30)
        assert events(server, "JobShrunk")
        hung = wait_for(lambda: events(server, "JobHung"), 30, "the regroup timeout to notice")
        assert "since it shrank: its replicas did not re-form their group" in hung[0]["message"], hung
        assert "regroup timeout 2 s" in hung[0]["message"]
        assert server.job("ddp")["state"] == "Running"  # hang_action notify (the default): only told
        server.cli("cancel-job", "ddp")
        server.wait_state("ddp", "Cancelled", timeout=30)
    finally:
        servers.close()


@pytest.mark.parametrize("other", ["waits", "fails"])
def test_an_elastic_job_is_done_when_one_replica_finishes_the_training(server: Server, tmp_path: Path, other: str):
    """torchrun's elastic agents exit 0 only once the group's training is done: the replica that hosted the
    rendezvous finishing leaves the others waiting for a group that never forms again, or failing on the store that
    went with it. Either way the job Succeeded (Kubeflow's PyTorchJob: an elastic job succeeds with any worker)."""
    out = tmp_path / "ends.log"
    rest = "sleep 300" if other == "waits" else f'while [ ! -s {out} ]; do sleep 0.1; done; exit 1'
    server.cli("start-job", "--name", "ddp", "--team", "smith", "--min-nodes", "1", "--max-nodes", "2",
               "--grace-seconds", "1", "--", "sh", "-c",
               f'if [ "$NODE_RANK" = 0 ]; then sleep 1; echo done > {out}; exit 0; else {rest}; fi')
    wait_for(lambda: server.job("ddp")["nodes"] == 2, 30, "ddp to start on 2 nodes")
    done = server.wait_state("ddp", "Succeeded", timeout=60)
    assert "replica 0 finished the training" in done["reason"], done["reason"]
    assert done["restarts"] == 0
