"""Spaces (docs/spaces.md): ``fairpod space create|list|get|open|start|stop|delete|port-forward``.

A space is a JupyterLab or code-server of one user, run as a job of one replica under its team's quota and
priority; ``fairpod space open`` prints a one-time link that signs a browser in to it through fairpod's proxy.
"""

from __future__ import annotations

import argparse
import socket
import threading

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.jobbody import _team_flags, job_name, memory_gib, only_team, priority_class, vcpus, whole
from fairpod.cli.output import add_output, emit, table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SPACE_FLAGS = {"name": "NAME", "team": "--team", "ide": "--ide", "access": "--access", "priority": "--priority",
               "accelerators": "--accelerators", "instance_type": "--instance-type", "vcpu": "--vcpu",
               "memory_gib": "--memory", "idle_minutes": "--idle-minutes"}


def register(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("space", help="a JupyterLab or code-server of yours, under your team's quota",
                        description="Spaces: a JupyterLab or code-server that runs as you in a replica's sandbox, "
                        "governed like any job (quota, borrowing, priority, preemption), reached through fairpod's "
                        "proxy with your own sign-in. Its files are kept across preemptions, stops and starts.",
                        epilog="example:\n  fairpod space create nb --ide jupyter --team john --accelerators 1\n"
                        "  fairpod space open nb      # a one-time sign-in link for your browser",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = sp.add_subparsers(dest="space_verb", metavar="VERB")
    p = verbs.add_parser("create", help="create and start a space",
                         description="Create a space and start it: it waits in its team's queue like any job.")
    p.add_argument("name", type=job_name, help="space name (lower-case letters, digits, '-')")
    p.add_argument("--ide", choices=["jupyter", "code-server"], required=True, help="JupyterLab or code-server")
    _team_flags(p)
    p.add_argument("--access", choices=["OwnerOnly", "Public"], default="OwnerOnly",
                   help="OwnerOnly (default): only you may open it; Public: every member of its team")
    p.add_argument("--accelerators", type=whole(0, 1024, ": a space gets whole accelerators"), default=0,
                   help="whole accelerators (default 0)")
    p.add_argument("--priority", type=priority_class, help="priority class ('fairpod policy show')")
    p.add_argument("--instance-type", help="instance type (default: the cluster's only one)")
    p.add_argument("--vcpu", type=vcpus, metavar="N", help="vCPUs (default: by ratio)")
    p.add_argument("--memory", type=memory_gib, metavar="SIZE", help="memory, e.g. 16Gi")
    p.add_argument("--idle-minutes", type=float, metavar="MIN",
                   help="stop it after this long without a request (default: the policy's space_idle_minutes)")
    add_output(p)
    p.set_defaults(func=create)
    p = verbs.add_parser("list", help="your teams' spaces", description="List the spaces of your teams.")
    _team_flags(p)
    add_output(p)
    p.set_defaults(func=list_spaces)
    for verb, func, hlp in (("get", get, "show a space: state, why, its address"),
                            ("open", open_link, "print a one-time link that signs a browser in to the space"),
                            ("start", start, "start a stopped space again (with its files)"),
                            ("stop", stop, "stop a space (its files are kept)"),
                            ("delete", delete, "stop a space and delete its files")):
        p = verbs.add_parser(verb, help=hlp, description=hlp[0].upper() + hlp[1:] + ".")
        p.add_argument("name", help="space name")
        _team_flags(p)
        add_output(p)
        p.set_defaults(func=func)
    p = verbs.add_parser("port-forward", help="reach a space on a local port with your fairpod token",
                         description="Listen on 127.0.0.1:LOCAL-PORT and forward each connection to the space's "
                         "proxy with your fairpod token; open http://127.0.0.1:LOCAL-PORT/spaces/TEAM/NAME/. "
                         "Ctrl+C stops it.")
    p.add_argument("name", help="space name")
    _team_flags(p)
    p.add_argument("--local-port", type=whole(0, 65535), default=8888, help="local port (default 8888; 0: any)")
    p.set_defaults(func=port_forward)
    sp.set_defaults(func=lambda a: (sp.print_help(), 2)[1])


def _params(a: argparse.Namespace) -> dict[str, Any]:
    return {"team": a.team} if a.team else {}


def _line(s: dict[str, Any]) -> str:
    why = f" — {s['reason']}" if s.get("reason") and s["state"] != "Running" else ""
    return f"space {s['name']} ({s['ide']}, {s['access']}, team {s['team']}): {s['state']}{why}"


def body(a: argparse.Namespace) -> dict[str, Any]:
    if a.idle_minutes is not None and not 0 < a.idle_minutes <= 10080:
        raise CliError(f"--idle-minutes {a.idle_minutes:g}: give minutes above 0, at most 10080 (a week)")
    out: dict[str, Any] = {"name": a.name, "team": a.team or only_team(), "ide": a.ide, "access": a.access,
                           "accelerators": a.accelerators}
    for field, value in (("priority", a.priority), ("instance_type", a.instance_type), ("vcpu", a.vcpu),
                         ("memory_gib", a.memory), ("idle_minutes", a.idle_minutes)):
        if value is not None:
            out[field] = value
    return out


def create(a: argparse.Namespace) -> int:
    s = Client(fields=SPACE_FLAGS).post("/spaces", body(a))
    if not emit(s, a.output):
        print(_line(s) + f"; 'fairpod space open {s['name']}' once it runs")
    return 0


def list_spaces(a: argparse.Namespace) -> int:
    res = Client().get("/spaces", **_params(a))
    if not emit(res, a.output):
        table(res["spaces"], [("name", "NAME"), ("team", "TEAM"), ("owner", "OWNER"), ("ide", "IDE"),
                              ("access", "ACCESS"), ("state", "STATE"), ("accelerators", "ACC"), ("url", "ADDRESS")])
    return 0


def get(a: argparse.Namespace) -> int:
    s = Client().get(f"/spaces/{a.name}", **_params(a))
    if not emit(s, a.output):
        print(_line(s))
        print(f"owner: {s['owner']}  priority: {s['priority'] or '(none: lowest)'}  accelerators: "
              f"{s['accelerators']}  preemptions: {s['preemptions']}")
        print(f"address: {s['url'] or '(none yet: not running)'}")
        print(f"files:   {s['files']}")
    return 0


def _act(a: argparse.Namespace, method: str, path: str) -> int:
    s = Client().request(method, path, params=_params(a))
    if not emit(s, a.output):
        print(_line(s))
    return 0


def start(a: argparse.Namespace) -> int:
    return _act(a, "POST", f"/spaces/{a.name}/start")


def stop(a: argparse.Namespace) -> int:
    return _act(a, "POST", f"/spaces/{a.name}/stop")


def delete(a: argparse.Namespace) -> int:
    return _act(a, "DELETE", f"/spaces/{a.name}")


def open_link(a: argparse.Namespace) -> int:
    link = Client().post(f"/spaces/{a.name}/links", None, **_params(a))
    if not emit(link, a.output):
        print(link["url"])
    return 0


def port_forward(a: argparse.Namespace) -> int:
    from urllib.parse import urlsplit

    from fairpod.server.services.space_proxy import read_head

    c = Client()
    s = c.get(f"/spaces/{a.name}", **_params(a))
    if not s["url"]:
        raise CliError(f"space {a.name} is {s['state']}: {s['reason'] or 'not running yet'}")
    to = urlsplit(s["url"])
    auth = c.headers.get("Authorization")
    if not auth:
        raise CliError("port-forward sends your fairpod token: this CLI has none (FAIRPOD_TOKEN or the config)")
    try:
        lsock = socket.create_server(("127.0.0.1", a.local_port))
    except OSError as e:
        raise CliError(f"--local-port {a.local_port}: {e.strerror}") from None

    def one(client: socket.socket) -> None:
        from fairpod.server.services.space_proxy import _splice

        with client:
            try:
                head, rest = read_head(client)
            except Exception:
                return
            lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"authorization:")]
            lines.insert(1, f"Authorization: {auth}".encode())
            with socket.create_connection((to.hostname or "127.0.0.1", to.port or 80)) as up:
                up.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + rest)
                _splice(client, up)

    print(f"forwarding http://127.0.0.1:{lsock.getsockname()[1]}{to.path} to space {a.name} ({s['url']}); "
          "Ctrl+C stops", flush=True)
    try:
        while True:
            conn, _ = lsock.accept()
            threading.Thread(target=one, args=(conn,), daemon=True).start()
    except KeyboardInterrupt:
        return 0
    finally:
        lsock.close()
