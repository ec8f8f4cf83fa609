"""``fairpod up`` and ``fairpod down``: run the control plane on this machine; ``fairpod api``: its API on
another host (a PostgreSQL database shared with the core)."""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

DEFAULT_PORT = 8470  # fairpod.server.runtime.daemon.DEFAULT_PORT (the server is imported only when it starts)


def _up(a: argparse.Namespace) -> Any:
    from fairpod.server.ha.leader import HaSettings
    from fairpod.server.runtime import daemon

    if a.lease_seconds is not None and not a.ha:
        print("fairpod: error: --lease-seconds goes with --ha", file=sys.stderr)
        return 2
    if not 0 <= a.api_workers <= 64:
        print(f"fairpod: error: --api-workers must be from 0 to 64, not {a.api_workers}", file=sys.stderr)
        return 2
    ha = HaSettings.of(a.lease_seconds) if a.ha else None
    if a.runs_dir:  # the environment is what the server (also one started in the background) and the CLI read
        runs = os.path.abspath(a.runs_dir)
        if not os.path.isdir(runs):
            print(f"fairpod: error: --runs-dir {a.runs_dir}: no such directory (make it, e.g. on its own volume)",
                  file=sys.stderr)
            return 2
        os.environ["FAIRPOD_RUNS_DIR"] = runs
    from fairpod.executors import registry

    options = {o.name: getattr(a, o.name) for _, o in registry.options()}
    return daemon.up(a.port, a.spec, a.db, a.executor, a.foreground, options, a.advertise_address, ha, a.api_workers)


def _down(a: argparse.Namespace) -> Any:
    from fairpod.server.runtime import daemon

    return daemon.down(a.timeout)


def _api(a: argparse.Namespace) -> Any:
    import logging
    from pathlib import Path

    from fairpod.paths import fairpod_home
    from fairpod.server.runtime import apiserver

    home = fairpod_home()
    try:
        url = apiserver.database(a.db)
        core = apiserver.core_url(a.core)
        if not 0 < a.port < 65536:
            raise apiserver.Refused(f"--port {a.port}: give a port from 1 to 65535")
        apiserver.gc_thresholds()
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        apiserver.serve_api(home, url, core, a.address, a.port,
                            Path(a.secret_file) if a.secret_file else home / "job-token.key")
    except apiserver.Refused as e:
        print(f"fairpod: error: {e}", file=sys.stderr)
        return 2
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up", help="start the control plane on this machine",
        description="Start fairpod on 127.0.0.1: the API, the reconcile loop and the executor (local, or a Ray "
        "cluster with --executor ray), state in "
        "SQLite under $FAIRPOD_HOME (default ~/.local/share/fairpod). Without --spec, the first start describes "
        "this machine (its NVIDIA GPUs) or, without GPUs, a demo cluster of 4 x ml.g5.12xlarge with teams john "
        "and smith. The first start creates an admin token and writes the CLI config (mode 0600).",
    )
    if isinstance(p, argparse.ArgumentParser):  # 'up' is being built: only then is the executor registry read
        _up_flags(p)  # (every other command would pay its 8 ms of dataclasses and inspect for help never shown)
    d = sub.add_parser("down", help="stop the control plane (jobs keep running and are adopted on the next up)",
                       description="Stop the control plane started by 'fairpod up' (SIGTERM, then SIGKILL after "
                       "--timeout seconds). Running jobs keep running and are adopted by the next 'fairpod up'.")
    d.add_argument("--timeout", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL "
                   "(default %(default)s)")
    d.set_defaults(func=_down)
    p = sub.add_parser(
        "api", help="serve the API on this host for a control plane on PostgreSQL (scale the API out)",
        description="Serve fairpod's API from this host, beside the control plane's core on another (or the same) "
        "host, against the cluster's PostgreSQL database: submit, list-jobs and get-job are answered here from "
        "the database (a submit is committed before its 201 and the core admits it at its next turn, also when "
        "the core was down at the time); every other request is passed to the core at --core. Run several behind "
        "a load balancer (docs/operations.md, \"API processes on other hosts\"). Needs FAIRPOD_DB_URL (the "
        "core's database) and a copy of the core's job-token.key (--secret-file, mode 0600); users' tokens are "
        "the database's. Runs in the foreground until SIGTERM.",
    )
    p.add_argument("--core", required=True, metavar="URL",
                   help="the core's API, http://HOST:PORT (its fairpod up --port on its --advertise-address)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to serve on (default %(default)s)")
    p.add_argument("--address", default="127.0.0.1", metavar="IP",
                   help="address of this host to serve on (default %(default)s; 0.0.0.0 for all)")
    p.add_argument("--db", metavar="URL", help="the cluster's PostgreSQL URL when it holds no password (default "
                   "$FAIRPOD_DB_URL; a password belongs in FAIRPOD_DB_URL or ~/.pgpass, never on a command line)")
    p.add_argument("--secret-file", metavar="PATH", help="a copy of the core's $FAIRPOD_HOME/job-token.key, mode "
                   "0600 (default $FAIRPOD_HOME/job-token.key of this host)")
    p.set_defaults(func=_api)


def _up_flags(p: argparse.ArgumentParser) -> None:
    from fairpod.executors import registry  # only the names: no executor is imported

    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port on 127.0.0.1 (default %(default)s)")
    p.add_argument("--spec", help="cluster spec (YAML) to apply")
    p.add_argument("--executor", choices=registry.names(), default=None,
                   help="where jobs run: " + "; ".join(f"'{k.name}' ({k.help})" for k in registry.KINDS.values())
                   + ". Default: the spec's cluster.executor.kind, else local")
    for _, option in registry.options():  # each executor's own (Ray's address and namespace)
        p.add_argument(option.flag, metavar=option.metavar, help=option.help)
    p.add_argument("--db", help="database URL (default SQLite under $FAIRPOD_HOME; postgresql+psycopg://… works)")
    p.add_argument("--foreground", action="store_true", help="stay in the foreground (for service managers)")
    p.add_argument("--advertise-address", metavar="IP", default=None,
                   help="also listen on this address of this machine and give it to replicas as FAIRPOD_API_URL, so "
                   "replicas on other hosts (Ray nodes) reach the control plane; default: 127.0.0.1 only")
    p.add_argument("--ha", action="store_true",
                   help="take part in the election of the control plane on a PostgreSQL database shared with other "
                   "'fairpod up --ha' (other machines, or other homes and ports here): one leads, the others "
                   "stand by and take over when it fails (docs/ha.md)")
    p.add_argument("--lease-seconds", type=float, default=None, metavar="S",
                   help="with --ha: how long the leader's lease lasts without renewal (default 6; renewed every "
                   "quarter of it); a failed leader is replaced within about this plus one second and recovery")
    p.add_argument("--api-workers", type=int, default=0, metavar="N",
                   help="serve the API from N worker processes besides the control plane's core (default 0: one "
                   "process): each answers submit, list-jobs and get-job itself from the database and passes every "
                   "other request to the core, so submits and reads use more than one CPU; a submit is committed "
                   "before its answer and the core admits it at its next turn. SQLite or PostgreSQL; with --ha every "
                   "node runs its workers, a standby's accept submits for the leader (docs/operations.md, docs/ha.md)")
    p.add_argument("--runs-dir", metavar="DIR", default=None,
                   help="where replicas' run directories and logs go (default $FAIRPOD_RUNS_DIR, else "
                   "$FAIRPOD_HOME/runs): a volume of their own, so that jobs' output filling it never stops the "
                   "database's writes (docs/operations.md)")
    p.set_defaults(func=_up)
