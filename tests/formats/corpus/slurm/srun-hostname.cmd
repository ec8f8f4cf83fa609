# corpus: mirrors SchedMD/slurm doc/html/quickstart.shtml ("srun -N3 -l /bin/hostname")
# job: hostname
# expect: nodes=2 state=Succeeded exit=0 out~0: p4d- out~1: p4d-
srun -N2 -l /bin/hostname
