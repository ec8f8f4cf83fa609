"""An API worker's writer thread (``server.core.submit_writer``): submits awaited from an event loop are written in
groups by one thread, each answered with its own job or its own error, and a caller that went away breaks nothing.
The writer's ``make`` and ``write`` here are the test's (its callers' contract: ``write`` answers each submit); the
worker's real ones are tested end to end in tests/server/runtime/test_api_workers.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from fairpod.model.jobs import JobSpec
from fairpod.server.core.submit_writer import GROUP, SubmitWriter
from fairpod.server.core.submits import Submit
from fairpod.server.errors import InvalidJob


def spec(name: str) -> JobSpec:
    return JobSpec(name=name, team="t", command=["true"])


class Book:
    """``make`` and ``write`` that record the groups; ``write`` blocks on ``gate`` until the test opens it."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.fail_write: BaseException | None = None

    def make(self, sp: JobSpec, actor: str, key: str | None) -> Submit:
        if sp.name.startswith("raises"):
            raise ValueError(f"the check of {sp.name} raised")
        checked: Any = InvalidJob(f"{sp.name} is invalid") if sp.name.startswith("bad") else "resolved"
        return Submit(sp, actor, key, None, checked)  # type: ignore[arg-type]  # no cluster spec: not read here

    def write(self, group: list[Submit]) -> None:
        self.entered.set()
        assert self.gate.wait(30)
        self.groups.append([s.spec.name for s in group])
        if self.fail_write is not None:
            for s in group:
                s.error, s.done = self.fail_write, True
            raise self.fail_write
        for n, s in enumerate(group):
            if isinstance(s.checked, InvalidJob):
                s.error, s.done = s.checked, True
            else:
                s.job, s.created, s.done = f"job-{s.spec.name}-{n}", True, True  # type: ignore[assignment]


async def until(cond: Any, what: str) -> None:
    for _ in range(3000):  # 30 s at most
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_submits_queued_while_a_group_is_written_are_the_next_group_each_with_its_own_answer() -> None:
    book = Book()
    w = SubmitWriter(book.make, book.write)

    async def main() -> list[Any]:
        book.gate.clear()
        first = asyncio.ensure_future(w.submit(spec("a"), "ann", None, lambda job: {"view": job}))
        await until(book.entered.is_set, "the first submit's group to be written")
        rest = [asyncio.ensure_future(w.submit(spec(n), "ann", None, lambda job: {"view": job}))
                for n in ("b", "bad-c", "raises-d", "e")]
        await until(lambda: len(w) == 4, "the others to queue behind it")
        book.gate.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    a, b, c, d, e = asyncio.run(main())
    assert book.groups == [["a"], ["b", "bad-c", "e"]]  # the check that raised is answered alone, not written
    assert a == ("job-a-0", True, {"view": "job-a-0"})
    assert b == ("job-b-0", True, {"view": "job-b-0"})
    assert isinstance(c, InvalidJob) and str(c) == "bad-c is invalid"
    assert isinstance(d, ValueError) and "raises-d" in str(d)
    assert e == ("job-e-2", True, {"view": "job-e-2"})


def test_a_failed_write_answers_its_group_with_the_error_and_the_writer_goes_on() -> None:
    book = Book()
    w = SubmitWriter(book.make, book.write)

    async def main() -> tuple[list[Any], Any]:
        book.fail_write = RuntimeError("database is locked")
        failed = await asyncio.gather(w.submit(spec("a"), "ann", None, str), return_exceptions=True)
        book.fail_write = None
        return failed, await w.submit(spec("b"), "ann", None, str)

    failed, ok = asyncio.run(main())
    assert [type(x) for x in failed] == [RuntimeError] and str(failed[0]) == "database is locked"
    assert ok == ("job-b-0", True, "job-b-0")


def test_an_answer_that_raises_fails_only_its_submit() -> None:
    book = Book()
    w = SubmitWriter(book.make, book.write)

    def boom(job: Any) -> Any:
        raise KeyError(job)

    async def main() -> list[Any]:
        book.gate.clear()
        first = asyncio.ensure_future(w.submit(spec("a"), "ann", None, str))
        await until(book.entered.is_set, "the first group")
        more = [asyncio.ensure_future(w.submit(spec("b"), "ann", None, boom)),
                asyncio.ensure_future(w.submit(spec("c"), "ann", None, str))]
        await until(lambda: len(w) == 2, "two queued")
        book.gate.set()
        return await asyncio.gather(first, *more, return_exceptions=True)

    a, b, c = asyncio.run(main())
    assert a == ("job-a-0", True, "job-a-0") and isinstance(b, KeyError) and c == ("job-c-1", True, "job-c-1")


def test_a_caller_that_went_away_is_still_written_and_breaks_nothing() -> None:
    """A request cancelled while it waits (the client hung up): its job is still written, as a submit in a
    thread of the pool was, and the writer answers the next submit."""
    book = Book()
    w = SubmitWriter(book.make, book.write)

    async def main() -> Any:
        book.gate.clear()
        gone = asyncio.ensure_future(w.submit(spec("gone"), "ann", None, str))
        await until(book.entered.is_set, "its group")
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        book.gate.set()
        return await w.submit(spec("next"), "ann", None, str)

    assert asyncio.run(main()) == ("job-next-0", True, "job-next-0")
    assert book.groups == [["gone"], ["next"]]


def test_a_group_is_at_most_GROUP_submits() -> None:
    book = Book()
    w = SubmitWriter(book.make, book.write)
    n = GROUP + 10

    async def main() -> list[Any]:
        book.gate.clear()
        first = asyncio.ensure_future(w.submit(spec("first"), "ann", None, str))
        await until(book.entered.is_set, "the first group")
        rest = [asyncio.ensure_future(w.submit(spec(f"j{i}"), "ann", None, str)) for i in range(n)]
        await until(lambda: len(w) == n, "all queued")
        book.gate.set()
        return await asyncio.gather(first, *rest)

    answers = asyncio.run(main())
    assert [len(g) for g in book.groups] == [1, GROUP, 10]
    assert all(created for _, created, _ in answers)


def test_a_fault_of_the_writer_itself_answers_its_group_with_the_error_and_the_thread_goes_on() -> None:
    """Were the writer thread to end, every later submit of the worker would wait for ever."""
    book = Book()

    class Faulty(SubmitWriter):
        faults = 1

        def _one_group(self, group: list[Any]) -> None:
            if self.faults:
                self.faults -= 1
                raise RuntimeError("the writer's own fault")
            super()._one_group(group)

    w = Faulty(book.make, book.write)

    async def main() -> tuple[list[Any], Any]:
        failed = await asyncio.gather(asyncio.wait_for(w.submit(spec("a"), "ann", None, str), 30),
                                      return_exceptions=True)  # without the guard: no answer, a timeout
        return failed, await asyncio.wait_for(w.submit(spec("b"), "ann", None, str), 30)

    failed, ok = asyncio.run(main())
    assert [str(x) for x in failed] == ["the writer's own fault"]
    assert ok == ("job-b-0", True, "job-b-0")
