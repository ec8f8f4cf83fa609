# corpus: mirrors aws/sagemaker-hyperpod-cli README.md (the elastic flags of hyp create hyp-pytorch-job)
# job: elastic-job
# expect: team=ml-engineers state=Succeeded max_nodes=2 err~--elastic-replica-increment-step
hyp create hyp-pytorch-job \
    --job-name elastic-job \
    --image pytorch/pytorch:latest \
    --pull-policy IfNotPresent \
    --command '[python, train.py]' \
    --instance-type ml.p4d.24xlarge \
    --node-count 1 \
    --max-node-count 2 \
    --elastic-replica-increment-step 1 \
    --elastic-graceful-shutdown-timeout-in-seconds 60 \
    --elastic-scaling-timeout-in-seconds 300 \
    --elastic-scale-up-snooze-time-in-seconds 120
