# corpus: mirrors aws/sagemaker-hyperpod-cli README.md ("hyp create hyp-pytorch-job", Option 2: --image with
# --command and --args), in an image that has an ENTRYPOINT of its own: --command is the container's command
# (hyperpod-pytorch-job-template v1_1 model.py), which replaces the ENTRYPOINT
# job: entrypoint-replaced
# expect: team=ml-engineers nodes=1 state=Succeeded log~train rank RANK=0 log~args --epochs=10 --batch-size=32
hyp create hyp-pytorch-job \
    --version 1.1 \
    --job-name entrypoint-replaced \
    --namespace hyperpod-ns-ml-engineers \
    --image 123456789012.dkr.ecr.us-west-2.amazonaws.com/train-with-entrypoint:1.0 \
    --command '[python, /workspace/train.py]' \
    --args '[--epochs=10, --batch-size=32]' \
    --pull-policy "IfNotPresent" \
    --instance-type ml.p4d.24xlarge
