"""``fairpod sacct``: Slurm's accounting view of jobs (state, exit code, elapsed), per job and per array task.

    sacct [-j IDS] [-X] [-P | -p] [-n] [-o|--format FIELDS] [-b] [-A TEAMS] [-s STATES] [--name NAMES]
          [-S TIME] [-E TIME] [-a] [-u USERS] [--json]

Jobs are fairpod jobs (sbatch jobs, srun's allocations, any other); an array task is ``ARRAY_TASK``. Without
``-j`` the jobs submitted since midnight are listed (``-S`` moves that), as Slurm does. Under each started job
come Slurm's ``ID.batch`` and ``ID.extern`` step lines (:func:`steps`); ``-X`` (allocations only) leaves them
out. Columns are Slurm's names (case does not matter, ``%N``
sets a width): JobID, JobIDRaw, JobName, Partition (the instance type), Account (the team), User, State,
ExitCode (``CODE:SIGNAL``), Elapsed, ElapsedRaw, Submit, Start, End, NNodes, NodeList, AllocCPUS, AllocTRES,
ReqTRES, Priority (the class), QOS, Restarts, Reason.
"""

from __future__ import annotations

import argparse
import time

from fairpod.cli.client import Client
from fairpod.cli.errors import CliError
from fairpod.cli.output import emit_json
from fairpod.formats.slurm.hostlist import compress
from fairpod.model.keys import task_ref

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any

DEFAULT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF = "JobID,State,ExitCode"
WIDTH = {"jobid": 12, "jobidraw": 12, "exitcode": 8, "submit": 19, "start": 19, "end": 19, "nodelist": 15}
STATE = {"Pending": "PENDING", "Running": "RUNNING", "Preempted": "PREEMPTED", "Succeeded": "COMPLETED",
         "Failed": "FAILED", "Cancelled": "CANCELLED"}
SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGABRT": 6, "SIGKILL": 9, "SIGSEGV": 11, "SIGPIPE": 13,
           "SIGALRM": 14, "SIGTERM": 15, "SIGUSR1": 10, "SIGUSR2": 12, "SIGBUS": 7}
STATE_ALIASES = {"PD": "Pending", "R": "Running", "PR": "Preempted", "CD": "Succeeded", "F": "Failed",
                 "CA": "Cancelled", "TO": "Failed", "OOM": "Failed", "NF": "Failed", "REQUEUED": "Pending",
                 "RQ": "Pending", **{v: k for k, v in STATE.items()}}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sacct", add_help=False, help="Slurm's sacct: jobs' state, exit code and elapsed time",
                       description="Show jobs as Slurm's sacct does (state, exit code, elapsed), one line per job "
                       "and per array task (ARRAY_TASK). Without -j: jobs submitted since midnight (or -S).",
                       epilog=f"fields: {', '.join(FIELDS)} (default: {DEFAULT}; -b: {BRIEF})")
    p.add_argument("--help", action="help", help="show this help and exit")
    p.add_argument("-j", "--jobs", help="job ids (comma-separated; ARRAY for every task, ARRAY_TASK for one)")
    p.add_argument("-o", "--format", dest="fmt", help=f"comma-separated fields (default {DEFAULT})")
    p.add_argument("-X", "--allocations", action="store_true", help="allocations only: no ID.batch and ID.extern step lines")
    p.add_argument("-P", "--parsable2", action="store_true", help="fields separated by |, no padding")
    p.add_argument("-p", "--parsable", action="store_true", help="fields separated by |, one at the end too")
    p.add_argument("-n", "--noheader", action="store_true", help="no header")
    p.add_argument("-b", "--brief", action="store_true", help=f"only {BRIEF}")
    p.add_argument("-A", "--accounts", help="only these teams (comma-separated)")
    p.add_argument("-s", "--state", help="only these states: PD, R, CD, F, CA, PR (or their names)")
    p.add_argument("--name", help="only jobs of these names (comma-separated)")
    p.add_argument("-u", "--user", help="only these users' jobs (comma-separated)")
    p.add_argument("-a", "--allusers", action="store_true", help="every user's jobs you may see (the default)")
    p.add_argument("-S", "--starttime", help="jobs submitted since: YYYY-MM-DD[THH:MM[:SS]], HH:MM, now-Nhours …")
    p.add_argument("-E", "--endtime", help="jobs submitted before it (same forms)")
    p.add_argument("-L", "--allclusters", action="store_true", help="fairpod is one cluster (no effect)")
    p.add_argument("--units", help="no effect (fairpod reports no sizes here)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=sacct)


def when(text: str, flag: str) -> float:
    """Slurm's time forms: ``YYYY-MM-DD[THH:MM[:SS]]``, ``HH:MM[:SS]`` (today), ``now[-N{seconds,minutes,hours,
    days,weeks}]``, ``midnight``, ``today``, ``now``."""
    import re

    t = text.strip().lower()
    now = time.time()
    lt = time.localtime(now)
    midnight = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
    if t in ("midnight", "today"):
        return midnight
    m = re.fullmatch(r"now(?:([-+])(\d+)(seconds|minutes|hours|days|weeks|s|m|h|d|w)?)?", t)
    if m:
        if not m.group(1):
            return now
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[(m.group(3) or "seconds")[0]]
        return now + (1 if m.group(1) == "+" else -1) * int(m.group(2)) * unit
    for fmt in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%m/%d/%y", "%m/%d"):
        try:
            st = time.strptime(text.strip(), fmt)
        except ValueError:
            continue
        year = st.tm_year if "%Y" in fmt or "%y" in fmt else lt.tm_year
        return time.mktime((year, st.tm_mon, st.tm_mday, st.tm_hour, st.tm_min, st.tm_sec, 0, 0, -1))
    m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", t)
    if m:
        return midnight + int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0)
    raise CliError(f"{flag} {text!r}: give YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], midnight or now-N{{minutes,hours,"
                   "days}}")


def elapsed(seconds: float) -> str:
    """sacct's Elapsed: [D-]HH:MM:SS."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


def exit_code(job: dict[str, Any]) -> str:
    """``CODE:SIGNAL`` of the job's batch host (replica 0), as sacct shows it; ``0:0`` before it ends."""
    first = str(((job.get("exit") or {}).get("0")) or "")
    if first.startswith("exited "):
        code = first.split()[1]
        return f"{code}:0" if code.isdigit() else "1:0"
    if first.startswith("killed by "):
        return f"0:{SIGNALS.get(first.split()[2], 9)}"
    if job["state"] == "Failed":
        return "1:0"
    return "0:0"


def _stamp(ts: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts)) if ts else "Unknown"


def _state(job: dict[str, Any]) -> str:
    st = STATE.get(job["state"], job["state"].upper())
    reason = str(job.get("reason") or "").lower()
    if job["state"] == "Failed" and "runtime limit" in reason:
        return "TIMEOUT"
    if job["state"] == "Failed" and "memory limit" in reason:
        return "OUT_OF_MEMORY"
    return st


def row(job: dict[str, Any], now: float) -> dict[str, Any]:
    arr = job.get("array")
    jid = task_ref(arr['job_id'], arr['task_id']) if arr else str(job["id"])
    started, ended = job.get("started_at"), job.get("finished_at")
    run = ((ended or now) - started) if started else 0.0
    acc = job.get("accelerators_per_node")
    tres = f"node={job['nodes']}" + (f",gres/gpu={int(acc * job['nodes'])}" if acc else "")
    return {"jobid": jid, "jobidraw": str(job["id"]), "jobname": job["name"], "partition": job["instance_type"],
            "account": job["team"], "user": job.get("user") or "", "state": _state(job), "exitcode": exit_code(job),
            "elapsed": elapsed(run), "elapsedraw": str(int(run)), "submit": _stamp(job.get("submit_time")),
            "start": _stamp(started), "end": _stamp(ended), "nnodes": str(job["nodes"]),
            "nodelist": compress(job["placement"]) if job.get("placement") else "None assigned",
            "alloccpus": str(job["nodes"]), "alloctres": tres if started else "", "reqtres": tres,
            "priority": job.get("priority") or "", "qos": job.get("priority") or "normal",
            "restarts": str(job.get("restarts") or 0), "reason": job.get("reason") or "None"}


def steps(job: dict[str, Any], r: dict[str, Any]) -> list[dict[str, Any]]:
    """The step lines Slurm prints under a started job's line (without ``-X``), which scripts parse: ``ID.batch``
    (the batch script: replica 0's command, its exit code; TIMEOUT's step is CANCELLED as Slurm's) and
    ``ID.extern`` (Slurm's per-node extern step: COMPLETED once the job ended). fairpod keeps no ``srun`` steps
    of its own, so there are no ``ID.0`` lines."""
    if not job.get("started_at"):
        return []
    ended = job["state"] in ("Succeeded", "Failed", "Cancelled")
    first = (job.get("placement") or [""])[0]
    batch = {**r, "jobid": f"{r['jobid']}.batch", "jobidraw": f"{r['jobidraw']}.batch", "jobname": "batch",
             "partition": "", "user": "", "state": "CANCELLED" if r["state"] == "TIMEOUT" else r["state"],
             "nnodes": "1", "nodelist": first or r["nodelist"], "alloccpus": "1", "reqtres": "", "priority": "",
             "qos": "", "restarts": "", "reason": ""}
    if batch["state"] == "CANCELLED" and r["exitcode"] == "0:0":
        batch["exitcode"] = "0:15"  # the SIGTERM that ended it
    extern = {**batch, "jobid": f"{r['jobid']}.extern", "jobidraw": f"{r['jobidraw']}.extern", "jobname": "extern",
              "state": "COMPLETED" if ended else "RUNNING", "exitcode": "0:0", "nnodes": r["nnodes"],
              "nodelist": r["nodelist"], "alloccpus": r["alloccpus"]}
    return [batch, extern]


FIELDS = ["JobID", "JobIDRaw", "JobName", "Partition", "Account", "User", "State", "ExitCode", "Elapsed",
          "ElapsedRaw", "Submit", "Start", "End", "NNodes", "NodeList", "AllocCPUS", "AllocTRES", "ReqTRES",
          "Priority", "QOS", "Restarts", "Reason"]


def columns(fmt: str) -> list[tuple[str, str, int]]:
    """(key, header, width) per field of ``--format`` (``JobID,State%20,exitcode``)."""
    known = {f.lower(): f for f in FIELDS}
    out = []
    for item in (x.strip() for x in fmt.split(",")):
        if not item:
            continue
        name, _, width = item.partition("%")
        key = name.lower()
        if key not in known:
            raise CliError(f"--format: unknown field {name!r} (fields: {', '.join(FIELDS)})")
        if width and not width.lstrip("-").isdigit():
            raise CliError(f"--format {item}: the width after % must be a number")
        out.append((key, known[key], abs(int(width)) if width else WIDTH.get(key, 10)))
    if not out:
        raise CliError("--format: give at least one field")
    return out


def _wanted(ref: str, job: dict[str, Any]) -> bool:
    arr = job.get("array")
    if "_" in ref:
        return bool(arr) and ref == task_ref(arr['job_id'], arr['task_id'])
    return ref == str(job["id"]) or (bool(arr) and ref == str(arr["job_id"]))


def sacct(a: argparse.Namespace) -> int:
    cols = columns(BRIEF if a.brief else (a.fmt or DEFAULT))
    refs = [r.strip() for r in (a.jobs or "").split(",") if r.strip()]
    for r in refs:
        if not r.replace("_", "").isdigit():
            raise CliError(f"-j {r!r}: give job ids (7), arrays (7) or array tasks (7_3)")
    since = when(a.starttime, "-S") if a.starttime else (None if refs else when("midnight", "-S"))
    until = when(a.endtime, "-E") if a.endtime else None
    states = None
    if a.state:
        states = set()
        for s in a.state.split(","):
            name = STATE_ALIASES.get(s.strip().upper())
            if name is None:
                raise CliError(f"-s {s!r}: unknown state (PD, R, PR, CD, F, CA or their names)")
            states.add(name)
    c = Client()
    jobs = c.get("/jobs", limit=100_000)["jobs"]
    sets = {k: {x.strip() for x in v.split(",") if x.strip()} for k, v in
            (("team", a.accounts), ("name", a.name), ("user", a.user)) if v}
    picked = [j for j in jobs
              if (not refs or any(_wanted(r, j) for r in refs))
              and (since is None or (j.get("submit_time") or 0) >= since)
              and (until is None or (j.get("submit_time") or 0) <= until)
              and (states is None or j["state"] in states)
              and all(j.get(k) in v for k, v in sets.items())]
    picked.sort(key=lambda j: j["id"])
    if any(k == "exitcode" for k, _, _ in cols) or a.json:  # the exit is in a job's detail only
        picked = [c.get(f"/jobs/{j['id']}") if j["state"] in ("Succeeded", "Failed", "Cancelled") else j
                  for j in picked]
    now = time.time()
    rows = []
    for j in picked:
        rows.append(row(j, now))
        rows += [] if a.allocations else steps(j, rows[-1])
    if a.json:
        emit_json({"jobs": [{h: r[k] for k, h, _ in cols} for r in rows]})
        return 0
    if a.parsable or a.parsable2:
        end = "|" if a.parsable else ""
        if not a.noheader:
            print("|".join(h for _, h, _ in cols) + end)
        for r in rows:
            print("|".join(str(r[k]) for k, _, _ in cols) + end)
        return 0
    if not a.noheader:
        print(" ".join(h[:w].rjust(w) for k, h, w in cols))
        print(" ".join("-" * w for _, _, w in cols))
    for r in rows:
        print(" ".join(_cell(str(r[k]), w, k) for k, _, w in cols))
    return 0


def _cell(v: str, w: int, key: str) -> str:
    """sacct's fixed columns: right-aligned, a value cut to the width ends with '+'."""
    return (v[: w - 1] + "+" if len(v) > w else v).rjust(w)
