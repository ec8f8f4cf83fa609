"""Replica logs: written within a cap (``CappedLog``), read while they grow (``get-logs NAME --follow``), and in
parts without reading the rest: the last lines (``tail_start``), a byte range (``byte_range``). Readers hold at most
``CHUNK`` bytes at a time.

A log over its cap (``policy.log_max_bytes``) keeps its newer half: the file is written again as one line saying
how much older output was dropped so far, then that half (from a line's start), and renamed over the log. The
first line is always fairpod's own (the supervisor's start note, or that line), so a reader knows what the file
holds of the output: ``dropped`` bytes of it are gone, and a reader that counts offsets in the output (not the
file: ``read_output``) goes on past a rotation without reading anything twice."""

from __future__ import annotations

import codecs
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHUNK = 64 * 1024
DEFAULT_CAP = 1 << 30  # policy.log_max_bytes' default
DROPPED = re.compile(rb"==== fairpod: (\d+) bytes of older output dropped [^\n]*\n")


class CappedLog:
    """A replica's log, appended to, that never holds more than ``cap`` bytes (plus one line): over it, the older
    half is dropped and said so at the top. While the newer half is copied the disk holds 1.5 x ``cap``."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path, self.cap = path, max(int(cap), 2 * CHUNK)
        self.f = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        self.size = self.f.seek(0, 2)

    def write(self, data: bytes) -> None:
        """Append ``data`` (an OSError, e.g. a full disk, is the caller's)."""
        if self.size + len(data) > self.cap:
            self._rotate()
        self.f.write(data)
        self.size += len(data)

    def _rotate(self) -> None:
        with open(self.path, "rb") as old:
            dropped, head = output_start(old)
            start = max(head, self.size - self.cap // 2)
            old.seek(start)
            nl = old.read(CHUNK).find(b"\n")  # the kept half starts at a line's start (within a chunk)
            start += nl + 1 if nl >= 0 else 0
            dropped += start - head
            tmp = self.path.with_name(self.path.name + ".rotating")
            with open(tmp, "wb") as new:
                new.write(f"==== fairpod: {dropped} bytes of older output dropped ({_size(dropped)}: a replica's "
                          f"log keeps at most {_size(self.cap)}, policy.log_max_bytes) ====\n".encode())
                old.seek(start)
                while chunk := old.read(1 << 20):
                    new.write(chunk)
            os.replace(tmp, self.path)
        self.f.close()
        self.f = open(self.path, "ab", buffering=0)  # noqa: SIM115
        self.size = self.f.seek(0, 2)

    def close(self) -> None:
        self.f.close()


class LogPump:
    """A replica's output through a pipe into its ``CappedLog`` (the command writes to the pipe, never to the file,
    so the cap holds whatever it prints); the supervisor pumps it from its loop."""

    def __init__(self, log: CappedLog) -> None:
        self.log = log
        self.r, self.w = os.pipe()  # neither is inherited but as the command's stdout and stderr
        os.set_blocking(self.r, False)

    def started(self) -> None:
        """The command has its end of the pipe (or could not start): close ours, so its exit ends the output."""
        if self.w >= 0:
            os.close(self.w)
            self.w = -1

    def fds(self) -> list[int]:
        return [self.r] if self.r >= 0 else []

    def pump(self, most: int = 16) -> None:
        """Move up to ``most`` chunks from the pipe to the log (a write that fails, e.g. on a full disk, loses
        that output: it never stops the replica)."""
        for _ in range(most):
            if self.r < 0:
                return
            try:
                data = os.read(self.r, CHUNK)
            except BlockingIOError:
                return
            if not data:
                os.close(self.r)
                self.r = -1
                return
            try:
                self.log.write(data)
            except OSError:
                pass

    def drain(self) -> None:
        """What is left in the pipe (the command and its processes have ended), bounded: 16 MiB."""
        self.started()
        self.pump(most=256)

    def close(self) -> None:
        self.started()
        if self.r >= 0:
            os.close(self.r)
            self.r = -1


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "bytes" else f"{n} bytes"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"


def output_start(f: Any) -> tuple[int, int]:
    """Of an open log: how many bytes of the output were dropped before what it holds, and where in the file the
    output it holds starts (after the line that says so); ``(0, 0)`` for a log never over its cap."""
    f.seek(0)
    m = DROPPED.match(f.read(200))
    return (int(m.group(1)), m.end()) if m else (0, 0)


def output_end(path: Path) -> int:
    """The offset in the output of the end of the log at ``path`` (what was dropped counted): 0 without one."""
    try:
        with open(path, "rb") as f:
            dropped, head = output_start(f)
            return dropped + f.seek(0, 2) - head
    except OSError:
        return 0


def read_output(path: Path, at: int, most: int) -> tuple[bytes, int]:
    """At most ``most`` bytes of the output of the log at ``path`` from ``at`` (an offset in the output: what its
    replica wrote, the lines fairpod put in included, not in the file, which a rotation writes again), and the
    offset after them. Output dropped before it was read is skipped."""
    try:
        with open(path, "rb") as f:
            dropped, head = output_start(f)
            end = f.seek(0, 2)
            pos = head + max(0, at - dropped)
            if pos >= end:
                return b"", max(at, dropped + end - head)
            f.seek(pos)
            data = f.read(most)
            return data, dropped + pos - head + len(data)
    except OSError:
        return b"", at
TAIL_SCAN_MAX = 16 << 20  # bytes read back from the end looking for the last lines: a longer tail starts there


def tail_start(f: Any, lines: int, scan_max: int = TAIL_SCAN_MAX) -> int:
    """Where the last ``lines`` lines of the open file ``f`` start, found by reading back from its end in ``CHUNK``s
    (at most ``scan_max`` bytes: lines longer than that start the tail ``scan_max`` bytes before the end); 0 when
    the file has fewer lines."""
    end = pos = f.seek(0, 2)
    seen = 0
    while pos > 0 and end - pos < scan_max:
        step = min(CHUNK, pos, scan_max - (end - pos))
        pos -= step
        f.seek(pos)
        block = f.read(step)
        if pos + step == end and block.endswith(b"\n"):
            block = block[:-1]  # the last line's own newline
        i = len(block)
        while (i := block.rfind(b"\n", 0, i)) >= 0:
            seen += 1
            if seen == lines:
                return pos + i + 1
    return pos


def byte_range(header: str, size: int) -> tuple[int, int] | None:
    """An HTTP ``Range: bytes=`` header (RFC 9110, one range) as ``(first, last)`` inclusive within ``size``;
    ValueError when it is not one byte range; None when the range is unsatisfiable."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec or "-" not in spec:
        raise ValueError(f"Range {header!r}: give one byte range, e.g. bytes=0-1023, bytes=1024- or bytes=-1024")
    a, _, b = (x.strip() for x in spec.partition("-"))
    if not (a.isdigit() or a == "") or not (b.isdigit() or b == "") or a == b == "":
        raise ValueError(f"Range {header!r}: give one byte range, e.g. bytes=0-1023, bytes=1024- or bytes=-1024")
    if a == "":  # the last b bytes
        n = int(b)
        return (size - min(n, size), size - 1) if n and size else None
    first = int(a)
    last = min(int(b), size - 1) if b else size - 1
    if first >= size or (b and int(b) < first):
        return None
    return first, last


def read_chunks(path: Path, start: int, stop: int | None = None) -> Iterator[bytes]:
    """The bytes of ``path`` from ``start`` to ``stop`` (exclusive; the end by default), ``CHUNK`` at a time."""
    with open(path, "rb") as f:
        f.seek(start)
        left = None if stop is None else stop - start
        while left is None or left > 0:
            chunk = f.read(CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk


def follow_log(
    path: Path,
    *,
    stop: Callable[[], bool] | None = None,
    poll_interval: float = 0.25,
    from_start: bool = True,
) -> Iterator[str]:
    """Yield the text of ``path`` as it is written, waiting for the file if it does not exist yet.

    Ends once ``stop()`` is true and everything written before that has been yielded; with ``stop=None``
    it follows until the caller stops iterating. ``from_start=False`` skips what the file already holds.
    Undecodable bytes become U+FFFD. Past the first read, offsets count the output (``read_output``): a log
    written again over its cap is read on from where the reader was, nothing twice.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    at: int | None = None  # the offset in the output read up to, once the file was first read
    while True:
        done = stop is not None and stop()  # sample before reading, so nothing written before is missed
        if at is None:
            try:
                with open(path, "rb") as f:
                    dropped, head = output_start(f)
                    size = f.seek(0, 2)
                    if from_start:
                        f.seek(0)
                        while f.tell() < size and (chunk := f.read(min(CHUNK, size - f.tell()))):
                            if text := decoder.decode(chunk):
                                yield text
                    at = dropped + size - head
            except FileNotFoundError:
                pass
        while at is not None:
            chunk, at = read_output(path, at, CHUNK)
            if not chunk:
                break
            if text := decoder.decode(chunk):
                yield text
        if done:
            if tail := decoder.decode(b"", final=True):
                yield tail
            return
        time.sleep(poll_interval)
