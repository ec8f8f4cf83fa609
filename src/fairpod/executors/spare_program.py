# fairpod spare: a replica's interpreter started ahead of a failure, its imports done, waiting for its launch
"""The program of a replica's spare (:mod:`fairpod.executors.standby`), run as ``python -c <this file's text>`` by
the job's own interpreter, in the replica's sandbox (its cgroup, namespaces and user), so that it needs nothing of
fairpod importable there.

It lowers its priority (``nice`` 10 where fairpod runs as root, which gives it back: the imports do not slow the
replica it stands by for), imports the modules of
``$FAIRPOD_SPARE_PRELOAD`` (comma-separated; default :data:`PRELOAD`), says so on its
output (the replica's log) and waits on its stdin. The standby supervisor writes one JSON line when the replica
is started again (``{"argv": [...], "env": {...}}``: the launch's command and environment) and gives back the
priority; the spare then runs the command as ``python`` would have (``script.py ARGS`` or ``-m module ARGS``), in
this interpreter, its imports already done. At the end of its input without a launch it exits.
"""

import importlib
import json
import os
import runpy
import sys
import time

# torch with its process groups and DDP, and torch._dynamo, which torch.optim imports when the first optimizer is made
# (1.5 s of CPU, measured: as long as the rest of a replacement's start after the spare's go)
PRELOAD = "torch.distributed,torch.nn.parallel,torch._dynamo"


def main() -> None:
    os.nice(int(os.environ.get("FAIRPOD_SPARE_NICE") or 0))  # 10 when its supervisor can give the priority back
    t0 = time.monotonic()
    names = [n.strip() for n in os.environ.get("FAIRPOD_SPARE_PRELOAD", PRELOAD).split(",") if n.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - the program imports it again and meets the error itself
            print(f"==== fairpod spare: cannot import {name}: {e} ====", file=sys.stderr, flush=True)
    print(f"==== fairpod spare: ready, {', '.join(names) or 'nothing'} imported in {time.monotonic() - t0:.2f} s "
          "====", flush=True)
    line = sys.stdin.buffer.readline()
    if not line:
        os._exit(0)
    go = json.loads(line)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.clear()
    os.environ.update(go["env"])
    args = list(go["argv"][1:])
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.realpath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":  # python -c runs it as __main__; an import of this module runs nothing
    main()
