"""A ``/metrics`` scrape's cost does not grow with the jobs the store keeps: the work SQLite does for a scrape
(its virtual machine's steps, counted with a progress handler) is about the same with 40 and with 1,500
finished jobs, and the histograms and counters still count every job."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.server.api.metrics import FairpodCollector

from ..inproc import InProc

STEP = 100  # the progress handler runs every STEP instructions of SQLite's virtual machine


class Steps:
    """Counts SQLite's virtual-machine instructions (in STEPs) of every statement run on ``engine``."""

    def __init__(self, engine: Any) -> None:
        self.n = 0

        def tick() -> int:
            self.n += 1
            return 0

        def before(conn: Any, *_: Any) -> None:
            conn.connection.dbapi_connection.set_progress_handler(tick, STEP)

        event.listen(engine, "before_cursor_execute", before)


def finished_jobs(h: InProc, n: int, first: int) -> None:
    """``n`` more jobs of team john, admitted 30 s after submission and ended 100 s later, Succeeded."""
    spec = h.cp.spec
    specs = [JobSpec(name=f"done-{first + i}", team="john", command=["true"]) for i in range(n)]
    jobs = h.store.insert_tasks(specs, resolve_job(specs[0], spec), ["queued"] * n, first + 1, None,
                               now=h.clock())
    now = h.clock()
    h.store.update_jobs({j.id: {"state": JobState.SUCCEEDED, "first_started_at": j.submit_time + 30,
                                "finished_at": now + 130} for j in jobs})


def scrape_steps(h: InProc, collector: FairpodCollector, steps: Steps) -> tuple[int, dict[str, Any]]:
    before = steps.n
    fams = {f.name: f for f in collector.collect()}
    return steps.n - before, fams


def count(fams: dict[str, Any], name: str, sample: str, **labels: str) -> float:
    return next(s.value for s in fams[name].samples if s.name == sample and all(
        s.labels.get(k) == v for k, v in labels.items()))


def test_a_scrape_costs_the_same_with_40_or_1500_finished_jobs(h: InProc) -> None:
    steps = Steps(h.store.engine)
    costs, total = [], 0
    for extra in (40, 1458):  # 40 and 1,500 finished jobs in the store at the first scrape, then two more
        collector = FairpodCollector(h.cp)  # a fresh control plane's collector: its first scrape reads all
        finished_jobs(h, extra, total)
        total += extra
        scrape_steps(h, collector, steps)
        for _ in range(2):  # a job ends between scrapes (the second scrape reads again the jobs of its
            h.clock.advance(60)  # overlap: those that started or ended within OVERLAP of the previous one)
            finished_jobs(h, 1, 10_000 + total)
            total += 1
            cost, fams = scrape_steps(h, collector, steps)
        costs.append(cost)
        assert count(fams, "fairpod_finished_jobs", "fairpod_finished_jobs_total", team="john",
                     state="Succeeded") == total
        assert count(fams, "fairpod_job_run_time_seconds", "fairpod_job_run_time_seconds_count",
                     team="john") == total
        assert count(fams, "fairpod_admission_wait_time_seconds", "fairpod_admission_wait_time_seconds_sum",
                     team="john") == 30 * total
        assert count(fams, "fairpod_admission_wait_time_seconds", "fairpod_admission_wait_time_seconds_bucket",
                     team="john", le="10") == 0
        assert count(fams, "fairpod_admission_wait_time_seconds", "fairpod_admission_wait_time_seconds_bucket",
                     team="john", le="30") == total
    small, big = costs
    assert big < small * 1.5 + 20, f"a scrape took {small} steps with 42 finished jobs and {big} with 1,502"
