"""The native engine: the governance modules and the simulator's event loop compiled to C with mypyc (the same
source, the same decisions, about twice as fast on a contended cluster; see docs/architecture.md "The native
engine").

    python -m fairpod.native build     # compile: needs a C compiler, Python's headers and mypy (a dependency
                                       # of fairpod; Debian: apt install gcc python3-dev)
    python -m fairpod.native status    # which engine runs, native or pure Python, and where the build is
    python -m fairpod.native clean     # remove every build

A build lives in ``$FAIRPOD_NATIVE_DIR`` (default ``~/.cache/fairpod/native``), in a folder named after a hash of
the compiled source files, the Python version and the platform. ``fairpod.governance`` and ``fairpod.sim`` load it
only when that hash matches the ``.py`` files next to them, so an edited module never runs stale native code;
``FAIRPOD_NATIVE=0`` turns it off. Nothing else changes: without a build the engine is the pure-Python one.

Nobody has to know this: ``fairpod up`` starts the build in the background when there is none for this source and
it can be made here (``FAIRPOD_NATIVE_BUILD=0`` stops that), and the README's main command builds it before it
starts the demo.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

# the modules that are compiled, by package: the engine (build, forecast and explain stay Python: they read the
# pydantic model or run rarely) and the simulator's event loop
MODULES = {
    "governance": ("snapshot", "nodes", "teams", "pending", "workload", "scheduler", "cycle_state", "team_checks",
                   "starvation", "verdicts", "offers", "admission", "protected", "preemption", "fair_victims",
                   "victim_bounds", "costly_reclaim", "quota", "fairshare", "ordering", "placement", "lending",
                   "topology", "users", "budget", "elastic", "history", "decisions", "groups", "consolidation"),
    "sim": ("run", "jobs", "ledger", "lenders"),
}
MYPY = "mypy==1.19.1"  # the version the build was checked with (also in pyproject.toml's dependencies)
# mypy's settings for the build: fairpod's own modules are type-checked with the compiled ones (their types make the
# compiled code fast), third-party packages are not (typed Any): following the whole of torch and Ray from
# fairpod's other modules took 3 of the build's 4 minutes on 2 cores, for no change in the compiled code's speed
MYPY_CONFIG = "[mypy]\nfollow_imports = skip\n[mypy-fairpod.*]\nfollow_imports = normal\n"
_MARK = "fairpod-native.json"
_LOCK = "building.lock"  # held by the build under way
_PACKAGE = Path(__file__).resolve().parent


def root() -> Path:
    """Where builds live: ``$FAIRPOD_NATIVE_DIR`` or ``~/.cache/fairpod/native``."""
    env = os.environ.get("FAIRPOD_NATIVE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "fairpod" / "native"


def source_hash(package: Path = _PACKAGE) -> str:
    """A hash of the compiled modules' source, the interpreter and the platform (a build fits only these)."""
    h = hashlib.sha256()
    h.update(f"{sys.implementation.cache_tag} {sysconfig.get_config_var('EXT_SUFFIX')} {MYPY}\n".encode())
    h.update(MYPY_CONFIG.encode())
    for path in _files():
        h.update(path.encode() + b"\0")
        h.update((package / path).read_bytes())
    return h.hexdigest()[:20]


def _files() -> list[str]:
    return [f"{pkg}/{m}.py" for pkg, mods in MODULES.items() for m in mods]


def build_dir(digest: str | None = None) -> Path:
    return root() / (digest or source_hash())


def _usable_build() -> Path | None:
    """The build of the current source that ``activate`` puts first, or None (none, or ``FAIRPOD_NATIVE=0``)."""
    if os.environ.get("FAIRPOD_NATIVE", "1") == "0":
        return None
    try:
        d = build_dir()
    except OSError:
        return None
    return d if (d / _MARK).is_file() else None


def activate(package_path: list[str], package: str = "governance") -> Path | None:
    """Called by ``fairpod.governance`` and ``fairpod.sim`` before they import their modules: put a build of the
    current source first on the package's path (its compiled modules then load as native extensions). Returns the
    build's folder, or None when Python runs (no build of this source, or ``FAIRPOD_NATIVE=0``)."""
    d = _usable_build()
    if d is None or not (d / "fairpod" / package).is_dir():
        return None
    if str(d) not in sys.path:
        sys.path.append(str(d))  # the shared library the compiled modules import by its top-level name
    package_path.insert(0, str(d / "fairpod" / package))
    return d


def loads() -> bool:
    """Would a process started now run the engine natively? (``fairpod.governance.is_native()`` says whether the
    engine this process loaded does.)"""
    d = _usable_build()
    return d is not None and (d / "fairpod" / "governance").is_dir()


def missing() -> str | None:
    """Why a build cannot run here (a one-line reason), or None."""
    if importlib.util.find_spec("mypyc") is None:
        return f"mypyc is not installed: pip install {MYPY!r}"
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) on PATH: on Debian, apt install gcc"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return f"Python's headers are missing ({include}/Python.h): on Debian, apt install python3-dev"
    return None


def build(*, quiet: bool = False, wait: bool = True, held: int | None = None) -> Path | None:
    """Compile the engine's modules into ``build_dir()``; returns it. Raises RuntimeError with the reason. One build
    at a time per build folder: another waits for it (``wait``) or returns None at once. ``held``: a descriptor of
    the build folder's lock, locked already (by the process that started this one: ``build_in_background``)."""
    why = missing()
    if why:
        raise RuntimeError(why)
    digest = source_hash()
    dest = build_dir(digest)
    if (dest / _MARK).is_file():
        return dest
    base = _mkdir(root())  # before a minute of compiling: a folder that cannot be made fails now
    lock = held if held is not None else os.open(base / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            if held is None:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            return None  # another process is building it
        if (dest / _MARK).is_file():  # built by the process this one waited for
            return dest
        return _compile(digest, dest, base, quiet)
    finally:
        os.close(lock)


def build_in_background() -> str | None:
    """Start compiling the engine for this source in a process of its own (low priority, detached, its output in
    the build folder's ``build.log``), unless a build exists, one is under way, it cannot be built here, or
    ``FAIRPOD_NATIVE=0`` / ``FAIRPOD_NATIVE_BUILD=0``. Processes started after it ends run the engine natively;
    this one goes on in Python. Returns a line saying that a build is under way (started now or before), or None."""
    if _turned_off():
        return None
    try:
        if (build_dir() / _MARK).is_file() or missing():
            return None
        base = _mkdir(root())
        # the lock is taken here and handed to the build's process, which holds it until it ends: a start right
        # after this one (the build's process still starting, at low priority) sees the build under way
        lock = os.open(base / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "the engine is being compiled to C in the background"
            with open(base / "build.log", "ab") as log:
                subprocess.Popen([sys.executable, "-m", "fairpod.native", "build", "--lock-fd", str(lock)],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True, pass_fds=(lock,),
                                 preexec_fn=lambda: os.nice(10))
        finally:
            os.close(lock)  # this process's copy; the build's process keeps the lock
    except OSError:
        return None  # no build folder or no process: the engine runs as Python, as before
    return f"compiling the engine to C in the background (a minute; log: {base / 'build.log'})"


def _turned_off() -> str | None:
    """The variable that keeps a background build from starting (``FAIRPOD_NATIVE=0`` or
    ``FAIRPOD_NATIVE_BUILD=0``), or None."""
    return next((v for v in ("FAIRPOD_NATIVE", "FAIRPOD_NATIVE_BUILD") if os.environ.get(v, "1") == "0"), None)


def on_start() -> str:
    """What ``fairpod up`` says of its engine, after starting its build in the background where it can."""
    if loads():
        return "native (mypyc)"
    off = _turned_off()
    if off:
        return f"pure Python ({off}=0)"
    started = build_in_background()
    if started:
        return f"pure Python; {started}: the next start runs it natively"
    why = missing()
    return f"pure Python ({why})" if why else "pure Python (python -m fairpod.native status)"


def _compile(digest: str, dest: Path, base: Path, quiet: bool) -> Path:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fairpod-native-") as tmp:
        work = Path(tmp)
        # a copy of the package, so that mypyc type-checks the modules against the rest of fairpod as it is now
        shutil.copytree(Path(__file__).resolve().parent, work / "fairpod",
                        ignore=shutil.ignore_patterns("__pycache__", ".mypy_cache", "*.so", "*.pyd"))
        files = [f"fairpod/{path}" for path in _files()]
        # PYTHONPATH is the copy alone: mypy resolves the package's imports there, not in a folder of the user's
        # PYTHONPATH (with one set, mypyc's own entry for the working folder was missing and the build failed)
        env = {**os.environ, "MYPY_CACHE_DIR": str(work / ".mypy_cache"), "FAIRPOD_NATIVE": "0",
               "PYTHONPATH": str(work)}
        (work / "mypy.ini").write_text(MYPY_CONFIG)
        run = subprocess.run([sys.executable, "-m", "mypyc", "--config-file", "mypy.ini", *files], cwd=work, env=env,
                             text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        if run.returncode != 0:
            tail = "\n".join(line for line in run.stdout.splitlines() if "error" in line.lower())[-4000:]
            raise RuntimeError(f"mypyc failed (exit {run.returncode}):\n{tail or run.stdout[-4000:]}")
        staging = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=base))
        try:
            suffix = sysconfig.get_config_var("EXT_SUFFIX")
            for pkg, mods in MODULES.items():
                (staging / "fairpod" / pkg).mkdir(parents=True)
                for m in mods:
                    shutil.copy2(work / "fairpod" / pkg / f"{m}{suffix}", staging / "fairpod" / pkg)
            for lib in work.glob(f"*__mypyc{suffix}"):
                shutil.copy2(lib, staging)
            (staging / _MARK).write_text(json.dumps({
                "source_hash": digest, "modules": _files(), "python": sys.version.split()[0],
                "built_seconds": round(time.monotonic() - t0, 1)}) + "\n")
            try:
                staging.rename(dest)  # whole or not at all: a half-copied build is never loaded
            except OSError:
                if not (dest / _MARK).is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not quiet:
        print(f"built the native engine in {time.monotonic() - t0:.0f} s: {dest}")
    return dest


def clean() -> int:
    """Remove every build (and any left half-written) from ``root()``, and nothing else; returns how many."""
    gone = 0
    base = root()
    if not base.is_dir():
        return 0
    for d in base.iterdir():
        name = d.name.split(".", 1)[0]  # a build is named <hash>; one being written <hash>.<random>
        if d.is_dir() and len(name) == 20 and all(c in "0123456789abcdef" for c in name):
            shutil.rmtree(d, ignore_errors=True)
            gone += 1
    return gone


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fairpod.native", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="compile the engine for this source and interpreter")
    b.add_argument("--if-idle", action="store_true",
                   help="do nothing when another build is under way (default: wait for it)")
    b.add_argument("--lock-fd", type=int, default=None, help=argparse.SUPPRESS)  # the lock, held by the caller
    st = sub.add_parser("status", help="which engine runs here, and where its build is")
    st.add_argument("--json", action="store_true", help="print a JSON object")
    sub.add_parser("clean", help="remove every build from the build folder (and nothing else there)")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        try:
            build(wait=not args.if_idle, held=args.lock_fd)
        except (RuntimeError, OSError) as e:
            print(f"error: cannot build the native engine: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "clean":
        print(f"removed {clean()} build(s) from {root()}")
        return 0
    d = build_dir()
    native = loads()  # what a process started now runs (``status`` itself never imports the engine)
    info = {"engine": "native (mypyc)" if native else "pure Python", "native": native,
            "build": str(d) if (d / _MARK).is_file() else None,
            "builds_in": str(root()), "source_hash": source_hash(), "can_build": missing() is None,
            "cannot_build_because": missing()}
    if args.json:
        print(json.dumps(info))
    else:
        print(f"engine      {info['engine']}")
        print(f"build       {info['build'] or '- (none for this source: python -m fairpod.native build)'}")
        if info["cannot_build_because"]:
            print(f"can build   no: {info['cannot_build_because']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
