# A stand-in training script for the corpus (not an input): prints what a rank of a distributed job sees.
import os
import socket

keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_NUM_NODES")
print("train rank", " ".join(f"{k}={os.environ.get(k)}" for k in keys), "host", socket.gethostname(), flush=True)
