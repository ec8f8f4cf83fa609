# corpus: mirrors SchedMD/slurm doc/html/quickstart.shtml ("sinfo", "squeue" as a new user types them)
# expect: exit=0 out~PARTITION out~JOBID
sinfo
squeue
