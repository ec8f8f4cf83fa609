"""The formats users already have, read into fairpod's own: ``slurm`` (sbatch scripts with ``srun``) and ``kube``
(Kubeflow PyTorchJob manifests; the cluster spec as Kueue objects and back). They depend on ``fairpod.model`` only
(and on the standard library); the CLI carries their results to the server."""
