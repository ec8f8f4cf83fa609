"""Topology-aware gang placement: replicas in one domain of a level (a rack, a block), or in as few as fit.

A cluster may name topology levels, outermost first (``block``, ``rack``; the host is implied below the last).
Every node has a domain at each level (``Node.topo``: "b1", "b1/r3"). A job asks for a level:

- ``required``: all its replicas in one domain of that level, or it waits;
- ``preferred``: in one domain of that level if one fits, else in one domain of the level above, …, else in as
  few domains as possible;
- nothing: as ``preferred`` at the lowest level, so that jobs are packed into the racks that are fullest
  already and whole racks stay free for later large jobs.

The choice follows Kueue's topology-aware scheduling with its default BestFit profile:

1. count, per domain at each level, the nodes that could take one replica now (one replica per node);
2. at the asked level, if the domain with the most such nodes fits the gang, take the domain with the fewest
   that still fits it (best fit; ties by name). If none fits: ``required`` fails, ``preferred`` goes a level
   up; at the top level it takes domains from the largest down, the last one again best fit;
3. below the chosen domains, level by level, take child domains from the largest down and, once one can
   hold what is left, the smallest that can (best fit): the gang spans as few domains as possible at every
   level, and the domains it leaves untouched stay whole;
4. within each chosen lowest-level domain, nodes in the engine's node best-fit order (fewest free
   accelerators, deep-check-passed first, free mCPU, free MiB, name).

Where Kueue counts pods per node, fairpod counts nodes: a gang's replicas always run on distinct nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from operator import itemgetter

from fairpod.governance.nodes import Node
from fairpod.governance.snapshot import Snapshot
from fairpod.governance.workload import Workload


def level_of(snap: Snapshot, w: Workload) -> tuple[int, bool] | None:
    """(index of the level that applies to ``w``, required?) — None when the cluster has no topology, and
    (-1, True) when ``w`` requires a level the cluster does not have (it can never be placed)."""
    if w.topology is not None and w.topology_required and w.topology not in snap.levels:
        return -1, True  # e.g. the spec lost the level since the job was submitted
    if not snap.levels:
        return None
    if w.topology is not None and w.topology in snap.levels:
        return snap.levels.index(w.topology), w.topology_required
    return len(snap.levels) - 1, False  # implied: pack into the fullest racks


def node_key(nd: Node) -> tuple:
    """The engine's node best-fit order: fewest free accelerators first, then deep-check-passed, …"""
    f = nd.free
    return (f[0], not nd.health_passed, f[1], f[2], nd.name)


def fitting_nodes(snap: Snapshot, w: Workload, reserved: dict[str, str] | None) -> list[Node]:
    """The nodes that could take one replica of ``w`` now."""
    a, c, m = w.req
    return [nd for nd in snap.by_type.get(w.itype, ())
            if nd.schedulable and (nd.health_passed or not w.passed_only)
            and nd.free[0] >= a and nd.free[1] >= c and nd.free[2] >= m
            and (not reserved or reserved.get(nd.name, w.id) == w.id)]


def place(snap: Snapshot, w: Workload, reserved: dict[str, str] | None = None) -> list[str] | None:
    """Node names for the replicas of ``w`` chosen by topology (see module doc), or None if it does not fit."""
    lv = level_of(snap, w)
    assert lv is not None
    level, required = lv
    if level < 0:
        return None
    nodes = fitting_nodes(snap, w, reserved)
    if len(nodes) < w.n:
        return None
    chosen = choose(nodes, w.n, level, required, len(snap.levels))
    return None if chosen is None else [nd.name for nd in chosen]


def choose(nodes: list[Node], n: int, level: int, required: bool, levels: int) -> list[Node] | None:
    """``n`` of ``nodes`` (each fits one replica) by the algorithm of the module doc."""
    topos = [nd.topo for nd in nodes]
    counts = [Counter(map(itemgetter(lv), topos)) for lv in range(levels)]
    found = _fit_level(counts, level, n, required)
    if found is None:
        return None
    lv, chosen = found
    for lower in range(lv + 1, levels):
        above = {d for d, _ in chosen}
        children = _sorted((d, c) for d, c in counts[lower].items() if parent(d) in above)
        chosen = _minimum(children, n)
    take = dict(chosen)
    by_domain: dict[str, list[Node]] = {}
    last = levels - 1
    for nd in nodes:
        if nd.topo[last] in take:
            by_domain.setdefault(nd.topo[last], []).append(nd)
    out: list[Node] = []
    for d, k in chosen:
        got = by_domain[d]
        out.extend(sorted(got, key=node_key)[:k] if k < len(got) else got)
    return out


def parent(domain_id: str) -> str:
    """The domain one level up ("b1/r3" -> "b1"); a node's own domain at the top is its own parent."""
    return domain_id.rsplit("/", 1)[0] if "/" in domain_id else domain_id


def _sorted(domains: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Most fitting nodes first; ties by name."""
    return sorted(domains, key=lambda e: (-e[1], e[0]))


def _best_fit(domains: list[tuple[str, int]], n: int) -> tuple[str, int]:
    """Of ``domains`` (sorted, the first fits ``n``), the one with the fewest fitting nodes that still fits."""
    return min((e for e in domains if e[1] >= n), key=lambda e: (e[1], e[0]))


def _minimum(domains: list[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    """(domain, replicas) over as few of ``domains`` (sorted) as hold ``n``: the largest first, the last best fit."""
    out: list[tuple[str, int]] = []
    left = n
    for i, (d, c) in enumerate(domains):
        if c >= left:
            out.append((_best_fit(domains[i:], left)[0], left))
            return out
        out.append((d, c))
        left -= c
    raise AssertionError("the domains hold fewer nodes than the gang")  # the caller counted them


def _fit_level(counts: list[Counter[str]], level: int, n: int,
               required: bool) -> tuple[int, list[tuple[str, int]]] | None:
    """The level at which ``n`` is placed and its domains with their replica counts (Kueue's phase 2a)."""
    while True:
        doms = _sorted(counts[level].items())
        if doms and doms[0][1] >= n:
            return level, [(_best_fit(doms, n)[0], n)]
        if required:
            return None
        if level == 0:
            if sum(c for _, c in doms) < n:
                return None
            return 0, _minimum(doms, n)
        level -= 1


def domain_name(domain_id: str) -> str:
    """A domain as users name it: its own name (``r3`` of "b1/r3"); a node's own domain by the node's name."""
    return domain_id.rsplit("/", 1)[-1].lstrip("?")


def largest(nodes: Iterable[Node], level: int) -> tuple[str, int]:
    """(the domain at ``level`` holding the most of ``nodes``, how many) — ("", 0) for none."""
    counts = Counter(nd.topo[level] for nd in nodes)
    if not counts:
        return "", 0
    return min(counts.items(), key=lambda e: (-e[1], e[0]))


def never_fits(snap: Snapshot, w: Workload, ok: list[Node]) -> str | None:
    """Why ``w``'s required level can never be met on the healthy nodes ``ok``, or None if it could."""
    lv = level_of(snap, w)
    if lv is None or not lv[1]:
        return None
    level, _ = lv
    if level < 0:
        return (f"requires topology level {w.topology!r}, which the cluster does not have "
                f"(cluster.topology_levels: {', '.join(snap.levels) or 'none'})")
    d, c = largest(ok, level)
    if c < w.n:
        name = snap.levels[level]
        return (f"needs {w.n} healthy {w.itype} nodes in one {name}; the largest {name} has {c}"
                + (f" ({name} {domain_name(d)})" if d else ""))
    return None


def why_not(snap: Snapshot, w: Workload) -> str | None:
    """Why a job with a required level waits now (its level can be met on an idle cluster), or None."""
    lv = level_of(snap, w)
    if lv is None or not lv[1] or lv[0] < 0:
        return None
    name = snap.levels[lv[0]]
    d, c = largest(fitting_nodes(snap, w, None), lv[0])
    most = f"most now: {c}, in {name} {domain_name(d)}" if c else "none has one now"
    return (f"waiting for topology: no {name} has {w.n} {w.itype} nodes with {w.req.acc} free accelerators each "
            f"({most}); the job requires one {name}")


def hold(snap: Snapshot, w: Workload, cands: list[tuple]) -> list[tuple]:
    """Of ``cands`` ((deficit…, node name), sorted nearest first), the ``w.n`` to hold for a starving ``w``:
    the nearest ones, all in one domain of its required level when it has one (the domain nearest to having
    room for it)."""
    lv = level_of(snap, w)
    if lv is None or not lv[1] or lv[0] < 0:
        return cands[: w.n]
    by: dict[str, list[tuple]] = {}
    for c in cands:
        by.setdefault(snap.nodes[c[-1]].topo[lv[0]], []).append(c)
    full = [(sum(sum(c[:-1]) for c in cs[: w.n]), d, cs[: w.n]) for d, cs in by.items() if len(cs) >= w.n]
    return min(full)[2] if full else []
