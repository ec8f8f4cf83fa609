"""Policy as code: what a spec change would do before it is applied (``fairpod apply --dry-run``).

``diff`` is a unified diff of the two specs as YAML. ``dry_run`` runs the engine once on the committed state (the
store's nodes and unfinished jobs, read in one transaction; the fair-share history and budget hours as the core
last published them) under the live spec and once under the new one, and reports the decisions that only the new
spec makes: the running jobs it would preempt (and why) and the pending jobs it would start. Nothing is written,
and it takes no lock: a turn running meanwhile delays it by no more than the CPU the turn takes. The engine is pure,
so the answer is what the next cycle would do if the change were applied on that state.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

import yaml  # type: ignore[import-untyped]  # types-PyYAML is not a dependency of fairpod

from fairpod.governance import Admit, Preempt, net_changes, schedule
from fairpod.model.spec import ClusterSpec
from fairpod.server.runs import from_engine

if TYPE_CHECKING:
    from fairpod.governance.snapshot import Snapshot
    from fairpod.server.core.api import Core


def as_yaml(spec: ClusterSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False)


def diff(old: ClusterSpec, new: ClusterSpec, old_name: str = "live", new_name: str = "new") -> str:
    """A unified diff of the specs as YAML (fields at their defaults left out); empty when they are equal."""
    return "".join(difflib.unified_diff(as_yaml(old).splitlines(keepends=True), as_yaml(new).splitlines(keepends=True),
                                        fromfile=old_name, tofile=new_name))


def _decisions(snap: Snapshot) -> tuple[dict[str, Preempt], dict[str, Admit]]:
    decided = net_changes(schedule(snap))
    return ({d.job: d for d in decided if isinstance(d, Preempt)},
            {d.job: d for d in decided if isinstance(d, Admit)})


def dry_run(cp: Core, new: ClusterSpec) -> dict[str, Any]:
    """What applying ``new`` would do now (see the module's doc); the caller checked ``new`` is valid."""
    old = cp.spec
    gone = sorted(cp.queries.unfinished_teams() - {t.name for t in new.teams})
    # both specs' decisions from one state, built without the core's lock (Core.trial_snapshots): a dry run
    # never waits for a turn
    (pre_old, adm_old), (pre_new, adm_new) = (_decisions(snap) for snap in cp.trial_snapshots([old, new]))
    jobs = cp.queries.get_jobs(int(j) for j in {*pre_new, *adm_new})

    def who(jid: str) -> dict[str, Any]:
        job = jobs.get(from_engine(jid))
        return {"id": from_engine(jid), "name": job.name if job else None, "team": job.team if job else None}

    preempt = [{**who(j), "kind": d.kind, "reason": d.reason} for j, d in sorted(pre_new.items())
               if j not in pre_old]
    admit = [{**who(j), "nodes": list(d.nodes), "reason": d.reason} for j, d in sorted(adm_new.items())
             if j not in adm_old]
    problems = [f"team(s) {', '.join(gone)} still have unfinished jobs: the change would be refused"] if gone else []
    return {"changed": as_yaml(old) != as_yaml(new), "diff": diff(old, new), "would_preempt": preempt,
            "would_start": admit, "problems": problems}
