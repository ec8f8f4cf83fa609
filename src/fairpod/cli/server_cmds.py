"""``fairpod up`` and ``fairpod down``: run the control plane on this machine."""

from __future__ import annotations

import argparse

from fairpod.server import daemon


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up", help="start the control plane on this machine",
        description="Start fairpod on 127.0.0.1: the API, the reconcile loop and the local executor, state in "
        "SQLite under $FAIRPOD_HOME (default ~/.local/share/fairpod). Without --spec, the first start describes "
        "this machine (its NVIDIA GPUs) or, without GPUs, a demo cluster of 4 x ml.g5.12xlarge with teams john "
        "and smith. The first start creates an admin token and writes the CLI config (mode 0600).",
    )
    p.add_argument("--port", type=int, default=daemon.DEFAULT_PORT, help="port on 127.0.0.1 (default %(default)s)")
    p.add_argument("--spec", help="cluster spec (YAML) to apply")
    p.add_argument("--executor", choices=["local", "timed"], default="local",
                   help="where jobs run (default local); 'timed' is for benchmarks and tests only: it runs no "
                   "processes, each job just lasts its FAIRPOD_BENCH_DURATION or 'sleep N' seconds")
    p.add_argument("--db", help="database URL (default SQLite under $FAIRPOD_HOME; postgresql+psycopg://… works)")
    p.add_argument("--foreground", action="store_true", help="stay in the foreground (for service managers)")
    p.set_defaults(func=lambda a: daemon.up(a.port, a.spec, a.db, a.executor, a.foreground))
    d = sub.add_parser("down", help="stop the control plane (jobs keep running and are adopted on the next up)",
                       description="Stop the control plane started by 'fairpod up' (SIGTERM, then SIGKILL after "
                       "--timeout seconds). Running jobs keep running and are adopted by the next 'fairpod up'.")
    d.add_argument("--timeout", type=float, default=30.0)
    d.set_defaults(func=lambda a: daemon.down(a.timeout))
