# corpus: mirrors aws/sagemaker-hyperpod-cli README.md ("hyp list / describe / list-pods / get-logs hyp-pytorch-job")
# job: read-verbs
# expect: team=ml-engineers state=Succeeded exit=0 out~read-verbs-pod-0 out~Namespace:
hyp create hyp-pytorch-job --job-name read-verbs --namespace hyperpod-ns-ml-engineers \
    --image pytorch/pytorch:latest --pull-policy IfNotPresent --command '[python, train.py]'
for i in $(seq 1 900); do
  hyp list hyp-pytorch-job | grep read-verbs | grep -q -E 'Succeeded|Failed' && break; sleep 0.2
done
hyp describe hyp-pytorch-job --job-name read-verbs
hyp list-pods hyp-pytorch-job --job-name read-verbs
hyp get-logs hyp-pytorch-job --job-name read-verbs --pod-name read-verbs-pod-0
