"""What this host can hold a replica to, and why not: for ``fairpod up`` and the node view.

Four kinds, as in the docs (docs/isolation.md): ``cpu`` (CPU quota), ``memory`` (memory limit without extra swap),
``devices`` (only its own GPUs) and ``files`` (its own view of the file system). Each is enforced or comes with
the reason it is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import fairpod.sandbox as sandbox
from fairpod.sandbox import cgroups, devices, namespaces

KINDS = ("cpu", "memory", "devices", "files")


@dataclass(frozen=True)
class Enforcement:
    why_not: dict[str, str]  # kind -> reason, for the kinds not enforced
    cgroup: str | None  # "v1", "v2" or None

    def enforced(self, kind: str) -> bool:
        return kind not in self.why_not

    def view(self) -> dict[str, bool]:
        return {k: self.enforced(k) for k in KINDS}

    def line(self) -> str:
        """One line: what is enforced, and what is not with why."""
        yes = [k for k in KINDS if self.enforced(k)]
        head = (', '.join(yes) + (f" (cgroup {self.cgroup})" if self.cgroup else "")) if yes else "nothing"
        why: dict[str, list[str]] = {}
        for k in KINDS:
            if k in self.why_not:
                why.setdefault(self.why_not[k], []).append(k)
        tail = "; ".join(f"not {'/'.join(ks)}: {r}" for r, ks in why.items())
        return head + (f"; {tail}" if tail else "")


def host() -> Enforcement:
    """What replicas started on this host by this user get (detected once per process and mode)."""
    return _host(sandbox.mode())


def required_gap(isolation: str, elsewhere: str | None) -> str | None:
    """With ``cluster.isolation: required``, why this host's nodes take no job (None: they may). ``elsewhere``:
    None where every node is this host; else whose nodes they are (a phrase for the message): they are not
    probed from here, so the requirement cannot be shown to hold and no node takes a job."""
    if isolation != "required":
        return None
    if elsewhere is not None:
        return f"cluster.isolation: required: {elsewhere} are not checked for isolation in this version"
    e = host()
    missing = [k for k in KINDS if not e.enforced(k)]
    if not missing:
        return None
    why = "; ".join(f"{k}: {e.why_not[k]}" for k in missing)
    return f"no node enforces {'/'.join(missing)} (cluster.isolation: required): {why}"


@cache
def _host(mode: str) -> Enforcement:
    why: dict[str, str] = {}
    if mode != "full":
        why["files"] = f"turned off ({sandbox.MODE_ENV}={mode})"
    elif (ns := namespaces.supported()) is not None:
        why["files"] = ns
    private_dev = "files" not in why  # the files sandbox gives each replica a private /dev
    if mode == "off":
        for k in ("cpu", "memory", "devices"):
            why[k] = f"turned off ({sandbox.MODE_ENV}=off)"
        return Enforcement(why, None)
    try:
        h = cgroups.detect()
    except cgroups.CgroupError as e:
        for k in ("cpu", "memory"):
            why[k] = str(e)
        if not private_dev:
            why["devices"] = f"{e}, and no private /dev without the files sandbox"
        return Enforcement(why, None)
    if not private_dev:
        if h.kind == "v2":
            why["devices"] = "cgroup v2 has no device cgroup, and the private /dev needs the files sandbox"
        elif "devices" not in h.controllers:
            why["devices"] = "no devices controller mounted (cgroup v1), and no private /dev without the files sandbox"
        elif not devices.cgroup_wanted():
            why["devices"] = f"device cgroup turned off ({devices.CGROUP_ENV}=off) and no files sandbox"
    return Enforcement(why, h.kind)
