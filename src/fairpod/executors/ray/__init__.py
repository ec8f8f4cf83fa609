"""The Ray executor (a package: :mod:`.connection` connects and checks Ray, :mod:`.nodes` keeps the
node table, :mod:`.agents` keeps one node agent per node, :mod:`.attempts` launches and adopts attempts,
:mod:`.pump` pulls logs and exits, :mod:`.inplace` says which replicas really started, restarts one in
place or on another node (its own failed) and stops one alone, :mod:`.executor` ties them together): the
replicas of fairpod's jobs run on the nodes of an existing Ray cluster.

fairpod's engine decides which job runs on which nodes and which accelerator slots of each node; this executor
only carries the decision out. Every fairpod node has one long-lived *node agent* (:class:`~fairpod.executors.
ray_node.NodeAgent`): a detached Ray actor named ``fairpod-agent:<Ray node id>`` in the fairpod namespace,
pinned to its node (``NodeAffinitySchedulingStrategy``, ``soft=False``), holding all of the node's Ray GPUs
(so no other Ray work is placed on them), started when the node joins and found again by name after a restart
of the control plane. A replica is one call to its node's agent, which forks the replica's supervisor (the
local executor's, guarding on the agent's process) from its fork server: no Ray worker and no placement group
per replica. Replicas get the same environment and the same stop and clean-up rules as with
:class:`~fairpod.executors.local.LocalExecutor` (see :mod:`fairpod.executors`); ``MASTER_ADDR`` is the rank-0
node's address, ``MASTER_PORT`` a free port there, ``CUDA_VISIBLE_DEVICES``/``FAIRPOD_ACCELERATORS`` the
node's GPU ids at fairpod's slots, ``FAIRPOD_RAY_NODE_ID`` the Ray node.

Nodes. A Ray node is a fairpod node when it carries the custom resource ``fairpod/instance-type:<type>``
(``ray start --resources '{"fairpod/instance-type:ml.g5.12xlarge": 1}' --num-gpus 4``) or the label
``fairpod/instance-type=<type>``. Its fairpod name is its Ray node name (``ray start --node-name``, by
default its IP address); when another live node has that name already, ``<name>-<first 8 hex of the node
id>``. :meth:`RayExecutor.cluster_nodes` is the table :mod:`fairpod.server.core.transitions.membership` turns into joins,
faults and departures.

State. Everything needed to pick up after a restart of the control plane is under ``root``:
``<root>/<job>/<attempt>/ray.json`` (the nodes and run keys of the attempt's replicas) and, per replica,
``<root>/<job>/<attempt>/<rank>/`` with ``output.log`` (a copy of the replica's output, pulled from its agent
every ``poll_interval``: the control plane needs no file system shared with the nodes for logs),
``status.json`` and the ``reported`` marker, as the local executor keeps them; ``<root>/ray-nodes.json`` keeps
the names given to Ray nodes. A background thread talks to Ray; the protocol methods only read and write
memory and disk, and submit Ray calls without waiting for them.

Agents. A node is live for fairpod while Ray has it alive *and* its agent answers (every call it gets is a
heartbeat; one a second when it runs nothing). An agent that dies (killed, its worker crashed) or has not
answered for ``AGENT_TIMEOUT`` seconds is a node fault: the node is reported dead (``its fairpod agent
died``/``stopped answering``), a frozen agent is killed, and its replicas' supervisors, which watch the agent's
process, stop what is left of them; after ``AGENT_HOLD`` seconds a new agent is started on the node, which is
live again once it answers.

Exits besides those of the command: ``"node lost: ..."`` when the replica's Ray node died or its agent was
lost (reported at once; the supervisor stops what is left of the replica if the machine still runs);
``"not started: ..."`` when the agent did not start it within ``startup_timeout``; ``"lost while the control
plane was down: ..."`` when the node's agent had disappeared at start-up; ``"killed: ..."`` when a stopped
replica has not ended ``STOP_MARGIN`` seconds after its grace period (its agent SIGKILLs its supervisor and
process group).

Only one fairpod control plane may use a Ray namespace at a time (``fairpod up --ha``: the leader, whose
executor's own actions are fenced by its lease, see :meth:`~fairpod.executors.ray.agents.Agents.set_fence`;
the standbys do not connect to Ray): at start-up, actors other than its agents and
placement groups of the namespace (left by older versions) are removed.
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
