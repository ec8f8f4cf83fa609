# corpus: mirrors aws/sagemaker-hyperpod-cli README.md (v2, "hyperpod start-job" with its flags, at 95096e8)
# job: start-job-demo
# expect: team=ml-engineers nodes=2 instance_type=ml.p4d.24xlarge auto_resume=True max_retry=2 state=Succeeded
hyperpod start-job --job-name start-job-demo --namespace hyperpod-ns-ml-engineers --instance-type ml.p4d.24xlarge \
    --node-count 2 --entry-script train.py --script-args '--epochs 1' --auto-resume true --max-retry 2
