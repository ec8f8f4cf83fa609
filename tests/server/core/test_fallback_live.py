"""Fallback instance types end to end: a real server, real replicas, the CLI. ``--instance-type big8,old8`` starts
on old8 while big8 is full (get-job says why big8 was passed over); a job whose types are all busy says why for
each; a PyTorchJob whose node affinity lists both types converts to the same."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fairpod.formats.kube.pytorchjob import convert

from ..conftest import Server, running, wait_for

SPEC = """
cluster:
  name: two-types
  instance_groups:
    - {name: b, instance_type: big8, count: 1}
    - {name: o, instance_type: old8, count: 1}
instance_types:
  - {name: big8, accelerators: 2, vcpu: 4, memory_gib: 8}
  - {name: old8, accelerators: 2, vcpu: 2, memory_gib: 4}
teams:
  - name: a
    sharing: {strategy: DontLend}
    quota: [{instance_type: big8, count: 1}, {instance_type: old8, count: 1}]
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from running(tmp_path, SPEC)


def start(server: Server, name: str, types: str) -> None:
    server.cli("start-job", "--name", name, "--team", "a", "--instance-type", types, "--grace-seconds", "1",
               "--", "sleep", "120")


def test_second_choice_live_and_the_reasons(server: Server):
    start(server, "first", "big8")
    server.wait_state("first", "Running")
    start(server, "either", "big8,old8")
    j = server.wait_state("either", "Running")
    assert j["instance_type"] == "old8" and j["placement"] == ["o-0"], j
    assert "on old8 (big8: over quota: team a uses 2 of its 2 big8 accelerators" in j["reason"], j["reason"]
    start(server, "third", "big8,old8")
    j = wait_for(lambda: (j := server.job("third"))["reason"].startswith("no instance type fits") and j, 20,
                 "third to say why it waits")
    assert "big8: over quota" in j["reason"] and "; old8: over quota" in j["reason"], j["reason"]
    server.cli("cancel-job", "first")
    j = server.wait_state("third", "Running")  # its first choice, once free
    assert j["instance_type"] == "big8" and j["placement"] == ["b-0"]
    bad = server.cli("start-job", "--name", "bad", "--team", "a", "--instance-type", "big8,nope", "--", "true",
                     check=False)
    assert bad.returncode != 0 and "unknown instance type 'nope'" in bad.stderr, bad.stderr


def test_a_pytorchjob_node_affinity_lists_the_types_in_order():
    doc = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "ddp", "namespace": "hyperpod-ns-a"},
           "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
               "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                   "nodeSelectorTerms": [{"matchExpressions": [{
                       "key": "node.kubernetes.io/instance-type", "operator": "In",
                       "values": ["ml.p5.48xlarge", "ml.p4d.24xlarge"]}]}]}}},
               "containers": [{"name": "pytorch", "command": ["true"]}]}}}}}}
    j = convert(doc, python="/py", cwd="/work")
    assert j.body["instance_type"] == "ml.p5.48xlarge,ml.p4d.24xlarge"
    assert not any("affinity" in w for w in j.warnings)
