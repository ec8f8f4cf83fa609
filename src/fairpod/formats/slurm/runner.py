"""``python -m fairpod.formats.slurm.runner [SCRIPT ARGS…]``: what every replica of a ``fairpod sbatch`` job runs.

Replica 0 is the batch host: it runs the submitted script once, as Slurm does on the first node of the
allocation, with the ``SLURM_*`` variables and ``srun``, ``scontrol`` and ``hostname`` first on its PATH;
the script's output goes to the ``--output``/``--error`` files and to the replica's log. Every replica
(replica 0 too) serves job steps: ``srun`` in the script starts its tasks on the nodes through them. When
the script ends, replica 0 ends the other replicas and exits with the script's exit status, which is the
job's outcome (a non-zero one restarts the job when it has auto-resume).

On SIGTERM (preemption, cancellation) nothing is cut short here: fairpod's supervisor sends SIGTERM to
every process of the job, so the tasks checkpoint and end; the runner waits for them and ends too.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from fairpod.formats.slurm.agent import StepServer
from fairpod.formats.slurm.hostlist import compress
from fairpod.formats.slurm.wire import (
    ENV_CONFIG,
    ENV_DIR,
    Conn,
    WireError,
    read_node,
    run_dir_for,
    wait_nodes,
)
from fairpod.model.keys import job_id_of

SHIMS = {"srun": "fairpod.formats.slurm.srun", "scontrol": "fairpod.formats.slurm.shims scontrol",
         "hostname": "fairpod.formats.slurm.shims hostname"}


def job_id(env: dict[str, str] | os._Environ[str]) -> str:
    if env.get("FAIRPOD_JOB_ID"):
        return env["FAIRPOD_JOB_ID"]
    jid = job_id_of(env.get("FAIRPOD_JOB", ""))  # the job key fairpod gave the replica
    return str(jid) if jid is not None else env.get("FAIRPOD_JOB") or "0"


def expand_pattern(pattern: str, env: dict[str, str], node: str) -> str:
    """Slurm's file-name patterns: %j %J %A job id, %x job name, %N node, %n node id, %t task id, %u user,
    %s step ("batch"), %a array index, %% a percent sign."""
    jid = job_id(env)
    subs = {"j": jid, "J": jid, "A": env.get("SLURM_ARRAY_JOB_ID", jid), "x": env.get("SLURM_JOB_NAME", ""),
            "N": node, "n": "0", "t": "0", "u": getpass.getuser(), "s": "batch",
            "a": env.get("SLURM_ARRAY_TASK_ID", "4294967294"), "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            j = i + 1
            while j < len(pattern) and pattern[j].isdigit():  # %4j: zero padded
                j += 1
            if j < len(pattern) and pattern[j] in subs:
                width = int(pattern[i + 1 : j] or 0)
                val = subs[pattern[j]]
                out.append(val.zfill(width) if val.isdigit() else val)
                i = j + 1
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def write_shims(bindir: Path) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    for name, mod in SHIMS.items():
        p = bindir / name
        p.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m {mod} "$@"\n')
        p.chmod(0o755)


def node_env(env: dict[str, str] | os._Environ[str], node: str) -> dict[str, str]:
    out = {"SLURMD_NODENAME": node, "SLURM_TOPOLOGY_ADDR": node, "HOSTNAME": node}
    if env.get("CUDA_VISIBLE_DEVICES") is not None:
        out["SLURM_JOB_GPUS"] = env["CUDA_VISIBLE_DEVICES"]
    return out


class Tee:
    """Copies a pipe to files and to our stdout (the replica's log)."""

    def __init__(self, src: IO[bytes], sinks: list[IO[bytes]]) -> None:
        self.src = src
        self.sinks = sinks
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        fd = self.src.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            for s in self.sinks:
                try:
                    s.write(chunk)
                    s.flush()
                except (OSError, ValueError):
                    pass


def _say(msg: str) -> None:
    print(f"fairpod: {msg}", flush=True)


def _open_output(path: Path, append: bool) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "ab" if append else "wb")  # noqa: SIM115 - closed at the end of the batch script


def run_batch(server: StepServer, cfg: dict[str, Any], args: list[str], run_dir: Path) -> int:
    env = dict(os.environ)
    nnodes = int(env.get("WORLD_SIZE", "1"))
    names = [n for n in env.get("FAIRPOD_NODES", "").split(",") if n]
    if cfg.get("wait_all_nodes") or len(names) != nnodes:
        recs = wait_nodes(run_dir, list(range(nnodes)))
        names = [str(recs[r]["node"]) for r in range(nnodes)]
    nodelist = compress(names)
    ntpn = int(cfg.get("ntasks_per_node") or 1)
    ntasks = int(cfg.get("ntasks") or ntpn * nnodes)
    jid = job_id(env)
    bindir = run_dir / "bin"
    write_shims(bindir)
    slurm = {
        "SLURM_JOB_ID": jid, "SLURM_JOBID": jid, "SLURM_JOB_NAME": str(cfg.get("name", "")),
        "SLURM_JOB_NUM_NODES": str(nnodes), "SLURM_NNODES": str(nnodes),
        "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
        "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
        "SLURM_NTASKS": str(ntasks), "SLURM_NPROCS": str(ntasks), "SLURM_NTASKS_PER_NODE": str(ntpn),
        "SLURM_TASKS_PER_NODE": f"{ntpn}(x{nnodes})" if nnodes > 1 else str(ntpn),
        "SLURM_CPUS_ON_NODE": str(os.cpu_count() or 1),
        "SLURM_SUBMIT_DIR": str(cfg.get("submit_dir") or os.getcwd()),
        "SLURM_SUBMIT_HOST": str(cfg.get("submit_host") or socket.gethostname()),
        "SLURM_JOB_PARTITION": str(cfg.get("partition") or ""), "SLURM_JOB_ACCOUNT": env.get("FAIRPOD_TEAM", ""),
        "SLURM_JOB_USER": getpass.getuser(), "SLURM_CLUSTER_NAME": "fairpod",
        "SLURM_RESTART_COUNT": env.get("FAIRPOD_RESTART_COUNT", "0"),
        "SLURM_JOB_AUTO_RESUME": "1" if cfg.get("auto_resume") else "0",
        ENV_DIR: str(run_dir), "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}",
    }  # fmt: skip
    if cfg.get("gpus_per_node"):
        slurm["SLURM_GPUS_ON_NODE"] = str(cfg["gpus_per_node"])
    env.update(slurm)
    env.update(node_env(os.environ, server.node))
    env.pop(ENV_CONFIG, None)

    script = run_dir / "batch-script"
    script.write_text(str(cfg["script"]))
    script.chmod(0o700)
    node = server.node
    relaunch = (run_dir.parent / "started").exists()
    append = cfg.get("open_mode") == "append" or (relaunch and cfg.get("open_mode") != "truncate")
    step = bool(cfg.get("srun"))  # fairpod srun CMD: its step's output is the log alone, which srun streams
    default_out = "slurm-%A_%a.out" if env.get("SLURM_ARRAY_TASK_ID") else "slurm-%j.out"
    out_path = Path(expand_pattern(str(cfg.get("output") or default_out), env, node))
    err_path = Path(expand_pattern(str(cfg["error"]), env, node)) if cfg.get("error") else None
    out_f = None if step else _open_output(out_path, append)
    err_f = _open_output(err_path, append) if err_path and err_path.absolute() != out_path.absolute() else None
    (run_dir.parent / "started").write_text(f"{time.time()}\n")
    if not step:
        _say(f"batch job {jid} ({cfg.get('name')}) on {nnodes} node(s) {nodelist}: running "
             f"{cfg.get('script_name')} {shlex.join(args)}".rstrip() + f" (output: {out_path.absolute()}"
             + (f", errors: {err_path.absolute()}" if err_f else "") + ")")
    log = sys.stdout.buffer
    try:
        proc = subprocess.Popen([str(script), *args], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        _say(f"cannot run the batch script: {e.strerror or e}")
        return 126
    assert proc.stdout is not None and proc.stderr is not None
    tees = [Tee(proc.stdout, [f for f in (out_f, log) if f is not None]),
            Tee(proc.stderr, [f for f in (err_f or out_f, log) if f is not None])]
    rc = proc.wait()
    for t in tees:
        t.thread.join(5.0)
    for f in (out_f, err_f):
        if f is not None:
            f.close()
    code = rc if rc >= 0 else 128 - rc
    if not step:
        _say(f"batch script ended: exit {code}" + (f" (killed by signal {-rc})" if rc < 0 else ""))
    end_job(server, run_dir, nnodes)
    return code


def end_job(server: StepServer, run_dir: Path, nnodes: int) -> None:
    """Stop what is left of the job's steps here and tell the other nodes to end."""
    server.stop_steps()
    for r in range(1, nnodes):
        rec = read_node(run_dir, r)
        if rec is None:
            continue
        try:
            c = Conn.connect(int(rec["port"]), timeout=5.0)
            c.send({"key": rec["key"], "op": "shutdown"})
            c.recv()
            c.close()
        except (OSError, WireError):
            pass  # that node is gone already
    server.close()


def serve_node(server: StepServer) -> int:
    """A node other than the batch host: serve job steps until replica 0 says the job is over."""
    while not server.shutdown.wait(0.2):
        if server.stopping.is_set():
            while server.busy():  # its tasks got fairpod's SIGTERM too; they end on their own
                time.sleep(0.1)
            server.close()
            return 128 + signal.SIGTERM
    server.stop_steps()
    server.close()
    _say("the batch script has ended: node released")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    env = os.environ
    raw = env.get(ENV_CONFIG)
    if not raw:
        print("fairpod.formats.slurm.runner: runs only as a job submitted with 'fairpod sbatch'", file=sys.stderr)
        return 2
    try:
        cfg = json.loads(raw)
        run_dir = run_dir_for(env)
    except (ValueError, WireError) as e:
        print(f"fairpod.formats.slurm.runner: {e}", file=sys.stderr)
        return 2
    rank = int(env.get("RANK", "0"))
    node = env.get("FAIRPOD_NODE") or socket.gethostname()
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.environ.update(node_env(env, node))
    server = StepServer(run_dir, rank, node, tee=rank != 0)

    def on_term(signum: int, frame: object) -> None:
        server.stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    server.start()
    server.publish()
    if not cfg.get("srun"):
        _say(f"node {node} (rank {rank}) serves job steps on 127.0.0.1:{server.port}")
    try:
        return run_batch(server, cfg, args, run_dir) if rank == 0 else serve_node(server)
    except WireError as e:
        _say(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
