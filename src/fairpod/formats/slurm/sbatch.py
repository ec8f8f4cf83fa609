"""Reading a Slurm batch script and turning it into a fairpod job.

Directives are read as Slurm reads them: ``#SBATCH`` lines (and fairpod's own ``#FAIRPOD`` lines) from the
top of the script up to its first command; options given on the command line win over them. What fairpod
does with each option:

=================================  ==============================================================================
``-J, --job-name``                 the job's name (fairpod's job name is it in lower case with ``-``)
``-N, --nodes``                    replicas, one per node
``--ntasks-per-node, -n``          tasks ``srun`` starts (per node / in all)
``--gres=gpu:N, --gpus-per-node``  accelerators per node (``-G/--gpus`` N: N ÷ nodes)
``--exclusive``                    whole nodes (also the default without ``--gres``)
``--mem``                          memory per node (MB, or with K/M/G/T), held by the replica's cgroup
``-c, --cpus-per-task``            vCPUs per task; a node's replica gets them times its tasks
``-o, --output, -e, --error``      output files; ``%x`` job name, ``%j`` job id, ``%N`` node, ``%u`` user, ``%%``
``--open-mode``                    append or truncate (a requeued job appends by default)
``--wait-all-nodes``               1: the script starts once every node has joined
``--requeue / --no-requeue``       auto-resume on / off
``-A, --account``                  the team
``-p, --partition``                the instance type
``-q, --qos``                      the priority class
``-D, --chdir``                    working directory
``--export``                       ALL (default; credential-like variables are left out), NONE, or a list
``--container-image`` and pyxis's  the job runs in the image (fairpod.formats.slurm.pyxis; also srun's, when it
other ``--container-*`` flags      is the script's only command)
=================================  ==============================================================================

``#FAIRPOD`` lines: ``--team``, ``--priority``, ``--auto-resume`` / ``--no-auto-resume``, ``--max-retry N`` (needs
auto-resume: the front end refuses it without),
``--instance-type``, ``--accelerators N``, ``--grace-seconds S``, ``--min-runtime S``,
``--deep-health-check-passed-nodes-only``, ``--required-topology LEVEL`` / ``--preferred-topology LEVEL`` (a
topology level of the cluster spec, e.g. rack). Options about time limits, CPU binding or mail have no
effect and say so; unknown ``#SBATCH`` options get a warning; ``--array`` submits a job array (one request);
dependencies are refused.
Without an explicit choice, auto-resume is on when the script runs ``srun --auto-resume=1`` (also through a
variable, as the seed post's script does).
"""

from __future__ import annotations

import json
import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairpod.formats.slurm import pyxis
from fairpod.model.jobflags import JOB_FLAGS, SBATCH_FIELDS, dest

MAX_SCRIPT = 256 * 1024
DEFAULT_MAX_RETRY = 3

VALUE_OPTS = {
    "-J": "job_name", "--job-name": "job_name", "-N": "nodes", "--nodes": "nodes",
    "--ntasks-per-node": "ntasks_per_node", "-n": "ntasks", "--ntasks": "ntasks", "--gres": "gres",
    "-G": "gpus", "--gpus": "gpus", "--gpus-per-node": "gpus_per_node", "-o": "output", "--output": "output",
    "-e": "error", "--error": "error", "--open-mode": "open_mode", "--wait-all-nodes": "wait_all_nodes",
    "-A": "account", "--account": "account", "-p": "partition", "--partition": "partition", "-q": "qos",
    "--qos": "qos", "-D": "chdir", "--chdir": "chdir", "--export": "export", "-a": "array", "--array": "array",
    "--mem": "mem", "-c": "cpus_per_task", "--cpus-per-task": "cpus_per_task", **pyxis.VALUE,
}  # fmt: skip
FLAG_OPTS = {"--exclusive": "exclusive", "--requeue": "requeue", "--no-requeue": "no_requeue", **pyxis.FLAGS}
NO_EFFECT_VALUE = {
    "-t": "fairpod has no time limits", "--time": "fairpod has no time limits", "--time-min": "no time limits",
    "--mem-per-cpu": "use --mem (per node)", "--mem-per-gpu": "use --mem (per node)",
    "--cpus-per-gpu": "use --cpus-per-task",
    "--gpus-per-task": "every task sees its node's accelerators", "--gpu-bind": "no GPU binding",
    "--mail-type": "fairpod sends no mail", "--mail-user": "fairpod sends no mail",
    "--comment": "comments are not kept", "-C": "no node features", "--constraint": "no node features",
    "--signal": "fairpod sends SIGTERM before preemption, with the job's grace period",
    "--hint": "no CPU binding", "-m": "no task distribution", "--distribution": "no task distribution",
    "--begin": "jobs start when admitted", "--deadline": "no deadlines", "--nice": "use --qos / #FAIRPOD --priority",
    "--tmp": "no scratch accounting", "-L": "no licenses", "--licenses": "no licenses",
    "--reservation": "no reservations", "--wckey": "no accounting keys", "-w": "fairpod places the job",
    "--nodelist": "fairpod places the job", "-x": "fairpod places the job", "--exclude": "fairpod places the job",
    "--ntasks-per-gpu": "no per-GPU tasks",
    "--mpi": "no MPI plugin", "--cpu-bind": "no CPU binding",
}  # fmt: skip
NO_EFFECT_FLAGS = {
    "--overcommit": "no CPU accounting", "-O": "no CPU accounting", "--contiguous": "fairpod places the job",
    "--no-kill": "the job stops when a node fails", "-k": "the job stops when a node fails",
    "--spread-job": "fairpod places the job", "--use-min-nodes": "fairpod runs exactly --nodes",
    "--oversubscribe": "nodes are not oversubscribed", "-s": "nodes are not oversubscribed",
    "--get-user-env": "the submitting environment is exported (--export)", "-Q": "", "--quiet": "",
    "-v": "", "--verbose": "",
}  # fmt: skip
REFUSED = {
    "-d": "job dependencies are not supported: submit the job once the one it depends on has finished",
    "--dependency": "job dependencies are not supported: submit the job once the one it depends on has finished",
    "-H": "held jobs are not supported: submit the job when it should run",
    "--hold": "held jobs are not supported: submit the job when it should run",
}
# the fairpod options of #FAIRPOD lines: start-job's flags for sbatch's fields (fairpod.model.jobflags), each
# read as the setting named by the flag (termination_grace_seconds: its flag's setting grace_seconds)
FAIRPOD_VALUE = {JOB_FLAGS[f]: dest(f) for f in SBATCH_FIELDS}
FAIRPOD_FLAGS = {"--auto-resume": "auto_resume", "--no-auto-resume": "no_auto_resume",
                 "--deep-health-check-passed-nodes-only": "deep_health_check_passed_nodes_only"}
AUTO_RESUME_RE = re.compile(r"--auto-resume(?:=|\s+)[\"']?(1|true|yes)\b", re.IGNORECASE)
SECRETS_RE = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_KEY|PRIVATE_KEY|_KEY$|^KEY$", re.IGNORECASE)
SHELL_VARS = {"PWD", "OLDPWD", "SHLVL", "_", "PS1", "PS2", "PS4", "PROMPT_COMMAND", "TERM", "TERMCAP", "COLUMNS",
              "LINES", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "DISPLAY",
              "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "LS_COLORS", "MAIL", "HISTFILE", "HISTSIZE", "OLDPATH"}
NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class BatchError(ValueError):
    """A script or option fairpod cannot run; the message says why and what to do."""


@dataclass
class Setting:
    key: str
    value: Any
    origin: str  # "line 4" or "command line"


@dataclass
class BatchScript:
    path: str
    text: str
    settings: list[Setting] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def get(self, key: str, default: Any = None) -> Any:
        for s in reversed(self.settings):  # the last one wins; command-line settings come last
            if s.key == key:
                return s.value
        return default

    def origin(self, key: str) -> str | None:
        for s in reversed(self.settings):
            if s.key == key:
                return s.origin
        return None


def parse_options(tokens: list[str], origin: str, *, fairpod: bool, strict: bool) -> tuple[list[Setting], list[str]]:
    """Settings from option tokens (``--nodes 2``, ``--nodes=2``, ``-N2``, ``-N 2``); and warnings.

    ``fairpod``: the tokens of a ``#FAIRPOD`` line. ``strict``: unknown options are errors (command line)."""
    values, flags = (FAIRPOD_VALUE, FAIRPOD_FLAGS) if fairpod else (VALUE_OPTS, FLAG_OPTS)
    out: list[Setting] = []
    warnings: list[str] = []
    where = f"{origin}: " if origin else ""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        name, eq, val = tok.partition("=")
        attached = None
        if not eq and tok.startswith("-") and not tok.startswith("--") and len(tok) > 2:
            name, attached = tok[:2], tok[2:]
        nxt = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("-") else None
        has_next = nxt is not None

        def take(name: str = name, eq: str = eq, val: str = val, attached: str | None = attached,
                 nxt: str | None = nxt) -> tuple[str, int]:
            if eq:
                return val, 1
            if attached:
                return attached, 1
            if nxt is not None:
                return nxt, 2
            raise BatchError(f"{where}{name} needs a value")

        if not tok.startswith("-"):
            raise BatchError(f"{where}unexpected {tok!r} (expected an option)")
        if name in values:
            v, n = take()
            out.append(Setting(values[name], v, origin))
        elif name in flags:
            if eq and flags[name] != "exclusive":
                raise BatchError(f"{where}{name} takes no value")
            out.append(Setting(flags[name], True, origin))
            n = 1
        elif not fairpod and name in REFUSED:
            raise BatchError(f"{where}{name}: {REFUSED[name]}")
        elif not fairpod and (name in NO_EFFECT_VALUE or name in NO_EFFECT_FLAGS):
            why = NO_EFFECT_VALUE.get(name) or NO_EFFECT_FLAGS.get(name)
            n = 1
            if name in NO_EFFECT_VALUE:
                _, n = take()
            if why:
                warnings.append(f"{where}{name} has no effect on fairpod ({why}); ignored")
        elif fairpod or strict:
            known = ", ".join(sorted({*values, *flags}))
            raise BatchError(f"{where}unknown option {name} (known: {known})")
        else:
            warnings.append(f"{where}#SBATCH {name} is not supported by fairpod and is ignored")
            n = 2 if (not eq and not attached and has_next) else 1
        i += n
    return out, warnings


def read_script(path: str | Path, text: str | None = None) -> BatchScript:
    """The directives of a batch script; raises BatchError for what cannot run."""
    p = Path(path)
    if text is None:
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise BatchError(f"cannot read {path}: {e.strerror or e}") from None
        if len(raw) > MAX_SCRIPT:
            raise BatchError(f"{path} is {len(raw)} bytes; batch scripts are limited to {MAX_SCRIPT // 1024} KiB")
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise BatchError(f"{path} is not a text file (not UTF-8)") from None
    lines = text.splitlines()
    if not lines or not lines[0].startswith("#!"):
        raise BatchError(f"{path} does not look like a batch script: its first line must start with #! "
                         "followed by the path to an interpreter (e.g. #!/bin/bash)")
    bs = BatchScript(str(path), text)
    in_header = True
    for no, line in enumerate(lines[1:], start=2):
        stripped = line.strip()
        m = re.match(r"#(SBATCH|FAIRPOD)(\s|$)", stripped)
        if m and not in_header:
            bs.warnings.append(f"line {no}: #{m.group(1)} after the first command is ignored (as Slurm does)")
            continue
        if in_header and stripped and not stripped.startswith("#"):
            in_header = False
            continue
        if not m:
            continue
        try:
            # a comment starts a word, as in the shell: pyxis's REGISTRY#IMAGE is no comment
            tokens = shlex.split(re.split(r"(?:^|\s)#", stripped[len(m.group(0)) :], maxsplit=1)[0])
        except ValueError as e:
            raise BatchError(f"line {no}: cannot read the directive: {e}") from None
        settings, warnings = parse_options(tokens, f"line {no}", fairpod=m.group(1) == "FAIRPOD", strict=False)
        bs.settings.extend(settings)
        bs.warnings.extend(warnings)
    return bs


def _count(key: str, v: Any, origin: str | None) -> int:
    try:
        text = str(v)
        n = int(text.split("-")[0]) if key == "nodes" else int(text)
    except ValueError:
        raise BatchError(f"{origin}: --{key.replace('_', '-')} wants a whole number, got {v!r}") from None
    if n < 1:
        raise BatchError(f"{origin}: --{key.replace('_', '-')} must be at least 1, got {v!r}")
    return n


def gpu_count(spec: str, origin: str | None) -> tuple[int, list[str]]:
    """GPUs in a --gres value (``gpu:4``, ``gpu:a100:4``, ``gpu``); other resources are reported back."""
    gpus, other = 0, []
    for item in spec.split(","):
        parts = item.strip().split(":")
        if not parts[0]:
            continue
        if parts[0] != "gpu":
            other.append(item)
            continue
        try:
            gpus += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
        except ValueError:
            raise BatchError(f"{origin}: cannot read --gres {spec!r}") from None
    return gpus, other


def _retries(v: Any, origin: str | None) -> int:
    text = str(v).strip()
    if not text.isdigit() or int(text) > 1000:
        raise BatchError(f"{origin}: --max-retry wants a whole number of restarts, 0 to 1000, got {v!r}")
    return int(text)


SLURM_MEM_UNITS = {"": 1 / 1024, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}


def slurm_mem_gib(spec: str, origin: str | None) -> float | None:
    """``--mem`` as Slurm reads it (megabytes by default; K, M, G, T suffixes), in GiB; ``0`` (all of the node's
    memory) is None: the default by ratio."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)B?", spec.strip().upper())
    if m is None:
        raise BatchError(f"{origin}: --mem {spec!r}: want a size such as 16G or 16000 (MB)")
    gib = float(m.group(1)) * SLURM_MEM_UNITS[m.group(2)]
    return gib if gib > 0 else None


def job_name(text: str) -> str:
    """A fairpod job name for a Slurm job name (lower case, [a-z0-9-], at most 63)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)[:63].strip("-")
    return name or "sbatch"


def exported_env(export: str | None, environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """What ``--export`` passes to the job, and the credential-like names left out of ALL."""
    parts = [p for p in (export or "ALL").split(",") if p]
    env: dict[str, str] = {}
    skipped: list[str] = []
    if parts and parts[0].upper() in ("ALL", "NONE"):
        if parts[0].upper() == "ALL":
            for k, v in environ.items():
                if k.startswith(("FAIRPOD_", "SLURM_", "BASH_FUNC_")) or k in SHELL_VARS:
                    continue
                if SECRETS_RE.search(k):
                    skipped.append(k)
                    continue
                env[k] = v
        parts = parts[1:]
    for p in parts:
        k, eq, v = p.partition("=")
        if eq:
            env[k] = v
        elif k in environ:
            env[k] = environ[k]
    return env, sorted(skipped)


def to_job(bs: BatchScript, args: list[str], *, cwd: str, environ: dict[str, str],
           python: str) -> tuple[dict[str, Any], list[str]]:
    """The POST /jobs body of a batch script, and notes for the user; the front end hands it to the checks and
    defaults of every job body (fairpod.cli.jobbody.finish: a script without a team gets one there)."""
    notes = list(bs.notes)
    g = bs.get
    slurm_name = str(g("job_name") or Path(bs.path).name)
    name = job_name(slurm_name)
    if name != slurm_name:
        notes.append(f"fairpod job name: {name} (SLURM_JOB_NAME and %x stay {slurm_name!r})")
    nodes = _count("nodes", g("nodes", 1), bs.origin("nodes"))
    if g("nodes") and "-" in str(g("nodes")):
        notes.append(f"--nodes {g('nodes')}: fairpod runs exactly {nodes} node(s)")
    ntpn = _count("ntasks_per_node", g("ntasks_per_node"), bs.origin("ntasks_per_node")) if g("ntasks_per_node") else None
    ntasks = _count("ntasks", g("ntasks"), bs.origin("ntasks")) if g("ntasks") else None
    if ntasks and not ntpn:
        if ntasks < nodes:
            raise BatchError(f"--ntasks {ntasks} is fewer than --nodes {nodes}")
        ntpn = -(-ntasks // nodes)
    gpn = None
    if g("gres"):
        gpn, other = gpu_count(str(g("gres")), bs.origin("gres"))
        if other:
            bs.warnings.append(f"{bs.origin('gres')}: --gres {', '.join(other)}: only gpu is known to fairpod; ignored")
    if g("gpus_per_node"):
        gpn = _count("gpus_per_node", str(g("gpus_per_node")).split(":")[-1], bs.origin("gpus_per_node"))
    if g("gpus"):
        gpn = -(-_count("gpus", str(g("gpus")).split(":")[-1], bs.origin("gpus")) // nodes)
    accelerators: float | None = None
    if g("accelerators") is not None:
        try:
            accelerators = float(g("accelerators"))
        except ValueError:
            raise BatchError(f"{bs.origin('accelerators')}: --accelerators wants a number") from None
    elif gpn and not g("exclusive"):
        accelerators = float(gpn)
    elif gpn:
        notes.append("--exclusive: the job gets whole nodes; --gres/--gpus do not limit it")
    vcpu = memory_gib = None
    if g("cpus_per_task") is not None:  # a replica per node runs its tasks: their CPUs add up
        vcpu = float(_count("cpus_per_task", g("cpus_per_task"), bs.origin("cpus_per_task")) * (ntpn or 1))
    if g("mem") is not None:
        memory_gib = slurm_mem_gib(str(g("mem")), bs.origin("mem"))
    open_mode = g("open_mode")
    if open_mode is not None and open_mode not in ("append", "truncate"):
        raise BatchError(f"{bs.origin('open_mode')}: --open-mode is append or truncate, got {open_mode!r}")
    wan = str(g("wait_all_nodes", "0"))
    if wan not in ("0", "1"):
        raise BatchError(f"{bs.origin('wait_all_nodes')}: --wait-all-nodes is 0 or 1, got {wan!r}")

    # auto-resume: explicit choice, else --requeue, else srun --auto-resume=1 in the script
    auto: bool | None = None
    for s in reversed(bs.settings):
        if s.key in ("auto_resume", "no_auto_resume", "requeue", "no_requeue"):
            auto = s.key in ("auto_resume", "requeue")
            notes.append(f"auto-resume {'on' if auto else 'off'} ({s.origin}: "
                         f"--{s.key.replace('_', '-')})")
            break
    if auto is None:
        for no, line in enumerate(bs.text.splitlines(), start=1):
            if not line.lstrip().startswith("#") and AUTO_RESUME_RE.search(line):
                auto = True
                notes.append(f"auto-resume on: the script runs srun --auto-resume=1 (line {no})")
                break
    auto = bool(auto)
    max_retry = _retries(g("max_retry"), bs.origin("max_retry")) if g("max_retry") is not None else \
        (DEFAULT_MAX_RETRY if auto else 0)
    env, skipped = exported_env(g("export"), environ)
    if skipped:
        notes.append(f"not exported (they look like credentials): {', '.join(skipped)}")
    workdir = str(Path(cwd, g("chdir")).absolute()) if g("chdir") else cwd
    cfg = {
        "name": slurm_name, "script": bs.text, "script_name": Path(bs.path).name, "output": g("output"),
        "error": g("error"), "open_mode": open_mode, "ntasks_per_node": ntpn or 1, "ntasks": ntasks,
        "wait_all_nodes": wan == "1", "gpus_per_node": gpn, "partition": g("instance_type") or g("partition"),
        "auto_resume": auto, "submit_dir": cwd, "submit_host": socket.gethostname(),
    }  # fmt: skip
    env["FAIRPOD_SBATCH"] = json.dumps(cfg)
    body: dict[str, Any] = {
        "name": name, "team": g("team") or g("account"), "priority": g("priority") or g("qos"),
        "instance_type": g("instance_type") or g("partition"), "nodes": nodes, "accelerators": accelerators,
        "command": [python, "-m", "fairpod.formats.slurm.runner", *args], "env": env, "workdir": workdir,
        "auto_resume": auto, "max_retry": max_retry, "vcpu": vcpu, "memory_gib": memory_gib,
    }  # fmt: skip
    for key, field_name in (("grace_seconds", "termination_grace_seconds"), ("min_runtime", "min_runtime_seconds")):
        if g(key) is not None:
            try:
                body[field_name] = float(g(key))
            except ValueError:
                raise BatchError(f"{bs.origin(key)}: --{key.replace('_', '-')} wants seconds") from None
    if g("deep_health_check_passed_nodes_only"):
        body["deep_health_check_passed_nodes_only"] = True
    for key in ("required_topology", "preferred_topology"):
        if g(key) is not None:
            body[key] = g(key)
    body = {k: v for k, v in body.items() if v is not None}
    keys = [*pyxis.VALUE.values(), *pyxis.FLAGS.values()]
    flags = {k: g(k) for k in keys if g(k) is not None}
    origin = bs.origin("container_image") or next((bs.origin(k) for k in flags), None) or "sbatch"
    try:
        image_job = pyxis.to_image_job(body, flags, origin, bs.text, bs.path, args, cwd, ntpn or 1)
    except pyxis.PyxisError as e:
        raise BatchError(str(e)) from None
    if image_job is not None:
        body, more = image_job
        notes += more
    elif re.search(r"--container-(image|mounts)", bs.text):
        notes.append("the script's steps run on the node unless srun is given --container-image when the script "
                     "runs; fairpod then refuses that step (a container step runs as the script's only command "
                     "or with #SBATCH --container-image: docs/slurm.md)")
    return body, notes


def unknown_patterns(pattern: str | None) -> list[str]:
    if not pattern:
        return []
    return sorted({m.group(1) for m in re.finditer(r"%\d*([^jJAxNnTusa%\d])", pattern)})
