"""A replica's log within its cap (fairpod.executors.logs.CappedLog): the older half dropped and said so, readers
that count offsets in the output read on across a rotation without reading anything twice."""

from __future__ import annotations

from pathlib import Path

from fairpod.executors.logs import CappedLog, follow_log, output_end, read_output


def test_a_log_over_its_cap_keeps_its_newer_half_and_says_how_much_was_dropped(tmp_path: Path) -> None:
    path, cap = tmp_path / "output.log", 1 << 20
    log = CappedLog(path, cap)
    lines = [f"line {i:07d}\n".encode() for i in range(300_000)]  # 4.2 MB of output
    read, at = b"", 0
    for i in range(0, len(lines), 1000):
        log.write(b"".join(lines[i:i + 1000]))
        assert path.stat().st_size <= cap + 200
        data, at = read_output(path, at, 1 << 30)  # a reader that keeps up
        read += data
    log.close()
    assert read == b"".join(lines)  # nothing lost, nothing twice, across every rotation
    first, *kept = path.read_bytes().splitlines(keepends=True)
    dropped = int(first.split()[2])
    assert first.startswith(b"==== fairpod: ") and b"bytes of older output dropped" in first
    assert b"".join(lines)[dropped:] == b"".join(kept) and kept[-1] == lines[-1]  # the tail, from a line's start
    assert output_end(path) == sum(map(len, lines))


def test_a_reader_behind_a_rotation_skips_what_was_dropped(tmp_path: Path) -> None:
    path = tmp_path / "output.log"
    log = CappedLog(path, 1 << 20)
    for i in range(5):
        log.write(bytes([65 + i]) * (400 << 10) + b"\n")
    data, at = read_output(path, 10, 1 << 30)
    assert at == output_end(path) and data.endswith(b"E" * 100 + b"\n") and not data.startswith(b"A")
    text = "".join(follow_log(path, stop=lambda: True))
    assert text.startswith("==== fairpod: ") and text.endswith("E\n")
