"""Kubernetes manifests and Kueue objects read into fairpod, one module per kind (docs/kubernetes.md).

Jobs: Kubeflow ``PyTorchJob`` (``pytorchjob``, its policies ``pytorchjob_policies``, its replicas' start ``pod``),
``batch/v1`` Jobs and Pods and the kinds refused by name (``batch``), KubeRay ``RayJob`` (``rayjob``) and
``RayCluster`` (``raycluster``); what they share: the manifest's error, quantities and team (``manifest``), the pod
template's container (``container``), images and volumes (``image``), which team a manifest is for (``teams``).
The cluster spec as Kueue objects and back: Kueue's names (``kueue``), ``export``, and ``importer`` with one module
per Kueue kind it reads (``kueue_objects``, ``kueue_flavors``, ``kueue_queues``, ``kueue_cohorts``).
"""
