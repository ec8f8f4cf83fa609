"""``srun`` inside a ``fairpod sbatch`` job: start a command on the job's nodes and wait for every task.

    srun [-N NODES] [-n NTASKS] [--ntasks-per-node N] [-w HOSTLIST] [-l] [-K] [--auto-resume=1] COMMAND [ARGS…]

Without options the command runs once on every node of the job (``--ntasks-per-node`` of the batch job
changes that), with the caller's environment and working directory plus ``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_NODEID`` and the node's own accelerators. All tasks' output comes out of srun, as with Slurm. The
exit status is the highest of the tasks' (128 + N for a task killed by signal N). A task killed by a signal
ends the step (its peers would wait forever in a collective); so does any failure with ``-K`` or
``--auto-resume=1``. ``--auto-resume=1`` means the job's auto-resume: fairpod restarts the whole job
from the top of the batch script when the step fails (``fairpod sbatch`` turns it on when the script asks).

On the local executor every node is this machine: a torchrun rendezvous endpoint or master address that
names a node of the job, or this machine, is pointed at 127.0.0.1 (with the job's port when it has none),
so the seed post's ``--rdzv_endpoint=$(hostname)`` works as it is.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import selectors
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fairpod.formats.slurm.hostlist import HostlistError, compress, expand
from fairpod.formats.slurm.wire import ENV_DIR, Conn, WireError, unb64, wait_nodes

KILL_GRACE = 10.0
# srun options fairpod accepts and ignores: they are about CPU binding, MPI or accounting on a real cluster
IGNORED_WITH_VALUE = {"--mpi", "--cpu-bind", "--cpu_bind", "-c", "--cpus-per-task", "--gpus-per-task", "--gres",
                      "--mem", "--mem-per-cpu", "--mem-per-gpu", "-t", "--time", "-p", "--partition", "-J",
                      "--job-name", "--export", "-m", "--distribution", "--gpus", "-G", "--gpus-per-node", "--hint",
                      "--comment", "--exclude", "-x", "--het-group", "--mem-bind", "--network", "--wait"}
IGNORED_FLAGS = {"--exclusive", "--overlap", "-u", "--unbuffered", "--overcommit", "-O", "--no-kill", "-k",
                 "--quiet", "-Q", "--verbose", "-v", "--pty", "--export-file"}


class SrunError(Exception):
    pass


@dataclass
class Options:
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    nodelist: list[str] | None = None
    label: bool = False
    kill_on_bad_exit: bool = False
    auto_resume: bool = False
    chdir: str | None = None
    notes: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def _int(opt: str, v: str) -> int:
    try:
        n = int(v.split("-")[0])
    except ValueError:
        raise SrunError(f"{opt} wants a number, got {v!r}") from None
    if n < 1:
        raise SrunError(f"{opt} must be at least 1, got {v!r}")
    return n


def _take(argv: list[str], i: int, name: str, eq: str, val: str, short_val: str | None) -> tuple[str, int]:
    """An option's value (``--opt=v``, ``-Xv`` or the next argument) and the index of its last argument."""
    if eq:
        return val, i
    if short_val:
        return short_val, i
    if i + 1 >= len(argv):
        raise SrunError(f"option {name} needs a value")
    return argv[i + 1], i + 1


def parse(argv: list[str]) -> Options:
    o = Options()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        name, eq, val = a.partition("=")
        short_val = None
        if not eq and len(a) > 2 and a[1] != "-":  # -N2, -w node
            name, short_val = a[:2], a[2:]

        if name in ("-N", "--nodes"):
            v, i = _take(argv, i, name, eq, val, short_val)
            o.nodes = _int(name, v)
        elif name in ("-n", "--ntasks"):
            v, i = _take(argv, i, name, eq, val, short_val)
            o.ntasks = _int(name, v)
        elif name == "--ntasks-per-node":
            v, i = _take(argv, i, name, eq, val, short_val)
            o.ntasks_per_node = _int(name, v)
        elif name in ("-w", "--nodelist"):
            v, i = _take(argv, i, name, eq, val, short_val)
            try:
                o.nodelist = expand(v)
            except HostlistError as e:
                raise SrunError(str(e)) from None
        elif name in ("-l", "--label"):
            o.label = True
        elif name in ("-K", "--kill-on-bad-exit"):
            o.kill_on_bad_exit = (val if eq else (short_val or "1")) != "0"
        elif name == "--auto-resume":
            v = val if eq else "1"
            if not eq and i + 1 < len(argv) and argv[i + 1].lower() in ("0", "1", "true", "false", "yes", "no"):
                i += 1
                v = argv[i]
            o.auto_resume = v.lower() in ("1", "true", "yes")
        elif name in ("-D", "--chdir"):
            o.chdir, i = _take(argv, i, name, eq, val, short_val)
        elif name.startswith(("--container-", "--no-container-")):
            image = val if eq else (argv[i + 1] if name == "--container-image" and i + 1 < len(argv) else "")
            if image.endswith((".sqsh", ".squashfs")):
                raise SrunError(f"--container-image {image}: a squashfs file is enroot's image format; fairpod runs "
                                "OCI images from a registry (--container-image=REGISTRY#IMAGE:TAG)")
            raise SrunError(f"{name}: this step would run in a container image, which fairpod does only when srun "
                            "--container-image=REF … CMD is the batch script's only command, or with #SBATCH "
                            "--container-image (docs/slurm.md); here the script's other commands run on the node")
        elif name in IGNORED_WITH_VALUE:
            _, i = _take(argv, i, name, eq, val, short_val)
            o.notes.append(f"{name} has no effect on fairpod's local executor (ignored)")
        elif name in IGNORED_FLAGS:
            o.notes.append(f"{name} has no effect on fairpod's local executor (ignored)")
        else:
            raise SrunError(f"unsupported option {a!r} (fairpod's srun knows -N, -n, --ntasks-per-node, -w, -l, "
                            "-K, -D and --auto-resume)")
        i += 1
    o.command = argv[i:]
    if not o.command:
        raise SrunError("no command given: srun [OPTIONS] COMMAND [ARGS...]")
    return o


# -- torchrun on the local executor ---------------------------------------------------------------------

REWRITE = ("--rdzv_endpoint", "--rdzv-endpoint", "--master_addr", "--master-addr")


def _is_torchrun(cmd: list[str]) -> int | None:
    """Index of the first torchrun argument in ``cmd``, or None when cmd is not torchrun."""
    base = os.path.basename(cmd[0])
    if base == "torchrun":
        return 1
    if base.startswith("python") and len(cmd) > 2 and cmd[1] == "-m" and cmd[2] in (
        "torch.distributed.run", "torch.distributed.launch"
    ):
        return 3
    return None


def _this_machine() -> set[str]:
    names = {"localhost", socket.gethostname(), socket.getfqdn()}
    try:
        names |= {str(ai[4][0]) for ai in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        pass
    return names


def _local(host: str, nodes: set[str]) -> bool:
    if host in nodes or host in _this_machine():
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def rewrite_torchrun(cmd: list[str], nodes: set[str], port: str | None) -> tuple[list[str], list[str]]:
    """Point torchrun's rendezvous at 127.0.0.1 when it names a node of the job or this machine."""
    start = _is_torchrun(cmd)
    if start is None:
        return cmd, []
    out, notes = list(cmd), []
    i = start
    while i < len(out):
        a = out[i]
        if not a.startswith("-"):
            break  # the training script and its own arguments start here
        name, eq, val = a.partition("=")
        if name in REWRITE:
            vi = i if eq else i + 1
            if vi >= len(out):
                break
            value = val if eq else out[vi]
            host, colon, p = value.rpartition(":") if name.startswith("--rdzv") and ":" in value else (value, "", "")
            if _local(host, nodes) and host != "127.0.0.1":
                new = "127.0.0.1"
                if name.startswith("--rdzv"):
                    new += f":{p}" if colon else (f":{port}" if port else "")
                out[vi] = f"{name}={new}" if eq else new
                notes.append(f"torchrun {name} {value} -> {new} (every node of the local executor is this machine)")
            i = vi + 1
            continue
        if not eq and i + 1 < len(out) and not out[i + 1].startswith("-") and a not in ("--standalone",
                                                                                          "--no-python", "-m",
                                                                                          "--module", "--no_python",
                                                                                          "--run-path", "--run_path"):
            i += 2  # an option with its value
        else:
            i += 1
    return out, notes


# -- running a step -------------------------------------------------------------------------------------


@dataclass
class Task:
    procid: int
    node: str
    code: int | None = None
    sig: int | None = None
    ended: bool = False


class LineWriter:
    """srun's output, line-buffered per task and stream as Slurm's srun does (with ``-l``: ``task: `` first),
    so lines of different tasks never cut into each other."""

    def __init__(self, label: bool) -> None:
        self.label = label
        self.partial: dict[tuple[int, int], bytes] = {}
        self.streams = {1: sys.stdout.buffer, 2: sys.stderr.buffer}

    def _emit(self, task: int, fd: int, data: bytes) -> None:
        if self.label:
            data = b"".join(f"{task}: ".encode() + line for line in data.splitlines(keepends=True))
        self.streams[fd].write(data)
        self.streams[fd].flush()

    def write(self, task: int, fd: int, data: bytes) -> None:
        buf = self.partial.get((task, fd), b"") + data
        cut = buf.rfind(b"\n") + 1
        if cut:
            self._emit(task, fd, buf[:cut])
        self.partial[(task, fd)] = buf[cut:]

    def flush(self, task: int | None) -> None:
        """What is left of a task's last line (every task's when ``task`` is None)."""
        for (t, fd), rest in list(self.partial.items()):
            if rest and (task is None or t == task):
                self._emit(t, fd, rest)
                self.partial[(t, fd)] = b""


def _step_id(run_dir: Path) -> int:
    path = run_dir / "steps"
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = int(f.read().strip() or "-1") + 1
        f.seek(0)
        f.truncate()
        f.write(str(n))
    return n


def layout(o: Options, job_nodes: list[str], default_tpn: int) -> list[tuple[int, list[int]]]:
    """[(job rank of node, [procid, …])] for the step."""
    if o.nodelist is not None:
        unknown = [n for n in o.nodelist if n not in job_nodes]
        if unknown:
            raise SrunError(f"node(s) {', '.join(unknown)} are not part of this job ({compress(job_nodes)})")
        ranks = [job_nodes.index(n) for n in o.nodelist]
    else:
        n = o.nodes or (min(o.ntasks, len(job_nodes)) if o.ntasks and not o.ntasks_per_node else len(job_nodes))
        if n > len(job_nodes):
            raise SrunError(f"{n} nodes asked for; the job has {len(job_nodes)}")
        ranks = list(range(n))
    if o.nodes is not None and len(ranks) != o.nodes:
        raise SrunError(f"-N {o.nodes} and -w list {len(ranks)} nodes")
    if o.ntasks_per_node:
        per = [o.ntasks_per_node] * len(ranks)
    elif o.ntasks:
        if o.ntasks < len(ranks):
            raise SrunError(f"{o.ntasks} tasks cannot cover {len(ranks)} nodes")
        base, extra = divmod(o.ntasks, len(ranks))
        per = [base + (1 if i < extra else 0) for i in range(len(ranks))]
    else:
        per = [default_tpn] * len(ranks)
    out, pid = [], 0
    for r, k in zip(ranks, per, strict=True):
        out.append((r, list(range(pid, pid + k))))
        pid += k
    return out


def run_step(o: Options, env: dict[str, str]) -> int:
    run_dir = Path(env[ENV_DIR])
    job_nodes = expand(env.get("SLURM_JOB_NODELIST", ""))
    if not job_nodes:
        raise SrunError("SLURM_JOB_NODELIST is empty")
    plan = layout(o, job_nodes, int(env.get("SLURM_NTASKS_PER_NODE", "1") or 1))
    if o.auto_resume and env.get("SLURM_JOB_AUTO_RESUME") != "1":
        print("srun: warning: --auto-resume=1, but the job was submitted without auto-resume: a failure "
              "ends the job (add '#FAIRPOD --auto-resume' to the script)", file=sys.stderr, flush=True)
    cmd, notes = rewrite_torchrun(o.command, set(job_nodes), env.get("MASTER_PORT"))
    if cmd[0] in ("/bin/hostname", "/usr/bin/hostname"):  # Slurm's quick start: srun -N3 -l /bin/hostname
        cmd = ["hostname", *cmd[1:]]  # the job's own, first on PATH: the node's name, as on a cluster
    for n in o.notes + notes:
        print(f"srun: {n}", file=sys.stderr, flush=True)
    recs = wait_nodes(run_dir, [r for r, _ in plan])
    step = _step_id(run_dir)
    ntasks = sum(len(t) for _, t in plan)
    step_nodes = [job_nodes[r] for r, _ in plan]
    tasks: dict[int, Task] = {}
    conns: list[tuple[Conn, str]] = []
    sel = selectors.DefaultSelector()
    task_env = {k: v for k, v in env.items() if k not in ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID")}
    for nodeid, (r, procids) in enumerate(plan):
        rec = recs[r]
        try:
            c = Conn.connect(int(rec["port"]))
        except OSError as e:
            raise SrunError(f"cannot reach node {rec['node']}: {e}") from None
        c.send({"key": rec["key"], "op": "run", "step": step, "argv": cmd, "env": task_env,
                "cwd": o.chdir or os.getcwd(), "nodeid": nodeid, "nnodes": len(plan), "ntasks": ntasks,
                "nodelist": compress(step_nodes), "tasks_per_node": ",".join(str(len(t)) for _, t in plan),
                "tasks": [{"procid": p, "localid": i} for i, p in enumerate(procids)]})
        for p in procids:
            tasks[p] = Task(p, str(rec["node"]))
        conns.append((c, str(rec["node"])))
        sel.register(c.sock, selectors.EVENT_READ, (c, str(rec["node"])))

    got: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        got.append(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, on_signal)

    def broadcast(sig: int) -> None:
        for c, _ in conns:
            try:
                c.send({"op": "signal", "sig": int(sig)})
            except OSError:
                pass

    forwarded = 0
    kill_at: float | None = None
    killed = False
    open_conns = len(conns)
    lines = LineWriter(o.label)
    while open_conns:
        while forwarded < len(got):
            broadcast(got[forwarded])
            forwarded += 1
        if kill_at is not None and not killed and time.monotonic() >= kill_at:
            broadcast(signal.SIGKILL)
            killed = True
        ready = [key.data for key, _ in sel.select(timeout=0.2)]
        ready += [(c, node) for c, node in conns if c.pending() and (c, node) not in ready]
        for c, node in ready:
            if c.sock.fileno() < 0:
                continue
            try:
                msg = c.recv()
            except (OSError, WireError):
                msg = None
            if msg is None or msg.get("t") == "done":
                sel.unregister(c.sock)
                c.close()
                open_conns -= 1
                for t in tasks.values():
                    if t.node == node and not t.ended and msg is None:
                        t.ended, t.code = True, None
                        t.sig = signal.SIGKILL
                        print(f"srun: error: {node}: lost the connection to the node", file=sys.stderr, flush=True)
                continue
            kind = msg.get("t")
            if kind == "out":
                lines.write(int(msg["task"]), 1 if msg.get("fd") == 1 else 2, unb64(str(msg["data"])))
            elif kind == "exit":
                lines.flush(int(msg["task"]))
                t = tasks[int(msg["task"])]
                t.ended, t.code, t.sig = True, msg.get("code"), msg.get("signal")
                bad = t.sig is not None or (t.code or 0) != 0
                if t.sig is not None:
                    name = signal.Signals(t.sig).name if t.sig in signal.valid_signals() else f"signal {t.sig}"
                    print(f"srun: error: {node}: task {t.procid}: {name}", file=sys.stderr, flush=True)
                elif t.code:
                    print(f"srun: error: {node}: task {t.procid}: Exited with exit code {t.code}", file=sys.stderr,
                          flush=True)
                if bad and kill_at is None and (t.sig is not None or o.kill_on_bad_exit or o.auto_resume):
                    if any(not x.ended for x in tasks.values()):
                        print(f"srun: Terminating StepId={env.get('SLURM_JOB_ID', '?')}.{step}", file=sys.stderr,
                              flush=True)
                        broadcast(signal.SIGTERM)
                        kill_at = time.monotonic() + KILL_GRACE
            elif kind == "error":
                raise SrunError(f"node {node}: {msg.get('msg')}")
    lines.flush(None)
    codes = [128 + t.sig if t.sig is not None else (t.code if t.code is not None else 1) for t in tasks.values()]
    return max(codes) if codes else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    env = dict(os.environ)
    try:
        if not env.get(ENV_DIR):
            raise SrunError("not inside a job submitted with 'fairpod sbatch' (FAIRPOD_SLURM_DIR is not set)")
        return run_step(parse(args), env)
    except (SrunError, WireError, HostlistError) as e:
        print(f"srun: error: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
