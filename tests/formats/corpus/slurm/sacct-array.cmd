# corpus: mirrors SchedMD/slurm doc/html/job_array.shtml (sacct shows each array task as JOBID_TASK)
# job: array acct-array
# expect: tasks=3 state=Succeeded exit=0 out~_2 out~COMPLETED
cat > arr.sh <<'SCRIPT'
#!/bin/bash
#SBATCH --job-name=acct-array
#SBATCH --array=0-2
#SBATCH --output=arr-%A_%a.out
echo "task $SLURM_ARRAY_TASK_ID"
SCRIPT
jid=$(sbatch --parsable arr.sh)
for i in $(seq 1 900); do
  sacct -j "$jid" -n -P --format=State | grep -q -E 'PENDING|RUNNING' || break
  sleep 0.2
done
sacct -j "$jid" --format=JobID,JobName%15,State,ExitCode -n
