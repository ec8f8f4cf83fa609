"""What a replica run as another user (the per-team user, or ``run_as``) must reach to start at all: fairpod's own
interpreter and the job's program, even where they live under a directory that user cannot traverse (Python under
``/root/.pyenv`` with ``/root`` mode 0700, a venv in a home directory, conda under ``/root``).

Nothing on the host is changed. In the replica's own mount namespace (:mod:`fairpod.sandbox.namespaces`), for each
needed path, the topmost ancestor the user cannot traverse (judged as the kernel would: mode bits and ownership for
the user's uid and gids) is covered by a fresh ``tmpfs`` (mode 0755), and only the child on the way down to the path
is bound back, read-only, at its own path; deeper levels the user cannot traverse get the same. Everything else under
a covered directory (the rest of ``/root``, its ``.config/fairpod``, ...) does not exist for the replica.

Needed paths (:func:`wanted`): the real paths of the supervisor's ``sys.prefix``, ``sys.base_prefix``, the ``bin``
directory of its interpreter and fairpod's own package, and the job's program (``argv[0]`` looked up on the
replica's ``PATH``) with the interpreter of its ``#!`` line, each with every symbolic link met on the way to it. A path inside what the sandbox hides
(fairpod's state directory, the runs and checkpoint roots, the CLI config) is never exposed (:func:`plan`).
The replica's own checkpoint directory is one more needed path (:func:`ways_to`): with ``FAIRPOD_HOME`` under
``/root`` (mode 0700) the per-team user could not reach ``$FAIRPOD_CHECKPOINT_DIR`` otherwise, though it is bound in
its view; ``/root`` is covered, and of it only the (hidden, emptied) state directory is on the way.

The replica's ``/tmp`` is its own, empty: a needed path under the host's ``/tmp`` (fairpod installed in a checkout
there, a job's script there) is brought back into it, read-only, at its own path (:func:`from_tmp`).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_LINKS = 40  # the kernel's limit of symbolic links followed in one lookup


@dataclass(frozen=True)
class Op:
    """One step in the replica's mount namespace: ``cover`` a directory with an empty tmpfs, or bring a ``dir``,
    ``file`` or ``link`` (a symbolic link to ``target``) back at ``path`` inside a covered directory."""

    kind: str
    path: str
    target: str = ""


def chain(path: str) -> list[str]:
    """``path`` resolved as the kernel would: each symbolic link met on the way (as an entry of its real parent
    directory) and, last, the real path it ends at."""
    out: list[str] = []
    comps = [c for c in os.path.abspath(path).split("/") if c]
    cur, hops = "/", 0
    while comps:
        c = comps.pop(0)
        if c == ".":
            continue
        if c == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, c)
        if os.path.islink(nxt):
            hops += 1
            if hops > MAX_LINKS:
                break
            out.append(nxt)
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            comps = [x for x in target.split("/") if x] + comps
        else:
            cur = nxt
    out.append(cur)
    return out


def program(argv0: str, path_env: str | None, cwd: str | None) -> str | None:
    """The file ``argv0`` runs: looked up on ``path_env`` as exec does, or relative to ``cwd`` when it names a
    path."""
    if "/" in argv0:
        return os.path.join(cwd or os.getcwd(), argv0)
    return shutil.which(argv0, path=path_env or os.defpath)


def interpreter(prog: str) -> str | None:
    """The interpreter named by the ``#!`` line of the script ``prog`` (a venv's console scripts name its python),
    or None."""
    try:
        if not stat.S_ISREG(os.stat(prog).st_mode):  # (never a FIFO or a device: reading it could block)
            return None
        with open(prog, "rb") as f:
            head = f.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].split()
    return os.fsdecode(words[0]) if words and words[0].startswith(b"/") else None


def wanted(argv0: str, path_env: str | None, cwd: str | None) -> list[str]:
    """Every path the replica's user must reach: fairpod's interpreter and package, and the job's program."""
    package = str(Path(__file__).resolve().parents[1])  # fairpod's own package
    roots = [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), package]
    prog = program(argv0, path_env, cwd)
    if prog:
        roots.append(prog)
        if bang := interpreter(prog):
            roots.append(bang)
    out: list[str] = []
    for r in roots:
        out += chain(r)
    return list(dict.fromkeys(out))


def traversable(path: str, uid: int, gids: tuple[int, ...]) -> bool:
    """Whether ``uid`` with groups ``gids`` may search the directory ``path`` (the owner's bits for its owner,
    else the group's for a member, else the others'; POSIX ACLs are not read)."""
    if uid == 0:
        return True
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return False
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def ways_to(own: list[str], hide: tuple[str, ...]) -> list[str]:
    """What the replica's user must reach on the way to its own directories (its checkpoint directory): for one
    under a hidden directory, that hidden directory itself (the namespace covers it with an empty tmpfs, in which
    the directory is bound back, so only the ancestors above it must be traversable), else the directory."""
    out = []
    for d in own:
        tops = [h for h in hide if inside(d, h)]
        out.append(min(tops, key=len) if tops else d)
    return list(dict.fromkeys(out))


def plan(paths: list[str], uid: int, gids: tuple[int, ...], hide: tuple[str, ...]) -> tuple[Op, ...]:
    """The mounts that make ``paths`` reachable for ``uid``/``gids``, in the order to make them; a path strictly
    inside ``hide`` or in ``/tmp`` (the replica's own) is refused, ``/`` is never covered. A hidden directory itself
    may be on the way (:func:`ways_to`): what is bound back there is covered by the hiding tmpfs right after."""
    ops: dict[str, Op] = {}
    for p in paths:
        if any(inside(p, h) and p != h for h in hide) or inside(p, "/tmp"):
            continue
        cur = "/"
        for comp in [c for c in p.split("/") if c]:
            child = os.path.join(cur, comp)
            try:
                shut = not traversable(cur, uid, gids)
                st = os.lstat(child)
            except OSError:
                break
            if shut:
                if cur == "/":
                    break
                ops.setdefault(cur, Op("cover", cur))
                ops.setdefault(child + "\0", _op(child, st))
            cur = child
    # a parent before what is under it; at one path, bring it back before covering what is under it
    return tuple(sorted(ops.values(), key=lambda o: (o.path.count("/"), o.kind == "cover", o.path)))


def _op(path: str, st: os.stat_result) -> Op:
    """Bring ``path`` (``lstat``-ed as ``st``) back as it is: a symbolic link made again, else bound."""
    if stat.S_ISLNK(st.st_mode):
        return Op("link", path, os.readlink(path))
    return Op("dir" if stat.S_ISDIR(st.st_mode) else "file", path)


def from_tmp(paths: list[str], hide: tuple[str, ...]) -> tuple[Op, ...]:
    """The needed ``paths`` under the host's ``/tmp`` to bring back into the replica's own: the outermost of them
    (a venv's directory, not each file in it), none inside a hidden path."""
    mine = sorted({p for p in paths if inside(p, "/tmp") and p != "/tmp" and not any(inside(p, h) for h in hide)},
                  key=len)
    out: list[Op] = []
    for p in mine:
        if not any(inside(p, o.path) for o in out):
            try:
                out.append(_op(p, os.lstat(p)))
            except OSError:
                pass
    return tuple(out)
