"""Suite-wide: the report header says which engine runs (``fairpod.governance.engine_name``: native or pure Python),
and what makes the suite safe to run in parallel (``scripts/test.sh`` runs it with pytest-xdist, ``--dist loadgroup``).

Parallel workers share the machine, so a test that needs a resource there is one of is in an ``xdist_group``: the
tests of one group run one after another on one worker. The groups (given here by path, so a new test file under
these paths is in its group without saying so; a test may also carry ``@pytest.mark.xdist_group(NAME)`` itself):

- ``ray``: the tests of tests/ray, on the session Ray cluster of their worker (tests/ray/conftest.py), which runs
  on a /24 of loopback of that worker's own (127.0.10.x for gw0, 127.0.11.x for gw1, ...: tests/ray/cluster.py).
  (Split in two groups with a cluster each, the run was longer and four Ray tests timed out: two Ray clusters, the
  Ray jobs' clusters, training and the native build at once overloaded the 2 cores.)
- ``rayjobs``: the Ray clusters that fairpod's Ray jobs start on the local executor (tests/server/core/test_rayjobs_live.py,
  the KubeRay files of tests/formats/corpus/test_kube_corpus.py, whose Ray nodes run in containers, and the
  rayStartParams of tests/formats/kube/test_kuberay_start_live.py, the RayService of tests/server/services/test_rayservice_live.py, the standing cluster's head and worker of
  tests/executors/test_raycluster_node_up.py), one at a time: on 127.0.0.1 and on ports free on every address (fairpod.executors.raycluster), so beside the session
  cluster, not in its group (the ``ray`` group bounded the run's wall time: 1,456 of its 1,510 s on one worker).
- ``rayhealth``: the job's Ray cluster whose worker's raylet is stopped 90 s, then killed
  (tests/executors/test_raycluster_health.py): its two tests one after the other, beside the ``rayjobs`` group
  (mostly waiting: in that group they would add 3 minutes to its worker, the run's longest).
- ``users``: the per-team OS users ``fairpod-<team>`` (``fairpod-smith``, ``fairpod-john``...) that the whole
  sandbox creates as root: the tests that make them remove the ``fairpod-*`` users that appeared while they ran,
  which would be another worker's (tests/sandbox's files, reach, devices, live, users, readiness and container
  attacks tests,
  tests/server/access/test_isolation.py, and tests/ray/test_ray_files.py, whose own Ray cluster runs on another /24 of
  loopback, 127.0.100.x, beside the session cluster).
- ``standby``: the standby control planes of tests/server/ha/ (test_ha.py, test_leader.py, test_ha_identity_live.py),
  which bind their ports again after a restart; they listen on a /24 of their own, 127.0.200.x
  (tests/server/ha_cluster.py), where no Ray node holds a port meanwhile. (These three groups were one, ~1/5 of the suite's time on one worker, which bounded
  the run's wall time; ~160 s of it were the users' and standby tests.)
- ``native``: the compiled engine of tests/governance/test_native.py, built once by a module-scoped fixture (minutes
  of mypyc): spread over workers, each would build it again.
- ``module:<path>``: every other module whose tests share a module-scoped fixture (a server for the module, a
  PostgreSQL): one worker sets it up once.

Made unique per worker instead: the cgroups of the replicas. They are named ``<job>-<id>.<attempt>.<rank>.<digest>``
(the digest of the replica's directory: unique per test server, since fairpod.sandbox.group_name); besides, each
worker gets its own cgroup subtree (``FAIRPOD_CGROUP_ROOT``: fairpod's subtree of this host, then the worker's id,
e.g. ``fairpod/gw1``), inherited by every server, executor and Ray node the worker starts. Everything else a test
uses is its own already: free ports, ``tmp_path`` homes and config paths (``FAIRPOD_HOME``, ``FAIRPOD_CONFIG``,
``HOME``), a fresh Chromium profile, a build folder per native build test.

An interrupted run stops what it started: see tests/reaper.py (SIGTERM ends the run as Ctrl-C does, with every
fixture's teardown; what is still running afterwards is killed by the PIDs the fixtures recorded).

One file without workers: ``.venv/bin/python -m pytest -p no:xdist tests/some/test_file.py`` (or ``-n 0``).
"""

from __future__ import annotations

import atexit
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fairpod import governance
from fairpod.sandbox import cgroups

from . import reaper

TESTS = Path(__file__).resolve().parent
# path under tests/ (a folder ends with "/") -> its xdist group (see the docstring)
GROUPS = {
    "ray/test_ray_files.py": "users",
    "ray/": "ray",
    "sandbox/test_files.py": "users",
    "sandbox/test_reach.py": "users",
    "sandbox/test_devices.py": "users",
    "sandbox/test_live.py": "users",
    "sandbox/test_users.py": "users",
    "sandbox/test_readiness.py": "users",
    "sandbox/test_container_attacks.py": "users",
    "server/access/test_isolation.py": "users",
    "server/ha/": "standby",
    "server/core/test_rayjobs_live.py": "rayjobs",
    "executors/test_raycluster_node_up.py": "rayjobs",
    "server/services/test_rayservice_live.py": "rayjobs",
    "formats/corpus/test_kube_corpus.py": "rayjobs",
    "formats/kube/test_kuberay_start_live.py": "rayjobs",
    "governance/test_native.py": "native",
}


# the servers the tests start never compile the engine in the background (fairpod.native.build_in_background):
# one build per test home would cost the suite minutes of CPU; tests/governance/test_native.py builds it once
os.environ["FAIRPOD_NATIVE_BUILD"] = "0"


def pytest_report_header() -> str:
    return f"native engine: {governance.engine_name()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("FAIRPOD_EXPECT_NATIVE") == "1" and not governance.is_native():
        raise pytest.UsageError("FAIRPOD_EXPECT_NATIVE=1 but the engine loaded is pure Python")


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a worker of ``--dist loadgroup``, every test of a group must carry the group in its id (xdist schedules by
    it): a pytest that xdist cannot mark so would spread a group over workers (two Ray clusters on one address)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or not session.config.getoption("loadgroup", False):
        return  # (a pytest started by a test inherits PYTEST_XDIST_WORKER: it has no such option)
    for item in session.items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            raise pytest.UsageError(f"pytest-xdist did not put {item.nodeid} in its xdist_group: this pytest "
                                    f"({pytest.__version__}) and pytest-xdist do not work together; see pyproject.toml")


def group_of(path: Path) -> str | None:
    try:
        rel = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return None
    return next((g for p, g in GROUPS.items() if rel == p or (p.endswith("/") and rel.startswith(p))), None)


def _module_group(item: pytest.Item) -> str | None:
    """A module whose tests share a module-scoped fixture (a server, a PostgreSQL, a cluster of the corpus) is a
    group of its own: spread over workers, each worker would set the fixture up again (the Slurm corpus's server
    and its jobs, ~85 s, were set up twice in a run)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    shared = any(d.scope in ("module", "package") for defs in info.name2fixturedefs.values() for d in defs[-1:])
    return f"module:{item.path.resolve().relative_to(TESTS).as_posix()}" if shared and item.path.is_relative_to(TESTS) \
        else None


# what takes longest, first (groups, then folders): workers start these as the run starts, not at its end
FIRST = ("ray", "rayjobs", "native", "training/", "users", "standby")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (g := group_of(item.path) or _module_group(item)):
            item.add_marker(pytest.mark.xdist_group(g))

    def rank(item: pytest.Item) -> int:
        m = item.get_closest_marker("xdist_group")
        g = (m.args[0] if m.args else m.kwargs.get("name")) if m else None
        if g in FIRST:
            return FIRST.index(g)
        rel = item.path.resolve().relative_to(TESTS).as_posix() if item.path.is_relative_to(TESTS) else ""
        return next((i for i, p in enumerate(FIRST) if p.endswith("/") and rel.startswith(p)), len(FIRST))

    items.sort(key=rank)  # stable: collection order within each


def subtree_root(worker: str) -> str | None:
    """``FAIRPOD_CGROUP_ROOT`` for this worker: fairpod's subtree of this host (relative to its mount; on cgroup v1
    the memory controller's, which may be nested in the host's own group), then the worker's id."""
    try:
        h = cgroups.detect()
    except cgroups.CgroupError:
        return None
    base = h.bases.get("memory", next(iter(h.bases.values())))
    mount = base
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    return f"/{base.relative_to(mount).as_posix()}/{worker}"


def pytest_configure(config: pytest.Config) -> None:
    _reaping(config)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and cgroups.ROOT_ENV not in os.environ and (root := subtree_root(worker)):
        os.environ[cgroups.ROOT_ENV] = root
        config.stash[_OWN_ROOT] = root


_OWN_ROOT = pytest.StashKey[str]()


_REAP = pytest.StashKey[Path]()  # the run's folder of records (tests/reaper.py), in the process that made it


def _reaping(config: pytest.Config) -> None:
    """Record what this process starts (tests/reaper.py): an xdist worker into its controller's folder, any other
    pytest into a folder of its own. SIGTERM ends the run as Ctrl-C does (KeyboardInterrupt: the fixtures' teardown
    runs) instead of at once."""
    given = getattr(config, "workerinput", {}).get("fairpod_reap")
    if given:
        reaper.use(Path(given))
    else:
        config.stash[_REAP] = folder = reaper.new_folder()
        reaper.use(folder)
    atexit.register(reaper.reap)  # should pytest itself be cut short before pytest_unconfigure

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        pass


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: the workers record into this run's folder."""
    node.workerinput["fairpod_reap"] = str(node.config.stash[_REAP])


def pytest_unconfigure(config: pytest.Config) -> None:
    """Kill what this process's tests started and still runs (after an interrupted run; tests/reaper.py): the
    controller of xdist workers, last, also what its workers recorded. Then remove this worker's cgroup subtree
    (empty by now: every test removes the groups it made)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the reaping short
    try:
        reaper.reap()
        if _REAP in config.stash:
            reaper.reap(config.stash[_REAP], mine_only=False)
            reaper.remove(config.stash[_REAP])
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if _OWN_ROOT not in config.stash:
        return
    try:
        h = cgroups.detect()
    except cgroups.CgroupError:
        return
    for b in h.bases.values():
        try:
            b.rmdir()
        except OSError:
            pass


@pytest.fixture(autouse=True)
def _sandbox_limits_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas of the suite get their cgroup limits but not the files sandbox (fairpod.sandbox): as root it runs
    them as per-team users, who may not write the tests' own temporary folders (pytest makes them 0700) where the
    test programs leave their results. tests/sandbox turns the whole sandbox on for its own tests, the README's
    tour included (tests/sandbox/test_reach.py)."""
    monkeypatch.setenv("FAIRPOD_SANDBOX", "limits")


_SUITE_UMASK = os.umask(0o022)  # read it (os.umask has no getter), then put it back
os.umask(_SUITE_UMASK)


@pytest.fixture(autouse=True)
def _umask_kept() -> object:
    """Each test ends with the umask the suite started with: an in-process control plane makes its process's
    files private (``daemon.secure_home``: umask 077), which in a test process would carry over to the next
    tests on the same worker (a dataset made 0700 that a team's replica then cannot read)."""
    yield
    os.umask(_SUITE_UMASK)


# FAIRPOD_TEST_CPU=FILE: each test's CPU seconds (this process's and its children's that ended during the test: the
# servers it started, their replicas, the CLI it ran), appended to FILE as "seconds<TAB>test id" by every worker;
# `sort -rn FILE | head` shows where the suite's CPU goes (on 2 cores, its wall time is mostly CPU)
_CPU_FILE = os.environ.get("FAIRPOD_TEST_CPU")


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = _cpu() if _CPU_FILE else 0.0
    yield
    if _CPU_FILE:
        with open(_CPU_FILE, "a") as f:
            f.write(f"{_cpu() - before:.2f}\t{item.nodeid}\n")
