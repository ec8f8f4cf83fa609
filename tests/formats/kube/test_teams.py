"""Which team a manifest is for: the spec's namespaces and LocalQueues, HyperPod's names by default, --team, the
submitter's only team; and the same names exported to Kueue and imported back."""

from __future__ import annotations

import pytest

from fairpod.formats.kube.export import export_kueue
from fairpod.formats.kube.importer import import_kueue
from fairpod.formats.kube.teams import TeamError, Teams
from fairpod.model.spec import SpecError, parse_spec

TEAMS = [{"name": "john"}, {"name": "vision", "namespaces": ["default", "cv"], "local_queues": ["user-queue"]}]


def ns(n: str) -> dict:
    return {"namespace": n}


def queue(q: str) -> list[dict]:
    return [{"kueue.x-k8s.io/queue-name": q}]


def test_the_specs_names_and_hyperpods_by_default():
    t = Teams.of(TEAMS)
    assert t.resolve(ns("hyperpod-ns-john"), []) == ("john", "namespace hyperpod-ns-john")
    assert t.resolve(ns("cv"), [])[0] == "vision"
    assert t.resolve({}, queue("user-queue"))[0] == "vision"
    assert t.resolve({}, queue("hyperpod-ns-john-localqueue"))[0] == "john"
    with pytest.raises(TeamError, match="hyperpod-ns-vision"):  # a team that lists its names has only those
        t.resolve(ns("hyperpod-ns-vision"), [])
    with pytest.raises(TeamError, match="'q' is no LocalQueue of a team of this cluster"):
        t.resolve({}, queue("q"))
    with pytest.raises(TeamError, match="different teams"):  # HyperPod's namespace is its team's alone
        t.resolve(ns("hyperpod-ns-john"), queue("user-queue"))
    # a namespace the spec lists may hold other teams' queues (Kueue's samples: all in default): the queue decides
    assert t.resolve(ns("cv"), queue("hyperpod-ns-john-localqueue"))[0] == "john"


def test_team_flag_and_the_only_team():
    assert Teams.of(TEAMS, flag="john").resolve(ns("kubeflow"), []) == ("john", "--team")
    t = Teams.of(TEAMS, flag="john")
    assert t.resolve({}, queue("q"))[0] == "john" and "--team john says which team" in t.notes[0]
    with pytest.raises(TeamError, match="--team john, but the file's namespace cv is team vision's"):
        Teams.of(TEAMS, flag="john").resolve(ns("cv"), [])
    assert Teams.of(TEAMS, only=lambda: "john").resolve(ns("kubeflow"), []) == ("john", "your only team")
    with pytest.raises(TeamError, match=r"which team\? .*metadata.namespace kubeflow is no team's.*give --team"):
        Teams.of(TEAMS, only=lambda: None).resolve(ns("kubeflow"), [])


def test_spec_names_are_checked_and_round_trip_through_kueue():  # (invalid specs as dict(): not corpus specs)
    spec = parse_spec({"cluster": {"instance_groups": [{"name": "g", "instance_type": "ml.g5.12xlarge", "count": 2}]},
                       "teams": [{"name": "vision", "namespaces": ["cv", "default"], "local_queues": ["user-queue"],
                                  "quota": [{"instance_type": "ml.g5.12xlarge", "count": 1}]},
                                 {"name": "john", "quota": [{"instance_type": "ml.g5.12xlarge", "count": 1}]}]})
    objs = export_kueue(spec).objects
    lqs = sorted((o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "LocalQueue")
    assert lqs == [("cv", "user-queue"), ("default", "user-queue"),
                   ("hyperpod-ns-john", "hyperpod-ns-john-localqueue")]
    # edited (annotations stripped): the names are read from the LocalQueues
    for o in objs:
        o["metadata"].pop("annotations", None)
    back = import_kueue(objs).spec
    vision = next(t for t in back.teams if t.name == "vision")
    assert (vision.namespaces, vision.local_queues) == (["cv", "default"], ["user-queue"])
    assert next(t for t in back.teams if t.name == "john").namespaces == []
    with pytest.raises(SpecError, match="namespaces 'cv' is listed by both a and b"):
        parse_spec(dict(teams=[{"name": "a", "namespaces": ["cv"]}, {"name": "b", "namespaces": ["cv"]}]))
    with pytest.raises(SpecError, match="not a Kubernetes name"):
        parse_spec(dict(teams=[{"name": "a", "local_queues": ["Bad Queue"]}]))
