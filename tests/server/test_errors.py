"""One table maps the core's domain errors and the store's errors to HTTP problem documents."""

from __future__ import annotations

import inspect

import pytest

from fairpod.server import errors
from fairpod.server.errors import HTTP_STATUS, DomainError, http_problem
from fairpod.store.records import AlreadyExists, Conflict, NotFound


def test_every_domain_error_has_its_row() -> None:
    mine = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, DomainError)]
    assert set(mine) <= set(HTTP_STATUS), set(mine) - set(HTTP_STATUS)


@pytest.mark.parametrize(("error", "answer"), [
    (errors.InvalidJob("no command"), (400, "invalid job", "no command")),
    (errors.NeverFits("too big"), (400, "job can never run", "too big")),
    (errors.JobExists("taken"), (409, "job exists", "taken")),
    (errors.WrongState("finished", "job finished"), (409, "job finished", "finished")),
    (DomainError("no"), (409, "refused", "no")),
    (NotFound("no job 7"), (404, "not found", "no job 7")),
    (AlreadyExists("user x"), (409, "already exists", "user x")),
    (Conflict("changed"), (409, "conflict", "changed")),
])
def test_the_status_title_and_detail_of_each(error: Exception, answer: tuple[int, str, str]) -> None:
    assert http_problem(error) == answer


def test_an_error_outside_the_table_is_not_answered_by_it() -> None:
    with pytest.raises(LookupError):
        http_problem(RuntimeError("a bug"))
