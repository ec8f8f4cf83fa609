"""BatchingStore: the reconcile loop's job updates and events, collected per thread and written together."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fairpod.model.jobs import JobSpec, JobState, resolve_job
from fairpod.model.spec import seed_spec
from fairpod.model.users import Role
from fairpod.server.core.batch import BatchingStore
from fairpod.store import NotFound, Store


@pytest.fixture
def bs(tmp_path: Path):
    s = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    s.create_all()
    yield BatchingStore(s)
    s.close()


def _job(st, name: str):
    spec = JobSpec(name=name, team="john", command=["true"])
    return st.insert_job(spec, resolve_job(spec, seed_spec()))


def test_writes_wait_for_the_end_of_the_batch_and_are_seen_inside_it(bs: BatchingStore):
    j = _job(bs, "a")
    seen_outside: list = []
    with bs.batch():
        got = bs.update_job(j.id, {"state": JobState.RUNNING, "placement": ["n1"], "run_state": {"r": 1}})
        assert (got.state, got.placement, got.run_state) == (JobState.RUNNING, ["n1"], {"r": 1})
        assert bs.get_job(j.id) == got
        bs.append_event("JobAdmitted", "admitted", job_id=j.id, team="john", data={"n": 1})
        t = threading.Thread(target=lambda: seen_outside.append(bs.get_job(j.id)))  # another thread
        t.start()
        t.join()
        assert bs.store.get_job(j.id).state == JobState.PENDING  # type: ignore[union-attr]
        assert bs.list_events(kind="JobAdmitted") == []
        bs.flush()  # written now; the batch goes on
        assert bs.store.get_job(j.id).state == JobState.RUNNING  # type: ignore[union-attr]
        bs.update_job(j.id, {"reason": "later"})
    assert seen_outside[0].state == JobState.PENDING
    after = bs.get_job(j.id)
    assert after is not None and (after.state, after.reason, after.placement) == (JobState.RUNNING, "later", ["n1"])
    (ev,) = bs.list_events(kind="JobAdmitted")
    assert (ev.job_id, ev.data) == (j.id, {"n": 1})


def test_prefetch_reads_once_and_errors_are_raised_at_once(bs: BatchingStore):
    a, b = _job(bs, "a"), _job(bs, "b")
    with bs.batch():
        bs.prefetch([a.id, str(b.id), None])
        assert bs.get_job(b.id) == b
        with pytest.raises(ValueError, match="job.state"):
            bs.update_job(a.id, {"state": "Sleeping"})
        with pytest.raises(NotFound):
            bs.update_job(999, {"reason": "x"})


def test_what_was_collected_is_written_when_the_block_raises(bs: BatchingStore):
    j = _job(bs, "a")
    with pytest.raises(RuntimeError), bs.batch():
        bs.update_job(j.id, {"reason": "before the error"})
        raise RuntimeError("boom")
    assert bs.get_job(j.id).reason == "before the error"  # type: ignore[union-attr]


def test_token_checks_are_cached_until_a_revocation(bs: BatchingStore):
    bs.create_user("alice", Role.MEMBER, ["john"])
    tok = bs.issue_token("alice")
    assert bs.verify_token(tok).name == "alice"  # type: ignore[union-attr]
    assert bs.revoke_user_tokens("alice") == 1
    assert bs.verify_token(tok) is None
    assert bs.verify_token("fp_nonsense") is None
