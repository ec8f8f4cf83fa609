"""pyxis's container flags in a batch script: the job becomes an image job (docs/containers.md).

pyxis (NVIDIA's Slurm plugin) runs job steps in container images. fairpod runs images through the replica
supervisor's container path (podman, the team's user, the replica's cgroup, its GPUs, the team's registry login),
so the two forms pyxis users write become image jobs at submission:

- ``srun --container-image=REF … CMD`` as the script's only command: every node of the job runs ``CMD`` in the
  image, one task per node (the replica), with the step's ``SLURM_*`` variables;
- ``#SBATCH --container-image=REF`` (pyxis 0.12 and later): the batch script itself runs in the image, on one
  node; ``srun`` is not available inside it, as with pyxis.

Image references are enroot's: ``[docker://][REGISTRY#]IMAGE[:TAG]``. ``REGISTRY#IMAGE`` is
``REGISTRY/IMAGE`` to podman, and an image without a registry is Docker Hub's (``docker.io/library/ubuntu``).
What fairpod cannot honour is refused in one line, in the words of the flag.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from fairpod.formats.slurm import srun

VALUE = {"--container-image": "container_image", "--container-mounts": "container_mounts",
         "--container-workdir": "container_workdir", "--container-env": "container_env",
         "--container-name": "container_name", "--container-save": "container_save"}
FLAGS = {"--no-container-mount-home": "no_container_mount_home", "--container-mount-home": "container_mount_home",
         "--no-container-remap-root": "no_container_remap_root", "--container-remap-root": "container_remap_root",
         "--container-entrypoint": "container_entrypoint", "--no-container-entrypoint": "no_container_entrypoint",
         "--container-writable": "container_writable", "--container-readonly": "container_readonly"}
REFUSED = {
    "container_name": "fairpod keeps no named containers between steps (each container is removed when its "
                      "task ends); leave --container-name out",
    "container_save": "fairpod does not save containers; build the image you want and push it to a registry",
    "container_mount_home": "fairpod's containers get HOME=/tmp, not your home; bind what you need with "
                            "--container-mounts",
    "container_remap_root": "the container runs as the team's user, never as root; leave --container-remap-root out",
    "no_container_entrypoint": "the image's entrypoint runs with the command as its arguments, as podman runs "
                               "it; leave --no-container-entrypoint out or use an image without an entrypoint",
    "container_readonly": "fairpod's containers have a writable root filesystem (removed when they end); leave "
                          "--container-readonly out",
}
IMAGE_ENV = ("PATH", "LD_LIBRARY_PATH")  # the image's own, unless --container-env names them (as pyxis does)
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh"}
SHELL_SYNTAX = re.compile(r"[$`;|&<>(){}*?\[\]~]")


class PyxisError(ValueError):
    """A container flag fairpod cannot honour; the message names it."""


def image_ref(text: str, where: str = "--container-image") -> str:
    """The podman reference of a pyxis/enroot image: ``docker://`` is dropped, ``REGISTRY#IMAGE`` is
    ``REGISTRY/IMAGE``, an image without ``#`` is Docker Hub's (``library/`` for a one-part name)."""
    ref = text.strip()
    if ref.startswith(("/", "./", "../")) or ref.endswith((".sqsh", ".squashfs")):
        raise PyxisError(f"{where} {text}: squashfs files are enroot's; fairpod runs OCI images from a registry "
                         "or the node's podman storage (REGISTRY#IMAGE:TAG)")
    ref = ref.removeprefix("docker://")
    if "://" in ref:
        raise PyxisError(f"{where} {text}: only docker:// images (from a registry) can be run by fairpod")
    user, at, rest = ref.partition("@")
    if at and not rest.startswith("sha256:") and "/" not in user and "#" not in user and "#" in rest:
        raise PyxisError(f"{where} {text}: {user}@ is enroot's registry user; fairpod pulls with the team's "
                         "registry login (fairpod registry login REGISTRY --team TEAM)")
    if not ref or re.search(r"\s", ref):
        raise PyxisError(f"{where} {text!r}: not an image reference")
    if "#" in ref:
        registry, _, image = ref.partition("#")
        if not registry or not image:
            raise PyxisError(f"{where} {text}: want REGISTRY#IMAGE[:TAG]")
        return f"{registry}/{image}"
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        raise PyxisError(f"{where} {text}: pyxis reads this as a Docker Hub image; for registry {first} "
                         f"write {first}#{ref.split('/', 1)[1]}")
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


def mounts(text: str, cwd: str, where: str = "--container-mounts") -> list[str]:
    """``SRC[:DST[:FLAGS]],…`` (flags joined with ``+``) as fairpod's ``HOST:CONTAINER[:ro]``; a relative SRC is
    the working directory's; DST must be absolute."""
    out = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) > 3:
            raise PyxisError(f"{where} {item}: want SRC:DST[:FLAGS]")
        src, dst = parts[0], parts[1] if len(parts) > 1 else parts[0]
        flags = set(parts[2].split("+")) if len(parts) > 2 else set()
        if src == "umount":
            raise PyxisError(f"{where} {item}: fairpod mounts nothing it would have to unmount; leave it out")
        if not dst.startswith("/"):
            raise PyxisError(f"{where} {item}: the destination {dst!r} must be an absolute path in the container")
        unknown = flags - {"ro", "rw", "rbind", "bind", "private", "rprivate", "slave", "rslave", "nosuid", "nodev",
                           "noexec"}
        if unknown:
            raise PyxisError(f"{where} {item}: mount flag(s) {', '.join(sorted(unknown))} are not known to fairpod")
        host = str(Path(cwd, src).absolute()) if not src.startswith("/") else src
        out.append(f"{host}:{dst}" + (":ro" if "ro" in flags else ""))
    return out


def split_flags(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """srun's arguments without pyxis's flags (``{key: value}``); the rest is for :func:`srun.parse`."""
    got: dict[str, Any] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-") or a == "--":
            rest += argv[i:]
            break
        name, eq, val = a.partition("=")
        if name in VALUE:
            if not eq:
                if i + 1 >= len(argv):
                    raise PyxisError(f"srun {name} needs a value")
                i, val = i + 1, argv[i + 1]
            got[VALUE[name]] = val
        elif name in FLAGS:
            got[FLAGS[name]] = True
        else:
            rest.append(a)
        i += 1
    return got, rest


def _check(flags: dict[str, Any], where: str) -> None:
    for key in flags:
        if key in REFUSED:
            raise PyxisError(f"{where}--{key.replace('_', '-')}: {REFUSED[key]}")


def _body_lines(text: str) -> list[tuple[int, str]]:
    """The script's commands after its header, continuation lines joined: [(first line number, text)]."""
    out: list[tuple[int, str]] = []
    cont = None
    for no, line in enumerate(text.splitlines()[1:], start=2):
        s = line.strip()
        if cont is not None:
            cont = (cont[0], cont[1] + " " + s.removesuffix("\\"))
            if not s.endswith("\\"):
                out.append(cont)
                cont = None
            continue
        if not s or s.startswith("#"):
            continue
        if s.endswith("\\"):
            cont = (no, s.removesuffix("\\"))
        else:
            out.append((no, s))
    if cont is not None:
        out.append(cont)
    return out


def srun_container_line(text: str) -> tuple[int, list[str], dict[str, str]] | None:
    """(line, srun's arguments, variables the script exports before it) when the script's one step is a literal
    ``srun --container-image=REF … CMD``; None otherwise: then whether a step runs in an image is decided when
    the script runs (``if [ -n "$CONTAINER_IMAGE" ]`` … ``srun "${ARGS[@]}"``), by srun (fairpod.formats.slurm.srun).
    Beside it the script may only export plain values (``export NCCL_DEBUG=INFO``, ``set -ex``): they are the
    container's; anything else makes the script a host script, decided when it runs."""
    lines = _body_lines(text)
    found = [(no, s) for no, s in lines if re.match(r"srun\s", s) and re.search(r"--container-image[=\s]\S", s)]
    if len(found) != 1:
        return None
    no, s = found[0]
    exports: dict[str, str] = {}
    for n, other in lines:
        if n == no:
            continue
        m = re.fullmatch(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)", other)
        if m and not SHELL_SYNTAX.search(m.group(2).strip("'\"")):
            exports[m.group(1)] = m.group(2).strip("'\"")
        elif not re.fullmatch(r"set\s+[-+][a-z]+;?", other):
            return None
    s = re.split(r"\s#", s, maxsplit=1)[0]  # a comment starts a word, as in the shell (REGISTRY#IMAGE is none)
    try:
        words = shlex.split(s)
    except ValueError as e:
        raise PyxisError(f"line {no}: cannot read the srun command: {e}") from None
    bad = SHELL_SYNTAX.search(re.sub(r"'[^']*'", "", s))  # single-quoted words are plain words
    if bad:
        raise PyxisError(f"line {no}: srun --container-image runs without a shell on the node: write the command "
                         f"in plain words (not {bad.group(0)!r}), or quote a shell's script for the image: "
                         "srun … sh -c '…'")
    return no, words[1:], exports


def shell_of(text: str, path: str) -> list[str]:
    """The interpreter of the script's ``#!`` line, when it is a shell (the script runs with ``-c``)."""
    words = text.splitlines()[0][2:].split()
    prog = words[1:2] if words and Path(words[0]).name == "env" else words[:1]
    if not prog or Path(prog[0]).name not in SHELLS:
        raise PyxisError(f"{path}: #SBATCH --container-image runs the script with its shell in the image; "
                         f"{' '.join(words) or 'no interpreter'} is not a shell (sh, bash …)")
    return words


def to_image_job(body: dict[str, Any], sbatch_flags: dict[str, Any], origin: str, text: str, path: str,
                 args: list[str], cwd: str, ntasks_per_node: int) -> tuple[dict[str, Any], list[str]] | None:
    """The body of an image job for a script with pyxis's flags (see the module), or None without them."""
    found = srun_container_line(text)
    if not sbatch_flags.get("container_image") and found is None:
        if sbatch_flags:
            raise PyxisError(f"{origin}: {', '.join('--' + k.replace('_', '-') for k in sbatch_flags)} go with "
                             "--container-image")
        return None
    notes: list[str] = []
    env = dict(body.get("env") or {})
    cfg = json.loads(env.pop("FAIRPOD_SBATCH", None) or "{}")  # the batch runner's settings: not used here
    nodes = int(body.get("nodes", 1))
    slurm = {"SLURM_JOB_NAME": str(cfg.get("name") or body.get("name")), "SLURM_JOB_NODELIST": "$(FAIRPOD_NODES)",
             "SLURM_NODELIST": "$(FAIRPOD_NODES)", "SLURM_JOB_ID": "$(FAIRPOD_JOB_ID)", "SLURM_JOBID": "$(FAIRPOD_JOB_ID)",
             "SLURM_JOB_NUM_NODES": str(nodes), "SLURM_NNODES": str(nodes), "SLURM_NODEID": "$(RANK)",
             "SLURM_JOB_ACCOUNT": "$(FAIRPOD_TEAM)", "SLURMD_NODENAME": "$(FAIRPOD_NODE)",
             "SLURM_SUBMIT_DIR": cwd, "SLURM_CLUSTER_NAME": "fairpod", "SLURM_RESTART_COUNT": "$(FAIRPOD_RESTART_COUNT)"}
    if sbatch_flags.get("container_image"):
        if found is not None:
            raise PyxisError(f"line {found[0]}: with #SBATCH --container-image the script runs in the image, where "
                             "srun is not available (as with pyxis); give --container-image to srun instead")
        flags = sbatch_flags
        _check(flags, f"{origin}: ")
        for no, s in _body_lines(text):
            if re.match(r"(.*[\s;|&(`])?srun(\s|$)", s):
                raise PyxisError(f"line {no}: the script runs in the image (#SBATCH --container-image), where srun "
                                 "is not available (as with pyxis); give --container-image to srun instead")
        if nodes != 1:
            raise PyxisError(f"{origin}: #SBATCH --container-image runs the script in the image on one node; with "
                             f"--nodes {nodes} give --container-image to srun instead")
        command = [*shell_of(text, path), "-c", text, Path(path).name, *args]
        slurm.update(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NTASKS=str(ntasks_per_node))
        notes.append("the batch script runs in the image (pyxis's sbatch --container-image)")
    else:
        assert found is not None
        no, argv, exports = found
        env.update(exports)
        flags, rest = split_flags(argv)
        _check(flags, f"line {no}: srun ")
        try:
            o = srun.parse(rest)
        except srun.SrunError as e:
            raise PyxisError(f"line {no}: srun: {e}") from None
        per = o.ntasks_per_node or (-(-o.ntasks // nodes) if o.ntasks else ntasks_per_node)
        if o.nodelist is not None or (o.nodes or nodes) != nodes or per != 1 or (o.ntasks or nodes) != nodes:
            raise PyxisError(f"line {no}: srun --container-image on fairpod runs one task on every node of the job "
                             f"(each node's replica in the image); drop -w/-N/-n/--ntasks-per-node that ask otherwise")
        if o.chdir:
            raise PyxisError(f"line {no}: srun -D {o.chdir}: use --container-workdir (the directory in the image)")
        command = o.command
        slurm.update(SLURM_PROCID="$(RANK)", SLURM_LOCALID="0", SLURM_NTASKS=str(nodes), SLURM_STEP_ID="0",
                     SLURM_STEPID="0", SLURM_STEP_NUM_TASKS=str(nodes), SLURM_STEP_NUM_NODES=str(nodes),
                     LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        notes += [f"line {no}: srun {n}" for n in o.notes]
        notes.append(f"line {no}: srun --container-image: each node's task runs {shlex.join(command)} in the image")
        if sbatch_flags:
            _check(sbatch_flags, f"{origin}: ")
            flags = {**sbatch_flags, **flags}
    ref = image_ref(str(flags["container_image"]))
    keep = {n.strip() for n in str(flags.get("container_env") or "").split(",") if n.strip()}
    for name in IMAGE_ENV:
        if name not in keep:
            env.pop(name, None)
    env.pop("HOME", None)  # the submitter's home is not in the container (pyxis's --no-container-mount-home)
    env.update(slurm)
    out = {**body, "image": ref, "command": command, "env": env}
    out.pop("workdir", None)  # the image's own working directory, as with pyxis
    if flags.get("container_mounts"):
        out["mounts"] = mounts(str(flags["container_mounts"]), cwd)
    if flags.get("container_workdir"):
        wd = str(flags["container_workdir"])
        if not Path(wd).is_absolute() or not Path(wd).is_dir():
            raise PyxisError(f"--container-workdir {wd}: fairpod's working directory in the image is a directory of "
                             "this host, mounted at its own path; give an absolute one that exists here")
        out["workdir"] = wd
    notes.append(f"image {ref} (podman, docs/containers.md); the output is the job's log (fairpod get-logs), "
                 "not an --output file")
    return out, notes
