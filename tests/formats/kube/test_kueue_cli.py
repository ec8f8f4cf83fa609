"""'fairpod export kueue' and 'fairpod import kueue' as a user runs them: files, stderr, exit codes; HyperPod's
own objects; bad input as one line; the export of a running server's spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from fairpod.model.spec import load_spec

from .conftest import Server

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "examples" / "seed" / "spec.yaml"
HYPERPOD = Path(__file__).parent / "hyperpod"


def fairpod(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fairpod.cli.main", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fairpod: error: "), r.stderr
    return lines[0]


def test_export_writes_files_for_kubectl_apply_and_says_what_kueue_cannot(tmp_path: Path):
    out = tmp_path / "kueue"
    r = fairpod("export", "kueue", str(SEED), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"wrote 6 files to {out}: 2 Namespace, 1 ResourceFlavor, 1 Cohort, 2 ClusterQueue, "
                               "2 LocalQueue, 2 WorkloadPriorityClass")
    assert sorted(p.name for p in out.iterdir()) == [
        "00-namespaces.yaml", "10-resourceflavors.yaml", "20-cohort.yaml", "30-clusterqueues.yaml",
        "40-localqueues.yaml", "50-workloadpriorityclasses.yaml"]
    notes = [line for line in r.stderr.splitlines() if line.startswith("fairpod: Kueue cannot express: ")]
    assert any("checkpoint" in n for n in notes) and any("min_runtime_seconds" in n for n in notes)
    assert any("starvation guard" in n and "600 s" in n for n in notes)
    cq = (out / "30-clusterqueues.yaml").read_text()
    assert "# - victim order: " in cq and "# - min runtime: " in cq  # the same rules, as comments
    kinds = [d["kind"] for f in sorted(out.iterdir()) for d in yaml.safe_load_all(f.read_text())]
    assert kinds == ["Namespace", "Namespace", "ResourceFlavor", "Cohort", "ClusterQueue", "ClusterQueue",
                     "LocalQueue", "LocalQueue", "WorkloadPriorityClass", "WorkloadPriorityClass"]

    # and back: the same spec, on stdout or into a file that 'fairpod apply -f' takes
    r = fairpod("import", "kueue", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # nothing had to be guessed
    (tmp_path / "back.yaml").write_text(r.stdout)
    assert load_spec(tmp_path / "back.yaml") == load_spec(SEED)
    r = fairpod("import", "kueue", str(out), "-o", str(tmp_path / "spec.yaml"))
    assert r.returncode == 0 and "wrote the spec of cluster demo (2 teams)" in r.stderr
    assert load_spec(tmp_path / "spec.yaml") == load_spec(SEED)


def test_a_new_export_removes_files_it_no_longer_writes(tmp_path: Path):
    out = tmp_path / "kueue"
    assert fairpod("export", "kueue", str(SEED), "-o", str(out)).returncode == 0
    data = yaml.safe_load(SEED.read_text())
    data["policy"]["priority_classes"] = []
    (tmp_path / "no-classes.yaml").write_text(yaml.safe_dump(data))
    (out / "notes.yaml").write_text("a: user file\n")
    assert fairpod("export", "kueue", str(tmp_path / "no-classes.yaml"), "-o", str(out)).returncode == 0
    assert not (out / "50-workloadpriorityclasses.yaml").exists()
    assert (out / "notes.yaml").exists()  # not fairpod's: left alone


def test_import_reads_hyperpods_own_objects():
    r = fairpod("import", "kueue", str(HYPERPOD))
    assert r.returncode == 0, r.stderr
    spec = yaml.safe_load(r.stdout)
    assert spec["cluster"] == {"name": "shared-pool", "instance_groups": [
        {"name": "ml-p5-48xlarge", "instance_type": "ml.p5.48xlarge", "count": 3}]}
    assert spec["policy"] == {"task_prioritization": "TaskRanking", "priority_classes": [
        {"name": "inference", "weight": 100}, {"name": "training", "weight": 75}]}
    teams = {t["name"]: t for t in spec["teams"]}
    assert teams["researchers"] == {"name": "researchers", "fair_share_weight": 40,
                                    "quota": [{"instance_type": "ml.p5.48xlarge", "count": 2}]}  # 50 %: the default
    assert teams["engineers"] == {"name": "engineers", "fair_share_weight": 10, "preempt_team_tasks": "Never",
                                  "sharing": {"strategy": "Lend"},
                                  "quota": [{"instance_type": "ml.p5.48xlarge", "count": 1}]}
    notes = r.stderr.splitlines()
    assert "fairpod: note: no fairpod.dev/ annotations (objects not written by fairpod): read from the Kueue " \
           "fields" in notes
    assert any("vpc.amazonaws.com/efa not known to fairpod" in n for n in notes)
    assert any("3 x ml.p5.48xlarge, sized from the quotas" in n for n in notes)


def test_bad_input_is_one_clear_line(tmp_path: Path):
    assert "no such file or directory" in one_error_line(fairpod("import", "kueue", str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    assert "no .yaml, .yml or .json file" in one_error_line(fairpod("import", "kueue", str(tmp_path / "empty")))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    assert "not valid YAML" in one_error_line(fairpod("import", "kueue", str(bad)))
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: q, namespace: n}\n")
    assert "no kueue.x-k8s.io ClusterQueue, Cohort or WorkloadPriorityClass found" in one_error_line(
        fairpod("import", "kueue", str(bad)))
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {name: prov}\n---\n"
                   "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: gpu-queue}\n"
                   "spec: {cohortName: c, admissionChecks: [prov]}\n")
    line = one_error_line(fairpod("import", "kueue", str(bad)))
    assert "no fairpod meaning: AdmissionCheck prov, ClusterQueue gpu-queue.spec.admissionChecks: admission checks" \
        in line
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: hyperpod-ns-a-clusterqueue}"
                   "\nspec: {cohortName: c, resourceGroups: [{coveredResources: [cpu], flavors: [{name: spot, "
                   "resources: [{name: cpu, nominalQuota: 4}]}]}]}\n")
    assert "no ResourceFlavor spot defines its instance type" in one_error_line(fairpod("import", "kueue", str(bad)))
    assert "--flavor spot=ml.nope: ml.nope is not an instance type" in one_error_line(
        fairpod("import", "kueue", str(bad), "--flavor", "spot=ml.nope"))
    assert "--flavor 'spot': give NAME=TYPE" in one_error_line(fairpod("import", "kueue", str(bad), "--flavor", "spot"))
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: x-priority}\n"
                   "value: 1e3\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\n"
                   "metadata: {name: hyperpod-ns-a-clusterqueue}\n")
    assert "value '1e3' is not a whole number" in one_error_line(fairpod("import", "kueue", str(bad)))
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: hyperpod-ns-a-clusterqueue}"
                   "\nspec: {cohortName: c1}\n---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\n"
                   "metadata: {name: hyperpod-ns-b-clusterqueue}\nspec: {cohort: c2}\n")
    assert "several cohorts (c1, c2)" in one_error_line(fairpod("import", "kueue", str(bad)))
    bad.write_text("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: big}\n"
                   "spec: {nodeLabels: {node.kubernetes.io/instance-type: ml.g7.huge}}\n---\n"
                   "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: c}\n")
    assert "instance type ml.g7.huge is not in fairpod's catalog" in one_error_line(
        fairpod("import", "kueue", str(bad)))
    assert "cannot read" in one_error_line(fairpod("export", "kueue", str(tmp_path / "x.yaml"), "-o",
                                                   str(tmp_path / "o")))
    spec = tmp_path / "spec.yaml"
    spec.write_text("teams: [{name: Bad_Name}]\n")
    assert "teams[0].name" in one_error_line(fairpod("export", "kueue", str(spec), "-o", str(tmp_path / "o")))
    (tmp_path / "file").write_text("")
    assert "is not a directory" in one_error_line(fairpod("export", "kueue", str(SEED), "-o", str(tmp_path / "file")))


def test_export_without_a_spec_exports_the_running_servers(server: Server, tmp_path: Path):
    out = tmp_path / "kueue"
    r = server.cli("export", "kueue", "-o", str(out))
    assert "2 ClusterQueue" in r.stdout
    r = server.cli("import", "kueue", str(out), "-o", str(tmp_path / "spec.yaml"))
    assert load_spec(tmp_path / "spec.yaml") == load_spec(SEED)
    # a change through the API shows in the next export
    smith = next(t for t in server.api("GET", "/teams").json()["teams"] if t["name"] == "smith")
    assert server.api("PUT", "/teams/smith", json={**smith, "fair_share_weight": 7}).status_code == 200
    server.cli("export", "kueue", "-o", str(out))
    smith = next(d for d in yaml.safe_load_all((out / "30-clusterqueues.yaml").read_text())
                 if d["metadata"]["name"] == "hyperpod-ns-smith-clusterqueue")
    assert smith["spec"]["fairSharing"] == {"weight": 7}


def test_a_flavor_without_node_labels_is_the_instance_type_of_its_name(tmp_path: Path):
    """HyperPod's CLI tests create a ResourceFlavor named after the instance type and nothing else."""
    f = tmp_path / "cq.yaml"
    f.write_text("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: ml.c5.2xlarge}\n---\n"
                 "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: hyperpod-ns-t-clusterqueue}\n"
                 "spec:\n  resourceGroups:\n  - coveredResources: [cpu, memory]\n    flavors:\n"
                 "    - name: ml.c5.2xlarge\n      resources:\n      - {name: cpu, nominalQuota: 2}\n"
                 "      - {name: memory, nominalQuota: 2Gi}\n")
    r = fairpod("import", "kueue", str(f))
    assert r.returncode == 0, r.stderr
    spec = yaml.safe_load(r.stdout)
    assert spec["teams"] == [{"name": "t", "fair_share_weight": 1, "preempt_team_tasks": "Never",  # Kueue's defaults
                              "sharing": {"strategy": "DontLend"},
                              "quota": [{"instance_type": "ml.c5.2xlarge", "vcpu": 2.0, "memory_gib": 2.0}]}]
    assert "no node.kubernetes.io/instance-type node label; read as the instance type of its name" in r.stderr
    assert "in no cohort, so it neither lends nor borrows (DontLend)" in r.stderr


def test_the_walk_through_in_docs_shows_what_the_export_writes(tmp_path: Path):
    doc = (ROOT / "docs" / "kubernetes.md").read_text()
    out = tmp_path / "kueue"
    r = fairpod("export", "kueue", str(SEED), "-o", str(out))
    assert r.returncode == 0
    shown = [line for line in doc.splitlines() if line.startswith("fairpod: Kueue cannot express: ")]
    assert shown == [line for line in r.stderr.splitlines() if line.startswith("fairpod: Kueue cannot express: ")]
    assert r.stdout.replace(str(out), "kueue/").strip() in doc
    block = doc.split("john's\nClusterQueue")[1].split("```yaml\n")[1].split("```")[0]
    john = next(d for d in yaml.safe_load_all((out / "30-clusterqueues.yaml").read_text())
                if d["metadata"]["name"] == "hyperpod-ns-john-clusterqueue")
    del john["metadata"]["labels"], john["metadata"]["annotations"]
    assert yaml.safe_load(block) == john
