"""Turns at SQLite's write lock among the writers of one home (fairpod.store.writers): a real flock on a file of the
test's own, held by another descriptor (as another process holds it), by a thread, by a process killed -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from fairpod.store import Store
from fairpod.store.writers import WritersTurn, writers_turn

from ..server.conftest import wait_for


def test_a_writer_waits_while_another_holds_the_turn_and_goes_once_it_is_let_go(tmp_path: Path) -> None:
    mine, other = writers_turn(tmp_path), writers_turn(tmp_path)  # two descriptors: as two processes
    entered = threading.Event()
    let_go = threading.Event()

    def hold() -> None:
        with other.held():
            entered.set()
            let_go.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(30)
    got = threading.Event()
    w = threading.Thread(target=lambda: (mine.held().__enter__(), got.set()))
    w.start()
    wait_for(lambda: mine._depth == 1, 30, "the second writer to wait for its turn")
    assert not got.is_set()
    let_go.set()
    assert got.wait(30)
    t.join(30)
    w.join(30)


def test_a_write_inside_a_write_of_the_same_thread_waits_for_nothing(tmp_path: Path) -> None:
    turn = writers_turn(tmp_path)
    with turn.held(), turn.held():
        assert turn._depth == 2
    assert turn._depth == 0
    with writers_turn(tmp_path).held():  # let go: another takes it at once
        pass


def test_a_thread_that_holds_the_turn_too_long_does_not_stop_the_others_for_ever(tmp_path: Path) -> None:
    """Past ``patience`` another thread of the process goes on to SQLite's lock, whose busy timeout bounds the wait
    as before the turns (a thread holding a write transaction that waits for something the other holds would
    otherwise wait for ever)."""
    turn = WritersTurn(tmp_path / "t.lock", patience=0.1)
    holding = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with turn.held():
            holding.set()
            done.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert holding.wait(30)
    with turn.held():
        assert turn._depth == 1  # the holder's; this thread went past without it
    done.set()
    t.join(30)


def test_a_process_killed_while_it_holds_the_turn_lets_it_go(tmp_path: Path) -> None:
    code = ("import fcntl, os, sys, time\n"
            f"fd = os.open({str(tmp_path / 'submit-writers.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"held\n"
        got = threading.Event()
        turn = writers_turn(tmp_path)
        threading.Thread(target=lambda: (turn.held().__enter__(), got.set()), daemon=True).start()
        wait_for(lambda: turn._depth == 1, 30, "the writer to wait for its turn")
        assert not got.is_set()
        os.kill(p.pid, signal.SIGKILL)
        assert got.wait(30)
    finally:
        p.kill()
        p.wait(30)


def test_a_stores_write_transactions_take_the_turn(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'fairpod.db'}")
    store.create_all()
    store.turn = writers_turn(tmp_path)
    other = writers_turn(tmp_path)
    seen: list[int] = []
    with other.held():
        t = threading.Thread(target=lambda: (store.set_meta("k", "v"), seen.append(1)))
        t.start()
        wait_for(lambda: store.turn is not None and store.turn._depth == 1, 30, "the store's write to wait")
        assert not seen
    t.join(30)
    assert seen == [1] and store.get_meta("k") == "v"
    assert store.turn._depth == 0
    store.list_jobs()  # a read takes no turn
    store.close()
