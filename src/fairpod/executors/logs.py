"""Reading replica logs while they grow (``get-logs NAME --follow``), and parts of them without reading the rest:
the last lines (``tail_start``), a byte range (``byte_range``). Readers hold at most ``CHUNK`` bytes at a time."""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator
from pathlib import Path

CHUNK = 64 * 1024
TAIL_SCAN_MAX = 16 << 20  # bytes read back from the end looking for the last lines: a longer tail starts there


def tail_start(path: Path, lines: int, scan_max: int = TAIL_SCAN_MAX) -> int:
    """Where the last ``lines`` lines of ``path`` start, found by reading back from its end in ``CHUNK``s (at most
    ``scan_max`` bytes: lines longer than that start the tail ``scan_max`` bytes before the end); 0 when the file
    has fewer lines or is not there."""
    try:
        with open(path, "rb") as f:
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
    except OSError:
        return 0


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
    Undecodable bytes become U+FFFD; a truncated file is read again from its start.
    """
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    pos = -1 if not from_start else 0
    while True:
        done = stop is not None and stop()  # sample before reading, so nothing written before is missed
        try:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                if pos < 0 or size < pos:
                    pos = size if pos < 0 else 0
                f.seek(pos)
                while chunk := f.read(CHUNK):
                    pos += len(chunk)
                    if text := decoder.decode(chunk):
                        yield text
        except FileNotFoundError:
            pos = max(pos, 0)
        if done:
            if tail := decoder.decode(b"", final=True):
                yield tail
            return
        time.sleep(poll_interval)
