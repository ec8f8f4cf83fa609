"""A replica's log as the API serves it (``GET /jobs/{ref}/logs``): the whole of it, its last lines, a byte range
(``Range``), or followed while the job runs. The log is the executor's (``fairpod.executors.logs``), found by the
job's key (:func:`fairpod.server.runs.job_key`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import Response
from fastapi.responses import StreamingResponse

from fairpod.executors.logs import CHUNK, byte_range, output_start, read_chunks, read_output, tail_start
from fairpod.server.core.api import Core
from fairpod.server.errors import Problem
from fairpod.server.runs import job_key
from fairpod.store import Job


def log_response(cp: Core, job: Job, replica: int, follow: bool, tail: int | None, header: str | None) -> Response:
    """The replica's log: the byte range ``header`` (``Range: bytes=...``) asks for, or else streamed (its last
    ``tail`` lines; with ``follow``, new output until the job has finished)."""
    key = job_key(job)
    if header is not None:
        return _ranged(cp.executor.log_path(key, replica), header)
    return StreamingResponse(_stream(cp, job.id, key, replica, follow, tail), media_type="text/plain",
                             headers={"Accept-Ranges": "bytes"})


def _ranged(path: Path | None, header: str) -> Response:
    """The bytes of the log that ``header`` (``Range: bytes=...``) asks for: 206, or 416 outside the log."""
    try:
        size = path.stat().st_size if path is not None else 0
    except OSError:
        size = 0
    try:
        got = byte_range(header, size)
    except ValueError as e:
        raise Problem(400, "invalid request", str(e)) from None
    if got is None or path is None:
        return Response(status_code=416, headers={"Content-Range": f"bytes */{size}"})
    first, last = got
    return StreamingResponse(_chunks(path, first, last + 1), status_code=206, media_type="text/plain",
                             headers={"Content-Range": f"bytes {first}-{last}/{size}",
                                      "Content-Length": str(last - first + 1), "Accept-Ranges": "bytes"})


async def _chunks(path: Path, start: int, stop: int | None = None) -> AsyncIterator[bytes]:
    """``read_chunks`` for a response: one chunk read at a time, the event loop free between them."""
    try:
        for chunk in read_chunks(path, start, stop):
            yield chunk
            await asyncio.sleep(0)
    except FileNotFoundError:
        return


async def _stream(cp: Core, job_id: int, key: str, replica: int, follow: bool,
                  tail: int | None = None) -> AsyncIterator[bytes]:
    """The replica's log of the latest attempt (its last ``tail`` lines), ``CHUNK`` bytes at a time, as the file
    holds it when asked; with follow, new output until the job has finished (offsets in the output: a log over
    its cap is written again, ``fairpod.executors.logs``)."""
    at: int | None = None  # the offset in the output read up to
    path = None
    idle_after_end = 0
    for _ in range(10**7):  # bounded: ~115 days at 1 s
        path = cp.executor.log_path(key, replica) or path
        if path is not None and at is None and path.exists():
            with open(path, "rb") as f:  # one open file: a rotation meanwhile renames another over the path
                dropped, head = output_start(f)
                size = f.seek(0, 2)
                f.seek(tail_start(f, tail) if tail is not None else 0)
                while f.tell() < size and (chunk := f.read(min(CHUNK, size - f.tell()))):
                    yield chunk
                    await asyncio.sleep(0)
            at = dropped + size - head
        while follow and path is not None and at is not None:
            chunk, at = read_output(path, at, CHUNK)
            if not chunk:
                break
            yield chunk
            await asyncio.sleep(0)
        if not follow:
            return
        job = cp.queries.get_job(job_id)
        if job is None or job.state.finished:
            idle_after_end += 1
            if idle_after_end > 1:
                return
        await asyncio.sleep(0.5)
