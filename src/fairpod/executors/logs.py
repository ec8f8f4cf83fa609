"""Reading replica logs while they grow (``get-logs NAME --follow``)."""

from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator
from pathlib import Path

CHUNK = 64 * 1024


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
