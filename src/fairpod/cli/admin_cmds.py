"""Admins' commands: team, policy, cluster, user, apply (nodes: :mod:`fairpod.cli.node_cmds`)."""

from __future__ import annotations

import argparse

from fairpod.cli import spec_history_cmds
from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.files import read_yaml
from fairpod.cli.output import acc_nodes, add_output, emit, emit_json, table

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

# the API's team fields in the words of the team commands' flags
TEAM_FLAGS = {"quota": "--quota", "fair_share_weight": "--weight", "sharing.strategy": "--strategy",
              "sharing.borrow_limit": "--borrow-limit", "sharing": "--strategy/--borrow-limit",
              "preempt_team_tasks": "--preempt-team-tasks", "name": "team name",
              "sharing.lending_limits": "--lending-limit", "sharing.absolute_borrow_limits": "--absolute-borrow-limit",
              "user_limits.max_running_accelerators": "--max-accelerators-per-user",
              "user_limits.queue_order": "--user-queue-order", "user_limits": "--max-accelerators-per-user",
              "budgets": "--budget", "group": "--group"}
POLICY_FLAGS = {"task_prioritization": "--task-prioritization", "priority_classes": "--priority-class",
                "idle_compute_allocation": "--idle-compute-allocation",
                "idle_resource_sharing": "--idle-resource-sharing",
                "starvation_guard_seconds": "--starvation-guard-seconds",
                "fair_share_half_life_seconds": "--fair-share-half-life-seconds",
                "restart_backoff_base_seconds": "--restart-backoff-base-seconds",
                "restart_backoff_max_seconds": "--restart-backoff-max-seconds",
                "shell_idle_timeout_seconds": "--shell-idle-timeout-seconds",
                "shell_max_seconds": "--shell-max-seconds",
                "preemption_cost_wait_seconds": "--preemption-cost-wait-seconds",
                "log_max_bytes": "--log-max-bytes", "preempt_to_borrow": "--preempt-to-borrow",
                "preempt_to_borrow_max_priority": "--preempt-to-borrow-max-priority"}


def _quota(items: list[str], flag: str = "--quota") -> list[dict[str, Any]]:
    """``TYPE=COUNT`` (whole nodes) or ``TYPE:accelerators=N`` (also vcpu=, memory_gib=)."""
    out = []
    for it in items:
        if ":" in it:
            itype, _, rest = it.partition(":")
            key, sep, val = rest.partition("=")
            if not sep or key not in ("count", "accelerators", "vcpu", "memory_gib"):
                raise CliError(f"{flag} {it!r}: use TYPE=COUNT or TYPE:accelerators=N (vcpu=, memory_gib=)")
        else:
            itype, sep, val = it.partition("=")
            key = "count"
            if not sep:
                raise CliError(f"{flag} {it!r}: use TYPE=COUNT or TYPE:accelerators=N")
        try:
            num = float(val)
        except ValueError:
            raise CliError(f"{flag} {it!r}: {val!r} is not a number") from None
        out.append({"instance_type": itype, key: int(num) if key == "count" or num.is_integer() else num})
    return out


def _budget(text: str) -> dict[str, Any]:
    """``TYPE:PERIOD=HOURS`` or ``TYPE:PERIOD=HOURS:hard``."""
    itype, _, rest = text.partition(":")
    period, sep, val = rest.partition("=")
    hours, _, hard = val.partition(":")
    if not itype or not sep or period not in ("day", "week", "month") or hard not in ("", "hard"):
        raise CliError(f"--budget {text!r}: use TYPE:day|week|month=HOURS, with ':hard' for a hard cap")
    try:
        num = float(hours)
    except ValueError:
        raise CliError(f"--budget {text!r}: {hours!r} is not a number of hours") from None
    return {"instance_type": itype, "period": period, "accelerator_hours": num, "hard_cap": hard == "hard"}


def _team_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--weight", type=int, help="fair-share weight 0..100 (higher gets idle capacity first)")
    p.add_argument("--strategy", choices=["LendAndBorrow", "Lend", "DontLend"])
    p.add_argument("--borrow-limit", type=int, help="percent of quota the team may borrow on top (1..500)")
    p.add_argument("--preempt-team-tasks", choices=["LowerPriority", "LowerOrNewerEqualPriority", "Never"],
                   help="LowerOrNewerEqualPriority: also the team's equal-priority jobs submitted later (Kueue's)")
    p.add_argument("--quota", action="append", default=None, metavar="TYPE=COUNT",
                   help="quota per instance type, whole nodes (or TYPE:accelerators=N); repeatable; replaces all")
    p.add_argument("--lending-limit", action="append", default=None, metavar="TYPE=COUNT",
                   help="lend at most this much of the team's idle quota of a type (keeps the rest for itself); "
                        "whole nodes or TYPE:accelerators=N; repeatable; replaces all; 'none' clears")
    p.add_argument("--absolute-borrow-limit", action="append", default=None, metavar="TYPE=COUNT",
                   help="borrow at most this much of a type besides --borrow-limit %%; whole nodes or "
                        "TYPE:accelerators=N; repeatable; replaces all; 'none' clears")
    p.add_argument("--max-accelerators-per-user", metavar="N|none",
                   help="the most accelerators one user's running jobs in the team may hold ('none': no cap)")
    p.add_argument("--budget", action="append", default=None, metavar="TYPE:PERIOD=HOURS[:hard]",
                   help="accelerator-hours per day|week|month on a type (past 80 %%: lowest priority, past 100 %%: "
                        "no borrowing; ':hard' holds the team's jobs); repeatable; replaces all; 'none' clears")
    p.add_argument("--user-queue-order", choices=["FirstComeFirstServe", "RoundRobin"],
                   help="RoundRobin: users take turns (the user running the fewest accelerators goes first)")
    p.add_argument("--group", metavar="GROUP|none", help="the group of the spec's tree the team belongs to "
                   "('none': the top; docs/groups.md)")


def _team_body(a: argparse.Namespace, base: dict[str, Any]) -> dict[str, Any]:
    body = dict(base)
    body["name"] = a.name
    if a.weight is not None:
        body["fair_share_weight"] = a.weight
    if a.preempt_team_tasks:
        body["preempt_team_tasks"] = a.preempt_team_tasks
    sharing = dict(body.get("sharing") or {})
    if a.strategy:
        sharing["strategy"] = a.strategy
    if a.borrow_limit is not None:
        sharing["borrow_limit"] = a.borrow_limit
    for flag, key in (("lending_limit", "lending_limits"), ("absolute_borrow_limit", "absolute_borrow_limits")):
        items = getattr(a, flag)
        if items is not None:
            sharing[key] = [] if items == ["none"] else _quota(items, "--" + flag.replace("_", "-"))
    if sharing:
        body["sharing"] = sharing
    if a.quota is not None:
        body["quota"] = _quota(a.quota)
    if a.group is not None:
        body["group"] = None if a.group == "none" else a.group
    if a.budget is not None:
        body["budgets"] = [] if a.budget == ["none"] else [_budget(b) for b in a.budget]
    users = dict(body.get("user_limits") or {})
    if a.max_accelerators_per_user is not None:
        v = a.max_accelerators_per_user
        if v != "none" and not v.isdigit():
            raise CliError(f"--max-accelerators-per-user wants a whole number or none, got {v!r}")
        users["max_running_accelerators"] = None if v == "none" else int(v)
    if a.user_queue_order:
        users["queue_order"] = a.user_queue_order
    if users:
        body["user_limits"] = users
    return body


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("team", help="manage teams and their compute allocations (admin)",
                       description="Teams and their compute allocations: quota per instance type (whole nodes "
                       "or accelerators), fair-share weight, lending and borrowing.").add_subparsers(
        dest="team_cmd", metavar="ACTION", required=True)
    p = t.add_parser("create", help="create a team")
    _team_flags(p)
    p.set_defaults(func=lambda a: _show(Client(fields=TEAM_FLAGS).post("/teams", _team_body(a, {})), a,
                                        "created"))
    p = t.add_parser("update", help="change a team (only the given fields)")
    _team_flags(p)
    p.set_defaults(func=team_update)
    p = t.add_parser("delete", help="delete a team without unfinished jobs",
                     description="Delete a team that has no unfinished jobs. A team that has jobs (finished ones: "
                     "their records stay) is deleted only with --yes.")
    p.add_argument("name", help="the team")
    p.add_argument("--yes", "-y", action="store_true", help="delete it even though it has (finished) jobs")
    p.set_defaults(func=team_delete)
    p = t.add_parser("list", help="list teams with their weights, sharing and quotas")
    add_output(p)
    p.set_defaults(func=team_list)

    pol = sub.add_parser("policy", help="show or set the cluster policy",
                         description="The cluster policy: task prioritization, priority classes, idle compute "
                         "allocation and sharing.").add_subparsers(dest="policy_cmd", metavar="ACTION",
                                                                   required=True)
    p = pol.add_parser("show", help="show the policy and its priority classes")
    add_output(p)
    p.set_defaults(func=policy_show)
    p = pol.add_parser("set", help="change the given fields of the policy (admin)")
    p.add_argument("--task-prioritization", choices=["FirstComeFirstServe", "TaskRanking"])
    p.add_argument("--priority-class", action="append", metavar="NAME=WEIGHT", help="replaces all classes")
    p.add_argument("--idle-compute-allocation", choices=["FairShare", "FairShareHistory", "FirstComeFirstServe"],
                   help="FairShareHistory: FairShare that also ranks borrowers by their decayed past borrowing")
    p.add_argument("--fair-share-half-life-seconds", type=float,
                   help="FairShareHistory: borrowing this long ago counts half (60 .. 90 days; default 1 day)")
    p.add_argument("--idle-resource-sharing", choices=["Enabled", "Disabled"])
    p.add_argument("--starvation-guard-seconds", type=float)
    p.add_argument("--restart-backoff-base-seconds", type=float, metavar="SECONDS",
                   help="an auto-resume restart after the job's own failure waits this long, doubled each restart "
                   "(0: at once; default 2)")
    p.add_argument("--restart-backoff-max-seconds", type=float, metavar="SECONDS",
                   help="the longest a restart waits (default 300)")
    p.add_argument("--shell-idle-timeout-seconds", type=float, metavar="SECONDS",
                   help="an interactive shell (fairpod shell, salloc, srun --pty) without input or output this "
                   "long ends (default 3600)")
    p.add_argument("--shell-max-seconds", type=float, metavar="SECONDS",
                   help="the longest an interactive shell lasts (default 28800)")
    p.add_argument("--log-max-bytes", type=int, metavar="BYTES",
                   help="the most each replica's log keeps: past it the older half is dropped and the log says how "
                   "much (at least 1048576; default 1073741824, 1 GiB)")
    p.add_argument("--preemption-cost-wait-seconds", type=float, metavar="SECONDS",
                   help="a reclaim whose victims would lose at least 2 x SECONDS of work per accelerator it takes "
                   "back waits up to SECONDS for room to free by itself (0: reclaim at once; default 900)")
    p.add_argument("--preempt-to-borrow", choices=["Never", "LowerPriority"],
                   help="LowerPriority: a job that must borrow may stop other teams' borrowed jobs of lower priority "
                   "(Kueue's borrowWithinCohort; FirstComeFirstServe idle allocation only; default Never)")
    p.add_argument("--preempt-to-borrow-max-priority", metavar="PRIORITY|none",
                   help="only borrowed jobs of at most this priority are stopped so (none: any lower priority)")
    add_output(p)
    p.set_defaults(func=policy_set)
    spec_history_cmds.register_policy(pol)

    c = sub.add_parser("cluster", help="cluster capacity and team usage").add_subparsers(
        dest="cluster_cmd", metavar="ACTION", required=True)
    p = c.add_parser("show", help="capacity and, per team and instance type, quota / in use / borrowed / lent "
                     "(accelerators, with the nodes they make)")
    add_output(p)
    p.set_defaults(func=cluster_show)

    u = sub.add_parser("user", help="manage users and tokens (admin)",
                       description="Users, their roles (admin, group-admin, member, viewer), teams or groups and tokens.").add_subparsers(
        dest="user_cmd", metavar="ACTION", required=True)
    p = u.add_parser("create", help="create a user and print its token (shown once)")
    p.add_argument("name", help="user name")
    p.add_argument("--role", choices=["admin", "group-admin", "member", "viewer"], default="member",
                   help="admin: everything; group-admin: the teams below its groups (--group) and their jobs; "
                   "member: its teams' jobs; viewer: read only")
    p.add_argument("--team", action="append", default=[], help="team the member belongs to (repeatable)")
    p.add_argument("--group", action="append", default=[], help="group a group-admin manages, with every team "
                   "below it (repeatable)")
    add_output(p)
    p.set_defaults(func=user_create)
    p = u.add_parser("list", help="list users with their roles and teams")
    add_output(p)
    p.set_defaults(func=user_list)
    p = u.add_parser("revoke", help="revoke every token of a user")
    p.add_argument("name", help="user name")
    p.set_defaults(func=lambda a: print(
        f"revoked {Client().post(f'/users/{a.name}/revoke')['revoked_tokens']} token(s) of {a.name}"))

    p = sub.add_parser("apply", help="apply a cluster spec (idempotent), or submit a PyTorchJob manifest",
                       description="Apply a cluster spec (YAML): instance groups, policy and teams. Applying the "
                       "same spec twice changes nothing. A Kubeflow PyTorchJob manifest (kind: PyTorchJob, as "
                       "written for HyperPod task governance) is submitted as a job instead: see docs/slurm.md.")
    p.add_argument("-f", "--file", required=True, help="the cluster spec or manifest (YAML)")
    p.add_argument("--dry-run", action="store_true", help="print the diff against the live spec and what the "
                   "engine would do to running and pending jobs (who would be preempted); change nothing")
    p.add_argument("--on-host", action="store_true", help="a PyTorchJob: run its command on the node, not in its "
                   "container image (the image is reported only; docs/containers.md)")
    p.add_argument("--team", help="Kubernetes manifests: the team to submit them for (default: the team their "
                   "namespace or kueue.x-k8s.io/queue-name label names, else your only team; docs/kubernetes.md)")
    add_output(p)
    p.set_defaults(func=apply)


def _show(data: Any, a: argparse.Namespace, verb: str) -> int:
    if getattr(a, "output", "table") == "json":
        emit_json(data)
    else:
        print(f"team {data['name']} {verb}")
    return 0


def team_update(a: argparse.Namespace) -> int:
    c = Client()
    teams = {t["name"]: t for t in c.get("/teams")["teams"]}
    if a.name not in teams:
        raise CliError(f"no team {a.name!r}")
    c.fields = TEAM_FLAGS
    return _show(c.put(f"/teams/{a.name}", _team_body(a, teams[a.name])), a, "updated")


def team_list(a: argparse.Namespace) -> int:
    teams = Client().get("/teams")["teams"]
    if emit(teams, a.output):
        return 0
    def limits(entries: list[dict[str, Any]]) -> str:
        return ", ".join(f"{q['instance_type']}:" + ",".join(f"{k}={v}" for k, v in q.items()
                                                            if k != "instance_type" and v is not None)
                         for q in entries) or "-"

    def per_user(t: dict[str, Any]) -> str:
        ul = t.get("user_limits") or {}
        cap = ul.get("max_running_accelerators")
        return ((f"{cap} acc" if cap is not None else "-")
                + (" round-robin" if ul.get("queue_order") == "RoundRobin" else ""))

    rows = [{"name": t["name"], "weight": t["fair_share_weight"], "strategy": t["sharing"]["strategy"],
             "limit": f"{t['sharing']['borrow_limit']}%", "preempt": t["preempt_team_tasks"],
             "lend": limits(t["sharing"].get("lending_limits", [])),
             "abs": limits(t["sharing"].get("absolute_borrow_limits", [])), "user": per_user(t),
             "quota": ", ".join(f"{q['instance_type']}:" + ",".join(f"{k}={v}" for k, v in q.items()
                                                                    if k != "instance_type" and v is not None)
                                for q in t["quota"]), "group": t.get("group") or "-"} for t in teams]
    table(rows, [("name", "TEAM"), ("weight", "WEIGHT"), ("strategy", "SHARING"), ("limit", "BORROW LIMIT"),
                 ("abs", "ABSOLUTE BORROW LIMIT"), ("lend", "LENDING LIMIT"), ("user", "PER USER"),
                 ("preempt", "PREEMPT TEAM TASKS"), ("quota", "QUOTA")]
          + ([("group", "GROUP")] if any(t.get("group") for t in teams) else []))
    return 0


def policy_show(a: argparse.Namespace) -> int:
    pol = Client().get("/policy")
    if emit(pol, a.output):
        return 0
    for k, v in pol.items():
        if k == "priority_classes":
            v = ", ".join(f"{c['name']}={c['weight']}" for c in v) or "-"
        print(f"{k + ':':28} {v}")
    return 0


def policy_set(a: argparse.Namespace) -> int:
    c = Client(fields=POLICY_FLAGS)
    pol = c.get("/policy")
    for key in ("task_prioritization", "idle_compute_allocation", "idle_resource_sharing", "starvation_guard_seconds",
                "fair_share_half_life_seconds", "restart_backoff_base_seconds", "restart_backoff_max_seconds",
                "shell_idle_timeout_seconds", "shell_max_seconds", "preemption_cost_wait_seconds", "log_max_bytes"):
        if getattr(a, key) is not None:
            pol[key] = getattr(a, key)
    if a.preempt_to_borrow is not None:
        pol["preempt_to_borrow"] = a.preempt_to_borrow
    if (mp := a.preempt_to_borrow_max_priority) is not None:
        if mp != "none" and not mp.lstrip("-").isdigit():
            raise CliError(f"--preempt-to-borrow-max-priority wants a whole number or none, got {mp!r}")
        pol["preempt_to_borrow_max_priority"] = None if mp == "none" else int(mp)
    if a.priority_class is not None:
        classes = []
        for it in a.priority_class:
            name, sep, w = it.partition("=")
            if not sep or not w.isdigit():
                raise CliError(f"--priority-class wants NAME=WEIGHT (0..100), got {it!r}")
            classes.append({"name": name, "weight": int(w)})
        pol["priority_classes"] = classes
    new = c.put("/policy", pol)
    if a.output == "json":
        emit_json(new)
    else:
        print("policy updated")
    return 0


def cluster_show(a: argparse.Namespace) -> int:
    v = Client().get("/cluster")
    if emit(v, a.output):
        return 0
    print(f"cluster {v['name']}")
    per_node = {k: (c["accelerators"] // c["nodes"] if c["nodes"] else None) for k, c in v["capacity"].items()}
    table([{"type": k, **c, "util": f"{c['utilization'] * 100:.0f}%", "gpu": c.get("accelerator_kind") or "-",
            "per": per_node[k]} for k, c in v["capacity"].items()],
          [("type", "INSTANCE TYPE"), ("gpu", "GPU"), ("nodes", "NODES"), ("per", "ACC/NODE"),
           ("accelerators", "ACCELERATORS"), ("schedulable_accelerators", "SCHEDULABLE"), ("in_use", "IN USE"),
           ("util", "UTILIZATION")])
    print()
    rows = []
    for t in v["teams"]:
        per, it = per_node.get(t["instance_type"]), t["instance_type"]
        row = {**t, **{k: acc_nodes(t[k], per, it) for k in ("quota", "in_use", "borrowed", "lent", "available")}}
        row["borrowed_from"] = ", ".join(f"{k}: {acc_nodes(n, per, it)}" for k, n in t["borrowed_from"].items()) \
            or "-"
        hist = t.get("fair_share_history")
        row["history"] = f"{hist * 100:.1f}%" if hist is not None else "-"
        rows.append(row)
    history = any(t.get("fair_share_history") is not None for t in v["teams"])
    table(rows, [("team", "TEAM"), ("instance_type", "INSTANCE TYPE"), ("quota", "QUOTA"), ("in_use", "IN USE"),
                 ("borrowed", "BORROWED"), ("borrowed_from", "FROM"), ("lent", "LENT"), ("available", "AVAILABLE"),
                 ("fair_share_weight", "WEIGHT"), ("sharing", "SHARING")]
          + ([("group", "GROUP")] if v.get("groups") else [])
          + ([("history", "BORROWED (DECAYED)")] if history else []))
    if v.get("groups"):
        print()
        rows = []
        for g in v["groups"]:  # parents before children: the tree, indented by depth
            depth, parent = 0, g["parent"]
            parents = {x["group"]: x["parent"] for x in v["groups"]}
            while parent is not None and depth < 64:
                depth, parent = depth + 1, parents.get(parent)
            per, it = per_node.get(g["instance_type"]), g["instance_type"]
            rows.append({**g, "name": "  " * depth + g["group"], "teams": ", ".join(g["teams"]) or "-",
                         **{k: acc_nodes(g[k], per, it) for k in ("quota", "in_use", "borrowed")},
                         "limit": f"{g['borrow_limit']}%" if g["sharing"] == "LendAndBorrow" else "-"})
        table(rows, [("name", "GROUP"), ("instance_type", "INSTANCE TYPE"), ("quota", "QUOTA"),
                     ("in_use", "IN USE"), ("borrowed", "BORROWED"), ("fair_share_weight", "WEIGHT"),
                     ("sharing", "SHARING"), ("limit", "BORROW LIMIT"), ("teams", "TEAMS")])
    return 0


def team_delete(a: argparse.Namespace) -> int:
    c = Client()
    if not a.yes:
        res = c.get("/jobs", team=a.name, limit=1)
        if res["total"]:
            raise CliError(f"team {a.name} has {res['total']} job(s) (their records stay): delete it with --yes")
    print(f"team {c.delete(f'/teams/{a.name}')['deleted']} deleted")
    return 0


def user_create(a: argparse.Namespace) -> int:
    if a.group and a.role != "group-admin":
        raise CliError("--group goes with --role group-admin")
    if a.role == "group-admin" and a.team:
        raise CliError("a group-admin manages groups: give --group, not --team")
    u = Client().post("/users", {"name": a.name, "role": a.role, "teams": a.group if a.role == "group-admin"
                                 else a.team})
    if a.output == "json":
        emit_json(u)
    else:
        print(f"user {u['name']} ({u['role']}, teams: {', '.join(u['teams']) or '-'}) created")
        print(f"token (shown once): {u['token']}")
    return 0


def user_list(a: argparse.Namespace) -> int:
    users = Client().get("/users")["users"]
    if emit(users, a.output):
        return 0
    table(users, [("name", "USER"), ("role", "ROLE"), ("teams", "TEAMS")])
    return 0


def apply(a: argparse.Namespace) -> int:
    docs = read_yaml(a.file, all_docs=True)
    if any(isinstance(d, dict) and "kind" in d for d in docs):  # Kubernetes manifests (fairpod.formats.kube)
        if a.dry_run:
            raise CliError(f"{a.file}: --dry-run is for cluster specs; this file holds Kubernetes manifests")
        from fairpod.cli.kube_apply import apply_manifests

        return int(apply_manifests(a, docs))
    if len(docs) != 1:
        raise CliError(f"{a.file}: a cluster spec is one YAML document; found {len(docs)}")
    data = docs[0]
    if not isinstance(data, dict):
        raise CliError(f"{a.file}: a cluster spec is a mapping with cluster, policy and teams; found a "
                       f"{type(data).__name__}")
    if a.dry_run:
        return spec_history_cmds.dry_run(a, data)
    res = Client(fields={"request": a.file}).put("/spec", data)
    if not emit(res, a.output):
        print(f"{a.file}: " + ("applied" if res["changed"] else "unchanged (already applied)"))
    return 0
