# corpus: mirrors SchedMD/slurm doc/man/man1/sacct.1 (-j, -X, -P, --format as users type them)
# job: acct-demo
# expect: state=Succeeded exit=0 out~|acct-demo|COMPLETED|0:0|
cat > acct.sh <<'SCRIPT'
#!/bin/bash
#SBATCH --job-name=acct-demo
echo accounted
SCRIPT
jid=$(sbatch --parsable --wait acct.sh)
sacct -j "$jid" -X -P --format=JobID,JobName,State,ExitCode,Elapsed
