"""Each form in which fairpod names a thing outside its store is written in one module, so that the front ends
(fairpod, hyperpod, hyp, sbatch/srun/salloc) and the server cannot drift apart: HyperPod's ``hyperpod-ns-<team>``
(fairpod.formats.hyperpod), the job key and Slurm's ``ID_T`` (fairpod.model.keys), the job flags
(fairpod.model.jobflags). The source is read as text: a second spelling of a form is what this catches."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "fairpod"

# a form's code (not its prose: docstrings and help texts name the forms freely) -> the one module that writes it
HOMES = {
    r'"hyperpod-ns-"|hyperpod-ns-\{|hyperpod-ns-\(': "formats/hyperpod.py",  # the prefix, built or matched (any group)
    r'rsplit\("-", 1\)\[(1|-1)\]': "model/keys.py",  # the job id read back out of a job key
    r"\}_\{": "model/keys.py",  # ID_T built: f"{array_job_id}_{task_id}"
    r'_\(\\d\{1,9\}\)': "model/keys.py",  # ID_T parsed
    # a job flag's words outside the one table: start-job's, start-service's and sbatch's parsers take theirs from it
    r'"--(grace-seconds|min-runtime|expected-duration|hang-timeout|ready-timeout|restart-eval-period)"':
        "model/jobflags.py",
}


def spellings(pattern: str) -> dict[str, int]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        n = len(re.findall(pattern, path.read_text()))
        if n:
            out[str(path.relative_to(SRC))] = n
    return out


def test_each_form_has_one_home() -> None:
    for pattern, home in HOMES.items():
        found = spellings(pattern)
        assert set(found) == {home}, f"{pattern}: written in {found}, its home is {home}"
