"""``fairpod up --ha``: a control plane that stands by until it wins the lease, then leads
(:mod:`fairpod.server.ha.leader`); docs/ha.md.

While it stands by it serves :class:`fairpod.server.ha.ha_app.HaApp` only (the leader's address, the election's
state). When it wins, it builds the runtime as a single control plane would (:func:`fairpod.server.runtime.wiring.build`,
whose recovery rebuilds the memory from the store and re-attaches to the running replicas), fenced by the
lease, and serves it. When it must step down it logs why and execs itself again, so it comes back as a standby
with nothing of the old memory.

With ``--api-workers N`` every node, leader or standby, runs its workers on the public port
(:mod:`fairpod.server.runtime.workers`) and serves its own app on a private loopback port behind them: a standby's
workers commit submits to the database (the leader takes them in; the commit's ``NOTIFY`` wakes it) and answer
list-jobs and get-job from it, and pass the rest to this node's app, which answers as a standby does. Before it
execs itself on stepping down, a node stops its workers by PID and waits for them: ``exec`` keeps its PID; their
``PR_SET_PDEATHSIG`` does fire (exec ends the thread that started them), but nothing would wait for one still
shutting down to let go of the port the new image binds.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fairpod.server.access import identity
from fairpod.server.ha.ha_app import HaApp
from fairpod.server.ha.leader import Elector, HaSettings

log = logging.getLogger("fairpod.leader")


def _restart_as_standby(why: str) -> None:
    log.error("restarting as a standby (%s)", why)
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    args = list(sys.orig_argv[1:])
    if "--spec" in args:  # applied at the first start; the spec may have changed through the API since
        at = args.index("--spec")
        del args[at:at + 2]
    os.execv(sys.executable, [sys.executable, *args])


def lead(home: Path, url: str, elector: Elector, app: HaApp, executor_name: str, options: dict[str, str],
         my_url: str) -> Any:
    """Build and start the runtime of a new leader; None if it stepped down meanwhile."""
    from fairpod.server.runtime.wiring import build, make_executor
    from fairpod.store import lease

    t0 = time.monotonic()
    executor = make_executor(home, executor_name, options, exclusive=False)
    with elector.engine.connect() as conn:  # replicas get every address, this one first (the SDK follows)
        others = [m.url for m in lease.members(conn)[0] if m.url != my_url]
    rt = build(home, url, executor, ",".join([my_url, *others]), elector=elector, own_heap=True)
    rt.start()
    app.inner = rt.app
    took = time.monotonic() - t0
    elector.counters.takeovers.append(took)
    prev = elector.previous
    after = f" after {prev.holder} (epoch {prev.epoch})" if prev is not None and prev.holder != elector.node else ""
    rt.store.append_event("LeaderElected", f"{elector.node} leads at epoch {elector.epoch}{after}; memory rebuilt "
                          f"from the store and replicas re-attached in {took:.2f} s",
                          data={"node": elector.node, "url": my_url, "epoch": elector.epoch,
                                "previous": prev.holder if prev else None, "rebuild_seconds": round(took, 3),
                                "lease_seconds": elector.settings.lease})

    def late(gap: float) -> None:
        try:
            rt.store.append_event("LeaseRenewalLate", f"{elector.node} renewed its lease {gap:.1f} s after the "
                                  f"previous renewal (every {elector.settings.renew:g} s; the lease lasts "
                                  f"{elector.settings.lease:g} s)", data={"node": elector.node, "gap_seconds": gap})
        except Exception as e:  # a fenced or failed write: the metric and the log still say it
            log.warning("could not record the late renewal: %s", e)

    elector.on_late = late
    log.warning("leading: serving as the control plane after %.2f s of recovery", took)
    return rt


def _stored_spec(url: str) -> Any:
    """The cluster spec in the database (applied by the first ``fairpod up --ha --spec``; ``fairpod up`` has
    written one before it serves)."""
    from fairpod.store import Store

    store = Store(url)
    try:
        rec = store.get_spec()
    finally:
        store.close()
    if rec is None:
        raise SystemExit("fairpod: error: the database holds no cluster spec: start one control plane with --spec")
    return rec.spec


def serve_ha(home: Path, url: str, port: int, socks: list[Any], executor_name: str, options: dict[str, str],
             my_url: str, settings: HaSettings, pool: Any = None) -> None:
    """Stand by, lead when elected, until SIGTERM/SIGINT (then the lease is given up at once). ``pool``
    (``--api-workers N``): the :class:`~fairpod.server.runtime.workers.Workers` on the public sockets, leader or
    standby; ``socks`` are then this node's private port (docs/ha.md)."""
    import uvicorn

    if pool is not None:
        pool.start_when_known()
    # cluster.identity unix: every control plane serves its host's Unix socket, leader or standby: the leader
    # answers it as a single control plane does, a standby names the leader (the CLI follows it with MUNGE)
    unix, http, unix_path = identity.serve_unix(_stored_spec(url), port)
    socks = [*socks, *unix]

    elector = Elector(url, my_url, my_url, settings)
    app = HaApp(elector)
    runtime: list[Any] = []

    def won(_epoch: int) -> None:
        def go() -> None:
            try:
                rt = lead(home, url, elector, app, executor_name, options, my_url)
            except Exception as e:  # a fenced recovery, or the executor cannot be had: stand by again
                log.exception("could not take over")
                elector.step_down(f"the takeover failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
                return
            runtime.append(rt)

        threading.Thread(target=go, name="fairpod-takeover", daemon=True).start()

    def step_down(why: str) -> None:
        if pool is not None:  # ended and waited for: the image exec'd next binds the port they serve
            pool.stop()
        _restart_as_standby(why)

    elector.on_lead = won
    elector.on_step_down = step_down
    log.info("standing by for the lease (%g s, renewed every %g s) as %s", settings.lease, settings.renew, my_url)
    elector.start()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, http=http)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=socks)
    finally:
        if pool is not None:
            pool.stop()
        identity.remove(unix_path)
        for rt in runtime:
            rt.close()
        elector.stop(release=True)
