# corpus: mirrors aws/sagemaker-hyperpod-cli README.md ("hyp create hyp-pytorch-job", Option 2, --version 1.0), the
# hostPath volume at a directory of this host; its pvc volume is in hyp-readme-pvc.cmd
# job: test-pytorch-job
# expect: team=ml-engineers priority=high nodes=1 accelerators=8 instance_type=ml.p4d.24xlarge max_retry=3
# expect: image=pytorch/pytorch:latest state=Succeeded log~--epochs=10 log~PET_NPROC_PER_NODE=8
# expect: err~--scheduler-type kueue err~--label-selector accelerator=nvidia
hyp create hyp-pytorch-job \
    --version 1.0 \
    --job-name test-pytorch-job \
    --image pytorch/pytorch:latest \
    --command '[python, train.py]' \
    --args '[--epochs=10, --batch-size=32]' \
    --environment '{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:32"}' \
    --pull-policy "IfNotPresent" \
    --instance-type ml.p4d.24xlarge \
    --tasks-per-node 8 \
    --label-selector '{"accelerator": "nvidia", "network": "efa"}' \
    --deep-health-check-passed-nodes-only true \
    --scheduler-type "kueue" \
    --queue-name "training-queue" \
    --priority "high" \
    --max-retry 3 \
    --accelerators 8 \
    --vcpu 96.0 \
    --memory 1152.0 \
    --accelerators-limit 8 \
    --vcpu-limit 96.0 \
    --memory-limit 1152.0 \
    --preferred-topology "topology.kubernetes.io/zone=us-west-2a" \
    --volume name=model-data,type=hostPath,mount_path=/data,path=$PWD/data
