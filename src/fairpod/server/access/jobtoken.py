"""Job-scoped credentials and the environment a replica gets for talking back to the control plane.

Every launch of a job gets ``FAIRPOD_API_URL`` and ``FAIRPOD_TOKEN``: a token that is good for exactly one
thing, ``POST /api/v1/jobs/{id}/progress`` of that job (and the SDK's ``ready``/``restarts``), and only while the
job has not finished. It is ``fpj.<job id>.<HMAC-SHA256 of the job id and the job's incarnation>`` under a
secret the control plane keeps in ``job-token.key`` in its home (mode 0600, created on first use; never in the
database, whose readers could otherwise forge tokens: a secret an older version kept there is moved to the file
and deleted), so nothing per job has to be revoked: it dies with the job, and a job cannot forge the token of
another. Any other route answers it with 403.

The incarnation is a random value stored with the job when it is submitted (``jobs.incarnation``). A job id alone
does not name one job for ever: a restore of a backup takes the id counter back, and the next job gets the id of
a job of the discarded timeline, whose replicas may still hold its token. Signed over the incarnation, that token
is refused for the new job (401, one line); the tokens of jobs the backup holds are signed over the incarnation
it holds, so they keep working. A job stored before the incarnation existed has none: its token is signed over
the id alone, as it was.

Beside the credential a launch gets what :mod:`fairpod.sdk` and :mod:`fairpod.formats.slurm` read: the job id, a run
id unique to this launch (``FAIRPOD_RUN_ID``), the job's nodes in replica order (``FAIRPOD_NODES``), how often
the job has been preempted, and the last checkpoint it reported.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request

from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.store import Store
from fairpod.store.records import Job

PREFIX = "fpj."
SECRET_KEY = "job_token_secret"  # where versions before 0.2 kept the secret, in the store's meta table
SECRET_FILE = "job-token.key"


def job_secret(home: Path, store: Store) -> bytes:
    """The control plane's secret for job tokens, from ``home/job-token.key`` (created on first use)."""
    path = home / SECRET_FILE
    try:
        return bytes.fromhex(path.read_text(encoding="ascii").strip())
    except FileNotFoundError:
        pass
    except ValueError:
        raise RuntimeError(f"{path} is corrupt: delete it to issue new job tokens (running jobs' tokens end)") from None
    value = store.get_meta(SECRET_KEY) or secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(value + "\n")
    store.delete_meta(SECRET_KEY)
    return bytes.fromhex(value)


def _mac(secret: bytes, job_id: int, incarnation: str | None) -> str:
    what = f"fairpod-job:{job_id}" if incarnation is None else f"fairpod-job:{job_id}:{incarnation}"
    return hmac.new(secret, what.encode(), hashlib.sha256).hexdigest()


def issue(secret: bytes, job_id: int, incarnation: str | None) -> str:
    """The token of the job ``job_id`` whose incarnation is ``incarnation`` (``Job.incarnation``)."""
    return f"{PREFIX}{job_id}.{_mac(secret, job_id, incarnation)}"


def is_job_token(token: str) -> bool:
    return token.startswith(PREFIX)


def claimed_job(token: str) -> int | None:
    """The job id a job token names (not yet verified), None when it is not one in form."""
    if not is_job_token(token):
        return None
    jid, _, mac = token[len(PREFIX) :].partition(".")
    if not (jid.isascii() and jid.isdigit()) or len(jid) > 18 or not mac:
        return None
    return int(jid)


def verify(secret: bytes, token: str, job: Job) -> bool:
    """Is ``token`` the token of ``job``, this incarnation of its id?"""
    jid = claimed_job(token)
    mac = token[len(PREFIX) :].partition(".")[2]
    return jid == job.id and hmac.compare_digest(mac, _mac(secret, job.id, job.incarnation))


def bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def job_of_request(request: Request) -> int | None:
    """For a request carrying a job token: the job id it is good for (401 if it is not valid: forged, or the token
    of another incarnation of that id, a job of a timeline a restore discarded)."""
    token = bearer(request)
    if not is_job_token(token):
        return None
    jid = claimed_job(token)
    job = request.app.state.cp.queries.get_job(jid) if jid is not None else None
    if jid is None or job is None:
        raise Problem(401, "not authenticated", "the job token is not valid")
    if not verify(request.app.state.job_secret, token, job):
        raise Problem(401, "not authenticated", f"the job token is not valid for job {job.name} (id {jid}): it was "
                      "not issued to this job (a job of that id before a restore of a backup, or forged)")
    return jid


JobTokenJob = Annotated[int | None, Depends(job_of_request)]


def job_for_token(cp: Core, job_id: int, ref: str) -> Job:
    """The job a job token may report for, if ``ref`` (id or name) names it and it has not finished."""
    job = cp.queries.get_job(job_id)
    if job is None:
        raise Problem(401, "not authenticated", "the job token is not valid")
    if ref != str(job.id) and ref != job.name:
        raise Problem(403, "forbidden", f"this token is for job {job.name} (id {job.id}), not for {ref!r}")
    if job.state.finished:
        raise Problem(403, "forbidden", f"job {job.name} is {job.state.value}; its token is no longer valid")
    return job


def launch_env(secret: bytes, api_url: str | None) -> Callable[[Job], dict[str, str]]:
    """The function the control plane calls at every launch for the variables to add to a job's env."""

    def env(job: Job) -> dict[str, str]:
        out = {
            "FAIRPOD_JOB_ID": str(job.id),
            "FAIRPOD_JOB_NAME": job.name,
            "FAIRPOD_RUN_ID": f"{job.id}-{job.attempt}-{int((job.started_at or 0) * 1000)}",
            "FAIRPOD_PREEMPTIONS": str(job.preemptions),
            "FAIRPOD_NODES": ",".join(job.placement),  # the job's nodes in replica order
            "FAIRPOD_TOKEN": issue(secret, job.id, job.incarnation),
        }
        if api_url:
            out["FAIRPOD_API_URL"] = api_url
        if job.checkpoint_path:
            out["FAIRPOD_LAST_CHECKPOINT"] = job.checkpoint_path
        if job.checkpoint_step is not None:
            out["FAIRPOD_LAST_STEP"] = str(job.checkpoint_step)
        return out

    return env
