# corpus: mirrors aws/sagemaker-hyperpod-cli README.md ("hyp create hyp-pytorch-job", Option 2) without --command:
# --args alone are the container's args (hyperpod-pytorch-job-template v1_1 model.py), the arguments of the image's
# own ENTRYPOINT
# job: entrypoint-args
# expect: team=ml-engineers nodes=1 state=Succeeded log~the image ENTRYPOINT ran with --epochs=10 --batch-size=32
hyp create hyp-pytorch-job \
    --version 1.1 \
    --job-name entrypoint-args \
    --namespace hyperpod-ns-ml-engineers \
    --image 123456789012.dkr.ecr.us-west-2.amazonaws.com/train-with-entrypoint:1.0 \
    --args '[--epochs=10, --batch-size=32]' \
    --pull-policy "IfNotPresent" \
    --instance-type ml.p4d.24xlarge
