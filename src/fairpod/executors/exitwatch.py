"""Exits of supervisors as they happen: a daemon thread waits on their pidfds (epoll) and calls ``notify()``
when one exits, so the local executor's owner collects exits without waiting a tick."""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable


class ExitWatch:
    """A daemon thread that waits on pidfds of supervisors and calls ``notify()`` when one exits. While a
    supervisor is watched and its pidfd has not fired, it is known to run (``watching``): ``poll`` need not
    read its files."""

    def __init__(self) -> None:
        self._notify: Callable[[], None] | None = None
        self._epoll: select.epoll | None = None
        self._fds: set[int] = set()
        self._pids: dict[int, int] = {}  # fd -> the supervisor's pid, until it exits
        self._live: set[int] = set()  # pids of watched supervisors that have not exited
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self, notify: Callable[[], None]) -> bool:
        self._notify = notify
        if self._thread is not None or not hasattr(os, "pidfd_open"):
            return False
        try:
            self._epoll = select.epoll()
        except OSError:
            return False
        self._thread = threading.Thread(target=self._run, name="fairpod-exit-watch", daemon=True)
        self._thread.start()
        return True

    def add(self, pid: int) -> bool:
        """Watch ``pid``; False when it is not watched (no watcher, or it is gone already)."""
        if self._epoll is None or self._stopped:
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # already gone (and reaped): there is an exit to collect
            if self._notify is not None:
                self._notify()
            return False
        with self._lock:
            self._fds.add(fd)
            self._pids[fd] = pid
            self._live.add(pid)
            self._epoll.register(fd, select.EPOLLIN)
        return True

    def watching(self, pid: int) -> bool:
        """Whether ``pid`` is watched and has not exited (its pidfd has not fired)."""
        return pid in self._live

    def _run(self) -> None:
        ep = self._epoll
        assert ep is not None
        while not self._stopped:
            try:
                ready = ep.poll(1.0)
            except (OSError, ValueError):  # closed under us by stop()
                return
            if not ready:
                continue
            with self._lock:
                for fd, _ in ready:
                    if fd in self._fds:
                        self._fds.discard(fd)
                        self._live.discard(self._pids.pop(fd, -1))
                        ep.unregister(fd)
                        os.close(fd)
            if self._notify is not None:
                self._notify()

    def stop(self) -> None:
        self._stopped = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
            self._pids.clear()
            self._live.clear()
            if self._epoll is not None:
                self._epoll.close()
                self._epoll = None
