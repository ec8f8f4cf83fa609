# corpus: mirrors aws/sagemaker-hyperpod-cli README.md ("hyp create hyp-pytorch-job", Option 2, both volumes)
# expect: refused~persistent volume claims refused~my-pvc
hyp create hyp-pytorch-job \
    --version 1.0 \
    --job-name test-pytorch-job-pvc \
    --image pytorch/pytorch:latest \
    --command '[python, train.py]' \
    --args '[--epochs=10, --batch-size=32]' \
    --pull-policy "IfNotPresent" \
    --instance-type ml.p4d.24xlarge \
    --queue-name "training-queue" \
    --priority "high" \
    --max-retry 3 \
    --volume name=model-data,type=hostPath,mount_path=/data,path=$PWD/data \
    --volume name=training-output,type=pvc,mount_path=/data2,claim_name=my-pvc,read_only=false
