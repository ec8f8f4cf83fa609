# corpus: mirrors SchedMD/slurm doc/man/man1/srun.1 (EXAMPLES: "srun -n4 -N2 -l printenv SLURM_PROCID"-style steps)
# job: printenv
# expect: nodes=2 state=Succeeded exit=0 out~3: 3 out~0: 0
srun -n4 -N2 -l printenv SLURM_PROCID
