"""The Kubernetes corpus (tests/formats/corpus/kube/): files written for these tests in the kinds, fields and forms
of Kueue's, Kubeflow's, KubeRay's and aws-samples' public examples (each names the upstream file it mirrors), fed
to ONE real ``fairpod up`` the way their users feed them: ``fairpod apply -f FILE`` (with ``--team``, or as a member
of one team, where the file's header says so) and ``fairpod import kueue FILE -o spec.yaml`` then ``fairpod apply -f
spec.yaml``. Each file's ``# expect:`` line is what it asks for (team, replicas, accelerators, priority, instance
type, retries, image, ...) or the words its one refusal must name. At least 80 % run (jobs to Succeeded, or
Running for a pod that runs until stopped; Kueue objects to an applied spec), the rest are refused in one answer,
and no answer holds a traceback.

Stand-ins, named: **images** — no registry is reachable here, so every image a file names is a local busybox
image with stand-in programs (``python``, ``python3``, ``torchrun``, ``bash``; ``/agnhost`` as the entrypoint of
the agnhost image) tagged under the name Kubernetes resolves the file's reference to (``kubeflow/x:latest`` ->
``docker.io/kubeflow/x:latest``); the stand-ins print that they are stand-ins and exit 0 (no PyTorch, no model
download). **Ray** — the ``rayproject/ray`` images are a Debian python3 image holding this environment's Ray
(tests/sandbox/images.py, ``ray``) with ``/home/ray/samples/sample_code.py``, a Ray program of these tests in
place of the file's ConfigMap or image code (an actor reading ``counter_name``, the cluster's nodes): a real Ray
cluster runs in the containers. **GPUs** — the cluster's GPU nodes are the spec's instance types on this machine's CPUs (the FAKE
NVML lists none; fairpod counts accelerator slots).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml

from fairpod.cli.main import main
from fairpod.formats.kube.image import qualify
from tests.sandbox import images
from tests.server.conftest import Server, running, wait_for

CORPUS = Path(__file__).parent / "kube"
JOBS = sorted((CORPUS / "jobs").glob("*.yaml"))
KUEUE = sorted((CORPUS / "kueue").glob("*.yaml"))
STANDIN = "localhost/fairpod-test/kube-standin:1"
AGNHOST = "localhost/fairpod-test/agnhost-standin:1"
MARK = "fairpod-corpus STAND-IN"
PROGRAM = f"""#!/bin/sh
echo "{MARK} for $0 (the file's image is not reachable here; no GPU, no PyTorch): $*"
echo "RANK=$RANK WORLD_SIZE=$WORLD_SIZE PET_NNODES=$PET_NNODES PET_NPROC_PER_NODE=$PET_NPROC_PER_NODE \\
JOB_COMPLETION_INDEX=$JOB_COMPLETION_INDEX"
"""
STUBS = {p: PROGRAM for p in ("/usr/bin/python3", "/usr/bin/python", "/usr/local/bin/python",
                              "/usr/local/bin/torchrun", "/usr/bin/nvidia-smi")}
STUBS["/bin/bash"] = '#!/bin/sh\nexec /bin/sh "$@"\n'
AGNHOST_PROGRAM = f'#!/bin/sh\ncase "$1" in pause) exec sleep 3600;; esac\necho "{MARK} for agnhost: $*"\n'
RAY_STANDIN = "localhost/fairpod-test/kuberay-standin:1"
RAY_SAMPLE = f"""import os
import ray

ray.init()


@ray.remote
class Counter:
    def __init__(self):
        self.name, self.n = os.getenv("counter_name"), 0

    def inc(self):
        self.n += 1

    def get(self):
        return f"{{self.name}} got {{self.n}}"


counter = Counter.remote()
for _ in range(3):
    ray.get(counter.inc.remote())
alive = sum(1 for n in ray.nodes() if n["Alive"])
print("{MARK} sample_code.py:", ray.get(counter.get.remote()), f"on {{alive}} Ray nodes", flush=True)
"""
RUNS_UNTIL_STOPPED = {"kueue-sleep"}  # agnhost pause: a pod that runs until it is deleted
# (the RayCluster and four RayJobs in images: tests/formats/corpus/test_kube_ray_images.py)
FSX = "/tmp/fairpod-corpus-fsx"  # j11's hostPath

# the cluster the files are submitted to: HyperPod's names for john, smith, team-a, team-b; Kueue's samples'
# namespace default and queues user-queue and main are team ml's, lq-a and lq-b team fs's
SPEC = """
cluster:
  name: corpus
  mounts: {allow: [/tmp/fairpod-corpus-fsx]}  # the admin's allow-list: j11's hostPath is inside it
  instance_groups:
  - {name: g5-8x, instance_type: ml.g5.8xlarge, count: 8}
  - {name: g5-12x, instance_type: ml.g5.12xlarge, count: 4}
  - {name: g5-24x, instance_type: ml.g5.24xlarge, count: 1}
policy:
  task_prioritization: TaskRanking
  priority_classes:
  - {name: inference, weight: 100}
  - {name: high, weight: 90}
  - {name: training, weight: 50}
  - {name: low, weight: 10}
teams:
- name: ml
  namespaces: [default, ml]
  local_queues: [user-queue, main]
  sharing: {strategy: LendAndBorrow, borrow_limit: 500}
  quota: [{instance_type: ml.g5.8xlarge, count: 2}, {instance_type: ml.g5.12xlarge, count: 1}]
- name: fs
  namespaces: [default-fs]
  local_queues: [lq-a, lq-b]
  sharing: {strategy: LendAndBorrow, borrow_limit: 500}
  quota: [{instance_type: ml.g5.8xlarge, count: 1}]
- name: john
  sharing: {strategy: LendAndBorrow, borrow_limit: 500}
  quota: [{instance_type: ml.g5.8xlarge, count: 1}, {instance_type: ml.g5.12xlarge, count: 1}]
- name: smith
  sharing: {strategy: LendAndBorrow, borrow_limit: 500}
  quota: [{instance_type: ml.g5.12xlarge, count: 2}, {instance_type: ml.g5.24xlarge, count: 1}]
- name: team-a
  sharing: {strategy: LendAndBorrow, borrow_limit: 500}
  quota: [{instance_type: ml.g5.8xlarge, count: 2}]
- name: team-b
  sharing: {strategy: LendAndBorrow, borrow_limit: 500}
  quota: [{instance_type: ml.g5.8xlarge, count: 2}]
"""


def fairpod(s: Server, *args: str, token: str | None = None) -> subprocess.CompletedProcess:
    """``fairpod ARGS`` against ``s``: the CLI's own entry point (``fairpod.cli.main.main``) in this process, so that
    45 commands do not pay 45 interpreter starts on a 2-core CI machine; it talks HTTP to the real server as the
    ``fairpod`` command does. An exception out of it (a traceback a user would see) fails the test."""
    env = {**s.env, **({"FAIRPOD_TOKEN": token} if token else {})}
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            rc = main(list(args))
        except SystemExit as e:  # argparse's errors
            rc = int(e.code or 0)
    return subprocess.CompletedProcess(["fairpod", *args], rc, out.getvalue(), err.getvalue())


def header(path: Path) -> tuple[str, str, dict[str, Any]]:
    """(the upstream file it mirrors, how it is fed, what it asks for) from the file's header comments."""
    lines = {ln.split(":", 1)[0][2:]: ln.split(":", 1)[1].strip() for ln in path.read_text().splitlines()
             if ln.startswith("# ") and ":" in ln}
    return lines["mirrors"], lines["how"], yaml.safe_load(lines["expect"])


def _agnhost(base: str) -> str:
    e = images.engine()
    if subprocess.run([e.path, "image", "exists", AGNHOST], capture_output=True).returncode:
        with tempfile.TemporaryDirectory(prefix="fairpod-image-") as tmp:
            (Path(tmp) / "agnhost").write_text(AGNHOST_PROGRAM)
            (Path(tmp) / "agnhost").chmod(0o755)
            (Path(tmp) / "Containerfile").write_text(f'FROM {base}\nCOPY agnhost /agnhost\nENTRYPOINT ["/agnhost"]\n')
            p = subprocess.run([e.path, "build", "-q", "-t", AGNHOST, tmp], capture_output=True, text=True,
                               timeout=300)
            if p.returncode:
                pytest.skip(f"cannot build the stand-in {AGNHOST}: {p.stderr.strip()[-300:]}")
    return AGNHOST


def stand_in_images() -> None:
    """Every image the job files name, resolved as Kubernetes resolves it, tagged onto a local stand-in."""
    base = images.busybox()
    standin = images.derived(STANDIN, base, STUBS)
    agnhost = _agnhost(base)
    ray = images.derived(RAY_STANDIN, images.ray(), {"/home/ray/samples/sample_code.py": RAY_SAMPLE})
    e = images.engine()
    for path in JOBS:
        for d in yaml.safe_load_all(path.read_text()):
            for c in _containers(d):
                ref = qualify(str(c["image"]))
                src = agnhost if "/agnhost:" in ref else ray if "/rayproject/ray:" in ref else standin
                subprocess.run([e.path, "tag", src, ref], check=True, capture_output=True, timeout=60)


def _containers(d: Any) -> Iterator[dict[str, Any]]:
    if isinstance(d, dict):
        for k, v in d.items():
            if k == "containers" and isinstance(v, list):
                yield from (c for c in v if isinstance(c, dict) and c.get("image"))
            else:
                yield from _containers(v)
    elif isinstance(d, list):
        for x in d:
            yield from _containers(x)


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Any]]]:
    """ONE server; every job file applied (all submitted first), then waited for together."""
    stand_in_images()
    made = not Path(FSX).exists()
    tmp = tmp_path_factory.mktemp("corpus")
    gen = running(tmp, SPEC)
    s = next(gen)
    try:
        mo = s.cli("user", "create", "mo", "--team", "ml").stdout.split("token (shown once): ")[1].strip()
        answers: dict[str, Any] = {}
        for path in JOBS:
            _, how, _ = header(path)
            args = ["apply", "-f", str(path), "-o", "json"]
            if "--team" in how:
                args += ["--team", how.split("--team", 1)[1].split()[0]]
            answers[path.name] = fairpod(s, *args, token=mo if "the member mo" in how else None)
        yield s, answers
    finally:
        try:
            next(gen)
        except StopIteration:
            pass
        if made:
            shutil.rmtree(FSX, ignore_errors=True)


def _submitted(r: subprocess.CompletedProcess) -> list[dict[str, Any]]:
    out = json.loads(r.stdout)
    return out if isinstance(out, list) else [out]


def _replica_log(rdir: Path) -> str:
    log = rdir / "output.log"
    return log.read_text() if log.exists() else ""


def _check(job: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """What of ``expect`` the job (its detail view) does not have."""
    view = {**job, "accelerators": job.get("accelerators_per_node"), "vcpu": job.get("vcpu_per_node"),
            "memory_gib": job.get("memory_gib_per_node")}
    bad = []
    for k, want in expect.items():
        if k == "log":  # replica 0's output holds it (checked by the caller)
            continue
        got = view.get(k)
        if k == "instance_type" and "," in str(want):  # several in order of preference: the first that fits
            ok = got in (want, *str(want).split(","))
        else:
            ok = got == want
        if not ok:
            bad.append(f"{k}: want {want!r}, got {got!r}")
    return bad


# the module's fixture builds its images in this first test's setup (minutes on a loaded machine the first time),
# and the wait below is bounded by the jobs' progress (900 s at most): its own message, not pytest-timeout's, says
# which jobs did not settle
@pytest.mark.timeout(1200)
def test_the_job_files_run_as_written_or_are_refused_in_one_answer(fed: tuple[Server, dict[str, Any]]):
    s, answers = fed
    problems: list[str] = []
    jobs: dict[str, tuple[str, dict[str, Any]]] = {}  # job name -> (file, expect)
    refused = 0
    for path in JOBS:
        mirrors, _, expect = header(path)
        assert mirrors and " " in mirrors, f"{path.name}: its header names no upstream repo and path"
        r = answers[path.name]
        assert "Traceback" not in r.stderr + r.stdout, (path.name, r.stderr)
        if "refused" in expect:
            refused += 1
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            if r.returncode == 0 or r.stdout.strip():
                problems.append(f"{path.name}: not refused ({r.returncode}): {r.stdout[:300]}")
            missing = [w for w in expect["refused"] if w not in r.stderr]
            if missing or not all(ln.startswith("fairpod: error:") or ln.startswith(str(path)) for ln in lines):
                problems.append(f"{path.name}: the refusal does not name {missing}: {r.stderr}")
            continue
        if r.returncode != 0:
            problems.append(f"{path.name}: refused: {r.stderr.strip()}")
            continue
        for j in _submitted(r):
            jobs[j["name"]] = (path.name, expect)
    assert not problems, "\n".join(problems)

    def unsettled() -> dict[str, str]:
        states = {n: s.job(n)["state"] for n in jobs}
        return {n: st for n, st in states.items()
                if st not in ("Succeeded", "Failed", "Cancelled") and not (st == "Running" and n in RUNS_UNTIL_STOPPED)}

    try:
        wait_for(lambda: not unsettled(), 120, "every job of the corpus to finish", progress=s.activity)
    except AssertionError as e:
        left = unsettled()
        logs = {k: v for n in left for k, v in s.replica_logs(n).items()}
        raise AssertionError(f"not settled: {left}; their logs:\n"
                             + "\n".join(f"--- {k} ---\n{v}" for k, v in logs.items()) + f"\n\n{e}") from None
    for name, (fname, expect) in jobs.items():
        job = s.api("GET", f"/jobs/{s.job(name)['id']}").json()
        want_state = "Running" if name in RUNS_UNTIL_STOPPED else "Succeeded"
        if job["state"] != want_state:
            problems.append(f"{fname}: job {name} is {job['state']}: {job['reason']}; "
                            + "; ".join(f"{k}: {v!r}" for k, v in s.replica_logs(name, 500).items()))
        problems += [f"{fname}: {b}" for b in _check(job, {k: v for k, v in expect.items()})]
        if job["state"] == "Succeeded":  # replica 0 of the attempt that succeeded (a preempted job ran again)
            jdir = s.home / "runs" / f"{name}-{job['id']}"
            attempts = [int(a.name) for a in jdir.glob("*") if a.name.isdigit() and (a / "0").is_dir()]
            last = jdir / str(max(attempts, default=0))
            text = _replica_log(last / "0")
            if expect.get("max_nodes") and MARK not in text:  # elastic: done when ONE replica is (torchrun's
                # agents exit 0 once the group's training is done), and the others are stopped then -- on a
                # loaded machine rank 0's container may not have started its program yet; the one that ended
                # the job ran it
                text = next((t for r in sorted(last.glob("[0-9]*")) if MARK in (t := _replica_log(r))), text)
            if MARK not in text and "index 0" not in text and fname != "b02-quick-start-job.yaml":
                problems.append(f"{fname}: replica 0's log shows no run of its image's program: {text[-400:]!r}")
            if expect.get("log") and expect["log"] not in text:
                problems.append(f"{fname}: replica 0's log has no {expect['log']!r}: {text[-600:]!r}")
    ran = len({f for f, _ in jobs.values()})
    assert ran + refused == len(JOBS)
    assert not problems, "\n".join(problems)


def test_the_kueue_files_import_and_apply_or_are_refused_in_one_answer(fed: tuple[Server, dict[str, Any]],
                                                                       tmp_path: Path):
    s, answers = fed  # after the job files: each imported spec replaces the cluster's
    for name in RUNS_UNTIL_STOPPED:  # kubectl delete pod: a spec with other teams needs none running
        assert s.api("POST", f"/jobs/{s.job(name)['id']}/cancel").status_code == 200
        s.wait_state(name, "Cancelled")
    problems: list[str] = []
    imported = refused = 0
    for path in KUEUE:
        mirrors, how, expect = header(path)
        assert mirrors and " " in mirrors, f"{path.name}: its header names no upstream repo and path"
        out = tmp_path / f"{path.stem}.spec.yaml"
        r = fairpod(s, "import", "kueue", str(path), *how.removeprefix("import kueue").split(), "-o", str(out))
        assert "Traceback" not in r.stderr, (path.name, r.stderr)
        if "refused" in expect:
            refused += 1
            errors = [ln for ln in r.stderr.splitlines() if ln.startswith("fairpod: error:")]
            missing = [w for w in expect["refused"] if w not in r.stderr]
            if r.returncode == 0 or len(errors) != 1 or missing:
                problems.append(f"{path.name}: want one refusal naming {missing or expect['refused']}: {r.stderr}")
            continue
        if r.returncode != 0:
            problems.append(f"{path.name}: import refused: {r.stderr.strip()}")
            continue
        spec = yaml.safe_load(out.read_text())
        teams = {t["name"]: t for t in spec.get("teams") or []}
        for team, want in (expect.get("teams") or {}).items():
            got = teams.get(team)
            if got is None:
                problems.append(f"{path.name}: no team {team} (teams: {sorted(teams)})")
                continue
            for key in ("namespaces", "local_queues"):
                if key in want and got.get(key, []) != want[key]:
                    problems.append(f"{path.name}: team {team} {key} {got.get(key)} != {want[key]}")
            quota = {q["instance_type"]: q for q in got.get("quota") or []}
            for it, q in (want.get("quota") or {}).items():
                if {k: quota.get(it, {}).get(k) for k in q} != q:
                    problems.append(f"{path.name}: team {team} quota of {it} {quota.get(it)} != {q}")
        groups = {g["instance_type"]: g["count"] for g in spec.get("cluster", {}).get("instance_groups") or []}
        for it, n in (expect.get("groups") or {}).items():
            if groups.get(it) != n:
                problems.append(f"{path.name}: {groups.get(it)} x {it}, want {n}")
        classes = {c["name"]: c["weight"] for c in spec.get("policy", {}).get("priority_classes") or []}
        if expect.get("priority_classes") and classes != expect["priority_classes"]:
            problems.append(f"{path.name}: priority classes {classes} != {expect['priority_classes']}")
        a = fairpod(s, "apply", "-f", str(out))  # as its users do next: the spec runs the cluster
        if a.returncode != 0 or "Traceback" in a.stderr:
            problems.append(f"{path.name}: its spec is not applied: {a.stderr.strip()}")
            continue
        imported += 1
    assert not problems, "\n".join(problems)
    ran = len([p for p in JOBS if "refused" not in header(p)[2]]) + imported
    total = len(JOBS) + len(KUEUE)
    assert total >= 40 and ran >= 0.8 * total, (ran, total)
    print(f"kube corpus: {ran} of {total} files run ({100 * ran / total:.0f} %), the rest refused in one answer")
