"""``python -m fairpod.formats.kube.pod -- COMMAND…``: start one replica of a PyTorchJob as its pod would start.

Sets what Kubeflow's training operator gives a PyTorch container, from the replica's fairpod variables:
``PET_*`` for torchrun (a c10d rendezvous on 127.0.0.1 and the job's port for jobs with an elasticPolicy, a
static one otherwise; an elastic fairpod job's replicas get ``PET_NNODES=MIN:MAX`` and the rendezvous store on
replica 0, ``is_host=1`` there only), ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``; then replaces itself with
the command. A command given by an absolute path that does not exist on this machine (the image's
``/usr/local/bin/torchrun``) is looked up by name on PATH, then next to the Python running this.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

ENV_CONFIG = "FAIRPOD_PYTORCHJOB"  # the replica's torchrun settings (fairpod.formats.kube.pytorchjob), JSON


def pod_env(env: dict[str, str]) -> dict[str, str]:
    cfg = json.loads(env.get(ENV_CONFIG) or "{}")
    out = dict(env)
    out.pop(ENV_CONFIG, None)
    nnodes = env.get("WORLD_SIZE", "1")
    addr, port = env.get("MASTER_ADDR", "127.0.0.1"), env.get("MASTER_PORT", "29500")
    if cfg.get("elastic"):
        lo, hi = env.get("FAIRPOD_MIN_NODES"), env.get("FAIRPOD_MAX_NODES")
        resizable = bool(lo and hi and lo != hi)
        if resizable:
            nnodes = f"{lo}:{hi}"
        out.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=f"{addr}:{port}", PET_NNODES=nnodes,
                   PET_RDZV_ID=env.get("FAIRPOD_RUN_ID") or env.get("FAIRPOD_JOB", "fairpod"))
        if cfg.get("max_restarts") is not None:
            out["PET_MAX_RESTARTS"] = str(cfg["max_restarts"])
        conf = [str(cfg["rdzv_conf"])] if cfg.get("rdzv_conf") else []
        if resizable:
            # the rendezvous store stays on replica 0, which a shrink never removes; torch's shared bootstrap
            # store would hang a re-rendezvous that a new node joins
            if not any(c.split("=", 1)[0].strip() == "is_host" for c in ",".join(conf).split(",")):
                conf.append(f"is_host={1 if env.get('RANK', '0') == '0' else 0}")
            out.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        if conf:
            out["PET_RDZV_CONF"] = ",".join(conf)
    else:
        out.update(PET_NNODES=nnodes, PET_NODE_RANK=env.get("RANK", "0"), PET_MASTER_ADDR=addr,
                   PET_MASTER_PORT=port)
    if cfg.get("nproc_per_node") is not None:
        out.setdefault("PET_NPROC_PER_NODE", str(cfg["nproc_per_node"]))
    return out


def resolve(argv0: str, path: str | None) -> str | None:
    """``argv0`` itself, or for an absolute path missing here: its name on PATH, then next to this Python
    (the environment fairpod runs in, e.g. a virtualenv's torchrun)."""
    if not argv0.startswith("/") or os.path.exists(argv0):
        return argv0
    here = os.path.dirname(sys.executable)
    return shutil.which(os.path.basename(argv0), path=os.pathsep.join(p for p in (path, here) if p))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m fairpod.formats.kube.pod -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    env = pod_env(dict(os.environ))
    exe = resolve(args[0], env.get("PATH"))
    if exe is None:
        print(f"fairpod: {args[0]} does not exist on this machine and {os.path.basename(args[0])} is not on PATH "
              f"({env.get('PATH', '')}): the container image cannot be used on the local executor", file=sys.stderr)
        return 127
    if exe != args[0]:
        print(f"fairpod: {args[0]} does not exist on this machine; running {exe}", flush=True)
    try:
        os.execvpe(exe, [exe, *args[1:]], env)
    except OSError as e:
        print(f"fairpod: cannot run {exe}: {e.strerror or e}", file=sys.stderr)
        return 126
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
