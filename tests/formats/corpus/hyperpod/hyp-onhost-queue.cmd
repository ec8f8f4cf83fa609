# corpus: mirrors aws/sagemaker-hyperpod-cli examples/end_to_end_walkthrough/03-task-governance/README.MD
# (a team's queue and priority class, HyperPod's naming)
# job: gov-job
# expect: team=ml-engineers priority=training nodes=2 max_retry=2 state=Succeeded log~train rank
hyp create hyp-pytorch-job \
    --job-name gov-job \
    --image 123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1 --on-host \
    --queue-name hyperpod-ns-ml-engineers-localqueue \
    --priority training-priority \
    --instance-type ml.p4d.24xlarge \
    --node-count 2 \
    --max-retry 2 \
    --command "[python3, $PWD/train.py]"
