"""Supervisor of one replica: ``python -m fairpod.executors.supervisor <replica_dir>``.

The local executor starts it in a new session, so it outlives the control plane (also a ``kill -9`` of it).
It reads ``launch.json`` from ``replica_dir`` (layout in :mod:`fairpod.executors.state`) and:

1. installs its signal handlers, becomes a child subreaper (orphaned descendants re-parent to it, so a
   grandchild that called ``setsid`` and lost its parent is still found), then writes ``supervisor.pid``;
2. starts the command in its own session and process group, stdout and stderr appended to ``output.log``
   after a header line; a command that cannot start (not found, not executable, missing workdir) is
   recorded with a clear reason instead;
3. on SIGTERM / SIGINT / a ``stop.json``: SIGTERM to the group and to every descendant (to the group only when
   the command's env sets ``FAIRPOD_TERM_GROUP_FIRST``: it stops its other sessions itself), then, after the grace
   period, SIGKILL to all of them, repeated until none is left;
4. when the command ends, leftover descendants get SIGTERM and, after ``min(grace, 5 s)``, SIGKILL;
5. when it has no child left, writes ``status.json`` atomically and exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import shlex
import signal
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fairpod import sandbox
from fairpod.executors import logs, patient, procs, readycheck, state
from fairpod.sandbox import environment as isolation

# a command that stops what it started in other sessions itself (a Ray job's Ray processes: fairpod.executors.raycluster)
# sets this in its env: a stop's SIGTERM goes to its process group only; the rest gets SIGKILL after the grace period
GROUP_FIRST = "FAIRPOD_TERM_GROUP_FIRST"
LEFTOVER_GRACE = 5.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Supervisor:
    standing_by = False  # fairpod.executors.standby.Standby: holds a spare of the replica, started ahead of a failure
    box_dir: Path | None = None  # the directory the cgroup is named after (None: the replica's)

    def __init__(self, rdir: Path) -> None:
        self.dir = rdir
        spec = state.read_launch(rdir, secret=not self.standing_by)  # a standby's spare: the next launch's own
        if spec is None:
            raise SystemExit(f"fairpod supervisor: no readable {state.LAUNCH} in {rdir}")
        self.spec: dict[str, Any] = spec
        self.grace = float(spec.get("grace_seconds", 30.0))
        self.signals = 0  # stop signals received
        self.handled = 0  # stop signals acted on
        self.stop_asked = False
        self.cleanup = False
        self.killing = False
        self.term_kill: int | None = None  # the engine's kill carrying a container's SIGTERM; -1: it was refused
        self.kill_at: float | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self.wait_status: int | None = None
        self.no_children = False
        self.sandbox: sandbox.Sandbox | None = None
        self.started_at = time.time()
        ready = spec.get("readiness")  # a service's readiness command: run in the replica's sandbox (readycheck)
        self.ready_check = readycheck.ReadyCheck(rdir, [str(a) for a in ready]) if ready else None
        self.probe: Any = None  # starts one probe, once the command has started (start, _start_container)
        self.wake, wfd = os.pipe()
        os.set_blocking(self.wake, False)
        os.set_blocking(wfd, False)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        signal.signal(signal.SIGHUP, lambda s, f: None)  # not SIG_IGN: the command must not inherit that
        procs.become_subreaper()
        # the output goes through a pipe into the log, kept within policy.log_max_bytes (fairpod.executors.logs)
        self.log = logs.CappedLog(rdir / state.OUTPUT, int(spec.get("log_max_bytes") or logs.DEFAULT_CAP))
        self.out = logs.LogPump(self.log)
        if not self.standing_by:  # a standby (fairpod.executors.spare) writes it once it takes the replica over
            state.write_pid(rdir / state.SUPERVISOR_PID, os.getpid(), procs.start_time(os.getpid()))

    def _on_stop(self, signum: int, frame: object) -> None:
        self.signals += 1

    def note(self, text: str) -> None:
        with contextlib.suppress(OSError):  # e.g. the disk is full: a lost line of the log never stops the replica
            self.log.write(f"==== fairpod: {text} ====\n".encode())

    def _stop_requested(self) -> bool:
        return self.signals > 0 or (self.dir / state.STOP).exists()

    def _stop_grace(self) -> float:
        req = state.read_json(self.dir / state.STOP) or {}
        try:
            return max(0.0, float(req.get("grace_seconds", self.grace)))
        except (TypeError, ValueError):
            return self.grace

    def _signal_tree(self, sig: int) -> None:
        """``sig`` to the command's process group, and to each descendant outside it: once per process."""
        group = self.child.pid if self.child is not None and self.wait_status is None else None
        if self.spec.get("container") and sig != signal.SIGKILL and group is not None:
            engine = sandbox.container.detect()  # through the runtime to the container's init, then the command
            if engine is not None:
                name = sandbox.container.name_of(self.spec, str(self.dir.resolve()))
                self.term_kill = subprocess.Popen([engine.path, "kill", "--signal", str(int(sig)), name],
                                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL).pid
            return
        if group is not None:
            procs.signal_group(group, sig)
        others = [p for p in procs.descendants(os.getpid()) if group is None or procs.pgid(p) != group]
        if self.sandbox is not None:  # what escaped the tree (a double fork re-parented elsewhere) is still here
            others += [p for p in self.sandbox.pids() if p not in others and p != group]
        procs.signal_all(others, sig)

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.no_children = True
                return
            if pid == 0:
                return
            if self.ready_check is not None and self.ready_check.reaped(pid, status):
                continue
            if pid == self.term_kill:  # refused while the engine was still creating the container: sent again
                self.term_kill = -1 if os.waitstatus_to_exitcode(status) else None
            if self.child is not None and pid == self.child.pid:
                self.wait_status = status
                self.child.returncode = os.waitstatus_to_exitcode(status)

    def start(self) -> dict[str, Any] | None:
        """Start the command; on failure the result to record."""
        cmd: list[str] = list(self.spec["command"])
        cwd: str | None = self.spec.get("workdir")
        s = self.spec
        resumed = str((s.get("env") or {}).get("FAIRPOD_PREEMPTION_COUNT", "0"))
        resumed = f", resumed after {resumed} preemption(s)" if resumed not in ("", "0") else ""
        self.note(
            f"job {s.get('job')} (team {s.get('team')}) attempt {s.get('attempt')}{resumed} replica {s.get('rank')}"
            f"/{s.get('world_size')} on node {s.get('node')} started {_now()}: {shlex.join(cmd)}"
        )
        if self.spec.get("container"):
            return self._start_container()
        try:  # the workdir the job named, by the rules of fairpod.sandbox.hostpaths, on this node, now
            sandbox.paths_of(self.spec, self.dir, None)
        except sandbox.hostpaths.HostPathError as e:
            return {"returncode": 126, "signal": None, "reason": str(e)}
        if cwd and not os.path.isdir(cwd):
            return {"returncode": 127, "signal": None, "reason": f"workdir not found: {cwd}"}
        env = isolation.base_env(os.environ)
        ids: dict[str, Any] = {}
        self.user_name = ""
        mode = sandbox.mode()
        view = None
        if mode == "full":
            why = sandbox.namespaces.supported()
            if why is None:
                view = sandbox.view_of(self.spec, self.dir)
            else:
                self.note(f"files not isolated: {why}")
        try:
            user = isolation.resolve(self.spec.get("run_as"))
            if user is None and not self.spec.get("run_as") and view is not None and os.geteuid() == 0:
                user = sandbox.users.team_user(str(s.get("team")))  # root, no run_as: the team's own user
                env.update(user.env)
                ids = {"user": user.uid, "group": user.gid, "extra_groups": [user.gid]}
                env.update(self.spec.get("env", {}))
                for own in sandbox.own_dirs(self.spec):  # the namespace shows them; their parents stay shut
                    own.mkdir(parents=True, exist_ok=True)
                    os.chown(own, user.uid, user.gid)
                    os.chmod(own, 0o700)
            elif user is not None:
                env.update(user.env)
                ids = {"user": user.uid, "group": user.gid, "extra_groups": user.groups()}
                env.update(self.spec.get("env", {}))
                if env.get("FAIRPOD_CHECKPOINT_DIR"):
                    isolation.hand_over(Path(env["FAIRPOD_CHECKPOINT_DIR"]), user)
            else:
                env.update(self.spec.get("env", {}))
            if view is not None:
                for own in sandbox.own_dirs(self.spec):  # made before the view, which binds them
                    own.mkdir(parents=True, exist_ok=True)
                    if user is not None:
                        os.chown(own, user.uid, user.gid)
        except (isolation.RunAsError, OSError) as e:
            return {"returncode": 126, "signal": None, "reason": str(e)}
        self.user_name = user.name if user is not None else ""
        if view is not None:  # what of its interpreter and program lies under the host's /tmp (its own is empty)
            wanted = sandbox.reach.wanted(cmd[0], env.get("PATH"), cwd)
            view = dataclasses.replace(view, from_tmp=sandbox.reach.from_tmp(wanted, view.hide))
        if view is not None and ids:  # its interpreter and program, even under a directory the user cannot enter
            gids = (ids["group"], *ids["extra_groups"])
            mine = {str(d) for d in sandbox.own_dirs(self.spec)}  # and its own directories (checkpoints), writable
            ops = sandbox.reach.plan(wanted + sandbox.reach.ways_to(sorted(mine), view.hide), ids["user"], gids,
                                     view.hide)
            # a workdir under a covered directory (which the user could not enter) is not brought back by it
            shut = [o.path for o in ops if o.kind == "cover"]
            keep = tuple(k for k in view.keep if k in mine or not any(sandbox.reach.inside(k, c) for c in shut))
            for k in view.keep:
                if k not in keep:
                    under = next(c for c in shut if sandbox.reach.inside(k, c))
                    self.note(f"{k} is not bound into the replica's view: it lies under {under}, which user "
                              f"{user.name if user is not None else ids['user']} cannot enter")
            view = dataclasses.replace(view, reach=ops, keep=keep)
        self.sandbox = box = sandbox.Sandbox(self.spec, view, self.box_dir or self.dir) if mode != "off" else None
        for n in box.notes if box is not None else ():
            self.note(n)

        def enter() -> None:  # in the child: the sandbox first (as root), then the user, then the workdir
            if box is not None:
                box.enter()
            if ids:
                os.setgroups(ids["extra_groups"])
                os.setresgid(ids["group"], ids["group"], ids["group"])
                os.setresuid(ids["user"], ids["user"], ids["user"])
            if self.spec.get("umask") is not None:  # run as its submitter: the files are made as theirs would be
                os.umask(int(self.spec["umask"]))
            if view is not None and cwd:
                os.chdir(cwd)  # as seen in the replica's own view, as its user

        try:
            self.child = self._popen(cmd, cwd, env, enter)
        except FileNotFoundError:
            return {"returncode": 127, "signal": None, "reason": f"command not found: {cmd[0]}"}
        except PermissionError:
            who = f" (as user {self.user_name}: check the command and the workdir {cwd})" if ids else ""
            return {"returncode": 126, "signal": None, "reason": f"permission denied: {cmd[0]}{who}"}
        except OSError as e:
            return {"returncode": 126, "signal": None, "reason": f"cannot start {cmd[0]}: {e.strerror or e}"}
        except subprocess.SubprocessError as e:  # the sandbox could not be entered
            return {"returncode": 126, "signal": None, "reason": f"cannot start {cmd[0]} in its sandbox: {e}"}
        state.write_pid(self.dir / state.CHILD_PID, self.child.pid, procs.start_time(self.child.pid))
        self.probe = self._host_probe(env, ids, cwd, box, view)
        return None

    def _popen(self, cmd: list[str], cwd: str | None, env: dict[str, str], enter: Any) -> subprocess.Popen[bytes]:
        """The command in its sandbox (``enter`` in the child); a standby hands the launch to its spare instead."""
        return subprocess.Popen(cmd, cwd=cwd or None, env=env, preexec_fn=enter, stdin=subprocess.DEVNULL,
                                stdout=self.out.w, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)

    def _host_probe(self, env: dict[str, str], ids: dict[str, Any], cwd: str | None, box: sandbox.Sandbox | None,
                    view: sandbox.namespaces.View | None) -> Any:
        """What starts one readiness probe of a host command: in the replica's cgroup and namespaces, as its user,
        with its environment, in its working directory (fairpod.executors.readycheck)."""
        if self.ready_check is None:
            return None
        argv, penv = self.ready_check.command, {**env, "FAIRPOD_SERVICE_HOST": "127.0.0.1"}
        outer = self.child.pid if self.child is not None else 0

        def launch() -> subprocess.Popen[bytes]:
            init = sandbox.namespaces.ns_init(outer) if view is not None else None
            if view is not None and init is None:
                raise OSError("the replica's namespaces are gone")

            def enter() -> None:  # in the child: the cgroup, the namespaces (as root), then the user, the workdir
                if box is not None and box.group is not None:
                    box.group.join(0)
                if view is not None and init is not None:
                    sandbox.namespaces.join(init, view.user_ns)
                if ids:
                    os.setgroups(ids["extra_groups"])
                    os.setresgid(ids["group"], ids["group"], ids["group"])
                    os.setresuid(ids["user"], ids["user"], ids["user"])
                if cwd:
                    os.chdir(cwd)

            return readycheck.popen(argv, penv, None, enter)
        return launch

    def _start_container(self) -> dict[str, Any] | None:
        """The replica in its image (fairpod.sandbox.container): its cgroup, user, environment and GPUs as for a
        host command; the engine itself runs outside the replica's cgroup, the container inside it."""
        s, ctr = self.spec, sandbox.container
        c = s["container"]
        engine = ctr.detect()
        if engine is None:
            return {"returncode": 127, "signal": None,
                    "reason": f"no container engine on node {s.get('node')}: install podman and runc (or crun)"}
        env = isolation.base_env(os.environ)
        try:
            user = isolation.resolve(s.get("run_as"))
            if user is None and not s.get("run_as") and os.geteuid() == 0:
                user = sandbox.users.team_user(str(s.get("team")))
            env.update(user.env if user is not None else {})
            env.update(s.get("env", {}))
            for own in sandbox.own_dirs(s):
                own.mkdir(parents=True, exist_ok=True)
                if user is not None:
                    os.chown(own, user.uid, user.gid)
                    os.chmod(own, 0o700)
        except (isolation.RunAsError, OSError) as e:
            return {"returncode": 126, "signal": None, "reason": str(e)}
        try:
            c = sandbox.paths_of(s, self.dir, (user.uid, user.gid) if user is not None else None) or c
        except sandbox.hostpaths.HostPathError as e:
            return {"returncode": 126, "signal": None, "reason": str(e)}
        s = {**s, "container": {**c, "launcher": str(Path(__file__).with_name("raycluster.py"))} if c.get("ray") else c}
        workdir = c.get("workdir")
        if workdir and not os.path.isdir(c["workdir_source"]):
            return {"returncode": 127, "signal": None, "reason": f"workdir not found: {workdir}"}
        self.sandbox = box = sandbox.Sandbox(s, None, self.dir) if sandbox.mode() != "off" else None
        for n in box.notes if box is not None else ():
            self.note(n)
        policy = c.get("pull") or ctr.default_policy(c["image"])
        auth = c.get("auth_file") if c.get("auth_file") and os.path.exists(c["auth_file"]) else None
        failed, said = ctr.pull(engine, c["image"], policy, auth)
        if failed is not None:
            return {"returncode": None, "signal": None, "reason": failed, "image_pull_failed": True}
        self.note(f"{said}; engine {engine.describe()}")
        pids = box.pids_max if box is not None else None
        argv = ctr.run_argv(engine, s, env, pids=pids, name=ctr.name_of(s, str(self.dir.resolve())),
                            user=(user.uid, user.gid, *user.groups()) if user is not None else None,
                            cgroup_parent=box.container_parent() if box is not None else None)
        try:
            self.child = subprocess.Popen(argv, env=dict(os.environ), stdin=subprocess.DEVNULL, stdout=self.out.w,
                                          stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except OSError as e:
            return {"returncode": 126, "signal": None, "reason": f"cannot start {engine.path}: {e.strerror or e}"}
        state.write_pid(self.dir / state.CHILD_PID, self.child.pid, procs.start_time(self.child.pid))
        if self.ready_check is not None:  # in the container, as its user, by the engine (readycheck)
            probe = [engine.path, "exec", "--env", "FAIRPOD_SERVICE_HOST=127.0.0.1",
                     ctr.name_of(s, str(self.dir.resolve())),
                     *self.ready_check.command]
            self.probe = lambda: readycheck.popen(probe, dict(os.environ), None, None)
        return None

    def _deadline(self, at: float) -> None:
        self.kill_at = at if self.kill_at is None else min(self.kill_at, at)

    def _step(self) -> bool:
        """One turn of the loop; True when everything has ended."""
        self._reap()
        now = time.monotonic()
        if self.signals > self.handled or (not self.stop_asked and self._stop_requested()):
            self.handled = self.signals
            grace = self._stop_grace()  # a second stop may shorten the grace period, never lengthen it
            self.note(f"stop requested {_now()}: SIGTERM, SIGKILL after {grace:g}s")
            if not self.stop_asked:
                self.stop_asked = True
                if not self.cleanup and self.child is not None and (self.spec.get("env") or {}).get(GROUP_FIRST):
                    procs.signal_group(self.child.pid, signal.SIGTERM)  # the command stops what it started
                elif not self.cleanup:  # in clean-up, what is left has had its SIGTERM already
                    self._signal_tree(signal.SIGTERM)
            self._deadline(now + grace)
        if self.term_kill == -1 and self.wait_status is None and not self.killing:
            self._signal_tree(signal.SIGTERM)
        if self.wait_status is not None:
            if self.no_children:
                self.out.drain()
                return True
            if not self.cleanup:
                self.cleanup = True
                if not self.stop_asked:
                    self.note("command ended; stopping the processes it left behind")
                    self._signal_tree(signal.SIGTERM)
                self._deadline(now + min(self.grace, LEFTOVER_GRACE))
        if self.ready_check is not None:
            if self.wait_status is None and not self.stop_asked and self.probe is not None:
                self.ready_check.step(now, self.probe)
            elif self.probe is not None:
                self.probe = None
                self.ready_check.stop()
        if self.kill_at is not None and now >= self.kill_at:
            if not self.killing:
                self.killing = True
                self.note(f"grace period over {_now()}: SIGKILL")
            self._signal_tree(signal.SIGKILL)
        timeout = 1.0
        if self.kill_at is not None:
            timeout = 0.05 if self.killing else max(0.0, min(1.0, self.kill_at - now))
        if self.probe is not None and self.ready_check is not None:
            timeout = min(timeout, self.ready_check.wake_in(now))
        self.out.started()  # the command has its end of the pipe, or never will
        select.select([self.wake, *self.out.fds()], [], [], timeout)
        self.out.pump()
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake, 512):
                pass
        return False

    def run(self) -> dict[str, Any]:
        if self._stop_requested():
            self.stop_asked = True
            self.note(f"stopped before start {_now()}")
            return {"returncode": None, "signal": None, "reason": "stopped before start"}
        failed = self.start()
        if failed is not None:
            return failed
        while not self._step():
            pass
        st = self.wait_status
        assert st is not None
        if os.WIFSIGNALED(st):
            sig = os.WTERMSIG(st)
            return {"returncode": None, "signal": sig, "reason": f"killed by {procs.signal_name(sig)}"}
        code = os.WEXITSTATUS(st) if os.WIFEXITED(st) else None
        why = sandbox.container.exec_failure(code, self.dir / state.OUTPUT, self.spec.get("container"), self.spec)
        return {"returncode": code, "signal": None, "reason": why or f"exited {code}"}

    def abort(self) -> None:
        """After an internal error: kill everything that was started, bounded in time."""
        for _ in range(100):
            self._signal_tree(signal.SIGKILL)
            self._reap()
            if self.no_children:
                return
            time.sleep(0.05)

    def finish(self, result: dict[str, Any]) -> None:
        if self.ready_check is not None:
            self.ready_check.stop()
        if self.sandbox is not None:
            self.sandbox.finish(result)
        result.update(started_at=self.started_at, ended_at=time.time(), stop_requested=self.stop_asked)
        self.out.drain()
        self.note(f"replica ended {_now()}: {result['reason']}")
        self.out.close()
        self.log.close()
        patient.write_json(self.dir / state.STATUS, result)  # a full disk: kept and retried, never lost
        sandbox.container.remove_killed(self.spec, str(self.dir.resolve()), self.child, self.killing, self.wait_status)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m fairpod.executors.supervisor REPLICA_DIR", file=sys.stderr)
        return 2
    sup = Supervisor(Path(args[0]))
    try:
        result = sup.run()
    except Exception as e:
        traceback.print_exc()
        sup.abort()
        result = {"returncode": None, "signal": None, "reason": f"supervisor error: {e}"}
    sup.finish(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
