"""Running the control plane on this machine: ``fairpod up`` (start, in the background by default) and
``fairpod down`` (stop it cleanly). Replicas keep running while the control plane is down and are adopted
again when it comes back. Where the files go: :mod:`fairpod.paths`. The server itself is put together by
:mod:`fairpod.server.runtime.wiring`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from fairpod.executors import procs, registry, state
from fairpod.model.spec import ClusterSpec, SpecError, load_spec, parse_spec, seed_spec
from fairpod.model.users import Role
from fairpod.paths import db_url, fairpod_home
from fairpod.server.access import identity
from fairpod.server.errors import DomainError, WrongState
from fairpod.server.ha.leader import HaSettings
from fairpod.server.nodes import sync_nodes
from fairpod.server.runtime import cli_config, heap
from fairpod.server.runtime.startup import (
    LOOPBACK,
    START_ERRORS,
    check_advertise_address,
    check_state,
    child_failure,
    forget_new_database,
    new_database,
    start_failure,
    start_limit,
    wait_started,
)
from fairpod.server.runtime.workers import Workers, stop_leftovers
from fairpod.store import Store, Unreachable

DEFAULT_PORT = 8470


def detect_cluster() -> ClusterSpec:
    """This machine as a cluster: one node of its NVIDIA GPUs (found through NVML, else nvidia-smi) in real-GPU
    mode, typed from the catalog when the GPU model and count match one (8 x H100 80GB -> ml.p5.48xlarge), else
    ``local-<model>``; without GPUs, the seed demo cluster."""
    from fairpod.executors.nvml import read_gpus
    from fairpod.model.catalog import match_instance_type

    gpus, source = read_gpus()
    if not gpus:
        return seed_spec()
    name, cpus = gpus[0].name, os.cpu_count() or 1
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    known = match_instance_type(name, len(gpus), cpus)
    types = []
    if known is None:
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower().removeprefix("nvidia ")).strip("-")[:40] or "gpu"
        itype = f"local-{slug}"
        types = [{"name": itype, "accelerators": len(gpus), "vcpu": cpus, "memory_gib": max(1, int(mem)),
                  "accelerator_kind": name}]
    else:
        itype = known.name
    logging.getLogger("fairpod").info("found %d x %s through %s: one node of %s", len(gpus), name, source, itype)
    return parse_spec({
        "cluster": {"name": "local", "instance_groups": [
            {"name": "local", "instance_type": itype, "count": 1, "accelerators_are": "gpus"}]},
        "instance_types": types,
        "teams": [{"name": "default", "quota": [{"instance_type": itype, "count": 1}]}],
    })  # fmt: skip


STATE_FILES = ("fairpod.db", "fairpod.db-wal", "fairpod.db-shm", "server.log", "server.pid", "server.lock")


def secure_home(home: Path, searchable: bool | None = None) -> None:
    """Make fairpod's state private to its user: the home 0700 (0701 when ``searchable``: the spec has a
    ``run_as`` user who must reach its checkpoints, see sandbox.environment; None keeps the search bit as it
    is), state files 0600, everything under ``runs/`` 0700/0600; and every file this process creates from
    now on is private (umask 077)."""
    os.umask(0o077)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    keep = home.stat().st_mode & 0o001 if searchable is None else (0o001 if searchable else 0)
    os.chmod(home, 0o700 | keep)
    for name in STATE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(home / name, 0o600)
    runs = home / "runs"
    if runs.is_dir():
        for top, _dirs, files in os.walk(runs):
            os.chmod(top, 0o700)
            for f in files:
                with contextlib.suppress(FileNotFoundError):
                    os.chmod(os.path.join(top, f), 0o600)


def initialize(home: Path, url: str, spec_file: str | None, port: int,
               shared: bool = False, wait: bool = False) -> tuple[Store, str | None]:
    """Create the database on first start; apply ``spec_file`` if given; create the admin user and token.
    ``shared`` (``--ha``: a leader may be running): a spec file is applied to a new database only. ``wait``: a
    leader that stepped down as it lost the database waits for it as a standby (``_create``)."""
    secure_home(home, None)
    store = Store(url)
    _create(store, wait)
    rec = store.get_spec()
    spec: ClusterSpec | None = None
    if spec_file:
        spec = load_spec(spec_file)
    elif rec is None:
        spec = detect_cluster()
    if spec is not None and rec is not None and rec.spec != spec and shared:
        raise WrongState("with --ha, --spec applies only to a new database; this one has a spec: change it "
                         "through the leader with 'fairpod apply'", "spec exists")
    if spec is not None and (rec is None or rec.spec != spec):
        active = store.unfinished_teams()
        gone = sorted(active - {t.name for t in spec.teams})
        if gone:
            raise WrongState(f"team(s) {', '.join(gone)} still have unfinished jobs", "team has jobs")
        with store.tx() as t:  # one transaction: 10,000 nodes are one commit, not 10,000
            sync_nodes(t, spec)
        store.put_spec(spec, actor="fairpod up", action="spec.apply" if rec is None else "up --spec")
    current = spec or (rec.spec if rec is not None else None)
    if current is not None:
        secure_home(home, identity.other_users(current))
    token = None
    if store.get_user("admin") is None:
        store.create_user("admin", Role.ADMIN, [])
        token = store.issue_token("admin", "created by fairpod up")
        store.append_audit("fairpod", "user.create", "admin", {"role": "admin"})
    return store, token


def _create(store: Store, wait: bool) -> None:
    """``store.create_all``; with ``wait``, until the database answers (again at 0.5, 1, 2, 4 s, then every 5 s)."""
    for pause in itertools.chain((0.5, 1.0, 2.0, 4.0), itertools.repeat(5.0)):
        try:
            return store.create_all()
        except Unreachable as e:
            if not wait:
                raise
            print(f"fairpod: {e}; a standby waits for it: trying again in {pause:g} s", file=sys.stderr, flush=True)
            time.sleep(pause)


def pid_file(home: Path) -> Path:
    return home / "server.pid"


def write_pid(home: Path, port: int) -> None:
    """``server.pid``: "<pid> <port> <start time>", so a later reader can tell our server from a process that
    got the same PID after it died."""
    me = os.getpid()
    state.write_atomic(pid_file(home), f"{me} {port} {procs.start_time(me)}\n")


def forget_pid(home: Path) -> None:
    """``server.pid`` removed when it is this process's."""
    with contextlib.suppress(OSError, IndexError):
        if pid_file(home).read_text().split()[0] == str(os.getpid()):
            pid_file(home).unlink()


def read_pid(home: Path) -> tuple[int, int] | None:
    """(pid, port) of the running control plane, or None. The recorded PID counts only while that process
    is alive, not a zombie, and started when the file says (or, for a file without a start time, answers
    /healthz on the recorded port with that PID); a stale file is removed."""
    path = pid_file(home)
    try:
        parts = path.read_text().split()
        pid, port = int(parts[0]), int(parts[1])
        started = int(parts[2]) if len(parts) > 2 else None
    except (OSError, ValueError, IndexError):
        return None
    if procs.alive(pid, started) and (started is not None or _healthz_pid(port) == pid):
        return pid, port
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def _healthz_pid(port: int) -> int | None:
    import httpx

    try:
        return int(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).json().get("pid"))
    except (httpx.HTTPError, ValueError, TypeError, AttributeError):
        return None


def executor_config(kind: str | None, given: dict[str, str | None],
                    spec: ClusterSpec | None) -> tuple[str, dict[str, str]]:
    """(kind, its own options: fairpod.executors.registry): the command line's (``given``; an option names its
    executor), else the spec's ``cluster.executor`` (where it names that executor), else the defaults."""
    ex = spec.cluster.executor if spec is not None else None
    owners = [k for k in registry.KINDS.values() if any(given.get(o.name) for o in k.options)]
    if kind is None:
        kind = owners[0].name if owners else (ex.kind if ex is not None else "local")
    for other in (k for k in owners if k.name != kind):
        raise ValueError(f"{' and '.join(o.flag for o in other.options)} go with --executor {other.name}")
    from_spec = ex is not None and ex.kind == kind
    options = {o.name: given.get(o.name) or (getattr(ex, o.name) if from_spec else o.default)
               for o in registry.get(kind).options}
    check = registry.get(kind).check
    if check is not None:  # the executor's own options (Ray's address and namespace)
        check(**options)
    return kind, options


def api_url(address: str, port: int) -> str:
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def _listen(addresses: list[str], port: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    for address in dict.fromkeys(addresses):
        s = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it: without it every response waits ~40 ms on Nagle + delayed ACK
        # (asyncio sets it only on sockets it binds itself)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.bind((address, port))
        except OSError as e:
            s.close()
            for other in socks:
                other.close()
            raise SystemExit(f"fairpod: error: cannot listen on {address}:{port}: {e.strerror or e}") from None
        socks.append(s)
    return socks


def serve(home: Path, url: str, port: int, executor_name: str = "local", options: dict[str, str] | None = None,
          advertise: str = "127.0.0.1", ha: HaSettings | None = None, api_workers: int = 0) -> None:
    """Run the control plane in the foreground until SIGTERM/SIGINT; with ``api_workers``, the core on a private
    loopback port and that many API worker processes on ``port`` (:mod:`fairpod.server.runtime.workers`)."""
    import uvicorn

    from fairpod.executors.base import ExecutorError
    from fairpod.server.runtime.wiring import build, make_executor

    secure_home(home)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if ha is not None:  # standby until elected (server.ha.ha_serve)
        from fairpod.server.ha.ha_serve import serve_ha

        socks = _listen([LOOPBACK, advertise], port)
        write_pid(home, port)
        ha_pool = None
        if api_workers:  # every node's, leader or standby: their executor is the one the leader recorded
            ha_pool, socks = Workers.fronting(home, api_workers, socks, _listen([LOOPBACK], 0), url, None)
        serve_ha(home, url, port, socks, executor_name, options or {}, api_url(advertise, port), ha, ha_pool)
        return
    try:  # first thing, so that 'fairpod down' stops a server still starting (one that waits on Ray's nodes)
        write_pid(home, port)
    except START_ERRORS as e:  # a full disk: one line
        raise SystemExit(start_failure(home, e)) from None
    try:
        executor = make_executor(home, executor_name, options)
    except (ExecutorError, ValueError) as e:
        forget_pid(home)
        raise SystemExit(f"fairpod: error: {e}") from None
    socks = _listen([LOOPBACK, advertise], port)
    pool = None
    if api_workers:  # the public sockets are the workers'; the core serves a private port
        # started before the core builds its memory (seconds at datacenter size), on the other cores: what they
        # forward answers 502 until the core serves (/healthz too); docs/architecture.md "API workers"
        pool, socks = Workers.fronting(home, api_workers, socks, _listen([LOOPBACK], 0), url, executor)
        pool.start()
    try:  # the memory's recovery writes the store: a full disk is one line
        rt = build(home, url, executor, api_url(advertise, port), own_heap=True, api_workers=api_workers > 0)
    except BaseException as e:
        if pool is not None:
            pool.stop()
        if not isinstance(e, START_ERRORS):
            raise
        executor.close()
        forget_pid(home)
        raise SystemExit(start_failure(home, e)) from None
    unix, http, unix_path = identity.serve_unix(rt.cp.spec, port)  # cluster.identity unix: users known by uid
    rt.start()
    config = uvicorn.Config(rt.app, host=LOOPBACK, port=port, log_level="warning", access_log=False, http=http)
    server = uvicorn.Server(config)
    try:
        if pool is not None:
            pool.wakes.listen(rt.cp.wake.set)  # a worker's commit wakes the loop (server.runtime.wakes)
        server.run(sockets=socks + unix)  # 127.0.0.1, and the advertised address
    finally:
        if pool is not None:
            pool.stop()
        rt.close()
        identity.remove(unix_path)
        forget_pid(home)


def can_listen(addresses: list[str], port: int) -> str | None:
    """None when this process could listen on ``port`` at every address; else the one line that says why not
    (checked before ``up`` writes anything, so a clash leaves the home and the CLI config untouched)."""
    try:
        socks = _listen(addresses, port)
    except SystemExit as e:
        return str(e.code)
    for s in socks:
        s.close()
    return None


def up(port: int, spec_file: str | None, db: str | None, executor: str | None, foreground: bool,
       given: dict[str, str | None] | None = None, advertise_address: str | None = None,
       ha: HaSettings | None = None, api_workers: int = 0) -> int:  # given: the executors' options (registry)
    try:
        advertise = check_advertise_address(advertise_address)
        if ha is not None:
            ha.check()
        limit = start_limit(os.environ.get("FAIRPOD_START_LIMIT"))
        heap.thresholds(os.environ.get("FAIRPOD_GC_THRESHOLDS"))  # the server sets them (heap.watch)
    except ValueError as e:
        print(f"fairpod: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # its own line already
        print(e, file=sys.stderr)
        return 2
    home = fairpod_home()
    if ha is not None and not db_url(home, db).startswith("postgresql"):
        print("fairpod: error: --ha (standby control planes) needs a PostgreSQL database (--db or FAIRPOD_DB_URL "
              "postgresql+psycopg://…); SQLite serves a single control plane", file=sys.stderr)
        return 2
    running = read_pid(home)
    restarted = bool(running and running[0] == os.getpid())  # a leader that stepped down, now a standby
    running = None if restarted else running
    if running:
        print(f"fairpod is already running (pid {running[0]}) at http://127.0.0.1:{running[1]}")
        return 0
    if not restarted and (left := stop_leftovers(home)):  # a core killed -9 left API workers on the port
        print(f"fairpod: stopped API workers a killed server left: pid {', '.join(map(str, left))}", file=sys.stderr)
    why = can_listen([LOOPBACK, advertise], port)
    if why is not None:
        holder = _healthz_pid(port)
        hint = (f" (fairpod pid {holder} of another FAIRPOD_HOME holds it)" if holder is not None else "")
        print(f"{why}{hint}; choose another --port", file=sys.stderr)
        return 1
    url = db_url(home, db)
    made = new_database(url)
    try:
        check_state(home, url)
        store, token = initialize(home, url, spec_file, port, ha is not None, wait=restarted)
        rec = store.get_spec()
        store.close()
    except START_ERRORS as e:  # every read and write of the start: one line
        forget_new_database(made)
        print(start_failure(home, e), file=sys.stderr)
        return 1
    except SpecError as e:
        for prob in e.problems:
            print(f"error: {prob}", file=sys.stderr)
        return 1
    except DomainError as e:
        print(f"fairpod: error: {e.detail}", file=sys.stderr)
        return 1
    try:
        executor, options = executor_config(executor, given or {}, rec.spec if rec else None)
    except ValueError as e:
        print(f"fairpod: error: {e}", file=sys.stderr)
        return 2 if "go with --executor" in str(e) else 1
    reach = registry.get(executor).reach
    if reach is not None:  # the executor's cluster, reached before anything is started (Ray)
        from fairpod.executors.base import ExecutorError

        try:
            options = reach(**options)
        except ExecutorError as e:
            print(f"fairpod: error: {e}", file=sys.stderr)
            return 1
    server_url = f"http://127.0.0.1:{port}"
    try:
        if token:
            print(f"created the admin user; its token is in {cli_config.write_own_config(server_url, token, home)}")
        else:
            cli_config.update_config_url(server_url, home)
        log = None if foreground else open(home / "server.log", "ab")  # noqa: SIM115 - handed to the child
    except OSError as e:
        print(start_failure(home, e), file=sys.stderr)
        return 1
    if log is None:  # --foreground
        serve(home, url, port, executor, options, advertise, ha, api_workers)
        return 0
    cmd = [sys.executable, "-m", "fairpod.cli.main", "up", "--foreground", "--port", str(port), "--executor", executor]
    for o in registry.get(executor).options:
        cmd += [o.flag, options[o.name]]
    if db:
        cmd += ["--db", db]
    if advertise != LOOPBACK:
        cmd += ["--advertise-address", advertise]
    if ha is not None:
        cmd += ["--ha", "--lease-seconds", f"{ha.lease:g}"]
    if api_workers:
        cmd += ["--api-workers", str(api_workers)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    if not wait_started(port, proc, home, limit):
        ended = proc.poll() is not None
        if not ended:
            print(f"fairpod: error: the server did not answer within {limit:g} s (FAIRPOD_START_LIMIT); "
                  f"stopping it (pid {proc.pid})", file=sys.stderr)
            procs.stop(proc.pid, procs.start_time(proc.pid), 30.0)
            proc.wait()
            stop_leftovers(home)
        print(child_failure(home, ended), file=sys.stderr)
        return 1
    assert rec is not None
    total = sum(c.acc for c in rec.spec.capacity().values())
    said = registry.get(executor).where
    where = said(**options) if said is not None else f"{total} accelerators"
    print(f"fairpod is up (pid {proc.pid}): cluster {rec.spec.cluster.name}, {where}, {len(rec.spec.teams)} teams")
    print(f"  API:       {server_url}/api/v1   (docs: {server_url}/docs)")
    print(f"  dashboard: {server_url}/")
    if advertise != LOOPBACK:
        print(f"  replicas:  {api_url(advertise, port)}   (--advertise-address)")
    print(f"  state:     {home}")
    if ha is not None:
        print(f"  HA:        {api_url(advertise, port)} takes part in the election (lease {ha.lease:g} s); "
              "'fairpod status' shows who leads")
    if registry.on_this_host(executor):
        from fairpod.sandbox import capabilities

        print(f"  enforced:  {capabilities.host().line()}")
    from fairpod import native

    print(f"  engine:    {native.on_start()}")
    print("  stop it with: fairpod down")
    return 0


def down(timeout: float = 30.0) -> int:
    home = fairpod_home()
    running = read_pid(home)
    if not running:
        print("fairpod is not running")
        return 0
    pid = running[0]
    stopped = procs.stop(pid, procs.start_time(pid), timeout)
    if left := stop_leftovers(home):  # those its core did not stop (it was killed)
        print(f"stopped API workers the server left: pid {', '.join(map(str, left))}")
    if stopped:
        print(f"fairpod stopped (pid {pid}); running jobs keep running and are adopted by the next 'fairpod up'")
        return 0
    print(f"fairpod did not stop within {timeout:g} s and was killed (pid {pid})")
    return 1
