#!/usr/bin/env python3
"""200 jobs of ``true`` to completion on 16 accelerator slots: fairpod against Slurm, on this machine.

fairpod: a live server with the seed cluster (4 nodes x 4 accelerators, teams john and smith), the real local
executor (one supervisor process and one ``true`` per job); each job asks for 1 accelerator.

Slurm (``--with-slurm``): Debian's slurm-wlm 22.05 set up here and now: munged, slurmctld and four
``slurmd -N nX`` (n1..n4, each 4 CPUs and ``Gres=gpu:4`` of fake GPUs, ``select/cons_tres``), all state in a
temporary directory; each job is ``sbatch --wrap true --gres=gpu:1``. The packages are installed with apt-get
when missing (root only).

With ``--cli`` both sides are driven through their command-line tools, as a shell loop does: fairpod with
one ``fairpod start-job ... -- true`` process per job (``benchmarks/cli.py``), Slurm with one ``sbatch`` per job,
``--clients`` at a time (default 1 with --cli: one after another).

Both are timed the same way: from the first submit until the client sees no unfinished job (fairpod:
``GET /jobs?state=Pending&state=Running&state=Preempted``; Slurm: ``squeue`` empty), polling every 0.1 s,
with the same number of concurrent submitters. Every process started here is stopped by its PID.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _live import (  # noqa: E402
    LiveServer,
    exit_on_sigterm,
    fetch_jobs,
    json_line,
    machine_cpu_seconds,
    run_each,
    submit_all,
    table,
    wait_all_finished,
)


def run_fairpod_cli(jobs: int, clients: int, keep: bool) -> dict:
    from cli import cli_loop, compile_fairpod

    compile_fairpod()
    with LiveServer((Path(__file__).resolve().parents[1] / "examples/seed/spec.yaml").read_text(), keep=keep) as srv:
        m0 = machine_cpu_seconds()
        res = cli_loop(srv, jobs, clients, prefix="true")
        m1 = machine_cpu_seconds()
    return {**res, "last_finish_s": None, "machine_cpu_s": m1 - m0}


def run_fairpod(jobs: int, clients: int, keep: bool) -> dict:
    bodies = [{"name": f"true-{i}", "team": "john" if i % 2 else "smith", "accelerators": 1,
               "command": ["true"], "termination_grace_seconds": 1} for i in range(jobs)]
    with LiveServer(keep=keep) as srv:
        m0 = machine_cpu_seconds()
        t0 = time.time()
        submit_all(srv, bodies, clients)
        t_sub = time.time()
        t_end = wait_all_finished(srv, 600, interval=0.1)
        m1 = machine_cpu_seconds()
        recs = fetch_jobs(srv)
    ok = sum(j["state"] == "Succeeded" for j in recs)
    return {"wall_s": t_end - t0, "submit_s": t_sub - t0, "succeeded": ok, "jobs": len(recs),
            "last_finish_s": max(j["finished_at"] for j in recs) - t0, "machine_cpu_s": m1 - m0}


# -- Slurm ------------------------------------------------------------------------------------------------

def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ensure_slurm() -> None:
    need = [b for b in ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "munged") if not shutil.which(b)]
    if not need:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"vs_slurm: {', '.join(need)} missing; install slurm-wlm and munge (root needed)")
    print("  installing slurm-wlm and munge with apt-get ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"]
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, timeout=900).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, stdout=subprocess.DEVNULL, timeout=600, check=True)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, timeout=900, check=True)


class SlurmCluster:
    """munged + slurmctld + 4 slurmd under a temporary directory; ``stop()`` ends exactly those PIDs."""

    def __init__(self, keep: bool = False) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fairpod-slurm-"))
        self.keep = keep
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        ctld, *node_ports = _free_ports(5)
        d = self.dir
        for sub in ("munge", "state", "log", "spool", *(f"spool/n{i}" for i in range(1, 5))):
            (d / sub).mkdir(mode=0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.socket = d / "munge" / "munge.socket.2"
        nodes = "\n".join(
            f"NodeName=n{i + 1} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs=4 RealMemory=4000 "
            "Gres=gpu:4 State=UNKNOWN" for i, p in enumerate(node_ports))
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""\
ClusterName=fpbench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.socket}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
{nodes}
PartitionName=bench Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
""")
        # fake GPUs: four empty files per node stand for /dev/nvidia0..3 (nothing opens them)
        (d / "dev").mkdir()
        for i in range(4):
            (d / "dev" / f"gpu{i}").touch()
        (d / "gres.conf").write_text(f"AutoDetect=off\nNodeName=n[1-4] Name=gpu File={d}/dev/gpu[0-3]\n")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the child keeps it
        p = subprocess.Popen(args, env=self.env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        log.close()
        self.procs.append((name, p))

    def start(self, timeout: float = 60.0) -> None:
        d = self.dir
        self._start("munged", ["munged", "-F", "--force", f"--socket={self.socket}",
                               f"--key-file={d / 'munge' / 'munge.key'}", f"--pid-file={d / 'munge' / 'munged.pid'}",
                               f"--log-file={d / 'log' / 'munged.log'}", f"--seed-file={d / 'munge' / 'seed'}"])
        self._wait(lambda: self.socket.exists(), 20, "munged's socket")
        self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self._run(["sinfo", "-h"]).returncode == 0, timeout, "slurmctld to answer")
        for i in range(1, 5):
            self._start(f"slurmd-n{i}", ["slurmd", "-D", "-N", f"n{i}", "-f", str(self.conf)])
        self._wait(self._all_idle, timeout, "four idle nodes")

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=30)

    def _all_idle(self) -> bool:
        out = self._run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout.split("\n")
        states = [ln.split()[1] for ln in out if ln.strip()]
        return len(states) == 4 and all(s.startswith("idle") for s in states)

    def _wait(self, pred, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited {p.returncode} while waiting for {what}:\n{self.logs()}")
            if pred():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}:\n{self.logs()}")

    def logs(self, n: int = 1500) -> str:
        out = []
        for f in sorted((self.dir / "log").glob("*")):
            text = f.read_text(errors="replace")[-n:]
            if text.strip():
                out.append(f"--- {f.name}\n{text}")
        return "\n".join(out)

    def run_jobs(self, jobs: int, clients: int) -> dict:
        def one(i: int) -> str | None:
            r = self._run(["sbatch", "--parsable", "-J", f"true-{i}", "-n", "1", "-c", "1", "--gres=gpu:1",
                           "-o", "/dev/null", "-D", str(self.dir), "--wrap", "true"])
            return r.stderr.strip() if r.returncode != 0 else None

        m0 = machine_cpu_seconds()
        t0 = time.time()
        error = run_each(jobs, clients, one)
        t_sub = time.time()
        if error is not None:
            raise RuntimeError(f"sbatch failed: {error}\n{self.logs()}")
        for _ in range(6000):  # bounded: 600 s at 0.1 s
            r = self._run(["squeue", "-h", "-o", "%i"])
            if r.returncode == 0 and not r.stdout.strip():
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("Slurm jobs still queued after 600 s")
        t_end = time.time()
        m1 = machine_cpu_seconds()
        return {"wall_s": t_end - t0, "submit_s": t_sub - t0, "jobs": jobs, "machine_cpu_s": m1 - m0}

    def stop(self) -> None:
        try:
            for _, p in reversed(self.procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            for _, p in reversed(self.procs):
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        finally:
            for _, p in self.procs:  # whatever an interruption above left running
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)
            if not self.keep:
                shutil.rmtree(self.dir, ignore_errors=True)


def run_slurm(jobs: int, clients: int, keep: bool) -> dict:
    ensure_slurm()
    cluster = SlurmCluster(keep=keep)
    try:
        cluster.start()
        if keep:
            print(f"  Slurm state kept in {cluster.dir}")
        return cluster.run_jobs(jobs, clients)
    finally:
        cluster.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=200, help="jobs of 'true' (default 200)")
    ap.add_argument("--clients", type=int, default=None,
                    help="concurrent submitters, for both (default 4; 1 with --cli)")
    ap.add_argument("--cli", action="store_true",
                    help="submit through the command-line tools: 'fairpod start-job' and 'sbatch' per job")
    ap.add_argument("--with-slurm", action="store_true",
                    help="also run them on Slurm 22.05 set up on this machine (apt-get installs it if missing)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary state directories")
    a = ap.parse_args()
    if a.clients is None:
        a.clients = 1 if a.cli else 4
    exit_on_sigterm()
    load = os.getloadavg()[0]
    how = "command-line tools (fairpod start-job / sbatch)" if a.cli else "API / sbatch"
    print(f"vs_slurm: {a.jobs} jobs of 'true' on 16 accelerator slots, {a.clients} submitters, {how}; "
          f"load average {load:.1f} on {os.cpu_count()} cores", flush=True)
    fp = (run_fairpod_cli if a.cli else run_fairpod)(a.jobs, a.clients, a.keep)
    rows = [("fairpod (fairpod start-job per job)" if a.cli else "fairpod (local executor, real processes)",
             f"{fp['wall_s']:.2f} s  ({a.jobs / fp['wall_s']:.1f} jobs/s; {fp['succeeded']}/{fp['jobs']} Succeeded; "
             f"submitted in {fp['submit_s']:.2f} s)")]
    out = {"benchmark": "vs_slurm", "cli": a.cli, "jobs": a.jobs, "clients": a.clients, "load_before": load,
           "fairpod_wall_s": fp["wall_s"], "fairpod_succeeded": fp["succeeded"],
           "fairpod_submit_s": fp["submit_s"], "fairpod_machine_cpu_s": fp["machine_cpu_s"]}
    if a.with_slurm:
        sl = run_slurm(a.jobs, a.clients, a.keep)
        ratio = fp["wall_s"] / sl["wall_s"]
        rows += [("Slurm 22.05 (slurmctld + 4 slurmd)",
                  f"{sl['wall_s']:.2f} s  ({a.jobs / sl['wall_s']:.1f} jobs/s; submitted in {sl['submit_s']:.2f} s)"),
                 ("fairpod / Slurm", f"{ratio:.2f}  (target {'< 1: faster than Slurm' if a.cli else '<= 0.33'})")]
        out.update(slurm_wall_s=sl["wall_s"], slurm_submit_s=sl["submit_s"], slurm_machine_cpu_s=sl["machine_cpu_s"],
                   ratio=ratio)
    print(table(rows))
    print(json_line(out))
    return 0 if fp["succeeded"] == fp["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
