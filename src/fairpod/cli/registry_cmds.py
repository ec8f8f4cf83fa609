"""``fairpod registry login|list|logout``: a team's container registry logins, for its image jobs' pulls
(fairpod.server.access.registries; docs/containers.md)."""

from __future__ import annotations

import argparse
import sys

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import add_output, emit, table


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("registry", help="a team's container registry logins (for its image jobs)",
                       description="Registry logins per team: the team's image jobs pull with them; no other "
                       "team's job, and no container, ever sees them.").add_subparsers(
        dest="registry_cmd", metavar="ACTION", required=True)
    p = r.add_parser("login", help="keep a login for the team's pulls (the password is read from stdin)")
    p.add_argument("registry", help="the registry host, e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com")
    p.add_argument("--team", required=True)
    p.add_argument("--username", "-u", required=True)
    p.add_argument("--password-stdin", action="store_true", required=True,
                   help="read the password (or token) from stdin, as podman and docker login do")
    p.set_defaults(func=login)
    p = r.add_parser("list", help="the team's logins: registry and user names")
    p.add_argument("--team", required=True)
    add_output(p)
    p.set_defaults(func=list_logins)
    p = r.add_parser("logout", help="forget the team's login for a registry")
    p.add_argument("registry")
    p.add_argument("--team", required=True)
    p.set_defaults(func=logout)


def login(a: argparse.Namespace) -> int:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("--password-stdin: no password on stdin")
    res = Client().post(f"/teams/{a.team}/registry-logins",
                        {"registry": a.registry, "username": a.username, "password": password})
    print(f"team {res['team']}: login for {res['registry']} kept (user {res['username']})")
    return 0


def list_logins(a: argparse.Namespace) -> int:
    res = Client().get(f"/teams/{a.team}/registry-logins")
    if not emit(res["logins"], a.output):
        table(res["logins"], [("registry", "REGISTRY"), ("username", "USER")])
    return 0


def logout(a: argparse.Namespace) -> int:
    res = Client().delete(f"/teams/{a.team}/registry-logins/{a.registry}")
    print(f"team {res['team']}: login for {res['registry']} removed")
    return 0
