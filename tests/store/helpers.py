from __future__ import annotations

from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import ClusterSpec
from fairpod.store import Job, Store, Tx


def submit(st: Store | Tx, cluster: ClusterSpec, name: str, team: str = "john", **kw: object) -> Job:
    """Insert a job the way the server would: JobSpec -> resolve_job -> insert_job."""
    spec = JobSpec(name=name, team=team, **kw)  # type: ignore[arg-type]
    return st.insert_job(spec, resolve_job(spec, cluster))
