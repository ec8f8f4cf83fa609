# corpus: mirrors SchedMD/slurm doc/man/man1/sbatch.1 ("sbatch < script": the script on standard input)
# job: stdin-job
# expect: nodes=2 state=Succeeded file=slurm-{id}.out~hello from 1
cat > job.sh <<'SCRIPT'
#!/bin/sh
#SBATCH -J stdin-job
#SBATCH -N 2
srun sh -c 'echo hello from $SLURM_PROCID'
SCRIPT
sbatch < job.sh
