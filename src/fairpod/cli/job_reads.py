"""Reading jobs: list-jobs, get-job (describe), cancel-job, list-pods, get-logs (logs) as they print; their
parsers are fairpod.cli.job_cmds'."""

from __future__ import annotations

import argparse
import sys
import time

from fairpod.cli.client import Client, TimedOut
from fairpod.cli.errors import CliError
from fairpod.cli.output import acc_nodes, ago, emit, plural, reason_in_units, table
from fairpod.model.keys import task_ref

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

KINDS = {"service": "service ('fairpod get-service {name}': its address and ready endpoints)",
         "ray": "Ray job (a private Ray cluster on its replicas: head on rank 0)"}


def goodput_text(g: dict[str, Any] | None) -> str | None:
    """'92.0 % (3.1 accelerator-hours kept; lost: 0.3 to preemption)' from get-job's goodput."""
    if not g or g.get("goodput") is None:
        return None
    lost = [f"{v / 3600:.2f} to {c}" for c, v in g["lost_accelerator_seconds"].items() if v]
    return (f"{g['goodput'] * 100:.1f} % ({g['kept_accelerator_seconds'] / 3600:.2f} accelerator-hours kept"
            + (f"; lost: {', '.join(lost)}" if lost else "") + ")")


def _nodes_acc(j: dict[str, Any]) -> str:
    elastic = f" ({j['min_nodes']}-{j['max_nodes']})" if j.get("max_nodes") else ""
    return f"{j['nodes']}x{j['accelerators_per_node']}{elastic}"


def group_arrays(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per job array (name[first-last], its states counted), the other jobs as they are."""
    out: list[dict[str, Any]] = []
    arrays: dict[tuple[str, int], dict[str, Any]] = {}
    for j in jobs:
        arr = j.get("array")
        if not arr:
            out.append({**j, "age": ago(j["submit_time"]), "nodes_acc": _nodes_acc(j)})
            continue
        key = (j["team"], arr["job_id"])
        row = arrays.get(key)
        if row is None:
            row = arrays[key] = {"array_job_id": arr["job_id"], "name": arr["name"], "team": j["team"],
                                 "priority": j["priority"], "nodes_acc": _nodes_acc(j), "restarts": 0,
                                 "age": ago(j["submit_time"]), "_ids": [], "_states": {}}
            out.append(row)
        row["_ids"].append(arr["task_id"])
        row["_states"][j["state"]] = row["_states"].get(j["state"], 0) + 1
        row["restarts"] += j["restarts"]
    for row in arrays.values():
        ids = sorted(row.pop("_ids"))
        states = row.pop("_states")
        span = f"[{ids[0]}-{ids[-1]}]" if len(ids) > 1 else str(ids[0])
        row["id"] = task_ref(row.pop("array_job_id"), span)  # Slurm's JOBID_[first-last]
        row["state"] = "Array" if len(states) > 1 else next(iter(states))
        row["reason"] = f"{len(ids)} tasks: " + ", ".join(f"{n} {s}" for s, n in states.items())
    return out


def list_jobs(a: argparse.Namespace) -> int:
    c = Client()
    res = c.get("/jobs", team=a.team, state=a.status, limit=a.limit)
    if emit(res["jobs"], a.output):
        return 0
    if any("borrowing" in (j["reason"] or "") for j in res["jobs"]):
        sizes = node_sizes(c)
        res["jobs"] = [{**j, "reason": reason_in_units(j["reason"], sizes.get(j["instance_type"]))}
                       for j in res["jobs"]]
    rows = ([{**j, "age": ago(j["submit_time"]), "nodes_acc": _nodes_acc(j)} for j in res["jobs"]]
            if a.array_tasks else group_arrays(res["jobs"]))
    for r in rows:
        r["eta"] = estimate_text(r.get("estimated_start"), short=True)
    table(rows, [("id", "ID"), ("name", "NAME"), ("team", "TEAM"), ("state", "STATE"), ("priority", "PRIORITY"),
                 ("nodes_acc", "NODES"), ("restarts", "RESTARTS"), ("age", "AGE"), ("eta", "EST. START"),
                 ("reason", "REASON")])
    if res.get("truncated"):
        print(f"(the newest {res['count']} of {res['total']} jobs; --limit 0 shows all)", file=sys.stderr)
    return 0


def _ref(a: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    job_name = getattr(a, "job_name", None)
    if a.job and job_name and a.job != job_name:
        raise CliError(f"NAME {a.job!r} and --job-name {job_name!r} name different jobs: give one")
    ref = a.job or job_name
    if not ref:
        raise CliError("which job? give its name (or id), or --job-name NAME")
    return ref, ({"team": a.team} if a.team else {})


def node_sizes(c: Client) -> dict[str, int | None]:
    """Accelerators per node of each instance type (to say how many nodes a number of accelerators is)."""
    cap = c.get("/cluster")["capacity"]
    return {k: (v["accelerators"] // v["nodes"] if v["nodes"] else None) for k, v in cap.items()}


def borrowed_text(j: dict[str, Any], per_node: int | None) -> str:
    """'john: 4 acc (1 node)' per lending team."""
    return ", ".join(f"{team}: {acc_nodes(n, per_node)}" for team, n in j["borrowed_from"].items()) or "-"


def estimate_text(ts: float | None, *, short: bool = False) -> str:
    """An estimated start, said to be one: 'in 12m (estimate)', 'now (estimate)'; '-' when unknown."""
    if ts is None:
        return "-"
    s = int(ts - time.time())
    when = "now" if s <= 0 else (f"in {s}s" if s < 120 else f"in {s // 60}m" if s < 7200 else f"in {s // 3600}h")
    if short:
        return f"~{when}"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(max(ts, time.time())))
    return (f"{when}, {stamp} (an estimate: running jobs end at their expected durations, nothing new "
            "arrives)")


def get_job(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    c = Client()
    j = c.get(f"/jobs/{ref}", **params)
    if emit(j, a.output):
        return 0
    if j.get("array_tasks") is not None:
        return _array_summary(j)
    borrowing = j["borrowed_from"] or any("borrowing" in (t or "") for t in [j["reason"], *(e["message"] for e in j["events"])])
    per = node_sizes(c).get(j["instance_type"]) if borrowing else None
    arr = j.get("array")
    fields = [("Name", j["name"]), ("Id", j["id"]), ("Team", j["team"]), ("State", j["state"]),
              ("Reason", reason_in_units(j["reason"], per)), ("Priority", j["priority"] or "(none: lowest)"),
              ("Queue position", j["queue_position"]),
              ("Estimated start", estimate_text(j["estimated_start"]) if j["state"] == "Pending" else None),
              ("Instance type", j["instance_type"]),
              ("Nodes", f"{j['nodes']} x {plural(j['accelerators_per_node'], 'accelerator')}" + (
                  f" (elastic: {j['min_nodes']} to {j['max_nodes']})" if j.get("max_nodes") else "")),
              ("Placement", ", ".join(j["placement"]) or "-"),
              ("Topology", topology_text(j.get("topology"))),
              ("Borrowed from", borrowed_text(j, per)),
              ("Restarts", f"{j['restarts']} of {j['max_retry']}" + (" (auto-resume)" if j["auto_resume"] else
                                                                     " (no auto-resume)")),
              ("Preemptions", j["preemptions"]), ("Checkpoint", _checkpoint(j["checkpoint"])),
              ("Goodput", goodput_text(j.get("goodput"))),
              ("Command", " ".join(j["command"]))]
    if j.get("image"):  # a container's: the command runs in it
        fields.append(("Image", j["image"] + (f" (pull {j['image_pull_policy']})" if j.get("image_pull_policy")
                                              else "")))
    if arr:
        fields.insert(2, ("Array", f"{arr['name']}, task {arr['task_id']} (array job {arr['job_id']})"))
    if j.get("user"):
        fields.insert(3, ("User", j["user"]))
    if j.get("kind") in KINDS:
        fields.insert(2, ("Kind", KINDS[j["kind"]].format(name=j["name"])))
    for k, v in fields:
        print(f"{k + ':':16} {v if v is not None else '-'}")
    print("Events:")
    for e in j["events"][-20:]:
        print(f"  {ago(e['ts']):>4} ago  {e['kind']:<16} {reason_in_units(e['message'], per)}")
    return 0


def _array_summary(j: dict[str, Any]) -> int:
    """get-job of a whole job array: its tasks counted by state, then one line per task."""
    arr, tasks = j["array"] or {}, j["array_tasks"]
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    print(f"{'Array:':16} {arr.get('name', j['name'])} (array job {arr.get('job_id', j['id'])}), {len(tasks)} tasks"
          + (f", at most {arr['limit']} at a time" if arr.get("limit") else ""))
    print(f"{'Team:':16} {j['team']}")
    print(f"{'States:':16} " + ", ".join(f"{n} {k.lower()}" for k, n in counts.items()))
    print(f"{'Command:':16} {' '.join(j['command'])}")
    table([{**t, "id": task_ref(arr.get('job_id', j['id']), t['task_id'])} for t in tasks],
          [("id", "TASK"), ("name", "NAME"), ("state", "STATE"), ("reason", "REASON")])
    print(f"(one task: fairpod get-job {tasks[0]['name']} or {task_ref(arr.get('job_id', j['id']), tasks[0]['task_id'])})")
    return 0


def topology_text(t: dict[str, Any] | None) -> str | None:
    """'requires one rack; placed in rack r1 (block b0)' — None where the cluster has no topology levels."""
    if not t:
        return None
    ask = (f"requires one {t['required']}" if t.get("required") else
           f"prefers one {t['preferred']}" if t.get("preferred") else "no constraint")
    placed = t.get("placed")
    if not placed:
        return ask
    levels = list(placed)
    inner = levels[-1]
    where = f"{inner} {', '.join(placed[inner])}" if len(placed[inner]) == 1 else \
        f"{len(placed[inner])} {inner}s ({', '.join(placed[inner])})"
    outer = [f"{lv} {', '.join(placed[lv])}" for lv in reversed(levels[:-1])]
    return f"{ask}; placed in {where}" + (f" ({'; '.join(outer)})" if outer else "")


def _checkpoint(c: dict[str, Any]) -> str:
    """The last reported checkpoint: path (step N, T ago), as fairpod.sdk.report_progress sent it."""
    if not c.get("path") and c.get("step") is None:
        return "- (the job reports none: fairpod.sdk.report_progress(step=…, checkpoint=…))"
    extra = [f"step {c['step']}"] if c.get("step") is not None else []
    if c.get("at"):
        extra.append(f"{ago(c['at'])} ago")
    return f"{c.get('path') or '(no file)'} ({', '.join(extra)})" if extra else c["path"]


def cancel_job(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    try:
        j = Client().post(f"/jobs/{ref}/cancel", **params)
    except TimedOut as e:  # a large array's cancel takes longer than the client waits: it goes on
        from fairpod.cli import cancel_wait

        done = cancel_wait.follow(ref, params, e)
        tasks = done.get("array_tasks")
        if tasks is None:
            j = done
        else:
            arr = done.get("array") or {}
            j = {"array_job_id": arr.get("job_id", done["id"]), "name": arr.get("name", done["name"]),
                 "team": done["team"], "tasks": len(tasks), "cancelled": [t for t in tasks if t["state"] == "Cancelled"]}
    if emit(j, a.output):
        return 0
    if "cancelled" in j:  # a whole job array
        print(f"job array {j['name']} (id {j['array_job_id']}): cancelled {len(j['cancelled'])} of its "
              f"{j['tasks']} tasks" + ("" if j["cancelled"] else " (all had finished)"))
    else:
        print(f"job {j['name']}: {j['state']} — {j['reason']}")
    return 0


def list_pods(a: argparse.Namespace) -> int:
    ref, params = _ref(a)
    res = Client().get(f"/jobs/{ref}/replicas", **params)
    if emit(res, a.output):
        return 0
    table(res["replicas"], [("replica", "REPLICA"), ("node", "NODE"), ("accelerators", "ACCELERATORS"),
                            ("state", "STATE"), ("exit", "EXIT")])
    if not res["replicas"]:
        print(f"(job {res['job']} is {res['state']}: it has no replicas now)", file=sys.stderr)
    return 0


WAIT_POLL = 1.0  # seconds between looks at a pending job that --follow waits for


def get_logs(a: argparse.Namespace) -> int:
    c = Client()
    ref, params = _ref(a)
    job = c.get(f"/jobs/{ref}", **params)
    if job.get("array_tasks") and not ref.isdigit():
        t = job["array_tasks"][0]
        raise CliError(f"{ref!r} is a job array of {len(job['array_tasks'])} tasks: name one, e.g. {t['name']} "
                       f"or {task_ref(job['array']['job_id'], t['task_id'])}")
    params["team"] = job["team"]
    ref = str(job["id"])
    never_ran = job["state"] == "Pending" and job.get("first_started_at") is None
    if never_ran and not a.follow:
        print(f"job {job['name']} is Pending and has not run yet: {job['reason']} (get-logs --follow waits for "
              "it to start)", file=sys.stderr)
        return 0
    if never_ran:
        print(f"job {job['name']} is Pending: {job['reason']}; waiting for it to start…", file=sys.stderr)
        while job["state"] == "Pending":
            time.sleep(WAIT_POLL)
            job = c.get(f"/jobs/{ref}", **params)
    out = sys.stdout.buffer
    if not a.all_replicas:
        if a.replica >= job["nodes"]:
            raise CliError(f"--replica {a.replica}: job {job['name']} has replicas 0..{job['nodes'] - 1}")
        wrote = 0
        for chunk in c.stream(f"/jobs/{ref}/logs", replica=a.replica, follow=a.follow, tail=a.tail, **params):
            out.write(chunk)
            out.flush()
            wrote += len(chunk)
        return 0 if wrote else _no_logs(c, ref, params, f"replica {a.replica}")
    return _all_replicas(c, ref, job["nodes"], a.follow, {**params, "tail": a.tail})


def _no_logs(c: Client, ref: str, params: dict[str, Any], what: str) -> int:
    """Nothing came back: say why. A job that ended without output (it failed or was cancelled before it
    started, or its command printed nothing) is an error; a running one just has not printed yet."""
    job = c.get(f"/jobs/{ref}", **params)
    if job["state"] in ("Failed", "Cancelled"):
        never = "before it started" if "could not start" in (job["reason"] or "") or not job.get(
            "first_started_at") else "without any output"
        print(f"job {job['name']} has no logs: it {job['state'].lower()} {never} ({job['reason']})",
              file=sys.stderr)
        return 1
    if job["state"] == "Succeeded":
        print(f"job {job['name']} succeeded without any output ({what} printed nothing)", file=sys.stderr)
    return 0


def _all_replicas(c: Client, ref: str, n: int, follow: bool, params: dict[str, Any]) -> int:
    """Every replica's output, line by line with a '[i] ' prefix; one connection per replica."""
    import threading

    out = sys.stdout.buffer
    lock = threading.Lock()
    errors: list[CliError] = []

    def pump(i: int) -> None:
        cl = Client(c.url, c.headers["Authorization"].removeprefix("Bearer "))
        rest = b""
        prefix = f"[{i}] ".encode()
        try:
            for chunk in cl.stream(f"/jobs/{ref}/logs", replica=i, follow=follow, **params):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                if lines:
                    with lock:
                        out.write(b"".join(prefix + ln + b"\n" for ln in lines))
                        out.flush()
            if rest:
                with lock:
                    out.write(prefix + rest + b"\n")
                    out.flush()
        except CliError as e:
            errors.append(e)

    threads = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if errors:
        raise errors[0]
    return 0
