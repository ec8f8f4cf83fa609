"""The Slurm and HyperPod CLI corpus, run as their users run it: each input under slurm/ and hyperpod/ (written
here in the forms of the public files it names in its ``# corpus:`` line) is fed to one shared, real ``fairpod up``
through the commands fairpod installs (``sbatch``, ``srun``, ``sacct``, ``squeue``, ``sinfo``, ``hyp``,
``hyperpod``: the same console scripts pip writes), all at once, as a member of one team; then what each asks for
is checked (``# expect:``): team, replicas, accelerators, priority, instance type, retries, image, its state, its
output. At least 80 % run; the rest are refused in one answer that names what has no meaning here; no traceback.

Stand-ins, and only these: the cluster's GPUs (the ml.p4d.24xlarge nodes have no GPU here: the server reads an
empty FAKE NVML), and the registries the inputs name, which cannot be reached from the tests: their images are
built on this machine (tests/sandbox/images.py) and tagged under the names the inputs use, with a small Python
script in place of the training code.

An input's header: ``# run: COMMAND`` (``{file}`` is the input; default ``sbatch {file}``; a ``.cmd`` input is
itself the shell session), ``# job: NAME`` (the fairpod job it makes; ``array NAME`` for a job array) and
``# expect: KEY=VALUE …`` (fields of the job; ``state``, ``exit``, ``tasks``; ``out~TEXT``/``err~TEXT`` in the
command's output, ``log~TEXT`` in replica 0's log, ``file=PATH~TEXT`` in a file it writes, ``refused~TEXT`` in a
refusal)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ...sandbox import images
from ...server.conftest import Server, running, wait_for

HERE = Path(__file__).resolve().parent
ECR = "123456789012.dkr.ecr.us-west-2.amazonaws.com/hyperpod-cli-train:1.0"  # the HyperPod config files' container
INPUTS = sorted(p for d in ("slurm", "hyperpod") for p in (HERE / d).iterdir() if p.suffix in (".sbatch", ".cmd",
                                                                                                 ".yaml"))
SPEC = """\
cluster:
  name: corpus
  topology_levels: [zone]
  instance_groups:
    - {name: p4d, instance_type: ml.p4d.24xlarge, count: 8, topology: {zone: us-west-2a}}
policy:
  priority_classes:
    - {name: high, weight: 90}
    - {name: fine-tuning, weight: 60}
    - {name: training, weight: 50}
    - {name: low, weight: 10}
teams:
  - name: ml-engineers
    quota: [{instance_type: ml.p4d.24xlarge, count: 6}]
  - name: researchers
    quota: [{instance_type: ml.p4d.24xlarge, count: 2}]
"""
COMMANDS = {"sbatch": "fairpod.cli.slurm_entry:main", "srun": "fairpod.cli.slurm_entry:main",
            "squeue": "fairpod.cli.slurm_entry:main", "sinfo": "fairpod.cli.slurm_entry:main",
            "scancel": "fairpod.cli.slurm_entry:main", "sacct": "fairpod.cli.slurm_entry:main",
            "hyp": "fairpod.cli.hyperpod:hyp_main", "hyperpod": "fairpod.cli.hyperpod:main"}
TRAIN = """\
import os, sys
keys = ("RANK", "WORLD_SIZE", "NCCL_DEBUG", "PET_NPROC_PER_NODE", "PYTORCH_CUDA_ALLOC_CONF")
print("train rank", " ".join(f"{k}={os.environ.get(k)}" for k in keys), "args", " ".join(sys.argv[1:]), flush=True)
"""
KEYS = "|".join(("team", "nodes", "accelerators", "priority", "instance_type", "max_retry", "auto_resume", "image",
                 "state", "exit", "tasks", "labels", "max_nodes", "out", "err", "log", "file", "refused"))
PY_SHIM = '#!/bin/sh\nexec python3 "$@"\n'
ENTRY_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train-with-entrypoint:1.0"  # a training image whose
ENTRY = 'import sys\nprint("the image ENTRYPOINT ran with", " ".join(sys.argv[1:]), flush=True)\n'  # own ENTRYPOINT
GREP = '#!/bin/sh\nexec /bin/busybox grep "$@"\n'


def stand_in_images() -> None:
    """The inputs' images, tagged locally (their registries are not reached from the tests)."""
    py = images.python()
    images.derived(ECR, py,
                   {"/usr/local/bin/python": PY_SHIM, "/workspace/train.py": TRAIN})
    images.derived("docker.io/pytorch/pytorch:latest", py, {"/usr/local/bin/python": PY_SHIM, "/train.py": TRAIN})
    images.derived("nvcr.io/nvidia/pytorch:21.12-py3", py, {"/usr/local/bin/python": PY_SHIM})
    images.derived(ENTRY_IMAGE, py, {"/usr/local/bin/python": PY_SHIM, "/workspace/train.py": TRAIN,
                                     "/workspace/entry.py": ENTRY}, entrypoint=["python3", "/workspace/entry.py"])
    images.derived("docker.io/library/almalinux:9", images.busybox(),
                   {"/etc/os-release": 'NAME="AlmaLinux"\nPRETTY_NAME="AlmaLinux 9 (a stand-in)"\n',
                    "/bin/grep": GREP})


@dataclass
class Input:
    path: Path
    mirrors: str = ""
    run: str | None = None
    job: str | None = None
    array: bool = False
    expects: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return any(e.startswith("refused~") for e in self.expects)


def parse(path: Path) -> Input:
    inp = Input(path)
    for line in path.read_text().splitlines():
        m = re.match(r"# (corpus|run|job|expect): (.*)", line)
        if not m:
            continue
        key, value = m.group(1), m.group(2).strip()
        if key == "corpus":
            inp.mirrors = value
        elif key == "run":
            inp.run = value
        elif key == "job":
            inp.array = value.startswith("array ")
            inp.job = value.removeprefix("array ")
        else:  # KEY=VALUE or KEY~TEXT items; TEXT runs to the next ' KEY~' / ' KEY=' or the line's end
            inp.expects += [x.strip() for x in re.split(rf" (?=(?:{KEYS})[=~])", value) if x.strip()]
    return inp


@dataclass
class Ran:
    inp: Input
    cwd: Path
    proc: subprocess.Popen
    out: str = ""
    err: str = ""
    rc: int | None = None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Ran]]]:
    stand_in_images()
    tmp = tmp_path_factory.mktemp("corpus")
    gen = running(tmp, SPEC)
    server = next(gen)
    try:
        for i in range(8):  # the nodes pass their deep health check (hyp's --deep-health-check-passed-nodes-only)
            server.cli("node", "check", f"p4d-{i}")
        wait_for(lambda: all(n["deep_health_check"] == "Passed" for n in server.api("GET", "/nodes").json()["nodes"]),
                 60, "the nodes' deep health checks")
        r = server.api("POST", "/users", json={"name": "alice", "role": "member", "teams": ["ml-engineers"]})
        assert r.status_code == 201, r.text
        bindir = tmp / "bin"
        bindir.mkdir()
        for name, target in COMMANDS.items():  # what pip writes for [project.scripts]
            module, _, func = target.partition(":")
            (bindir / name).write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                                       f"sys.exit({func}())\n")
            (bindir / name).chmod(0o755)
        env = {**server.env, "FAIRPOD_TOKEN": r.json()["token"], "FAIRPOD_URL": server.url,
               "PATH": f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
        runs: dict[str, Ran] = {}
        for path in INPUTS:  # everything submitted at once, then waited for
            inp = parse(path)
            cwd = tmp / "work" / path.stem
            (cwd / "data").mkdir(parents=True)
            cwd.chmod(0o777)  # the team's user runs the jobs: it writes their output files here, as its own dir
            shutil.copy(HERE / "slurm" / "train.py", cwd / "train.py")
            (cwd / path.name).write_text(path.read_text().replace("{workdir}", str(cwd)))
            line = ["bash", path.name] if path.suffix == ".cmd" else \
                ["bash", "-c", (inp.run or "sbatch {file}").replace("{file}", path.name)]
            runs[path.name] = Ran(inp, cwd, subprocess.Popen(line, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                             text=True))
        for ran in runs.values():
            ran.out, ran.err = ran.proc.communicate(timeout=300)
            ran.rc = ran.proc.returncode
        yield server, runs
    finally:
        gen.close()


def _job(server: Server, inp: Input) -> dict[str, Any] | list[dict[str, Any]] | None:
    if inp.array:
        jobs = server.api("GET", "/jobs?limit=1000").json()["jobs"]
        tasks = [j for j in jobs if j.get("array") and j["name"].startswith(inp.job + "-")]
        return tasks or None
    r = server.api("GET", f"/jobs/{inp.job}")
    return r.json() if r.status_code == 200 else None


def _settled(server: Server, inp: Input) -> bool:
    """The job is in the state its input expects, or in one it cannot leave."""
    want = next((e[6:] for e in inp.expects if e.startswith("state=")), "Succeeded")
    job = _job(server, inp)
    tasks = job if isinstance(job, list) else [job] if job else []
    return bool(tasks) and all(t["state"] in (want, "Succeeded", "Failed", "Cancelled") for t in tasks)


def check(server: Server, ran: Ran) -> list[str]:
    """What of the input's expectations did not hold."""
    inp = ran.inp
    bad: list[str] = []
    said = f"rc {ran.rc}\nstdout: {ran.out[-1500:]}\nstderr: {ran.err[-1500:]}"
    if "Traceback" in ran.out + ran.err:
        bad.append(f"a traceback: {said}")
    if inp.refused:
        if ran.rc == 0:
            bad.append(f"not refused: {said}")
        lines = [ln for ln in ran.err.splitlines() if ln.strip()]
        if not lines or not lines[0].startswith(("fairpod: error:", "sbatch: error", "hyperpod: error:")):
            bad.append(f"the refusal is not one answer: {said}")
        for e in inp.expects:
            if e.startswith("refused~") and e[8:] not in ran.err:
                bad.append(f"refusal lacks {e[8:]!r}: {said}")
        if server.api("GET", "/jobs?limit=1000").json()["jobs"] and inp.job and _job(server, inp):
            bad.append("a refused input left a job")
        return bad
    expects = dict(e.split("=", 1) for e in inp.expects if "=" in e.split("~", 1)[0])
    state = expects.pop("state", "Succeeded")
    job: Any = None
    if inp.job:
        job = _job(server, inp)
        states = [t["state"] for t in (job if isinstance(job, list) else [job] if job else [])]
        if not states or any(s != state for s in states):
            return [f"job {inp.job}: {states or 'none'}, not {state}: {said}; job: {job}"]
    tasks = job if isinstance(job, list) else [job] if job else []
    for key, want in expects.items():
        if key == "exit":
            if str(ran.rc) != want:
                bad.append(f"exit {ran.rc}, not {want}: {said}")
        elif key == "tasks":
            if len(tasks) != int(want):
                bad.append(f"{len(tasks)} tasks, not {want}")
        elif key == "file":
            continue
        else:
            detail = server.job(str(tasks[0]["id"]))
            got = {"accelerators": detail["accelerators_per_node"]}.get(key, detail.get(key))
            if key == "labels":
                k, _, v = want.partition(":")
                ok = (got or {}).get(k) == v
            else:
                ok = str(got) == want or (isinstance(got, float) and f"{got:g}" == want)
            if not ok:
                bad.append(f"{key} is {got!r}, not {want}: {said}")
    for e in inp.expects:
        kind, _, text = e.partition("~")
        if kind == "out" and text not in ran.out:
            bad.append(f"stdout lacks {text!r}: {said}")
        elif kind == "err" and text not in ran.err:
            bad.append(f"stderr lacks {text!r}: {said}")
        elif kind == "log":
            log = server.api("GET", f"/jobs/{tasks[0]['id']}/logs").text
            if text not in log:
                bad.append(f"the log lacks {text!r}: {log[-1500:]}")
        elif kind.startswith("file="):
            rel = kind[5:].replace("{id}", str(tasks[0]["id"] if tasks else ""))
            if tasks and tasks[0].get("array"):
                rel = rel.replace("{array}", str(tasks[0]["array"]["job_id"]))
            f = ran.cwd / rel
            if not f.exists() or text not in f.read_text():
                have = sorted(str(p.relative_to(ran.cwd)) for p in ran.cwd.rglob("*") if p.is_file())
                bad.append(f"{rel} lacks {text!r} ({f.read_text()[-800:] if f.exists() else 'missing'}; files: "
                           f"{have})")
    return bad


def test_every_input_names_what_it_mirrors_and_asks_something():
    assert len(INPUTS) >= 25
    for path in INPUTS:
        inp = parse(path)
        assert inp.mirrors.startswith("mirrors ") and "/" in inp.mirrors, path.name
        assert inp.expects, path.name
        assert inp.refused or inp.job or path.suffix == ".cmd", path.name


def test_the_corpus_runs_as_its_users_run_it(corpus: tuple[Server, dict[str, Ran]]):
    server, runs = corpus
    waited = [r.inp for r in runs.values() if r.inp.job and not r.inp.refused and (r.rc == 0 or _job(server, r.inp))]
    try:
        wait_for(lambda: all(_settled(server, inp) for inp in waited), 120, "every job of the corpus to settle",
                 progress=server.activity, limit=240)
    except AssertionError as e:
        left = {i.path.name: _job(server, i) for i in waited if not _settled(server, i)}
        raise AssertionError(f"{e}\nnot settled: {json.dumps(left, indent=1, default=str)[:6000]}") from None
    problems = {name: bad for name, ran in runs.items() if (bad := check(server, ran))}
    assert not problems, json.dumps(problems, indent=1)
    ran_ok = [n for n, r in runs.items() if not r.inp.refused]
    assert len(ran_ok) / len(runs) >= 0.8, (len(ran_ok), len(runs))


def test_srun_returns_the_steps_exit_code(corpus: tuple[Server, dict[str, Ran]]):
    """srun without --pty: the step's output as it runs, and its exit code (the highest of its tasks')."""
    server, runs = corpus
    ran = next(iter(runs.values()))
    env = {k: v for k, v in os.environ.items()}
    env.update(server.env)
    env["FAIRPOD_TOKEN"] = server.token
    r = subprocess.run([sys.executable, "-m", "fairpod.cli.main", "srun", "-A", "ml-engineers", "-N2", "-J",
                        "exit-demo", "bash", "-c", 'echo "task $SLURM_PROCID"; exit $((3 + SLURM_PROCID))'],
                       cwd=ran.cwd, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 4, (r.returncode, r.stdout, r.stderr)
    assert "task 0" in r.stdout and "task 1" in r.stdout, r.stdout  # with srun's own error lines, as in Slurm
    assert "task 1: Exited with exit code 4" in r.stdout
    assert "==== fairpod" not in r.stdout and "Traceback" not in r.stderr
    assert server.job("exit-demo")["state"] == "Failed"


def test_pyproject_installs_slurms_commands():
    """The console scripts the corpus runs are those pip writes from pyproject.toml."""
    import tomllib

    scripts = tomllib.loads((HERE.parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert {k: scripts.get(k) for k in COMMANDS} == COMMANDS
    r = subprocess.run([sys.executable, "-c", "import sys; sys.argv[0] = '/usr/bin/sbatchx'; "
                        "from fairpod.cli.slurm_entry import main; sys.exit(main())"], capture_output=True, text=True)
    assert r.returncode == 2 and "not one of Slurm's commands" in r.stderr
