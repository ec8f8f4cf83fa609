"""sbatch's job body goes through the checks and defaults of every job body (fairpod.cli.jobbody.finish), said in
sbatch's words: ``fairpod sbatch`` run in this process as its users type it.

- ``#FAIRPOD --max-retry N`` (or ``--max-retry`` on the command line) without auto-resume is refused in one line
  that names the script's file and line (or the flag), not submitted with retries that never happen;
- ``--test-only`` asks no server: a script without a team is shown with its team left to be chosen at submit;
- with a server, a script without a team goes to the submitter's only team, as before (the real API in-process,
  tests/server/inproc_api.py: the CLI's own client, its requests answered by the app).

The scripts mirror aws-samples/awsome-distributed-training 3.test_cases/10.FSDP/1.distributed-training.sbatch
(its header, EFA variables and torchrun arguments; a CPU torchrun in place of its GPUs), with fairpod's
``#FAIRPOD`` lines added where a HyperPod user adds them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairpod.cli import client as cli_client
from fairpod.cli.main import main

from ...server.inproc_api import Api

FSDP = """#!/bin/bash

# mirrors aws-samples/awsome-distributed-training 3.test_cases/10.FSDP/1.distributed-training.sbatch
#SBATCH --nodes=2 # number of nodes to use
#SBATCH --job-name=FSDP # name of your job
#SBATCH --exclusive # job has exclusive use of the resource, no sharing
#FAIRPOD --max-retry 3
{more}
set -ex;

GPUS_PER_NODE=2 # 4 for G5.12x, 8 for P4/P5
export FI_EFA_USE_DEVICE_RDMA=1 # use for p4d
export NCCL_DEBUG=INFO

declare -a TORCHRUN_ARGS=(
    --nproc_per_node=$GPUS_PER_NODE
    --nnodes=$SLURM_JOB_NUM_NODES
    --rdzv_id=$SLURM_JOB_ID
    --rdzv_backend=c10d
    --rdzv_endpoint=$(hostname)
)
{auto}
srun ${{AUTO_RESUME}} -l ./pt_fsdp/bin/torchrun "${{TORCHRUN_ARGS[@]}}" ./train.py --max_steps=5000
"""
# the upstream script's own switch: auto-resume on a HyperPod cluster (fairpod reads it as on)
AUTO = """AUTO_RESUME=""
if [ -d "/opt/sagemaker_cluster" ]; then
    echo "Detected Hyperpod cluster.. enabling --auto-resume=1"
    AUTO_RESUME="--auto-resume=1"
fi"""


def script(more: str = "", auto: str = "") -> str:
    return FSDP.format(more=more, auto=auto)


@pytest.fixture
def sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``fairpod sbatch ARGS`` on ``job.sbatch`` in this process, with no server anywhere (FAIRPOD_URL: a port
    nothing listens on); (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FAIRPOD_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("FAIRPOD_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FAIRPOD_TOKEN", "none")

    def run(text: str, *args: str) -> tuple[int, str, str]:
        (tmp_path / "job.sbatch").write_text(text)
        try:
            rc = main(["sbatch", *args, "job.sbatch"])
        except SystemExit as e:
            rc = int(e.code or 0)
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def refusal(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0].removeprefix("fairpod: error: ")


def test_max_retry_without_auto_resume_is_refused_where_it_was_written(sbatch):
    rc, out, err = sbatch(script(), "--test-only")
    assert rc == 1 and not out, err
    assert refusal(err) == ("job.sbatch line 7: #FAIRPOD --max-retry 3 does nothing without auto-resume: add "
                            "#SBATCH --requeue or #FAIRPOD --auto-resume, or leave --max-retry out")
    # turned off on purpose: the line to change is named
    rc, _, err = sbatch(script(more="#SBATCH --no-requeue"), "--test-only")
    assert rc == 1 and refusal(err).endswith("add #SBATCH --requeue or #FAIRPOD --auto-resume in place of "
                                             "--no-requeue (job.sbatch line 8), or leave --max-retry out"), err
    # on sbatch's command line: the flag as typed there
    rc, _, err = sbatch(script().replace("#FAIRPOD --max-retry 3\n", ""), "--test-only", "--max-retry", "2")
    assert rc == 1 and refusal(err) == ("--max-retry 2 does nothing without auto-resume: add --requeue or "
                                        "--auto-resume, or leave --max-retry out"), err
    rc, _, err = sbatch(script().replace("--max-retry 3", "--max-retry three"), "--test-only")
    assert rc == 1 and "line 7: --max-retry wants a whole number of restarts" in refusal(err), err


@pytest.mark.parametrize("how", ["#SBATCH --requeue", "#FAIRPOD --auto-resume", "auto"])
def test_max_retry_with_auto_resume_is_kept(sbatch, how: str):
    text = script(auto=AUTO) if how == "auto" else script(more=how)
    rc, out, err = sbatch(text, "--test-only", "--json", "--team", "john")
    assert rc == 0, err
    job = json.loads(out)["job"]
    assert job["auto_resume"] is True and job["max_retry"] == 3 and job["team"] == "john"


def test_test_only_asks_no_server_for_the_team(sbatch):
    rc, out, err = sbatch(script(more="#SBATCH --requeue"), "--test-only")
    assert rc == 0, err
    assert out == ("sbatch: job fsdp for the team chosen at submit: 2 node(s), auto-resume on; not submitted "
                   "(--test-only)\n"), out
    assert "sbatch: no team named (#FAIRPOD --team or #SBATCH --account): at submit the job goes to your only " \
           "team, or to the cluster's only team; --test-only asks no server" in err, err
    rc, out, err = sbatch(script(more="#SBATCH --requeue"), "--test-only", "--json")
    shown = json.loads(out)
    assert rc == 0 and "team" not in shown["job"] and any("at submit" in n for n in shown["notes"]), out
    assert shown["job"]["workdir"] == str(Path.cwd())  # finish's default: where sbatch ran
    rc, out, _ = sbatch(script(more="#SBATCH --requeue\n#SBATCH --account=smith"), "--test-only")
    assert rc == 0 and out.startswith("sbatch: job fsdp for team smith:"), out


def test_the_mapping_names_the_lines_of_the_script():
    from fairpod.cli.slurm_cmds import said
    from fairpod.formats.slurm.sbatch import Setting, read_script

    bs = read_script("train.sbatch", "#!/bin/bash\n#SBATCH -J x\n#SBATCH --container-mounts=/a:/a\nsrun true\n")
    bs.settings.append(Setting("container_image", "ubuntu", "command line"))
    assert said(bs) == {"--name": "train.sbatch line 2: #SBATCH --job-name",
                        "--mount": "train.sbatch line 3: #SBATCH --container-mounts",
                        "--image": "--container-image", "--auto-resume": "--requeue or --auto-resume"}


# -- with a server: the real API in-process ------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    a = Api(tmp_path_factory.mktemp("api"))
    yield a
    a.close()


class _Answer:
    def __init__(self, r: Any) -> None:
        self.status, self.headers, self._raw = r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content

    def read(self) -> bytes:
        return self._raw


def test_with_a_server_the_team_is_the_submitters_only_one(api: Api, sbatch, monkeypatch: pytest.MonkeyPatch):
    token = {"value": api.member}  # mia, a member of john only

    def send(self: Any, method: str, path: str, body: bytes | None, headers: Any, timeout: Any) -> _Answer:
        hdrs = {**self.headers, **headers, "Authorization": f"Bearer {token['value']}"}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
        return _Answer(api.client.request(method, path, content=body, headers=hdrs))

    monkeypatch.setattr(cli_client.Client, "_send", send)
    rc, out, err = sbatch(script(more="#SBATCH --requeue"), "--parsable")
    assert rc == 0, err
    job = api.api("GET", f"/jobs/{out.strip()}").json()
    assert (job["team"], job["auto_resume"], job["max_retry"]) == ("john", True, 3), job
    # the admin is in no team and the cluster has two: asked, in sbatch's words; nothing submitted
    token["value"] = api.admin
    rc, out, err = sbatch(script(more="#SBATCH --requeue").replace("FSDP", "fsdp-admin"), "--parsable")
    assert rc == 1 and not out and "which team? add '#FAIRPOD --team NAME'" in refusal(err), err
    # the script's mistake is said before any server is asked
    rc, _, err = sbatch(script(), "--parsable")
    assert rc == 1 and refusal(err).startswith("job.sbatch line 7: #FAIRPOD --max-retry 3 does nothing"), err
    names = [j["name"] for j in api.api("GET", "/jobs").json()["jobs"]]
    assert names.count("fsdp") == 1 and "fsdp-admin" not in names, names


def test_sbatch_help_writes_slurms_filename_patterns_as_users_type_them(capsys: pytest.CaptureFixture[str]) -> None:
    """The epilog is printed as written (argparse expands ``%`` only in arguments' help): ``%x``, not ``%%x``."""
    with pytest.raises(SystemExit) as e:
        main(["sbatch", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "(%x job name, %j job id, %N node, %u user)" in out and "0-199%16" in out and "%a and %A" in out, out
    assert "%%" not in out
