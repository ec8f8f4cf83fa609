"""KubeRay RayService manifests read into fairpod services: the inputs of tests/formats/kube/rayservice/, written for
these tests in the kinds, fields and forms of KubeRay's RayService samples (each names the upstream file it
mirrors; the samples' code is a GitHub zip archive, which fairpod refuses as a URL, so all but one name a local
directory in its place: the stand-in, named in each header). Each file's ``# expect:`` line is what it asks for
(replicas, image, resources, the Serve applications, a warning or a note) or the words its one answer of
refusals must name. The live run (a Ray cluster, Serve, a request through the service's address) is
tests/server/services/test_rayservice_live.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from fairpod.formats.kube import rayservice
from fairpod.formats.kube.manifest import ManifestError
from fairpod.formats.kube.teams import Teams
from fairpod.model.jobs import JobSpec
from fairpod.server.core.transitions import serving

INPUTS = sorted((Path(__file__).parent / "rayservice").glob("*.yaml"))
TEAMS = Teams(flag="smith", check=False)


def _header(path: Path) -> dict[str, Any]:
    lines = {ln.split(":", 1)[0][2:]: ln.split(":", 1)[1].strip() for ln in path.read_text().splitlines()
             if ln.startswith("# ") and ":" in ln}
    assert lines["mirrors"].startswith("ray-project/kuberay ray-operator/config/samples/ray-service."), path.name
    return {"dirs": yaml.safe_load(lines.get("dirs", "[]")), "expect": yaml.safe_load(lines["expect"])}


def _applied(path: Path, tmp: Path, on_host: bool = False) -> Any:
    h = _header(path)
    for d in h["dirs"]:
        (tmp / d).mkdir(exist_ok=True)
    shutil.copy(path, tmp / path.name)
    docs = list(yaml.safe_load_all((tmp / path.name).read_text()))
    return h["expect"], lambda: rayservice.convert_all(docs, cwd=str(tmp), teams=TEAMS, on_host=on_host)


@pytest.mark.parametrize("path", INPUTS, ids=[p.stem for p in INPUTS])
def test_each_sample_is_a_ray_serve_service_or_refused_in_one_answer(path: Path, tmp_path: Path) -> None:
    expect, convert = _applied(path, tmp_path)
    if "refused" in expect:
        with pytest.raises(ManifestError) as e:
            convert()
        text = str(e.value)
        assert all(ln.startswith("RayService ") for ln in text.splitlines()), text
        assert [w for w in expect["refused"] if w not in text] == [], text
        return
    (c,) = convert()
    b = c.body
    assert c.kind == ("RayService", "rayservice.ray.io") and b["team"] == "smith"
    assert (b["ray"], b["command"], b["service"]) == (True, [], {"readiness_command": rayservice.READY})
    spec = JobSpec.model_validate(b)
    assert spec.kind == "service" and spec.ray
    serving.check(_Resizing(), spec)  # the control plane takes a Ray service with a readiness command
    for k in ("nodes", "max_nodes", "image", "vcpu", "memory_gib"):
        if k in expect:
            assert b.get(k) == expect[k], (k, b.get(k))
    cfg = json.loads(b["env"][rayservice.SERVE])
    assert [a["name"] for a in cfg["applications"]] == expect["apps"]
    for a in cfg["applications"]:  # a local working_dir made absolute, inside the service's working directory
        wd = a.get("runtime_env", {}).get("working_dir")
        assert wd is None or (Path(wd).is_absolute() and wd.startswith(b["workdir"]))
    assert "host" not in cfg["http_options"] and "port" not in cfg["http_options"]  # fairpod's: the head's PORT
    if "warning" in expect:
        assert len([w for w in c.warnings if "not used: fairpod runs one Ray cluster" in w]) == 1, c.warnings
        assert any(expect["warning"] in w for w in c.warnings), c.warnings
    if "note" in expect:
        assert any(expect["note"] in n for n in c.notes), c.notes
    if expect.get("start_params"):  # the head's num-cpus: "0" goes to its ray start
        assert json.loads(b["env"]["FAIRPOD_RAY_START_PARAMS"])["head"] == {"num-cpus": "0"}


class _Resizing:
    """An executor that can restart one replica and run a readiness command (as the local executor)."""

    name = "local"

    def add_replicas(self, *a: Any) -> None: ...
    def stop_replicas(self, *a: Any) -> None: ...
    def replica_ranks(self, *a: Any) -> set[int]:
        return set()

    def probed_ready(self, *a: Any) -> set[int]:
        return set()


def test_a_ray_service_may_have_a_readiness_command_but_no_readiness_path() -> None:
    spec = JobSpec.model_validate({"name": "s", "team": "smith", "nodes": 1, "command": [], "ray": True,
                                   "service": {"readiness_path": "/healthz"}})
    with pytest.raises(Exception, match="give no readiness_path"):
        serving.check(_Resizing(), spec)


def test_the_serve_config_keeps_what_serve_needs_and_the_service_runs_in_the_directory_of_its_code(
        tmp_path: Path) -> None:
    path = next(p for p in INPUTS if p.name.startswith("s01-"))
    _, convert = _applied(path, tmp_path, on_host=True)
    (c,) = convert()
    b = c.body
    assert "image" not in b and b["workdir"] == str(tmp_path / "test_dag")  # the Ray on the nodes, in its code
    cfg = json.loads(b["env"][rayservice.SERVE])
    fruit = cfg["applications"][0]
    assert fruit["route_prefix"] == "/fruit" and fruit["import_path"] == "fruit.deployment_graph"
    assert fruit["deployments"][0] == {"name": "MangoStand", "num_replicas": 2, "max_replicas_per_node": 1,
                                       "user_config": {"price": 3}, "ray_actor_options": {"num_cpus": 0.1}}


def test_a_missing_or_broken_serve_config_and_cluster_are_refused_by_name(tmp_path: Path) -> None:
    for text, words in (("", "spec.serveConfigV2: the Serve applications to deploy are missing"),
                        ("applications: [", "spec.serveConfigV2: not YAML"),
                        ("- a", "a mapping with applications"),
                        ("applications: []", "a list of one or more applications"),
                        ("applications: [{name: a, import_path: m:a}, {name: a, import_path: m:b}]",
                         "are not each different")):
        doc = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "x"},
               "spec": {"serveConfigV2": text}}
        with pytest.raises(ManifestError) as e:
            rayservice.convert(doc, cwd=str(tmp_path), teams=TEAMS)
        assert words in str(e.value) and "spec.rayClusterConfig: the Ray cluster to serve on is missing" in str(e.value)
