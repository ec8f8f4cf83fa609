"""HyperPod's space commands as its users type them: ``fairpod hyp create|list|describe|delete|start|stop|
portforward hyp-space`` (aws/sagemaker-hyperpod-cli, doc/cli/space/cli_space.md, v3.8-3.9), the same operations as
``fairpod space`` (docs/spaces.md).

``--namespace hyperpod-ns-TEAM`` or ``--queue-name hyperpod-ns-TEAM-localqueue`` names the team; ``--app-type``
jupyterlab or code-editor the IDE; ``--access-type`` (also ``--ownership-type``) OwnerOnly or Public; ``--gpu`` whole
accelerators; ``--priority`` a priority class; ``--idle-shutdown enabled=true,idleTimeoutInMinutes=N`` the idle
time. HyperPod's fields that fairpod cannot honour (``--image``, ``--volume``, ``--node-selector``, …) are not
offered: argparse names them as unknown.
"""

from __future__ import annotations

import argparse

from fairpod.cli.errors import CliError
from fairpod.cli.jobbody import job_name, memory_gib, priority_class, vcpus, whole
from fairpod.formats import hyperpod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KIND = "hyp-space"
APP_TYPES = {"jupyterlab": "jupyter", "jupyter": "jupyter", "code-editor": "code-server",
             "codeeditor": "code-server", "code-server": "code-server"}


def _app_type(v: str) -> str:
    ide = APP_TYPES.get(v.lower())
    if ide is None:
        raise argparse.ArgumentTypeError(f"{v!r}: give jupyterlab or code-editor")
    return ide


def _idle(v: str) -> float | None:
    fields = dict(p.partition("=")[::2] for p in v.split(",") if p)
    if fields.get("enabled", "true").lower() == "false":
        return None
    try:
        minutes = float(fields["idleTimeoutInMinutes"])
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"{v!r}: give enabled=true,idleTimeoutInMinutes=N") from None
    if not 0 < minutes <= 10080:
        raise argparse.ArgumentTypeError(f"idleTimeoutInMinutes={minutes:g}: give minutes above 0, at most 10080")
    return minutes


def team_of(verb: str, namespace: str | None, queue: str | None) -> str | None:
    """The team that ``--namespace hyperpod-ns-TEAM`` or ``--queue-name hyperpod-ns-TEAM-localqueue`` names."""
    found = {}
    for flag, text, pattern in (("--namespace", namespace, hyperpod.NS_RE), ("--queue-name", queue, hyperpod.QUEUE_RE)):
        if text is None:
            continue
        team = hyperpod.team_in(pattern, text)
        if team is None:
            raise CliError(f"hyp {verb} hyp-space: {flag} {text!r} is not a team's: use "
                           + (hyperpod.namespace("<team>") if flag == "--namespace" else hyperpod.local_queue("<team>")))
        found[team] = flag
    if len(found) > 1:
        raise CliError(f"hyp {verb} hyp-space: --namespace and --queue-name name different teams")
    return next(iter(found), None)


def register(verbs: argparse._SubParsersAction) -> None:
    """Add ``hyp-space`` under the verbs ``fairpod hyp`` has (create, list, describe, delete) and the verbs only
    spaces have (start, stop, portforward)."""
    if not isinstance(verbs, argparse._SubParsersAction):
        return  # 'fairpod hyp' is not the command being parsed: its parser is not built (cli.main._OnlyWanted)
    kinds: dict[str, Any] = {v: vp._subparsers._group_actions[0] for v, vp in verbs.choices.items()  # type: ignore
                             if vp._subparsers is not None}
    for verb in ("start", "stop", "portforward"):
        vp = verbs.add_parser(verb, help=f"{verb} a space", description=f"HyperPod's '{verb} hyp-space'.")
        kinds[verb] = vp.add_subparsers(dest="hyp_kind", metavar="KIND", parser_class=type(vp), required=True)
    hlp = {"create": "create and start a space", "list": "list spaces", "describe": "show a space",
           "delete": "stop a space and delete its files", "start": "start a stopped space (with its files)",
           "stop": "stop a space (its files stay)", "portforward": "reach a space on a local port"}
    for verb, text in hlp.items():
        if verb not in kinds:
            continue
        p = kinds[verb].add_parser(KIND, help=text, description=f"{text[0].upper()}{text[1:]} (docs/spaces.md).")
        p.add_argument("-n", "--namespace", help="hyperpod-ns-<team> (default: your only team)")
        if verb != "list":
            p.add_argument("--name", required=True, type=job_name if verb == "create" else str, help="space name")
        if verb == "create":
            p.add_argument("--display-name", help="shown by describe (fairpod keeps the name only)")
            p.add_argument("--app-type", type=_app_type, default="jupyter", help="jupyterlab (default) or "
                           "code-editor")
            p.add_argument("--queue-name", help="hyperpod-ns-<team>-localqueue (names the team)")
            p.add_argument("--priority", type=priority_class, help="priority class")
            for flag in ("--access-type", "--ownership-type"):
                p.add_argument(flag, dest="access", choices=["OwnerOnly", "Public"], default="OwnerOnly",
                               help="OwnerOnly (default) or Public: who may open it")
            p.add_argument("--gpu", type=whole(0, 1024), default=0, help="whole accelerators (default 0)")
            p.add_argument("--gpu-limit", type=whole(0, 1024), help="must equal --gpu when given")
            p.add_argument("--cpu", type=vcpus, help="vCPUs, e.g. 2 or 500m")
            p.add_argument("--memory", type=memory_gib, help="memory, e.g. 2Gi")
            p.add_argument("--idle-shutdown", type=_idle, help="enabled=true,idleTimeoutInMinutes=N")
        if verb == "portforward":
            p.add_argument("--local-port", type=whole(0, 65535), default=8888, help="local port (default 8888)")
        if verb in ("list", "describe", "create"):
            p.add_argument("-o", "--output", choices=["table", "json"], default="table")
        p.set_defaults(func=run, hyp_space_verb=verb)


def run(a: argparse.Namespace) -> int:
    from fairpod.cli import space_cmds

    team = team_of(a.hyp_space_verb, a.namespace, getattr(a, "queue_name", None))
    ns: dict[str, Any] = {"team": team, "output": getattr(a, "output", "table")}
    verb = a.hyp_space_verb
    if verb == "create":
        if a.gpu_limit is not None and a.gpu_limit != a.gpu:
            raise CliError(f"hyp create hyp-space: --gpu-limit {a.gpu_limit} differs from --gpu {a.gpu}: fairpod "
                           "gives a space whole accelerators, its request is its limit")
        ns.update(name=a.name, ide=a.app_type, access=a.access, accelerators=a.gpu, priority=a.priority,
                  instance_type=None, vcpu=a.cpu, memory=a.memory, idle_minutes=a.idle_shutdown)
        return space_cmds.create(argparse.Namespace(**ns))
    if verb == "list":
        return space_cmds.list_spaces(argparse.Namespace(**ns))
    ns["name"] = a.name
    if verb == "portforward":
        return space_cmds.port_forward(argparse.Namespace(**ns, local_port=a.local_port))
    func = {"describe": space_cmds.get, "delete": space_cmds.delete, "start": space_cmds.start,
            "stop": space_cmds.stop}[verb]
    return func(argparse.Namespace(**ns))
