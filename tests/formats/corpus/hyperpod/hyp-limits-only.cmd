# corpus: mirrors aws/sagemaker-hyperpod-cli README.md (the hyp create parameter table: limits without requests)
# job: limits-job
# expect: team=ml-engineers nodes=1 accelerators=4 state=Succeeded image=pytorch/pytorch:latest
hyp create hyp-pytorch-job \
    --job-name limits-job \
    --namespace hyperpod-ns-ml-engineers \
    --image pytorch/pytorch:latest \
    --pull-policy IfNotPresent \
    --command '[python, train.py]' \
    --instance-type ml.p4d.24xlarge \
    --accelerators-limit 4 \
    --vcpu-limit 40 \
    --memory-limit 400 \
    --service-account-name training-sa
