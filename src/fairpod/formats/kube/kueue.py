"""What a fairpod cluster spec is called in Kueue: object names, labels, annotations, resource quantities.

The names are those SageMaker HyperPod task governance gives its Kueue objects, so that manifests written for
HyperPod (``kueue.x-k8s.io/queue-name: hyperpod-ns-<team>-localqueue``, ``kueue.x-k8s.io/priority-class:
<class>-priority``) run unchanged: a team's namespace is ``hyperpod-ns-<team>``, its LocalQueue
``hyperpod-ns-<team>-localqueue``, its ClusterQueue ``hyperpod-ns-<team>-clusterqueue``.

Objects are written as ``kueue.x-k8s.io/v1beta2``, the version Kueue's CRDs store; ``v1beta1`` objects (what
HyperPod and older Kueue releases write) are read too.
"""

from __future__ import annotations

import re

from fairpod.formats.hyperpod import (  # noqa: F401  (the names Kueue's objects are written with, read by importer)
    CQ_RE,
    NS_RE,
    PRIORITY_SUFFIX,
    QUEUE_RE,
    cluster_queue,
    local_queue,
    namespace,
    priority_class,
    team_in,
)

GROUP = "kueue.x-k8s.io"
API = f"{GROUP}/v1beta2"
READ_APIS = (f"{GROUP}/v1alpha1", f"{GROUP}/v1beta1", f"{GROUP}/v1beta2")  # Cohort was v1alpha1
KINDS = ("Topology", "ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass")

INSTANCE_LABEL = "node.kubernetes.io/instance-type"
INSTANCE_LABELS = (INSTANCE_LABEL, "beta.kubernetes.io/instance-type")
NS_LABEL = "kubernetes.io/metadata.name"
GPU = "nvidia.com/gpu"
NEURON = "aws.amazon.com/neurondevice"
ACCEL_RESOURCES = (GPU, NEURON, "aws.amazon.com/neuron", "amd.com/gpu")
CPU, MEMORY = "cpu", "memory"

# fairpod's own annotations: what Kueue cannot hold (node counts, policy knobs, the form a quota was given in);
# on import, Kueue's fields win wherever the two disagree (see fairpod.formats.kube.importer)
ANN = "fairpod.dev/"
ANN_CLUSTER = ANN + "cluster"
ANN_POLICY = ANN + "policy"
ANN_TEAM = ANN + "team"
ANN_GROUP = ANN + "group"
ANN_INSTANCE_TYPE = ANN + "instance-type"
ANN_PRIORITY_CLASS = ANN + "priority-class"
ROLE_LABEL = ANN + "role"
TOPOLOGY_LABEL = ANN + "topology-"  # + level: a node's domain at that level (cluster.topology_levels)
HOSTNAME_LABEL = "kubernetes.io/hostname"
UNALLOCATED = "fairpod-unallocated"  # the ClusterQueue lending unallocated capacity (idle resource sharing)

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# HyperPod's names of a team's objects live in fairpod.formats.hyperpod (a leaf the CLI reads too); the Kueue
# objects are named with them here

def accel_resource(accelerator_kind: str | None) -> str:
    """The extended resource a node's accelerators are requested as: Neuron devices for Trainium and
    Inferentia, ``nvidia.com/gpu`` otherwise."""
    kind = (accelerator_kind or "").lower()
    return NEURON if ("trainium" in kind or "inferentia" in kind) else GPU


def cpu_qty(mcpu: int) -> int | str:
    return mcpu // 1000 if mcpu % 1000 == 0 else f"{mcpu}m"


def mem_qty(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"

