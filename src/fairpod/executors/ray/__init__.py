"""The Ray executor (a package: :mod:`.connection` connects and checks Ray, :mod:`.nodes` keeps the
node table, :mod:`.attempts` launches and adopts attempts, :mod:`.pump` pulls logs and exits, :mod:`.executor`
ties them together): the replicas of fairpod's jobs run on the nodes of an existing Ray cluster.

fairpod's engine decides which job runs on which nodes; this executor only carries the decision out. Each
attempt of a job gets one detached placement group, one bundle per replica (its GPUs), ``STRICT_SPREAD``,
each bundle bound to the Ray node the engine chose (``bundle_label_selector`` on Ray's ``ray.io/node-id``
label). In each bundle runs a detached, named *replica agent* actor (:mod:`fairpod.executors.ray_node`) that
starts the replica's command under the local executor's supervisor, so replicas get the same environment and
the same stop and clean-up rules as with :class:`~fairpod.executors.local.LocalExecutor` (see
:mod:`fairpod.executors`); ``MASTER_ADDR`` is the rank-0 node's address, ``MASTER_PORT`` a free port there,
``CUDA_VISIBLE_DEVICES``/``FAIRPOD_ACCELERATORS`` the GPUs Ray gave the actor, ``FAIRPOD_RAY_NODE_ID`` the
Ray node.

Nodes. A Ray node is a fairpod node when it carries the custom resource ``fairpod/instance-type:<type>``
(``ray start --resources '{"fairpod/instance-type:ml.g5.12xlarge": 1}' --num-gpus 4``) or the label
``fairpod/instance-type=<type>``. Its fairpod name is its Ray node name (``ray start --node-name``, by
default its IP address); when another live node has that name already, ``<name>-<first 8 hex of the node
id>``. :meth:`RayExecutor.cluster_nodes` is the table :mod:`fairpod.server.membership` turns into joins,
faults and departures.

State. Everything needed to pick up after a restart of the control plane is under ``root``:
``<root>/<job>/<attempt>/ray.json`` (placement group, actors, nodes of the attempt) and, per replica,
``<root>/<job>/<attempt>/<rank>/`` with ``output.log`` (a copy of the replica's output, pulled from its agent
every ``poll_interval``: the control plane needs no file system shared with the nodes for logs),
``status.json`` and the ``reported`` marker, as the local executor keeps them; ``<root>/ray-nodes.json`` keeps
the names given to Ray nodes. A background thread talks to Ray; the protocol methods only read and write
memory and disk, and submit Ray calls without waiting for them.

Exits besides those of the command: ``"node lost: ..."`` when the replica's Ray node died, and ``"the
replica's Ray actor died: ..."`` when its actor did (killed, or its worker crashed): in both cases the exit is
reported at once, and the supervisor, which watches the actor's process, stops what is left of the replica
(SIGTERM, SIGKILL after the grace period) if the machine still runs; ``"not started: ..."`` when the placement
group could not be placed within ``startup_timeout``; ``"lost while the control plane was down: ..."`` when a
replica's actor had disappeared at start-up; ``"killed: ..."`` when a stopped replica has not ended
``STOP_MARGIN`` seconds after its grace period (its actor is killed).

Only one fairpod control plane may use a Ray namespace: at start-up, actors and placement groups of the
namespace that none of its records names are removed.
"""

from fairpod.executors.ray.connection import (
    MIN_RAY_VERSION,
    check_reachable,
    check_version,
    connect,
    parse_address,
    resolve_address,
)
from fairpod.executors.ray.executor import NAMESPACE_RE, RayExecutor
from fairpod.executors.ray.nodes import RayNode

__all__ = [
    "MIN_RAY_VERSION",
    "NAMESPACE_RE",
    "RayExecutor",
    "RayNode",
    "check_reachable",
    "check_version",
    "connect",
    "parse_address",
    "resolve_address",
]
