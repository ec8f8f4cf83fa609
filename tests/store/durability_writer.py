"""Child process for test_store_durability: writes batches of jobs (each batch one transaction with one
event per job) forever, printing the ids of each batch after its commit, until it is killed."""

from __future__ import annotations

import sys

from fairpod.model.jobs import JobSpec, resolve_job
from fairpod.model.spec import seed_spec
from fairpod.store import Store

BATCH = 5


def main(url: str, tag: str) -> None:
    store = Store(url)
    cluster = seed_spec()
    i = 0
    while True:
        with store.tx() as t:
            ids = []
            for _ in range(BATCH):
                spec = JobSpec(name=f"{tag}-{i}", team="john", command=["x" * 2000])
                job = t.insert_job(spec, resolve_job(spec, cluster))
                t.append_event("JobSubmitted", "x" * 500, job_id=job.id, team="john")
                ids.append(job.id)
                i += 1
        print(" ".join(map(str, ids)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
