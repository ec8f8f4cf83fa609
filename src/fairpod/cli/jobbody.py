"""The one job body that the job front ends submit, and the one table of job flags they take theirs from.

The flags are those of the one table, fairpod.model.jobflags (``SPEC_FLAGS``: the fields a flag of start-job sets
as it is); the flag types (``whole``, ``seconds``,
``memory_gib``, ``team_name``, ``priority_class`` …) check a value as the user typed it, with one line naming it;
``job_body`` builds the body from ``--config-file`` and the flags, every mistake reported there; ``finish`` holds
the checks and defaults of every job body. ``fairpod start-job``, ``start-service``, ``sbatch``/``srun``/``salloc``
and ``hyperpod start-job`` use them; HyperPod's names
(``hyperpod-ns-<team>``, ``<class>-priority``) come from fairpod.formats.hyperpod.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.files import read_yaml
from fairpod.formats import hyperpod
from fairpod.model.jobflags import JOB_FLAGS

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

# patterns (re compiles and caches them on first use: a command that checks no name pays nothing)
NAME_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
ARRAY_RE = r"\d+(-\d+(:\d+)?)?(,\d+(-\d+(:\d+)?)?)*(%\d+)?"

CONFIG_KEYS = set(JOB_FLAGS) - {"array", "job"}  # = JobSpec's fields but user (tests/cli/test_job_flags.py)
# the JobSpec fields that a flag of start-job sets as it is (the flag's argparse dest: its name with '_')
SPEC_FLAGS = {field: flag for field, flag in JOB_FLAGS.items()
              if flag.startswith("--") and field not in ("env", "array", "mounts", "scratch", "log_rules")}

TRUE, FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}


def boolean(v: str) -> bool:
    if v.lower() in TRUE:
        return True
    if v.lower() in FALSE:
        return False
    raise argparse.ArgumentTypeError(f"{v!r} is not true or false")


def whole(lo: int, hi: int, what: str = "") -> Callable[[str], int]:
    def parse(v: str) -> int:
        try:
            f = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
        if f != int(f):
            raise argparse.ArgumentTypeError(f"{v} is not a whole number{what}")
        if not lo <= f <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range: {lo}..{hi}")
        return int(f)

    return parse


MEMORY_UNITS = {"": 1.0, "gi": 1.0, "g": 1e9 / 2**30, "mi": 1 / 1024, "m": 1e6 / 2**30, "ti": 1024.0,
                "t": 1e12 / 2**30}


def memory_gib(text: str) -> float:
    """``16Gi``, ``512Mi``, ``16G`` (as Kubernetes writes quantities) or a number of GiB, as GiB."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in MEMORY_UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 16Gi, 512Mi, or GiB as a number)")
    return float(m.group(1)) * MEMORY_UNITS[unit]


def vcpus(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not 0 < v <= 100_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of vCPUs (e.g. 4 or 0.5)")
    return v


def seconds(hi: float) -> Callable[[str], float]:
    def parse(v: str) -> float:
        try:
            f = float(v)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r} is not a number of seconds") from None
        if not 0 <= f <= hi:
            raise argparse.ArgumentTypeError(f"{v} is out of range: 0..{hi:g} seconds")
        return f

    return parse


def job_name(v: str) -> str:
    if not re.fullmatch(NAME_RE, v) or len(v) > 63:
        raise argparse.ArgumentTypeError(
            f"{v!r} is not a job name: use lower-case letters, digits and '-', starting and ending with a letter "
            "or digit, at most 63 characters")
    return v


def team_name(v: str) -> str:
    """A team, also as HyperPod's namespace (hyperpod-ns-<team>) or local queue (hyperpod-ns-<team>-localqueue)."""
    team = hyperpod.team_part(v)
    if not re.fullmatch(NAME_RE, team) or len(team) > 40:
        raise argparse.ArgumentTypeError(
            f"{v!r} is not a team: use lower-case letters, digits and '-', at most 40 characters "
            "(or hyperpod-ns-<team>)")
    return team


def topology_level(v: str) -> str:
    """A topology level of the cluster spec (e.g. rack); also as a Kueue node label (…/topology-rack)."""
    level = v.rsplit("/", 1)[-1]
    level = level[len("topology-"):] if level.startswith("topology-") and len(level) > 9 else level
    if not re.fullmatch(NAME_RE, level) or len(level) > 40:
        raise argparse.ArgumentTypeError(f"{v!r} is not a topology level: give one of the cluster's "
                                         "topology_levels, e.g. rack")
    return level


def priority_class(v: str) -> str:
    """HyperPod's priority class names end in -priority (training-priority is the class 'training')."""
    return hyperpod.class_of(v)


def array_spec(v: str) -> str:
    if not re.fullmatch(ARRAY_RE, v):
        raise argparse.ArgumentTypeError(
            f"{v!r} is not an array: use FIRST-LAST[:STEP] or a comma list (0-9, 1,3,5, 0-99:2), and %%N to run at "
            "most N tasks at a time (0-199%%16)")
    return v


# each job field's type as its flag takes it (start-job's parser, start-service's, hyperpod start-job's values):
# the value as the user typed it, checked, or argparse.ArgumentTypeError saying why not
TYPES: dict[str, Callable[[str], Any]] = {
    "name": job_name, "team": team_name, "priority": priority_class, "nodes": whole(1, 10_000),
    "min_nodes": whole(1, 10_000), "max_nodes": whole(1, 10_000),
    "accelerators": whole(0, 1024, ": a replica gets whole accelerators"), "vcpu": vcpus, "memory_gib": memory_gib,
    "auto_resume": boolean, "max_retry": whole(0, 1000), "termination_grace_seconds": seconds(3600),
    "min_runtime_seconds": seconds(7 * 86400), "expected_duration_seconds": seconds(365 * 86400),
    "deep_health_check_passed_nodes_only": boolean, "max_runtime_seconds": seconds(365 * 86400),
    "hang_timeout_seconds": seconds(30 * 86400), "ready_timeout_seconds": seconds(7 * 86400),
    "restarts_in_place": whole(0, 100), "restart_eval_period_seconds": seconds(30 * 86400),
    "required_topology": topology_level, "preferred_topology": topology_level,
    "accelerator_partition_count": whole(1, 1024), "ray": boolean, "peer_recovery": boolean,
}  # fmt: skip


def typed(field: str, text: str, flag: str | None = None) -> Any:
    """``text`` typed for ``flag`` (default: start-job's flag of ``field``) as the field's value; a CliError (exit
    2, as argparse's) naming the flag if it is not one."""
    kind = TYPES.get(field)
    if kind is None:
        return text
    try:
        return kind(text)
    except argparse.ArgumentTypeError as e:
        raise CliError(f"{flag or JOB_FLAGS[field]} {text}: {e}", code=2) from None


def job_flag(p: Any, field: str, *aliases: str, words: dict[str, str] = JOB_FLAGS, **kw: Any) -> None:
    """The flag of job field ``field`` on parser (or group) ``p``: its words from the one table (``words``: start-job's,
    or a front end's own names of the same fields), its type from ``TYPES``; aliases and argparse's other arguments
    as given."""
    if field in TYPES and "action" not in kw:
        kw.setdefault("type", TYPES[field])
    p.add_argument(words[field], *aliases, **kw)


def _team_flags(p: argparse.ArgumentParser, required_hint: bool = False) -> None:
    g = p.add_mutually_exclusive_group()
    job_flag(g, "team", help="the team (also hyperpod-ns-<team>)")
    g.add_argument("--namespace", "-n", dest="team", type=team_name, metavar="NAMESPACE",
                   help="HyperPod's form of --team: hyperpod-ns-<team>")
    if required_hint:
        g.add_argument("--queue-name", dest="team", type=team_name, metavar="QUEUE",
                       help="Kueue's form of --team: hyperpod-ns-<team>-localqueue")



def _kv(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise CliError(f"--env {it!r}: use --env NAME=VALUE")
        out[k] = v
    return out


def _config(path: str) -> dict[str, Any]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise CliError(f"{path}: expected a mapping of job fields (name, team, command, nodes, …)")
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise CliError(f"{path}: unknown field(s) {', '.join(unknown)}; job fields are "
                       f"{', '.join(sorted(CONFIG_KEYS))}")
    if isinstance(data.get("command"), str):
        import shlex

        data["command"] = shlex.split(data["command"])
    if "team" in data and isinstance(data["team"], str):
        try:
            data["team"] = team_name(data["team"])
        except argparse.ArgumentTypeError as e:
            raise CliError(f"{path}: team: {e}") from None
    if isinstance(data.get("priority"), str):
        data["priority"] = priority_class(data["priority"])
    acc = data.get("accelerators")
    if isinstance(acc, float) and acc != int(acc):
        raise CliError(f"{path}: accelerators: {acc:g} is not a whole number: a replica gets whole accelerators")
    return data


def job_body(a: argparse.Namespace) -> dict[str, Any]:
    """The job to submit, from --config-file and the flags; every mistake a user can make is reported here."""
    body: dict[str, Any] = _config(a.config_file) if a.config_file else {}
    flags = {field: getattr(a, flag[2:].replace("-", "_")) for field, flag in SPEC_FLAGS.items()}
    body.update({k: v for k, v in flags.items() if v is not None})
    if a.env:
        body["env"] = {**(body.get("env") or {}), **_kv(a.env)}
    if getattr(a, "log_rule", None):
        body["log_rules"] = [*(body.get("log_rules") or []), *_log_rules(a.log_rule)]
    if a.job_command is not None:
        body["command"] = a.job_command
    if a.mount:
        body["mounts"] = [*(body.get("mounts") or []), *a.mount]
    if getattr(a, "scratch", None):
        body["scratch"] = [*(body.get("scratch") or []), *a.scratch]
    return finish(body, mounts=a.mount, config_file=a.config_file)


def finish(body: dict[str, Any], *, mounts: Sequence[str] = (), config_file: str | None = None,
           team: Callable[[str], str | None] | None = None, said: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The checks and defaults of every job body, whichever front end built it: ``mounts`` (HOST:CONTAINER[:ro])
    as given on the command line, the name, the command (an image's own without one), --max-retry without
    --auto-resume, the working directory (this one, outside an image), and last the team of a body without one
    (``team``: who names it, given where the user could have set it; default ``only_team``, which asks the server;
    a front end that has no server to ask returns None and the body keeps no team: the server's answer at submit).

    ``said``: a front end's own words for the fairpod flags these messages name (``--name``, ``--mount``,
    ``--image``, ``--max-retry``, ``--auto-resume``), e.g. sbatch's ``job.sbatch line 7: #FAIRPOD --max-retry``:
    where the user wrote it, in the user's words; a flag it does not map is said as fairpod's."""
    words = said or {}

    def w(flag: str, default: str | None = None) -> str:
        return words.get(flag, default or flag)

    for m in mounts:
        parts = m.split(":")
        if len(parts) not in (2, 3) or not all(x.startswith("/") for x in parts[:2]) or parts[2:] not in ([], ["ro"], ["rw"]):
            raise CliError(f"{w('--mount')} {m}: give HOST:CONTAINER or HOST:CONTAINER:ro, both absolute paths")
    if (body.get("mounts") or body.get("image_pull_policy")) and not body.get("image"):
        raise CliError(f"{w('--mount')} and {w('--image-pull-policy')} go with {w('--image')} (the container image "
                       "to run in)")
    src = f" (or set it in {config_file})" if config_file else " (or set it in --config-file)"
    if not body.get("name"):
        raise CliError(f"{w('--name')} is required{src}")
    cmd = body.get("command")
    if not cmd and body.get("image"):
        cmd = body["command"] = []  # the image's own entrypoint and command
    elif not cmd:
        raise CliError("give the job's command after --, e.g. fairpod start-job --name x --team t -- python "
                       "train.py")
    if not isinstance(cmd, list) or not all(isinstance(x, str) for x in cmd) or (cmd and not cmd[0].strip()):
        import shlex

        raise CliError(f"the command {shlex.join(map(str, cmd)) if isinstance(cmd, list) else cmd!r} has no "
                       "program to run: give one after --, e.g. -- python train.py")
    if body.get("max_retry") and not body.get("auto_resume"):
        raise CliError(f"{w('--max-retry')} {body['max_retry']} does nothing without auto-resume: add "
                       f"{w('--auto-resume', '--auto-resume true (restarts on failure)')}, or leave --max-retry out")
    if body.get("workdir") is None and not body.get("image"):  # in an image: the image's own WORKDIR
        body["workdir"] = os.getcwd()
    if not body.get("team"):  # last: a mistake above is said without asking the server
        body.pop("team", None)
        named = (team or only_team)(src)
        if named:
            body["team"] = named
    return body


def _log_rules(given: list[list[str]]) -> list[dict[str, Any]]:
    from pydantic import ValidationError

    from fairpod.model.logrules import parse_flag

    out = []
    for name, what, pattern in given:
        try:
            out.append(parse_flag(name, what, pattern).model_dump(exclude_none=True))
        except ValidationError as e:
            err = e.errors()[0]
            where, msg = ".".join(str(x) for x in err["loc"]), str(err["msg"]).removeprefix("Value error, ")
            raise CliError(f"--log-rule {name}: {where + ': ' if where and where not in msg else ''}{msg}") from None
        except ValueError as e:
            raise CliError(f"--log-rule {name}: {e}") from None
    return out

def only_team(src: str = "") -> str:
    """The team of a member of exactly one team (who then needs no --team); else the error that asks for it."""
    me = Client().get("/me")
    teams = me.get("teams") or []
    if me.get("role") == "member" and len(teams) == 1:
        return str(teams[0])
    mine = f"; you are in {', '.join(teams)}" if len(teams) > 1 else ""
    raise CliError(f"--team is required{src}{mine}")
